#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "ops/broadcast.h"
#include "ops/c/slice_loop.h"
#include "util/error.h"

namespace kiln {

Softmax::Softmax(bool log, Attrs props)
    : COp(log ? "log_softmax" : "softmax", std::move(props)), log_(log) {
  check_known_attrs(this->props(), log ? std::vector<std::string>{"axis"}
                                       : std::vector<std::string>{"axis", "safe"});
  axis_ = attr_int(this->props(), "axis", -1);
  const int64_t safe = attr_int(this->props(), "safe", 0);
  if (safe != 0 && safe != 1) throw AttrError("safe", "must be 0 or 1");
  safe_ = safe == 1;
}

std::vector<TensorType> Softmax::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const auto& in = inputs[0];
  if (in.dtype != DType::kFloat32 && in.dtype != DType::kFloat64) {
    throw UserError(name() + " requires float32 or float64, got " +
                    std::string(dtype_name(in.dtype)));
  }
  if (in.rank() < 1) throw UserError(name() + ": input must have rank >= 1");
  normalize_axis(axis_, in.rank(), name());
  return {in};
}

std::vector<Shape> Softmax::infer_shape(const std::vector<Shape>& inputs) const {
  return {inputs[0]};
}

void Softmax::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  const int axis = normalize_axis(axis_, in.ndim(), name());
  int64_t outer = 1, len = in.shape()[static_cast<size_t>(axis)], inner = 1;
  for (int d = 0; d < axis; ++d) outer *= in.shape()[static_cast<size_t>(d)];
  for (int d = axis + 1; d < in.ndim(); ++d) inner *= in.shape()[static_cast<size_t>(d)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t l) { return (o * len + l) * inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t l = 0; l < len; ++l) mx = std::max(mx, in.load(at(l)));
      if (mx == -std::numeric_limits<double>::infinity()) {
        if (safe_) {
          for (int64_t l = 0; l < len; ++l) out.store(at(l), 0.0);
          continue;
        }
        mx = 0;
      }
      double sum = 0;
      for (int64_t l = 0; l < len; ++l) sum += std::exp(in.load(at(l)) - mx);
      for (int64_t l = 0; l < len; ++l) {
        double x = in.load(at(l)) - mx;
        out.store(at(l), log_ ? x - std::log(sum) : std::exp(x) / sum);
      }
    }
  }
}

int64_t Softmax::c_split_unit(const Node& node) const {
  const auto& t = node.inputs[0]->type;
  return static_slice_size(t, normalize_axis(axis_, t.rank(), name()));
}

bool Softmax::c_splittable(const Node& node) const { return c_split_unit(node) > 0; }

