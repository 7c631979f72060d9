#include "ops/registry.h"

#include <algorithm>
#include <mutex>

#include "ops/arg_reduce.h"
#include "ops/attention.h"
#include "ops/concat.h"
#include "ops/conv.h"
#include "ops/conv_nchwc.h"
#include "ops/conv_transpose.h"
#include "ops/conv_transpose_fold.h"
#include "ops/convert.h"
#include "ops/det.h"
#include "ops/dft.h"
#include "ops/dim_values.h"
#include "ops/elementwise.h"
#include "ops/epilogue.h"
#include "ops/expand.h"
#include "ops/fused_elementwise.h"
#include "ops/fused_reduce.h"
#include "ops/gather.h"
#include "ops/gather_elements.h"
#include "ops/gemm.h"
#include "ops/grad/window_ops.h"
#include "ops/grid_sample.h"
#include "ops/host_call.h"
#include "ops/im2col.h"
#include "ops/layer_norm.h"
#include "ops/library/op_library.h"
#include "ops/matmul.h"
#include "ops/max_unpool.h"
#include "ops/pad.h"
#include "ops/pool.h"
#include "ops/pool_nchwc.h"
#include "ops/pool_nhwc.h"
#include "ops/qconv.h"
#include "ops/qmatmul.h"
#include "ops/random.h"
#include "ops/reduce.h"
#include "ops/reshape.h"
#include "ops/resize.h"
#include "ops/rnn.h"
#include "ops/roi_align.h"
#include "ops/scan_ops.h"
#include "ops/scatter_gather.h"
#include "ops/slice.h"
#include "ops/softmax.h"
#include "ops/tfidf.h"
#include "ops/transpose.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {
std::mutex g_mutex;
}

