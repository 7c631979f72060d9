#include "ops/resize.h"

#include <cmath>

#include "ops/c/elementwise_loop.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

const std::vector<std::string> kModes{"nearest", "linear", "cubic"};
const std::vector<std::string> kTransforms{"half_pixel",           "asymmetric",
                                           "pytorch_half_pixel",   "align_corners",
                                           "tf_half_pixel_for_nn", "tf_crop_and_resize"};
const std::vector<std::string> kNearest{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

int pick(const Attrs& a, const std::string& name, const std::vector<std::string>& allowed,
         const std::string& fallback) {
  const std::string v = attr_string(a, name, fallback);
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i] == v) return static_cast<int>(i);
  }
  throw AttrError(name, "'" + v + "' is not one of " + join(allowed, ", "));
}

// The taps of one output coordinate along one dimension.
struct Taps {
  bool outside = false;  // tf_crop_and_resize past the region: the extrapolation value
  std::vector<std::pair<int64_t, double>> w;  // clamped input index, weight
};

Taps taps_for(int64_t o, int64_t in, double scale, int64_t axis, int rank, int mode, int ctm,
              int nearest, double A, bool exclude, const std::vector<double>& roi) {
  const double out_len = scale * static_cast<double>(in);  // as ONNX's reference: not floored
  const double x = static_cast<double>(o);
  double xo = 0;
  switch (ctm) {
    case 0:
      xo = (x + 0.5) / scale - 0.5;
      break;
    case 1:
      xo = x / scale;
      break;
    case 2:
      xo = out_len == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
      break;
    case 3:
      xo = out_len == 1 ? 0 : x * static_cast<double>(in - 1) / (out_len - 1);
      break;
    case 4:
      xo = (x + 0.5) / scale;
      break;
    default: {
      const double start = roi[static_cast<size_t>(axis)],
                   end = roi[static_cast<size_t>(axis + rank)];
      xo = out_len == 1 ? (end - start) * static_cast<double>(in - 1) / 2
                        : x * (end - start) * static_cast<double>(in - 1) / (out_len - 1);
      xo += start * static_cast<double>(in - 1);
      if (xo < 0 || xo > static_cast<double>(in - 1)) return Taps{true, {}};
    }
  }
  // An integer coordinate counts as the top of the cell below it (ratio 1).
  double base = std::floor(xo), ratio = xo - base;
  if (ratio == 0) {
    base -= 1;
    ratio = 1;
  }
  auto clamp = [&](double i) {
    return static_cast<int64_t>(std::min(std::max(i, 0.0), static_cast<double>(in - 1)));
  };
  Taps t;
  if (mode == 0) {
    bool up = true;
    if (ratio != 1) {
      switch (nearest) {
        case 0:
          up = ratio > 0.5;
          break;
        case 1:
          up = ratio >= 0.5;
          break;
        case 2:
          up = false;
          break;
        default:
          up = true;
          break;
      }
    }
    t.w.push_back({clamp(base + (up ? 1 : 0)), 1.0});
  } else if (mode == 1) {
    t.w.push_back({clamp(base), 1 - ratio});
    t.w.push_back({clamp(base + 1), ratio});
  } else {
    const double s = ratio, r = 1 - ratio;
    const double c[4] = {((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A,
                         ((A + 2) * s - (A + 3)) * s * s + 1, ((A + 2) * r - (A + 3)) * r * r + 1,
                         ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A};
    double total = 0;
    for (int k = 0; k < 4; ++k) {
      const double i = base - 1 + k;
      const double w = exclude && (i < 0 || i > static_cast<double>(in - 1)) ? 0 : c[k];
      t.w.push_back({clamp(i), w});
      total += w;
    }
    if (exclude && total != 0) {
      for (auto& p : t.w) p.second /= total;
    }
  }
  return t;
}

// The C engine: the same taps, computed per dimension into tables, then every output element
// sums the products over its taps' combinations (one per dimension for nearest).
constexpr const char* kEngine = R"kiln(
static void kiln_resize_taps(int64_t o, int64_t in, double scale, int64_t axis, int rank,
                             int mode, int ctm, int nearest, double A, int exclude,
                             const double *roi, int *outside, int64_t *idx, double *w) {
  const double out_len = scale * (double)in, x = (double)o;
  double xo = 0, base, ratio;
  int k;
  *outside = 0;
  switch (ctm) {
    case 0: xo = (x + 0.5) / scale - 0.5; break;
    case 1: xo = x / scale; break;
    case 2: xo = out_len == 1 ? -0.5 : (x + 0.5) / scale - 0.5; break;
    case 3: xo = out_len == 1 ? 0 : x * (double)(in - 1) / (out_len - 1); break;
    case 4: xo = (x + 0.5) / scale; break;
    default:
      xo = out_len == 1 ? (roi[axis + rank] - roi[axis]) * (double)(in - 1) / 2
                        : x * (roi[axis + rank] - roi[axis]) * (double)(in - 1) / (out_len - 1);
      xo += roi[axis] * (double)(in - 1);
      if (xo < 0 || xo > (double)(in - 1)) { *outside = 1; return; }
  }
  base = floor(xo);
  ratio = xo - base;
  if (ratio == 0) { base -= 1; ratio = 1; }
#define KILN_RESIZE_CLAMP(i) ((int64_t)((i) < 0 ? 0 : (i) > (double)(in - 1) ? (double)(in - 1) : (i)))
  if (mode == 0) {
    int up = 1;
    if (ratio != 1) up = nearest == 0 ? ratio > 0.5 : nearest == 1 ? ratio >= 0.5 : nearest == 2 ? 0 : 1;
    idx[0] = KILN_RESIZE_CLAMP(base + up);
    w[0] = 1;
  } else if (mode == 1) {
    idx[0] = KILN_RESIZE_CLAMP(base);
    idx[1] = KILN_RESIZE_CLAMP(base + 1);
    w[0] = 1 - ratio;
    w[1] = ratio;
  } else {
    const double s = ratio, r = 1 - ratio;
    double c[4], total = 0;
    c[0] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    c[1] = ((A + 2) * s - (A + 3)) * s * s + 1;
    c[2] = ((A + 2) * r - (A + 3)) * r * r + 1;
    c[3] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    for (k = 0; k < 4; ++k) {
      const double i = base - 1 + k;
      w[k] = exclude && (i < 0 || i > (double)(in - 1)) ? 0 : c[k];
      idx[k] = KILN_RESIZE_CLAMP(i);
      total += w[k];
    }
    if (exclude && total != 0)
      for (k = 0; k < 4; ++k) w[k] /= total;
  }
#undef KILN_RESIZE_CLAMP
}
)kiln";

}  // namespace

