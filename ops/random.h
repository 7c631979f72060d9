#pragma once
// Random numbers as a resource: one counter-based generator, Philox4x32-10 (Salmon et al.,
// SC'11, as cuRAND and PyTorch's CUDA generator use it), keyed by the op's 64-bit seed, with
// the counter (element group, stream, run): element i of a call takes its bits from the
// block of counter (i / 4, stream, run), lane i % 4, so every element's number depends only
// on (seed, stream, run, i), never on how a call is split or how many threads run it. The
// stream tells ops sharing a seed apart (the importer gives each its node's position); the
// run counter lives in the module's state and advances once per call, so a module's calls
// draw fresh numbers and a module loaded again starts over at run 0.
//   random_uniform([like]) -> low + (high - low) * u, u in [0, 1) from 24 (float32) or 53
//     (float64) bits. Props: seed, stream, low, high, dtype, shape (without an input).
//   random_normal([like]) -> mean + scale * z, z by Box-Muller from two uniforms of block
//     (i / 2): lanes 0-1 or 2-3. Props: seed, stream, mean, scale, dtype, shape.
//   bernoulli(p) -> 1 where u < p, else 0, in dtype (p outside [0, 1] clamps; NaN gives 0).
//     Props: seed, stream, dtype.
//   multinomial(x (batch, classes)) -> (batch, sample_size) class indices in dtype (int32 or
//     int64), drawn from softmax(x) row by row: sample k of row b inverts the running sum of
//     the weights exp(x - max) at the 53-bit uniform of element b * sample_size + k. A row
//     with a NaN, or every entry -inf, has no distribution: its samples are -1. Props: seed,
//     stream, dtype, sample_size.
//   dropout_train(x, [ratio]) -> (y, mask): mask = u >= ratio, y = mask ? x / (1 - ratio) : 0
//     (ratio 1 drops everything). Props: seed, stream, ratio (when not an input).
// perform runs run 0 (the oracle for a module's first call).
#include "ops/cop.h"

namespace kiln {

// Philox4x32-10 of counter c under key k, into out (the known-answer tests check it).
void philox4x32_10(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]);

class RandomOp : public COp {
 public:
  enum Kind { kUniform, kNormal, kBernoulli, kDropout, kMultinomial };
  RandomOp(Kind kind, Attrs props);
  // dropout_train: dX = mask ? dY / (1 - ratio) : 0, from the node's own mask (the same draw).
  std::vector<Variable*> grad(const GradArgs& args) const override;
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::string c_state_fields(const Node& node, const std::string& prefix) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }

  Kind kind() const { return kind_; }
  uint64_t seed() const { return seed_; }
  int64_t stream() const { return stream_; }
  double a() const { return a_; }  // low / mean / ratio
  double b() const { return b_; }  // high / scale
  int64_t sample_size() const { return sample_size_; }
  // The generator and the draws in C, for other devices' kernels: the includer defines
  // KILN_RNG_FN (and INFINITY and NAN where its compiler lacks them).
  static const char* rules_c();

 private:
  Kind kind_;
  uint64_t seed_;
  int64_t stream_;
  double a_, b_;  // low, high / mean, scale / ratio
  DType dtype_;
  std::vector<int64_t> shape_;
  bool has_shape_;
  int64_t sample_size_ = 1;
};

}  // namespace kiln
