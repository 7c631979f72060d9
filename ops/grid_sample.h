#pragma once
// ONNX GridSample (2-D), PyTorch's grid_sample: grid_sample(X (N, C, H, W), grid (N, Ho, Wo, 2))
// -> Y (N, C, Ho, Wo), each output position sampling X at the grid's (x, y), normalised to
// [-1, 1] across the image (the corner pixels' centres with align_corners, their outer edges
// without). Props: mode (bilinear, nearest, bicubic; ONNX 20's linear and cubic are the same),
// padding_mode (zeros: taps outside read 0; border: coordinates clamp to the image;
// reflection: coordinates reflect off its edges, then clamp), align_corners (0 or 1).
// Nearest rounds half to even; bicubic is Keys' cubic with a = -0.75 over 4 x 4 taps, each
// tap's index padded. A NaN in the grid gives NaN at that position (nothing is read).
//
// Parts take runs of (n, output row); each position's coordinates and weights are found
// once for all channels.
//
// grid_sample_grad(X, grid, dY) -> (dX, dgrid): each tap's weight times dY added into dX, and
// the grid's gradient through the weights' derivatives, the padding's (0 where a coordinate
// was clamped, the sign of the reflection) and the normalisation's scale; nearest has none
// for the grid. One part (taps of different positions add into the same pixels).
#include "ops/cop.h"

namespace kiln {

class GridSample : public COp {
 public:
  explicit GridSample(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  bool c_splittable(const Node&) const override { return true; }

  enum Mode { kNearest = 0, kBilinear = 1, kBicubic = 2 };
  enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };
  Mode mode() const { return mode_; }
  Padding padding() const { return padding_; }
  bool align_corners() const { return align_; }
  // The sampling rule's C text (kiln_gs_taps and its helpers), for other devices' kernels:
  // the includer defines KILN_GS_FN.
  static const char* rules_c();

 private:
  friend class GridSampleGrad;
  Mode mode_;
  Padding padding_;
  bool align_;
};

class GridSampleGrad : public COp {
 public:
  explicit GridSampleGrad(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }

 private:
  GridSample forward_;
};

}  // namespace kiln
