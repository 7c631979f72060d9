#pragma once
// A reduction whose input is an elementwise program over broadcasting operands, computed
// inside the reduction loop: the product of reduction fusion. Props: "reduce" (sum, mean,
// max, min or prod), "axes" and "keepdims" as for the reduce ops, and "program" (a
// fused_elementwise program over the inputs). The reduced values are never stored.
#include <memory>

#include "ops/fused_elementwise.h"
#include "ops/reduce.h"

namespace kiln {

class FusedReduce : public COp {
 public:
  explicit FusedReduce(Attrs props);
  static std::shared_ptr<const FusedReduce> make(const Reduce& reduce,
                                                 const FusedElementwise& program);

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 9; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool c_splittable(const Node& node) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override { return program_->c_preludes(); }

 private:
  int space_rank(const Node& node) const;  // rank of the values reduced
  std::shared_ptr<const Reduce> reduce_;
  std::shared_ptr<const FusedElementwise> program_;
};

}  // namespace kiln
