#pragma once
// Emits the loop shared by reductions: one pass over a (broadcast) iteration space that
// accumulates into the output. The value reduced is an elementwise expression over any
// number of broadcasting operands, so elementwise producers fuse into the reduction.
#include <string>
#include <vector>

#include "ops/c/elementwise_loop.h"

namespace kiln {

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd };

struct ReduceLoop {
  ReduceKind kind = ReduceKind::kSum;
  std::vector<bool> mask;  // per dimension of the iteration space: reduced or kept
  bool keepdims = true;
  DType dtype = DType::kFloat32;  // of the reduced values and the output
};

// `expr` and `lets` are templates over ${0}.. (one per operand), as for the elementwise
// loop; the iteration space is the operands' broadcast shape, of rank spec.mask.size().
// Part ctx->part of ctx->n_parts owns a block of the outermost kept dimension.
// The reduction's starting value as a C expression ("0", "-INFINITY", "INT32_MIN"...).
std::string identity_of(ReduceKind kind, DType dt);
// The accumulator `a` combined with value `x`; max and min propagate NaN, as NumPy does.
std::string combine(ReduceKind kind, DType dt, const std::string& a, const std::string& x);

std::string emit_reduce_loop(const ReduceLoop& spec, const std::vector<LoopOperand>& inputs,
                             const std::string& expr, const std::vector<std::string>& lets,
                             const std::string& out, const std::string& ctx);

}  // namespace kiln
