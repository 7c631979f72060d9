#pragma once
// A tree (or DAG) of scalar-table ops applied as one broadcasting loop: the product of the
// elementwise fusion pass. Its one prop, "program", lists the steps in order,
//   "mul($0, $1); tanh(%0); leaky_relu{alpha=0.2}(%1)"
// where $k is input k and %j the result of step j; the last step is the output. Every input
// broadcasts against the output, so no intermediate buffer exists.
#include <memory>

#include "ops/elementwise.h"

namespace kiln {

struct FusedStep {
  std::shared_ptr<const Elementwise> op;
  std::vector<int> args;  // k >= 0: input k; k < 0: step (-k - 1)
};

struct LoopOperand;

class FusedElementwise : public COp {
 public:
  explicit FusedElementwise(Attrs props);  // parses props["program"]
  static std::shared_ptr<const FusedElementwise> from_steps(std::vector<FusedStep> steps);
  static std::string program_text(const std::vector<FusedStep>& steps);

  const std::vector<FusedStep>& steps() const { return steps_; }
  int arity() const { return arity_; }
  // True when every step is cheap arithmetic (no transcendental call), so recomputing a
  // broadcast operand per output element costs little.
  bool is_cheap() const;
  // True when the per-element work is a long chain (two or more transcendental steps, or
  // a dozen steps): its loop interleaves several vectors to hide latency.
  bool is_long_chain() const;

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 10; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool c_splittable(const Node&) const override { return true; }
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override;

  // The per-element body over ${0}..${n-1}: statements naming each step (lets) and the
  // final expression, for input dtypes `in`. Shared with epilogues.
  void scalar_body(const std::vector<DType>& in, std::vector<std::string>& lets, std::string& expr,
                   const std::string& temp_prefix) const;

  // When the program is a costly function of one byte operand whose shape is `space` (every
  // other operand one element): opens a C block declaring `kiln_lut`, the program's 256 values
  // of `value` dtype, and sets `byte` to that operand; the caller looks each element up and
  // closes the block. nullopt otherwise. `ops` as loop_operand made them.
  std::optional<std::string> table_prefix(const Node& node, const CodeNames& names,
                                          const std::vector<LoopOperand>& ops,
                                          const TensorType& space, DType value, int& byte) const;

 private:
  std::vector<DType> step_dtypes(const std::vector<DType>& in) const;
  // A chain of one byte tensor (every other operand one element) as a 256-entry table of
  // its values, looked up per element; nothing when the node is not such a chain.
  std::optional<std::string> table_code(const Node& node, const CodeNames& names, const Sub& sub,
                                        const std::vector<LoopOperand>& ops) const;
  std::vector<FusedStep> steps_;
  int arity_ = 0;
};

bool is_cheap_scalar_op(const std::string& name);

}  // namespace kiln
