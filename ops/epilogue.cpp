#include "ops/epilogue.h"

#include <algorithm>

#include "ops/c/elementwise_loop.h"
#include "ops/qconv.h"
#include "ops/registry.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

const std::string kPrefix = "base.";

void merge(std::vector<std::string>& into, const std::vector<std::string>& more) {
  for (const auto& m : more) {
    if (std::find(into.begin(), into.end(), m) == into.end()) into.push_back(m);
  }
}

}  // namespace

WithEpilogue::WithEpilogue(Attrs props) : COp("with_epilogue", std::move(props)) {
  Attrs base_props;
  for (const auto& [k, v] : this->props()) {
    if (k.rfind(kPrefix, 0) == 0) {
      base_props[k.substr(kPrefix.size())] = v;
    } else if (k != "base" && k != "base_inputs" && k != "program") {
      throw AttrError(k, "unknown attribute for with_epilogue");
    }
  }
  std::string base = attr_string(this->props(), "base");
  auto op = OpRegistry::instance().create(base, base_props);
  base_ = std::dynamic_pointer_cast<const COp>(op);
  // Only ops whose split parts the in-place epilogue can follow (their c_split_unit or
  // c_split_tiles say which output elements a part computed).
  // A qmatmul only splitting by whole rows (split_rows): column panels are no runs.
  const bool rows_qmatmul = base == "qmatmul" && attr_int(base_props, "split_rows", 0) == 1;
  if (!base_ || (base != "gemm" && base != "matmul" && base != "conv" && base != "conv_nchwc" &&
                 base != "qconv" && !rows_qmatmul)) {
    throw AttrError("base", "'" + base +
                                "' cannot take an epilogue (gemm, matmul, conv, conv_nchwc, "
                                "qconv, qmatmul with split_rows can)");
  }
  base_inputs_ = static_cast<int>(attr_int(this->props(), "base_inputs"));
  if (base_inputs_ < 1) throw AttrError("base_inputs", "must be at least 1");
  program_ =
      std::make_shared<FusedElementwise>(Attrs{{"program", attr_string(this->props(), "program")}});
}

std::shared_ptr<const WithEpilogue> WithEpilogue::make(const COp& base, int base_inputs,
                                                       const FusedElementwise& program) {
  Attrs props;
  for (const auto& [k, v] : base.props()) props[kPrefix + k] = v;
  props["base"] = base.name();
  props["base_inputs"] = static_cast<int64_t>(base_inputs);
  props["program"] = attr_string(program.props(), "program");
  return std::make_shared<WithEpilogue>(std::move(props));
}

std::vector<TensorType> WithEpilogue::infer_type(const std::vector<TensorType>& inputs) const {
  if (static_cast<int>(inputs.size()) != base_inputs_ + program_->arity() - 1) {
    throw UserError("with_epilogue takes " + std::to_string(base_inputs_ + program_->arity() - 1) +
                    " inputs, got " + std::to_string(inputs.size()));
  }
  std::vector<TensorType> base_in(inputs.begin(), inputs.begin() + base_inputs_);
  auto base_out = base_->infer_type(base_in);
  if (base_out.size() != 1) throw UserError(base_->name() + ": an epilogue needs one output");
  std::vector<TensorType> prog_in{base_out[0]};
  prog_in.insert(prog_in.end(), inputs.begin() + base_inputs_, inputs.end());
  auto out = program_->infer_type(prog_in);
  if (out[0].dtype != base_out[0].dtype || out[0].dims != base_out[0].dims) {
    throw UserError("epilogue changes the output of " + base_->name() + " from " +
                    base_out[0].to_string() + " to " + out[0].to_string());
  }
  return out;
}

double WithEpilogue::flops(const std::vector<Shape>& inputs,
                           const std::vector<Shape>& outputs) const {
  // The base op's products; the epilogue's few operations per element are not counted.
  return base_->flops(std::vector<Shape>(inputs.begin(), inputs.begin() + base_inputs_), outputs);
}

std::vector<Shape> WithEpilogue::infer_shape(const std::vector<Shape>& inputs) const {
  std::vector<Shape> base_in(inputs.begin(), inputs.begin() + base_inputs_);
  Shape y = base_->infer_shape(base_in).at(0);
  std::vector<Shape> prog_in{y};
  prog_in.insert(prog_in.end(), inputs.begin() + base_inputs_, inputs.end());
  if (program_->infer_shape(prog_in).at(0) != y) {
    throw UserError("epilogue of " + base_->name() + ": an operand does not broadcast to " +
                    dims_to_string(y));
  }
  return {y};
}

