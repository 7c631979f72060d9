#include "ops/pool_nchwc.h"

#include <cmath>
#include <limits>

#include "ops/c/workspace.h"
#include "ops/conv_nchwc.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

MaxPoolNchwc::MaxPoolNchwc(Attrs props) : COp("max_pool_nchwc", std::move(props)) {
  check_known_attrs(this->props(), {"kernel_shape", "strides", "pads"});
  kernel_ = attr_ints(this->props(), "kernel_shape");
  strides_ = attr_ints(this->props(), "strides");
  pads_ = attr_ints(this->props(), "pads");
  if (kernel_.size() != 2 || strides_.size() != 2 || pads_.size() != 4) {
    throw AttrError("kernel_shape", "max_pool_nchwc takes 2 kernel, 2 stride and 4 pad values");
  }
  for (size_t d = 0; d < 2; ++d) {
    if (kernel_[d] < 1 || strides_[d] < 1) throw AttrError("kernel_shape", "must be >= 1");
  }
  for (int64_t p : pads_) {
    if (p < 0) throw AttrError("pads", "must be >= 0");
  }
}

Shape MaxPoolNchwc::out_shape(const Shape& x) const {
  const int64_t oh = (x[2] + pads_[0] + pads_[2] - kernel_[0]) / strides_[0] + 1;
  const int64_t ow = (x[3] + pads_[1] + pads_[3] - kernel_[1]) / strides_[1] + 1;
  return {x[0], x[1], oh, ow, kNchwcBlock};
}

std::vector<TensorType> MaxPoolNchwc::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("max_pool_nchwc takes one input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 || x.rank() != 5 || x.dims[4] != kNchwcBlock ||
      x.dims[2] == kDynamic || x.dims[3] == kDynamic) {
    throw UserError("max_pool_nchwc: input " + x.to_string() +
                    " is not float32 (N, C/8, H, W, 8) with static H and W");
  }
  const Shape out = out_shape(x.dims);
  if (out[2] < 1 || out[3] < 1) {
    throw UserError("max_pool_nchwc: a " + dims_to_string(kernel_) + " window does not fit " +
                    x.to_string());
  }
  return {TensorType{x.dtype, out}};
}

std::vector<Shape> MaxPoolNchwc::infer_shape(const std::vector<Shape>& inputs) const {
  return {out_shape(inputs[0])};
}

void MaxPoolNchwc::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Shape& s = x.shape();
  const Shape o = out_shape(s);
  int64_t flat = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t cb = 0; cb < s[1]; ++cb)
      for (int64_t oy = 0; oy < o[2]; ++oy)
        for (int64_t ox = 0; ox < o[3]; ++ox)
          for (int64_t k = 0; k < kNchwcBlock; ++k, ++flat) {
            double m = -std::numeric_limits<double>::infinity();
            for (int64_t i = 0; i < kernel_[0]; ++i) {
              const int64_t iy = oy * strides_[0] - pads_[0] + i;
              if (iy < 0 || iy >= s[2]) continue;
              for (int64_t j = 0; j < kernel_[1]; ++j) {
                const int64_t ix = ox * strides_[1] - pads_[1] + j;
                if (ix < 0 || ix >= s[3]) continue;
                const double v = x.load((((n * s[1] + cb) * s[2] + iy) * s[3] + ix) * 8 + k);
                if (v > m || std::isnan(v)) m = v;
              }
            }
            outputs[0].store(flat, m);
          }
}

std::string MaxPoolNchwc::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const Shape& s = node.inputs[0]->type.dims;
  const Shape o = out_shape(s);
  auto v = [&](int64_t n, std::string_view name) { return sub.value(n, name); };
  const std::string& x = names.inputs[0];
  const std::string& ctx = sub.ctx;
  std::string c = "{\n";
  c += "  int64_t r0, r1, c0, c1;\n";
  c += "  kiln_tile_part(" + v(s[1], "c_blocks") + ", " + v(o[2], "out_h") + ", 1, 1, " + ctx + "->part, " + ctx +
       "->n_parts, &r0, &r1, &c0, &c1);\n";
  c += "  const float *xd = (const float *)" + x + "->data;\n";
  c += "  {\n    int dense = 1;\n    int64_t c = 1, n = 1;\n";
  c += "    for (int d = 4; d >= 0; --d) {\n";
  c += "      if (" + x + "->shape[d] != 1 && " + x + "->strides[d] != c) dense = 0;\n";
  c += "      c *= " + x + "->shape[d];\n      n *= " + x + "->shape[d];\n    }\n";
  c += "    if (!dense && r0 < r1 && c0 < c1) {\n";
  c += c_workspace("float", "copy", "n", "max_pool_nchwc's dense input");
  c += "      kiln_copy_strided(copy, " + x + "->data, 5, " + x + "->shape, " + x +
       "->strides, sizeof(float));\n";
  c += "      xd = copy;\n    }\n  }\n";
  c += "  if (r0 < r1 && c0 < c1)\n";
  c += "    for (int64_t n = 0; n < " + x + "->shape[0]; ++n)\n";
  c += "      kiln_nchwc_max_pool(xd + n * " + v(s[1] * s[2] * s[3] * kNchwcBlock, "img_in") + ", " +
       v(s[2], "in_h") + ", " + v(s[3], "in_w") + ", (float *)" + names.outputs[0] + "->data + n * " +
       v(s[1] * o[2] * o[3] * kNchwcBlock, "img_out") + ", " + v(o[2], "out_h") + ", " + v(o[3], "out_w") + ", " +
       v(kernel_[0], "kernel_h") + ", " + v(kernel_[1], "kernel_w") + ", " + v(strides_[0], "stride_h") + ", " + v(strides_[1], "stride_w") + ", " +
       v(pads_[0], "pad_top") + ", " + v(pads_[1], "pad_left") + ", r0, r1, c0, c1);\n";
  c += "}\n";
  return c;
}

}  // namespace kiln
