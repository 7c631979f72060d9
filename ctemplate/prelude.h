#pragma once
// Preludes: helper headers (ctemplate/preludes/*.h) that generated modules may need. They
// are real headers, compiled and tested on their own, embedded into the library at build
// time and emitted only when a node asks for one.
#include <string_view>
#include <vector>

namespace kiln {

// Contents of a prelude by file name ("kiln_index.h"); throws UserError for an unknown one.
std::string_view prelude(std::string_view name);
std::vector<std::string_view> prelude_names();

}  // namespace kiln
