#include "ops/reduce.h"

#include <cmath>
#include <limits>

#include "ops/broadcast.h"
#include "ops/elementwise_loop.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

std::string Reduce::op_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "reduce_sum";
    case ReduceKind::kMean: return "reduce_mean";
    case ReduceKind::kMax: return "reduce_max";
    case ReduceKind::kMin: return "reduce_min";
    case ReduceKind::kProd: return "reduce_prod";
  }
  return "?";
}

Reduce::Reduce(ReduceKind kind, Attrs props) : COp(op_name(kind), std::move(props)), kind_(kind) {
  check_known_attrs(this->props(), {"axes", "keepdims"});
  axes_ = attr_ints(this->props(), "axes", std::vector<int64_t>{});
  keepdims_ = attr_int(this->props(), "keepdims", 1) != 0;
}

std::vector<bool> Reduce::reduced_mask(int rank) const {
  std::vector<bool> mask(static_cast<size_t>(rank), axes_.empty());
  for (int64_t a : axes_) {
    int ax = normalize_axis(a, rank, name());
    if (mask[static_cast<size_t>(ax)] && !axes_.empty()) {
      throw UserError(name() + ": axis " + std::to_string(a) + " listed twice");
    }
    mask[static_cast<size_t>(ax)] = true;
  }
  return mask;
}

std::vector<TensorType> Reduce::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const TensorType& in = inputs[0];
  if (in.dtype == DType::kBool || in.dtype == DType::kFloat16 || in.dtype == DType::kBFloat16) {
    throw UserError(name() + ": " + std::string(dtype_name(in.dtype)) + " is not supported");
  }
  if (kind_ == ReduceKind::kMean && !is_float(in.dtype)) {
    throw UserError(name() + " requires a floating dtype, got " + std::string(dtype_name(in.dtype)));
  }
  if (in.rank() > 16) throw UserError(name() + ": rank > 16");
  auto mask = reduced_mask(in.rank());
  TensorType out{in.dtype, {}};
  for (int d = 0; d < in.rank(); ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      out.dims.push_back(in.dims[static_cast<size_t>(d)]);
    } else if (keepdims_) {
      out.dims.push_back(1);
    }
  }
  return {out};
}

std::vector<Shape> Reduce::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& in = inputs.at(0);
  auto mask = reduced_mask(static_cast<int>(in.size()));
  Shape out;
  bool empty_reduction = false;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!mask[d]) {
      out.push_back(in[d]);
    } else {
      if (in[d] == 0) empty_reduction = true;
      if (keepdims_) out.push_back(1);
    }
  }
  if (empty_reduction && (kind_ == ReduceKind::kMax || kind_ == ReduceKind::kMin) &&
      shape_numel(out) > 0) {
    throw UserError(name() + ": reduction over an empty dimension of shape " +
                    dims_to_string(in) + " has no identity");
  }
  return {out};
}

