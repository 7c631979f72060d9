// Algebraic simplification: identities that remove work without changing results.
//   x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, x ** 1   -> x  (when x already has the output type)
//   neg(neg x), logical_not(logical_not x)             -> x
//   log(exp x)                                         -> x  (exact; avoids exp overflow)
//   cast(x) to x's own dtype                           -> x
//   transpose(transpose x)                             -> one transpose, or x
//   transpose moving only axes of size 1               -> reshape
//   reshape(reshape x), reshape(x) to x's own shape    -> one reshape, or x
//   pad(x) with every pad 0 (exported models have them) -> x
//   conv(pad(x)) padding H and W with zeros             -> conv(x), its pads grown
//   transpose(e(transpose x)), e one-input elementwise, perms inverse -> e(x)
//   op(transpose(x), c), c constant varying on one axis  -> transpose(op(x, c reshaped))
//     (ConvNeXt's layer scale after its NHWC -> NCHW transpose: the transpose then meets the
//     next reorder, and the product the GEMM before it)
//     (TensorFlow-style "same" padding exports as an explicit Pad: a copy of the image, and
//     in the blocked layout a region broken around it)
//   reshape(e(x, ...)), e elementwise read only there     -> e(reshape(x), ...)
//     (a quantized BERT's dequantize-and-bias before the reshape its GELU reads: moved
//     above it, the two fuse into one loop; recursively up a chain of such producers,
//     operands that broadcast staying as they are)
//   pow(x, 2), pow(x, 3) with a constant exponent       -> x * x, x * x * x
//     (a libm call per element kept GPT-2's GELU, x + 0.044715 x^3 under a tanh, from
//     vectorising: 1.5 ms per layer; x * x is pow's correctly rounded result, x * x * x
//     within an ulp of it, and both agree on NaN, infinities and signed zeros)
//   round(x / c), c a float32 constant or weight whose elements and reciprocals are all
//   normal                                          -> round(div_rcp(x, c, 1/c))
//     (a quantizer's division by its scale, ONNX's rule: vdivps issues about once per 16
//     cycles, the reciprocal's product and two fused multiply-adds a few per cycle. The
//     corrected quotient is x / c's own wherever |x| >= 2^-100 and it is below 2^127;
//     elsewhere both round to the same integer or saturate alike: tests/div_rcp_test.c)
// exp(log x) is left alone: it is NaN for x < 0, where x itself is not.
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// True when `v` is a small plain constant every element of which equals `value`.
bool is_splat(const Variable* v, double value) {
  if (v->kind != VarKind::kConstant || v->parameter || !v->value) return false;
  const Tensor& t = *v->value;
  if (t.numel() == 0 || t.numel() > 4096) return false;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.load(i) != value) return false;
  }
  return true;
}

const Node* producer(const Variable* v, const std::string& op) {
  return v->kind == VarKind::kNodeOutput && v->owner && v->owner->op->name() == op ? v->owner
                                                                                   : nullptr;
}

