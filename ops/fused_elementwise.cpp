#include "ops/fused_elementwise.h"

#include <cctype>
#include <set>

#include "ctemplate/template.h"
#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/registry.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// A small recursive-descent reader for the program text; errors name the offset.
class ProgramReader {
 public:
  explicit ProgramReader(const std::string& text) : s_(text) {}

  std::vector<FusedStep> read() {
    std::vector<FusedStep> steps;
    skip_space();
    while (pos_ < s_.size()) {
      steps.push_back(read_step(static_cast<int>(steps.size())));
      skip_space();
      if (pos_ < s_.size()) expect(';');
      skip_space();
    }
    if (steps.empty()) fail("empty program");
    return steps;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw AttrError("program", what + " at offset " + std::to_string(pos_) + " of '" + s_ + "'");
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string word() {
    skip_space();
    size_t b = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
            s_[pos_] == '.' || s_[pos_] == '-' || s_[pos_] == '+')) {
      ++pos_;
    }
    if (b == pos_) fail("expected a name or number");
    return s_.substr(b, pos_ - b);
  }
  AttrValue value() {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '"') {
      size_t end = s_.find('"', pos_ + 1);
      if (end == std::string::npos) fail("unterminated string");
      std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
      pos_ = end + 1;
      return v;
    }
    // format_double writes -inf as the C expression "(-INFINITY)".
    const bool parenthesised = pos_ < s_.size() && s_[pos_] == '(';
    if (parenthesised) ++pos_;
    std::string w = word();
    if (parenthesised) expect(')');
    size_t used = 0;
    if (w.find_first_of(".eEnIN") == std::string::npos) {  // not a real, INFINITY or NAN
      try {
        int64_t i = std::stoll(w, &used);
        if (used == w.size()) return i;
      } catch (const std::exception&) {
      }
    }
    try {
      double d = std::stod(w, &used);
      if (used == w.size()) return d;
    } catch (const std::exception&) {
    }
    fail("bad value '" + w + "'");
  }
  FusedStep read_step(int index) {
    std::string name = word();
    const ScalarOpDef* def = find_scalar_op(name);
    if (!def) fail("unknown scalar op '" + name + "'");
    Attrs props;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '{') {
      ++pos_;
      for (;;) {
        std::string key = word();
        expect('=');
        props[key] = value();
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        break;
      }
    }
    FusedStep step;
    step.op = std::make_shared<Elementwise>(*def, props);
    expect('(');
    for (;;) {
      skip_space();
      if (pos_ >= s_.size()) fail("unterminated argument list");
      char kind = s_[pos_++];
      if (kind != '$' && kind != '%') fail("expected $input or %step");
      std::string n = word();
      int k = 0;
      try {
        k = std::stoi(n);
      } catch (const std::exception&) {
        fail("bad argument '" + n + "'");
      }
      if (k < 0) fail("negative argument");
      if (kind == '%' && k >= index) fail("step " + std::to_string(index) + " uses a later step");
      step.args.push_back(kind == '$' ? k : -k - 1);
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(')');
      break;
    }
    if (static_cast<int>(step.args.size()) != def->arity) {
      fail(name + " takes " + std::to_string(def->arity) + " arguments, got " +
           std::to_string(step.args.size()));
    }
    return step;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

std::string fused_program(const Attrs& props) {
  check_known_attrs(props, {"program"});
  return attr_string(props, "program");
}

int count_inputs(const std::vector<FusedStep>& steps) {
  int n = 0;
  std::set<int> used;
  for (const auto& st : steps) {
    for (int a : st.args) {
      if (a >= 0) {
        used.insert(a);
        n = std::max(n, a + 1);
      }
    }
  }
  if (static_cast<int>(used.size()) != n) throw AttrError("program", "inputs are not all used");
  return n;
}

}  // namespace

