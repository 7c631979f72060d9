#include "compiler/backend.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

const Backend* find_backend(std::string_view name) {
  for (const Backend* b : all_backends()) {
    if (b->name() == name) return b;
  }
  return nullptr;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) names.push_back(b->name());
  return names;
}

const Backend& backend_named(std::string_view name) {
  if (const Backend* b = find_backend(name)) return *b;
  throw UserError("device '" + std::string(name) + "' is not one kiln has (" +
                  join(backend_names(), ", ") + ")");
}

const Backend* backend_of_placed(std::string_view op_name) {
  const size_t colon = op_name.find(':');
  if (colon == std::string_view::npos) return nullptr;
  const Backend* b = find_backend(op_name.substr(0, colon));
  return b && !b->is_host() ? b : nullptr;
}

}  // namespace kiln
