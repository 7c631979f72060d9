// Layout: chains of float32 convolutions (ResNet's blocks, MobileNet's inverted residuals,
// SqueezeNet's fire modules) run in the blocked channel layout NCHW8c (ops/conv_nchwc.h),
// with the elementwise work between them (activations, residual adds, per-channel scales),
// channel concatenations, max pools and global pooling on the same blocked tensors. Tensors are
// reordered once where a region meets the rest of the graph, not around each convolution.
// In NCHW a 7 x 7 or 14 x 14 map fills vectors along its rows badly; blocked, a vector is 8
// channels of one position, and the register-blocked kernels reach SGEMM's rate on 3x3
// layers.
//
// A region is a set of 4-D values linked by convertible convolutions (group 1, depthwise, or
// grouped with whole blocks per group; channels in whole blocks, dilation 1; a stem reading
// an image of fewer channels than a block in NCHW), elementwise nodes, max pools and channel
// concatenations; it converts when it holds two convolutions or more, or one whose multiply-adds
// dwarf its two reorders (a lone 3 x 3 over a small map is not worth them). Reorders are reshape +
// transpose nodes: those of constants (the weights, per-channel operands) fold now.
//
// A convolution whose windows tile the image (stride = kernel, no padding: a vision
// transformer's patch embedding, a ConvNeXt stem) and is not in a region is a GEMM over
// patches: one copy regroups the image into rows of C x kh x kw, and the packed GEMM kernel
// takes it from there (a ViT's 16 x 16 patches ran at 90 GFLOP/s as a direct convolution).
//
// A per-channel scale read only by a group-1 convolution (squeeze-and-excitation:
// conv(x * s) with s of shape (1, C, 1, 1)) moves onto the convolution's weights,
// W[m, c] * s[c]: C x M multiplies per run instead of C x H x W, and no pass over the
// activation (EfficientNet-B0 spent 0.9 ms of 10 in those multiplies).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "ops/conv_nchwc.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/layout_region.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

constexpr int64_t B = kNchwcBlock;
// Multiply-adds per element reordered in and out that make a lone convolution worth blocking.
constexpr int64_t kLoneConvMacsPerElement = 64;

// A float32 (N, C, H, W) value with static C, H, W and C a multiple of the block.
bool blockable(const Variable* v) {
  const TensorType& t = v->type;
  return t.dtype == DType::kFloat32 && t.rank() == 4 && t.dims[1] != kDynamic &&
         t.dims[1] % B == 0 && t.dims[2] != kDynamic && t.dims[3] != kDynamic;
}

const Tensor* constant_value(const Variable* v) {
  return v->kind == VarKind::kConstant && v->value ? &*v->value : nullptr;
}

// A float32 image of fewer channels than a block (RGB): a group-1 convolution reads it in
// NCHW, one channel per tap, and writes blocks (a network's stem).
bool plain_image(const Variable* v) {
  const TensorType& t = v->type;
  return t.dtype == DType::kFloat32 && t.rank() == 4 && t.dims[1] != kDynamic && t.dims[1] < B &&
         t.dims[2] != kDynamic && t.dims[3] != kDynamic;
}