void Reduce::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs.at(0);
  Tensor& out = outputs.at(0);
  auto mask = reduced_mask(in.ndim());
  const bool ints = is_integer(in.dtype());
  double init = 0;
  if (kind_ == ReduceKind::kProd) init = 1;
  if (kind_ == ReduceKind::kMax) init = -std::numeric_limits<double>::infinity();
  if (kind_ == ReduceKind::kMin) init = std::numeric_limits<double>::infinity();
  std::vector<double> acc(static_cast<size_t>(out.numel()), init);
  std::vector<int64_t> acci(static_cast<size_t>(out.numel()), kind_ == ReduceKind::kProd ? 1 : 0);
  std::vector<bool> seen(static_cast<size_t>(out.numel()), false);
  // Output strides over the input's dimensions: 0 where reduced.
  Shape out_stride(in.shape().size(), 0);
  {
    int64_t s = 1;
    for (size_t d = in.shape().size(); d-- > 0;) {
      if (mask[d]) continue;
      out_stride[d] = s;
      s *= in.shape()[d];
    }
  }
  for (int64_t i = 0; i < in.numel(); ++i) {
    int64_t rem = i, o = 0;
    for (size_t d = in.shape().size(); d-- > 0;) {
      o += (rem % in.shape()[d]) * out_stride[d];
      rem /= in.shape()[d];
    }
    auto oi = static_cast<size_t>(o);
    if (ints) {
      int64_t x = in.load_int(i);
      switch (kind_) {
        case ReduceKind::kSum:
        case ReduceKind::kMean: acci[oi] += x; break;
        case ReduceKind::kProd: acci[oi] *= x; break;
        case ReduceKind::kMax: acci[oi] = seen[oi] ? std::max(acci[oi], x) : x; break;
        case ReduceKind::kMin: acci[oi] = seen[oi] ? std::min(acci[oi], x) : x; break;
      }
      seen[oi] = true;
      continue;
    }
    double x = in.load(i);
    double& a = acc[oi];
    switch (kind_) {
      case ReduceKind::kSum:
      case ReduceKind::kMean: a += x; break;
      case ReduceKind::kProd: a *= x; break;
      case ReduceKind::kMax: a = (x > a || x != x) ? x : a; break;
      case ReduceKind::kMin: a = (x < a || x != x) ? x : a; break;
    }
  }
  const int64_t count = out.numel() ? in.numel() / out.numel() : 0;
  for (int64_t o = 0; o < out.numel(); ++o) {
    auto oi = static_cast<size_t>(o);
    if (ints) {
      out.store_int(o, acci[oi]);
    } else if (kind_ == ReduceKind::kMean) {
      out.store(o, count ? acc[oi] / static_cast<double>(count) : std::nan(""));
    } else {
      out.store(o, acc[oi]);
    }
  }
}

bool Reduce::c_splittable(const Node& node) const {
  for (bool reduced : reduced_mask(node.inputs[0]->type.rank())) {
    if (!reduced) return true;
  }
  return false;
}

