#include "ops/qconv.h"

#include "ops/c/qgemm_pack.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

QConv::QConv(Attrs props) : COp("qconv", std::move(props)) {
  check_known_attrs(this->props(),
                    {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "group", "requant",
                     "bias", "relu", "packed_m", "w_u8", "nhwc", "x_nchw", "c4"});
  window_ = WindowAttrs::from_props(this->props(), "qconv");
  q_ = QuantLayout::from_props(this->props(), "qconv");
  group_ = attr_int(this->props(), "group", 1);
  packed_m_ = attr_int(this->props(), "packed_m", 0);
  w_u8_ = attr_int(this->props(), "w_u8", 0) != 0;
  nhwc_ = attr_int(this->props(), "nhwc", 0) != 0;
  x_nhwc_ = nhwc_ && attr_int(this->props(), "x_nchw", 0) == 0;
  c4_ = attr_int(this->props(), "c4", 0) != 0;
  if (group_ < 1) throw UserError("qconv: group must be >= 1, got " + std::to_string(group_));
  if (packed_m_ < 0 || (packed_m_ > 0 && window_.kernel.empty())) {
    throw UserError("qconv: packed_m needs kernel_shape");
  }
  if (c4_ && (packed_m_ == 0 || group_ != 1 || x_nhwc_)) {
    throw UserError(
        "qconv: c4 (a three-channel image widened to four) needs a packed weight, group 1 and a "
        "channels-first input");
  }
  if (!nhwc_ && attr_int(this->props(), "x_nchw", 0) != 0) {
    throw UserError(
        "qconv: x_nchw needs nhwc (it says which input of a channels-last "
        "convolution stays channels-first)");
  }
}

std::vector<int64_t> QConv::channels_first(const std::vector<int64_t>& x) const {
  if (!x_nhwc_ || x.size() < 3) return x;
  std::vector<int64_t> d{x[0], x.back()};
  d.insert(d.end(), x.begin() + 1, x.end() - 1);
  return d;
}

std::vector<int64_t> QConv::weight_dims(const std::vector<int64_t>& x,
                                        const std::vector<int64_t>& w) const {
  if (packed_m_ == 0) return w;
  std::vector<int64_t> d{packed_m_, x.size() > 1 && x[1] != kDynamic ? x[1] / group_ : kDynamic};
  d.insert(d.end(), window_.kernel.begin(), window_.kernel.end());
  return d;
}

std::vector<WindowDims> QConv::geometry(const std::vector<int64_t>& x,
                                        const std::vector<int64_t>& w) const {
  std::vector<int64_t> spatial(x.begin() + 2, x.end());
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (!window_.kernel.empty() && window_.kernel != kernel) {
    throw UserError("qconv: kernel_shape " + dims_to_string(window_.kernel) +
                    " does not match the weight " + dims_to_string(w));
  }
  return resolve_window(window_, spatial, kernel, "qconv");
}

