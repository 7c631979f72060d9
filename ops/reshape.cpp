#include "ops/reshape.h"

#include <algorithm>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Row-major copy of the input into the (contiguous) output: shared by reshape and flatten.
// Bound as a view of its input (Executor::bind), the output already holds the elements.
// The rank is read at run time, so every reshape and flatten of one element size is one
// kernel: a kernel per rank cost ~40 ms of compile each for a call to the same routine.
std::string copy_in_order(const Node& node, const CodeNames& names) {
  const auto& t = node.inputs[0]->type;
  const std::string& in = names.inputs[0];
  return "if (" + names.outputs[0] + "->data != " + in + "->data)\n" + "  kiln_copy_strided(" +
         names.outputs[0] + "->data, " + in + "->data, " + in + "->ndim, " + in + "->shape, " +
         in + "->strides, " + std::to_string(dtype_size(t.dtype)) + ");\n";
}

}  // namespace

Reshape::Reshape(Attrs props) : COp("reshape", std::move(props)) {
  check_known_attrs(this->props(), {"shape", "dims"});
  if (this->props().count("dims")) {
    if (this->props().count("shape")) throw AttrError("dims", "given together with shape");
    try {
      dims_ = parse_dim_exprs(attr_string(this->props(), "dims"));
    } catch (const UserError& e) {
      throw AttrError("dims", e.what());
    }
    if (dims_->size() > 16) throw AttrError("dims", "rank > 16");
    return;
  }
  shape_ = attr_ints(this->props(), "shape");
  int minus = 0;
  for (int64_t d : shape_) {
    if (d < -1) throw AttrError("shape", "bad dimension " + std::to_string(d));
    if (d == -1) ++minus;
  }
  if (minus > 1) throw AttrError("shape", "more than one -1");
  if (shape_.size() > 16) throw AttrError("shape", "rank > 16");
}

namespace {

// a * b, or a UserError naming the shape when it overflows (a crafted model's dimensions).
int64_t times(int64_t a, int64_t b, const std::vector<int64_t>& shape) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw UserError("reshape: shape " + dims_to_string(shape) +
                    " has more elements than fit in 64 bits");
  }
  return r;
}

int64_t known_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == kDynamic) return kDynamic;
    n = times(n, d, dims);
  }
  return n;
}

int max_dims_input(const std::vector<DimExpr>& dims) {
  int m = 0;
  for (const DimExpr& e : dims) m = std::max(m, e.max_input());
  return m;
}

}  // namespace

std::vector<TensorType> Reshape::infer_type(const std::vector<TensorType>& inputs) const {
  if (dims_) {
    if (inputs.empty() || static_cast<int>(inputs.size()) != max_dims_input(*dims_) + 1) {
      throw UserError("reshape with dims " + dim_exprs_to_string(*dims_) + " takes " +
                      std::to_string(max_dims_input(*dims_) + 1) + " inputs (data, then inputs "
                      "read for their shapes), got " + std::to_string(inputs.size()));
    }
    TensorType out{inputs[0].dtype, {}};
    for (const DimExpr& e : *dims_) {
      const auto v = e.eval_static(inputs);
      if (v && *v < 0) throw UserError("reshape: dimension " + e.str() + " is negative");
      out.dims.push_back(v ? *v : kDynamic);
    }
    const int64_t a = known_numel(inputs[0].dims), b = known_numel(out.dims);
    if (a != kDynamic && b != kDynamic && a != b) {
      throw UserError("reshape: cannot reshape " + inputs[0].to_string() + " to " +
                      dims_to_string(out.dims));
    }
    return {out};
  }
  if (inputs.size() != 1) throw UserError("reshape takes 1 input");
  const auto& in = inputs[0];
  TensorType out{in.dtype, {}};
  bool in_known = true;
  int64_t in_total = 1;
  for (int64_t d : in.dims) {
    if (d == kDynamic) in_known = false;
    else in_total = times(in_total, d, in.dims);
  }
  int64_t known_product = 1;
  bool all_known = true;
  int minus_at = -1;
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t d = shape_[i];
    if (d == 0) {
      if (i >= in.dims.size()) {
        throw UserError("reshape: shape entry " + std::to_string(i) +
                        " is 0 (copy) but the input " + in.to_string() + " has no such dimension");
      }
      d = in.dims[i];
    }
    if (d == -1) {
      minus_at = static_cast<int>(i);
      out.dims.push_back(kDynamic);
      continue;
    }
    if (d == kDynamic) all_known = false;
    else known_product = times(known_product, d, shape_);
    out.dims.push_back(d);
  }
  if (in_known && all_known) {
    if (minus_at >= 0) {
      if (known_product == 0 || in_total % known_product != 0) {
        throw UserError("reshape: cannot reshape " + in.to_string() + " to " +
                        dims_to_string(shape_));
      }
      out.dims[static_cast<size_t>(minus_at)] = in_total / known_product;
    } else if (known_product != in_total) {
      throw UserError("reshape: cannot reshape " + in.to_string() + " (" + std::to_string(in_total) +
                      " elements) to " + dims_to_string(shape_) + " (" +
                      std::to_string(known_product) + " elements)");
    }
  }
  return {out};
}