OpRegistry::OpRegistry() {
  for (const auto& def : scalar_ops()) {
    const ScalarOpDef* d = &def;
    add(std::string(def.name),
        [d](const Attrs& a) { return std::make_shared<Elementwise>(*d, a); });
  }
  for (auto kind : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin,
                    ReduceKind::kProd}) {
    add(Reduce::op_name(kind),
        [kind](const Attrs& a) { return std::make_shared<Reduce>(kind, a); });
  }
  add("matmul", [](const Attrs& a) { return std::make_shared<MatMul>(a); });
  add("gemm", [](const Attrs& a) { return std::make_shared<Gemm>(a); });
  add("qmatmul", [](const Attrs& a) { return std::make_shared<QMatMul>(a); });
  add("qconv", [](const Attrs& a) { return std::make_shared<QConv>(a); });
  add("transpose", [](const Attrs& a) { return std::make_shared<Transpose>(a); });
  add("reshape", [](const Attrs& a) { return std::make_shared<Reshape>(a); });
  add("flatten", [](const Attrs& a) { return std::make_shared<Flatten>(a); });
  add("concat", [](const Attrs& a) { return std::make_shared<Concat>(a); });
  add("softmax", [](const Attrs& a) { return std::make_shared<Softmax>(false, a); });
  add("log_softmax", [](const Attrs& a) { return std::make_shared<Softmax>(true, a); });
  add("layer_norm", [](const Attrs& a) { return std::make_shared<LayerNorm>(a); });
  add("attention", [](const Attrs& a) { return std::make_shared<Attention>(a); });
  add("slice", [](const Attrs& a) { return std::make_shared<Slice>(a); });
  add("expand", [](const Attrs& a) { return std::make_shared<Expand>(a); });
  add("dim_values", [](const Attrs& a) { return std::make_shared<DimValues>(a); });
  add("fill", [](const Attrs& a) { return std::make_shared<Fill>(a); });
  add("arange", [](const Attrs& a) { return std::make_shared<Arange>(a); });
  add("pad", [](const Attrs& a) { return std::make_shared<Pad>(a); });
  add("pad_grad", [](const Attrs& a) { return std::make_shared<PadGrad>(a); });
  add("dft", [](const Attrs& a) { return std::make_shared<Dft>(a); });
  add("det", [](const Attrs& a) { return std::make_shared<Det>(a); });
  add("tfidf", [](const Attrs& a) { return std::make_shared<TfIdf>(a); });
  add("random_uniform",
      [](const Attrs& a) { return std::make_shared<RandomOp>(RandomOp::kUniform, a); });
  add("random_normal",
      [](const Attrs& a) { return std::make_shared<RandomOp>(RandomOp::kNormal, a); });
  add("bernoulli", [](const Attrs& a) { return std::make_shared<RandomOp>(RandomOp::kBernoulli, a); });
  add("multinomial",
      [](const Attrs& a) { return std::make_shared<RandomOp>(RandomOp::kMultinomial, a); });
  add("dropout_train",
      [](const Attrs& a) { return std::make_shared<RandomOp>(RandomOp::kDropout, a); });
  add("grid_sample", [](const Attrs& a) { return std::make_shared<GridSample>(a); });
  add("grid_sample_grad", [](const Attrs& a) { return std::make_shared<GridSampleGrad>(a); });
  add("roi_align", [](const Attrs& a) { return std::make_shared<RoiAlign>(a); });
  add("roi_align_grad", [](const Attrs& a) { return std::make_shared<RoiAlignGrad>(a); });
  add("max_pool_indices", [](const Attrs& a) { return std::make_shared<MaxPoolIndices>(a); });
  add("max_unpool", [](const Attrs& a) { return std::make_shared<MaxUnpool>(a); });
  add("host_call", [](const Attrs& a) { return std::make_shared<HostCallOp>(a); });
  add("gather", [](const Attrs& a) { return std::make_shared<Gather>(a); });
  add("arg_max", [](const Attrs& a) { return std::make_shared<ArgReduce>(true, a); });
  add("arg_min", [](const Attrs& a) { return std::make_shared<ArgReduce>(false, a); });
  for (const char* kind : {"lstm", "gru", "rnn"}) {
    add(kind, [kind](const Attrs& a) { return std::make_shared<Recurrent>(kind, a); });
  }
  add("cumsum", [](const Attrs& a) { return std::make_shared<CumSum>(a); });
  add("top_k", [](const Attrs& a) { return std::make_shared<TopK>(a); });
  add("resize", [](const Attrs& a) { return std::make_shared<Resize>(a); });
  add("gather_nd", [](const Attrs& a) { return std::make_shared<GatherND>(a); });
  add("scatter_nd", [](const Attrs& a) { return std::make_shared<Scatter>(false, a); });
  add("scatter_elements", [](const Attrs& a) { return std::make_shared<Scatter>(true, a); });
  add("convert", [](const Attrs& a) { return std::make_shared<Convert>(a); });
  add("gather_elements", [](const Attrs& a) { return std::make_shared<GatherElements>(a); });
  add("conv", [](const Attrs& a) { return std::make_shared<Conv>(a); });
  add("conv_transpose", [](const Attrs& a) { return std::make_shared<ConvTranspose>(a); });
  add("conv_transpose_fold",
      [](const Attrs& a) { return std::make_shared<ConvTransposeFold>(a); });
  add("conv_nchwc", [](const Attrs& a) { return std::make_shared<ConvNchwc>(a); });
  add("max_pool_nchwc", [](const Attrs& a) { return std::make_shared<MaxPoolNchwc>(a); });
  add("im2col", [](const Attrs& a) { return std::make_shared<Im2Col>(a); });
  add("max_pool_nhwc", [](const Attrs& a) { return std::make_shared<MaxPoolNhwc>(a); });
  add("max_pool", [](const Attrs& a) { return std::make_shared<Pool>(true, a); });
  add("average_pool", [](const Attrs& a) { return std::make_shared<Pool>(false, a); });
  add("max_pool_grad", [](const Attrs& a) { return std::make_shared<MaxPoolGrad>(a); });
  add("conv_weight_grad", [](const Attrs& a) { return std::make_shared<ConvWeightGrad>(a); });
  add("conv_input_grad", [](const Attrs& a) { return std::make_shared<ConvInputGrad>(a); });
  add("fused_elementwise", [](const Attrs& a) { return std::make_shared<FusedElementwise>(a); });
  add("fused_reduce", [](const Attrs& a) { return std::make_shared<FusedReduce>(a); });
  add("with_epilogue", [](const Attrs& a) { return std::make_shared<WithEpilogue>(a); });
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(const std::string& name, OpFactory factory) {
  std::lock_guard lock(g_mutex);
  for (auto& [n, f] : factories_) {
    if (n == name) {
      f = std::move(factory);
      return;
    }
  }
  factories_.emplace_back(name, std::move(factory));
}

bool OpRegistry::contains(const std::string& name) const {
  std::lock_guard lock(g_mutex);
  return std::any_of(factories_.begin(), factories_.end(),
                     [&](const auto& e) { return e.first == name; });
}

std::shared_ptr<const Op> OpRegistry::create(const std::string& name, const Attrs& props) const {
  load_env_op_libraries();  // ops a model names may come from $KILN_OP_LIBRARIES
  OpFactory factory;
  {
    std::lock_guard lock(g_mutex);
    for (const auto& [n, f] : factories_) {
      if (n == name) factory = f;
    }
  }
  if (!factory) {
    std::vector<std::string> close;
    for (const auto& n : names()) {
      if (n.find(name) != std::string::npos || name.find(n) != std::string::npos)
        close.push_back(n);
    }
    throw UserError(
        "unknown op '" + name + "'" +
        (close.empty() ? std::string("") : " (did you mean " + join(close, ", ") + "?)"));
  }
  return factory(props);
}

std::vector<std::string> OpRegistry::names() const {
  load_env_op_libraries();
  std::lock_guard lock(g_mutex);
  std::vector<std::string> out;
  for (const auto& e : factories_) out.push_back(e.first);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kiln
