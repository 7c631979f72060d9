#pragma once
// Emits the broadcasting loop shared by every elementwise op (and, later, fused chains):
// operands are collapsed to the fewest dimensions, and the inner loop runs unit-stride
// (vectorizable) whenever every operand allows it.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/dtype.h"

namespace kiln {

struct SplitTiles;  // ops/cop.h

struct LoopOperand {
  std::string tensor;  // C expression of type kiln_tensor * (unused for literals)
  DType dtype = DType::kFloat32;
  int rank = 0;
  std::optional<std::string> literal;  // rank-0 constant inlined into the expression
  // Reads the output's own element (an in-place epilogue); takes no operand slot.
  bool reads_output = false;
  // Holds one element (rank 0 or all dimensions 1): loaded once before the loop, so the
  // inner loop stays unit-stride and vectorizes.
  bool single = false;
  // Constant along the output's last dimension (its own last dimension is 1 there, as a
  // per-channel bias against (N, C, H, W) is): loaded once per row, so the row's loop still
  // runs unit-stride over the others.
  bool row_invariant = false;
};

// The operand for a node input named `tensor` in C: scalar constants inlined, single-element
// tensors hoisted, row-invariant ones (against the output type `out`) marked.
LoopOperand loop_operand(const Variable* v, const std::string& tensor, const TensorType& out);

// `expr` is a template over ${0}, ${1}, ... (one per operand) producing the output value;
// `lets` are statements (same placeholders) run before it for each element, so a fused
// expression can name a shared subexpression once. The loop computes part ctx->part of
// ctx->n_parts of the output (`ctx`: a kiln_ctx *), so its op may declare itself splittable.
// `interleave`: the body is a long dependency chain (several transcendentals), so the loop
// works on four vectors at once; one at a time it waits on latency (2.4x slower measured).
// `split_unit` (a C expression; empty: none): split the output in whole units of that many
// elements, as the op this loop is the epilogue of splits it (COp::c_split_unit).
// `tiles` (non-null): split as that op's tiles instead (COp::c_split_tiles).
std::string emit_elementwise_loop(const std::vector<LoopOperand>& inputs, const std::string& out,
                                  DType out_dtype, int out_rank, const std::string& expr,
                                  const std::string& ctx, const std::vector<std::string>& lets = {},
                                  bool interleave = false, const std::string& split_unit = "",
                                  const SplitTiles* tiles = nullptr);

// The loop `emit` writes for `inputs`, versioned on the run-time value of operand `k` (one
// element, not inlined): for each of `values` a copy in which that operand is the literal, the
// general loop for any other value. A pow whose exponent is a weight (a quantizer turns
// constants into initializers, which stay parameters) so runs its common exponents as
// vectorized products (kiln_math.h's kiln_powf) rather than a libm call per element.
std::string emit_versioned_on(
    const std::vector<LoopOperand>& inputs, size_t k, const std::vector<double>& values,
    const std::function<std::string(const std::vector<LoopOperand>&)>& emit);

// The step to the next outer index of a collapsed loop nest over `nops` operands: advances
// offsets o0..o{nops-1} by st[k][d] and carries, as the elementwise and reduction loops do.
std::string emit_odometer_step(int nops);

// A C literal of `dtype` holding `value`, e.g. "((float)0.5)".
std::string c_literal(DType dtype, double value);
// A literal for element 0 of a constant: integers keep all 64 bits (no trip through double).
std::string c_literal_of(DType dtype, double as_double, int64_t as_int);

}  // namespace kiln
