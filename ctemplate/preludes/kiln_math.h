/* kiln_math.h — kiln's own transcendentals: branch-free polynomial approximations
 * built from integer bit tricks, selects and fused multiply-adds only, so loops that call
 * them vectorize under clang, and under gcc with -fno-trapping-math as kiln compiles modules
 * (scalar libm calls do not). Accurate to a few ulp over the whole float range
 * (tests/math_prelude_test.c measures it against libm), with libm's NaN, infinity,
 * signed-zero, overflow and subnormal behaviour.
 *
 * Method: exp reduces x = n ln2 + r (two-constant Cody-Waite) and scales a degree-6
 * polynomial by 2^n in two steps, so subnormal results and overflow to inf come out right
 * (where the argument is never positive, exp_nonpos and sigmoid scale by 2^(n+64), one
 * normal-range factor, and take the 2^64 back out exactly);
 * log splits x = m 2^e with m in [sqrt(1/2), sqrt(2)) and evaluates a degree-9 polynomial in
 * m - 1; log1p and expm1 correct log(1+x) and exp(x)-1 by the rounding of 1+x (Goldberg,
 * Kahan); tanh uses an odd polynomial below 0.625 and 1 - 2/(e^2x + 1) above; erf uses
 * x P(x^2) below 0.921875 and 1 - e^(-x^2) Q(1/(1 + x/2)) above (least-squares fits);
 * gelu takes its negative tail from that erfc form, so it keeps relative accuracy where
 * 1 + erf would cancel. float64 has every one of them by the same methods (exp: Taylor to
 * degree 13; log: the atanh series in s = f/(2+f); tanh from expm1; erf: degree 11 in x^2
 * and 22 in 1/(1 + x/2), fitted with mpmath's Chebyshev fit). */
#ifndef KILN_MATH_H
#define KILN_MATH_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#ifndef __CUDACC_RTC__ /* NVRTC has no C library: kiln_cuda.cuh stands in */
#include <math.h>
#include <stdint.h>
#endif

KILN_HELPER float kiln_bits_to_f32(int32_t i) {
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}
KILN_HELPER int32_t kiln_f32_to_bits(float f) {
  int32_t i;
  __builtin_memcpy(&i, &f, sizeof i);
  return i;
}
KILN_HELPER float kiln_pow2i_f32(int32_t n) { /* 2^n for n in [-126, 127] */
  return kiln_bits_to_f32((int32_t)((uint32_t)(n + 127) << 23));
}

/* e^x = p 2^n for x in [-104, 89] (NaN passes through): n = round(x / ln2) by the
 * 1.5 * 2^23 shifter (no float-to-int conversion of NaN), r = x - n ln2 in two steps, and
 * p = e^r by a degree-6 polynomial in Estrin's scheme, whose three fma levels (Horner's
 * take five) matter because exp-heavy loops (silu, softmax) are bound by this chain. */
KILN_HELPER float kiln_exp_reduce_f32(float x, int32_t* n) {
  const float shifter = 12582912.0f;
  float t = x * 1.44269504088896341f + shifter;
  *n = kiln_f32_to_bits(t) - kiln_f32_to_bits(shifter);
  float nf = t - shifter;
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float r2 = r * r;
  float pa = 1.9875691500e-4f * r + 1.3981999507e-3f;
  float pb = 8.3334519073e-3f * r + 4.1665795894e-2f;
  float pc = 1.6666665459e-1f * r + 5.0000001201e-1f;
  float p = (pa * r2 + pb) * r2 + pc;
  return p * r2 + r + 1.0f;
}

KILN_HELPER float kiln_expf(float x) {
  /* Clamped (NaN passes through the compares) so n stays in [-150, 128]. */
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  int32_t n;
  float p = kiln_exp_reduce_f32(xc, &n);
  /* 2^n as two factors in the normal range: subnormal results and inf come out of the
   * final products with one rounding. */
  int32_t n1 = n >> 1;
  float y = p * kiln_pow2i_f32(n1) * kiln_pow2i_f32(n - n1);
  return x != x ? x : y;
}

