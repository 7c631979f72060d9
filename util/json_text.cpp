#include "util/json_text.h"

#include <set>
#include <vector>

#include "util/error.h"
#include "util/escape.h"

namespace kiln {
namespace {

using nlohmann::json;

// Depth and duplicate keys, found by one pass over the bytes before the parser runs: the
// byte offset names the place, and the parser never sees a document it would recurse into.
void check_structure(std::string_view text, const std::string& where, int max_depth) {
  std::vector<std::set<std::string>> keys;  // one set per open object; arrays push nothing
  std::vector<bool> is_object;
  bool in_string = false;
  size_t string_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        // A string directly followed (after blanks) by ':' is a key of the innermost object.
        size_t k = i + 1;
        while (k < text.size() &&
               (text[k] == ' ' || text[k] == '\n' || text[k] == '\t' || text[k] == '\r'))
          ++k;
        if (k < text.size() && text[k] == ':' && !is_object.empty() && is_object.back()) {
          // Keys compare decoded, so "a" and "\u0061" are the same key.
          std::string raw(text.substr(string_start, i - string_start));
          std::string key = raw;
          if (raw.find('\\') != std::string::npos) {
            try {
              key = json::parse("\"" + raw + "\"").get<std::string>();
            } catch (const json::exception&) {
              // The parser reports the bad string with its offset.
            }
          }
          if (!keys.back().insert(key).second) {
            throw JsonError(where, string_start - 1,
                            "the key " + in_quotes(key) + " appears twice in one object");
          }
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_start = i + 1;
    } else if (c == '{' || c == '[') {
      if (static_cast<int>(is_object.size()) >= max_depth) {
        throw JsonError(where, i, "nested deeper than " + std::to_string(max_depth) + " levels");
      }
      is_object.push_back(c == '{');
      if (c == '{') keys.emplace_back();
    } else if (c == '}' || c == ']') {
      if (is_object.empty()) return;  // unbalanced: the parser reports it with its offset
      if (is_object.back()) keys.pop_back();
      is_object.pop_back();
    }
  }
}

}  // namespace

json parse_untrusted_json(std::string_view text, const std::string& where, int max_depth) {
  check_structure(text, where, max_depth);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // nlohmann's message quotes the bytes near the error: keep only its reason.
    if (auto p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
    if (auto p = what.find("; last read"); p != std::string::npos) what.resize(p);
    throw JsonError(where, e.byte > 0 ? e.byte - 1 : 0, terminal_text(what.substr(0, 200)));
  } catch (const json::exception& e) {
    // A number too large for any type is an out_of_range, not a parse_error.
    throw JsonError(
        where, 0,
        "a number out of range (" + terminal_text(std::string(e.what()).substr(0, 200)) + ")");
  }
}

std::string json_text(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string json_text(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string json_excerpt(const json& j) {
  if (j.is_array()) return "an array of " + std::to_string(j.size()) + " values";
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " members";
  std::string s = json_text(j);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return terminal_text(s);
}

}  // namespace kiln
