#pragma once
// ONNX NonMaxSuppression evaluated on the host: like NonZero, its output's size (the boxes
// kept) depends on the values, so kiln computes it between compiled stages
// (frontend/model_function.h) or at load time when its inputs are known.
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

struct NmsParams {
  int64_t max_per_class = 0;  // ONNX's default: none kept
  double iou_threshold = 0;
  std::optional<double> score_threshold;  // absent: no score filter
  bool center_point_box = false;  // [x_centre, y_centre, w, h]; else corners [y1, x1, y2, x2]
};

// The parameters from NonMaxSuppression's inputs 2-4 (null where absent), and its attribute.
NmsParams nms_params(const std::vector<const Tensor*>& inputs, int64_t center_point_box);

// int64 (kept, 3): [batch, class, box] rows, batch by batch and class by class, each class's
// boxes by falling score (ties: the lower index first). Greedy: a box is kept unless its IoU
// with a box already kept for its class exceeds iou_threshold; boxes of zero or negative area
// suppress nothing. A NaN score is never kept; corners may come in either order.
// boxes (B, N, 4), scores (B, C, N); throws UserError naming what does not fit.
Tensor non_max_suppression(const Tensor& boxes, const Tensor& scores, const NmsParams& p);

}  // namespace kiln