// A convolution the blocked kernels run: its props for conv_nchwc, or nothing.
std::optional<Attrs> nchwc_props(const Node& node) {
  if (node.op->name() != "conv" || node.outputs.size() != 1 || node.inputs.size() < 2) return {};
  const Variable* x = node.inputs[0];
  const Variable* w = node.inputs[1];
  const Tensor* wv = constant_value(w);
  if (!(blockable(x) || plain_image(x)) || !blockable(node.outputs[0]) || !wv || wv->ndim() != 4 ||
      wv->dtype() != DType::kFloat32) {
    return {};
  }
  if (node.inputs.size() == 3) {
    const Tensor* b = constant_value(node.inputs[2]);
    if (!b || b->ndim() != 1 || b->dtype() != DType::kFloat32) return {};
  }
  const Attrs& props = node.op->props();
  if (attr_int(props, "packed_m", 0) != 0) return {};
  const int64_t group = attr_int(props, "group", 1), c = x->type.dims[1];
  const std::vector<int64_t> kernel(wv->shape().begin() + 2, wv->shape().end());
  std::vector<WindowDims> g;
  try {
    g = resolve_window(WindowAttrs::from_props(props, "conv"), {x->type.dims[2], x->type.dims[3]},
                       kernel, "conv");
  } catch (const Error&) {
    return {};
  }
  for (const WindowDims& d : g) {
    if (d.dilation != 1) return {};
  }
  const bool depthwise = group == c && wv->shape()[0] == c && wv->shape()[1] == 1;
  // Grouped with whole blocks per group (RegNet, ResNeXt): the direct kernel per group.
  const bool grouped = group > 1 && !depthwise && blockable(x) && (c / group) % B == 0 &&
                       (wv->shape()[0] / group) % B == 0;
  if ((group != 1 && !depthwise && !grouped) || (depthwise && !blockable(x)) || kernel[0] > 64 ||
      kernel[1] > 64) {
    return {};
  }
  Attrs props_out{
      {"group", grouped ? int64_t{1} : group},
      {"kernel_shape", kernel},
      {"strides", std::vector<int64_t>{g[0].stride, g[1].stride}},
      {"pads", std::vector<int64_t>{g[0].pad_begin, g[1].pad_begin, g[0].pad_end, g[1].pad_end}}};
  if (grouped) props_out["channel_groups"] = group;
  return props_out;
}

// A float convolution whose windows tile its image: group 1, stride = kernel (not 1 x 1),
// no padding, no dilation, H and W whole multiples of the window, a constant weight with
// enough taps and output channels for the packed GEMM. Its (kh, kw), or nothing.
std::optional<std::pair<int64_t, int64_t>> patch_window(const Node& node) {
  if (node.op->name() != "conv" || node.outputs.size() != 1 || node.inputs.size() < 2) return {};
  const Variable* x = node.inputs[0];
  const Tensor* w = constant_value(node.inputs[1]);
  const TensorType& t = x->type;
  if ((t.dtype != DType::kFloat32 && t.dtype != DType::kFloat64) || t.rank() != 4 || !w ||
      w->ndim() != 4 || w->dtype() != t.dtype || t.dims[1] == kDynamic || t.dims[2] == kDynamic ||
      t.dims[3] == kDynamic) {
    return {};
  }
  if (node.inputs.size() == 3 && node.inputs[2]->type.rank() != 1) return {};
  const Attrs& props = node.op->props();
  if (attr_int(props, "group", 1) != 1 || attr_int(props, "packed_m", 0) != 0) return {};
  const int64_t m = w->shape()[0], kh = w->shape()[2], kw = w->shape()[3];
  std::vector<WindowDims> g;
  try {
    g = resolve_window(WindowAttrs::from_props(props, "conv"), {t.dims[2], t.dims[3]}, {kh, kw},
                       "conv");
  } catch (const Error&) {
    return {};
  }
  for (const WindowDims& d : g) {
    if (d.dilation != 1 || d.pad_begin != 0 || d.pad_end != 0 || d.stride != d.kernel ||
        d.in % d.kernel != 0) {
      return {};
    }
  }
  if (kh * kw == 1 || t.dims[1] * kh * kw < 64 || m < 16) return {};
  return std::make_pair(kh, kw);
}

