#pragma once
// ONNX RoiAlign: roi_align(X (N, C, H, W), rois (R, 4) as x1, y1, x2, y2, batch_indices (R))
// -> Y (R, C, output_height, output_width), each bin the average (or maximum) of a grid of
// bilinear samples (sampling_ratio per side, or ceil(bin size) when 0), as ONNX's reference
// and onnxruntime compute it: coordinates scaled by spatial_scale, shifted by half a pixel
// with half_pixel (ONNX 16's default), boxes of the legacy mode at least 1 x 1, samples more
// than a pixel outside the image read 0, max mode the largest weighted corner. Props: mode
// (avg, max), output_height, output_width, sampling_ratio, spatial_scale, half_pixel.
//
// Bad boxes fail the call naming the box: a batch index outside [0, N), a coordinate that is
// NaN or infinite, a bin of more than kMaxSamples samples (a box far larger than the image:
// the call would not end). Parts take runs of boxes; a bin's samples are found once for all
// channels.
//
// roi_align_grad(X, rois, batch_indices, dY) -> dX (avg mode): each sample's weights times
// dY / count added at its corners.
#include "ops/cop.h"

namespace kiln {

class RoiAlign : public COp {
 public:
  static constexpr int64_t kMaxSamples = 1 << 16;  // per bin

  explicit RoiAlign(Attrs props, const std::string& name = "roi_align");
  std::vector<Variable*> grad(const GradArgs& args) const override;
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  bool c_splittable(const Node&) const override { return true; }

  bool is_max() const { return max_; }
  int64_t out_h() const { return out_h_; }
  int64_t out_w() const { return out_w_; }
  int64_t sampling_ratio() const { return ratio_; }
  double spatial_scale() const { return scale_; }
  bool half_pixel() const { return half_pixel_; }
  // The box and sample rules' C text, for other devices' kernels (the includer defines
  // KILN_RA_FN).
  static const char* rules_c();

 protected:
  void check_inputs(const std::vector<TensorType>& inputs, size_t count) const;
  std::string props_c() const;  // the kiln_roi_props initializer
  bool max_;
  int64_t out_h_, out_w_, ratio_;
  double scale_;
  bool half_pixel_;
};

class RoiAlignGrad : public RoiAlign {
 public:
  explicit RoiAlignGrad(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override { return Op::grad(args); }
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool c_splittable(const Node&) const override { return false; }  // boxes overlap in dX
};

}  // namespace kiln
