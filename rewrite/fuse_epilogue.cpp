// GEMM/conv epilogue fusion: a gemm, matmul or conv (or an integer one: qconv, a float32
// qmatmul) whose only reader is an elementwise node (typically bias + activation, already
// fused into one) of the same output type takes that node as its epilogue: the elementwise
// work runs in place on the output inside the same thunk, while the result is still in
// cache, with no second buffer. First, an int32 qmatmul's dequantization moves into its
// store (dequantize_in_stores).
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "ops/epilogue.h"
#include "ops/qconv.h"
#include "ops/registry.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// Not a matmul storing through out_perm: a split part's matrices are then no run of the
// output's elements, which the per-part epilogue loop walks.
// An integer convolution only where its parts are runs of whole output positions
// (channels-last, not depthwise): a quantized residual add then runs on each part's bytes
// right after they are computed.
// Any channels-last one with bytes out when the reader is a costly function of those bytes
// alone (a quantized sigmoid or swish): the convolution applies it as a table to what it makes,
// whatever its split (WithEpilogue::byte_table).
bool takes_epilogue(const Node& node, const Node& reader, const Variable* result) {
  const std::string& n = node.op->name();
  const auto* op = dynamic_cast<const COp*>(node.op.get());
  if (n == "qconv") {
    if (!op || node.outputs.size() != 1) return false;
    if (op->c_split_unit(node) > 0) return true;
    const auto* qconv = dynamic_cast<const QConv*>(op);
    if (!qconv->takes_table(node) || is_cheap_node(reader)) return false;
    for (const Variable* v : reader.inputs) {
      for (int64_t d : v->type.dims) {
        if (v != result && d != 1) return false;
      }
    }
    return true;
  }
  // A float32 integer product of known width: made to split by whole rows (split_rows).
  if (n == "qmatmul")
    return op && node.outputs.size() == 1 && node.outputs[0]->type.dtype == DType::kFloat32 &&
           !node.outputs[0]->type.dims.empty() && node.outputs[0]->type.dims.back() != kDynamic;
  return (n == "gemm" || n == "matmul" || n == "conv" || n == "conv_nchwc") &&
         node.outputs.size() == 1 && op && !node.op->props().count("out_perm");
}

// A dynamically quantized product's dequantization, cast(acc) * scale with the scale one
// value or one per column (onnxruntime's quantize_dynamic writes MatMulInteger -> Cast -> Mul
// by A's scale times B's), found in the elementwise node reading an int32 qmatmul.
struct Dequantization {
  const Node* product = nullptr;  // the qmatmul
  const Node* reader = nullptr;   // the elementwise node
  std::vector<FusedStep> steps;   // the reader's steps, over its inputs
  int cast = 0, mul = 0;          // the steps casting acc and multiplying it by the scale
  int scale = 0;                  // the mul's other argument ($k or %j, as in a program)
};

// The steps `arg` depends on (with it), in order; false when one reads input `avoid`.
bool cone_of(const std::vector<FusedStep>& steps, int arg, int avoid, std::set<int>& cone) {
  if (arg >= 0) return arg != avoid;
  const int j = -arg - 1;
  if (!cone.insert(j).second) return true;
  for (int a : steps[static_cast<size_t>(j)].args)
    if (!cone_of(steps, a, avoid, cone)) return false;
  return true;
}

