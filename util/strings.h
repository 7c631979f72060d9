#pragma once
// String helpers shared by code generation, messages and parsers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::vector<std::string> split_lines(std::string_view text);
// `parts` joined by ", " into lines of at most `width` characters where the parts allow (a
// longer part gets a line of its own); the separator ends every line but the last.
std::vector<std::string> join_wrapped(const std::vector<std::string>& parts, size_t width);
// "(?, 784)" style rendering; -1 is a dynamic dimension.
std::string dims_to_string(const std::vector<int64_t>& dims);
// Shortest text that reads back as the same double (for inlined constants and keys).
std::string format_double(double value);

}  // namespace kiln
