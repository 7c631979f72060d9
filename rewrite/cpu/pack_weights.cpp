// Weight packing: a float gemm or matmul whose B is a constant 2-D matrix (a model weight) has
// B packed now, once,
// into the panel layout of kiln's GEMM kernel (ops/c/gemm_pack.h), and runs that kernel split
// over rows of the output: each run streams B as aligned panel rows, with no transpose or
// packing pass of its own. A direct convolution (group 1, not 1x1 stride 1, which runs as
// a GEMM) has its weight packed in blocks of output channels (ops/c/conv_pack.h) for the
// conv_blocks kernel. The packed copy is a parameter when the weight is one (a module
// input, never pasted into the source), so one module still serves any weights. It runs after
// folding, so weights computed from constants are packed too, and before epilogue fusion,
// which takes the packed gemm as its base.
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "ops/c/conv_pack.h"
#include "ops/c/gemm_pack.h"
#include "ops/c/qgemm_pack.h"
#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

constexpr int64_t kMinPackedN = 16;
// Each group of positions ends with its sums transposed into the channel-major output, one
// scalar store per sum: a few taps (an RGB stem's 27) do not pay for that, and MobileNetV2's
// 3 -> 32 stem ran slower packed.
constexpr int64_t kMinPackedTaps = 64;

// A MatMul of activations (..., M, K) by a 2-D weight (K, N) is one GEMM over all rows of
// the activations (a transformer's projections: (1, T, D) @ (D, 3D)); as a batched MatMul
// it was one small product per leading index.
bool packable_matmul(const Node& node) {
  return node.op->name() == "matmul" && node.inputs.size() == 2 &&
         node.inputs[0]->type.rank() >= 2 && node.inputs[1]->type.rank() == 2;
}

// The weight a packable gemm or matmul reads, and whether it reads it transposed.
struct PackedB {
  const Variable* b = nullptr;
  bool trans = false;
};

// A matmul's B that is a [1, 0] transpose of a 2-D weight: a linear layer's x @ W.t() as
// PyTorch lowers it, or an exported Transpose of a weight too large to fold (a tied LM head's
// 50257 x 768 embedding). The GEMM packs W itself, read transposed, so nothing transposes W
// on each run or keeps a transposed copy.
const Variable* transposed_weight(
    const Variable* b, const std::unordered_map<const Variable*, const Node*>& producer) {
  auto p = producer.find(b);
  if (p == producer.end()) return nullptr;
  const Node& t = *p->second;
  if (t.op->name() != "transpose" || t.inputs.size() != 1 ||
      attr_ints(t.op->props(), "perm", std::vector<int64_t>{}) != std::vector<int64_t>{1, 0}) {
    return nullptr;
  }
  const Variable* w = t.inputs[0];
  return w->kind == VarKind::kConstant && w->value && w->value->ndim() == 2 ? w : nullptr;
}

std::optional<PackedB> packable(const Node& node,
                                const std::unordered_map<const Variable*, const Node*>& producer) {
  const bool matmul = packable_matmul(node);
  if ((node.op->name() != "gemm" && !matmul) || node.inputs.size() < 2 ||
      node.outputs.size() != 1) {
    return std::nullopt;
  }
  if (attr_int(node.op->props(), "packed_n", 0) != 0) return std::nullopt;
  PackedB pb{node.inputs[1], attr_int(node.op->props(), "transB", 0) != 0};
  if (matmul && pb.b->kind != VarKind::kConstant) {
    if (const Variable* w = transposed_weight(pb.b, producer)) pb = {w, true};
  }
  const Variable* b = pb.b;
  const DType dt = node.outputs[0]->type.dtype;
  if (!(dt == DType::kFloat32 || dt == DType::kFloat64) || b->kind != VarKind::kConstant ||
      !b->value || b->value->ndim() != 2 || b->value->dtype() != dt) {
    return std::nullopt;
  }
  // The kernel's vectors run along N: a product narrower than one AVX-512 vector of floats
  // would leave most lanes of each multiply-add idle (a 10-wide output layer ran 2x slower
  // than OpenBLAS, which takes dot products along K), so it stays with OpenBLAS.
  if (b->value->shape()[pb.trans ? 0 : 1] >= kMinPackedN &&
      b->value->shape()[pb.trans ? 1 : 0] > 0) {
    return pb;
  }
  return std::nullopt;
}

