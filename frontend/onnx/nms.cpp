#include "frontend/onnx/nms.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "util/error.h"

namespace kiln {
namespace {

struct Box {
  double x0, y0, x1, y1;  // min and max corners
  double area() const { return (x1 - x0) * (y1 - y0); }
};

// The boxes kept for one class, indexed by their left edge: a candidate is tested only against
// kept boxes whose x-interval can meet its own (a batched NMS offsets each class's boxes apart,
// so thousands of kept boxes of other classes are skipped). Boxes of no area, or with a NaN,
// never suppress and are not indexed.
class KeptBoxes {
 public:
  bool suppressed(const Box& box, double threshold) const {
    if (!(box.area() > 0)) return false;
    for (auto it = by_x0_.lower_bound(box.x0 - widest_); it != by_x0_.end() && it->first < box.x1;
         ++it) {
      if (suppresses(box, boxes_[it->second], threshold)) return true;
    }
    return false;
  }
  void add(const Box& box) {
    boxes_.push_back(box);
    if (!(box.area() > 0)) return;
    by_x0_.emplace(box.x0, boxes_.size() - 1);
    widest_ = std::max(widest_, box.x1 - box.x0);
  }
  size_t size() const { return boxes_.size(); }

 private:
  static bool suppresses(const Box& p, const Box& q, double threshold);
  std::vector<Box> boxes_;
  std::multimap<double, size_t> by_x0_;
  double widest_ = 0;
};

Box box_at(const Tensor& boxes, int64_t b, int64_t i, bool centre) {
  const int64_t n = boxes.shape()[1], at = (b * n + i) * 4;
  const double a = boxes.load(at), c = boxes.load(at + 1), d = boxes.load(at + 2),
               e = boxes.load(at + 3);
  if (centre) return {a - d / 2, c - e / 2, a + d / 2, c + e / 2};
  return {std::min(c, e), std::min(a, d), std::max(c, e), std::max(a, d)};
}

// IoU above the threshold; boxes that do not overlap, or of no area, never suppress.
bool KeptBoxes::suppresses(const Box& p, const Box& q, double threshold) {
  const double ix0 = std::max(p.x0, q.x0), ix1 = std::min(p.x1, q.x1);
  const double iy0 = std::max(p.y0, q.y0), iy1 = std::min(p.y1, q.y1);
  if (!(ix1 > ix0) || !(iy1 > iy0)) return false;
  const double inter = (ix1 - ix0) * (iy1 - iy0);
  const double a = p.area(), b = q.area(), uni = a + b - inter;
  if (!(a > 0) || !(b > 0) || !(uni > 0)) return false;
  return inter / uni > threshold;
}

}  // namespace

NmsParams nms_params(const std::vector<const Tensor*>& inputs, int64_t center_point_box) {
  NmsParams p;
  auto scalar = [&](size_t i, const char* what) -> const Tensor* {
    if (inputs.size() <= i || !inputs[i]) return nullptr;
    if (inputs[i]->numel() != 1) {
      throw UserError(std::string("NonMaxSuppression: ") + what + " must hold one value, got " +
                      inputs[i]->describe());
    }
    return inputs[i];
  };
  if (const Tensor* t = scalar(2, "max_output_boxes_per_class")) p.max_per_class = t->load_int(0);
  if (const Tensor* t = scalar(3, "iou_threshold")) p.iou_threshold = t->load(0);
  if (const Tensor* t = scalar(4, "score_threshold")) p.score_threshold = t->load(0);
  p.center_point_box = center_point_box != 0;
  return p;
}

Tensor non_max_suppression(const Tensor& boxes, const Tensor& scores, const NmsParams& p) {
  const Shape& bs = boxes.shape();
  const Shape& ss = scores.shape();
  if (bs.size() != 3 || bs[2] != 4)
    throw UserError("NonMaxSuppression: boxes " + boxes.describe() +
                    " must be (batches, boxes, 4)");
  if (ss.size() != 3 || ss[0] != bs[0] || ss[2] != bs[1]) {
    throw UserError("NonMaxSuppression: scores " + scores.describe() +
                    " must be (batches, classes, boxes) for boxes " + boxes.describe());
  }
  const int64_t B = bs[0], N = bs[1], C = ss[1];
  const int64_t keep_max = std::max<int64_t>(p.max_per_class, 0);
  std::vector<int64_t> rows;
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::vector<double> score(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      order.clear();
      for (int64_t i = 0; i < N; ++i) {
        const double s = scores.load((b * C + c) * N + i);
        score[static_cast<size_t>(i)] = s;
        if (std::isnan(s)) continue;
        if (p.score_threshold && !(s > *p.score_threshold)) continue;
        order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) {
        return score[static_cast<size_t>(l)] > score[static_cast<size_t>(r)];
      });
      KeptBoxes kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= keep_max) break;
        const Box box = box_at(boxes, b, i, p.center_point_box);
        if (kept.suppressed(box, p.iou_threshold)) continue;
        kept.add(box);
        rows.insert(rows.end(), {b, c, i});
      }
    }
  }
  Tensor out = Tensor::empty(DType::kInt64, {static_cast<int64_t>(rows.size() / 3), 3});
  for (size_t k = 0; k < rows.size(); ++k) out.store_int(static_cast<int64_t>(k), rows[k]);
  return out;
}

}  // namespace kiln