void WithEpilogue::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  std::vector<Tensor> base_in(inputs.begin(), inputs.begin() + base_inputs_);
  std::vector<Tensor> base_out{Tensor::empty(outputs.at(0).dtype(), outputs.at(0).shape())};
  base_->perform(base_in, base_out);
  std::vector<Tensor> prog_in{base_out[0]};
  prog_in.insert(prog_in.end(), inputs.begin() + base_inputs_, inputs.end());
  program_->perform(prog_in, outputs);
}

std::optional<int> WithEpilogue::cache_version() const {
  auto v = base_->cache_version();
  auto p = program_->cache_version();
  if (!v || !p) return std::nullopt;
  // Any change to either changes this; the millions count changes to the epilogue's own code
  // (1: byte tables looked up in place).
  return 1000000 + *v * 1000 + *p;
}

Node WithEpilogue::base_view(const Node& node) const {
  Node view;
  view.id = node.id;
  view.op = base_;
  view.name = node.name;
  view.inputs.assign(node.inputs.begin(), node.inputs.begin() + base_inputs_);
  view.outputs = node.outputs;
  return view;
}

std::optional<StoreClamp> WithEpilogue::store_clamp(const Node& node,
                                                    const CodeNames& names) const {
  const auto& steps = program_->steps();
  const TensorType& out = node.outputs[0]->type;
  if (steps.size() != 1 || !is_float(out.dtype)) return std::nullopt;
  const std::string T(dtype_c_type(out.dtype));
  const std::string& name = steps[0].op->name();
  if (name == "relu" && steps[0].args == std::vector<int>{0}) {
    return StoreClamp{"(" + T + ")0", "(" + T + ")__builtin_inf()"};
  }
  if (name != "clip" || steps[0].args != std::vector<int>{0, 1, 2}) return std::nullopt;
  // clip's bounds: two one-element inputs of the output's type, read when the step runs.
  std::string bound[2];
  for (int k = 0; k < 2; ++k) {
    const size_t i = static_cast<size_t>(base_inputs_ + k);
    const TensorType& t = node.inputs[i]->type;
    if (t.dtype != out.dtype) return std::nullopt;
    for (int64_t d : t.dims) {
      if (d != 1) return std::nullopt;  // (a dynamic dimension too)
    }
    bound[k] = "((const " + T + " *)" + names.inputs[i] + "->data)[0]";
  }
  return StoreClamp{bound[0], bound[1]};
}

std::string WithEpilogue::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  Node view = base_view(node);
  CodeNames base_names;
  base_names.inputs.assign(names.inputs.begin(), names.inputs.begin() + base_inputs_);
  base_names.outputs = names.outputs;
  if (base_->c_store_clamp(view)) {
    if (auto clamp = store_clamp(node, names)) {
      return "/* epilogue, in the stores: " + attr_string(program_->props(), "program") + " */\n" +
             base_->c_code_with_clamp(view, base_names, sub, *clamp);
    }
  }

  // The epilogue: an in-place pass over the output, reading it as $0.
  std::vector<LoopOperand> ops;
  std::vector<DType> dts;
  const TensorType& out = node.outputs[0]->type;
  LoopOperand self;
  self.reads_output = true;
  self.dtype = out.dtype;
  self.rank = out.rank();
  ops.push_back(self);
  dts.push_back(out.dtype);
  for (size_t k = base_inputs_; k < node.inputs.size(); ++k) {
    ops.push_back(loop_operand(node.inputs[k], names.inputs[k], out));
    dts.push_back(node.inputs[k]->type.dtype);
  }
  std::vector<std::string> lets;
  std::string expr;
  program_->scalar_body(dts, lets, expr, "e");
  const std::string banner = "/* epilogue: " + attr_string(program_->props(), "program") + " */\n";
  // A split base op computed only its units of the output: the epilogue takes the same ones.
  const bool split = c_splittable(node);
  const int64_t unit = split ? base_->c_split_unit(view) : 0;
  auto tiles = split ? base_->c_split_tiles(view, base_names, sub) : std::nullopt;
  if (tiles && base_->c_inline_epilogue(view)) {
    // The base op runs the epilogue on each piece it finishes, while the piece is in cache.
    tiles->piece_in_scope = true;
    return base_->c_code_with_epilogue(
        view, base_names, sub,
        banner + emit_elementwise_loop(ops, names.outputs[0], out.dtype, out.rank(), expr, sub.ctx,
                                       lets, program_->is_long_chain(), "", &*tiles));
  }
  // A costly chain of the byte output alone (a quantized sigmoid or swish after an integer
  // convolution): the convolution looks its 256 values up on each chunk it finishes, as the
  // chain alone would do as a node of its own; evaluated per element it cost 10x the product.
  if (auto table = table_in_base(node, names, sub, ops)) return banner + *table;
  std::string s = base_->c_code(view, base_names, sub);
  s += banner;
  s += emit_elementwise_loop(
      ops, names.outputs[0], out.dtype, out.rank(), expr, sub.ctx, lets, program_->is_long_chain(),
      unit > 0 && !tiles ? sub.value(unit, "unit") : "", tiles ? &*tiles : nullptr);
  return s;
}

