// Layout: chains of integer convolutions (a quantized ResNet's blocks, a quantized
// MobileNet's inverted residuals) run channels-last, with the quantize / dequantize chains
// and residual adds between them, and global pooling, on the same channels-last tensors.
// The integer GEMM reads a position's channels as one row: channels-first, every convolution
// transposed its input into rows and its output back (the gather alone: 14% of MobileNetV2).
// Channels-last, a 1x1 convolution reads its input in place, a 3x3 copies rows with their
// padding, and a depthwise one runs on vectors of channels (kiln_support.qdepthwise_nhwc).
//
// A region is a set of 4-D values linked by integer convolutions, elementwise nodes (operands
// of the output's shape join; a scalar or a per-channel (1, C, 1, 1) operand follows as is or
// reshaped), concatenations along the channels (axis 1 becomes 3) and spatial reductions
// (global pooling: axes (2, 3) become (1, 2)) and max pools of bytes (max_pool_nhwc). It converts
// when it holds two convolutions or more; transposes are added where it meets the rest of the
// graph (those of constants fold).
#include <set>
#include <unordered_map>

#include "ops/registry.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/layout_region.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

bool rank4_static(const Variable* v) {
  const auto& d = v->type.dims;
  return d.size() == 4 && d[1] != kDynamic && d[2] != kDynamic && d[3] != kDynamic;
}

// An integer convolution of 4-D tensors not yet channels-last.
bool int8_conv(const Node& node) {
  return node.op->name() == "qconv" && node.outputs.size() == 1 &&
         attr_int(node.op->props(), "nhwc", 0) == 0 && rank4_static(node.inputs[0]) &&
         rank4_static(node.outputs[0]);
}

// A global pooling over H and W with the dimensions kept.
bool spatial_reduce(const Node& node) {
  const std::string& n = node.op->name();
  if ((n != "reduce_mean" && n != "reduce_max") || node.inputs.size() != 1 ||
      !rank4_static(node.inputs[0])) {
    return false;
  }
  const Attrs& p = node.op->props();
  const auto axes = attr_ints(p, "axes", std::vector<int64_t>{});
  return attr_int(p, "keepdims", 1) == 1 &&
         (axes == std::vector<int64_t>{2, 3} || axes == std::vector<int64_t>{-2, -1});
}

// A 2-D max pool of bytes (a quantized ResNet's stem): max_pool_nhwc takes it channels-last.
bool byte_max_pool(const Node& node) {
  if (node.op->name() != "max_pool" || node.inputs.size() != 1 || node.outputs.size() != 1 ||
      !rank4_static(node.inputs[0]) || !rank4_static(node.outputs[0])) {
    return false;
  }
  const DType dt = node.inputs[0]->type.dtype;
  return dt == DType::kUInt8 || dt == DType::kInt8;
}

class LayoutInt8 {
 public:
  explicit LayoutInt8(const Graph& g) : src_(g), copy_(g) {}

  Graph run() {
    choose_regions();
    if (in_region_.empty()) {
      for (const auto& node : src_.nodes()) copy_.copy(*node);
      return copy_.finish();
    }
    for (const auto& node : src_.nodes()) {
      if (!convert(*node)) {
        for (const Variable* v : node->inputs) plain(v);
        copy_.copy(*node);
      }
    }
    for (const Variable* v : src_.outputs()) plain(v);
    return fold_constants(copy_.finish());
  }

 private:
  void choose_regions() {
    ValueUnion u;
    std::vector<const Node*> convs;
    for (const auto& node : src_.nodes()) {
      if (int8_conv(*node)) {
        convs.push_back(node.get());
        u.join(node->inputs[0], node->outputs[0]);
      } else if (spatial_reduce(*node) || byte_max_pool(*node)) {
        u.join(node->inputs[0], node->outputs[0]);
      } else if (channel_concat(*node, rank4_static)) {
        for (const Variable* v : node->inputs) u.join(v, node->outputs[0]);
      } else if (is_elementwise_node(*node) && node->outputs.size() == 1 &&
                 rank4_static(node->outputs[0])) {
        for (const Variable* v : node->inputs) {
          if (v->type.dims == node->outputs[0]->type.dims) u.join(v, node->outputs[0]);
        }
      }
    }
    std::unordered_map<const Variable*, int> count;
    for (const Node* n : convs) ++count[u.find(n->outputs[0])];
    for (const auto& node : src_.nodes()) {
      for (const Variable* v : node->outputs) {
        if (count[u.find(v)] >= 2) in_region_.insert(v);
      }
    }
  }

  Node* add(const std::string& op, const Attrs& props, const std::vector<Variable*>& inputs,
            const std::string& name, const std::string& out_name) {
    return add_fresh(copy_, op, props, inputs, name, out_name);
  }

