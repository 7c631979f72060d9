/* kiln_norm.h — a float32 layer-norm row in explicit 8-lane vectors: the layer_norm op's
 * slice along its trailing axes. Written out because the loop form (16 lane accumulators
 * unrolled for the SLP vectorizer) stayed scalar inside a module: clang 14 left its 16 sums
 * as scalar adds there, and a 128 x 256 norm took 46 us against 14 for these vectors.
 *
 * Two passes, as the graph it replaces: the mean, then the mean square deviation (summing
 * squares in the same pass as the values loses the variance to cancellation when the mean
 * is large against the spread). A NaN or an infinity poisons the row's mean, as there. */
#ifndef KILN_NORM_H
#define KILN_NORM_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#include <math.h>
#include <stdint.h>

typedef float kiln_nv8f __attribute__((vector_size(32)));
typedef float kiln_nv8fu __attribute__((vector_size(32), aligned(4)));
#define KILN_NV8_LOAD(p) (*(const kiln_nv8fu*)(p))
#define KILN_NV8_SPLAT(s) ((s) + -(kiln_nv8f){0})

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
static inline __attribute__((always_inline)) float kiln_nv8_sum(kiln_nv8f v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* row[l] = (src[l] - mean) / sqrt(mean square deviation + eps) over l < len. src may be
 * row itself: each block is read before it is written. */
KILN_HELPER void kiln_layer_norm_row_f32(const float* src, float* row, int64_t len, float eps) {
  kiln_nv8f a = KILN_NV8_SPLAT(0.0f), b = a;
  int64_t l = 0;
  for (; l + 16 <= len; l += 16) {
    a += KILN_NV8_LOAD(src + l);
    b += KILN_NV8_LOAD(src + l + 8);
  }
  for (; l + 8 <= len; l += 8) a += KILN_NV8_LOAD(src + l);
  float sum = kiln_nv8_sum(a + b);
  for (; l < len; ++l) sum += src[l];
  const float mean = sum / (float)len;
  const kiln_nv8f m = KILN_NV8_SPLAT(mean);
  a = KILN_NV8_SPLAT(0.0f);
  b = a;
  for (l = 0; l + 16 <= len; l += 16) {
    const kiln_nv8f d0 = KILN_NV8_LOAD(src + l) - m, d1 = KILN_NV8_LOAD(src + l + 8) - m;
    a += d0 * d0;
    b += d1 * d1;
  }
  for (; l + 8 <= len; l += 8) {
    const kiln_nv8f d = KILN_NV8_LOAD(src + l) - m;
    a += d * d;
  }
  float sq = kiln_nv8_sum(a + b);
  for (; l < len; ++l) sq += (src[l] - mean) * (src[l] - mean);
  const float inv = 1.0f / sqrtf(sq / (float)len + eps);
  const kiln_nv8f vi = KILN_NV8_SPLAT(inv);
  for (l = 0; l + 8 <= len; l += 8) *(kiln_nv8fu*)(row + l) = (KILN_NV8_LOAD(src + l) - m) * vi;
  for (; l < len; ++l) row[l] = (src[l] - mean) * inv;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif /* KILN_NORM_H */
