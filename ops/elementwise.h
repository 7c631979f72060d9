#pragma once
// The generic elementwise op: one scalar-table entry applied with NumPy broadcasting.
#include "ops/cop.h"
#include "ops/scalar_table.h"

namespace kiln {

class Elementwise : public COp {
 public:
  // Props: the entry's params (e.g. alpha) and, for cast, "to" (a dtype name).
  Elementwise(const ScalarOpDef& def, Attrs props);
  const ScalarOpDef& def() const { return def_; }
  const std::vector<double>& params() const { return params_; }  // in def().params order

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 9; }
  // From the table's derivative column (ops/grad/derivative.h); cast converts the gradient back.
  std::vector<Variable*> grad(const GradArgs& args) const override;

  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool c_splittable(const Node&) const override { return true; }
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override;

  // The scalar expression for data dtype `in`, output dtype `out`, over ${0}..${n-1}.
  std::string scalar_expr(DType in, DType out) const;
  // The scalar expression for this node's input and output dtypes.
  std::string node_expr(const Node& node) const;

 private:
  DType data_dtype(const std::vector<DType>& inputs) const;
  const ScalarOpDef& def_;
  std::vector<double> params_;
  std::optional<DType> cast_to_;
};

}  // namespace kiln
