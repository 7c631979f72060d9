#pragma once
// ONNX Pad (props: pads = [begin_0.., end_0..], value, mode). Negative pads crop. Modes:
// constant (value), reflect (mirrored without repeating the edge), edge (the edge repeated)
// and wrap (the dimension repeated, a torus). Output position o of a dimension of n reads
// source position pad_source(o - pad_begin, n, mode), pads of any size included (reflection
// bounces off both ends, as numpy's does); a non-constant mode cannot pad an empty dimension.
//
// pad_grad(dY) -> dX is the gradient of a non-constant mode: every output position's
// gradient added at the source position it read. Props: pad's.
#include "ops/cop.h"

namespace kiln {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

PadMode pad_mode_of(const Attrs& props);
// The source position a padded position i (relative to the start of the data) reads.
int64_t pad_source(int64_t i, int64_t n, PadMode mode);

class Pad : public COp {
 public:
  explicit Pad(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 3; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  // A pad value of ±inf or NaN is written as INFINITY / NAN.
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  // The non-constant modes: parts take runs of output rows.
  bool c_splittable(const Node&) const override { return mode_ != PadMode::kConstant; }

  const std::vector<int64_t>& pads() const { return pads_; }
  double value() const { return value_; }
  PadMode mode() const { return mode_; }
  // pad_source in C (kiln_pad_source(i, n, mode), the mode as its PadMode number), prefixed
  // by `qualifiers` ("static", "__device__ static"), for the devices' code.
  static std::string source_c(const std::string& qualifiers);

 private:
  void check_rank(int rank) const;
  std::vector<int64_t> pads_;
  double value_;
  PadMode mode_;
};

class PadGrad : public COp {
 public:
  explicit PadGrad(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  std::vector<int64_t> pads_;
  PadMode mode_;
};

}  // namespace kiln
