#pragma once
// An op is a value: a name plus canonical props. Two ops are equal when both are equal.
// This base holds the hooks the graph layer needs (types, shapes, reference semantics);
// code-emitting hooks live in ops/cop.h.
#include <optional>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

class Graph;
struct Node;
struct Variable;

// What an op's grad hook receives: the node, the gradient of the cost with respect to each
// of its outputs (null: that output's gradient is zero), and which inputs need a gradient.
struct GradArgs {
  Graph& graph;
  const Node& node;
  std::vector<Variable*> output_grads;
  std::vector<bool> wanted;
};

class Op {
 public:
  Op(std::string name, Attrs props) : name_(std::move(name)), props_(std::move(props)) {}
  virtual ~Op() = default;

  const std::string& name() const { return name_; }
  const Attrs& props() const { return props_; }
  std::string describe() const { return name_ + attrs_to_string(props_); }
  bool operator==(const Op& other) const { return name_ == other.name_ && props_ == other.props_; }

  // Output types; throws UserError naming the offending types when inputs do not fit.
  virtual std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const = 0;
  // Output shapes at run time; throws UserError on a mismatch only visible at run time.
  virtual std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const = 0;
  // The same with the inputs' dtypes, which run-time callers always know: ops whose shape
  // rule sees whole types (custom-op libraries' C hooks) need them; others ignore them.
  virtual std::vector<Shape> infer_run_shape(const std::vector<Shape>& inputs,
                                             const std::vector<DType>& dtypes) const {
    return infer_shape(inputs);
  }
  // Reference implementation: the oracle for tests. Outputs arrive allocated (contiguous)
  // with the shapes infer_shape gave; inputs may be non-contiguous.
  virtual void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const = 0;
  // Floating-point operations of one call with these shapes (a multiply-add counts two),
  // or 0 when the op does not count them: the profiler's GFLOP/s column.
  virtual double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
    return 0;
  }
  // Vector-Jacobian product (autodiff, rewrite/autodiff/grad.h): new nodes in args.graph computing,
  // per input, the gradient of the cost with respect to it (the input's type), or null for
  // an input whose gradient is zero or not wanted. Throws UserError (not_differentiable(),
  // graph/gradient.h) for a wanted input the op cannot differentiate. Default: no gradient.
  virtual std::vector<Variable*> grad(const GradArgs& args) const;
  // Version of the code this op emits; nullopt means "never cache across processes".
  virtual std::optional<int> cache_version() const { return std::nullopt; }

 private:
  std::string name_;
  Attrs props_;
};

}  // namespace kiln
