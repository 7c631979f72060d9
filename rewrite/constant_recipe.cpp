#include "rewrite/constant_recipe.h"

#include "ops/c/conv_pack.h"
#include "ops/c/gemm_pack.h"
#include "ops/c/qgemm_pack.h"
#include "ops/conv_nchwc.h"
#include "ops/registry.h"
#include "util/error.h"

namespace kiln {

RecipePtr source_recipe(int index) {
  auto r = std::make_shared<ConstantRecipe>();
  r->source = index;
  return r;
}

RecipePtr transform_recipe(std::string op, Attrs props, int output, std::vector<RecipePtr> inputs) {
  auto r = std::make_shared<ConstantRecipe>();
  r->op = std::move(op);
  r->props = std::move(props);
  r->output = output;
  r->inputs = std::move(inputs);
  return r;
}

bool replayable(const Op& op) {
  const OpRegistry& registry = OpRegistry::instance();
  if (!registry.contains(op.name())) return false;
  try {
    return *registry.create(op.name(), op.props()) == op;
  } catch (const Error&) {
    return false;
  }
}

Tensor run_transform(const std::string& op, const Attrs& props, int output,
                     const std::vector<Tensor>& inputs) {
  if (op == kPackGemmPanels) {
    if (inputs.size() != 1 || inputs[0].ndim() != 2 || output != 0) {
      throw UserError(std::string(kPackGemmPanels) + " takes one matrix");
    }
    return pack_gemm_panels(inputs[0], attr_int(props, "trans") != 0);
  }
  if (op == kGemmPanelsBf16) {
    if (inputs.size() != 1 || output != 0) {
      throw UserError(std::string(kGemmPanelsBf16) + " takes one packed matrix");
    }
    return gemm_panels_to_bf16(inputs[0], attr_int(props, "n"));
  }
  if (op == kPackConvBlocks) {
    if (inputs.size() != 1 || inputs[0].ndim() < 3 || output != 0 ||
        (inputs[0].dtype() != DType::kFloat32 && inputs[0].dtype() != DType::kFloat64)) {
      throw UserError(std::string(kPackConvBlocks) + " takes one float convolution weight");
    }
    return pack_conv_blocks(inputs[0]);
  }
  if (op == kPackQgemm || op == kPackQconv) {
    const bool conv = op == kPackQconv;
    if (inputs.size() != 1 || output != 0 ||
        (inputs[0].dtype() != DType::kInt8 && inputs[0].dtype() != DType::kUInt8) ||
        (conv ? inputs[0].ndim() < 3 : inputs[0].ndim() != 2)) {
      throw UserError(op +
                      (conv ? " takes one int8 or uint8 convolution weight"
                            : " takes one int8 or uint8 matrix") +
                      (inputs.size() == 1 ? ", got " + inputs[0].describe() : std::string()));
    }
    const bool c4 = conv && attr_int(props, "c4", 0) != 0;
    if (c4 && (attr_int(props, "group", 1) != 1 || inputs[0].shape()[1] != 3)) {
      throw UserError(op + " with c4 takes a three-channel weight of group 1, got " +
                      inputs[0].describe());
    }
    return conv ? pack_qconv(inputs[0], attr_int(props, "group", 1), c4) : pack_qgemm(inputs[0]);
  }
  if (op == kWinogradWeights) {
    // A plan's recipe is data: a weight of another shape, or another tile, is the plan's
    // error, named.
    const int64_t tile = attr_int(props, "tile", 2);
    if (tile != 2 && tile != 4) {
      throw UserError(std::string(kWinogradWeights) + " takes tile 2 or 4, got " +
                      std::to_string(tile));
    }
    if (inputs.size() != 1 || output != 0 || inputs[0].dtype() != DType::kFloat32 ||
        inputs[0].ndim() != 3 || inputs[0].shape()[2] != 8 || inputs[0].shape()[1] % 72 != 0) {
      throw UserError(std::string(kWinogradWeights) +
                      " takes one blocked float32 3x3 weight (M/8, C x 9, 8)" +
                      (inputs.size() == 1 ? ", got " + inputs[0].describe() : std::string()));
    }
    return winograd_weights(inputs[0], static_cast<int>(tile));
  }
  std::shared_ptr<const Op> o = OpRegistry::instance().create(op, props);
  std::vector<TensorType> types;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    types.push_back(TensorType{t.dtype(), t.shape()});
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  std::vector<TensorType> out_types = o->infer_type(types);
  std::vector<Shape> out_shapes = o->infer_run_shape(shapes, dtypes);
  if (output < 0 || static_cast<size_t>(output) >= out_types.size()) {
    throw UserError("op " + op + " has no output " + std::to_string(output));
  }
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < out_types.size(); ++i) {
    outputs.push_back(Tensor::empty(out_types[i].dtype, out_shapes.at(i)));
  }
  o->perform(inputs, outputs);
  return outputs[static_cast<size_t>(output)];
}

}  // namespace kiln