std::vector<int64_t> perm_of(const Node& t) {
  auto perm = attr_ints(t.op->props(), "perm", std::vector<int64_t>{});
  if (perm.empty()) {  // the default reverses the axes
    int r = t.inputs[0]->type.rank();
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  return perm;
}

// What a node reduces to: an existing source variable (identity), or a replacement op over
// source variables; nullopt when no rule applies.
struct Rewrite {
  const Variable* same = nullptr;
  std::shared_ptr<const Op> op;
  std::vector<Variable*> inputs;
};

// A convolution of a zero Pad of its input's spatial dimensions (none of N and C): the same
// convolution of the unpadded input with the pads added to its own.
std::optional<Rewrite> conv_absorbing_pad(const Node& conv) {
  const Node* pad = producer(conv.inputs[0], "pad");
  if (!pad || pad->inputs.size() != 1) return std::nullopt;
  const Attrs& pp = pad->op->props();
  const Attrs& cp = conv.op->props();
  const double value = attr_float(pp, "value", 0.0);
  if (value != 0.0 || std::signbit(value)) return std::nullopt;
  if (attr_string(pp, "mode", std::string("constant")) != "constant") return std::nullopt;
  if (attr_string(cp, "auto_pad", "NOTSET") != "NOTSET") return std::nullopt;
  const int rank = pad->inputs[0]->type.rank();
  const std::vector<int64_t> pads = attr_ints(pp, "pads");
  if ((rank != 3 && rank != 4) || pads.size() != static_cast<size_t>(2 * rank)) return std::nullopt;
  const int spatial = rank - 2;
  for (int64_t p : pads)
    if (p < 0) return std::nullopt;  // a crop
  if (pads[0] != 0 || pads[1] != 0 || pads[static_cast<size_t>(rank)] != 0 ||
      pads[static_cast<size_t>(rank) + 1] != 0) {
    return std::nullopt;
  }
  std::vector<int64_t> grown =
      attr_ints(cp, "pads", std::vector<int64_t>(static_cast<size_t>(2 * spatial), 0));
  if (grown.size() != static_cast<size_t>(2 * spatial)) return std::nullopt;
  for (int d = 0; d < spatial; ++d) {
    grown[static_cast<size_t>(d)] += pads[static_cast<size_t>(2 + d)];
    grown[static_cast<size_t>(spatial + d)] += pads[static_cast<size_t>(rank + 2 + d)];
  }
  Attrs props = cp;
  props["pads"] = grown;
  std::vector<Variable*> inputs(conv.inputs.begin(), conv.inputs.end());
  inputs[0] = pad->inputs[0];
  return Rewrite{nullptr, OpRegistry::instance().create("conv", props), inputs};
}

std::optional<Rewrite> rule(const Node& node) {
  const std::string& name = node.op->name();
  const Variable* out = node.outputs.size() == 1 ? node.outputs[0] : nullptr;
  if (!out) return std::nullopt;
  auto keeps = [&](const Variable* x) -> std::optional<Rewrite> {
    if (x->type == out->type) return Rewrite{x, nullptr, {}};
    return std::nullopt;
  };
  const auto& in = node.inputs;
  if (name == "conv" && in.size() >= 2) {
    if (auto r = conv_absorbing_pad(node)) return r;
  }
  if (in.size() == 2) {
    if ((name == "add" || name == "sub") && is_splat(in[1], 0)) return keeps(in[0]);
    if (name == "add" && is_splat(in[0], 0)) return keeps(in[1]);
    if ((name == "mul" || name == "div" || name == "pow") && is_splat(in[1], 1))
      return keeps(in[0]);
    if (name == "mul" && is_splat(in[0], 1)) return keeps(in[1]);
  }
  if (in.size() != 1) return std::nullopt;
  const Variable* x = in[0];
  for (const char* involution : {"neg", "logical_not"}) {
    if (name == involution) {
      if (const Node* p = producer(x, name)) return keeps(p->inputs[0]);
    }
  }
  if (name == "log") {
    if (const Node* p = producer(x, "exp")) return keeps(p->inputs[0]);
  }
  if (name == "cast" && x->type.dtype == out->type.dtype) return keeps(x);
  if (name == "transpose") {
    // Only axes of size 1 move (ViT's (1, 197, 384) -> (197, 1, 384)): the elements keep
    // their order, so a reshape, which copies nothing.
    const auto perm = perm_of(node);
    bool in_order = true, known = true;
    int64_t last = -1;
    for (int64_t d : perm) {
      const int64_t n = x->type.dims[static_cast<size_t>(d)];
      known = known && n != kDynamic;
      if (n == 1) continue;
      in_order = in_order && d > last;
      last = d;
    }
    if (known && in_order) {
      return Rewrite{nullptr,
                     OpRegistry::instance().create("reshape", {{"shape", out->type.dims}}),
                     {node.inputs[0]}};
    }
    if (const Node* p = producer(x, "transpose")) {
      auto outer = perm_of(node), inner = perm_of(*p);
      std::vector<int64_t> perm;
      bool identity = true;
      for (size_t i = 0; i < outer.size(); ++i) {
        perm.push_back(inner[static_cast<size_t>(outer[i])]);
        identity = identity && perm.back() == static_cast<int64_t>(i);
      }
      if (identity) return keeps(p->inputs[0]);
      return Rewrite{
          nullptr, OpRegistry::instance().create("transpose", {{"perm", perm}}), {p->inputs[0]}};
    }
  }
  if (name == "pad" && node.inputs.size() == 1) {
    bool zero = true;
    for (int64_t p : attr_ints(node.op->props(), "pads")) zero = zero && p == 0;
    if (zero) return keeps(x);
  }
  if (name == "reshape") {
    bool static_same = x->type == out->type;
    for (int64_t d : out->type.dims) static_same = static_same && d >= 0;
    if (static_same) return keeps(x);
    // A target that reads run-time dimensions (of the data or other inputs) stays as it is.
    if (node.op->props().count("dims")) return std::nullopt;
    auto shape = attr_ints(node.op->props(), "shape");
    bool copies_dims = false;  // a 0 entry copies the input's dimension
    for (int64_t d : shape) copies_dims = copies_dims || d == 0;
    if (const Node* p = producer(x, "reshape"); p && !copies_dims) {
      return Rewrite{nullptr, node.op, {p->inputs[0]}};
    }
  }
  return std::nullopt;
}

// op(transpose(x, p), c) for a binary arithmetic op, the transpose read only here, and c a
// constant that varies along exactly one axis and does not grow the result: the op before the
// transpose, c reshaped to x's axes. Returns the new transpose's output, or null.
Variable* arithmetic_before_transpose(const Node& node, GraphCopy& copy,
                                      const std::unordered_map<const Variable*, int>& uses) {
  static const std::set<std::string> ops{"add", "sub", "mul", "div"};
  if (!ops.count(node.op->name()) || node.inputs.size() != 2 || node.outputs.size() != 1)
    return nullptr;
  const Variable* out = node.outputs[0];
  for (int k = 0; k < 2; ++k) {
    const Variable* t = node.inputs[static_cast<size_t>(k)];
    const Variable* c = node.inputs[static_cast<size_t>(1 - k)];
    const Node* tr = producer(t, "transpose");
    if (!tr || uses.at(t) != 1 || c->kind != VarKind::kConstant || !(t->type == out->type))
      continue;
    const auto& cd = c->type.dims;
    const int rank = t->type.rank();
    if (static_cast<int>(cd.size()) > rank) continue;
    int axis = -1, varying = 0;
    for (size_t i = 0; i < cd.size(); ++i) {
      if (cd[i] == 1) continue;
      ++varying;
      axis = rank - static_cast<int>(cd.size()) + static_cast<int>(i);
    }
    const int64_t size = axis >= 0 ? cd[cd.size() - static_cast<size_t>(rank - axis)] : 1;
    // A scalar stays where it is: a scale after a head split is the product's alpha
    // (matmul_views), which a scale before the split is not.
    if (varying != 1 || size == kDynamic) continue;
    const std::vector<int64_t> perm = perm_of(*tr);
    std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
    if (axis >= 0) shape[static_cast<size_t>(perm[static_cast<size_t>(axis)])] = size;
    const OpRegistry& reg = OpRegistry::instance();
    Graph& dst = copy.dst();
    Variable* cr =
        dst.add_node(reg.create("reshape", {{"shape", shape}}), {copy.map(c)},
                     node.name + ".operand_to_source", {dst.fresh_name(c->name + ".to_source")})
            ->outputs[0];
    std::vector<Variable*> ins{copy.map(tr->inputs[0]), cr};
    if (k == 1) std::swap(ins[0], ins[1]);
    Variable* before = dst.add_node(node.op, ins, node.name + ".before_transpose",
                                    {dst.fresh_name(out->name + ".before_transpose")})
                           ->outputs[0];
    return copy.add(tr->op, {before}, {out}, node.name)->outputs[0];
  }
  return nullptr;
}

// transpose(e(transpose(x, p)), q) for a one-input elementwise e, q undoing p, and the inner
// transpose and e each read only here: e(x). A layout round trip around an activation
// (bf16 convolutions' channels-first result through a ReLU back to channels-last, a
// converted TensorFlow model's Transpose -> Relu -> Transpose) moves nothing. Returns the
// result, or null.
Variable* unary_between_inverse_transposes(const Node& node, GraphCopy& copy,
                                           const std::unordered_map<const Variable*, int>& uses) {
  if (node.op->name() != "transpose" || node.inputs.size() != 1 || node.outputs.size() != 1)
    return nullptr;
  const Variable* m = node.inputs[0];
  const Node* e = m->kind == VarKind::kNodeOutput ? m->owner : nullptr;
  if (!e || e->inputs.size() != 1 || e->outputs.size() != 1 || !is_elementwise_node(*e) ||
      uses.at(m) != 1) {
    return nullptr;
  }
  const Node* t = producer(e->inputs[0], "transpose");
  if (!t || uses.at(e->inputs[0]) != 1) return nullptr;
  const auto outer = perm_of(node), inner = perm_of(*t);
  for (size_t i = 0; i < outer.size(); ++i) {
    if (inner[static_cast<size_t>(outer[i])] != static_cast<int64_t>(i)) return nullptr;
  }
  return copy.add(e->op, {copy.map(t->inputs[0])}, {node.outputs[0]}, node.name)->outputs[0];
}

// Whether reshape(e's output) can move above the elementwise node e: e is read only by it,
// and each input is either of e's shape (reshaped in turn, up through producers of the same
// kind) or broadcasts to the new shape as it did to the old one (one element, or the same
// trailing dimensions).
bool reshape_can_rise(const Node& e, const std::vector<int64_t>& to,
                      const std::unordered_map<const Variable*, int>& uses, int depth) {
  if (depth > 8 || !is_elementwise_node(e) || e.outputs.size() != 1 || uses.at(e.outputs[0]) != 1)
    return false;
  const std::vector<int64_t>& from = e.outputs[0]->type.dims;
  for (const Variable* in : e.inputs) {
    const auto& d = in->type.dims;
    if (d == from) continue;
    if (in->type.static_numel() == 1) continue;
    if (d.size() > to.size() || d.size() > from.size()) return false;
    for (size_t k = 1; k <= d.size(); ++k) {
      if (from[from.size() - k] != to[to.size() - k]) return false;
    }
  }
  for (const Variable* in : e.inputs) {
    if (in->type.dims != from || in->kind != VarKind::kNodeOutput) continue;
    const Node* p = in->owner;
    // Read through a reshape already: rising would only trade one reshape for another (two
    // reshapes around a chain would chase each other).
    if (p->op->name() == "reshape") return false;
    // A full-shape producer of the same kind rises too, so the chain stays one; any other
    // input takes a reshape of its own (a view).
    if (is_elementwise_node(*p) && uses.at(in) == 1 && !reshape_can_rise(*p, to, uses, depth + 1))
      return false;
  }
  return true;
}

// e with every full-shape input reshaped by `reshape`'s op: returns e's new output (`out`,
// or a fresh variable of `to`'s shape).
Variable* risen(const Node& e, const Node& reshape, const std::vector<int64_t>& to,
                const Variable* out, GraphCopy& copy,
                const std::unordered_map<const Variable*, int>& uses) {
  Graph& dst = copy.dst();
  const std::vector<int64_t>& from = e.outputs[0]->type.dims;
  std::vector<Variable*> inputs;
  for (const Variable* in : e.inputs) {
    if (in->type.dims != from) {
      inputs.push_back(copy.map(in));
    } else if (in->kind == VarKind::kNodeOutput && is_elementwise_node(*in->owner) &&
               uses.at(in) == 1) {
      inputs.push_back(risen(*in->owner, reshape, to, nullptr, copy, uses));
    } else {
      inputs.push_back(dst.add_node(reshape.op, {copy.map(in)}, reshape.name + ".in",
                                    {dst.fresh_name(in->name + ".reshaped")})
                           ->outputs[0]);
    }
  }
  if (out) return copy.add(e.op, inputs, {out}, e.name)->outputs[0];
  return dst.add_node(e.op, inputs, e.name, {dst.fresh_name(e.outputs[0]->name + ".reshaped")})
      ->outputs[0];
}

// reshape(e(...)) -> e(reshape(...)) where reshape_can_rise holds. Returns the result, or null.
Variable* reshape_above_elementwise(const Node& node, GraphCopy& copy,
                                    const std::unordered_map<const Variable*, int>& uses) {
  if (node.op->name() != "reshape" || node.inputs.size() != 1 || node.outputs.size() != 1)
    return nullptr;
  const Variable* x = node.inputs[0];
  if (x->kind != VarKind::kNodeOutput || !x->type.is_static() || !node.outputs[0]->type.is_static())
    return nullptr;
  const std::vector<int64_t>& to = node.outputs[0]->type.dims;
  if (!reshape_can_rise(*x->owner, to, uses, 0)) return nullptr;
  return risen(*x->owner, node, to, node.outputs[0], copy, uses);
}

// pow(x, 2) or pow(x, 3), the exponent a constant and the result of x's type: the products.
// Returns the result, or null.
Variable* power_as_products(const Node& node, GraphCopy& copy) {
  if (node.op->name() != "pow" || node.inputs.size() != 2 || node.outputs.size() != 1)
    return nullptr;
  const Variable* x = node.inputs[0];
  const Variable* out = node.outputs[0];
  if (!(x->type == out->type) || !is_float(x->type.dtype)) return nullptr;
  const int power = is_splat(node.inputs[1], 2) ? 2 : is_splat(node.inputs[1], 3) ? 3 : 0;
  if (power == 0) return nullptr;
  const auto mul = OpRegistry::instance().create("mul", {});
  Variable* base = copy.map(x);
  if (power == 2) return copy.add(mul, {base, base}, {out}, node.name)->outputs[0];
  Graph& dst = copy.dst();
  Variable* square = dst.add_node(mul, {base, base}, node.name + ".square",
                                  {dst.fresh_name(out->name + ".square")})
                         ->outputs[0];
  return copy.add(mul, {square, base}, {out}, node.name)->outputs[0];
}

// The values read by a round node.
std::set<const Variable*> rounded_values(const Graph& graph) {
  std::set<const Variable*> out;
  for (const auto& node : graph.nodes()) {
    if (node->op->name() == "round" && node->inputs.size() == 1) out.insert(node->inputs[0]);
  }
  return out;
}

// div(x, c) read only by a round, c a float32 constant or weight whose every element and its
// reciprocal are normal: div_rcp(x, c, 1/c). Returns the result, or null. (A weight set
// given later with a subnormal scale would round quotients of subnormal values wrongly; the
// importer refuses zero, negative and non-finite scales.)
Variable* division_by_reciprocal(const Node& node, GraphCopy& copy,
                                 const std::unordered_map<const Variable*, int>& uses,
                                 const std::set<const Variable*>& rounded) {
  if (node.op->name() != "div" || node.inputs.size() != 2 || node.outputs.size() != 1)
    return nullptr;
  const Variable* out = node.outputs[0];
  const Variable* c = node.inputs[1];
  if (out->type.dtype != DType::kFloat32 || uses.at(out) != 1 || !rounded.count(out) ||
      c->kind != VarKind::kConstant || !c->value || c->value->dtype() != DType::kFloat32 ||
      c->value->numel() > (1 << 16)) {
    return nullptr;
  }
  Tensor r = Tensor::empty(DType::kFloat32, c->value->shape());
  for (int64_t i = 0; i < r.numel(); ++i) {
    const auto s = static_cast<float>(c->value->load(i));
    const float inv = 1.0f / s;  // RN(1/s): float32 division rounds correctly
    if (!std::isnormal(s) || !std::isnormal(inv)) return nullptr;
    r.store(i, inv);
  }
  // A scale is a weight (a parameter): its reciprocal is one too, made again by its recipe
  // from the weights a module is given.
  Graph& dst = copy.dst();
  Variable* cm = copy.map(c);
  const std::string name = dst.fresh_name(c->name + ".reciprocal");
  Variable* rv =
      cm->parameter ? dst.add_parameter(std::move(r), name) : dst.add_constant(std::move(r), name);
  rv->recipe = transform_recipe("reciprocal", {}, 0, {cm->recipe});
  const auto op = OpRegistry::instance().create("div_rcp", {});
  return copy.add(op, {copy.map(node.inputs[0]), cm, rv}, {out}, node.name)->outputs[0];
}

}  // namespace

Graph simplify(const Graph& graph) {
  const auto uses = count_uses(graph);
  const auto rounded = rounded_values(graph);
  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    auto r = rule(*node);
    if (!r && division_by_reciprocal(*node, copy, uses, rounded)) continue;
    if (!r && arithmetic_before_transpose(*node, copy, uses)) continue;
    if (!r && unary_between_inverse_transposes(*node, copy, uses)) continue;
    if (!r && power_as_products(*node, copy)) continue;
    if (!r && reshape_above_elementwise(*node, copy, uses)) continue;
    if (!r) {
      copy.copy(*node);
    } else if (r->same) {
      copy.replace(node->outputs[0], copy.map(r->same));
    } else {
      copy.add(r->op, copy.map(r->inputs), {node->outputs[0]}, node->name);
    }
  }
  return copy.finish();
}

}  // namespace kiln
