#pragma once
// ONNX Slice with constant starts/ends/axes/steps (props): a strided view copied out, so
// negative steps and clamped, out-of-range bounds follow ONNX exactly.
#include "ops/cop.h"

namespace kiln {

class Slice : public COp {
 public:
  explicit Slice(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  bool has_cuda_code(const Node& node) const override;
  CudaCode cuda_code(const Node& node, const CodeNames& names, const Sub& sub) const override;

 private:
  struct AxisSlice {
    int axis;
    int64_t start, end, step;
  };
  std::vector<AxisSlice> per_axis(int rank) const;
  std::vector<int64_t> starts_, ends_, axes_, steps_;
};

// First index and count of one sliced dimension (ONNX clamping rules).
void slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first,
               int64_t* count);

}  // namespace kiln
