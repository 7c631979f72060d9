#pragma once
// Scratch memory in generated C: every request goes through KILN_WORKSPACE (the module
// prologue defines it), which fails the call naming what it was for and how many bytes.
#include <string>

namespace kiln {

// Declares `type *var` holding `count` elements of the call's workspace; the call fails with
// "out of memory for <what> (N bytes)" when there is no room (a count of 0 never fails).
std::string c_workspace(const std::string& type, const std::string& var, const std::string& count,
                        const std::string& what);

// The prologue's definition of KILN_WORKSPACE(p, count, what).
std::string c_workspace_macro();

}  // namespace kiln
