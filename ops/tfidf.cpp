#include "ops/tfidf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "ops/c/c_text.h"
#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {
namespace {

// Counts into y (indexed by output column) every n-gram of the row x (c tokens) found in the
// sorted pool; `gram` holds max_gram tokens of scratch. C, so that the module and perform
// share it.
#define KILN_TFIDF_RULE                                                                            \
  KILN_TFIDF_FN int kiln_tfidf_cmp(const int64_t* a, const int64_t* b, int64_t n) {                \
    for (int64_t k = 0; k < n; ++k)                                                                \
      if (a[k] != b[k]) return a[k] < b[k] ? -1 : 1;                                               \
    return 0;                                                                                      \
  }                                                                                                \
  KILN_TFIDF_FN void kiln_tfidf_count(const int64_t* x, int64_t c, int64_t min_n, int64_t max_n,   \
                                      int64_t max_skip, const int64_t* grams, const int64_t* cols, \
                                      const int64_t* value_first, const int64_t* gram_first,       \
                                      const int64_t* gram_count, int64_t* gram, float* y) {        \
    for (int64_t n = min_n; n <= max_n; ++n) {                                                     \
      const int64_t m = gram_count[n - 1];                                                         \
      const int64_t* g = grams + value_first[n - 1];                                               \
      const int64_t* col = cols + gram_first[n - 1];                                               \
      if (m == 0) continue;                                                                        \
      for (int64_t s = 0; s <= (n == 1 ? 0 : max_skip); ++s) {                                     \
        const int64_t step = s + 1;                                                                \
        for (int64_t i = 0; i + (n - 1) * step < c; ++i) {                                         \
          for (int64_t k = 0; k < n; ++k) gram[k] = x[i + k * step];                               \
          int64_t lo = 0, hi = m;                                                                  \
          while (lo < hi) {                                                                        \
            const int64_t mid = lo + (hi - lo) / 2;                                                \
            if (kiln_tfidf_cmp(g + mid * n, gram, n) < 0)                                          \
              lo = mid + 1;                                                                        \
            else                                                                                   \
              hi = mid;                                                                            \
          }                                                                                        \
          if (lo < m && kiln_tfidf_cmp(g + lo * n, gram, n) == 0) y[col[lo]] += 1.0f;              \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

#define KILN_TFIDF_FN static
KILN_TFIDF_RULE
#undef KILN_TFIDF_FN

const char* const kRuleC = KILN_C_TEXT(KILN_TFIDF_RULE);

std::string c_array(const std::string& type, const std::string& name,
                    const std::vector<int64_t>& v) {
  std::string s = "static const " + type + " " + name + "[] = {";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]) + "LL";
  if (v.empty()) s += "0";  // C has no empty arrays
  return s + "};\n";
}

}  // namespace

TfIdf::TfIdf(Attrs p) : COp("tfidf", std::move(p)) {
  const Attrs& a = props();
  check_known_attrs(a, {"min_gram", "max_gram", "max_skip", "mode", "pool", "ngram_counts",
                        "ngram_indexes", "weights"});
  min_gram_ = attr_int(a, "min_gram");
  max_gram_ = attr_int(a, "max_gram");
  max_skip_ = attr_int(a, "max_skip", 0);
  const std::string mode = attr_string(a, "mode");
  mode_ = mode == "TF" ? 0 : mode == "IDF" ? 1 : mode == "TFIDF" ? 2 : -1;
  if (mode_ < 0) throw UserError("tfidf: mode '" + mode + "' is not TF, IDF or TFIDF");
  if (min_gram_ < 1 || max_gram_ < min_gram_)
    throw UserError("tfidf: gram lengths " + std::to_string(min_gram_) + " to " +
                    std::to_string(max_gram_) + " are not 1 <= min <= max");
  if (max_skip_ < 0)
    throw UserError("tfidf: max_skip " + std::to_string(max_skip_) + " is negative");
  const std::vector<int64_t> pool = attr_ints(a, "pool");
  const std::vector<int64_t> starts = attr_ints(a, "ngram_counts");
  const std::vector<int64_t> indexes = attr_ints(a, "ngram_indexes");
  if (indexes.empty()) throw UserError("tfidf: ngram_indexes is empty");
  for (int64_t c : indexes)
    if (c < 0) throw UserError("tfidf: ngram_indexes holds " + std::to_string(c));
  out_dim_ = *std::max_element(indexes.begin(), indexes.end()) + 1;
  // Pool n-grams by length: [starts[n-1], starts[n]) holds those of length n.
  size_t ordinal = 0;  // the n-gram's place in pool order (what ngram_indexes follows)
  const int64_t lengths = std::max<int64_t>(max_gram_, static_cast<int64_t>(starts.size()));
  for (int64_t n = 1; n <= lengths; ++n) {
    const size_t i = static_cast<size_t>(n - 1);
    const int64_t begin = i < starts.size() ? starts[i] : static_cast<int64_t>(pool.size());
    const int64_t end = i + 1 < starts.size() ? starts[i + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()) || (end - begin) % n)
      throw UserError("tfidf: ngram_counts puts the " + std::to_string(n) + "-grams at [" +
                      std::to_string(begin) + ", " + std::to_string(end) + ") of a pool of " +
                      std::to_string(pool.size()) + " tokens");
    const int64_t count = (end - begin) / n;
    if (ordinal + static_cast<size_t>(count) > indexes.size())
      throw UserError("tfidf: the pool holds more n-grams than ngram_indexes has columns (" +
                      std::to_string(indexes.size()) + ")");
    if (n > max_gram_) {
      ordinal += static_cast<size_t>(count);
      continue;
    }
    // Sorted (stably: of equal n-grams the last one's column wins, as in ONNX's reference).
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    auto gram = [&](int64_t k) { return pool.begin() + begin + k * n; };
    std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) {
      return std::lexicographical_compare(gram(l), gram(l) + n, gram(r), gram(r) + n);
    });
    value_first_.push_back(static_cast<int64_t>(grams_.size()));
    gram_first_.push_back(static_cast<int64_t>(cols_.size()));
    int64_t kept = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const bool dup = k + 1 < order.size() &&
                       std::equal(gram(order[k]), gram(order[k]) + n, gram(order[k + 1]));
      if (dup) continue;
      grams_.insert(grams_.end(), gram(order[k]), gram(order[k]) + n);
      cols_.push_back(indexes[ordinal + static_cast<size_t>(order[k])]);
      ++kept;
    }
    gram_count_.push_back(kept);
    ordinal += static_cast<size_t>(count);
  }
  weights_.assign(static_cast<size_t>(out_dim_), 1.0);
  if (a.count("weights")) {
    const auto* given = std::get_if<std::vector<double>>(&a.at("weights"));
    if (!given) throw UserError("tfidf: weights must be floats");
    const std::vector<double>& w = *given;
    if (!w.empty()) {
      if (static_cast<int64_t>(w.size()) < out_dim_)
        throw UserError("tfidf: " + std::to_string(w.size()) + " weights for " +
                        std::to_string(out_dim_) + " output columns");
      std::copy(w.begin(), w.begin() + out_dim_, weights_.begin());
    }
  }
}

