#include "ops/dim_values.h"

#include <algorithm>

#include "ops/c/elementwise_loop.h"
#include "util/error.h"

namespace kiln {

int64_t range_count(int64_t start, int64_t limit, int64_t delta) {
  if (delta == 0) throw UserError("arange: delta is 0");
  const int64_t span = limit - start;
  // Ceiling division with the sign of delta; an empty range when the span points the other way.
  int64_t n = span / delta;
  if (n * delta != span && ((span < 0) == (delta < 0))) ++n;
  return std::max<int64_t>(n, 0);
}

DimValuesBase::DimValuesBase(std::string name, Attrs props, const std::vector<std::string>& known,
                             const std::vector<std::string>& expr_props)
    : COp(std::move(name), std::move(props)) {
  check_known_attrs(this->props(), known);
  for (const std::string& p : expr_props) {
    try {
      auto e = parse_dim_exprs(attr_string(this->props(), p));
      exprs_.insert(exprs_.end(), e.begin(), e.end());
    } catch (const AttrError&) {
      throw;
    } catch (const UserError& e) {
      throw AttrError(p, e.what());
    }
  }
  const std::string dt = attr_string(this->props(), "dtype", std::string("int64"));
  const auto parsed = dtype_from_name(dt);
  if (!parsed || *parsed == DType::kBool) throw AttrError("dtype", "not a numeric dtype: " + dt);
  dtype_ = *parsed;
}

void DimValuesBase::check_inputs(size_t count) const {
  int needed = 0;
  for (const DimExpr& e : exprs_) needed = std::max(needed, e.max_input() + 1);
  if (static_cast<int>(count) != needed) {
    throw UserError(name() + " with " + dim_exprs_to_string(exprs_) + " takes " +
                    std::to_string(needed) + " inputs (read for their shapes), got " +
                    std::to_string(count));
  }
}

std::vector<int64_t> DimValuesBase::eval_all(const std::vector<Shape>& shapes) const {
  std::vector<int64_t> out;
  for (const DimExpr& e : exprs_) out.push_back(e.eval(shapes));
  return out;
}

namespace {

std::vector<Shape> shapes_of(const std::vector<Tensor>& inputs) {
  std::vector<Shape> s;
  for (const Tensor& t : inputs) s.push_back(t.shape());
  return s;
}

// Stores integer v (or v as a double) at flat index i of a contiguous output.
void store_value(Tensor& out, int64_t i, double as_double, int64_t as_int) {
  if (is_float(out.dtype())) {
    out.store(i, as_double);
  } else {
    out.store_int(i, as_int);
  }
}

}  // namespace

DimValues::DimValues(Attrs props)
    : DimValuesBase("dim_values", std::move(props), {"dims", "dtype", "scalar"}, {"dims"}) {
  scalar_ = attr_int(this->props(), "scalar", 0) != 0;
  if (scalar_ && exprs_.size() != 1) throw AttrError("scalar", "needs exactly one expression");
}

std::vector<TensorType> DimValues::infer_type(const std::vector<TensorType>& inputs) const {
  check_inputs(inputs.size());
  if (scalar_) return {TensorType{dtype_, {}}};
  return {TensorType{dtype_, {static_cast<int64_t>(exprs_.size())}}};
}

std::vector<Shape> DimValues::infer_shape(const std::vector<Shape>&) const {
  if (scalar_) return {Shape{}};
  return {Shape{static_cast<int64_t>(exprs_.size())}};
}

void DimValues::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const auto v = eval_all(shapes_of(inputs));
  for (size_t i = 0; i < v.size(); ++i)
    store_value(outputs[0], static_cast<int64_t>(i), static_cast<double>(v[i]), v[i]);
}

std::string DimValues::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const std::string t(dtype_c_type(dtype_));
  std::string s;
  for (size_t i = 0; i < exprs_.size(); ++i) {
    s += "((" + t + " *)" + names.outputs[0] + "->data)[" + std::to_string(i) + "] = (" + t + ")" +
         exprs_[i].c_expr(names.inputs) + ";\n";
  }
  return s;
}

Fill::Fill(Attrs props)
    : DimValuesBase("fill", std::move(props), {"dims", "value", "dtype"}, {"dims"}) {
  value_ = attr_float(this->props(), "value", 0.0);
}

std::vector<TensorType> Fill::infer_type(const std::vector<TensorType>& inputs) const {
  check_inputs(inputs.size());
  TensorType out{dtype_, {}};
  for (const DimExpr& e : exprs_) {
    const auto v = e.eval_static(inputs);
    if (v && *v < 0) throw UserError("fill: dimension " + e.str() + " is negative");
    out.dims.push_back(v ? *v : kDynamic);
  }
  return {out};
}

std::vector<Shape> Fill::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = eval_all(inputs);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0) {
      throw UserError("fill: dimension " + exprs_[i].str() + " is " + std::to_string(out[i]));
    }
  }
  return {out};
}

void Fill::perform(const std::vector<Tensor>&, std::vector<Tensor>& outputs) const {
  for (int64_t i = 0; i < outputs[0].numel(); ++i)
    store_value(outputs[0], i, value_, static_cast<int64_t>(value_));
}

std::string Fill::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const std::string t(dtype_c_type(dtype_));
  const std::string& out = names.outputs[0];
  return "{\n  int64_t n = 1;\n  for (int d = 0; d < " + std::to_string(exprs_.size()) +
         "; ++d) n *= " + out + "->shape[d];\n  for (int64_t i = 0; i < n; ++i) ((" + t + " *)" +
         out + "->data)[i] = " + c_literal_of(dtype_, value_, static_cast<int64_t>(value_)) +
         ";\n}\n";
}

Arange::Arange(Attrs props)
    : DimValuesBase("arange", std::move(props), {"start", "limit", "delta", "dtype"},
                    {"start", "limit", "delta"}) {
  if (exprs_.size() != 3)
    throw AttrError("start", "start, limit and delta are one expression each");
  if (exprs_[2].value() == 0) throw AttrError("delta", "is 0");
}

std::vector<TensorType> Arange::infer_type(const std::vector<TensorType>& inputs) const {
  check_inputs(inputs.size());
  const auto s = exprs_[0].eval_static(inputs), l = exprs_[1].eval_static(inputs),
             d = exprs_[2].eval_static(inputs);
  return {TensorType{dtype_, {s && l && d ? range_count(*s, *l, *d) : kDynamic}}};
}

std::vector<Shape> Arange::infer_shape(const std::vector<Shape>& inputs) const {
  const auto v = eval_all(inputs);
  return {Shape{range_count(v[0], v[1], v[2])}};
}

void Arange::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const auto v = eval_all(shapes_of(inputs));
  for (int64_t i = 0; i < outputs[0].numel(); ++i) {
    const int64_t x = v[0] + i * v[2];
    store_value(outputs[0], i, static_cast<double>(x), x);
  }
}

std::string Arange::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const std::string t(dtype_c_type(dtype_));
  const std::string& out = names.outputs[0];
  return "{\n  const int64_t start = " + exprs_[0].c_expr(names.inputs) +
         ", delta = " + exprs_[2].c_expr(names.inputs) + ";\n  for (int64_t i = 0; i < " + out +
         "->shape[0]; ++i) ((" + t + " *)" + out + "->data)[i] = (" + t +
         ")(start + i * delta);\n}\n";
}

}  // namespace kiln
