#include "ops/fused_reduce.h"

#include "util/error.h"

namespace kiln {
namespace {

const std::vector<std::pair<std::string, ReduceKind>>& kinds() {
  static const std::vector<std::pair<std::string, ReduceKind>> k = {{"sum", ReduceKind::kSum},
                                                                    {"mean", ReduceKind::kMean},
                                                                    {"max", ReduceKind::kMax},
                                                                    {"min", ReduceKind::kMin},
                                                                    {"prod", ReduceKind::kProd}};
  return k;
}

ReduceKind kind_of(const Attrs& props) {
  std::string name = attr_string(props, "reduce");
  std::string known;
  for (const auto& [n, kind] : kinds()) {
    if (n == name) return kind;
    known += (known.empty() ? "" : ", ") + n;
  }
  throw AttrError("reduce", "unknown reduction '" + name + "' (known: " + known + ")");
}

Attrs reduce_props(const Attrs& props) {
  check_known_attrs(props, {"reduce", "axes", "keepdims", "program"});
  Attrs out;
  for (const char* key : {"axes", "keepdims"}) {
    auto it = props.find(key);
    if (it != props.end()) out[key] = it->second;
  }
  return out;
}

}  // namespace

FusedReduce::FusedReduce(Attrs props) : COp("fused_reduce", std::move(props)) {
  reduce_ = std::make_shared<Reduce>(kind_of(this->props()), reduce_props(this->props()));
  program_ =
      std::make_shared<FusedElementwise>(Attrs{{"program", attr_string(this->props(), "program")}});
}

std::shared_ptr<const FusedReduce> FusedReduce::make(const Reduce& reduce,
                                                     const FusedElementwise& program) {
  Attrs props = reduce.props();
  props["program"] = program.props().at("program");
  for (const auto& [n, kind] : kinds()) {
    if (kind == reduce.kind()) props["reduce"] = n;
  }
  return std::make_shared<FusedReduce>(std::move(props));
}

std::vector<TensorType> FusedReduce::infer_type(const std::vector<TensorType>& inputs) const {
  return reduce_->infer_type(program_->infer_type(inputs));
}

std::vector<Shape> FusedReduce::infer_shape(const std::vector<Shape>& inputs) const {
  return reduce_->infer_shape(program_->infer_shape(inputs));
}

void FusedReduce::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  // The reference materializes the reduced values: the unfused semantics.
  std::vector<TensorType> types;
  std::vector<Shape> shapes;
  for (const auto& in : inputs) {
    types.push_back(TensorType{in.dtype(), in.shape()});
    shapes.push_back(in.shape());
  }
  std::vector<Tensor> values{
      Tensor::empty(program_->infer_type(types).at(0).dtype, program_->infer_shape(shapes).at(0))};
  program_->perform(inputs, values);
  reduce_->perform(values, outputs);
}

int FusedReduce::space_rank(const Node& node) const {
  std::vector<TensorType> types;
  for (const Variable* v : node.inputs) types.push_back(v->type);
  return program_->infer_type(types).at(0).rank();
}

bool FusedReduce::c_splittable(const Node& node) const {
  for (bool reduced : reduce_->reduced_mask(space_rank(node))) {
    if (!reduced) return true;
  }
  return false;
}

std::string FusedReduce::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  std::vector<LoopOperand> ops;
  std::vector<DType> dts;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    // The reduction loop has no row-invariant operands: a rank-0 type marks none.
    ops.push_back(loop_operand(node.inputs[k], names.inputs[k], TensorType{}));
    dts.push_back(node.inputs[k]->type.dtype);
  }
  const int rank = space_rank(node);
  ReduceLoop spec{reduce_->kind(), reduce_->reduced_mask(rank), reduce_->keepdims(),
                  node.outputs[0]->type.dtype};
  // A costly function of one byte tensor (a quantized activation's SiLU before a global
  // pool): its 256 values once, then a lookup per element.
  std::vector<TensorType> types;
  for (const Variable* v : node.inputs) types.push_back(v->type);
  const TensorType value = program_->infer_type(types).at(0);
  int byte = -1;
  if (auto table = program_->table_prefix(node, names, ops, value, value.dtype, byte)) {
    return *table +
           emit_reduce_loop(spec, {ops[static_cast<size_t>(byte)]}, "kiln_lut[(uint8_t)${0}]", {},
                            names.outputs[0], sub.ctx) +
           "}\n";
  }
  std::vector<std::string> lets;
  std::string expr;
  program_->scalar_body(dts, lets, expr, "v");
  return emit_reduce_loop(spec, ops, expr, lets, names.outputs[0], sub.ctx);
}

}  // namespace kiln
