#include "ops/scatter_gather.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

const std::vector<std::string> kReductions{"none", "add", "mul", "max", "min"};

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < s.size(); ++d) p *= s[d];
  return p;
}

void check_index_type(const TensorType& t, const std::string& what) {
  if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64)
    throw UserError(what + ": indices must be int32 or int64, got " + t.to_string());
}

// A checked, wrapped index (negative from the end).
int64_t wrap(int64_t i, int64_t dim, const std::string& what) {
  if (i < -dim || i >= dim) {
    throw UserError(what + ": index " + std::to_string(i) +
                    " is out of range for a dimension of size " + std::to_string(dim));
  }
  return i < 0 ? i + dim : i;
}

double combine(int reduction, double o, double u) {
  switch (reduction) {
    case 1:
      return o + u;
    case 2:
      return o * u;
    case 3:
      return std::max(o, u);
    case 4:
      return std::min(o, u);
    default:
      return u;
  }
}

// C: `dst = combine(dst, src)` for the reduction.
std::string c_combine(int reduction, const std::string& dst, const std::string& src) {
  switch (reduction) {
    case 1:
      return dst + " = " + dst + " + " + src + ";";
    case 2:
      return dst + " = " + dst + " * " + src + ";";
    case 3:
      return dst + " = " + dst + " > " + src + " ? " + dst + " : " + src + ";";
    case 4:
      return dst + " = " + dst + " < " + src + " ? " + dst + " : " + src + ";";
    default:
      return dst + " = " + src + ";";
  }
}

// C: a contiguous copy of input k as `name` (its element type `ct`), its element count in n_name.
std::string c_contiguous(const Node& node, const CodeNames& names, const Sub& sub, size_t k,
                         const std::string& name) {
  const auto& t = node.inputs[k]->type;
  const std::string ct(dtype_c_type(t.dtype)), in = names.inputs[k], r = std::to_string(t.rank());
  std::string s = "  int64_t n_" + name + " = 1;\n  for (int d = 0; d < " + r + "; ++d) n_" + name +
                  " *= " + in + "->shape[d];\n";
  s += c_workspace(ct, name, "n_" + name, node.op->name() + "'s dense " + name);
  s += "  kiln_copy_strided(" + name + ", " + in + "->data, " + r + ", " + in + "->shape, " + in +
       "->strides, sizeof(" + ct + "));\n";
  return s;
}

std::string c_wrap(const std::string& v, const std::string& dim, const Sub& sub,
                   const std::string& what) {
  return "    if (" + v + " < -(" + dim + ") || " + v + " >= " + dim + ") " + sub.fail + "(\"" +
         what + ": index %lld is out of range for a dimension of size %lld\", (long long)" + v +
         ", (long long)(" + dim + "));\n    if (" + v + " < 0) " + v + " += " + dim + ";\n";
}

}  // namespace

GatherND::GatherND(Attrs props) : COp("gather_nd", std::move(props)) {
  check_known_attrs(this->props(), {"batch_dims"});
  batch_dims_ = attr_int(this->props(), "batch_dims", 0);
  if (batch_dims_ < 0) throw AttrError("batch_dims", "must not be negative");
}

std::vector<TensorType> GatherND::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("gather_nd takes 2 inputs (data, indices)");
  const auto &data = inputs[0], &idx = inputs[1];
  check_index_type(idx, "gather_nd");
  const auto b = static_cast<size_t>(batch_dims_);
  if (idx.rank() < 1 || static_cast<size_t>(idx.rank()) <= b ||
      static_cast<size_t>(data.rank()) <= b)
    throw UserError("gather_nd: ranks of data " + data.to_string() + " and indices " +
                    idx.to_string() + " do not fit batch_dims");
  const int64_t k = idx.dims.back();
  if (k == kDynamic) throw UserError("gather_nd: the indices' last dimension must be known");
  if (static_cast<size_t>(k) + b > static_cast<size_t>(data.rank()))
    throw UserError("gather_nd: index tuples of " + std::to_string(k) + " exceed data " +
                    data.to_string());
  TensorType out{data.dtype, {}};
  out.dims.insert(out.dims.end(), idx.dims.begin(), idx.dims.end() - 1);
  out.dims.insert(out.dims.end(), data.dims.begin() + static_cast<int64_t>(b) + k, data.dims.end());
  return {out};
}

