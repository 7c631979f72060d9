#include "ops/elementwise.h"

#include "ctemplate/template.h"
#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/grad/derivative.h"
#include "ops/grad/support.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::string type_tag(DType dt) {
  switch (dt) {
    case DType::kBool:
    case DType::kUInt8:
      return "u8";
    case DType::kInt8:
      return "i8";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
    default:
      return "unsupported";
  }
}

bool in_domain(Domain domain, DType dt) {
  switch (domain) {
    case Domain::kAny:
      return true;
    case Domain::kNumeric:
      return dt != DType::kBool;
    case Domain::kSignedNumeric:
      return dt != DType::kBool && dt != DType::kUInt8;
    case Domain::kFloat:
      return is_float(dt);
    case Domain::kBool:
      return dt == DType::kBool;
    case Domain::kInteger:
      return is_integer(dt);
  }
  return false;
}

std::string domain_name(Domain domain) {
  switch (domain) {
    case Domain::kAny:
      return "any dtype";
    case Domain::kNumeric:
      return "a numeric dtype";
    case Domain::kSignedNumeric:
      return "a signed numeric dtype";
    case Domain::kFloat:
      return "a floating dtype (float32, float64)";
    case Domain::kBool:
      return "bool";
    case Domain::kInteger:
      return "an integer dtype";
  }
  return "?";
}

bool supported(DType dt) { return dt != DType::kFloat16 && dt != DType::kBFloat16; }

}  // namespace

Elementwise::Elementwise(const ScalarOpDef& def, Attrs props)
    : COp(std::string(def.name), std::move(props)), def_(def) {
  std::vector<std::string> known;
  for (const auto& p : def_.params) known.emplace_back(p.name);
  if (def_.out == OutRule::kCast) known.emplace_back("to");
  check_known_attrs(this->props(), known);
  for (const auto& p : def_.params) {
    params_.push_back(attr_float(this->props(), std::string(p.name), p.fallback));
  }
  if (def_.out == OutRule::kCast) {
    std::string to = attr_string(this->props(), "to");
    auto dt = dtype_from_name(to);
    if (!dt) throw AttrError("to", "unknown dtype '" + to + "'");
    if (!supported(*dt)) throw AttrError("to", "cast to " + to + " is not supported yet");
    cast_to_ = *dt;
  }
}

DType Elementwise::data_dtype(const std::vector<DType>& inputs) const {
  return def_.out == OutRule::kWhere ? inputs.at(1) : inputs.at(0);
}

std::vector<TensorType> Elementwise::infer_type(const std::vector<TensorType>& inputs) const {
  if (static_cast<int>(inputs.size()) != def_.arity) {
    throw UserError(name() + " takes " + std::to_string(def_.arity) + " inputs, got " +
                    std::to_string(inputs.size()));
  }
  for (const auto& t : inputs) {
    if (!supported(t.dtype)) {
      throw UserError(name() + ": " + std::string(dtype_name(t.dtype)) +
                      " inputs are not supported yet");
    }
    if (t.rank() > 16) throw UserError(name() + ": rank " + std::to_string(t.rank()) + " > 16");
  }
  size_t first = def_.out == OutRule::kWhere ? 1 : 0;
  if (def_.out == OutRule::kWhere && inputs[0].dtype != DType::kBool) {
    throw UserError("where: condition must be bool, got " + inputs[0].to_string());
  }
  for (size_t i = first + 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype != inputs[first].dtype) {
      throw UserError(name() + ": dtype mismatch: " + inputs[first].to_string() + " vs " +
                      inputs[i].to_string());
    }
  }
  DType data = inputs[first].dtype;
  if (!in_domain(def_.domain, data)) {
    throw UserError(name() + " requires " + domain_name(def_.domain) + ", got " +
                    std::string(dtype_name(data)));
  }
  std::vector<std::vector<int64_t>> dims;
  for (const auto& t : inputs) dims.push_back(t.dims);
  TensorType out;
  try {
    out.dims = broadcast_dims(dims);
  } catch (const UserError& e) {
    throw UserError(name() + ": " + e.what());
  }
  switch (def_.out) {
    case OutRule::kSame:
    case OutRule::kWhere:
      out.dtype = data;
      break;
    case OutRule::kBool:
      out.dtype = DType::kBool;
      break;
    case OutRule::kCast:
      out.dtype = *cast_to_;
      break;
  }
  return {out};
}

std::vector<Shape> Elementwise::infer_shape(const std::vector<Shape>& inputs) const {
  return {broadcast_shapes(inputs)};
}

