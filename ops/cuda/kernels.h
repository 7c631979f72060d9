#pragma once
// CUDA code shared by ops: the broadcasting elementwise kernel (plain and fused
// elementwise ops), reductions over any axes, softmax along an axis, and a tiled GEMM.
// Device tensors are always contiguous (kernels and transfers write them so); only
// elementwise operands broadcast, through kiln_cuda_nd strides.
#include <string>
#include <vector>

#include "ops/c/reduce_loop.h"
#include "ops/device_code.h"

namespace kiln {

struct CudaEpilogue;

// True when every input and output dtype has CUDA code (no float16 / bfloat16 yet).
bool cuda_dtypes_ok(const Node& node);

// The head of a grid-stride loop of `index` over [0, count): its body and one closing brace
// follow.
std::string cuda_grid_loop(const std::string& index, const std::string& count);

// A CPU rule's C text as device functions, once per module (`guard` names it): `fn_macro`
// (the rule's function qualifier macro) becomes `__device__ static`.
std::string cuda_device_rules(const std::string& guard, const std::string& fn_macro,
                              const std::string& text);

// One thread per output element (grid-stride): ${k} in `expr`/`lets` is input k's value.
DeviceCode cuda_elementwise(const Node& node, const CodeNames& names, const Sub& sub,
                            const std::vector<std::string>& lets, const std::string& expr,
                            bool math);

// One block per output element; the reduced values are input 0's.
DeviceCode cuda_reduce(const Node& node, const CodeNames& names, const Sub& sub, ReduceKind kind,
                       const std::vector<bool>& mask);

// One block per slice along `axis` (softmax or log-softmax).
DeviceCode cuda_softmax(const Node& node, const CodeNames& names, const Sub& sub, int axis,
                        bool log);

// Y[M,N] = alpha * op(A) op(B) + beta * C (C optional, broadcast to (M, N)) for 2-D A and B.
DeviceCode cuda_gemm(const Node& node, const CodeNames& names, const Sub& sub, bool trans_a,
                     bool trans_b, double alpha, double beta, const CudaEpilogue* epi = nullptr);

}  // namespace kiln