// A direct convolution's weight packs: a float constant, group 1, at least one whole block of
// output channels (fewer would leave most lanes idle), enough taps, and not a pointwise
// convolution, which runs as a packed GEMM.
bool packable_conv(const Node& node) {
  if (node.op->name() != "conv" || node.inputs.size() < 2 || node.outputs.size() != 1) {
    return false;
  }
  const Attrs& props = node.op->props();
  if (attr_int(props, "packed_m", 0) != 0 || attr_int(props, "group", 1) != 1) return false;
  const Variable* w = node.inputs[1];
  const DType dt = node.outputs[0]->type.dtype;
  if (!(dt == DType::kFloat32 || dt == DType::kFloat64) || w->kind != VarKind::kConstant ||
      !w->value || w->value->ndim() < 3 || w->value->dtype() != dt ||
      w->value->shape()[0] < kConvBlock || node.inputs[0]->type.rank() != w->value->ndim() ||
      w->value->numel() / w->value->shape()[0] < kMinPackedTaps) {
    return false;
  }
  bool pointwise = true;
  for (size_t d = 2; d < w->value->shape().size(); ++d) pointwise &= w->value->shape()[d] == 1;
  for (int64_t v : attr_ints(props, "strides", std::vector<int64_t>{})) pointwise &= v == 1;
  for (int64_t v : attr_ints(props, "pads", std::vector<int64_t>{})) pointwise &= v == 0;
  return !pointwise;  // (auto_pad pads a 1x1 stride-1 window by nothing)
}

// The add that a packed product's bias can become: `y` (the product's output) read only by
// an add of a constant or parameter vector of y's last size N, which the kernel then adds
// as it stores each tile (kiln_support.gemm_packed's bias) instead of a pass of its own
// over the output. A transformer's every Linear layer exports as MatMul + Add. A gemm that
// has its own C keeps it.
const Node* bias_add_of(const Node& node, const Variable* y,
                        const std::unordered_map<const Variable*, int>& uses,
                        const std::unordered_map<const Variable*, const Node*>& reader) {
  if (node.inputs.size() != 2) return nullptr;
  auto u = uses.find(y);
  auto r = reader.find(y);
  if (u == uses.end() || u->second != 1 || r == reader.end()) return nullptr;
  const Node& add = *r->second;
  if (add.op->name() != "add" || add.inputs.size() != 2 || add.outputs.size() != 1) {
    return nullptr;
  }
  const Variable* b = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
  if (b == y || b->kind != VarKind::kConstant || b->type.dtype != y->type.dtype ||
      b->type.rank() != 1 || y->type.rank() < 1 || b->type.dims[0] != y->type.dims.back() ||
      add.outputs[0]->type.dims != y->type.dims) {
    return nullptr;
  }
  return &add;
}

// An integer product's constant weight (qmatmul's 2-D B, qconv's W) packed for
// kiln_support.qgemm_u8s8, with its column sums (ops/c/qgemm_pack.h). Returns true when the
// node was copied with the packed weight.
bool pack_integer_weight(const Node& node, GraphCopy& copy,
                         std::map<const Variable*, Variable*>& packed,
                         std::map<const Variable*, Variable*>& packed_c4) {
  const bool mm = node.op->name() == "qmatmul", conv = node.op->name() == "qconv";
  if ((!mm && !conv) || node.inputs.size() < 2) return false;
  const Attrs& props = node.op->props();
  if (attr_int(props, mm ? "packed_n" : "packed_m", 0) != 0) return false;
  const Variable* w = node.inputs[1];
  if (w->kind != VarKind::kConstant || !w->value ||
      (w->value->dtype() != DType::kInt8 && w->value->dtype() != DType::kUInt8) ||
      (mm && w->value->ndim() != 2) || (conv && w->value->ndim() < 3)) {
    return false;
  }
  const int64_t group = conv ? attr_int(props, "group", 1) : 1;
  // A depthwise weight stays as it is: its kernel reads it per channel (qdepthwise).
  if (conv && w->value->shape()[1] == 1 && group == w->value->shape()[0]) return false;
  // A three-channel image read channels-first (a network's stem): widened to four channels
  // per pixel in the module, so the weight is packed for four.
  const bool x_channels_last = attr_int(props, "nhwc", 0) != 0 && attr_int(props, "x_nchw", 0) == 0;
  const bool c4 = conv && group == 1 && w->value->shape()[1] == 3 && !x_channels_last;
  Variable*& pw = (c4 ? packed_c4 : packed)[w];
  if (!pw) {
    Tensor bytes = mm ? pack_qgemm(*w->value) : pack_qconv(*w->value, group, c4);
    const std::string name = copy.dst().fresh_name(w->name + (c4 ? ".qpacked4" : ".qpacked"));
    pw =
        w->parameter ? copy.dst().add_parameter(bytes, name) : copy.dst().add_constant(bytes, name);
    Attrs recipe{{"group", group}};
    if (c4) recipe["c4"] = int64_t{1};
    pw->recipe = conv ? transform_recipe(kPackQconv, recipe, 0, {w->recipe})
                      : transform_recipe(kPackQgemm, {}, 0, {w->recipe});
  }
  Attrs p = props;
  const Shape& ws = w->value->shape();
  if (mm) {
    p["packed_k"] = ws[0];
    p["packed_n"] = ws[1];
    p["b_u8"] = int64_t{w->value->dtype() == DType::kUInt8};
  } else {
    p["packed_m"] = ws[0];
    p["kernel_shape"] = std::vector<int64_t>(ws.begin() + 2, ws.end());
    p["w_u8"] = int64_t{w->value->dtype() == DType::kUInt8};
    if (c4) p["c4"] = int64_t{1};
  }
  std::vector<Variable*> inputs = copy.map(node.inputs);
  inputs[1] = pw;
  copy.add(OpRegistry::instance().create(node.op->name(), p), inputs, {node.outputs[0]}, node.name);
  return true;
}

}  // namespace

