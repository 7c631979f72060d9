#include "ops/dft.h"

#include <cmath>
#include <numbers>

#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {

Dft::Dft(Attrs props) : COp("dft", std::move(props)) {
  check_known_attrs(this->props(), {"axis", "inverse", "onesided", "length"});
  axis_ = attr_int(this->props(), "axis", 1);
  inverse_ = attr_int(this->props(), "inverse", 0) != 0;
  onesided_ = attr_int(this->props(), "onesided", 0) != 0;
  length_ = attr_int(this->props(), "length", 0);
  if (length_ < 0) throw AttrError("length", "must be >= 1, or 0 for the signal's own length");
  if (inverse_ && onesided_)
    throw AttrError("onesided", "a one-sided inverse transform is not supported (dft)");
}

int Dft::axis_for(int rank) const {
  const int64_t a = axis_ < 0 ? axis_ + rank : axis_;
  if (a < 0 || a >= rank - 1) {
    throw UserError("dft: axis " + std::to_string(axis_) + " is not a signal axis of a rank-" +
                    std::to_string(rank) + " input (the last holds the real and imaginary parts)");
  }
  return static_cast<int>(a);
}

std::vector<TensorType> Dft::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("dft takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError("dft: " + x.to_string() + " input (float32 and float64 are supported)");
  if (x.rank() < 2) throw UserError("dft: the input needs a signal axis and a last axis of 1 or 2");
  const int64_t c = x.dims.back();
  if (c != 1 && c != 2) {
    throw UserError("dft: the last dimension of " + x.to_string() +
                    " must be 1 (real) or 2 (real, imaginary)");
  }
  if (onesided_ && c == 2) throw UserError("dft: a one-sided transform of a complex signal");
  const int a = axis_for(x.rank());
  TensorType out = x;
  out.dims.back() = 2;
  const int64_t n = x.dims[static_cast<size_t>(a)];
  if (n == 0) throw UserError("dft: an empty signal axis");
  if (n == kDynamic && length_ == 0) {
    out.dims[static_cast<size_t>(a)] = kDynamic;
  } else {
    const int64_t len = length_for(n);
    out.dims[static_cast<size_t>(a)] = onesided_ ? len / 2 + 1 : len;
  }
  return {out};
}

std::vector<Shape> Dft::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = inputs[0];
  const int a = axis_for(static_cast<int>(out.size()));
  if (out[static_cast<size_t>(a)] == 0) throw UserError("dft: an empty signal axis");
  const int64_t len = length_for(out[static_cast<size_t>(a)]);
  out[static_cast<size_t>(a)] = onesided_ ? len / 2 + 1 : len;
  out.back() = 2;
  return {out};
}

void Dft::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  // The direct sum in long double, the oracle for the generated FFT and sums.
  const Tensor& x = inputs[0];
  Tensor& y = outputs[0];
  const Shape& xs = x.shape();
  const int a = axis_for(x.ndim());
  const int64_t n = xs[static_cast<size_t>(a)], comps = xs.back(), len = length_for(n);
  const int64_t m = y.shape()[static_cast<size_t>(a)];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= xs[static_cast<size_t>(d)];
  for (int d = a + 1; d + 1 < x.ndim(); ++d) inner *= xs[static_cast<size_t>(d)];
  const long double sign = inverse_ ? 1.0L : -1.0L;
  const long double two_pi = 2.0L * std::numbers::pi_v<long double>;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < m; ++k) {
        long double re = 0, im = 0;
        for (int64_t j = 0; j < std::min(n, len); ++j) {
          const int64_t at = ((o * n + j) * inner + i) * comps;
          const long double xr = x.load(at), xi = comps == 2 ? x.load(at + 1) : 0.0L;
          const long double t =
              two_pi * static_cast<long double>((j * k) % len) / static_cast<long double>(len);
          const long double c = std::cos(t), s = sign * std::sin(t);
          re += xr * c - xi * s;
          im += xr * s + xi * c;
        }
        if (inverse_) {
          re /= static_cast<long double>(len);
          im /= static_cast<long double>(len);
        }
        const int64_t to = ((o * m + k) * inner + i) * 2;
        y.store(to, static_cast<double>(re));
        y.store(to + 1, static_cast<double>(im));
      }
    }
  }
}

