// Winograd: blocked 3x3 convolutions at stride 1 with one zero of padding (ResNet's 3x3
// layers at 56 x 56, 28 x 28 and 14 x 14) run by F(4x4, 3x3) or F(2x2, 3x3)
// (ops/conv_nchwc.h, prop winograd): 36 multiplies per 4x4 tile and channel pair, or 16 per
// 2x2 tile, where the direct form takes 144 or 36. On one Zen 4 core F(4x4) took 0.36-0.37 of
// the direct kernel's time on the 56 x 56 and 28 x 28 layers and F(2x2) 0.51-0.55; the
// direct kernel itself runs at the FMA peak, so no direct kernel can get there. Its weights
// are transformed once, here (their recipe replays the transform for new weights).
//
// F(4x4) from 24 x 24 on: at 14 x 14 its 4x4 tiles pad the map to 16 x 16 and its few tiles per
// row feed the pointwise kernel short runs (0.56 of direct against F(2x2)'s 0.59, within
// noise, on a Zen 4 core), and its transformed weights (36/9 of the direct ones: 9.4 MB for a
// 256-channel layer) outgrow the caches: on a Zen 3 host F(4x4) ran the 14 x 14 layer alone
// at 0.84 of F(2x2)'s time, yet ResNet-18 and -34 gained nothing with it (5% slower, within
// that host's noise). F(2x2) keeps those. Maps under 12 x 12 stay direct: a 7 x 7 map pads to 16
// tiles of F(2x2) for 49 outputs and its layers' 512-channel weights grow 16/9, and it ran 1.3-1.5x
// slower. Results differ from the direct form's by rounding (the transforms add and subtract
// inputs and scale weights): relative errors of about 1e-6 to 1e-5 of the output's scale at
// 64-512 channels, F(4x4)'s about 3x F(2x2)'s. `-winograd` in the pass list keeps every
// convolution direct.
#include <map>

#include "ops/conv_nchwc.h"
#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

constexpr int64_t kMinMap = 12;
constexpr int64_t kMinMap4 = 24;

bool winograd_conv(const Node& node) {
  if (node.op->name() != "conv_nchwc" || node.inputs.size() < 2 || node.outputs.size() != 1)
    return false;
  const Attrs& p = node.op->props();
  const TensorType& x = node.inputs[0]->type;
  const Variable* w = node.inputs[1];
  return attr_int(p, "winograd", 0) == 0 && attr_int(p, "group", 1) == 1 &&
         attr_int(p, "channel_groups", 1) == 1 &&
         attr_ints(p, "kernel_shape") == std::vector<int64_t>{3, 3} &&
         attr_ints(p, "strides") == std::vector<int64_t>{1, 1} &&
         attr_ints(p, "pads") == std::vector<int64_t>{1, 1, 1, 1} && x.rank() == 5 &&
         x.dims[2] != kDynamic && x.dims[3] != kDynamic && x.dims[2] >= kMinMap &&
         x.dims[3] >= kMinMap && w->kind == VarKind::kConstant && w->value &&
         w->value->dtype() == DType::kFloat32 && w->value->ndim() == 3;
}

}  // namespace

Graph winograd_convs(const Graph& graph) {
  GraphCopy copy(graph);
  // A weight two convolutions share, per tile.
  std::map<std::pair<const Variable*, int64_t>, Variable*> transformed;
  for (const auto& node : graph.nodes()) {
    if (!winograd_conv(*node)) {
      copy.copy(*node);
      continue;
    }
    const std::vector<int64_t>& x = node->inputs[0]->type.dims;
    const int64_t tile = x[2] >= kMinMap4 && x[3] >= kMinMap4 ? 4 : 2;
    const Variable* w = node->inputs[1];
    Variable*& u = transformed[{w, tile}];
    if (!u) {
      const std::string name =
          copy.dst().fresh_name(w->name + ".winograd" + (tile == 4 ? "4" : ""));
      Tensor value = winograd_weights(*w->value, static_cast<int>(tile));
      u = w->parameter ? copy.dst().add_parameter(value, name)
                       : copy.dst().add_constant(value, name);
      Attrs recipe_props;
      if (tile != 2) recipe_props["tile"] = tile;
      u->recipe = transform_recipe(kWinogradWeights, recipe_props, 0, {w->recipe});
    }
    Attrs props = node->op->props();
    props["winograd"] = tile;
    std::vector<Variable*> inputs = copy.map(node->inputs);
    inputs[1] = u;
    copy.add(OpRegistry::instance().create("conv_nchwc", props), inputs, {node->outputs[0]},
             node->name);
  }
  return copy.finish();
}

}  // namespace kiln
