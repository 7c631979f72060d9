/* kiln_softmax.h — a float32 softmax row in explicit 8-lane vectors. The loop form (one
 * vectorized pass per step, a scalar max and sum tail, a padded tail block through a
 * scalar loop) spent a fifth of a 197-long row (a ViT's attention) in its tails and read
 * the row back for the sum; here the tail is one vector padded with -inf, the sum adds up
 * as the exponentials are stored, and every step stays in vector registers.
 *
 * The exponential is kiln_math.h's kiln_exp_nonpos_f32 lane by lane (same reduction, same
 * polynomial, same 2^(n+64) * 2^-64 scaling), so values match it; only the order in which
 * the sum adds up differs. A NaN is skipped by the maximum and poisons the sum, as in the
 * scalar code and the reference.
 *
 * Probabilities under 2^-125 come out as 0, not as subnormals: a masked score (Swin's shifted
 * windows add -100) gave subnormal probabilities, and every multiply by one takes a microcode
 * assist on x86 cores, in this row and in the product with V after it: those matmuls ran 15x
 * slower than their unmasked twins. The sum they leave out is under len * 2^-125. */
#ifndef KILN_SOFTMAX_H
#define KILN_SOFTMAX_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#include <math.h>
#include <stdint.h>

typedef float kiln_sv8f __attribute__((vector_size(32)));
typedef float kiln_sv8fu __attribute__((vector_size(32), aligned(4)));
typedef int32_t kiln_sv8i __attribute__((vector_size(32)));
/* s + -0.0 is s for every s, so this folds to one broadcast. */
#define KILN_SV8_SPLAT(s) ((s) + -(kiln_sv8f){0})
/* Lanes of a where m is set, else of b (C has no vector ?: in clang 14). */
#define KILN_SV8_SELECT(m, a, b) \
  ((kiln_sv8f)(((kiln_sv8i)(m) & (kiln_sv8i)(a)) | (~(kiln_sv8i)(m) & (kiln_sv8i)(b))))

/* kiln_exp_nonpos_f32 on 8 lanes: e^x for x <= 0 or NaN. It is always inlined, so a
 * target without AVX passes no 32-byte vector across a call; gcc warns of that ABI all the
 * same. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
static inline __attribute__((always_inline)) kiln_sv8f kiln_sv8_exp_nonpos(kiln_sv8f x) {
  const kiln_sv8f lowest = KILN_SV8_SPLAT(-104.0f), shifter = KILN_SV8_SPLAT(12582912.0f);
  const kiln_sv8f xc = KILN_SV8_SELECT(x < lowest, lowest, x);
  const kiln_sv8f t = xc * 1.44269504088896341f + shifter;
  const kiln_sv8i n = (kiln_sv8i)t - (kiln_sv8i)shifter;
  const kiln_sv8f nf = t - shifter;
  kiln_sv8f r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  const kiln_sv8f r2 = r * r;
  const kiln_sv8f pa = 1.9875691500e-4f * r + 1.3981999507e-3f;
  const kiln_sv8f pb = 8.3334519073e-3f * r + 4.1665795894e-2f;
  const kiln_sv8f pc = 1.6666665459e-1f * r + 5.0000001201e-1f;
  const kiln_sv8f p = ((pa * r2 + pb) * r2 + pc) * r2 + r + 1.0f;
  const kiln_sv8f scale = (kiln_sv8f)((n + 127 + 64) << 23); /* 2^(n+64), n in [-150, 0] */
  return p * scale * 5.42101086242752217e-20f;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* e^d, or 0 where d < -87 (e^-87 is 1.6e-38, just above the smallest normal float), so that
 * no subnormal is formed on the way: the clamp keeps the exponential's own scaling normal. */
static inline __attribute__((always_inline)) kiln_sv8f kiln_sv8_exp_normal(kiln_sv8f d) {
  const kiln_sv8f cut = KILN_SV8_SPLAT(-87.0f);
  const kiln_sv8f e = kiln_sv8_exp_nonpos(KILN_SV8_SELECT(d < cut, cut, d));
  return KILN_SV8_SELECT(d < cut, KILN_SV8_SPLAT(0.0f), e);
}