Resize::Resize(Attrs props) : COp("resize", std::move(props)) {
  check_known_attrs(this->props(),
                    {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                     "exclude_outside", "extrapolation_value", "scales", "sizes", "roi"});
  mode_ = pick(this->props(), "mode", kModes, "nearest");
  ctm_ = pick(this->props(), "coordinate_transformation_mode", kTransforms, "half_pixel");
  nearest_ = pick(this->props(), "nearest_mode", kNearest, "round_prefer_floor");
  cubic_a_ = attr_float(this->props(), "cubic_coeff_a", -0.75);
  exclude_outside_ = attr_int(this->props(), "exclude_outside", 0) != 0;
  extrapolation_ = attr_float(this->props(), "extrapolation_value", 0.0);
  if (this->props().count("scales"))
    scales_ = std::get<std::vector<double>>(this->props().at("scales"));
  if (this->props().count("sizes")) sizes_ = attr_ints(this->props(), "sizes");
  if (scales_.empty() == sizes_.empty())
    throw AttrError("scales", "give exactly one of scales and sizes");
  for (double s : scales_) {
    if (!(s > 0)) throw AttrError("scales", "must be positive");
  }
  for (int64_t s : sizes_) {
    if (s < 1) throw AttrError("sizes", "must be positive");
  }
  if (this->props().count("roi")) roi_ = std::get<std::vector<double>>(this->props().at("roi"));
}

