#include "ops/max_unpool.h"

#include <cmath>
#include <limits>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

MaxPoolIndices::MaxPoolIndices(Attrs props) : COp("max_pool_indices", std::move(props)) {
  check_known_attrs(this->props(), {"kernel_shape", "strides", "dilations", "pads", "auto_pad",
                                    "ceil_mode", "column_major"});
  window_ = WindowAttrs::from_props(this->props(), "max_pool_indices");
  column_major_ = attr_int(this->props(), "column_major", 0) != 0;
  if (window_.kernel.empty()) throw AttrError("kernel_shape", "is required (max_pool_indices)");
}

std::vector<WindowDims> MaxPoolIndices::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, std::vector<int64_t>(x.begin() + 2, x.end()), window_.kernel,
                        name());
}

std::vector<TensorType> MaxPoolIndices::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("max_pool_indices takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError("max_pool_indices: " + x.to_string() + " (float32 and float64)");
  if (x.rank() != 3 && x.rank() != 4)
    throw UnsupportedError("max_pool_indices: rank " + std::to_string(x.rank()) +
                           " (1-D and 2-D pooling)");
  for (int d = 2; d < x.rank(); ++d) {
    if (x.dims[static_cast<size_t>(d)] == kDynamic)
      throw UnsupportedError("max_pool_indices: dynamic spatial dimensions in " + x.to_string());
  }
  TensorType out{DType::kInt64, {x.dims[0], x.dims[1]}};
  for (const auto& g : geometry(x.dims)) out.dims.push_back(g.out);
  return {out};
}

std::vector<Shape> MaxPoolIndices::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out{inputs[0][0], inputs[0][1]};
  for (const auto& g : geometry(inputs[0])) out.push_back(g.out);
  return {out};
}

void MaxPoolIndices::perform(const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  auto g = geometry(x.shape());
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const int64_t planes = x.shape()[0] * x.shape()[1], hw = g[0].in * g[1].in;
  int64_t flat = 0;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < g[0].out; ++oy) {
      for (int64_t ox = 0; ox < g[1].out; ++ox, ++flat) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t i = 0; i < g[0].kernel; ++i) {
          const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
          for (int64_t j = 0; j < g[1].kernel; ++j) {
            const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
            if (yy < 0 || yy >= g[0].in || xx < 0 || xx >= g[1].in) continue;
            const double v = x.load(p * hw + yy * g[1].in + xx);
            if (at < 0 || v > best || std::isnan(v)) {
              best = v;
              at = column_major_ ? p * hw + xx * g[0].in + yy : p * hw + yy * g[1].in + xx;
            }
          }
        }
        outputs[0].store_int(flat, at);
      }
    }
  }
}

std::string MaxPoolIndices::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const auto geo = geometry(xt.dims);
  const bool one_d = geo.size() == 1;
  const std::string& X = names.inputs[0];
  const std::string& ctx = sub.ctx;
  const std::string sy = one_d ? "0" : X + "->strides[2]",
                    sx = X + "->strides[" + (one_d ? "2" : "3") + "]";
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geo, sub) + ";\n";
  s += "  const int64_t C = " + X + "->shape[1], planes = " + X + "->shape[0] * C;\n";
  s += "  const int64_t lo = planes * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t hi = planes * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  int64_t *o = (int64_t *)" + names.outputs[0] + "->data + lo * g.oh * g.ow;\n";
  s += "  for (int64_t p = lo; p < hi; ++p) {\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + X + "->data + p / C * " + X +
       "->strides[0] + p % C * " + X + "->strides[1];\n";
  s += "    for (int64_t oy = 0; oy < g.oh; ++oy)\n";
  s += "      for (int64_t ox = 0; ox < g.ow; ++ox) {\n";
  s += "        " + T + " best = -INFINITY;\n";
  s += "        int64_t at = -1;\n";
  s += "        for (int64_t i = 0; i < g.kh; ++i) {\n";
  s += "          const int64_t yy = oy * g.sh - g.ph + i * g.dh;\n";
  s += "          if (yy < 0 || yy >= g.h) continue;\n";
  s += "          for (int64_t j = 0; j < g.kw; ++j) {\n";
  s += "            const int64_t xx = ox * g.sw - g.pw + j * g.dw;\n";
  s += "            if (xx < 0 || xx >= g.w) continue;\n";
  s += "            const " + T + " v = xp[yy * " + sy + " + xx * " + sx + "];\n";
  s += std::string("            if (at < 0 || v > best || v != v) { best = v; at = ") +
       (column_major_ ? "(p * g.w + xx) * g.h + yy" : "(p * g.h + yy) * g.w + xx") + "; }\n";
  s += "          }\n";
  s += "        }\n";
  s += "        *o++ = at;\n";
  s += "      }\n";
  s += "  }\n}\n";
  return s;
}

MaxUnpool::MaxUnpool(Attrs props) : COp("max_unpool", std::move(props)) {
  check_known_attrs(this->props(), {"output", "grid"});
  output_ = attr_ints(this->props(), "output");
  grid_ = attr_ints(this->props(), "grid", output_);
  if (grid_.size() != output_.size())
    throw AttrError("grid", "needs one size per output dimension (max_unpool)");
  for (size_t d = 0; d < output_.size(); ++d) {
    if (output_[d] < 0 || grid_[d] < 0 || grid_[d] > output_[d])
      throw AttrError("output", "sizes must be >= 0 and at least the grid's (max_unpool)");
  }
}