void Elementwise::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor& out = outputs.at(0);
  std::vector<DType> dts;
  for (const auto& t : inputs) dts.push_back(t.dtype());
  DType data = data_dtype(dts);
  const bool exact_int = !is_float(data) && def_.ref_int;
  std::vector<double> xs(inputs.size());
  std::vector<int64_t> xi(inputs.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      int64_t src = broadcast_source_index(i, out.shape(), inputs[k].shape());
      if (exact_int) {
        xi[k] = inputs[k].load_int(src);
      } else {
        xs[k] = inputs[k].load(src);
      }
    }
    if (exact_int) {
      out.store_int(i, def_.ref_int(xi.data(), params_.data()));
    } else {
      out.store(i, def_.ref(xs.data(), params_.data()));
    }
  }
}

std::string Elementwise::scalar_expr(DType in, DType out) const {
  if (def_.out == OutRule::kCast && out == DType::kBool) return "(${0} != 0)";
  std::string_view tmpl = is_float(in) ? def_.c_float : def_.c_int;
  if (tmpl.empty()) {
    throw InternalError(name() + " has no C expression for " + std::string(dtype_name(in)));
  }
  TemplateValues v;
  for (int k = 0; k < def_.arity; ++k) v[std::to_string(k)] = "${" + std::to_string(k) + "}";
  v["T"] = std::string(dtype_c_type(out));
  v["f"] = in == DType::kFloat32 ? "f" : "";
  v["m"] = "kiln_";  // kiln_math.h: both float widths
  v["S"] = type_tag(in);
  for (size_t p = 0; p < def_.params.size(); ++p) {
    v[std::string(def_.params[p].name)] = c_literal(out, params_[p]);
  }
  return render_template(tmpl, v, "scalar op " + name());
}

std::vector<std::string> Elementwise::c_preludes() const {
  if (uses_math_prelude(def_)) return {"kiln_index.h", "kiln_scalar.h", "kiln_math.h"};
  return {"kiln_index.h", "kiln_scalar.h"};
}

std::string Elementwise::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  std::vector<LoopOperand> ops;
  std::vector<DType> dts;
  const TensorType& out = node.outputs[0]->type;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    ops.push_back(loop_operand(node.inputs[k], names.inputs[k], out));
    dts.push_back(node.inputs[k]->type.dtype);
  }
  const std::string expr = scalar_expr(data_dtype(dts), out.dtype);
  auto emit = [&](const std::vector<LoopOperand>& with) {
    return emit_elementwise_loop(with, names.outputs[0], out.dtype, out.rank(), expr, sub.ctx);
  };
  // A weight exponent: the loop is versioned on it (emit_versioned_on).
  if (name() == "pow" && is_float(out.dtype) && ops.size() == 2 && ops[1].single && !ops[1].literal)
    return emit_versioned_on(ops, 1, {2, 3}, emit);
  return emit(ops);
}

}  // namespace kiln

namespace kiln {

std::vector<Variable*> Elementwise::grad(const GradArgs& args) const {
  const size_t n = args.node.inputs.size();
  std::vector<Variable*> out(n, nullptr);
  if (def_.derivative.empty()) {
    Op::grad(args);  // throws for any wanted input
    return out;
  }
  Var g = grad_of_out(args, 0);
  if (cast_to_) {
    // A float -> float conversion passes the gradient back in the input's dtype.
    Var x = grad_in(args, 0);
    if (args.wanted[0]) out[0] = cast(g, x.dtype()).var();
    return out;
  }
  DerivativeEnv env{g, grad_out(args, 0), {}, {}};
  for (size_t i = 0; i < n; ++i) env.x.push_back(grad_in(args, static_cast<int>(i)));
  for (size_t i = 0; i < def_.params.size(); ++i)
    env.params[std::string(def_.params[i].name)] = params_[i];
  const auto exprs = split_derivatives(def_.derivative);
  check_internal(exprs.size() == n, name() + ": the derivative column lists " +
                                        std::to_string(exprs.size()) + " inputs, the op has " +
                                        std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (!args.wanted[i] || exprs[i] == "0") continue;
    out[i] = sum_to(build_derivative(exprs[i], env), env.x[i]).var();
  }
  return out;
}

std::string Elementwise::node_expr(const Node& node) const {
  std::vector<DType> dts;
  for (const auto* v : node.inputs) dts.push_back(v->type.dtype);
  return scalar_expr(data_dtype(dts), node.outputs[0]->type.dtype);
}

}  // namespace kiln