std::vector<Shape> GatherND::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape &data = inputs[0], &idx = inputs[1];
  const auto b = static_cast<size_t>(batch_dims_);
  for (size_t d = 0; d < b; ++d) {
    if (data[d] != idx[d])
      throw UserError("gather_nd: batch dimensions of " + dims_to_string(data) + " and " +
                      dims_to_string(idx) + " differ");
  }
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + static_cast<int64_t>(b) + idx.back(), data.end());
  return {out};
}

void GatherND::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor &data = inputs[0], &idx = inputs[1];
  const Shape &ds = data.shape(), &is = idx.shape();
  const auto b = static_cast<size_t>(batch_dims_);
  const int64_t k = is.back(), batch = prod(ds, 0, b), per = prod(is, b, is.size() - 1);
  const int64_t slice = prod(ds, b + static_cast<size_t>(k), ds.size()),
                block = prod(ds, b, ds.size());
  for (int64_t bt = 0; bt < batch; ++bt) {
    for (int64_t j = 0; j < per; ++j) {
      int64_t off = bt * block;
      for (int64_t t = 0; t < k; ++t) {
        const int64_t dim = ds[b + static_cast<size_t>(t)];
        off += wrap(idx.load_int((bt * per + j) * k + t), dim, "gather_nd") *
               prod(ds, b + static_cast<size_t>(t) + 1, ds.size());
      }
      for (int64_t e = 0; e < slice; ++e) {
        const int64_t dst = (bt * per + j) * slice + e;
        is_float(data.dtype()) ? outputs[0].store(dst, data.load(off + e))
                               : outputs[0].store_int(dst, data.load_int(off + e));
      }
    }
  }
}

std::string GatherND::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& dt = node.inputs[0]->type;
  const int dr = dt.rank(), ir = node.inputs[1]->type.rank();
  const std::string T(dtype_c_type(dt.dtype)), b = std::to_string(batch_dims_);
  const std::string &data = names.inputs[0], &ix = names.inputs[1];
  std::string s =
      "{\n" + c_contiguous(node, names, sub, 0, "x") + c_contiguous(node, names, sub, 1, "ix");
  s += "  const int64_t k = " + ix + "->shape[" + std::to_string(ir - 1) + "];\n";
  s += "  int64_t batch = 1, per = 1, slice = 1, block = 1, stride[" + std::to_string(dr) + "];\n";
  s += "  for (int d = 0; d < " + b + "; ++d) batch *= " + data + "->shape[d];\n";
  s += "  for (int d = " + b + "; d < " + std::to_string(ir - 1) + "; ++d) per *= " + ix +
       "->shape[d];\n";
  s += "  for (int d = " + b + "; d < " + std::to_string(dr) + "; ++d) block *= " + data +
       "->shape[d];\n";
  s += "  for (int d = " + b + " + (int)k; d < " + std::to_string(dr) + "; ++d) slice *= " + data +
       "->shape[d];\n";
  s += "  { int64_t st = 1; for (int d = " + std::to_string(dr - 1) +
       "; d >= 0; --d) { stride[d] = st; st *= " + data + "->shape[d]; } }\n";
  s += "  " + T + " *y = (" + T + " *)" + names.outputs[0] + "->data;\n";
  s += "  for (int64_t bt = 0; bt < batch; ++bt) for (int64_t j = 0; j < per; ++j) {\n";
  s += "    int64_t off = bt * block;\n    for (int64_t t = 0; t < k; ++t) {\n";
  s += "      int64_t v = (int64_t)ix[(bt * per + j) * k + t];\n      const int64_t dim = " + data +
       "->shape[" + b + " + t];\n";
  s += c_wrap("v", "dim", sub, "gather_nd");
  s += "      off += v * stride[" + b + " + t];\n    }\n";
  s += "    memcpy(y + (bt * per + j) * slice, x + off, (size_t)slice * sizeof(" + T +
       "));\n  }\n}\n";
  return s;
}

