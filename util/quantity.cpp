#include "util/quantity.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "util/error.h"
#include "util/escape.h"

namespace kiln {
namespace {

// "12", "1.5", ".5": digits with at most one '.', and at least one digit; the rest of the
// text is the unit. Nothing else (sign, exponent, hex, inf, nan, spaces) is a number here.
std::optional<std::pair<double, std::string>> number_and_unit(const std::string& text) {
  size_t i = 0, digits = 0;
  bool dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (digits == 0 || digits > 30) return std::nullopt;
  double value = 0;
  if (std::sscanf(text.substr(0, i).c_str(), "%lf", &value) != 1 || !std::isfinite(value))
    return std::nullopt;
  return std::make_pair(value, text.substr(i));
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 1) {
    std::snprintf(buf, sizeof buf, "%g ms", s * 1000);
  } else {
    std::snprintf(buf, sizeof buf, "%g s", s);
  }
  return buf;
}

}  // namespace

uint64_t parse_size(const std::string& text, const std::string& what, uint64_t min_bytes) {
  constexpr double kMax = 9223372036854775808.0;  // 2^63
  auto bad = [&](const std::string& why) {
    return UserError(what + ": " + in_quotes(text) + " is not a size" + why +
                     " (examples: 2G, 500MiB, 64k, 1000000; at least " + std::to_string(min_bytes) +
                     " bytes, at most 2^63)");
  };
  auto parsed = number_and_unit(text);
  if (!parsed) throw bad("");
  std::string unit = lower(parsed->second);  // "GiB", "gb", "G" all mean GiB
  if (unit.size() > 1 && unit.back() == 'b') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1}, {"b", 1}, {"k", 0x1p10}, {"m", 0x1p20}, {"g", 0x1p30}, {"t", 0x1p40}, {"p", 0x1p50}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = std::floor(parsed->first * scale);
    if (bytes > kMax) throw bad(": it is more than 2^63 bytes");
    if (bytes < static_cast<double>(min_bytes)) throw bad(": it is too small");
    return bytes >= kMax ? uint64_t{1} << 63 : static_cast<uint64_t>(bytes);
  }
  throw bad(": unknown unit '" + terminal_text(parsed->second) + "'");
}

double parse_duration(const std::string& text, const std::string& what, double min_s, double max_s,
                      const char* default_unit) {
  auto bad = [&](const std::string& why) {
    return UserError(what + ": " + in_quotes(text) + " is not a duration" + why +
                     " (a number with an optional unit ms, s, m, h, d or w; without one, " +
                     default_unit + "; from " + format_seconds(min_s) + " to " +
                     format_seconds(max_s) + ")");
  };
  auto parsed = number_and_unit(text);
  if (!parsed) throw bad("");
  const std::string unit = parsed->second.empty() ? default_unit : parsed->second;
  static const std::pair<const char*, double> kUnits[] = {
      {"ms", 0.001}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 7 * 86400.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double s = parsed->first * scale;
    if (s < min_s) throw bad(": it is shorter than " + format_seconds(min_s));
    if (s > max_s) throw bad(": it is longer than " + format_seconds(max_s));
    return s;
  }
  throw bad(": unknown unit '" + terminal_text(unit) + "'");
}

const std::string& check_name(const std::string& text, const std::string& what) {
  bool ok = !text.empty() && text.size() <= 64 && text[0] != '.' && text[0] != '-';
  for (char c : text) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (!ok) {
    throw UserError(what + ": " + in_quotes(text) +
                    " is not a name (1 to 64 of the characters A-Z a-z 0-9 . _ -, not starting "
                    "with . or -)");
  }
  return text;
}

}  // namespace kiln
