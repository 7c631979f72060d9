#pragma once
// Tensors computed from run-time dimensions (dimension expressions, graph/dim_expr.h, over
// the inputs, which are read only for their shapes): what a model's shape arithmetic makes
// when a dimension is dynamic.
//   dim_values (props: dims, dtype, scalar): the values of the expressions, a 1-D tensor (or
//     0-D when `scalar` is 1 and there is one expression) — ONNX Shape and its arithmetic;
//   fill (props: dims, value, dtype): a tensor of that shape holding `value` — ConstantOfShape;
//   arange (props: start, limit, delta as expressions, dtype): start, start + delta, ... up to
//     limit — Range.
#include <optional>

#include "graph/dim_expr.h"
#include "ops/cop.h"

namespace kiln {

// The shared part: the expressions and the dtype, checked against the inputs.
class DimValuesBase : public COp {
 public:
  DimValuesBase(std::string name, Attrs props, const std::vector<std::string>& known,
                const std::vector<std::string>& expr_props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::optional<int> cache_version() const override { return 1; }

 protected:
  void check_inputs(size_t count) const;
  std::vector<int64_t> eval_all(const std::vector<Shape>& shapes) const;  // every expression
  std::vector<DimExpr> exprs_;
  DType dtype_ = DType::kInt64;
};

class DimValues : public DimValuesBase {
 public:
  explicit DimValues(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;

 private:
  bool scalar_ = false;
};

class Fill : public DimValuesBase {
 public:
  explicit Fill(Attrs props);
  // Its value may be an infinity or a NaN, which C writes through <math.h>.
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::optional<int> cache_version() const override { return 2; }
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;

 private:
  double value_ = 0;
};

class Arange : public DimValuesBase {
 public:
  explicit Arange(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
};

// ONNX Range's element count: max(0, ceil((limit - start) / delta)).
int64_t range_count(int64_t start, int64_t limit, int64_t delta);

}  // namespace kiln