Shape Resize::out_shape(const Shape& in) const {
  const size_t rank = in.size();
  if ((scales_.empty() ? sizes_.size() : scales_.size()) != rank) {
    throw UserError("resize: " + std::to_string(scales_.empty() ? sizes_.size() : scales_.size()) +
                    " scales or sizes for rank " + std::to_string(rank));
  }
  if (ctm_ == 5 && roi_.size() != 2 * rank)
    throw UserError("resize: tf_crop_and_resize needs roi of 2 x rank values");
  Shape out;
  for (size_t d = 0; d < rank; ++d) {
    out.push_back(scales_.empty()
                      ? sizes_[d]
                      : static_cast<int64_t>(std::floor(static_cast<double>(in[d]) * scales_[d])));
  }
  return out;
}

std::vector<double> Resize::scales_for(const Shape& in, const Shape& out) const {
  if (!scales_.empty()) return scales_;
  std::vector<double> s;
  for (size_t d = 0; d < in.size(); ++d)
    s.push_back(static_cast<double>(out[d]) / static_cast<double>(in[d]));
  return s;
}

std::vector<TensorType> Resize::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("resize takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UserError("resize: " + x.to_string() + " (float32 and float64 are supported)");
  Shape in = x.dims;
  TensorType out{x.dtype, {}};
  for (size_t d = 0; d < in.size(); ++d) in[d] = in[d] == kDynamic ? 1 : in[d];
  const Shape o = out_shape(in);
  for (size_t d = 0; d < o.size(); ++d)
    out.dims.push_back(x.dims[d] == kDynamic && sizes_.empty() ? kDynamic : o[d]);
  return {out};
}

std::vector<Shape> Resize::infer_shape(const std::vector<Shape>& inputs) const {
  for (int64_t d : inputs[0]) {
    if (d == 0) throw UserError("resize: empty input " + dims_to_string(inputs[0]));
  }
  return {out_shape(inputs[0])};
}

