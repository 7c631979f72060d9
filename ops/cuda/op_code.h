#pragma once
// The CUDA backend's code for kiln's ops: one entry per op class (ops/device_code.h), made
// from the kernel generators beside this file. An entry may also take an epilogue (the
// elementwise program fused after a GEMM, MatMul or Conv) into its kernel's stores.
#include "ops/cuda/epilogue.h"
#include "ops/device_code.h"

namespace kiln {

// An op's CUDA code, with the epilogue form the fused WithEpilogue node asks its base for.
class CudaOpCode : public OpDeviceCode {
 public:
  virtual bool has_epilogue(const COp& op, const Node& node) const { return false; }
  virtual DeviceCode code_with(const COp& op, const Node& node, const CodeNames& names,
                               const Sub& sub, const CudaEpilogue& epi) const {
    return {};
  }
};

// The table: every op kiln has CUDA code for (custom-op library ops included, by their
// library's cuda hooks).
const DeviceCodeTable& cuda_op_code();

}  // namespace kiln
