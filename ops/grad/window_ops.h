#pragma once
// Kernels for the gradients of the sliding-window ops (autodiff, ops/grad/window.cpp), where
// a composition of kiln ops would move the data many times:
//   max_pool_grad(X, Y, dY) -> dX: each window's output gradient goes to the window's first
//     element equal to the pooled value Y (as the forward keeps the first maximum; a NaN
//     maximum matches nothing), summed where windows overlap. Props: max_pool's.
//   conv_weight_grad(X, dY) -> (slices, M, C/group, kernel...): per slice of the output rows
//     (n, y), the sum over them of dY times the input each kernel tap read; the weight's
//     gradient is the sum over the slices, which split the work between cores without two
//     writing one sum. Props: conv's, kernel_shape required (the weight's spatial shape),
//     and slices (default 1); sliced 0 drops the slices axis (dW itself, with one slice).
//   conv_input_grad(dY, W) -> dX (N, C, input...): the input gradient of conv(X, W), each
//     image's dY times W^T (a GEMM reading W in place, no flipped copy) folded back onto the
//     taps' input positions. No zeros between a strided layer's positions (a convolution of
//     the dilated dY multiplies 4x as many for stride 2). Props: conv's, input_shape (X's
//     spatial sizes) required.
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class MaxPoolGrad : public COp {
 public:
  explicit MaxPoolGrad(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_window.h"}; }
  bool c_splittable(const Node&) const override { return true; }  // by (n, c) planes

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;
  WindowAttrs window_;
};

class ConvWeightGrad : public COp {
 public:
  explicit ConvWeightGrad(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 4; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_window.h"}; }
  // Parts take slices, and blocks of output channels when the slices are few.
  bool c_splittable(const Node&) const override { return true; }
  bool c_heavy(const Node&) const override { return true; }

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;
  WindowAttrs window_;
  int64_t group_, slices_;
  bool sliced_;
};

class ConvInputGrad : public COp {
 public:
  explicit ConvInputGrad(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_window.h"}; }
  // Parts take runs of input channels (whole rows of W^T): their dX planes are theirs alone.
  bool c_splittable(const Node&) const override { return true; }
  bool c_heavy(const Node&) const override { return true; }

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& w) const;
  WindowAttrs window_;
  int64_t group_;
  std::vector<int64_t> input_;
};

}  // namespace kiln