std::string Reduce::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& in_type = node.inputs[0]->type;
  const int rank = in_type.rank();
  const auto mask = reduced_mask(rank);
  const DType dt = in_type.dtype;
  const std::string T(dtype_c_type(dt));
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  std::string identity, combine;
  const bool fl = is_float(dt);
  switch (kind_) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      identity = "0";
      combine = "a + x";
      break;
    case ReduceKind::kProd:
      identity = "1";
      combine = "a * x";
      break;
    case ReduceKind::kMax:
      identity = fl ? "-INFINITY" : (dt == DType::kUInt8 ? "0" : std::string(dt == DType::kInt8 ? "INT8_MIN" : dt == DType::kInt32 ? "INT32_MIN" : "INT64_MIN"));
      combine = fl ? "((x > a || x != x) ? x : a)" : "(x > a ? x : a)";
      break;
    case ReduceKind::kMin:
      identity = fl ? "INFINITY" : (dt == DType::kUInt8 ? "UINT8_MAX" : std::string(dt == DType::kInt8 ? "INT8_MAX" : dt == DType::kInt32 ? "INT32_MAX" : "INT64_MAX"));
      combine = fl ? "((x < a || x != x) ? x : a)" : "(x < a ? x : a)";
      break;
  }
  // Input dimension d maps to output stride st[0][d] (0 when reduced): one pass over the
  // input accumulates into the output, whatever the axes and strides.
  std::vector<int> out_dim(static_cast<size_t>(rank), -1);
  int od = 0;
  for (int d = 0; d < rank; ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      out_dim[static_cast<size_t>(d)] = od++;
    } else if (keepdims_) {
      ++od;
    }
  }
  const std::string R = std::to_string(rank);
  const std::string& ctx = sub.ctx;
  std::string s = "{\n";
  s += "  " + T + " *restrict po = (" + T + " *)" + out + "->data;\n";
  s += "  const " + T + " *restrict pi = (const " + T + " *)" + in + "->data;\n";
  s += "  int64_t n_out = 1, n_in = 1;\n";
  s += "  for (int d = 0; d < " + out + "->ndim; ++d) n_out *= " + out + "->shape[d];\n";
  s += "  for (int d = 0; d < " + R + "; ++d) n_in *= " + in + "->shape[d];\n";
  // [ob, oe): the outputs this part owns; it initialises, accumulates and scales only those.
  s += "  int64_t ob = 0, oe = 0;\n";
  s += "  if (n_in == 0 || n_out == 0) {\n";
  s += "    if (" + ctx + "->part == 0) oe = n_out;\n";
  s += "    for (int64_t i = ob; i < oe; ++i) po[i] = (" + T + ")" + identity + ";\n";
  s += "  } else {\n";
  s += "    int64_t shp[KILN_MAX_DIMS];\n";
  s += "    int64_t st[2][KILN_MAX_DIMS];\n";
  s += "    int64_t ost[KILN_MAX_DIMS];\n";
  s += "    int64_t c = 1;\n";
  s += "    for (int d = " + out + "->ndim - 1; d >= 0; --d) {\n";
  s += "      ost[d] = c;\n";
  s += "      c *= " + out + "->shape[d];\n";
  s += "    }\n";
  for (int d = 0; d < rank; ++d) {
    std::string ds = std::to_string(d);
    int o = out_dim[static_cast<size_t>(d)];
    s += "    shp[" + ds + "] = " + in + "->shape[" + ds + "];\n";
    s += "    st[0][" + ds + "] = " + (o < 0 ? std::string("0") : "ost[" + std::to_string(o) + "]") + ";\n";
    s += "    st[1][" + ds + "] = " + in + "->strides[" + ds + "];\n";
  }
  if (rank == 0) s += "    (void)ost;\n";
  s += "    const int r = kiln_collapse(" + R + ", 2, shp, st);\n";
  // Parts split the outermost kept dimension: each index along it owns a contiguous block
  // of st[0][k] outputs that no other index touches. A full reduction is one part's work.
  s += "    int k = 0;\n";
  s += "    while (k < r && st[0][k] == 0) ++k;\n";
  s += "    int64_t o0 = 0, o1 = 0, lo = 0, hi = 0;\n";
  s += "    if (k < r) {\n";
  s += "      kiln_part_range(shp[k], " + ctx + "->part, " + ctx + "->n_parts, 1, &lo, &hi);\n";
  s += "      o0 = lo * st[0][k];\n";
  s += "      o1 = lo * st[1][k];\n";
  s += "      ob = o0;\n";
  s += "      oe = hi * st[0][k];\n";
  s += "      shp[k] = hi - lo;\n";
  s += "    } else if (" + ctx + "->part == 0) {\n";
  s += "      oe = n_out;\n";
  s += "    }\n";
  s += "    for (int64_t i = ob; i < oe; ++i) po[i] = (" + T + ")" + identity + ";\n";
  s += "    int64_t n_part = 1;\n";
  s += "    for (int d = 0; d < r; ++d) n_part *= shp[d];\n";
  s += "    const int64_t inner = shp[r - 1], s0 = st[0][r - 1], s1 = st[1][r - 1];\n";
  s += "    int64_t idx[KILN_MAX_DIMS] = {0};\n";
  s += "    const int64_t outer = oe > ob ? n_part / inner : 0;\n";
  s += "    for (int64_t it = 0; it < outer; ++it) {\n";
  s += "      if (s0 == 0) {\n";
  s += "        " + T + " a = po[o0];\n";
  s += "        if (s1 == 1) {\n";
  s += "          const " + T + " *restrict q = pi + o1;\n";
  s += "          for (int64_t j = 0; j < inner; ++j) { const " + T + " x = q[j]; a = " + combine + "; }\n";
  s += "        } else {\n";
  s += "          for (int64_t j = 0; j < inner; ++j) { const " + T + " x = pi[o1 + j * s1]; a = " + combine + "; }\n";
  s += "        }\n";
  s += "        po[o0] = a;\n";
  s += "      } else {\n";
  s += "        for (int64_t j = 0; j < inner; ++j) {\n";
  s += "          const " + T + " x = pi[o1 + j * s1];\n";
  s += "          const " + T + " a = po[o0 + j * s0];\n";
  s += "          po[o0 + j * s0] = " + combine + ";\n";
  s += "        }\n";
  s += "      }\n";
  s += emit_odometer_step(2, "      ");
  s += "    }\n";
  s += "  }\n";
  if (kind_ == ReduceKind::kMean) {
    // Mean over an empty set is 0/0 = NaN, as in NumPy.
    s += "  if (n_out > 0) {\n";
    s += "    const " + T + " count = (" + T + ")(n_in / n_out);\n";
    s += "    for (int64_t i = ob; i < oe; ++i) po[i] = po[i] / count;\n";
    s += "  }\n";
  }
  s += "}\n";
  return s;
}

}  // namespace kiln