std::vector<TensorType> QConv::infer_type(const std::vector<TensorType>& in) const {
  if (in.size() != q_.input_count()) {
    throw UserError("qconv takes " + std::to_string(q_.input_count()) + " inputs here, got " +
                    std::to_string(in.size()));
  }
  if (in[0].rank() != 3 && in[0].rank() != 4) {
    throw UnsupportedError("qconv: rank-" + std::to_string(in[0].rank()) +
                           " input (1-D and 2-D convolutions are supported)");
  }
  if (nhwc_ && in[0].rank() != 4) {
    throw UserError("qconv: nhwc needs a rank-4 input, got " + in[0].to_string());
  }
  if (nhwc_ != x_nhwc_ && group_ != 1) {
    throw UserError("qconv: x_nchw takes group-1 convolutions, got group " +
                    std::to_string(group_));
  }
  const TensorType x{in[0].dtype, channels_first(in[0].dims)};
  const std::vector<int64_t> w = weight_dims(x.dims, in[1].dims);
  if (packed_m_ > 0) {
    // c4: packed for four channels per tap (the input must then have three).
    if (c4_ && x.dims[1] != 3) {
      throw UserError("qconv: c4 widens a three-channel input, got " + x.to_string());
    }
    const int64_t kg =
        x.dims[1] == kDynamic ? kDynamic : (c4_ ? 4 : w[1]) * shape_numel({w.begin() + 2, w.end()});
    if (in[1].dtype != DType::kInt8 || in[1].rank() != 1 || kg == kDynamic ||
        (in[1].dims[0] != kDynamic &&
         in[1].dims[0] != group_ * qgemm_packed_bytes(kg, packed_m_ / group_))) {
      throw UserError("qconv: a packed weight must be int8 bytes for " + dims_to_string(w) +
                      " in " + std::to_string(group_) + " groups, got " + in[1].to_string() +
                      " for input " + x.to_string());
    }
  } else if (w.size() != x.dims.size()) {
    throw UserError("qconv: weight " + in[1].to_string() + " does not match input " +
                    x.to_string());
  }
  for (size_t d = 1; d < x.dims.size(); ++d) {
    if (x.dims[d] == kDynamic || w[d] == kDynamic || w[0] == kDynamic) {
      throw UnsupportedError("qconv: channel and spatial dimensions must be static, got input " +
                             x.to_string() + " and weight " + dims_to_string(w));
    }
  }
  const int64_t c = x.dims[1], m = w[0];
  if (c % group_ != 0 || m % group_ != 0 || w[1] != c / group_) {
    throw UserError("qconv: input " + x.to_string() + " and weight " + dims_to_string(w) +
                    " do not fit group " + std::to_string(group_) +
                    " (weight dim 1 must be channels / group)");
  }
  const DType w_dtype = packed_m_ > 0 ? (w_u8_ ? DType::kUInt8 : DType::kInt8) : in[1].dtype;
  const DType out = check_quant_inputs("qconv", q_, in, w_dtype, m);
  TensorType y{out, {x.dims[0], m}};
  for (const WindowDims& g : geometry(x.dims, w)) y.dims.push_back(g.out);
  if (nhwc_) y.dims = {y.dims[0], y.dims[2], y.dims[3], m};
  return {y};
}

std::vector<Shape> QConv::infer_shape(const std::vector<Shape>& in) const {
  const std::vector<int64_t> x = channels_first(in[0]);
  const std::vector<int64_t> w = weight_dims(x, in[1]);
  Shape y{x[0], w[0]};
  for (const WindowDims& g : geometry(x, w)) y.push_back(g.out);
  if (nhwc_) y = {y[0], y[2], y[3], y[1]};
  return {y};
}

double QConv::flops(const std::vector<Shape>& in, const std::vector<Shape>& out) const {
  const std::vector<int64_t> w = weight_dims(channels_first(in[0]), in[1]);
  return 2.0 * static_cast<double>(shape_numel(out[0])) *
         static_cast<double>(shape_numel(w) / w[0]);
}

