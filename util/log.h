#pragma once
// KILN_DEBUG levels: >=1 phase timings, >=2 cache decisions, >=3 generated source.
#include <string_view>

namespace kiln {

int debug_level();
void set_debug_level(int level);  // overrides KILN_DEBUG for this process
void log_line(std::string_view message);   // to stderr, one line, prefixed "kiln: "
void warn(std::string_view message);       // always printed

}  // namespace kiln