namespace {

// The C names a row's code uses: its element type, the float suffix of libm's functions.
struct RowCode {
  std::string T, f;
  bool log = false;
  bool safe = false;
};

// The reciprocal of a row's sum: with `safe`, 0 where the sum is 0 (every element -inf, as
// the row's maximum is otherwise e^0 = 1 of it), so the row becomes zeros.
std::string row_scale(const RowCode& r) {
  const std::string& T = r.T;
  return "const " + T + " scale = " + (r.safe ? "sum == 0 ? (" + T + ")0 : " : "") + "(" + T +
         ")1 / sum;\n";
}

// One row of `len` adjacent elements, read from src and written to row. The maximum and the
// sum run in 16 independent lanes, so they vectorize; NaN is skipped by the max and poisons
// the sum.
std::string unit_row(const RowCode& r) {
  const std::string& T = r.T;
  std::string s;
  s += T + " mx = -INFINITY;\n";
  s += "int64_t l = 0;\n";
  s += "{\n";
  s += T + " lane[16];\n";
  s += "for (int k = 0; k < 16; ++k) lane[k] = -INFINITY;\n";
  s += "for (; l + 16 <= len; l += 16)\n";
  s += "KILN_LANES for (int k = 0; k < 16; ++k) lane[k] = src[l + k] > lane[k] ? src[l + k] : "
       "lane[k];\n";
  s += "for (int k = 0; k < 16; ++k) mx = lane[k] > mx ? lane[k] : mx;\n";
  s += "}\n";
  s += "KILN_NOVEC for (; l < len; ++l) mx = src[l] > mx ? src[l] : mx;\n";
  // All -inf: keep exp(-inf - 0) = 0, no NaN from inf - inf.
  s += "if (mx == -INFINITY) mx = 0;\n";
  s += T + " sum = 0;\n";
  if (r.log) {
    s += "KILN_NOVEC for (l = 0; l < len; ++l) sum += kiln_exp" + r.f + "(src[l] - mx);\n";
    // (x - max) - log(sum): x - max is exact for nearby values, so large inputs keep precision.
    s += "const " + T + " lse = log" + r.f + "(sum);\n";
    s += "for (l = 0; l < len; ++l) row[l] = (src[l] - mx) - lse;\n";
    return s;
  }
  // x - mx <= 0 (or NaN): the cheaper exp. Whole blocks of 8 vectorize without a scalar
  // tail; the last partial block goes through a block padded with -inf (whose exp is 0):
  // the scalar exp of a tail (5 of ViT's 197 columns) runs several times slower per element
  // than the vector loop. src may be row itself (a strided input copied in first), read at
  // the index written.
  const std::string e = std::string("kiln_exp_nonpos") + (r.f.empty() ? "" : "_f32");
  s += "for (l = 0; l + 8 <= len; l += 8)\n";
  s += "KILN_SAME_INDEX for (int k = 0; k < 8; ++k) row[l + k] = " + e + "(src[l + k] - mx);\n";
  s += "if (l < len) {\n";
  s += T + " t[8];\n";
  s += "for (int k = 0; k < 8; ++k) t[k] = l + k < len ? src[l + k] : -INFINITY;\n";
  s += "for (int k = 0; k < 8; ++k) t[k] = " + e + "(t[k] - mx);\n";
  s += "for (int k = 0; l + k < len; ++k) row[l + k] = t[k];\n";
  s += "}\n";
  s += "{\n";
  s += T + " lane[16] = {0};\n";
  s += "for (l = 0; l + 16 <= len; l += 16)\n";
  s += "KILN_LANES for (int k = 0; k < 16; ++k) lane[k] += row[l + k];\n";
  s += "for (; l < len; ++l) sum += row[l];\n";
  s += "for (int k = 0; k < 16; ++k) sum += lane[k];\n";
  s += "}\n";
  s += row_scale(r);
  s += "for (l = 0; l < len; ++l) row[l] *= scale;\n";
  return s;
}

// One row whose elements lie `inner` apart: scalar loops (not worth gathers).
std::string strided_row(const RowCode& r) {
  const std::string& T = r.T;
  std::string s;
  s += T + " mx = -INFINITY;\n";
  s += "KILN_NOVEC for (int64_t l = 0; l < len; ++l) mx = src[l * inner] > mx ? src[l * inner] : "
       "mx;\n";
  s += "if (mx == -INFINITY) mx = 0;\n";
  s += T + " sum = 0;\n";
  if (r.log) {
    s += "KILN_NOVEC for (int64_t l = 0; l < len; ++l) sum += kiln_exp" + r.f +
         "(src[l * inner] - mx);\n";
    s += "const " + T + " lse = log" + r.f + "(sum);\n";
    s += "KILN_NOVEC for (int64_t l = 0; l < len; ++l) row[l * inner] = (src[l * inner] - mx) - "
         "lse;\n";
    return s;
  }
  s += "KILN_NOVEC for (int64_t l = 0; l < len; ++l) {\n";
  s += "const " + T + " e = kiln_exp" + r.f + "(src[l * inner] - mx);\n";
  s += "row[l * inner] = e;\n";
  s += "sum += e;\n";
  s += "}\n";
  s += row_scale(r);
  s += "KILN_NOVEC for (int64_t l = 0; l < len; ++l) row[l * inner] *= scale;\n";
  return s;
}

// The rows of one slice (xo, yo) of `inner` rows. inner: known at compile time, or -1.
std::string slice_rows(const RowCode& r, int64_t inner) {
  // A contiguous f32 softmax row: the vector row of kiln_softmax.h.
  const std::string unit =
      !r.log && r.f == "f"
          ? std::string(r.safe ? "kiln_softmax_row_safe_f32" : "kiln_softmax_row_f32") +
                "(xo, yo, len);\n"
          : "const " + r.T + " *src = xo;\n" + r.T + " *row = yo;\n" + unit_row(r);
  const std::string strided = "for (int64_t i = 0; i < inner; ++i) {\nconst " + r.T +
                              " *src = xo + i;\n" + r.T + " *row = yo + i;\n" + strided_row(r) +
                              "}\n";
  if (inner == 1) return r.log || r.f != "f" ? "{\n" + unit + "}\n" : unit;
  if (inner > 1) return strided;
  return "if (inner == 1) {\n" + unit + "} else {\n" + strided + "}\n";
}

}  // namespace

std::string Softmax::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const int axis = normalize_axis(axis_, rank, name());
  const std::string& out = names.outputs[0];
  const std::string ax = std::to_string(axis);
  // The rows' stride, where the shape tells it: the branch for the other kind is not emitted.
  int64_t inner = 1;
  for (int d = axis + 1; d < rank && inner > 0; ++d) {
    const int64_t n = t.dims[static_cast<size_t>(d)];
    inner = n == kDynamic ? -1 : inner * n;
  }
  const RowCode r{std::string(dtype_c_type(t.dtype)), t.dtype == DType::kFloat32 ? "f" : "", log_,
                  safe_};
  // Slices o of (outer, len, inner): this part's range of o.
  std::string s = c_open_slice_loop(
      names, sub, rank, axis, r.T,
      "  const int64_t len = " + out + "->shape[" + ax + "]" +
          (inner == 1 ? "" : ", inner = slice / (len > 0 ? len : 1)") + ";\n");
  s += slice_rows(r, inner);
  s += "  }\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