  // The channels-last form of source value v (N, C, H, W): made once.
  Variable* channels_last(const Variable* v) {
    auto it = nhwc_.find(v);
    if (it != nhwc_.end()) return it->second;
    has_plain_.insert(v);  // the transpose's source
    return nhwc_[v] = add("transpose", {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}, {copy_.map(v)},
                          v->name + ".to_nhwc", v->name + ".nhwc")
                          ->outputs[0];
  }

  // Makes source value v readable channels-first when only its channels-last form exists.
  void plain(const Variable* v) {
    if (!nhwc_.count(v) || has_plain_.count(v)) return;
    has_plain_.insert(v);
    copy_.replace(v, add("transpose", {{"perm", std::vector<int64_t>{0, 3, 1, 2}}}, {nhwc_[v]},
                         v->name + ".from_nhwc", v->name)
                         ->outputs[0]);
  }

  // An elementwise operand against a channels-last (N, H, W, C) result of source dims
  // `out`: its channels-last form, or nothing when it broadcasts in a way that cannot follow.
  std::optional<Variable*> operand(const Variable* v, const std::vector<int64_t>& out) {
    if (nhwc_.count(v)) return nhwc_[v];
    const auto& d = v->type.dims;
    int64_t numel = 1;
    for (int64_t e : d) numel = e == kDynamic || numel == kDynamic ? kDynamic : numel * e;
    if (numel == 1) return copy_.map(v);  // a scalar broadcasts against any layout
    if (d == out) return channels_last(v);
    if (d.size() == 4 && d[0] != kDynamic && d[1] == out[1] && d[2] == 1 && d[3] == 1) {
      return add("reshape", {{"shape", std::vector<int64_t>{d[0], 1, 1, d[1]}}}, {copy_.map(v)},
                 v->name + ".to_nhwc", v->name + ".nhwc_b")
          ->outputs[0];
    }
    return {};
  }

  bool convert(const Node& node) {
    if (node.outputs.size() != 1 || !in_region_.count(node.outputs[0])) return false;
    const Variable* out = node.outputs[0];
    if (int8_conv(node)) {
      Attrs props = node.op->props();
      props["nhwc"] = int64_t{1};
      // A group-1 convolution gathers its rows from a channels-first image as readily, so
      // the region's entry (the quantized image) needs no transpose.
      const bool entry = !nhwc_.count(node.inputs[0]) && attr_int(props, "group", 1) == 1;
      if (entry) props["x_nchw"] = int64_t{1};
      std::vector<Variable*> inputs{entry ? copy_.map(node.inputs[0])
                                          : channels_last(node.inputs[0])};
      for (size_t k = 1; k < node.inputs.size(); ++k) inputs.push_back(copy_.map(node.inputs[k]));
      nhwc_[out] = add("qconv", props, inputs, node.name, out->name + ".nhwc")->outputs[0];
      return true;
    }
    if (spatial_reduce(node)) {
      if (!nhwc_.count(node.inputs[0])) return false;
      Attrs props = node.op->props();
      props["axes"] = std::vector<int64_t>{1, 2};
      nhwc_[out] =
          add(node.op->name(), props, {nhwc_[node.inputs[0]]}, node.name, out->name + ".nhwc")
              ->outputs[0];
      return true;
    }
    if (byte_max_pool(node)) {
      if (!nhwc_.count(node.inputs[0])) return false;
      nhwc_[out] = add("max_pool_nhwc", node.op->props(), {nhwc_[node.inputs[0]]}, node.name,
                       out->name + ".nhwc")
                       ->outputs[0];
      return true;
    }
    if (channel_concat(node, rank4_static)) {
      bool any = false;
      for (const Variable* v : node.inputs) any |= nhwc_.count(v) > 0;
      if (!any) return false;
      std::vector<Variable*> inputs;
      for (const Variable* v : node.inputs) inputs.push_back(channels_last(v));
      nhwc_[out] =
          add("concat", {{"axis", int64_t{3}}}, inputs, node.name, out->name + ".nhwc")->outputs[0];
      return true;
    }
    if (!is_elementwise_node(node)) return false;
    bool any = false;
    for (const Variable* v : node.inputs) any |= nhwc_.count(v) > 0;
    if (!any) return false;
    auto made = elementwise_in_layout(
        copy_, node, [&](const Variable* v) { return operand(v, out->type.dims); }, ".nhwc");
    if (!made) return false;
    nhwc_[out] = *made;
    return true;
  }

  const Graph& src_;
  GraphCopy copy_;
  std::set<const Variable*> in_region_;
  std::unordered_map<const Variable*, Variable*> nhwc_;
  std::set<const Variable*> has_plain_;
};

}  // namespace

Graph layout_nhwc_int8(const Graph& graph) { return compose_reorders(LayoutInt8(graph).run()); }

}  // namespace kiln