std::optional<Dequantization> dequantization(const Node& reader,
                                             const std::unordered_map<const Variable*, int>& uses,
                                             const Graph& graph) {
  if (!is_elementwise_node(reader) || reader.outputs.size() != 1) return std::nullopt;
  for (size_t k = 0; k < reader.inputs.size(); ++k) {
    const Variable* acc = reader.inputs[k];
    const Node* q = produced_by(acc, "qmatmul");
    if (!q || acc->type.dtype != DType::kInt32 || q->op->props().count("scaled") ||
        acc->type.dims != reader.outputs[0]->type.dims || is_graph_output(graph, acc))
      continue;
    int reads = 0;
    for (const Variable* w : reader.inputs) reads += w == acc;
    if (reads != 1 || uses.at(acc) != 1) continue;
    Dequantization d;
    d.product = q;
    d.reader = &reader;
    append_steps(
        reader, [](int i) { return i; }, d.steps);
    const int in = static_cast<int>(k);
    // acc is read once, by a cast to float32, which is read once, by a mul.
    int cast = -1, cast_reads = 0, acc_reads = 0;
    for (size_t j = 0; j < d.steps.size(); ++j) {
      for (int a : d.steps[j].args) acc_reads += a == in;
      if (d.steps[j].args == std::vector<int>{in} && d.steps[j].op->name() == "cast" &&
          d.steps[j].op->infer_type({TensorType{DType::kInt32, {}}}).at(0).dtype == DType::kFloat32)
        cast = static_cast<int>(j);
    }
    if (cast < 0 || acc_reads != 1) continue;
    int mul = -1;
    for (size_t j = 0; j < d.steps.size(); ++j) {
      for (int a : d.steps[j].args) {
        if (a != -cast - 1) continue;
        ++cast_reads;
        if (d.steps[j].op->name() == "mul") mul = static_cast<int>(j);
      }
    }
    if (cast_reads != 1 || mul < 0) continue;
    const auto& margs = d.steps[static_cast<size_t>(mul)].args;
    d.scale = margs[0] == -cast - 1 ? margs[1] : margs[0];
    std::set<int> cone;
    if (!cone_of(d.steps, d.scale, in, cone)) continue;
    d.cast = cast;
    d.mul = mul;
    return d;
  }
  return std::nullopt;
}

// qmatmul{scaled = 1} for each Dequantization: the kernel stores (float)acc * scale, so the
// int32 product (a (128, 50257) language-model head's 26 MB) is never written and read back.
// The scale's steps become a node of their own; what the reader did after the mul stays
// elementwise over the float product. Nothing when no reader has that form.
std::optional<Graph> dequantize_in_stores(const Graph& graph) {
  const auto uses = count_uses(graph);
  std::map<const Node*, Dequantization> found;  // by reader
  std::set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    if (auto d = dequantization(*node, uses, graph)) {
      absorbed.insert(d->product);
      found.emplace(node.get(), std::move(*d));
    }
  }
  if (found.empty()) return std::nullopt;
  GraphCopy copy(graph);
  Graph& dst = copy.dst();
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto it = found.find(node.get());
    if (it == found.end()) {
      copy.copy(*node);
      continue;
    }
    const Dequantization& d = it->second;
    // A program over the reader's steps needed for `root`, with step `as_input` (if any)
    // read as one more input: its steps and inputs.
    auto program = [&](int root, int as_input, std::vector<Variable*>& inputs, Variable* extra) {
      std::set<int> need;
      std::vector<int> stack{root};
      while (!stack.empty()) {
        const int a = stack.back();
        stack.pop_back();
        if (a >= 0 || a == -as_input - 1 || !need.insert(-a - 1).second) continue;
        for (int b : d.steps[static_cast<size_t>(-a - 1)].args) stack.push_back(b);
      }
      std::map<int, int> arg;  // old argument -> new
      std::vector<FusedStep> steps;
      auto remap = [&](int a) {
        if (auto f = arg.find(a); f != arg.end()) return f->second;
        inputs.push_back(a >= 0 ? copy.map(node->inputs[static_cast<size_t>(a)]) : extra);
        return arg[a] = static_cast<int>(inputs.size()) - 1;
      };
      for (int j : need) {
        FusedStep st = d.steps[static_cast<size_t>(j)];
        for (int& a : st.args) a = a < 0 && a != -as_input - 1 ? arg.at(a) : remap(a);
        arg[-j - 1] = -static_cast<int>(steps.size()) - 1;
        steps.push_back(std::move(st));
      }
      return steps;
    };
    Variable* scale = nullptr;
    if (d.scale >= 0) {
      scale = copy.map(node->inputs[static_cast<size_t>(d.scale)]);
    } else {
      std::vector<Variable*> inputs;
      auto steps = program(d.scale, -1, inputs, nullptr);
      scale = dst.add_node(FusedElementwise::from_steps(std::move(steps)), inputs,
                           node->name + ".scale", {dst.fresh_name(node->name + ".scale")})
                  ->outputs[0];
    }
    const bool last = d.mul + 1 == static_cast<int>(d.steps.size());
    // One value or one per column, its length known (the kernel reads it by column index).
    if (scale->type.dtype != DType::kFloat32 || scale->type.rank() > 1 ||
        scale->type.static_numel() == kDynamic) {
      // A scale this form does not take: as it was (the scale's node, unread, is dropped by dce).
      copy.copy(*d.product);
      copy.copy(*node);
      continue;
    }
    Attrs props = d.product->op->props();
    props["scaled"] = int64_t{1};
    auto op = OpRegistry::instance().create("qmatmul", props);
    std::vector<Variable*> inputs = copy.map(d.product->inputs);
    inputs.insert(inputs.begin() + 4, scale);
    if (last) {
      copy.add(op, inputs, {node->outputs[0]}, d.product->name);
      continue;
    }
    Variable* product = dst.add_node(op, inputs, d.product->name,
                                     {dst.fresh_name(d.product->outputs[0]->name + ".float")})
                            ->outputs[0];
    std::vector<Variable*> rest_inputs;
    auto rest = program(-static_cast<int>(d.steps.size()), d.mul, rest_inputs, product);
    copy.add(FusedElementwise::from_steps(std::move(rest)), rest_inputs, {node->outputs[0]},
             node->name);
  }
  return copy.finish();
}