// A 2-D max pool the blocked kernel runs: its props for max_pool_nchwc, or nothing.
std::optional<Attrs> max_pool_props(const Node& node) {
  if (node.op->name() != "max_pool" || node.outputs.size() != 1 || node.inputs.size() != 1 ||
      !blockable(node.inputs[0]) || !blockable(node.outputs[0])) {
    return {};
  }
  const WindowAttrs w = WindowAttrs::from_props(node.op->props(), "max_pool");
  if (w.kernel.size() != 2) return {};
  std::vector<WindowDims> g;
  try {
    g = resolve_window(w, {node.inputs[0]->type.dims[2], node.inputs[0]->type.dims[3]}, w.kernel,
                       "max_pool");
  } catch (const Error&) {
    return {};
  }
  if (g[0].dilation != 1 || g[1].dilation != 1) return {};
  // Rounding up (ceil_mode) is the floor rule over more end padding: the pool skips padding,
  // so the extra reads nothing.
  for (WindowDims& d : g) {
    d.pad_end = std::max(d.pad_end, (d.out - 1) * d.stride + d.kernel - d.in - d.pad_begin);
  }
  return Attrs{
      {"kernel_shape", w.kernel},
      {"strides", std::vector<int64_t>{g[0].stride, g[1].stride}},
      {"pads", std::vector<int64_t>{g[0].pad_begin, g[1].pad_begin, g[0].pad_end, g[1].pad_end}}};
}

// A global pooling (reduce_mean or reduce_max over H and W, dimensions kept).
bool spatial_pool(const Node& node) {
  const std::string& n = node.op->name();
  if ((n != "reduce_mean" && n != "reduce_max") || node.inputs.size() != 1) return false;
  const Attrs& p = node.op->props();
  return attr_int(p, "keepdims", 1) == 1 &&
         attr_ints(p, "axes", std::vector<int64_t>{}) == std::vector<int64_t>{2, 3};
}