bool is_cheap_scalar_op(const std::string& name) {
  static const std::set<std::string> cheap = {
      "add",   "sub",        "mul",        "div",     "neg",         "abs",        "sign",
      "relu",  "reciprocal", "maximum",    "minimum", "clip",        "lt",         "le",
      "gt",    "ge",         "eq",         "ne",      "logical_and", "logical_or", "logical_not",
      "where", "cast",       "leaky_relu", "floor",   "ceil",        "round",      "div_rcp"};
  return cheap.count(name) > 0;
}

std::string FusedElementwise::program_text(const std::vector<FusedStep>& steps) {
  std::vector<std::string> parts;
  for (const auto& st : steps) {
    std::vector<std::string> args;
    for (int a : st.args)
      args.push_back(a >= 0 ? "$" + std::to_string(a) : "%" + std::to_string(-a - 1));
    parts.push_back(st.op->name() + attrs_to_string(st.op->props()) + "(" + join(args, ", ") + ")");
  }
  return join(parts, "; ");
}

FusedElementwise::FusedElementwise(Attrs props) : COp("fused_elementwise", std::move(props)) {
  steps_ = ProgramReader(fused_program(this->props())).read();
  arity_ = count_inputs(steps_);
}

std::shared_ptr<const FusedElementwise> FusedElementwise::from_steps(std::vector<FusedStep> steps) {
  // Through the text, so the props are canonical and an op built either way compares equal.
  return std::make_shared<FusedElementwise>(Attrs{{"program", program_text(steps)}});
}

bool FusedElementwise::is_cheap() const {
  for (const auto& st : steps_) {
    if (!is_cheap_scalar_op(st.op->name())) return false;
  }
  return true;
}

bool FusedElementwise::is_long_chain() const {
  int costly = 0;
  for (const auto& st : steps_) costly += !is_cheap_scalar_op(st.op->name());
  return costly >= 2 || steps_.size() >= 12;
}

std::vector<TensorType> FusedElementwise::infer_type(const std::vector<TensorType>& inputs) const {
  if (static_cast<int>(inputs.size()) != arity_) {
    throw UserError("fused_elementwise takes " + std::to_string(arity_) + " inputs, got " +
                    std::to_string(inputs.size()));
  }
  std::vector<TensorType> vals;
  for (size_t j = 0; j < steps_.size(); ++j) {
    std::vector<TensorType> args;
    for (int a : steps_[j].args) args.push_back(a >= 0 ? inputs[a] : vals[-a - 1]);
    try {
      vals.push_back(steps_[j].op->infer_type(args).at(0));
    } catch (const UserError& e) {
      throw UserError("step " + std::to_string(j) + " (" + steps_[j].op->name() + "): " + e.what());
    }
  }
  return {vals.back()};
}

std::vector<Shape> FusedElementwise::infer_shape(const std::vector<Shape>& inputs) const {
  std::vector<Shape> vals;
  for (const auto& st : steps_) {
    std::vector<Shape> args;
    for (int a : st.args) args.push_back(a >= 0 ? inputs[a] : vals[-a - 1]);
    vals.push_back(broadcast_shapes(args));
  }
  return {vals.back()};
}

void FusedElementwise::perform(const std::vector<Tensor>& inputs,
                               std::vector<Tensor>& outputs) const {
  // The reference runs step by step with real intermediates: the unfused semantics.
  std::vector<Tensor> vals;
  std::vector<TensorType> types;
  for (const auto& in : inputs) types.push_back(TensorType{in.dtype(), in.shape()});
  for (size_t j = 0; j < steps_.size(); ++j) {
    std::vector<Tensor> args;
    std::vector<Shape> shapes;
    std::vector<TensorType> arg_types;
    for (int a : steps_[j].args) {
      args.push_back(a >= 0 ? inputs[a] : vals[-a - 1]);
      shapes.push_back(args.back().shape());
      arg_types.push_back(TensorType{args.back().dtype(), args.back().shape()});
    }
    DType dt = steps_[j].op->infer_type(arg_types).at(0).dtype;
    std::vector<Tensor> out{Tensor::empty(dt, broadcast_shapes(shapes))};
    steps_[j].op->perform(args, out);
    vals.push_back(out[0]);
  }
  const Tensor& last = vals.back();
  Tensor& y = outputs.at(0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (is_float(y.dtype())) {
      y.store(i, last.load(i));
    } else {
      y.store_int(i, last.load_int(i));
    }
  }
}

