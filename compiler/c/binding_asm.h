#pragma once
// The binding of a module whose every node runs a kernel, as assembler text: the argument
// arrays, one two-instruction thunk per node, the thunk table and kiln_module(). It is only
// data and jumps, so `as` builds it in a millisecond where a C compile of the same binding
// costs a compiler start (~35 ms) — the floor of every module whose kernels are cached.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct BoundNode {
  int id = 0;
  std::string label;  // kiln_thunk_info.name
  int n_in = 0, n_out = 0, flags = 0;
  int64_t split_unit = 0;
  std::string kernel;         // the kernel's symbol
  std::vector<int64_t> args;  // its kp
  std::vector<std::string> arg_names;  // their names in the kernel, for the reader
};

// x86-64 GNU assembler for the module; "" where kiln has no emitter (another architecture).
std::string binding_assembly(const std::string& key, const std::vector<BoundNode>& nodes);

}  // namespace kiln