/* e^x for x <= 0 or NaN (softmax's x - max): nothing overflows, so no upper clamp and no
 * NaN select (NaN flows through the polynomial); 2^n, n in [-150, 0], is taken as
 * 2^(n+64), exact, times 2^-64, so a subnormal result rounds once. */
KILN_HELPER float kiln_exp_nonpos_f32(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  int32_t n;
  float p = kiln_exp_reduce_f32(xc, &n);
  return p * kiln_pow2i_f32(n + 64) * 5.42101086242752217e-20f;
}

KILN_HELPER float kiln_logf(float x) {
  /* Subnormals are scaled into the normal range first. */
  const int sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x;
  int32_t bits = kiln_f32_to_bits(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126 - (sub ? 23 : 0);
  float m = kiln_bits_to_f32((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
  const int low = m < 0.707106781186547524f;
  e = low ? e - 1 : e;
  m = low ? m + m - 1.0f : m - 1.0f;
  float ef = (float)e;
  float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m + -1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m + -1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m + -1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m + -2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = m * z * p;
  y = y + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  y = m + y + ef * 0.693359375f;
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  y = x == INFINITY ? x : y;
  return x != x ? x : y;
}

KILN_HELPER float kiln_log1pf(float x) {
  /* log(u) * x / (u - 1) cancels the rounding of u = 1 + x. */
  float u = 1.0f + x;
  float d = u - 1.0f;
  float y = kiln_logf(u) * (x / (d == 0.0f ? 1.0f : d));
  y = d == 0.0f ? x : y;
  return x == INFINITY ? x : y;
}

KILN_HELPER float kiln_expm1f(float x) {
  /* (u - 1) * x / log(u) cancels the rounding of u = e^x. */
  float u = kiln_expf(x);
  float d = u - 1.0f;
  float l = kiln_logf(u);
  float y = d * (x / (l == 0.0f ? 1.0f : l));
  y = d == 0.0f ? x : y;
  y = d == -1.0f ? -1.0f : y;
  y = u == INFINITY ? u : y;
  return x != x ? x : y;
}

KILN_HELPER float kiln_tanhf(float x) {
  float a = fabsf(x);
  float z = x * x;
  float p = -5.798099802141327e-3f;
  p = p * z + 2.0720281118520097e-2f;
  p = p * z + -5.376380071748685e-2f;
  p = p * z + 1.3331718583139307e-1f;
  p = p * z + -3.333329151135639e-1f;
  float small = x + x * z * p;
  /* 1 - 2/(e^2a + 1): e^2a overflows to inf for large a, giving exactly 1. */
  float big = 1.0f - 2.0f / (kiln_expf(a + a) + 1.0f);
  /* NaN takes the big path (exp keeps it); the sign is x's, -0 included. */
  return copysignf(a < 0.625f ? small : big, x);
}

KILN_HELPER float kiln_sigmoidf(float x) {
  /* e = e^a for a = -|x| <= 0 never overflows: 1/(1+e) for x >= 0, e/(1+e) below. e is
   * carried as q = e 2^64, so 2^n (n in [-150, 0], shifted to [-86, 64]) is one factor in
   * the normal range; 2^64/(2^64+q) and q/(2^64+q) round exactly as 1/(1+e) and e/(1+e)
   * would, subnormal results included, since the scaling by 2^64 is exact. A silu or swish
   * epilogue spends most of its time here, hence no general exp (two-factor 2^n, overflow
   * clamp, NaN select). */
  float a = -fabsf(x);
  a = a < -104.0f ? -104.0f : a; /* NaN passes through */
  int32_t n;
  float q = kiln_exp_reduce_f32(a, &n) * kiln_pow2i_f32(n + 64);
  const float two64 = 18446744073709551616.0f;
  float y = (x >= 0.0f ? two64 : q) / (two64 + q);
  return x != x ? x : y;
}

/* erf(a) for 0 <= a < 0.921875: a P(a^2). */
KILN_HELPER float kiln_erf_small_f32(float a) {
  float z = a * a;
  float p = 8.47739271450332e-05f;
  p = p * z + -8.168491473743063e-4f;
  p = p * z + 5.203344340622202e-3f;
  p = p * z + -2.686034784998337e-2f;
  p = p * z + 1.1283712995101723e-1f;
  p = p * z + -3.7612634904533926e-1f;
  p = p * z + 1.1283791667626708f;
  return a * p;
}

/* erfc(a) for a >= 0.921875: e^(-a^2) Q(1/(1 + a/2)), with a^2 = hi + lo given exactly
 * (split with an fma) so the exponent's rounding does not grow with a. */
KILN_HELPER float kiln_erfc_tail_f32(float a, float hi, float lo) {
  float t = 1.0f / (1.0f + 0.5f * a);
  float q = -6.384231001981303e-2f;
  q = q * t + 3.131222593846346e-1f;
  q = q * t + -5.51530430071479e-1f;
  q = q * t + 3.538962491124209e-1f;
  q = q * t + -7.926210407466755e-2f;
  q = q * t + 2.2519605904846218e-1f;
  q = q * t + 2.3715477240369304e-1f;
  q = q * t + 2.833128956203074e-1f;
  q = q * t + 2.8200649988209936e-1f;
  q = q * t + 2.803751257886256e-06f;
  return kiln_exp_nonpos_f32(-hi) * (1.0f - lo) * q;
}

/* erf(a) for 0.921875 <= a <= 4: 1 - R(a - 0.921875), R a (6, 6) rational fitted to erfc on
 * that range (absolute error 6.5e-9 in exact arithmetic, so the sum stays within 1.1 ulp in
 * float). Here an absolute error is enough, as erf is at least 0.8; the exponential and the
 * second division of the erfc form cost twice the time in a vector loop (a GELU epilogue
 * spent 2 ns per element on it, one Zen 3 core). Past 3.92, erf rounds to 1. */
KILN_HELPER float kiln_erf_large_f32(float a) {
  float u = a - 0.921875f;
  float p = 0.0003685961499536039f;
  p = p * u + -0.006113862666477093f;
  p = p * u + 0.04263145560931102f;
  p = p * u + -0.16014650660277358f;
  p = p * u + 0.3422121945268626f;
  p = p * u + -0.3948216599256952f;
  p = p * u + 0.19232628898822274f;
  float q = 0.025510446176096557f;
  q = q * u + 0.03557585263579583f;
  q = q * u + 0.15449971537538648f;
  q = q * u + 0.22560292409287022f;
  q = q * u + 0.6088792445334366f;
  q = q * u + 0.45513305174617125f;
  q = q * u + 1.0f;
  return 1.0f - p / q;
}

KILN_HELPER float kiln_erff(float x) {
  float a = fabsf(x);
  float ac = a > 4.0f ? 4.0f : a; /* the rational is fitted up to 4; erf(4) rounds to 1 */
  float y = a < 0.921875f ? kiln_erf_small_f32(a) : kiln_erf_large_f32(ac);
  y = copysignf(y, x);
  return x != x ? x : y;
}

KILN_HELPER float kiln_geluf(float x) {
  /* 0.5 x (1 + erf(x / sqrt 2)); for x < -1.3 the bracket is erfc(-x / sqrt 2), taken
   * from the tail form directly so it keeps its relative accuracy. */
  float u = x * 0.707106781186547524f;
  float a = fabsf(u);
  /* u^2 = x^2 / 2 exactly as hi + lo: rounding u first would cost e^(a^2 2^-24) in the tail. */
  float xc = fabsf(x) > 15.5f ? 15.5f : fabsf(x);
  float hi = xc * xc;
  float lo = 0.5f * __builtin_fmaf(xc, xc, -hi);
  hi = 0.5f * hi;
  float ac = a > 11.0f ? 11.0f : a;
  float tail = kiln_erfc_tail_f32(ac < 0.921875f ? 0.921875f : ac, hi, lo);
  float e = a < 0.921875f ? kiln_erf_small_f32(a) : 1.0f - tail;
  float bracket = u < 0.0f ? (a < 0.921875f ? 1.0f - e : tail) : 1.0f + e;
  float y = 0.5f * x * bracket;
  y = x == -INFINITY ? -0.0f : y; /* the limit, not -inf * 0 */
  return x != x ? x : y;
}

KILN_HELPER float kiln_softplusf(float x) {
  /* max(x, 0) + log1p(e^-|x|): no overflow for large |x|. */
  float m = x > 0.0f ? x : 0.0f;
  float y = m + kiln_log1pf(kiln_expf(-fabsf(x)));
  return x != x ? x : y;
}

/* pow with an exponent of 2 or 3 (GELU-tanh's cube, a variance's square) as products, as
 * simplify spells a constant exponent. An exponent that is a weight is the same for a whole
 * loop, so the compiler versions the loop on it and the product loop vectorizes; any other
 * exponent is libm's. */
KILN_HELPER float kiln_powf(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 3.0f) return x * x * x;
  return powf(x, e);
}

/* float64: the same methods with double's reduction constants and longer polynomials. */
/* x / s given r = RN(1/s), for s and r normal: q = RN(x r), then q corrected by its residual
 * x - q s, which a fused multiply-add computes exactly (Markstein). The result is x / s's own
 * wherever |x| >= 2^-100 and the quotient is finite (checked bit for bit over every float x,
 * for scales from 2^-24 to 2^14); for smaller x the residual underflows and the result is
 * within an ulp. An infinite x, or a product beyond the range, makes the residual NaN, and
 * q, right or as saturated, stands. Rounded to an integer, both agree for every x. */
KILN_HELPER float kiln_div_rcpf(float x, float s, float r) {
  float q = x * r;
  float c = fmaf(fmaf(-q, s, x), r, q);
  return copysignf(c == c ? c : q, q); /* a zero residual added to -0 would give +0 */
}

KILN_HELPER double kiln_bits_to_f64(int64_t i) {
  double f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}
KILN_HELPER int64_t kiln_f64_to_bits(double f) {
  int64_t i;
  __builtin_memcpy(&i, &f, sizeof i);
  return i;
}
KILN_HELPER double kiln_pow2i_f64(int64_t n) { /* 2^n for n in [-1022, 1023] */
  return kiln_bits_to_f64((int64_t)((uint64_t)(n + 1023) << 52));
}

KILN_HELPER double kiln_exp(double x) {
  /* Clamped (NaN passes through) so n stays in [-1076, 1024]. */
  double xc = x > 710.0 ? 710.0 : x;
  xc = xc < -746.0 ? -746.0 : xc;
  const double shifter = 6755399441055744.0; /* 1.5 * 2^52 */
  double t = xc * 1.4426950408889634074 + shifter;
  int64_t n = kiln_f64_to_bits(t) - kiln_f64_to_bits(shifter);
  double nf = t - shifter;
  /* ln 2 split so that nf * hi is exact for |n| < 2^11. */
  double r = xc - nf * 6.93147180369123816490e-01;
  r = r - nf * 1.90821492927058770002e-10;
  /* e^r, |r| <= ln2/2: Taylor to r^13 (truncation below 1e-17 relative). */
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r * r + r + 1.0;
  int64_t n1 = n >> 1;
  double y = p * kiln_pow2i_f64(n1) * kiln_pow2i_f64(n - n1);
  return x != x ? x : y;
}

/* The float64 twin of kiln_exp_nonpos_f32 is plain exp, so softmax's code names both
 * widths alike. */
KILN_HELPER double kiln_exp_nonpos(double x) { return kiln_exp(x); }

KILN_HELPER double kiln_log(double x) {
  const int sub = x < 2.2250738585072014e-308;
  double xs = sub ? x * 18014398509481984.0 : x; /* 2^54 */
  int64_t bits = kiln_f64_to_bits(xs);
  int64_t e = ((bits >> 52) & 0x7ff) - 1022 - (sub ? 54 : 0);
  double m = kiln_bits_to_f64((bits & 0x000fffffffffffffLL) | 0x3fe0000000000000LL); /* [0.5, 1) */
  const int low = m < 0.70710678118654752440;
  e = low ? e - 1 : e;
  double f = (low ? m + m : m) - 1.0; /* exact: m in [sqrt(1/2), sqrt(2)) */
  /* log(1+f) = f - f^2/2 + s (f^2/2 + R), s = f/(2+f), R = sum_k 2 s^2k / (2k+1). */
  double s = f / (2.0 + f);
  double z = s * s;
  double R = 2.0 / 23.0;
  R = R * z + 2.0 / 21.0;
  R = R * z + 2.0 / 19.0;
  R = R * z + 2.0 / 17.0;
  R = R * z + 2.0 / 15.0;
  R = R * z + 2.0 / 13.0;
  R = R * z + 2.0 / 11.0;
  R = R * z + 2.0 / 9.0;
  R = R * z + 2.0 / 7.0;
  R = R * z + 2.0 / 5.0;
  R = R * z + 2.0 / 3.0;
  R = R * z;
  double hfsq = 0.5 * f * f;
  double ef = (double)e;
  double y = ef * 6.93147180369123816490e-01 +
             (f - (hfsq - (s * (hfsq + R) + ef * 1.90821492927058770002e-10)));
  y = x == 0.0 ? -INFINITY : y;
  y = x < 0.0 ? NAN : y;
  y = x == INFINITY ? x : y;
  return x != x ? x : y;
}

KILN_HELPER double kiln_log1p(double x) {
  double u = 1.0 + x;
  double d = u - 1.0;
  double y = kiln_log(u) * (x / (d == 0.0 ? 1.0 : d));
  y = d == 0.0 ? x : y;
  return x == INFINITY ? x : y;
}

KILN_HELPER double kiln_expm1(double x) {
  double u = kiln_exp(x);
  double d = u - 1.0;
  double l = kiln_log(u);
  double y = d * (x / (l == 0.0 ? 1.0 : l));
  y = d == 0.0 ? x : y;
  y = d == -1.0 ? -1.0 : y;
  y = u == INFINITY ? u : y;
  return x != x ? x : y;
}

KILN_HELPER double kiln_tanh(double x) {
  /* t / (t + 2), t = e^2a - 1: relative accuracy near 0 comes from expm1's; above 22,
   * tanh rounds to 1 (and t would overflow). */
  double a = fabs(x);
  double t = kiln_expm1(a + a);
  double y = t / (t + 2.0);
  y = a > 22.0 ? 1.0 : y;
  return copysign(y, x);
}

KILN_HELPER double kiln_sigmoid(double x) {
  double e = kiln_exp(-fabs(x));
  double y = (x >= 0.0 ? 1.0 : e) / (1.0 + e);
  return x != x ? x : y;
}

/* erf(a) for 0 <= a < 0.921875: a P(a^2) (degree 11 in a^2, 2e-18 relative). */
KILN_HELPER double kiln_erf_small_f64(double a) {
  double z = a * a;
  double p = -8.3423289016823424e-10;
  p = p * z + 1.3985356985352318e-8;
  p = p * z + -1.6264102432769319e-7;
  p = p * z + 1.6454012531282942e-6;
  p = p * z + -1.4925221170901272e-5;
  p = p * z + 0.0001205531775246998;
  p = p * z + -0.00085483266667952957;
  p = p * z + 0.0052239776201379607;
  p = p * z + -0.026866170644665226;
  p = p * z + 0.11283791670953008;
  p = p * z + -0.37612638903183715;
  p = p * z + 1.1283791670955126;
  return a * p;
}

/* erfc(a) = e^(-a^2) Q(1/(1 + a/2)) for 0.921875 <= a <= 27.4: Q, of degree 22 (1e-17
 * relative, fitted out to where erfc underflows, so gelu's tail keeps its accuracy). */
KILN_HELPER double kiln_erfc_q_f64(double a) {
  double t = 1.0 / (1.0 + 0.5 * a);
  double q = 0.20816923973236414;
  q = q * t + -1.6409430128100717;
  q = q * t + 5.8583590381477536;
  q = q * t + -12.361230986183038;
  q = q * t + 16.74220286971941;
  q = q * t + -14.508729640317806;
  q = q * t + 6.9690328409191144;
  q = q * t + -0.1099942912706831;
  q = q * t + -2.4251775974677385;
  q = q * t + 2.0053741926265959;
  q = q * t + -1.1202007833308212;
  q = q * t + 0.48309095395270072;
  q = q * t + -0.077497352628914991;
  q = q * t + 0.025815855712225157;
  q = q * t + -0.058906104925467199;
  q = q * t + -0.055951004006035765;
  q = q * t + -0.0044995510981977435;
  q = q * t + 0.083755077689438025;
  q = q * t + 0.17630869196091865;
  q = q * t + 0.24683297006583718;
  q = q * t + 0.2820947908505951;
  q = q * t + 0.28209479179302174;
  q = q * t + -1.827625695106196e-13;
  return q;
}

KILN_HELPER double kiln_erf(double x) {
  double a = fabs(x);
  double ac = a > 6.0 ? 6.0 : a; /* erfc(6) = 2e-17: erf rounds to 1 from here on */
  double hi = ac * ac;
  double lo = __builtin_fma(ac, ac, -hi);
  /* e^(-a^2) = e^(-hi) (1 - lo), with a^2 = hi + lo exactly. */
  double q = kiln_erfc_q_f64(ac);
  double tail = kiln_exp(-hi) * __builtin_fma(-q, lo, q);
  double y = a < 0.921875 ? kiln_erf_small_f64(a) : 1.0 - tail;
  y = copysign(y, x);
  return x != x ? x : y;
}

KILN_HELPER double kiln_gelu(double x) {
  /* As kiln_geluf: the negative tail is erfc(-x / sqrt 2) itself, out to where it underflows
   * (|x| = 38.7 puts e^(-x^2/2) below the smallest subnormal, so the clamp yields exactly 0). */
  double u = x * 0.70710678118654752440;
  double a = fabs(u);
  double xc = fabs(x) > 38.7 ? 38.7 : fabs(x);
  double hi = xc * xc;
  double lo = 0.5 * __builtin_fma(xc, xc, -hi);
  hi = 0.5 * hi;
  double ac = a > 27.4 ? 27.4 : a;
  double q = kiln_erfc_q_f64(ac < 0.921875 ? 0.921875 : ac);
  double g = __builtin_fma(-q, lo, q); /* q (1 - lo) in one rounding */
  double ex = kiln_exp(-hi);
  double tail = ex * g;
  double e = a < 0.921875 ? kiln_erf_small_f64(a) : 1.0 - tail;
  /* The negative tail scales by 0.5 x before the factor that may be subnormal, so the one
   * rounding into the subnormal range is the last. */
  double y = u < 0.0 && a >= 0.921875 ? ex * (g * (0.5 * x)) : 0.5 * x * (u < 0.0 ? 1.0 - e : 1.0 + e);
  y = x == -INFINITY ? -0.0 : y; /* the limit, not -inf * 0 */
  return x != x ? x : y;
}

KILN_HELPER double kiln_softplus(double x) {
  double y = (x > 0 ? x : 0.0) + kiln_log1p(kiln_exp(-fabs(x)));
  return x != x ? x : y;
}

KILN_HELPER double kiln_div_rcp(double x, double s, double r) { /* as kiln_div_rcpf */
  double q = x * r;
  double c = fma(fma(-q, s, x), r, q);
  return copysign(c == c ? c : q, q);
}

KILN_HELPER double kiln_pow(double x, double e) {
  if (e == 2.0) return x * x;
  if (e == 3.0) return x * x * x;
  return pow(x, e);
}

#endif /* KILN_MATH_H */
