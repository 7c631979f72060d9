#include "ops/arg_reduce.h"

#include <cmath>

#include "ops/broadcast.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

ArgReduce::ArgReduce(bool is_max, Attrs props)
    : COp(is_max ? "arg_max" : "arg_min", std::move(props)), is_max_(is_max) {
  check_known_attrs(this->props(), {"axis", "keepdims", "select_last_index"});
  axis_ = attr_int(this->props(), "axis", 0);
  keepdims_ = attr_int(this->props(), "keepdims", 1) != 0;
  last_ = attr_int(this->props(), "select_last_index", 0) != 0;
}

std::vector<TensorType> ArgReduce::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const auto& x = inputs[0];
  if (x.rank() == 0) throw UserError(name() + ": input must have rank >= 1");
  if (x.dtype == DType::kBool) throw UserError(name() + ": bool input " + x.to_string());
  const auto axis = static_cast<size_t>(normalize_axis(axis_, x.rank(), name().c_str()));
  if (x.dims[axis] == 0) throw UserError(name() + ": the axis of " + x.to_string() + " is empty");
  TensorType out{DType::kInt64, {}};
  for (size_t d = 0; d < x.dims.size(); ++d) {
    if (d != axis)
      out.dims.push_back(x.dims[d]);
    else if (keepdims_)
      out.dims.push_back(1);
  }
  return {out};
}

std::vector<Shape> ArgReduce::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  const auto axis =
      static_cast<size_t>(normalize_axis(axis_, static_cast<int>(x.size()), name().c_str()));
  if (x[axis] == 0) throw UserError(name() + ": the axis of " + dims_to_string(x) + " is empty");
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (d != axis)
      out.push_back(x[d]);
    else if (keepdims_)
      out.push_back(1);
  }
  return {out};
}

void ArgReduce::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const auto axis = static_cast<size_t>(normalize_axis(axis_, x.ndim(), name().c_str()));
  int64_t outer = 1, inner = 1;
  const int64_t len = x.shape()[axis];
  for (size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (size_t d = axis + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  const bool fl = is_float(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      bool best_nan = false;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t at = (o * len + k) * inner + i;
        if (fl) {
          const double v = x.load(at), b = x.load((o * len + best) * inner + i);
          const bool nan = std::isnan(v);
          if (k == 0) {
            best_nan = nan;
            continue;
          }
          if (best_nan) {
            if (nan && last_) best = k;
            continue;
          }
          if (nan || (is_max_ ? v > b : v < b) || (last_ && v == b)) {
            best = k;
            best_nan = nan;
          }
        } else if (k > 0) {
          const int64_t v = x.load_int(at), b = x.load_int((o * len + best) * inner + i);
          if ((is_max_ ? v > b : v < b) || (last_ && v == b)) best = k;
        }
      }
      outputs[0].store_int(o * inner + i, best);
    }
  }
}

std::string ArgReduce::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const int axis = normalize_axis(axis_, rank, name().c_str());
  const std::string ct(dtype_c_type(t.dtype));
  const std::string &in = names.inputs[0], &out = names.outputs[0];
  const std::string r = std::to_string(rank), ax = std::to_string(axis);
  const bool fl = is_float(t.dtype);
  // The input is read through a contiguous copy, then one (outer, inner) column at a time.
  std::string s =
      "{\n  int64_t outer = 1, inner = 1, len = " + in + "->shape[" + ax + "], n = 1;\n";
  s += "  for (int d = 0; d < " + r + "; ++d) n *= " + in + "->shape[d];\n";
  s += "  for (int d = 0; d < " + ax + "; ++d) outer *= " + in + "->shape[d];\n";
  s += "  for (int d = " + ax + " + 1; d < " + r + "; ++d) inner *= " + in + "->shape[d];\n";
  s += c_workspace(ct, "x", "n", name() + "'s dense input");
  s += "  kiln_copy_strided(x, " + in + "->data, " + r + ", " + in + "->shape, " + in +
       "->strides, sizeof(" + ct + "));\n";
  s += "  int64_t *y = (int64_t *)" + out + "->data;\n";
  s += "  for (int64_t o = 0; o < outer; ++o) {\n    for (int64_t i = 0; i < inner; ++i) {\n";
  s += "      const " + ct + " *col = x + o * len * inner + i;\n";
  s += "      int64_t best = 0;\n";
  const std::string better = is_max_ ? ">" : "<";
  const std::string tie = last_ ? " || v == b" : "";
  if (fl) {
    // NaN beats every number and the first NaN stays (the last with select_last_index).
    s += "      int best_nan = col[0] != col[0];\n";
    s += "      for (int64_t k = 1; k < len; ++k) {\n        const " + ct +
         " v = col[k * inner], b = col[best * inner];\n        const int nan = v != v;\n";
    s += "        if (best_nan) { if (nan && " + std::string(last_ ? "1" : "0") +
         ") best = k; continue; }\n";
    s += "        if (nan || v " + better + " b" + tie +
         ") { best = k; best_nan = nan; }\n      }\n";
  } else {
    s += "      for (int64_t k = 1; k < len; ++k) {\n        const " + ct +
         " v = col[k * inner], b = col[best * inner];\n";
    s += "        if (v " + better + " b" + tie + ") best = k;\n      }\n";
  }
  s += "      y[o * inner + i] = best;\n    }\n  }\n}\n";
  return s;
}

}  // namespace kiln
