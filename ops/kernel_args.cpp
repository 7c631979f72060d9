#include "ops/kernel_args.h"

#include <cstdint>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

namespace {
bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Whether `text` uses identifier `id` as a whole word.
bool uses(const std::string& text, const std::string& id) {
  for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + 1)) {
    const bool starts = at == 0 || !is_ident_char(text[at - 1]);
    const size_t end = at + id.size();
    if (starts && (end == text.size() || !is_ident_char(text[end]))) return true;
  }
  return false;
}
}  // namespace

std::string KernelArgs::add(int64_t v, std::string_view name) {
  if (name.empty()) throw InternalError("a kernel argument without a name");
  for (char c : name) {
    if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '_') {
      throw InternalError("kernel argument name '" + std::string(name) +
                          "' is not a lower-case C identifier");
    }
  }
  // The prefix keeps the names apart from the kernels' own locals: a `const int64_t cg = cg;`
  // would compile and read an uninitialized value.
  const std::string base = "kp_" + std::string(name);
  for (int k = 1;; ++k) {
    const std::string c_name = k == 1 ? base : base + "_" + std::to_string(k);
    size_t i = 0;
    while (i < names.size() && names[i] != c_name) ++i;
    if (i == names.size()) {
      values.push_back(v);
      names.push_back(c_name);
      return c_name;
    }
    if (values[i] == v) return c_name;
  }
}

std::vector<std::string> KernelArgs::declarations(const std::string& body) const {
  std::vector<std::string> lines;
  for (size_t i = 0; i < names.size(); ++i) {
    if (uses(body, names[i]))
      lines.push_back("#define " + names[i] + " kp[" + std::to_string(i) + "]");
  }
  return lines;
}

std::vector<std::string> KernelArgs::undefinitions(const std::string& body) const {
  std::vector<std::string> lines;
  for (const auto& name : names) {
    if (uses(body, name)) lines.push_back("#undef " + name);
  }
  return lines;
}

std::vector<std::string> KernelArgs::commented_values(size_t width) const {
  std::vector<std::string> items;
  for (size_t i = 0; i < values.size(); ++i) {
    // INT64_MIN has no literal of its own in C (its magnitude does not fit).
    const std::string v =
        values[i] == INT64_MIN ? "(-9223372036854775807LL - 1)" : std::to_string(values[i]) + "LL";
    items.push_back("/* " + names[i] + " */ " + v);
  }
  return join_wrapped(items, width);
}

}  // namespace kiln