void QConv::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor x = in[0].contiguous();
  const Tensor w = in[1].contiguous();
  Tensor& y = out[0];
  const QuantReference ref(q_, in);
  const std::vector<int64_t> xd = channels_first(x.shape());
  const std::vector<int64_t> wd = weight_dims(xd, w.shape());
  std::vector<WindowDims> g = geometry(xd, wd);
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const int64_t n_img = xd[0], c = xd[1], m = wd[0];
  const int64_t cg = c / group_, mg = m / group_;
  const int64_t h = g[0].in, wdth = g[1].in, oh = g[0].out, ow = g[1].out;
  const int64_t kh = g[0].kernel, kw = g[1].kernel;
  const int64_t cp = c4_ ? 4 : cg, kg = cp * kh * kw;  // the packed rows' channels per tap
  const auto* packed = static_cast<const int8_t*>(w.data());
  const int64_t gbytes = qgemm_packed_bytes(kg, mg);
  // Flat offsets of (n, channel, y, x) in X's and Y's layouts.
  auto x_at = [&](int64_t n, int64_t ch, int64_t yy, int64_t xx) {
    return x_nhwc_ ? ((n * h + yy) * wdth + xx) * c + ch : ((n * c + ch) * h + yy) * wdth + xx;
  };
  auto y_at = [&](int64_t n, int64_t oc, int64_t oy, int64_t ox) {
    return nhwc_ ? ((n * oh + oy) * ow + ox) * m + oc : ((n * m + oc) * oh + oy) * ow + ox;
  };
  for (int64_t n = 0; n < n_img; ++n) {
    for (int64_t oc = 0; oc < m; ++oc) {
      const int64_t grp = oc / mg;
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t acc = 0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
              if (yy < 0 || yy >= h) continue;  // padding is x_zp: it adds nothing
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                if (xx < 0 || xx >= wdth) continue;
                const int64_t t = (i * kw + j) * cp + ic;  // the packed rows' order
                const int64_t xv = x.load_int(x_at(n, grp * cg + ic, yy, xx)) - ref.a_zp();
                const int64_t wv =
                    packed_m_ > 0 ? qgemm_packed_at(packed + grp * gbytes, kg, t, oc - grp * mg) +
                                        (w_u8_ ? 128 : 0)
                                  : w.load_int((oc * cg + ic) * kh * kw + i * kw + j);
                acc += xv * (wv - ref.b_zp(oc));
              }
            }
          }
          y.store_int(y_at(n, oc, oy, ox), ref.out(acc, oc));
        }
      }
    }
  }
}

int64_t QConv::c_split_unit(const Node& node) const {
  if (!nhwc_) return 0;
  const Shape x = channels_first(node.inputs[0]->type.dims);
  const std::vector<int64_t> wd = weight_dims(x, node.inputs[1]->type.dims);
  int64_t taps = 1;
  for (size_t d = 2; d < wd.size(); ++d) taps *= wd[d];
  // kiln_qconv's depthwise loops split rows of the image instead (kiln_quant.h).
  const bool depthwise = packed_m_ == 0 && x[1] == group_ && wd[0] == group_ && taps <= 64;
  const int64_t m = node.outputs[0]->type.dims.back();
  return depthwise || m <= 0 ? 0 : m;
}

bool QConv::takes_table(const Node& node) const {
  return nhwc_ && q_.requant && dtype_size(node.outputs[0]->type.dtype) == 1;
}

std::string QConv::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return c_code_with_table(node, names, sub, "");
}

std::string QConv::c_code_with_table(const Node& node, const CodeNames& names, const Sub& sub,
                                     const std::string& table) const {
  if (!table.empty() && !takes_table(node)) {
    throw UserError("qconv: a byte table needs a channels-last convolution with bytes out");
  }
  const Shape x = channels_first(node.inputs[0]->type.dims);
  const std::vector<int64_t> wd = weight_dims(x, node.inputs[1]->type.dims);
  const bool w_u8 = packed_m_ > 0 ? w_u8_ : node.inputs[1]->type.dtype == DType::kUInt8;
  std::string s = "{\n";
  s += quant_c_params(q_, node, names, w_u8);
  if (!table.empty()) s += "  qp.table = (const uint8_t *)(" + table + ");\n";
  s += "  const kiln_window g = " + window_c_init(geometry(x, wd)) + ";\n";
  s += "  if (kiln_qconv(" + sub.ctx + ", KILN_SUPPORT, " + names.inputs[0] + ", " +
       names.inputs[1] + ", " + std::to_string(packed_m_ > 0) + ", " +
       std::to_string((x_nhwc_ ? 1 : 0) | (nhwc_ ? 2 : 0) | (c4_ ? 4 : 0)) + ", &g, " +
       std::to_string(group_) + ", &qp, " + names.outputs[0] + ") != 0) " + sub.fail +
       "(\"integer convolution failed\");\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