std::string Dft::c_support_code() const {
  // One line of L points in place (re, im). tc, ts: cos and sin of 2 pi k / L; sign -1 for
  // the forward transform. A power-of-two length runs the iterative radix-2 FFT; any other
  // runs the direct sum for the first m outputs, through tr and ti.
  return R"(__attribute__((unused)) static void kiln_dft_line(double *re, double *im, int64_t L,
    int64_t m, const double *tc, const double *ts, double sign, double *tr, double *ti) {
  if ((L & (L - 1)) == 0) {
    for (int64_t i = 1, j = 0; i < L; ++i) {
      int64_t bit = L >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) {
        const double r = re[i], s = im[i];
        re[i] = re[j]; im[i] = im[j]; re[j] = r; im[j] = s;
      }
    }
    for (int64_t len = 2; len <= L; len <<= 1) {
      const int64_t half = len >> 1, step = L / len;
      for (int64_t i = 0; i < L; i += len) {
        for (int64_t k = 0; k < half; ++k) {
          const double wr = tc[k * step], wi = sign * ts[k * step];
          double *ar = re + i + k, *ai = im + i + k;
          const double xr = ar[half] * wr - ai[half] * wi, xi = ar[half] * wi + ai[half] * wr;
          ar[half] = ar[0] - xr; ai[half] = ai[0] - xi;
          ar[0] += xr; ai[0] += xi;
        }
      }
    }
    return;
  }
  for (int64_t k = 0; k < m; ++k) {
    double sr = 0, si = 0;
    int64_t idx = 0;
    for (int64_t j = 0; j < L; ++j) {
      const double wr = tc[idx], wi = sign * ts[idx];
      sr += re[j] * wr - im[j] * wi;
      si += re[j] * wi + im[j] * wr;
      idx += k;
      if (idx >= L) idx -= L;
    }
    tr[k] = sr; ti[k] = si;
  }
  for (int64_t k = 0; k < m; ++k) { re[k] = tr[k]; im[k] = ti[k]; }
}
)";
}

std::string Dft::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const int rank = xt.rank();
  const int a = axis_for(rank);
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  const std::string as = std::to_string(a), r1 = std::to_string(rank - 1);
  std::string s = "{\n";
  s += "  const int64_t f_n = " + X + "->shape[" + as + "], f_comps = " + X + "->shape[" + r1 +
       "];\n";
  s += "  const int64_t f_len = " +
       (length_ > 0 ? sub.value(length_, "length") : std::string("f_n")) + ";\n";
  s += "  const int64_t f_m = " + Y + "->shape[" + as + "];\n";
  s += "  int64_t f_lines = 1, f_inner = 1;\n";
  s += "  for (int d = 0; d < " + r1 + "; ++d) if (d != " + as + ") f_lines *= " + X +
       "->shape[d];\n";
  s += "  for (int d = " + as + " + 1; d < " + r1 + "; ++d) f_inner *= " + X + "->shape[d];\n";
  s += "  const int64_t f_t0 = f_lines * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t f_t1 = f_lines * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (f_t1 > f_t0) {\n";
  s += "  " + c_workspace("double", "f_buf", "6 * f_len", "dft's line and twiddles");
  s += "  double *f_re = f_buf, *f_im = f_buf + f_len, *f_tr = f_buf + 2 * f_len,\n";
  s +=
      "         *f_ti = f_buf + 3 * f_len, *f_tc = f_buf + 4 * f_len, *f_ts = f_buf + 5 * f_len;\n";
  // Twiddles from the exact angle of each index (k / L of a turn), not by recurrence.
  s += "  for (int64_t k = 0; k < f_len; ++k) {\n";
  s += "    const double t = 6.283185307179586476925 * (double)k / (double)f_len;\n";
  s += "    f_tc[k] = cos(t); f_ts[k] = sin(t);\n";
  s += "  }\n";
  s += "  const " + T + " *f_x = (const " + T + " *)" + X + "->data;\n";
  s += "  " + T + " *f_y = (" + T + " *)" + Y + "->data;\n";
  s += "  const int64_t f_sa = " + X + "->strides[" + as + "], f_sc = " + X + "->strides[" + r1 +
       "];\n";
  s += "  const double f_scale = " + std::string(inverse_ ? "1.0 / (double)f_len" : "1.0") + ";\n";
  s += "  const int64_t f_used = f_n < f_len ? f_n : f_len;\n";
  s += "  for (int64_t t = f_t0; t < f_t1; ++t) {\n";
  s += "    int64_t rem = t, off = 0;\n";
  s += "    for (int d = " + std::to_string(rank - 2) + "; d >= 0; --d) {\n";
  s += "      if (d == " + as + ") continue;\n";
  s += "      off += rem % " + X + "->shape[d] * " + X + "->strides[d];\n";
  s += "      rem /= " + X + "->shape[d];\n";
  s += "    }\n";
  s += "    for (int64_t j = 0; j < f_len; ++j) {\n";
  s += "      f_re[j] = j < f_used ? (double)f_x[off + j * f_sa] : 0.0;\n";
  s += "      f_im[j] = j < f_used && f_comps == 2 ? (double)f_x[off + j * f_sa + f_sc] : 0.0;\n";
  s += "    }\n";
  s += "    kiln_dft_line(f_re, f_im, f_len, f_m, f_tc, f_ts, " +
       std::string(inverse_ ? "1.0" : "-1.0") + ", f_tr, f_ti);\n";
  s += "    " + T + " *f_o = f_y + ((t / f_inner) * f_m * f_inner + t % f_inner) * 2;\n";
  s += "    for (int64_t k = 0; k < f_m; ++k) {\n";
  s += "      f_o[k * f_inner * 2] = (" + T + ")(f_re[k] * f_scale);\n";
  s += "      f_o[k * f_inner * 2 + 1] = (" + T + ")(f_im[k] * f_scale);\n";
  s += "    }\n";
  s += "  }\n  }\n}\n";
  return s;
}

}  // namespace kiln