std::vector<DType> FusedElementwise::step_dtypes(const std::vector<DType>& in) const {
  std::vector<DType> out;
  for (const auto& st : steps_) {
    std::vector<TensorType> args;
    for (int a : st.args) args.push_back(TensorType{a >= 0 ? in[a] : out[-a - 1], {}});
    out.push_back(st.op->infer_type(args).at(0).dtype);
  }
  return out;
}

void FusedElementwise::scalar_body(const std::vector<DType>& in, std::vector<std::string>& lets,
                                   std::string& expr, const std::string& temp_prefix) const {
  std::vector<DType> dts = step_dtypes(in);
  for (size_t j = 0; j < steps_.size(); ++j) {
    const FusedStep& st = steps_[j];
    std::vector<DType> arg_dts;
    TemplateValues v;
    for (size_t k = 0; k < st.args.size(); ++k) {
      int a = st.args[k];
      arg_dts.push_back(a >= 0 ? in[a] : dts[-a - 1]);
      // Inputs stay placeholders for the loop to fill; steps become named temporaries.
      v[std::to_string(k)] =
          a >= 0 ? "${" + std::to_string(a) + "}" : temp_prefix + std::to_string(-a - 1);
    }
    // where's data dtype is its second argument; every other op's is its first.
    DType data = st.op->def().out == OutRule::kWhere ? arg_dts.at(1) : arg_dts.at(0);
    std::string e =
        render_template(st.op->scalar_expr(data, dts[j]), v, "fused step " + st.op->name());
    if (j + 1 == steps_.size()) {
      expr = e;
    } else {
      lets.push_back("const " + std::string(dtype_c_type(dts[j])) + " " + temp_prefix +
                     std::to_string(j) + " = (" + std::string(dtype_c_type(dts[j])) + ")" + e +
                     ";");
    }
  }
}

std::string FusedElementwise::c_code(const Node& node, const CodeNames& names,
                                     const Sub& sub) const {
  std::vector<LoopOperand> ops;
  std::vector<DType> dts;
  const TensorType& out = node.outputs[0]->type;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    ops.push_back(loop_operand(node.inputs[k], names.inputs[k], out));
    dts.push_back(node.inputs[k]->type.dtype);
  }
  std::vector<std::string> lets;
  std::string expr;
  if (auto table = table_code(node, names, sub, ops)) return *table;
  scalar_body(dts, lets, expr, "v");
  auto emit = [&](const std::vector<LoopOperand>& with) {
    return emit_elementwise_loop(with, names.outputs[0], out.dtype, out.rank(), expr, sub.ctx, lets,
                                 is_long_chain());
  };
  const std::vector<DType> step_dts = step_dtypes(dts);
  for (size_t j = 0; j < steps_.size(); ++j) {
    const FusedStep& st = steps_[j];
    if (st.op->name() != "pow" || !is_float(step_dts[j]) || st.args.at(1) < 0) continue;
    const auto e = static_cast<size_t>(st.args[1]);
    if (ops[e].single && !ops[e].literal && !ops[e].reads_output)
      return emit_versioned_on(ops, e, {2, 3}, emit);
  }
  return emit(ops);
}

