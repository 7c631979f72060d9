#pragma once
// An elementwise program applied inside a CUDA kernel to each result before it is stored
// (bias + activation into the GEMM or convolution that produces them): $0 is the result,
// $k (k >= 1) an extra operand broadcast against the output. The base op's kernel
// appends `signature` to its parameters, defines `function` before itself, stores
// apply(value, flat_index), and its host fragment runs `host` and passes `launch_args`.
#include <string>
#include <vector>

#include "ops/device_code.h"

namespace kiln {

class FusedElementwise;

struct CudaEpilogue {
  std::vector<std::string> params;  // C types of the appended kernel parameters
  std::string signature;            // ", kiln_cuda_nd epi, const float *__restrict__ e1"
  std::string function;             // the __device__ helper
  std::string host;                 // fills kiln_epi and the operand pointers
  std::string launch_args;          // ", &kiln_epi, &kiln_e1"
  std::vector<std::string> preludes;
  std::string name;      // the helper's name
  std::string operands;  // the helper's trailing call arguments
  std::string apply(const std::string& value, const std::string& index) const;
};

// The epilogue of a node whose inputs from `first_extra` on are the program's $1, $2, ...
CudaEpilogue make_cuda_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                int first_extra, const FusedElementwise& program);

// The result stored as is: apply() is the value itself.
std::string cuda_store(const CudaEpilogue* epi, const std::string& value, const std::string& index);

}  // namespace kiln
