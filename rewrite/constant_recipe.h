#pragma once
// Building and replaying ConstantRecipes (graph/constant_recipe.h): the rewrites that make
// constants (folding, weight packing) record how, and a module loaded from the cache replays
// the same transforms on the weights it is given.
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln {

// The transform name weight packing records (props: trans = 0 or 1).
inline constexpr const char* kPackGemmPanels = "pack_gemm_panels";
// And for float32 panels rounded to bfloat16 panels (props: n, the columns).
inline constexpr const char* kGemmPanelsBf16 = "gemm_panels_bf16";
// And for a convolution's weight (no props).
inline constexpr const char* kPackConvBlocks = "pack_conv_blocks";
// And for an integer product's weight (ops/c/qgemm_pack.h): a qmatmul's B (no props), a
// qconv's W (props: group).
inline constexpr const char* kPackQgemm = "pack_qgemm";
inline constexpr const char* kPackQconv = "pack_qconv";
// And for a blocked 3x3 weight's Winograd transform (ops/conv_nchwc.h; props: tile = 2, the
// default, or 4).
inline constexpr const char* kWinogradWeights = "winograd_weights";

RecipePtr source_recipe(int index);
RecipePtr transform_recipe(std::string op, Attrs props, int output, std::vector<RecipePtr> inputs);
// True when an op's transform can be replayed from its name and props alone (the op
// registry recreates an equal op).
bool replayable(const Op& op);
// Output `output` of transform `op` over `inputs`: an op of the registry (its reference
// perform), kPackGemmPanels, kPackConvBlocks or kWinogradWeights. Throws UserError naming the op
// when it does not apply.
Tensor run_transform(const std::string& op, const Attrs& props, int output,
                     const std::vector<Tensor>& inputs);

}  // namespace kiln
