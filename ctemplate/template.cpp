#include "ctemplate/template.h"

#include "util/error.h"

namespace kiln {

std::string render_template(std::string_view text, const TemplateValues& values,
                            std::string_view what) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      size_t end = text.find('}', i + 2);
      if (end == std::string_view::npos) {
        throw UserError(std::string(what) + ": line " + std::to_string(line) +
                        ": unterminated placeholder '${'");
      }
      std::string_view name = text.substr(i + 2, end - i - 2);
      auto it = values.find(name);
      if (it == values.end()) {
        throw UserError(std::string(what) + ": line " + std::to_string(line) +
                        ": unknown placeholder '${" + std::string(name) + "}'");
      }
      out += it->second;
      i = end + 1;
      continue;
    }
    if (c == '\n') ++line;
    out.push_back(c);
    ++i;
  }
  return out;
}

}  // namespace kiln