// The operand's dimensions right-aligned to rank 4 (missing leading ones are 1), or nothing
// for a higher rank.
std::optional<std::vector<int64_t>> as_rank4(const Variable* v) {
  const auto& d = v->type.dims;
  if (d.size() > 4) return {};
  std::vector<int64_t> r(4 - d.size(), 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

class Layout {
 public:
  explicit Layout(const Graph& g) : src_(g), copy_(g) {}

  Graph run() {
    choose_regions();
    if (converting_.empty()) {
      bool any = false;
      for (const auto& node : src_.nodes()) {
        const bool p = patches(*node);
        if (!p) copy_.copy(*node);
        any |= p;
      }
      return any ? fold_constants(copy_.finish()) : copy_.finish();
    }
    for (const auto& node : src_.nodes()) {
      if (!convert(*node)) {
        for (const Variable* v : node->inputs) plain(v);
        if (!patches(*node)) copy_.copy(*node);
      }
    }
    for (const Variable* v : src_.outputs()) plain(v);
    return fold_constants(copy_.finish());
  }

 private:
  // Regions: values joined through candidate convolutions, max pools, channel
  // concatenations and elementwise nodes (operands of the output's own shape join; broadcast
  // ones are reordered when the node converts). A region converts when it holds two
  // convolutions or more, or one heavy enough.
  void choose_regions() {
    ValueUnion u;
    std::vector<const Node*> convs;
    for (const auto& node : src_.nodes()) {
      if (nchwc_props(*node)) {
        convs.push_back(node.get());
        if (blockable(node->inputs[0])) u.join(node->inputs[0], node->outputs[0]);
      } else if (max_pool_props(*node)) {
        u.join(node->inputs[0], node->outputs[0]);
      } else if (channel_concat(*node, blockable)) {
        for (const Variable* v : node->inputs) u.join(v, node->outputs[0]);
      } else if (is_elementwise_node(*node) && blockable(node->outputs[0])) {
        for (const Variable* v : node->inputs) {
          if (v->type.dims == node->outputs[0]->type.dims) u.join(v, node->outputs[0]);
        }
      }
    }
    std::map<const Variable*, int> count;
    std::set<const Variable*> converts;
    for (const Node* n : convs) {
      if (++count[u.find(n->outputs[0])] == 2) converts.insert(u.find(n->outputs[0]));
    }
    // A lone convolution still converts when its multiply-adds dwarf its two reorders
    // (ShuffleNetV2's 464 -> 1024 1 x 1 over a 7 x 7 map, fed by a channel shuffle: 320 per
    // element reordered; the plain kernel ran it at 99 GFLOP/s on 2 workers).
    for (const Node* n : convs) {
      const Variable* region = u.find(n->outputs[0]);
      if (count[region] != 1 || !blockable(n->inputs[0])) continue;
      // Per image (the batch may be dynamic; C, H and W are static in a blocked region).
      auto image = [](const Variable* v) {
        return v->type.dims[1] * v->type.dims[2] * v->type.dims[3];
      };
      const Tensor& w = *constant_value(n->inputs[1]);
      const int64_t macs = image(n->outputs[0]) * (w.numel() / w.shape()[0]);
      if (macs >= kLoneConvMacsPerElement * (image(n->inputs[0]) + image(n->outputs[0]))) {
        converts.insert(region);
      }
    }
    for (const Node* n : convs) {
      if (converts.count(u.find(n->outputs[0]))) converting_.insert(n);
    }
    find_scaled_inputs();
    for (const auto& node : src_.nodes()) {
      for (const Variable* v : node->outputs) {
        if (converts.count(u.find(v))) in_region_.insert(v);
      }
      for (const Variable* v : node->inputs) {
        if (converts.count(u.find(v))) in_region_.insert(v);
      }
    }
  }

  // Converting group-1 convolutions whose input is x * s, s (1, C, 1, 1), the product read
  // by nothing else: the product's node is dropped and the convolution scales its weights.
  void find_scaled_inputs() {
    std::unordered_map<const Variable*, int> readers;
    for (const auto& node : src_.nodes()) {
      for (const Variable* v : node->inputs) ++readers[v];
    }
    for (const Variable* v : src_.outputs()) ++readers[v];
    for (const Node* conv : converting_) {
      const Variable* x = conv->inputs[0];
      const Node* mul = x->owner;
      if (!mul || mul->op->name() != "mul" || mul->inputs.size() != 2 || readers[x] != 1 ||
          !blockable(x) || attr_int(conv->op->props(), "group", 1) != 1) {
        continue;
      }
      // Only where the weights are the smaller of the two per input channel (M x kh x kw
      // against N x H x W, N taken as 1 when dynamic): a 7 x 7 map under 1152 -> 320
      // weights is cheaper scaled itself.
      const Tensor& w = *constant_value(conv->inputs[1]);
      const int64_t c = x->type.dims[1], per_weight = w.numel() / c,
                    per_map = x->type.dims[2] * x->type.dims[3];
      const int64_t images = x->type.dims[0] == kDynamic ? 1 : x->type.dims[0];
      if (per_weight > images * per_map) continue;
      for (int k = 0; k < 2; ++k) {
        const Variable* a = mul->inputs[static_cast<size_t>(k)];
        const Variable* scale = mul->inputs[static_cast<size_t>(1 - k)];
        if (a->type.dims == x->type.dims && as_rank4(scale) == std::vector<int64_t>{1, c, 1, 1} &&
            scale->type.dtype == DType::kFloat32) {
          scaled_[conv] = {a, scale};
          dropped_.insert(mul);
          break;
        }
      }
    }
  }

  // A patch convolution as reshape, transpose, reshape to rows of patches (N x OH x OW,
  // C x kh x kw), a GEMM by the weight read as (M, C x kh x kw) (the pack pass packs it),
  // and back to (N, M, OH, OW). False when the node is no patch convolution.
  bool patches(const Node& node) {
    auto window = patch_window(node);
    if (!window) return false;
    const auto [kh, kw] = *window;
    const auto& d = node.inputs[0]->type.dims;
    const Tensor& w = *constant_value(node.inputs[1]);
    const int64_t n = d[0] == kDynamic ? 0 : d[0], c = d[1], oh = d[2] / kh, ow = d[3] / kw,
                  m = w.shape()[0];
    const std::string& name = node.name;
    Variable* r = add("reshape", {{"shape", std::vector<int64_t>{n, c, oh, kh, ow, kw}}},
                      {copy_.map(node.inputs[0])}, name + ".patches_r", name + ".patches_r")
                      ->outputs[0];
    Variable* t = add("transpose", {{"perm", std::vector<int64_t>{0, 2, 4, 1, 3, 5}}}, {r},
                      name + ".patches_t", name + ".patches_t")
                      ->outputs[0];
    Variable* rows = add("reshape", {{"shape", std::vector<int64_t>{-1, c * kh * kw}}}, {t},
                         name + ".patches", name + ".patches")
                         ->outputs[0];
    Variable* w2 = add("reshape", {{"shape", std::vector<int64_t>{m, c * kh * kw}}},
                       {copy_.map(node.inputs[1])}, name + ".weight_rows", name + ".weight_rows")
                       ->outputs[0];
    std::vector<Variable*> gemm_in{rows, w2};
    if (node.inputs.size() == 3) gemm_in.push_back(copy_.map(node.inputs[2]));
    Variable* y =
        add("gemm", {{"transB", int64_t{1}}}, gemm_in, name, name + ".per_patch")->outputs[0];
    Variable* y4 = add("reshape", {{"shape", std::vector<int64_t>{-1, oh, ow, m}}}, {y},
                       name + ".per_patch_r", name + ".per_patch_r")
                       ->outputs[0];
    copy_.add(
        OpRegistry::instance().create("transpose", {{"perm", std::vector<int64_t>{0, 3, 1, 2}}}),
        {y4}, {node.outputs[0]}, name + ".to_nchw");
    return true;
  }

  Node* add(const std::string& op, Attrs props, std::vector<Variable*> inputs,
            const std::string& name, const std::string& out_name) {
    return add_fresh(copy_, op, props, inputs, name, out_name);
  }

  // (N, C, H, W) -> (N, C/8, H, W, 8) of a dst value with those dims (after right-aligning).
  Variable* reorder_in(Variable* v, const std::vector<int64_t>& d4, const std::string& name) {
    const int64_t n = d4[0] == kDynamic ? 0 : d4[0];
    Variable* r = add("reshape", {{"shape", std::vector<int64_t>{n, d4[1] / B, B, d4[2], d4[3]}}},
                      {v}, name + ".to_nchwc", name + ".blocks")
                      ->outputs[0];
    return add("transpose", {{"perm", std::vector<int64_t>{0, 1, 3, 4, 2}}}, {r},
               name + ".to_nchwc_t", name + ".nchwc")
        ->outputs[0];
  }

  // The blocked form of source value v (a region value): made once.
  Variable* blocked(const Variable* v) {
    auto it = blocked_.find(v);
    if (it != blocked_.end()) return it->second;
    has_plain_.insert(v);  // the reorder's source
    return blocked_[v] = reorder_in(copy_.map(v), v->type.dims, v->name);
  }

  // Makes source value v readable in NCHW (its plain form) when only its blocked form exists.
  void plain(const Variable* v) {
    if (!blocked_.count(v) || has_plain_.count(v)) return;
    has_plain_.insert(v);
    Variable* t = add("transpose", {{"perm", std::vector<int64_t>{0, 1, 4, 2, 3}}}, {blocked_[v]},
                      v->name + ".from_nchwc_t", v->name + ".unblocked")
                      ->outputs[0];
    const auto& d = v->type.dims;
    Variable* r = add("reshape", {{"shape", std::vector<int64_t>{0, d[1], d[2], d[3]}}}, {t},
                      v->name + ".from_nchwc", v->name)
                      ->outputs[0];
    copy_.replace(v, r);
  }

  // An elementwise operand against a blocked (N, C, H, W) result: its blocked form, or
  // nothing when it broadcasts in a way the blocked shape cannot follow.
  std::optional<Variable*> operand(const Variable* v, int64_t c) {
    if (blocked_.count(v)) return blocked_[v];
    auto d = as_rank4(v);
    if (!d) return {};
    const int64_t numel = std::accumulate(d->begin(), d->end(), int64_t{1},
                                          [](int64_t a, int64_t b) { return a * b; });
    if (numel == 1) return copy_.map(v);  // a scalar broadcasts against any rank
    for (int64_t e : *d) {
      if (e == kDynamic) return {};
    }
    if ((*d)[1] == 1) {
      return add("reshape", {{"shape", std::vector<int64_t>{(*d)[0], 1, (*d)[2], (*d)[3], 1}}},
                 {copy_.map(v)}, v->name + ".to_nchwc", v->name + ".nchwc_b")
          ->outputs[0];
    }
    if ((*d)[1] != c) return {};
    has_plain_.insert(v);
    return blocked_[v] = reorder_in(copy_.map(v), *d, v->name);
  }

  bool convert(const Node& node) {
    if (converting_.count(&node)) {
      const Attrs props = *nchwc_props(node);
      const Tensor& w = *constant_value(node.inputs[1]);
      const bool grouped = attr_int(props, "channel_groups", 1) > 1;
      // A grouped weight's channels are its group's: it is laid out as a group-1 weight of C/G.
      const int64_t m = w.shape()[0], c = grouped ? w.shape()[1] : node.inputs[0]->type.dims[1];
      const bool depthwise = attr_int(props, "group", 1) != 1;
      // The weight in the kernel's order: (M/8, C/8, kh, kw, 8, 8) read as (M/8, C x kh x kw,
      // 8), or (C/8, kh, kw, 8); a plain image's (M/8, C x kh x kw, 8), one channel per tap.
      const int64_t kh = w.shape()[2], kw = w.shape()[3];
      const bool plain = !blockable(node.inputs[0]);
      std::vector<int64_t> split{m / B, B, c / B, B, kh, kw}, perm{0, 2, 4, 5, 3, 1};
      if (depthwise) {
        split = {m / B, B, kh, kw};
        perm = {0, 2, 3, 1};
      } else if (plain) {
        split = {m / B, B, c * kh * kw};
        perm = {0, 2, 1};
      }
      const std::string& wn = node.inputs[1]->name;
      Variable*& wb = weights_[node.inputs[1]];
      if (!wb) {
        Variable* wr = add("reshape", {{"shape", split}}, {copy_.map(node.inputs[1])},
                           wn + ".to_nchwc", wn + ".nchwc_r")
                           ->outputs[0];
        wb = add("transpose", {{"perm", perm}}, {wr}, wn + ".to_nchwc_t", wn + ".nchwc_t")
                 ->outputs[0];
        if (!depthwise) {
          wb = add("reshape", {{"shape", std::vector<int64_t>{m / B, c * kh * kw, B}}}, {wb},
                   wn + ".to_nchwc_m", wn + ".nchwc")
                   ->outputs[0];
        }
      }
      Variable* weight = wb;
      const Variable* x = node.inputs[0];
      if (auto it = scaled_.find(&node); it != scaled_.end()) {
        // W (M/8, C/8 x kh x kw, 8) as (M/8, C/8, kh x kw, 8 in, 8 out) times s as
        // (1, C/8, 1, 8, 1): input channel c = block * 8 + lane, as in the blocked input.
        x = it->second.first;
        Variable* w5 =
            add("reshape", {{"shape", std::vector<int64_t>{m / B, c / B, kh * kw, B, B}}}, {wb},
                node.name + ".weight_5d", node.name + ".weight_5d")
                ->outputs[0];
        // s in NCHW, or blocked as (1, C/8, 1, 1, 8) when its own region converted (an SE
        // block whose squeeze keeps whole blocks): both hold channel c at offset c.
        const Variable* scale = it->second.second;
        Variable* sv = blocked_.count(scale) ? blocked_[scale] : copy_.map(scale);
        Variable* s5 = add("reshape", {{"shape", std::vector<int64_t>{1, c / B, 1, B, 1}}}, {sv},
                           node.name + ".scale_to_weights", node.name + ".scale_5d")
                           ->outputs[0];
        Variable* ws =
            add("mul", {}, {w5, s5}, node.name + ".scale_weights", node.name + ".weight_scaled_5d")
                ->outputs[0];
        weight = add("reshape", {{"shape", std::vector<int64_t>{m / B, c * kh * kw, B}}}, {ws},
                     node.name + ".weight_scaled", node.name + ".weight_scaled")
                     ->outputs[0];
      }
      Variable* xin = plain ? copy_.map(x) : blocked(x);
      Attrs conv_props = props;
      const auto strides = attr_ints(props, "strides", std::vector<int64_t>{1, 1});
      const auto pads = attr_ints(props, "pads", std::vector<int64_t>{0, 0, 0, 0});
      if (!depthwise && !grouped && !plain && kh == 1 && kw == 1 &&
          (strides[0] != 1 || strides[1] != 1) &&
          std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
        // A strided 1 x 1 convolution (a ResNet's downsample) is a pointwise one over every
        // s-th position: one strided copy of a quarter of the input, then the pointwise
        // kernel (54 -> ~100 GFLOP/s; the direct one ran a 64-step loop per run).
        const auto& d = x->type.dims;
        xin = add("slice",
                  {{"starts", std::vector<int64_t>{0, 0}},
                   {"ends", std::vector<int64_t>{d[2], d[3]}},
                   {"axes", std::vector<int64_t>{2, 3}},
                   {"steps", strides}},
                  {xin}, node.name + ".every_stride", node.name + ".strided_input")
                  ->outputs[0];
        conv_props["strides"] = std::vector<int64_t>{1, 1};
      }
      std::vector<Variable*> inputs{xin, weight};
      if (node.inputs.size() == 3) inputs.push_back(copy_.map(node.inputs[2]));
      const Variable* out = node.outputs[0];
      blocked_[out] =
          add("conv_nchwc", conv_props, inputs, node.name, out->name + ".nchwc")->outputs[0];
      return true;
    }
    if (dropped_.count(&node)) return true;  // its scale went onto a convolution's weights
    const Variable* out = node.outputs.size() == 1 ? node.outputs[0] : nullptr;
    if (!out) return false;
    if (spatial_pool(node) && blocked_.count(node.inputs[0])) {
      blocked_[out] = add(node.op->name(), node.op->props(), {blocked_[node.inputs[0]]}, node.name,
                          out->name + ".nchwc")
                          ->outputs[0];
      return true;
    }
    bool any_blocked = false;
    for (const Variable* v : node.inputs) any_blocked |= blocked_.count(v) > 0;
    if (!any_blocked || !in_region_.count(out)) return false;
    if (auto pool = max_pool_props(node)) {
      blocked_[out] =
          add("max_pool_nchwc", *pool, {blocked(node.inputs[0])}, node.name, out->name + ".nchwc")
              ->outputs[0];
      return true;
    }
    if (channel_concat(node, blockable)) {
      std::vector<Variable*> inputs;
      for (const Variable* v : node.inputs) inputs.push_back(blocked(v));
      blocked_[out] = add("concat", {{"axis", int64_t{1}}}, inputs, node.name, out->name + ".nchwc")
                          ->outputs[0];
      return true;
    }
    if (!is_elementwise_node(node) || !blockable(out)) return false;
    auto made = elementwise_in_layout(
        copy_, node, [&](const Variable* v) { return operand(v, out->type.dims[1]); }, ".nchwc");
    if (!made) return false;
    blocked_[out] = *made;
    return true;
  }

  const Graph& src_;
  GraphCopy copy_;
  std::set<const Node*> converting_;
  std::set<const Variable*> in_region_;
  std::unordered_map<const Variable*, Variable*> blocked_;
  std::set<const Variable*> has_plain_;
  std::unordered_map<const Variable*, Variable*> weights_;  // a weight two convolutions share
  // Convolution -> (x, s) of its input x * s; the products' nodes, which are not copied.
  std::unordered_map<const Node*, std::pair<const Variable*, const Variable*>> scaled_;
  std::set<const Node*> dropped_;
};

}  // namespace

// A region's reorder out, then a model's own transpose (ConvNeXt's NCHW -> NHWC): one copy.
Graph layout_nchwc(const Graph& graph) { return compose_reorders(Layout(graph).run()); }

}  // namespace kiln
