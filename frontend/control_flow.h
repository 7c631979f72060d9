#pragma once
// ONNX control flow run on the host between compiled stages: a Loop, a Scan, or an If whose
// condition is computed at run time. Each body is a compiled model of its own (a ModelFunction,
// so its module is cached like any other); these drivers feed it, carry its state from one
// iteration to the next (the tensors themselves, never copied), and stack its per-iteration
// outputs. The loader (frontend/onnx/onnx_control.cpp) gives the attributes.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

// A body: its inputs in the order its model declares them, its outputs in order.
using BodyFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// A Loop without a trip count stops with an error after this many iterations whose condition
// stayed true, rather than hang: 2^24, or KILN_MAX_LOOP_ITERATIONS when set (a positive
// integer; anything else is an error naming the variable).
int64_t max_loop_iterations();

// `values`: the node's inputs (M, cond, carried; null where absent), then the outer values the
// body reads; `types`, the node's output types (the shape zero iterations give). Returns the
// final carried values, then each scan output stacked on a new axis 0. `where` names the node.
std::vector<Tensor> run_loop(const BodyFunction& body, const std::vector<const Tensor*>& values,
                             const std::vector<TensorType>& types, const Attrs& attrs,
                             const std::string& where);
// `values`: opset 8's sequence_lens (when "batched"), the states, the scan inputs, then the
// outer values. Returns the final states, then the scan outputs.
std::vector<Tensor> run_scan(const BodyFunction& body, const std::vector<const Tensor*>& values,
                             const std::vector<TensorType>& types, const Attrs& attrs,
                             const std::string& where);
// `values`: the condition, then the outer values both branches take.
std::vector<Tensor> run_if(const BodyFunction& then_branch, const BodyFunction& else_branch,
                           const std::vector<const Tensor*>& values, const std::string& where);

}  // namespace kiln
