#include "ops/concat.h"

#include "ops/broadcast.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

Concat::Concat(Attrs props) : COp("concat", std::move(props)) {
  check_known_attrs(this->props(), {"axis"});
  axis_ = attr_int(this->props(), "axis");
}

std::vector<TensorType> Concat::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.empty()) throw UserError("concat needs at least one input");
  const auto& first = inputs[0];
  if (first.rank() == 0) throw UserError("concat: inputs must have rank >= 1");
  int axis = normalize_axis(axis_, first.rank(), "concat");
  TensorType out = first;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    if (t.dtype != first.dtype || t.rank() != first.rank()) {
      throw UserError("concat: input " + std::to_string(i) + " is " + t.to_string() +
                      ", input 0 is " + first.to_string());
    }
    for (int d = 0; d < first.rank(); ++d) {
      auto ds = static_cast<size_t>(d);
      if (d == axis) {
        out.dims[ds] = (out.dims[ds] == kDynamic || t.dims[ds] == kDynamic)
                           ? kDynamic
                           : out.dims[ds] + t.dims[ds];
      } else if (out.dims[ds] == kDynamic) {
        out.dims[ds] = t.dims[ds];
      } else if (t.dims[ds] != kDynamic && t.dims[ds] != out.dims[ds]) {
        throw UserError("concat: dimension " + std::to_string(d) + " differs: input " +
                        std::to_string(i) + " is " + t.to_string() + ", input 0 is " +
                        first.to_string());
      }
    }
  }
  return {out};
}

std::vector<Shape> Concat::infer_shape(const std::vector<Shape>& inputs) const {
  int axis = normalize_axis(axis_, static_cast<int>(inputs[0].size()), "concat");
  Shape out = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    for (size_t d = 0; d < out.size(); ++d) {
      if (static_cast<int>(d) == axis) {
        out[d] += inputs[i][d];
      } else if (inputs[i][d] != out[d]) {
        throw UserError("concat: input " + std::to_string(i) + " has shape " +
                        dims_to_string(inputs[i]) + ", input 0 has " + dims_to_string(inputs[0]));
      }
    }
  }
  return {out};
}

void Concat::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor& out = outputs[0];
  int axis = normalize_axis(axis_, out.ndim(), "concat");
  int64_t start = 0;
  for (const auto& in : inputs) {
    int64_t len = in.shape()[static_cast<size_t>(axis)];
    Tensor dst = out.slice(axis, start, start + len);
    if (in.data() != dst.data() || in.strides() != dst.strides()) copy_into(in, dst);
    start += len;
  }
}

std::string Concat::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const auto& t = node.outputs[0]->type;
  const int rank = t.rank();
  const int axis = normalize_axis(axis_, rank, "concat");
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(t.dtype));
  std::string s = "{\n";
  s += "  int64_t ost[KILN_MAX_DIMS];\n";
  s += "  int64_t c = 1;\n";
  s += "  for (int d = " + std::to_string(rank - 1) + "; d >= 0; --d) {\n";
  s += "    ost[d] = c;\n";
  s += "    c *= " + out + "->shape[d];\n";
  s += "  }\n";
  s += "  char *base = (char *)" + out + "->data;\n";
  s += "  int64_t start = 0;\n";
  for (const auto& in : names.inputs) {
    // An input the executor bound in place (StepSpec::concat_axis) is already there.
    s += "  if ((const char *)" + in + "->data != base + start * ost[" + std::to_string(axis) +
         "] * " + es + ")\n";
    s += "    kiln_copy_nd(base + start * ost[" + std::to_string(axis) + "] * " + es + ", ost, " +
         in + "->data, " + in + "->strides, " + std::to_string(rank) + ", " + in + "->shape, " +
         es + ");\n";
    s += "  start += " + in + "->shape[" + std::to_string(axis) + "];\n";
  }
  s += "  (void)start;\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