std::optional<std::string> FusedElementwise::table_prefix(const Node& node, const CodeNames& names,
                                                          const std::vector<LoopOperand>& ops,
                                                          const TensorType& space, DType value,
                                                          int& byte) const {
  // Cheap chains stay loops (a table is not worth 256 evaluations).
  byte = -1;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].literal || ops[k].single) continue;
    if (byte >= 0) return {};
    byte = static_cast<int>(k);
  }
  if (byte < 0 || is_cheap() || space.rank() == 0) return {};
  const TensorType& in = node.inputs[static_cast<size_t>(byte)]->type;
  if ((in.dtype != DType::kUInt8 && in.dtype != DType::kInt8) || in.dims != space.dims) return {};
  std::vector<DType> dts;
  for (const Variable* v : node.inputs) dts.push_back(v->type.dtype);
  std::vector<std::string> lets;
  std::string expr;
  scalar_body(dts, lets, expr, "v");
  const std::string in_t(dtype_c_type(in.dtype)), out_t(dtype_c_type(value));
  TemplateValues v;
  std::string s = "{\n" + out_t + " kiln_lut[256];\n{\n";
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string key = std::to_string(k);
    if (static_cast<int>(k) == byte) {
      v[key] = "((" + in_t + ")(uint8_t)kiln_b)";
    } else if (ops[k].literal) {
      v[key] = *ops[k].literal;
    } else {
      const std::string t(dtype_c_type(ops[k].dtype));
      s += "const " + t + " kiln_s" + key + " = *(const " + t + " *)" + names.inputs[k] +
           "->data;\n";
      v[key] = "kiln_s" + key;
    }
  }
  s += "for (int kiln_b = 0; kiln_b < 256; ++kiln_b) {\n";
  for (const std::string& let : lets) s += render_template(let, v, "fused table") + "\n";
  s += "kiln_lut[kiln_b] = (" + out_t + ")" + render_template(expr, v, "fused table") + ";\n}\n}\n";
  return s;
}

std::optional<std::string> FusedElementwise::table_code(const Node& node, const CodeNames& names,
                                                        const Sub& sub,
                                                        const std::vector<LoopOperand>& ops) const {
  const TensorType& out = node.outputs[0]->type;
  int byte = -1;
  auto table = table_prefix(node, names, ops, out, out.dtype, byte);
  if (!table) return {};
  std::string s = *table;
  const std::string& x = names.inputs[static_cast<size_t>(byte)];
  const std::string& y = names.outputs[0];
  const std::string rank = std::to_string(out.rank());
  std::string loop = emit_elementwise_loop({ops[static_cast<size_t>(byte)]}, y, out.dtype,
                                           out.rank(), "kiln_lut[(uint8_t)${0}]", sub.ctx);
  if (dtype_size(out.dtype) != 1) return s + loop + "}\n";
  // Bytes to bytes, both dense: kiln_support.lut_bytes (byte permutes where the CPU has them).
  s += "int kiln_dense = 1;\nint64_t kiln_n = 1;\nfor (int d = " + rank +
       " - 1; d >= 0; --d) {\n"
       "if (" +
       y + "->shape[d] != 1 && (" + x + "->strides[d] != kiln_n || " + y +
       "->strides[d] != kiln_n)) kiln_dense = 0;\n"
       "kiln_n *= " +
       y +
       "->shape[d];\n}\n"
       "if (kiln_dense) {\nint64_t lo, hi;\n"
       "kiln_part_range(kiln_n, " +
       sub.ctx + "->part, " + sub.ctx +
       "->n_parts, 64, &lo, &hi);\n"
       "if (lo < hi) KILN_SUPPORT->lut_bytes((const uint8_t *)" +
       x + "->data + lo, (uint8_t *)" + y +
       "->data + lo, hi - lo, (const uint8_t *)kiln_lut);\n"
       "} else " +
       loop + "}\n";
  return s;
}

std::vector<std::string> FusedElementwise::c_preludes() const {
  for (const auto& st : steps_) {
    if (uses_math_prelude(st.op->def())) return {"kiln_index.h", "kiln_scalar.h", "kiln_math.h"};
  }
  return {"kiln_index.h", "kiln_scalar.h"};
}

}  // namespace kiln
