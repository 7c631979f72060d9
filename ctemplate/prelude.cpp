#include "ctemplate/prelude.h"

#include <string>
#include <utility>

#include "util/error.h"

namespace kiln::embedded {
extern const std::pair<std::string_view, std::string_view> preludes[];
extern const int preludes_count;
}  // namespace kiln::embedded

namespace kiln {

std::string_view prelude(std::string_view name) {
  for (int i = 0; i < embedded::preludes_count; ++i) {
    if (embedded::preludes[i].first == name) return embedded::preludes[i].second;
  }
  throw UserError("unknown prelude '" + std::string(name) + "'");
}

std::vector<std::string_view> prelude_names() {
  std::vector<std::string_view> names;
  for (int i = 0; i < embedded::preludes_count; ++i) names.push_back(embedded::preludes[i].first);
  return names;
}

}  // namespace kiln