std::vector<Shape> Reshape::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& in = inputs[0];
  if (dims_) {
    Shape out;
    for (const DimExpr& e : *dims_) {
      out.push_back(e.eval(inputs));
      if (out.back() < 0) {
        throw UserError("reshape: dimension " + e.str() + " of the target is " +
                        std::to_string(out.back()));
      }
    }
    if (shape_numel(out) != shape_numel(in))
      throw UserError("reshape: cannot reshape " + dims_to_string(in) + " to " + dims_to_string(out));
    return {out};
  }
  Shape out;
  int64_t product = 1;
  int minus_at = -1;
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t d = shape_[i] == 0 ? in.at(i) : shape_[i];
    if (d == -1) {
      minus_at = static_cast<int>(i);
      out.push_back(0);
      continue;
    }
    product = times(product, d, shape_);
    out.push_back(d);
  }
  int64_t total = shape_numel(in);
  if (minus_at >= 0) {
    if (product == 0 || total % product != 0) {
      throw UserError("reshape: cannot reshape " + dims_to_string(in) + " to " + dims_to_string(shape_));
    }
    out[static_cast<size_t>(minus_at)] = total / product;
  } else if (product != total) {
    throw UserError("reshape: cannot reshape " + dims_to_string(in) + " to " + dims_to_string(out));
  }
  return {out};
}

void Reshape::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  copy_into(inputs[0].contiguous().reshape(outputs[0].shape()), outputs[0]);
}

std::string Reshape::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  return copy_in_order(node, names);
}

Flatten::Flatten(Attrs props) : COp("flatten", std::move(props)) {
  check_known_attrs(this->props(), {"axis"});
  axis_ = attr_int(this->props(), "axis", 1);
}

std::vector<TensorType> Flatten::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("flatten takes 1 input");
  const auto& in = inputs[0];
  int r = in.rank();
  if (axis_ < -r || axis_ > r) {
    throw UserError("flatten: axis " + std::to_string(axis_) + " out of range for " + in.to_string());
  }
  int64_t axis = axis_ < 0 ? axis_ + r : axis_;
  int64_t a = 1, b = 1;
  for (int d = 0; d < r; ++d) {
    int64_t v = in.dims[static_cast<size_t>(d)];
    int64_t& target = d < axis ? a : b;
    target = (target == kDynamic || v == kDynamic) ? kDynamic : target * v;
  }
  return {TensorType{in.dtype, {a, b}}};
}

std::vector<Shape> Flatten::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& in = inputs[0];
  int64_t r = static_cast<int64_t>(in.size());
  int64_t axis = axis_ < 0 ? axis_ + r : axis_;
  int64_t a = 1, b = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? a : b) *= in[static_cast<size_t>(d)];
  return {Shape{a, b}};
}

void Flatten::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  copy_into(inputs[0].contiguous().reshape(outputs[0].shape()), outputs[0]);
}

std::string Flatten::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  return copy_in_order(node, names);
}

}  // namespace kiln
