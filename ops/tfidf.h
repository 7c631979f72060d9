#pragma once
// ONNX TfIdfVectorizer on integer tokens: tfidf(X (C) or (N, C) int32/int64) -> float32 (K)
// or (N, K), per row the count of each pool n-gram (lengths min_gram..max_gram; for n >= 2
// every skip of 0..max_skip between its tokens, for n = 1 once), then the weighting of `mode`
// (TF: the count; IDF: weight when the count is nonzero; TFIDF: count * weight; weights
// default to 1). The pool is sorted per length at construction, so each window is a binary
// search. Parts take runs of rows.
#include "ops/cop.h"

namespace kiln {

class TfIdf : public COp {
 public:
  // props: min_gram, max_gram, max_skip, mode ("TF", "IDF", "TFIDF"), pool (ints),
  // ngram_counts (ints: where each length's n-grams start in pool), ngram_indexes (ints: each
  // n-gram's output column), weights (floats, per output column; optional).
  explicit TfIdf(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  bool c_splittable(const Node&) const override { return true; }

 private:
  int64_t min_gram_ = 1, max_gram_ = 1, max_skip_ = 0, out_dim_ = 0;
  int mode_ = 0;  // 0 TF, 1 IDF, 2 TFIDF
  // Per length n (index n - 1): where its sorted n-grams start in grams_ (values) and in
  // cols_ (n-grams), and how many there are.
  std::vector<int64_t> grams_, cols_, value_first_, gram_first_, gram_count_;
  std::vector<double> weights_;  // per output column
};

}  // namespace kiln