// Each gemm, matmul or conv read only by an elementwise node takes it as its epilogue.
Graph attach_epilogues(const Graph& graph) {
  auto uses = count_uses(graph);
  std::map<const Node*, const Node*> epilogue_of;  // elementwise consumer -> base node
  std::set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    if (!is_elementwise_node(*node)) continue;
    for (const Variable* v : node->inputs) {
      const Node* base = v->kind == VarKind::kNodeOutput ? v->owner : nullptr;
      if (!base || !takes_epilogue(*base, *node, v) || absorbed.count(base)) continue;
      int reads = 0;
      for (const Variable* w : node->inputs) reads += w == v;
      if (reads != uses[v] || v->type != node->outputs[0]->type) continue;
      epilogue_of[node.get()] = base;
      absorbed.insert(base);
      break;
    }
  }

  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto e = epilogue_of.find(node.get());
    if (e == epilogue_of.end()) {
      copy.copy(*node);
      continue;
    }
    const Node& base = *e->second;
    const Variable* result = base.outputs[0];
    // $0 is the base op's result; the consumer's other operands follow as $1, $2, ...
    std::vector<Variable*> inputs = copy.map(base.inputs);
    std::map<const Variable*, int> arg{{result, 0}};
    std::vector<FusedStep> steps;
    append_steps(
        *node,
        [&](int k) {
          const Variable* v = node->inputs[static_cast<size_t>(k)];
          auto found = arg.find(v);
          if (found != arg.end()) return found->second;
          inputs.push_back(copy.map(v));
          return arg[v] = static_cast<int>(arg.size());
        },
        steps);
    auto program = FusedElementwise::from_steps(std::move(steps));
    std::shared_ptr<const Op> base_op = base.op;
    if (base_op->name() == "qmatmul") {
      Attrs props = base_op->props();
      props["split_rows"] = int64_t{1};
      base_op = OpRegistry::instance().create("qmatmul", props);
    }
    auto op = WithEpilogue::make(dynamic_cast<const COp&>(*base_op),
                                 static_cast<int>(base.inputs.size()), *program);
    copy.add(op, inputs, {node->outputs[0]}, base.name.empty() ? node->name : base.name);
  }
  return copy.finish();
}

}  // namespace

Graph fuse_epilogue(const Graph& graph) {
  // Uses are counted on live nodes only: elementwise fusion leaves the nodes it merged into
  // several readers behind (dce drops them last), and a dead reader of a product's result
  // would keep the product from taking its one live reader as its epilogue.
  const Graph live = remove_dead(graph);
  if (auto dequantized = dequantize_in_stores(live)) return attach_epilogues(*dequantized);
  return attach_epilogues(live);
}

}  // namespace kiln