void Resize::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  Tensor& y = outputs[0];
  const Shape& in = x.shape();
  const Shape& out = y.shape();
  const int rank = x.ndim();
  const std::vector<double> scales = scales_for(in, out);
  std::vector<std::vector<Taps>> table(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    for (int64_t o = 0; o < out[static_cast<size_t>(d)]; ++o) {
      table[static_cast<size_t>(d)].push_back(
          taps_for(o, in[static_cast<size_t>(d)], scales[static_cast<size_t>(d)], d, rank, mode_,
                   ctm_, nearest_, cubic_a_, exclude_outside_, roi_));
    }
  }
  // A dimension the resize leaves alone (each output reads its own input with weight 1):
  // its other taps, of weight 0, are dropped (so an infinity beside it is not 0 * inf).
  for (int d = 0; d < rank; ++d) {
    auto& t = table[static_cast<size_t>(d)];
    // (An exact position's taps are the one before at weight 0 and itself at weight 1.)
    bool identity = in[static_cast<size_t>(d)] == out[static_cast<size_t>(d)];
    for (size_t o = 0; identity && o < t.size(); ++o) {
      int ones = 0;
      for (const auto& [i, w] : t[o].w) {
        if (w == 1 && i == static_cast<int64_t>(o)) ++ones;
        identity = identity && (w == 0 || (w == 1 && i == static_cast<int64_t>(o)));
      }
      identity = identity && ones == 1 && !t[o].outside;
    }
    if (identity)
      for (size_t o = 0; o < t.size(); ++o) t[o].w = {{static_cast<int64_t>(o), 1.0}};
  }
  Shape istride(static_cast<size_t>(rank), 1);
  for (int d = rank - 1; d > 0; --d)
    istride[static_cast<size_t>(d - 1)] =
        istride[static_cast<size_t>(d)] * in[static_cast<size_t>(d)];
  Shape at(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    // Sum over every combination of this element's taps, one per dimension.
    bool outside = false;
    for (int d = 0; d < rank; ++d)
      outside =
          outside ||
          table[static_cast<size_t>(d)][static_cast<size_t>(at[static_cast<size_t>(d)])].outside;
    double v = 0;
    if (outside) {
      v = extrapolation_;
    } else {
      std::vector<size_t> k(static_cast<size_t>(rank), 0);
      for (bool more = true; more;) {
        double w = 1;
        int64_t src = 0;
        for (int d = 0; d < rank; ++d) {
          const auto& tap =
              table[static_cast<size_t>(d)][static_cast<size_t>(at[static_cast<size_t>(d)])]
                  .w[k[static_cast<size_t>(d)]];
          w *= tap.second;
          src += tap.first * istride[static_cast<size_t>(d)];
        }
        v += w * x.load(src);
        more = false;
        for (int d = rank; d-- > 0;) {
          if (++k[static_cast<size_t>(d)] <
              table[static_cast<size_t>(d)][static_cast<size_t>(at[static_cast<size_t>(d)])]
                  .w.size()) {
            more = true;
            break;
          }
          k[static_cast<size_t>(d)] = 0;
        }
      }
    }
    y.store(i, v);
    for (int d = rank; d-- > 0;) {
      if (++at[static_cast<size_t>(d)] < out[static_cast<size_t>(d)]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
}

std::string Resize::c_support_code() const { return kEngine; }

std::string Resize::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const std::string T(dtype_c_type(t.dtype)), r = std::to_string(rank);
  const std::string &in = names.inputs[0], &out = names.outputs[0];
  const int n = mode_ == 0 ? 1 : mode_ == 1 ? 2 : 4;
  std::string s = "{\n  enum { R = " + r + ", N = " + std::to_string(n) + " };\n";
  // The scale of each dimension: the prop, or output / input (sizes).
  s += "  double scale[R];\n  int64_t total = 0, nin = 1, istride[R];\n";
  for (int d = 0; d < rank; ++d) {
    const std::string ds = std::to_string(d);
    s += "  scale[" + ds + "] = " +
         (scales_.empty()
              ? "(double)" + out + "->shape[" + ds + "] / (double)" + in + "->shape[" + ds + "]"
              : c_literal_of(DType::kFloat64, scales_[static_cast<size_t>(d)], 0)) +
         ";\n";
  }
  std::vector<std::string> roi;
  for (double v : roi_) roi.push_back(c_literal_of(DType::kFloat64, v, 0));
  if (roi.empty()) roi.push_back("0");
  s += "  static const double roi[] = {" + join(roi, ", ") + "};\n";
  s += "  for (int d = R - 1; d >= 0; --d) { istride[d] = nin; nin *= " + in +
       "->shape[d]; total += " + out + "->shape[d]; }\n";
  s += c_workspace(T, "x", "nin", "resize's dense input");
  s += c_workspace("int64_t", "idx", "total * N + 1", "resize's tap indices");
  s += c_workspace("double", "w", "total * N + 1", "resize's tap weights");
  s += c_workspace("int", "outside", "total + 1", "resize's outside flags");
  // Parts take runs of output elements; a contiguous input is read in place.
  s += "  int kiln_dense = 1;\n";
  s += "  for (int d = 0; d < R; ++d) kiln_dense &= " + in + "->shape[d] == 1 || " + in +
       "->strides[d] == istride[d];\n";
  s += "  if (kiln_dense) x = (" + T + " *)" + in + "->data;\n";
  s += "  else kiln_copy_strided(x, " + in + "->data, R, " + in + "->shape, " + in +
       "->strides, sizeof(" + T + "));\n";
  // Per dimension, per output coordinate: its taps (from the dimension's first row).
  s += "  int64_t row[R], at[R], k[R];\n  int64_t base = 0;\n";
  s += "  for (int d = 0; d < R; ++d) {\n    row[d] = base;\n";
  s += "    for (int64_t o = 0; o < " + out + "->shape[d]; ++o)\n";
  s += "      kiln_resize_taps(o, " + in + "->shape[d], scale[d], d, R, " + std::to_string(mode_) +
       ", " + std::to_string(ctm_) + ", " + std::to_string(nearest_) + ", " +
       c_literal_of(DType::kFloat64, cubic_a_, 0) + ", " + (exclude_outside_ ? "1" : "0") +
       ", roi, &outside[base + o], &idx[(base + o) * N], &w[(base + o) * N]);\n";
  s += "    base += " + out + "->shape[d];\n  }\n";
  // A dimension left alone (each output its own input at weight 1, the other taps at 0):
  // one tap, its place tap0 (the same for every output: an exact position's), not N.
  s += "  int nt[R], tap0[R];\n";
  s += "  for (int d = 0; d < R; ++d) {\n    int same = " + in + "->shape[d] == " + out +
       "->shape[d], unit = -1;\n";
  s += "    for (int64_t o = 0; same && o < " + out + "->shape[d]; ++o) {\n";
  s += "      const int64_t t = (row[d] + o) * N;\n      int ones = 0, at1 = -1;\n";
  s += "      for (int j = 0; j < N; ++j) {\n";
  s += "        if (w[t + j] == 1 && idx[t + j] == o) { ++ones; at1 = j; }\n";
  s += "        else if (w[t + j] != 0) same = 0;\n      }\n";
  s += "      same = same && ones == 1 && !outside[row[d] + o] && (unit < 0 || unit == at1);\n";
  s += "      unit = at1;\n    }\n";
  s += "    nt[d] = same ? 1 : N;\n    tap0[d] = same ? unit : 0;\n  }\n";
  s += "  int64_t n = 1;\n  for (int d = 0; d < R; ++d) n *= " + out + "->shape[d];\n";
  s += "  const int64_t i0 = n * " + sub.ctx + "->part / " + sub.ctx + "->n_parts, i1 = n * (" +
       sub.ctx + "->part + 1) / " + sub.ctx + "->n_parts;\n";
  s += "  { int64_t rem = i0; for (int d = R - 1; d >= 0; --d) { at[d] = rem % " + out +
       "->shape[d]; rem /= " + out + "->shape[d]; } }\n";
  s += "  " + T + " *y = (" + T + " *)" + out + "->data;\n";
  s += "  for (int64_t i = i0; i < i1; ++i) {\n    int out_of_region = 0;\n";
  s += "    for (int d = 0; d < R; ++d) out_of_region |= outside[row[d] + at[d]];\n";
  s += "    double v = 0;\n    if (out_of_region) {\n      v = " +
       c_literal_of(DType::kFloat64, extrapolation_, 0) + ";\n    } else {\n";
  s += "      for (int d = 0; d < R; ++d) k[d] = 0;\n      for (;;) {\n        double ww = 1;\n    "
       "    int64_t src = 0;\n";
  s += "        for (int d = 0; d < R; ++d) {\n          const int64_t t = (row[d] + at[d]) * N + "
       "tap0[d] + "
       "k[d];\n";
  s += "          ww *= w[t];\n          src += idx[t] * istride[d];\n        }\n";
  s += "        v += ww * (double)x[src];\n        int d = R - 1;\n";
  s += "        for (; d >= 0; --d) { if (++k[d] < nt[d]) break; k[d] = 0; }\n        if (d < 0) "
       "break;\n      }\n    }\n";
  s += "    y[i] = (" + T + ")v;\n";
  s += "    for (int d = R - 1; d >= 0; --d) { if (++at[d] < " + out +
       "->shape[d]) break; at[d] = 0; }\n  }\n}\n";
  return s;
}

}  // namespace kiln
