#pragma once
// ONNX-style Gemm: Y = alpha * op(A) op(B) + beta * C, with op() an optional transpose and
// C (optional) broadcast to (M, N). Props: alpha, beta, transA, transB, and packed_n: when
// set, B arrives packed in panels (ops/c/gemm_pack.h) for a product N = packed_n wide, and the
// call runs kiln's own GEMM kernel, split over rows of the output; A may then have leading
// dimensions (a MatMul of activations by a weight), all of whose rows count in M. Model
// weights get there through the `pack` rewrite.
#include "ops/cop.h"

namespace kiln {

class Gemm : public COp {
 public:
  explicit Gemm(Attrs props);
  bool c_threads_itself() const override { return packed_n_ == 0; }  // OpenBLAS, unless packed
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 10; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  bool c_splittable(const Node&) const override { return packed_n_ > 0; }
  // Packed: parts take tiles (c_split_tiles); the unit only caps their count, at whole
  // panels worth a quarter MiB of weights each, so a one-row product (a classifier at
  // batch 1, memory-bound) still streams its weights on every core.
  int64_t c_split_unit(const Node& node) const override;
  std::optional<SplitTiles> c_split_tiles(const Node& node, const CodeNames& names,
                                          const Sub& sub) const override;
  bool c_heavy(const Node&) const override { return packed_n_ > 0; }
  // Packed: the epilogue runs on pieces of whole panels as they are finished.
  bool c_inline_epilogue(const Node& node) const override;
  std::string c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                   const std::string& epilogue) const override;
  // Packed: a relu or clip epilogue clamps in the kernel's stores.
  bool c_store_clamp(const Node& node) const override;
  std::string c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                const StoreClamp& clamp) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  bool packed() const { return packed_n_ != 0; }  // B in panels (the pack pass): a CPU layout
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  bool trans_a() const { return trans_a_; }
  bool trans_b() const { return trans_b_; }

 private:
  // `epilogue` (may be empty): run on pieces of panels as they are finished; `clamp`: the
  // kernel clamps as it stores.
  std::string c_code_packed(const Node& node, const CodeNames& names, const Sub& sub,
                            const std::string& epilogue, const StoreClamp* clamp = nullptr) const;
  // C's view (pc, sci, scj), then beta * C copied into rows [lo, hi) x columns [c0, c1) of
  // the output; with lo empty, the view only.
  std::string c_fill_bias(const Node& node, const CodeNames& names, const std::string& lo,
                          const std::string& hi, const std::string& c0 = "0",
                          const std::string& c1 = "N") const;
  double alpha_, beta_;
  bool trans_a_, trans_b_;
  int64_t packed_n_;
};

}  // namespace kiln