Scatter::Scatter(bool elements, Attrs props)
    : COp(elements ? "scatter_elements" : "scatter_nd", std::move(props)), elements_(elements) {
  check_known_attrs(this->props(), elements ? std::vector<std::string>{"axis", "reduction"}
                                            : std::vector<std::string>{"reduction"});
  if (elements) axis_ = attr_int(this->props(), "axis", 0);
  const std::string r = attr_string(this->props(), "reduction", std::string("none"));
  auto it = std::find(kReductions.begin(), kReductions.end(), r);
  if (it == kReductions.end())
    throw AttrError("reduction", "'" + r + "' is not one of " + join(kReductions, ", "));
  reduction_ = static_cast<int>(it - kReductions.begin());
}

std::vector<TensorType> Scatter::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 3) throw UserError(name() + " takes 3 inputs (data, indices, updates)");
  const auto &data = inputs[0], &idx = inputs[1], &upd = inputs[2];
  check_index_type(idx, name());
  if (upd.dtype != data.dtype)
    throw UserError(name() + ": updates " + upd.to_string() + " must have data's dtype " +
                    data.to_string());
  if (data.dtype == DType::kBool && reduction_ != 0)
    throw UserError(name() + ": a reduction over bool data");
  if (elements_) {
    normalize_axis(axis_, data.rank(), "scatter_elements");
    if (idx.rank() != data.rank() || upd.rank() != idx.rank())
      throw UserError("scatter_elements: data, indices and updates must have one rank");
  } else if (idx.rank() < 1 || idx.dims.back() == kDynamic || idx.dims.back() > data.rank()) {
    throw UserError("scatter_nd: indices " + idx.to_string() + " do not index data " +
                    data.to_string());
  }
  return {data};
}

std::vector<Shape> Scatter::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape &data = inputs[0], &idx = inputs[1], &upd = inputs[2];
  if (elements_) {
    if (idx != upd)
      throw UserError("scatter_elements: indices " + dims_to_string(idx) + " and updates " +
                      dims_to_string(upd) + " differ");
  } else {
    Shape want(idx.begin(), idx.end() - 1);
    want.insert(want.end(), data.begin() + idx.back(), data.end());
    if (upd != want)
      throw UserError("scatter_nd: updates " + dims_to_string(upd) + ", expected " +
                      dims_to_string(want));
  }
  return {data};
}

void Scatter::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor &data = inputs[0], &idx = inputs[1], &upd = inputs[2];
  Tensor& out = outputs[0];
  const Shape& ds = data.shape();
  const bool fl = is_float(data.dtype());
  for (int64_t i = 0; i < out.numel(); ++i)
    fl ? out.store(i, data.load(i)) : out.store_int(i, data.load_int(i));
  auto apply1 = [&](int64_t dst, int64_t src) {
    if (fl) {
      out.store(dst, combine(reduction_, out.load(dst), upd.load(src)));
    } else {
      const int64_t o = out.load_int(dst), u = upd.load_int(src);
      out.store_int(dst, reduction_ == 0   ? u
                         : reduction_ == 1 ? o + u
                         : reduction_ == 2 ? o * u
                         : reduction_ == 3 ? std::max(o, u)
                                           : std::min(o, u));
    }
  };
  if (elements_) {
    const auto axis = static_cast<size_t>(normalize_axis(axis_, data.ndim(), "scatter_elements"));
    Shape at(ds.size(), 0);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t dst = 0;
      for (size_t d = 0; d < ds.size(); ++d) {
        const int64_t c = d == axis ? wrap(idx.load_int(i), ds[d], "scatter_elements") : at[d];
        dst += c * prod(ds, d + 1, ds.size());
      }
      apply1(dst, i);
      for (size_t d = at.size(); d-- > 0;) {
        if (++at[d] < idx.shape()[d]) break;
        at[d] = 0;
      }
    }
    return;
  }
  const int64_t k = idx.shape().back(), n = idx.numel() / std::max<int64_t>(k, 1);
  const int64_t slice = prod(ds, static_cast<size_t>(k), ds.size());
  for (int64_t j = 0; j < (k == 0 ? prod(idx.shape(), 0, idx.shape().size() - 1) : n); ++j) {
    int64_t off = 0;
    for (int64_t t = 0; t < k; ++t) {
      off += wrap(idx.load_int(j * k + t), ds[static_cast<size_t>(t)], "scatter_nd") *
             prod(ds, static_cast<size_t>(t) + 1, ds.size());
    }
    for (int64_t e = 0; e < slice; ++e) apply1(off + e, j * slice + e);
  }
}