bool WithEpilogue::byte_table(const Node& node) const {
  const auto* qconv = dynamic_cast<const QConv*>(base_.get());
  if (!qconv || program_->is_cheap() || !qconv->takes_table(base_view(node))) return false;
  // Every operand but the output one element (so the chain is a function of the byte alone).
  for (size_t k = base_inputs_; k < node.inputs.size(); ++k) {
    for (int64_t d : node.inputs[k]->type.dims) {
      if (d != 1) return false;
    }
  }
  return true;
}

std::optional<std::string> WithEpilogue::table_in_base(const Node& node, const CodeNames& names,
                                                       const Sub& sub,
                                                       const std::vector<LoopOperand>& ops) const {
  if (!byte_table(node)) return std::nullopt;
  Node program;  // the program as a node over (the output, the epilogue's operands)
  program.id = node.id;
  program.op = program_;
  program.name = node.name;
  program.inputs.push_back(node.outputs[0]);
  program.inputs.insert(program.inputs.end(), node.inputs.begin() + base_inputs_,
                        node.inputs.end());
  program.outputs = node.outputs;
  CodeNames program_names;
  program_names.inputs.push_back(names.outputs[0]);
  program_names.inputs.insert(program_names.inputs.end(), names.inputs.begin() + base_inputs_,
                              names.inputs.end());
  const TensorType& out = node.outputs[0]->type;
  int byte = -1;
  auto table = program_->table_prefix(program, program_names, ops, out, out.dtype, byte);
  if (!table || byte != 0) {
    throw UserError("with_epilogue: the program of node " + std::to_string(node.id) +
                    " is no byte table, yet its split assumed one");
  }
  CodeNames base_names;
  base_names.inputs.assign(names.inputs.begin(), names.inputs.begin() + base_inputs_);
  base_names.outputs = names.outputs;
  return *table +
         dynamic_cast<const QConv&>(*base_).c_code_with_table(base_view(node), base_names, sub,
                                                              "kiln_lut") +
         "}\n";
}

bool WithEpilogue::c_splittable(const Node& node) const {
  Node view = base_view(node);
  // A table the base op applies itself follows whatever split the base op makes.
  return base_->c_splittable(view) && (base_->c_split_unit(view) > 0 || byte_table(node));
}

int64_t WithEpilogue::c_split_unit(const Node& node) const {
  return base_->c_split_unit(base_view(node));
}

std::string WithEpilogue::c_support_code_apply(const Node& node, const std::string& prefix) const {
  return base_->c_support_code_apply(base_view(node), prefix);
}
std::string WithEpilogue::c_state_fields(const Node& node, const std::string& prefix) const {
  return base_->c_state_fields(base_view(node), prefix);
}
std::string WithEpilogue::c_init_code_struct(const Node& node, const Sub& sub) const {
  return base_->c_init_code_struct(base_view(node), sub);
}
std::string WithEpilogue::c_cleanup_code_struct(const Node& node, const Sub& sub) const {
  return base_->c_cleanup_code_struct(base_view(node), sub);
}

std::vector<std::string> WithEpilogue::c_headers() const {
  auto h = base_->c_headers();
  merge(h, program_->c_headers());
  return h;
}

std::vector<std::string> WithEpilogue::c_preludes() const {
  auto p = base_->c_preludes();
  merge(p, program_->c_preludes());
  return p;
}

}  // namespace kiln
