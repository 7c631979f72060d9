#include "ctemplate/c_layout.h"

#include "util/strings.h"

namespace kiln {

namespace {

bool starts_with_word(std::string_view s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  if (s.size() == word.size()) return true;
  const char c = s[word.size()];
  return c == ' ' || c == '(' || c == '{';
}

// A loop or branch header whose statement follows on the next line (no brace, no `;`).
bool braceless_header(std::string_view s) {
  // Loop hints (KILN_NOVEC, KILN_SAME_INDEX) may precede the `for`.
  while (s.substr(0, 5) == "KILN_") {
    const size_t space = s.find(' ');
    if (space == std::string_view::npos) return false;
    s.remove_prefix(space + 1);
  }
  if (!(starts_with_word(s, "for") || starts_with_word(s, "if") || starts_with_word(s, "while") ||
        starts_with_word(s, "else"))) {
    return false;
  }
  const char last = s.back();
  return last != ';' && last != '{' && last != '}';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<LaidOutLine> lay_out_c(std::string_view text) {
  std::vector<LaidOutLine> out;
  std::vector<int> blocks;  // the statement level of each open brace's line
  int pending = 0;          // braceless headers waiting for their statement
  int parens = 0;           // unclosed '(' and '[' at the end of the last line
  bool in_comment = false, in_macro = false;
  for (const std::string& raw : split_lines(text)) {
    const std::string_view s = trim(raw);
    const int base = blocks.empty() ? 0 : blocks.back() + 1;
    if (in_macro || (!in_comment && !s.empty() && s.front() == '#')) {
      out.push_back({0, raw, true});
      in_macro = !s.empty() && s.back() == '\\';
      continue;
    }
    if (s.empty()) {
      out.push_back({0, ""});
      continue;
    }
    // A line that closes a block starts at the level of the line that opened it; so does
    // what it opens next (`} else {`).
    const bool closes = !in_comment && s.front() == '}';
    const int statement = closes ? (blocks.empty() ? 0 : blocks.back()) : base + pending;
    const int level = statement + (parens > 0 && !closes ? 2 : 0);
    if (in_comment) {
      // A comment's later lines: under its first, the stars aligned.
      out.push_back({level, (s.front() == '*' ? " " : "") + std::string(s)});
    } else {
      out.push_back({level, std::string(s)});
    }
    // The structure the line leaves open: braces and parentheses outside strings, character
    // constants and comments.
    bool code_seen = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (in_comment) {
        if (c == '*' && i + 1 < s.size() && s[i + 1] == '/') {
          in_comment = false;
          ++i;
        }
        continue;
      }
      if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') break;
      if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
        in_comment = true;
        ++i;
        continue;
      }
      if (c == '"' || c == '\'') {
        for (++i; i < s.size() && s[i] != c; ++i) {
          if (s[i] == '\\') ++i;
        }
        code_seen = true;
        continue;
      }
      if (c == '{') {
        blocks.push_back(statement);
      } else if (c == '}') {
        if (!blocks.empty()) blocks.pop_back();
      } else if (c == '(' || c == '[') {
        ++parens;
      } else if ((c == ')' || c == ']') && parens > 0) {
        --parens;
      }
      if (c != ' ') code_seen = true;
    }
    if (!code_seen || parens > 0) continue;
    if (braceless_header(s)) {
      ++pending;
    } else {
      pending = 0;
    }
  }
  return out;
}

std::string lay_out_c_text(std::string_view text) {
  std::string out;
  for (const auto& line : lay_out_c(text)) {
    if (!line.verbatim && !line.text.empty()) out.append(static_cast<size_t>(line.level) * 2, ' ');
    out += line.text;
    out += '\n';
  }
  return out;
}

}  // namespace kiln
