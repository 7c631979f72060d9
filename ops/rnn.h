#pragma once
// ONNX's recurrent layers as one op each: lstm, gru and rnn (props: hidden_size, direction
// "forward" | "reverse" | "bidirectional", activations (comma-separated ONNX names, f g h per
// direction), activation_alpha / activation_beta (one per activation), clip (0: none; bounds
// the inputs of the gates' activations, not the cell state entering h),
// input_forget (lstm), linear_before_reset (gru), has_lens).
//
// Inputs, in ONNX's layout 0 (the frontend transposes layout 1), every optional one given:
//   X (seq, batch, input), W (dirs, G*hidden, input), R (dirs, G*hidden, hidden),
//   B (dirs, 2*G*hidden), initial_h (dirs, batch, hidden),
//   lstm only: initial_c (dirs, batch, hidden), P (dirs, 3*hidden),
//   with has_lens: sequence_lens (batch) int32 — steps past a sequence's length leave its
//   state as it was and its Y rows zero; a reverse direction starts at its last valid step.
// Outputs: Y (seq, dirs, batch, hidden), Y_h (dirs, batch, hidden), lstm: Y_c likewise.
// G (gates) is 4 for lstm (i o f c), 3 for gru (z r h), 1 for rnn.
#include "ops/cop.h"

namespace kiln {

class Recurrent : public COp {
 public:
  Recurrent(std::string kind, Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  std::vector<std::string> c_headers() const override { return {"<math.h>", "<string.h>"}; }

  // The activation codes the C engine switches on (Sigmoid = 0 ... Softplus = 10).
  static int activation_code(const std::string& onnx_name);

 private:
  int gates() const { return kind_ == "lstm" ? 4 : kind_ == "gru" ? 3 : 1; }
  int directions() const { return direction_ == "bidirectional" ? 2 : 1; }
  size_t input_count() const { return (kind_ == "lstm" ? 7 : 5) + (has_lens_ ? 1 : 0); }

  std::string kind_, direction_;
  int64_t hidden_;
  std::vector<int> acts_;
  std::vector<double> alpha_, beta_;
  double clip_;
  bool input_forget_, linear_before_reset_, has_lens_;
};

}  // namespace kiln