std::vector<TensorType> TfIdf::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("tfidf takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kInt32 && x.dtype != DType::kInt64)
    throw UnsupportedError("tfidf: " + x.to_string() + " (int32 and int64 tokens are supported)");
  if (x.rank() != 1 && x.rank() != 2)
    throw UserError("tfidf: " + x.to_string() + " is neither (C) nor (N, C)");
  std::vector<int64_t> dims{out_dim_};
  if (x.rank() == 2) dims.insert(dims.begin(), x.dims[0]);
  return {TensorType{DType::kFloat32, dims}};
}

std::vector<Shape> TfIdf::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out{out_dim_};
  if (inputs[0].size() == 2) out.insert(out.begin(), inputs[0][0]);
  return {out};
}

void TfIdf::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const int64_t c = x.shape().back(), rows = x.ndim() == 2 ? x.shape()[0] : 1;
  std::vector<int64_t> row(static_cast<size_t>(c)), gram(static_cast<size_t>(max_gram_));
  std::vector<float> y(static_cast<size_t>(out_dim_));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < c; ++i) row[static_cast<size_t>(i)] = x.load_int(r * c + i);
    std::fill(y.begin(), y.end(), 0.0f);
    kiln_tfidf_count(row.data(), c, min_gram_, max_gram_, max_skip_, grams_.data(), cols_.data(),
                     value_first_.data(), gram_first_.data(), gram_count_.data(), gram.data(),
                     y.data());
    for (int64_t j = 0; j < out_dim_; ++j) {
      const double f = y[static_cast<size_t>(j)], w = weights_[static_cast<size_t>(j)];
      outputs[0].store(r * out_dim_ + j, mode_ == 0 ? f : mode_ == 1 ? (f > 0 ? w : 0) : f * w);
    }
  }
}

std::string TfIdf::c_support_code() const {
  return std::string("#define KILN_TFIDF_FN __attribute__((unused)) static\n") + kRuleC + "\n";
}

std::string TfIdf::c_support_code_apply(const Node&, const std::string& prefix) const {
  std::string s = c_array("int64_t", prefix + "grams", grams_) +
                  c_array("int64_t", prefix + "cols", cols_) +
                  c_array("int64_t", prefix + "value_first", value_first_) +
                  c_array("int64_t", prefix + "gram_first", gram_first_) +
                  c_array("int64_t", prefix + "gram_count", gram_count_);
  s += "static const float " + prefix + "weights[] = {";
  char buf[48];
  for (size_t i = 0; i < weights_.size(); ++i) {
    const float w = static_cast<float>(weights_[i]);
    if (std::isnan(w)) {
      s += i ? ",__builtin_nanf(\"\")" : "__builtin_nanf(\"\")";
    } else if (std::isinf(w)) {
      s += std::string(i ? "," : "") + (w < 0 ? "-" : "") + "__builtin_inff()";
    } else {
      std::snprintf(buf, sizeof buf, "%s%af", i ? "," : "", static_cast<double>(w));  // exact
      s += buf;
    }
  }
  return s + "};\n";
}

std::string TfIdf::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  const std::string& p = sub.prefix;
  const bool batched = xt.rank() == 2;
  const std::string last = batched ? "1" : "0", k = std::to_string(out_dim_);
  std::string s = "{\n";
  s += "  const int64_t t_c = " + X + "->shape[" + last + "];\n";
  s += "  const int64_t t_rows = " + (batched ? X + "->shape[0]" : std::string("1")) + ";\n";
  s += "  const int64_t t_r0 = t_rows * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t t_r1 = t_rows * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (t_r1 > t_r0) {\n";
  s += "  " + c_workspace("int64_t", "t_x", "t_c + " + std::to_string(max_gram_), "tfidf's row");
  s += "  for (int64_t r = t_r0; r < t_r1; ++r) {\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + X + "->data" +
       (batched ? " + r * " + X + "->strides[0]" : std::string()) + ";\n";
  s += "    for (int64_t i = 0; i < t_c; ++i) t_x[i] = (int64_t)xp[i * " + X + "->strides[" + last +
       "]];\n";
  s += "    float *y = (float *)" + Y + "->data + r * " + k + ";\n";
  s += "    for (int64_t j = 0; j < " + k + "; ++j) y[j] = 0.0f;\n";
  s += "    kiln_tfidf_count(t_x, t_c, " + std::to_string(min_gram_) + ", " +
       std::to_string(max_gram_) + ", " + std::to_string(max_skip_) + ", " + p + "grams, " + p +
       "cols, " + p + "value_first, " + p + "gram_first, " + p + "gram_count, t_x + t_c, y);\n";
  if (mode_ == 1) {
    s += "    for (int64_t j = 0; j < " + k + "; ++j) y[j] = y[j] > 0 ? " + p +
         "weights[j] : 0.0f;\n";
  } else if (mode_ == 2) {
    s += "    for (int64_t j = 0; j < " + k + "; ++j) y[j] *= " + p + "weights[j];\n";
  }
  s += "  }\n  }\n}\n";
  return s;
}

}  // namespace kiln
