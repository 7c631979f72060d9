#include "compiler/diagnostics.h"

#include <cstdlib>
#include <string_view>

#include "util/escape.h"
#include "util/strings.h"

namespace kiln {
namespace {

constexpr size_t kMaxText = 300;

std::string cut(std::string_view s) {
  return s.size() <= kMaxText ? std::string(s) : std::string(s.substr(0, kMaxText)) + " ...";
}

// "PATH:LINE:COL" (or "PATH:LINE") -> line, column; false when `head` is not one.
bool location(std::string_view head, std::string_view& path, int& line, int& column) {
  auto number = [](std::string_view s, int& out) {
    if (s.empty() || s.size() > 9) return false;
    out = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    return true;
  };
  const size_t c2 = head.rfind(':');
  if (c2 == std::string_view::npos) return false;
  const size_t c1 = head.rfind(':', c2 == 0 ? 0 : c2 - 1);
  if (c1 != std::string_view::npos && c1 < c2 && number(head.substr(c1 + 1, c2 - c1 - 1), line) &&
      number(head.substr(c2 + 1), column)) {
    path = head.substr(0, c1);
    return true;
  }
  column = 0;
  if (!number(head.substr(c2 + 1), line)) return false;
  path = head.substr(0, c2);
  return true;
}

}  // namespace

std::vector<Diagnostic> parse_diagnostics(const std::string& log, const CodeWriter& map) {
  std::vector<Diagnostic> result;
  const std::vector<std::string> source = split_lines(map.str());
  static const std::pair<const char*, const char*> kKinds[] = {
      {": fatal error: ", "fatal"}, {": error: ", "error"}, {": warning: ", "warning"}};
  for (const std::string& text : split_lines(log)) {
    for (const auto& [marker, severity] : kKinds) {
      const size_t at = text.find(marker);
      if (at == std::string::npos) continue;
      std::string_view path;
      Diagnostic d;
      if (!location(std::string_view(text).substr(0, at), path, d.line, d.column)) break;
      d.severity = severity;
      d.message = cut(std::string_view(text).substr(at + std::string_view(marker).size()));
      // The unit is the one .c file compiled; preludes and the ABI header are .h files.
      if (path.size() > 2 && path.substr(path.size() - 2) == ".c") {
        if (const SourceOrigin* o = map.origin(d.line)) d.origin = *o;
        if (d.line >= 1 && static_cast<size_t>(d.line) <= source.size())
          d.source_line = cut(source[static_cast<size_t>(d.line) - 1]);
      }
      result.push_back(std::move(d));
      break;
    }
  }
  return result;
}

}  // namespace kiln