std::vector<TensorType> MaxUnpool::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("max_unpool takes 2 inputs (X, I)");
  const TensorType& x = inputs[0];
  const TensorType& i = inputs[1];
  if (i.dtype != DType::kInt64 || i.rank() != x.rank())
    throw UserError("max_unpool: indices " + i.to_string() + " must be int64 of X's shape " +
                    x.to_string());
  if (x.rank() != static_cast<int>(output_.size()) + 2)
    throw UserError("max_unpool: output has " + std::to_string(output_.size()) +
                    " sizes for input " + x.to_string());
  TensorType out{x.dtype, {x.dims[0], x.dims[1]}};
  out.dims.insert(out.dims.end(), output_.begin(), output_.end());
  return {out};
}

std::vector<Shape> MaxUnpool::infer_shape(const std::vector<Shape>& inputs) const {
  if (inputs[0] != inputs[1])
    throw UserError("max_unpool: indices of shape " + dims_to_string(inputs[1]) + " for X of " +
                    dims_to_string(inputs[0]));
  Shape out{inputs[0][0], inputs[0][1]};
  out.insert(out.end(), output_.begin(), output_.end());
  return {out};
}

void MaxUnpool::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor& y = outputs[0];
  for (int64_t i = 0; i < y.numel(); ++i) y.store(i, 0.0);
  const int64_t planes = y.shape()[0] * y.shape()[1];
  int64_t grid = 1, out = 1;
  for (size_t d = 0; d < grid_.size(); ++d) {
    grid *= grid_[d];
    out *= output_[d];
  }
  for (int64_t e = 0; e < inputs[0].numel(); ++e) {
    const int64_t at = inputs[1].load_int(e);
    if (at < 0 || at >= planes * grid) {
      throw UserError("max_unpool: index " + std::to_string(at) + " of element " +
                      std::to_string(e) + " is outside the pooled grid's " +
                      std::to_string(planes * grid) + " elements");
    }
    int64_t rem = at % grid, to = 0, stride = 1;
    for (size_t d = grid_.size(); d-- > 0;) {
      to += rem % grid_[d] * stride;
      rem /= grid_[d];
      stride *= output_[d];
    }
    y.store(at / grid * out + to, inputs[0].load(e));
  }
}

std::string MaxUnpool::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  // Elements in row-major order, read through the inputs' strides.
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const int r = xt.rank();
  const std::string& X = names.inputs[0];
  const std::string& I = names.inputs[1];
  const std::string& Y = names.outputs[0];
  std::string s = "{\n";
  std::string grid, out;
  for (size_t d = 0; d < grid_.size(); ++d) {
    grid += (d ? ", " : "") + std::to_string(grid_[d]);
    out += (d ? ", " : "") + std::to_string(output_[d]);
  }
  const std::string k = std::to_string(grid_.size());
  s += "  const int64_t u_grid[" + k + "] = {" + grid + "}, u_outd[" + k + "] = {" + out + "};\n";
  s += "  int64_t u_g = 1, u_o = 1;\n";
  s += "  for (int d = 0; d < " + k + "; ++d) { u_g *= u_grid[d]; u_o *= u_outd[d]; }\n";
  s += "  " + T + " *y = (" + T + " *)" + Y + "->data;\n";
  s += "  int64_t u_out = 1, u_in = 1;\n";
  s += "  for (int d = 0; d < " + std::to_string(r) + "; ++d) { u_out *= " + Y +
       "->shape[d]; u_in *= " + X + "->shape[d]; }\n";
  s += "  const int64_t u_cells = u_out / (u_o ? u_o : 1) * u_g;\n";
  s += "  for (int64_t k = 0; k < u_out; ++k) y[k] = 0;\n";
  s += "  for (int64_t e = 0; e < u_in; ++e) {\n";
  s += "    int64_t rem = e, xo = 0, io = 0;\n";
  s += "    for (int d = " + std::to_string(r - 1) + "; d >= 0; --d) {\n";
  s += "      const int64_t c = rem % " + X + "->shape[d];\n";
  s += "      rem /= " + X + "->shape[d];\n";
  s += "      xo += c * " + X + "->strides[d];\n";
  s += "      io += c * " + I + "->strides[d];\n";
  s += "    }\n";
  s += "    const int64_t at = ((const int64_t *)" + I + "->data)[io];\n";
  s += "    if (at < 0 || at >= u_cells) " + sub.fail +
       "(\"max_unpool: index %lld of element %lld is outside the pooled grid's %lld "
       "elements\", (long long)at, (long long)e, (long long)u_cells);\n";
  // The index's place in the grid, moved to the same place in the (padded) output.
  s += "    int64_t g_rem = at % u_g, to = 0, g_stride = 1;\n";
  s += "    for (int d = " + k +
       " - 1; d >= 0; --d) { to += g_rem % u_grid[d] * g_stride; "
       "g_rem /= u_grid[d]; g_stride *= u_outd[d]; }\n";
  s += "    y[at / u_g * u_o + to] = ((const " + T + " *)" + X + "->data)[xo];\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln
