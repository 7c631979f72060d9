#include "ops/scan_ops.h"

#include <algorithm>
#include <cmath>

#include "ops/broadcast.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// outer * len * inner view of a shape around `axis`.
void split_at(const Shape& s, size_t axis, int64_t* outer, int64_t* len, int64_t* inner) {
  *outer = *inner = 1;
  for (size_t d = 0; d < axis; ++d) *outer *= s[d];
  *len = s[axis];
  for (size_t d = axis + 1; d < s.size(); ++d) *inner *= s[d];
}

// The C prologue both ops share: a contiguous copy of input 0 as `x` and its
// outer / len / inner around the axis.
std::string contiguous_columns(const Node& node, const CodeNames& names, const Sub& sub, int axis,
                               const std::string& what) {
  const auto& t = node.inputs[0]->type;
  const std::string ct(dtype_c_type(t.dtype)), in = names.inputs[0];
  const std::string r = std::to_string(t.rank()), ax = std::to_string(axis);
  std::string s = "  int64_t outer = 1, inner = 1, len = " + in + "->shape[" + ax + "], n = 1;\n";
  s += "  for (int d = 0; d < " + r + "; ++d) n *= " + in + "->shape[d];\n";
  s += "  for (int d = 0; d < " + ax + "; ++d) outer *= " + in + "->shape[d];\n";
  s += "  for (int d = " + ax + " + 1; d < " + r + "; ++d) inner *= " + in + "->shape[d];\n";
  s += c_workspace(ct, "x", "n", what + "'s dense input");
  s += "  kiln_copy_strided(x, " + in + "->data, " + r + ", " + in + "->shape, " + in +
       "->strides, sizeof(" + ct + "));\n";
  return s;
}

void check_numeric(const TensorType& t, const std::string& what) {
  if (t.dtype == DType::kBool || !(is_float(t.dtype) || is_integer(t.dtype)) ||
      t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16) {
    throw UserError(what + ": " + t.to_string() + " (a numeric dtype computed natively)");
  }
  if (t.rank() == 0) throw UserError(what + ": input must have rank >= 1");
}

}  // namespace

CumSum::CumSum(Attrs props) : COp("cumsum", std::move(props)) {
  check_known_attrs(this->props(), {"axis", "exclusive", "reverse"});
  axis_ = attr_int(this->props(), "axis");
  exclusive_ = attr_int(this->props(), "exclusive", 0) != 0;
  reverse_ = attr_int(this->props(), "reverse", 0) != 0;
}

std::vector<TensorType> CumSum::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("cumsum takes 1 input");
  check_numeric(inputs[0], "cumsum");
  normalize_axis(axis_, inputs[0].rank(), "cumsum");
  return {inputs[0]};
}

std::vector<Shape> CumSum::infer_shape(const std::vector<Shape>& inputs) const {
  return {inputs[0]};
}

void CumSum::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const auto axis = static_cast<size_t>(normalize_axis(axis_, x.ndim(), "cumsum"));
  int64_t outer, len, inner;
  split_at(x.shape(), axis, &outer, &len, &inner);
  const bool fl = is_float(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      int64_t iacc = 0;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = reverse_ ? len - 1 - s : s;
        const int64_t at = (o * len + k) * inner + i;
        if (exclusive_) {
          fl ? outputs[0].store(at, acc) : outputs[0].store_int(at, iacc);
        }
        if (fl) {
          acc += x.load(at);
        } else {
          iacc = static_cast<int64_t>(static_cast<uint64_t>(iacc) +
                                      static_cast<uint64_t>(x.load_int(at)));
        }
        if (!exclusive_) {
          fl ? outputs[0].store(at, acc) : outputs[0].store_int(at, iacc);
        }
      }
    }
  }
}

std::string CumSum::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int axis = normalize_axis(axis_, t.rank(), "cumsum");
  const std::string ct(dtype_c_type(t.dtype));
  // Floats accumulate in double (as perform does); integers in their own type.
  const std::string acc = is_float(t.dtype) ? "double" : ct;
  std::string s = "{\n" + contiguous_columns(node, names, sub, axis, "cumsum");
  s += "  " + ct + " *y = (" + ct + " *)" + names.outputs[0] + "->data;\n";
  s += "  for (int64_t o = 0; o < outer; ++o) {\n    for (int64_t i = 0; i < inner; ++i) {\n";
  s += "      " + acc + " acc = 0;\n      for (int64_t s = 0; s < len; ++s) {\n";
  s += std::string("        const int64_t k = ") + (reverse_ ? "len - 1 - s" : "s") + ";\n";
  s += "        const int64_t at = (o * len + k) * inner + i;\n";
  if (exclusive_) s += "        y[at] = (" + ct + ")acc;\n";
  s += "        acc = (" + acc + ")(acc + x[at]);\n";
  if (!exclusive_) s += "        y[at] = (" + ct + ")acc;\n";
  s += "      }\n    }\n  }\n}\n";
  return s;
}

TopK::TopK(Attrs props) : COp("top_k", std::move(props)) {
  check_known_attrs(this->props(), {"k", "k_dims", "axis", "largest", "sorted"});
  if (this->props().count("k_dims")) {
    const std::vector<DimExpr> e = parse_dim_exprs(attr_string(this->props(), "k_dims"));
    if (e.size() != 1) throw AttrError("k_dims", "must hold one expression");
    k_dims_ = e[0];
    if (this->props().count("k")) throw AttrError("k", "cannot be given with k_dims");
  } else {
    k_ = attr_int(this->props(), "k");
    if (k_ < 0) throw AttrError("k", "must not be negative");
  }
  axis_ = attr_int(this->props(), "axis", -1);
  largest_ = attr_int(this->props(), "largest", 1) != 0;
  sorted_ = attr_int(this->props(), "sorted", 1) != 0;
}

std::vector<TensorType> TopK::infer_type(const std::vector<TensorType>& inputs) const {
  const size_t expected = k_dims_ ? static_cast<size_t>(std::max(0, k_dims_->max_input()) + 1) : 1;
  if (inputs.size() != expected) {
    throw UserError("top_k takes " + std::to_string(expected) + " input" +
                    (expected == 1 ? "" : "s (the data, then the inputs k_dims reads)"));
  }
  check_numeric(inputs[0], "top_k");
  const auto axis = static_cast<size_t>(normalize_axis(axis_, inputs[0].rank(), "top_k"));
  TensorType v = inputs[0];
  const std::optional<int64_t> k = k_dims_ ? k_dims_->eval_static(inputs) : k_;
  if (k && v.dims[axis] != kDynamic && v.dims[axis] < *k) {
    throw UserError("top_k: k = " + std::to_string(*k) + " exceeds axis " + std::to_string(axis) +
                    " of " + inputs[0].to_string());
  }
  v.dims[axis] = k.value_or(kDynamic);
  TensorType i{DType::kInt64, v.dims};
  return {v, i};
}

int64_t TopK::k_of(const std::vector<Shape>& inputs) const {
  const int64_t k = k_dims_ ? k_dims_->eval(inputs) : k_;
  const auto axis =
      static_cast<size_t>(normalize_axis(axis_, static_cast<int>(inputs[0].size()), "top_k"));
  if (k < 0 || inputs[0][axis] < k) {
    throw UserError("top_k: k = " + std::to_string(k) + " is outside axis " + std::to_string(axis) +
                    " of " + dims_to_string(inputs[0]));
  }
  return k;
}

std::vector<Shape> TopK::infer_shape(const std::vector<Shape>& inputs) const {
  Shape s = inputs[0];
  const auto axis = static_cast<size_t>(normalize_axis(axis_, static_cast<int>(s.size()), "top_k"));
  s[axis] = k_of(inputs);
  return {s, s};
}

void TopK::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const int64_t k = k_of(shapes);  // the props' k, or k_dims evaluated
  const auto axis = static_cast<size_t>(normalize_axis(axis_, x.ndim(), "top_k"));
  int64_t outer, len, inner;
  split_at(x.shape(), axis, &outer, &len, &inner);
  // a ranks before b: larger (smaller) first, NaN first (last), equal values by index.
  auto before = [&](double a, int64_t ia, double b, int64_t ib) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest_ ? na : nb;
    }
    if (a != b) return largest_ ? a > b : a < b;
    return ia < ib;
  };
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> idx(static_cast<size_t>(len));
      for (int64_t k = 0; k < len; ++k) idx[static_cast<size_t>(k)] = k;
      auto val = [&](int64_t k) { return x.load((o * len + k) * inner + i); };
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int64_t a, int64_t b) { return before(val(a), a, val(b), b); });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = idx[static_cast<size_t>(j)], at = (o * k + j) * inner + i;
        if (is_float(x.dtype())) {
          outputs[0].store(at, val(src));
        } else {
          outputs[0].store_int(at, x.load_int((o * len + src) * inner + i));
        }
        outputs[1].store_int(at, src);
      }
    }
  }
}

std::string TopK::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int axis = normalize_axis(axis_, t.rank(), "top_k");
  const std::string ct(dtype_c_type(t.dtype));
  const bool fl = is_float(t.dtype);
  std::string s = "{\n" + contiguous_columns(node, names, sub, axis, "top_k");
  // k from the output's shape: the executor sized it (infer_shape checked it against len).
  s += "  const int64_t k = " + names.outputs[0] + "->shape[" + std::to_string(axis) + "];\n";
  s += "  " + ct + " *y = (" + ct + " *)" + names.outputs[0] + "->data;\n";
  s += "  int64_t *yi = (int64_t *)" + names.outputs[1] + "->data;\n";
  s += c_workspace("int64_t", "heap", "k", "top_k's heap");
  // BEFORE(m, n): element m ranks before element n, by the same order as perform (NaN first
  // for largest, last for smallest; equal values by index).
  const std::string A = "col[(m) * inner]", B = "col[(n) * inner]";
  const std::string by_value =
      "(" + A + " != " + B + " ? " + A + (largest_ ? " > " : " < ") + B + " : (m) < (n))";
  std::string before = by_value;
  if (fl) {
    const std::string na = "(" + A + " != " + A + ")", nb = "(" + B + " != " + B + ")";
    before = "((" + na + " || " + nb + ") ? ((" + na + " && " + nb +
             ") ? (m) < (n) : " + (largest_ ? na : nb) + ") : " + by_value + ")";
  }
  s += "#define BEFORE(m, n) " + before + "\n";
  s += "  /* A heap of the k best so far, the one ranking last at its root: each element costs\n"
       "     log k, not k (a detector's TopK takes 1000 of a million). */\n";
  s += "  for (int64_t o = 0; o < outer; ++o) {\n    for (int64_t i = 0; i < inner; ++i) {\n";
  s += "      const " + ct + " *col = x + o * len * inner + i;\n";
  s += "      int64_t size = 0;\n";
  s += "      for (int64_t m = 0; m < len; ++m) {\n";
  s += "        int64_t at;\n";
  s += "        if (size < k) {\n          at = size++;\n";
  s += "          while (at > 0 && BEFORE(heap[(at - 1) / 2], m)) { heap[at] = heap[(at - 1) / 2]; "
       "at = (at - 1) / 2; }\n";
  s += "          heap[at] = m;\n          continue;\n        }\n";
  s += "        if (k == 0 || !BEFORE(m, heap[0])) continue;\n";
  // Puts `item` at the root's place in a heap of `size` entries, moving it down past every
  // child that ranks after it (the worse child first).
  auto sift_down = [](const std::string& item, const std::string& size) {
    return "        at = 0;\n        for (;;) {\n"
           "          int64_t c = 2 * at + 1;\n          if (c >= " +
           size +
           ") break;\n"
           "          if (c + 1 < " +
           size +
           " && BEFORE(heap[c], heap[c + 1])) ++c;\n"
           "          if (!BEFORE(" +
           item +
           ", heap[c])) break;\n"
           "          heap[at] = heap[c];\n          at = c;\n        }\n"
           "        heap[at] = " +
           item + ";\n";
  };
  s += sift_down("m", "size") + "      }\n";
  // Popping the root (the worst) fills the output from its end.
  s += "      for (int64_t j = size - 1; j >= 0; --j) {\n";
  s += "        const int64_t best = heap[0], last = heap[j];\n";
  s += "        y[(o * k + j) * inner + i] = col[best * inner];\n";
  s += "        yi[(o * k + j) * inner + i] = best;\n";
  s += "        int64_t at;\n" + sift_down("last", "j");
  s += "      }\n    }\n  }\n#undef BEFORE\n}\n";
  (void)sorted_;  // always sorted: an order ONNX allows for sorted = 0 too
  return s;
}

}  // namespace kiln