/* row[l] = e^(src[l] - max) / sum over l < len. src may be row itself: each block is read
 * before it is written. With safe, a row of -inf throughout (its sum 0) becomes zeros, not
 * NaN (PyTorch's _safe_softmax). */
static inline __attribute__((always_inline)) void kiln_softmax_row_any_f32(const float* src,
                                                                           float* row, int64_t len,
                                                                           int safe) {
  const kiln_sv8f ninf = KILN_SV8_SPLAT(-INFINITY);
  kiln_sv8f m0 = ninf, m1 = ninf, last = ninf;
  int64_t l = 0;
  for (; l + 16 <= len; l += 16) {
    const kiln_sv8f a = *(const kiln_sv8fu*)(src + l), b = *(const kiln_sv8fu*)(src + l + 8);
    m0 = KILN_SV8_SELECT(a > m0, a, m0);
    m1 = KILN_SV8_SELECT(b > m1, b, m1);
  }
  if (l + 8 <= len) {
    const kiln_sv8f a = *(const kiln_sv8fu*)(src + l);
    m0 = KILN_SV8_SELECT(a > m0, a, m0);
    l += 8;
  }
  const int64_t full = l, tail = len - l;
  if (tail > 0) {
    for (int k = 0; k < tail; ++k) last[k] = src[full + k];
    m1 = KILN_SV8_SELECT(last > m1, last, m1);
  }
  m0 = KILN_SV8_SELECT(m1 > m0, m1, m0);
  float mx = -INFINITY;
  for (int k = 0; k < 8; ++k) mx = m0[k] > mx ? m0[k] : mx;
  if (mx == -INFINITY) mx = 0; /* all -inf: e^(-inf - 0) = 0, no NaN from inf - inf */
  const kiln_sv8f vm = KILN_SV8_SPLAT(mx);
  kiln_sv8f s0 = {0}, s1 = {0};
  for (l = 0; l + 16 <= full; l += 16) {
    const kiln_sv8f e0 = kiln_sv8_exp_normal(*(const kiln_sv8fu*)(src + l) - vm);
    const kiln_sv8f e1 = kiln_sv8_exp_normal(*(const kiln_sv8fu*)(src + l + 8) - vm);
    *(kiln_sv8fu*)(row + l) = e0;
    *(kiln_sv8fu*)(row + l + 8) = e1;
    s0 += e0;
    s1 += e1;
  }
  if (l < full) {
    const kiln_sv8f e0 = kiln_sv8_exp_normal(*(const kiln_sv8fu*)(src + l) - vm);
    *(kiln_sv8fu*)(row + l) = e0;
    s0 += e0;
  }
  if (tail > 0) {
    /* The padding's -inf lanes give e^-inf = 0 and add nothing. */
    const kiln_sv8f e = kiln_sv8_exp_normal(last - vm);
    for (int k = 0; k < tail; ++k) row[full + k] = e[k];
    s1 += e;
  }
  s0 += s1;
  float sum = 0;
  for (int k = 0; k < 8; ++k) sum += s0[k];
  const kiln_sv8f scale = KILN_SV8_SPLAT(safe && sum == 0 ? 0.0f : 1.0f / sum);
  /* e / sum < 2^-125 where e < 2^-125 * sum (a sum of 0 or NaN flushes nothing: 0 * inf
   * stays NaN, as in the reference). */
  const float cut = sum * 2.35098870e-38f;
  const kiln_sv8f vcut = KILN_SV8_SPLAT(cut), zero = KILN_SV8_SPLAT(0.0f);
  for (l = 0; l + 8 <= len; l += 8) {
    const kiln_sv8f e = *(kiln_sv8fu*)(row + l);
    *(kiln_sv8fu*)(row + l) = KILN_SV8_SELECT(e < vcut, zero, e) * scale;
  }
  for (; l < len; ++l) row[l] = (row[l] < cut ? 0.0f : row[l]) * scale[0];
}

KILN_HELPER void kiln_softmax_row_f32(const float* src, float* row, int64_t len) {
  kiln_softmax_row_any_f32(src, row, len, 0);
}

KILN_HELPER void kiln_softmax_row_safe_f32(const float* src, float* row, int64_t len) {
  kiln_softmax_row_any_f32(src, row, len, 1);
}

#endif /* KILN_SOFTMAX_H */
