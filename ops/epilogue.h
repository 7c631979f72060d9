#pragma once
// An op (GEMM, MatMul, Conv) followed by an elementwise epilogue (bias, activation, ...)
// applied to its output in place, inside the same thunk: the product of the epilogue
// fusion pass. Props: "base" (the op's name), "base_inputs" (how many leading inputs are
// the base op's), "program" (a fused_elementwise program whose $0 is the base op's result
// and whose $k, k >= 1, is extra input base_inputs + k - 1), and the base op's own props
// prefixed "base.".
#include <memory>
#include <optional>

#include "ops/c/elementwise_loop.h"
#include "ops/fused_elementwise.h"

namespace kiln {

class WithEpilogue : public COp {
 public:
  explicit WithEpilogue(Attrs props);
  static std::shared_ptr<const WithEpilogue> make(const COp& base, int base_inputs,
                                                  const FusedElementwise& program);

  const COp& base() const { return *base_; }
  int base_inputs() const { return base_inputs_; }
  const FusedElementwise& program() const { return *program_; }
  Node base_view(const Node& node) const;  // the node as the base op sees it

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override { return base_->c_support_code(); }
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  std::string c_state_fields(const Node& node, const std::string& prefix) const override;
  std::string c_init_code_struct(const Node& node, const Sub& sub) const override;
  std::string c_cleanup_code_struct(const Node& node, const Sub& sub) const override;
  std::vector<std::string> c_headers() const override;
  std::vector<std::string> c_libraries() const override { return base_->c_libraries(); }
  std::vector<std::string> c_compile_args() const override { return base_->c_compile_args(); }
  std::vector<std::string> c_preludes() const override;
  // Splits when the base op splits in whole units the epilogue can follow.
  bool c_splittable(const Node& node) const override;
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node& node) const override { return base_->c_heavy(base_view(node)); }
  bool c_threads_itself() const override { return base_->c_threads_itself(); }

 private:
  // The program as a clamp of $0 (relu, or clip by one-element inputs), or nothing.
  std::optional<StoreClamp> store_clamp(const Node& node, const CodeNames& names) const;
  // The base is a channels-last integer convolution with bytes out and the program a costly
  // function of its byte alone (every other operand one element): the convolution applies
  // it as a 256-byte table to each chunk it makes (QConv::c_code_with_table).
  bool byte_table(const Node& node) const;
  std::optional<std::string> table_in_base(const Node& node, const CodeNames& names, const Sub& sub,
                                           const std::vector<LoopOperand>& ops) const;
  std::shared_ptr<const COp> base_;
  std::shared_ptr<const FusedElementwise> program_;
  int base_inputs_ = 0;
};

}  // namespace kiln
