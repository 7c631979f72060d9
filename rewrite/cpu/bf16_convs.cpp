// bfloat16 convolutions (opt-in with the bf16 pass: --precision bf16, or "bf16conv" in the
// passes spec): a float32 2-D convolution of group 1 whose weight is a model weight becomes
// a GEMM of its windows, so the bf16 pass rounds that weight's packed panels and the product
// runs on kiln_support.gemm_packed_bf16 (vdpbf16ps where the CPU has AVX512-BF16, its
// float32 form elsewhere) as a linear layer's does:
//   im2col(X channels-last) (N, OH, OW, kh*kw*C) @ W as (kh*kw*C, M) [+ B]
//   -> transposed to (N, M, OH, OW)
// A 1x1 convolution at stride 1 without padding reads X channels-last as its rows. It runs
// first, so the weight's reshape and transpose fold into a recorded constant (a new weight
// set is reordered again), and the blocked layout pass leaves these convolutions alone.
// Depthwise and grouped convolutions, and 1-D and 3-D ones, stay float32.
#include "ops/conv.h"
#include "ops/registry.h"
#include "rewrite/graph_copy.h"
#include "rewrite/layout_region.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

class Bf16Convs {
 public:
  explicit Bf16Convs(GraphCopy& copy) : copy_(copy) {}

  static bool eligible(const Node& node) {
    if (node.op->name() != "conv" || node.outputs.size() != 1 || node.inputs.size() < 2 ||
        attr_int(node.op->props(), "group", 1) != 1) {
      return false;
    }
    const TensorType& x = node.inputs[0]->type;
    const Variable* w = node.inputs[1];
    if (x.dtype != DType::kFloat32 || x.rank() != 4 || w->kind != VarKind::kConstant ||
        w->type.dtype != DType::kFloat32 || w->type.rank() != 4) {
      return false;
    }
    for (size_t d = 1; d < 4; ++d) {
      if (x.dims[d] == kDynamic) return false;
    }
    return dynamic_cast<const Conv*>(node.op.get()) != nullptr;
  }

  void lower(const Node& node) {
    const auto& conv = static_cast<const Conv&>(*node.op);
    const std::vector<WindowDims> g = conv.node_geometry(node);
    const std::vector<int64_t>& wd = node.inputs[1]->type.dims;
    const int64_t M = wd[0], K = wd[1] * wd[2] * wd[3];
    const std::string& name = node.name;
    // X channels-last: a 1x1 convolution at stride 1 reads it as its rows, others copy each
    // tap's run of channels (im2col).
    Variable* x = add("transpose", {{"perm", std::vector<int64_t>{0, 2, 3, 1}}},
                      {copy_.map(node.inputs[0])}, name + ".channels_last");
    const bool pointwise = g[0].kernel == 1 && g[1].kernel == 1 && g[0].stride == 1 &&
                           g[1].stride == 1 && g[0].pad_begin == 0 && g[1].pad_begin == 0 &&
                           g[0].pad_end == 0 && g[1].pad_end == 0;
    Variable* rows = pointwise
                         ? x
                         : add("im2col",
                               {{"kernel_shape", std::vector<int64_t>{g[0].kernel, g[1].kernel}},
                                {"strides", std::vector<int64_t>{g[0].stride, g[1].stride}},
                                {"dilations", std::vector<int64_t>{g[0].dilation, g[1].dilation}},
                                {"pads", std::vector<int64_t>{g[0].pad_begin, g[1].pad_begin,
                                                              g[0].pad_end, g[1].pad_end}}},
                               {x}, name + ".rows");
    // W (M, C, kh, kw) -> (kh, kw, C, M) -> (kh*kw*C, M): folded once into a weight.
    Variable* wt = add("transpose", {{"perm", std::vector<int64_t>{2, 3, 1, 0}}},
                       {copy_.map(node.inputs[1])}, name + ".weight_taps");
    Variable* wm =
        add("reshape", {{"shape", std::vector<int64_t>{K, M}}}, {wt}, name + ".weight_columns");
    Variable* y = add("matmul", {}, {rows, wm}, name + ".product");
    if (node.inputs.size() == 3) y = add("add", {}, {y, copy_.map(node.inputs[2])}, name + ".bias");
    copy_.add(
        OpRegistry::instance().create("transpose", {{"perm", std::vector<int64_t>{0, 3, 1, 2}}}),
        {y}, {node.outputs[0]}, name);
  }

 private:
  Variable* add(const std::string& op, const Attrs& props, const std::vector<Variable*>& inputs,
                const std::string& name) {
    return add_fresh(copy_, op, props, inputs, name, name)->outputs[0];
  }
  GraphCopy& copy_;
};

}  // namespace

Graph bf16_convs(const Graph& graph) {
  GraphCopy copy(graph);
  Bf16Convs lowering(copy);
  for (const auto& node : graph.nodes()) {
    if (Bf16Convs::eligible(*node)) {
      lowering.lower(*node);
    } else {
      copy.copy(*node);
    }
  }
  return copy.finish();
}

}  // namespace kiln
