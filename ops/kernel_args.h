#pragma once
// The run-time values of a kernel shared by nodes that differ only in them (sizes, offsets,
// window geometry). The module passes each node's values in the kernel's argument array `kp`;
// the kernel names each one at its head (`#define kp_out_w kp[3]`) so its code reads
// as sizes, not slots.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct KernelArgs {
  std::vector<int64_t> values;     // kp[i]
  std::vector<std::string> names;  // the C name of kp[i] in the kernel ("kp_out_w")

  // The C name of value `v` called `name` (a lower-case C identifier): one slot per name and
  // value, so a size used ten times is passed once; the same name with another value gets a
  // slot of its own ("kp_stride_2").
  std::string add(int64_t v, std::string_view name);
  // The kernel's head: each name `body` uses, defined as its slot ("#define kp_out_w kp[8]").
  // Macros, not const locals: the same code for the compiler as kp[8] (locals cost clang a
  // third more time on a convolution kernel, for no speed).
  std::vector<std::string> declarations(const std::string& body) const;
  // The kernel's tail: the same names undefined, so kernels that share a unit stay apart.
  std::vector<std::string> undefinitions(const std::string& body) const;
  // The initializer of a node's argument array, each value after its name
  // ("/* kp_m */ 64LL"), in lines of at most about `width` columns.
  std::vector<std::string> commented_values(size_t width = 96) const;
};

}  // namespace kiln