// scatter_elements where indices, updates and data are contiguous and indices and updates
// cover data but along the axis (PyTorch's scatter with an expanded index): each part takes
// a run of the (outer, inner) columns around the axis, copies data's column into Y and
// applies the column's updates in order. Columns never share an element, so the parts
// need no order between them. `fallback` (the one-part code) runs otherwise, in part 0.
std::string scatter_elements_columns(const CodeNames& names, const Sub& sub, const std::string& T,
                                     const std::string& IT, int rank, int axis, int reduction,
                                     const std::string& fallback) {
  const std::string &data = names.inputs[0], &ix = names.inputs[1], &up = names.inputs[2];
  const std::string& out = names.outputs[0];
  const std::string r = std::to_string(rank), a = std::to_string(axis), &ctx = sub.ctx;
  std::string s = "  int se_fast = 1;\n  int64_t se_outer = 1, se_inner = 1;\n";
  s += "  {\n    int64_t sd = 1, si = 1;\n";
  s += "    for (int d = " + r + " - 1; d >= 0; --d) {\n";
  s += "      if (d != " + a + ") se_fast &= " + ix + "->shape[d] == " + data + "->shape[d];\n";
  s += "      se_fast &= " + up + "->shape[d] == " + ix + "->shape[d];\n";
  s += "      se_fast &= (" + data + "->shape[d] == 1 || " + data + "->strides[d] == sd) && (" +
       ix + "->shape[d] == 1 || (" + ix + "->strides[d] == si && " + up + "->strides[d] == si));\n";
  s += "      sd *= " + data + "->shape[d];\n      si *= " + ix + "->shape[d];\n";
  s += "      if (d < " + a + ") se_outer *= " + data + "->shape[d];\n";
  s += "      if (d > " + a + ") se_inner *= " + data + "->shape[d];\n    }\n  }\n";
  // An empty run of columns takes the general code (no division by an empty inner size).
  s += "  se_fast &= se_outer > 0 && se_inner > 0;\n";
  s += "  if (!se_fast) {\n    if (" + ctx + "->part == 0) " + fallback + "\n  } else {\n";
  s += "  const int64_t se_dlen = " + data + "->shape[" + a + "], se_ilen = " + ix + "->shape[" +
       a + "];\n";
  s += "  const int64_t se_cols = se_outer * se_inner;\n";
  s += "  const int64_t se_c0 = se_cols * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t se_c1 = se_cols * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  " + T + " *y = (" + T + " *)" + out + "->data;\n";
  s += "  const " + T + " *x = (const " + T + " *)" + data + "->data;\n";
  s += "  const " + IT + " *ix = (const " + IT + " *)" + ix + "->data;\n";
  s += "  const " + T + " *u = (const " + T + " *)" + up + "->data;\n";
  s += "  for (int64_t o = se_c0 / se_inner; o * se_inner < se_c1; ++o) {\n";
  s += "    const int64_t lo = o * se_inner > se_c0 ? 0 : se_c0 - o * se_inner;\n";
  s += "    const int64_t hi = (o + 1) * se_inner < se_c1 ? se_inner : se_c1 - o * se_inner;\n";
  s += "    for (int64_t j = 0; j < se_dlen; ++j)\n";
  s += "      memcpy(y + (o * se_dlen + j) * se_inner + lo, x + (o * se_dlen + j) * se_inner + lo, "
       "(size_t)(hi - lo) * sizeof(" +
       T + "));\n";
  s += "    for (int64_t j = 0; j < se_ilen; ++j) {\n";
  s += "      const int64_t row = (o * se_ilen + j) * se_inner;\n";
  s += "      for (int64_t in = lo; in < hi; ++in) {\n        int64_t v = (int64_t)ix[row + in];\n";
  std::string wrap = c_wrap("v", "se_dlen", sub, "scatter_elements");
  s += wrap;
  s += "        " + c_combine(reduction, "y[(o * se_dlen + v) * se_inner + in]", "u[row + in]") +
       "\n      }\n    }\n  }\n  }\n";
  return s;
}