Graph pack_weights(const Graph& graph) {
  GraphCopy copy(graph);
  std::map<std::pair<const Variable*, bool>, Variable*>
      packed;  // a weight two gemms share packs once
  std::map<const Variable*, Variable*> conv_packed;
  std::map<const Variable*, Variable*> q_packed, q_packed_c4;  // a weight -> its packed form
  const auto uses = count_uses(graph);
  std::unordered_map<const Variable*, const Node*> reader;  // the last node reading each
  std::unordered_map<const Variable*, const Node*> producer;
  for (const auto& node : graph.nodes()) {
    for (const Variable* v : node->inputs) reader[v] = node.get();
    for (const Variable* v : node->outputs) producer[v] = node.get();
  }
  std::set<const Node*> absorbed;  // bias adds a packed product took in
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    if (packable_conv(*node)) {
      const Variable* w = node->inputs[1];
      Variable*& pw = conv_packed[w];
      if (!pw) {
        Tensor blocks = pack_conv_blocks(*w->value);
        const std::string name = copy.dst().fresh_name(w->name + ".blocks");
        pw = w->parameter ? copy.dst().add_parameter(blocks, name)
                          : copy.dst().add_constant(blocks, name);
        pw->recipe = transform_recipe(kPackConvBlocks, {}, 0, {w->recipe});
      }
      Attrs props = node->op->props();
      props["packed_m"] = w->value->shape()[0];
      props["kernel_shape"] =
          std::vector<int64_t>(w->value->shape().begin() + 2, w->value->shape().end());
      std::vector<Variable*> inputs = copy.map(node->inputs);
      inputs[1] = pw;
      copy.add(OpRegistry::instance().create("conv", props), inputs, {node->outputs[0]},
               node->name);
      continue;
    }
    if (pack_integer_weight(*node, copy, q_packed, q_packed_c4)) continue;
    const std::optional<PackedB> packs = packable(*node, producer);
    if (!packs) {
      copy.copy(*node);
      continue;
    }
    Attrs props = packable_matmul(*node) ? Attrs{} : node->op->props();
    const bool trans = packs->trans;
    const Variable* b = packs->b;
    Variable*& pb = packed[{b, trans}];
    if (!pb) {
      Tensor panels = pack_gemm_panels(*b->value, trans);
      const std::string name = copy.dst().fresh_name(b->name + (trans ? ".packed_t" : ".packed"));
      pb = b->parameter ? copy.dst().add_parameter(panels, name)
                        : copy.dst().add_constant(panels, name);
      pb->recipe = transform_recipe(kPackGemmPanels, {{"trans", int64_t{trans}}}, 0, {b->recipe});
    }
    props["transB"] = int64_t{0};
    props["packed_n"] = b->value->shape()[trans ? 0 : 1];
    std::vector<Variable*> inputs = copy.map(node->inputs);
    inputs[1] = pb;
    const Variable* out = node->outputs[0];
    if (const Node* add = bias_add_of(*node, out, uses, reader)) {
      inputs.push_back(copy.map(add->inputs[0] == out ? add->inputs[1] : add->inputs[0]));
      props["beta"] = 1.0;
      out = add->outputs[0];
      absorbed.insert(add);
    }
    copy.add(OpRegistry::instance().create("gemm", props), inputs, {out}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
