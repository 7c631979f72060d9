#pragma once
// Max pooling's indices and their inverse (SegNet-style decoders, ONNX MaxPool's second output
// and MaxUnpool):
//   max_pool_indices(X) -> I (int64, the pooled shape): for each window, the flat index into X
//     ((n * C + c) * H + y) * W + x of the tap max_pool keeps (the first maximum; the last
//     NaN, as PyTorch's indices; a window of -inf alone keeps its first tap), or with
//     column_major ((n * C + c) * W + x) * H + y (ONNX's storage_order 1). Props: max_pool's
//     and column_major. 1-D and 2-D.
//   max_unpool(X, I) -> Y (N, C, output...): zeros, with each X[e] stored where flat index I[e]
//     points (a later element wins a shared index). The index counts over (N, C, grid...):
//     ONNX's indices address the output of the pooling's own size (grid), and an output_shape
//     larger than it pads at the end of each dimension. An index outside the grid fails the
//     call naming the element. Props: output (the spatial sizes), grid (default: output).
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class MaxPoolIndices : public COp {
 public:
  explicit MaxPoolIndices(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override { return {"kiln_window.h"}; }
  bool c_splittable(const Node&) const override { return true; }  // by (n, c) planes

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;
  WindowAttrs window_;
  bool column_major_;
};

class MaxUnpool : public COp {
 public:
  explicit MaxUnpool(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;

 private:
  std::vector<int64_t> output_, grid_;
};

}  // namespace kiln
