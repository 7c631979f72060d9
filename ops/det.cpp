#include "ops/det.h"

#include <cmath>

#include "ops/c/c_text.h"
#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {
namespace {

// LU with partial pivoting of one m x m matrix held in `a` (row-major, overwritten); the rule
// is C so that the module and perform share it.
#define KILN_DET_RULE                                                             \
  KILN_DET_FN double kiln_det_lu(double* a, int64_t m) {                          \
    double det = 1;                                                               \
    for (int64_t k = 0; k < m; ++k) {                                             \
      int64_t p = k;                                                              \
      for (int64_t i = k + 1; i < m; ++i)                                         \
        if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;                       \
      if (p != k) {                                                               \
        for (int64_t j = 0; j < m; ++j) {                                         \
          const double t = a[k * m + j];                                          \
          a[k * m + j] = a[p * m + j];                                            \
          a[p * m + j] = t;                                                       \
        }                                                                         \
        det = -det;                                                               \
      }                                                                           \
      const double piv = a[k * m + k];                                            \
      det *= piv;                                                                 \
      if (piv == 0) continue; /* singular: det is 0; the rest cannot change it */ \
      for (int64_t i = k + 1; i < m; ++i) {                                       \
        const double f = a[i * m + k] / piv;                                      \
        for (int64_t j = k + 1; j < m; ++j) a[i * m + j] -= f * a[k * m + j];     \
      }                                                                           \
    }                                                                             \
    return det;                                                                   \
  }

#define KILN_DET_FN static
using std::fabs;
KILN_DET_RULE
#undef KILN_DET_FN

const char* const kRuleC = KILN_C_TEXT(KILN_DET_RULE);

}  // namespace

Det::Det(Attrs props) : COp("det", std::move(props)) { check_known_attrs(this->props(), {}); }

std::vector<TensorType> Det::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("det takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError("det: " + x.to_string() + " (float32 and float64 are supported)");
  if (x.rank() < 2) throw UserError("det: " + x.to_string() + " is not a matrix");
  const int64_t m = x.dims[x.dims.size() - 2], n = x.dims.back();
  if (m != kDynamic && n != kDynamic && m != n)
    throw UserError("det: " + x.to_string() + " holds matrices that are not square");
  return {TensorType{x.dtype, std::vector<int64_t>(x.dims.begin(), x.dims.end() - 2)}};
}

std::vector<Shape> Det::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  if (x[x.size() - 2] != x.back())
    throw UserError("det: matrices of " + std::to_string(x[x.size() - 2]) + " x " +
                    std::to_string(x.back()) + " are not square");
  return {Shape(x.begin(), x.end() - 2)};
}

void Det::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const int64_t m = x.shape().back(), count = outputs[0].numel();
  std::vector<double> a(static_cast<size_t>(m * m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = x.load(b * m * m + i);
    outputs[0].store(b, kiln_det_lu(a.data(), m));
  }
}

std::string Det::c_support_code() const {
  return std::string("#define KILN_DET_FN __attribute__((unused)) static\n") + kRuleC + "\n";
}

std::string Det::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const int r = xt.rank();
  const std::string& X = names.inputs[0];
  const std::string& ctx = sub.ctx;
  const std::string rm = std::to_string(r - 2), rn = std::to_string(r - 1);
  std::string s = "{\n";
  s += "  const int64_t d_m = " + X + "->shape[" + rn + "];\n";
  s += "  int64_t d_count = 1;\n";
  s += "  for (int d = 0; d < " + rm + "; ++d) d_count *= " + X + "->shape[d];\n";
  s += "  const int64_t d_b0 = d_count * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t d_b1 = d_count * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (d_b1 > d_b0) {\n";
  s += "  " + c_workspace("double", "d_a", "d_m * d_m", "det's matrix");
  s += "  for (int64_t b = d_b0; b < d_b1; ++b) {\n";
  s += "    int64_t rem = b, off = 0;\n";
  s += "    for (int d = " + std::to_string(r - 3) + "; d >= 0; --d) { off += rem % " + X +
       "->shape[d] * " + X + "->strides[d]; rem /= " + X + "->shape[d]; }\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + X + "->data + off;\n";
  s += "    for (int64_t i = 0; i < d_m; ++i)\n";
  s += "      for (int64_t j = 0; j < d_m; ++j) d_a[i * d_m + j] = (double)xp[i * " + X +
       "->strides[" + rm + "] + j * " + X + "->strides[" + rn + "]];\n";
  s += "    ((" + T + " *)" + names.outputs[0] + "->data)[b] = (" + T + ")kiln_det_lu(d_a, d_m);\n";
  s += "  }\n  }\n}\n";
  return s;
}

}  // namespace kiln
