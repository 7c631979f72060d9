#include "ops/reduce.h"

#include <cmath>
#include <limits>

#include "ops/broadcast.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

std::string Reduce::op_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "reduce_sum";
    case ReduceKind::kMean:
      return "reduce_mean";
    case ReduceKind::kMax:
      return "reduce_max";
    case ReduceKind::kMin:
      return "reduce_min";
    case ReduceKind::kProd:
      return "reduce_prod";
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
    throw UserError(name() + " requires a floating dtype, got " +
                    std::string(dtype_name(in.dtype)));
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
    throw UserError(name() + ": reduction over an empty dimension of shape " + dims_to_string(in) +
                    " has no identity");
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
        case ReduceKind::kMean:
          acci[oi] += x;
          break;
        case ReduceKind::kProd:
          acci[oi] *= x;
          break;
        case ReduceKind::kMax:
          acci[oi] = seen[oi] ? std::max(acci[oi], x) : x;
          break;
        case ReduceKind::kMin:
          acci[oi] = seen[oi] ? std::min(acci[oi], x) : x;
          break;
      }
      seen[oi] = true;
      continue;
    }
    double x = in.load(i);
    double& a = acc[oi];
    switch (kind_) {
      case ReduceKind::kSum:
      case ReduceKind::kMean:
        a += x;
        break;
      case ReduceKind::kProd:
        a *= x;
        break;
      case ReduceKind::kMax:
        a = (x > a || x != x) ? x : a;
        break;
      case ReduceKind::kMin:
        a = (x < a || x != x) ? x : a;
        break;
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
  const TensorType& in = node.inputs[0]->type;
  ReduceLoop spec{kind_, reduced_mask(in.rank()), keepdims_, in.dtype};
  LoopOperand op;
  op.tensor = names.inputs[0];
  op.dtype = in.dtype;
  op.rank = in.rank();
  return emit_reduce_loop(spec, {op}, "${0}", {}, names.outputs[0], sub.ctx);
}

}  // namespace kiln