std::string Scatter::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& dt = node.inputs[0]->type;
  const int dr = dt.rank();
  const std::string T(dtype_c_type(dt.dtype));
  if (elements_ && dr > 0) {
    // The one-part code, as a block, for the fallback.
    const std::string fallback = c_code_one(node, names, sub);
    return "{\n" +
           scatter_elements_columns(
               names, sub, T, std::string(dtype_c_type(node.inputs[1]->type.dtype)), dr,
               normalize_axis(axis_, dr, "scatter_elements"), reduction_, fallback) +
           "}\n";
  }
  return c_code_one(node, names, sub);
}

std::string Scatter::c_code_one(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& dt = node.inputs[0]->type;
  const int dr = dt.rank(), ir = node.inputs[1]->type.rank();
  const std::string T(dtype_c_type(dt.dtype)), r = std::to_string(dr);
  const std::string &data = names.inputs[0], &ix = names.inputs[1], &out = names.outputs[0];
  std::string s =
      "{\n" + c_contiguous(node, names, sub, 1, "ix") + c_contiguous(node, names, sub, 2, "u");
  s += "  " + T + " *y = (" + T + " *)" + out + "->data;\n";
  s += "  kiln_copy_strided(y, " + data + "->data, " + r + ", " + data + "->shape, " + data +
       "->strides, sizeof(" + T + "));\n";
  s += "  int64_t stride[" + std::to_string(std::max(dr, 1)) + "];\n";
  s += "  { int64_t st = 1; for (int d = " + std::to_string(dr - 1) +
       "; d >= 0; --d) { stride[d] = st; st *= " + data + "->shape[d]; } }\n";
  if (elements_) {
    const std::string ax = std::to_string(normalize_axis(axis_, dr, "scatter_elements"));
    s += "  int64_t at[" + r + "] = {0};\n";
    s += "  for (int64_t i = 0; i < n_ix; ++i) {\n    int64_t v = (int64_t)ix[i];\n";
    s += c_wrap("v", data + "->shape[" + ax + "]", sub, "scatter_elements");
    s += "    int64_t dst = 0;\n    for (int d = 0; d < " + r + "; ++d) dst += (d == " + ax +
         " ? v : at[d]) * stride[d];\n";
    s += "    " + c_combine(reduction_, "y[dst]", "u[i]") + "\n";
    s += "    for (int d = " + std::to_string(dr - 1) + "; d >= 0; --d) { if (++at[d] < " + ix +
         "->shape[d]) break; at[d] = 0; }\n  }\n}\n";
    return s;
  }
  s += "  const int64_t k = " + ix + "->shape[" + std::to_string(ir - 1) + "];\n";
  s += "  int64_t slice = 1, n = 1;\n  for (int d = (int)k; d < " + r + "; ++d) slice *= " + data +
       "->shape[d];\n";
  s += "  for (int d = 0; d < " + std::to_string(ir - 1) + "; ++d) n *= " + ix + "->shape[d];\n";
  s += "  for (int64_t j = 0; j < n; ++j) {\n    int64_t off = 0;\n";
  s += "    for (int64_t t = 0; t < k; ++t) {\n      int64_t v = (int64_t)ix[j * k + t];\n";
  s += c_wrap("v", data + "->shape[t]", sub, "scatter_nd");
  s += "      off += v * stride[t];\n    }\n";
  s += "    for (int64_t e = 0; e < slice; ++e) { " +
       c_combine(reduction_, "y[off + e]", "u[j * slice + e]") + " }\n  }\n}\n";
  return s;
}

}  // namespace kiln
