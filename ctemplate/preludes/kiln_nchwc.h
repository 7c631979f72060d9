/* kiln_nchwc.h — float32 convolution kernels over the blocked channel layout NCHW8c: a
 * tensor (N, C, H, W) is held as (N, C/8, H, W, 8), the 8 channels of a block side by side
 * at each position. A vector then holds 8 channels of one position, so the kernels vectorize
 * over channels and never over a row (a 7 x 7 map's rows fill no vector in NCHW). The layout
 * pass (rewrite/layout_nchwc.cpp) puts MobileNet-style chains of pointwise and depthwise
 * convolutions into it and reorders once at the chain's edges (ops/conv_nchwc.h).
 *
 * Stores clamp to [lo, hi] lane by lane by compare and select, as kiln_clamp.h's kernels do:
 * a NaN fails both tests and stays. */
#ifndef KILN_NCHWC_H
#define KILN_NCHWC_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#include <stdint.h>

#define KILN_NCHWC_B 8
typedef float kiln_v8f __attribute__((vector_size(32)));
typedef float kiln_v8fu __attribute__((vector_size(32), aligned(4)));
typedef int32_t kiln_v8i __attribute__((vector_size(32)));
/* s + -0.0 is s for every s, so this folds to one broadcast (0.0 + s would add first). */
#define KILN_V8_SPLAT(s) ((s) + -(kiln_v8f){0})
#define KILN_V8_LOAD(p) (*(const kiln_v8fu*)(p))
#define KILN_V8_STORE(p, v) (*(kiln_v8fu*)(p) = (v))
/* A loop of a constant trip count unrolled whole. clang reads `GCC unroll N` over fewer than N
 * trips as "by N, with a run-time remainder", which kept a 4-position group's sums in memory;
 * `unroll(full)` is its spelling of every trip. */
#if defined(__clang__)
#define KILN_NCHWC_UNROLL _Pragma("clang loop unroll(full)")
#else
#define KILN_NCHWC_UNROLL _Pragma("GCC unroll 16")
#endif

static inline __attribute__((always_inline)) kiln_v8f kiln_v8_clamp(kiln_v8f x, float lo,
                                                                    float hi) {
  const kiln_v8f l = KILN_V8_SPLAT(lo), h = KILN_V8_SPLAT(hi);
  kiln_v8i m = (kiln_v8i)(x < l);
  x = (kiln_v8f)(((kiln_v8i)l & m) | ((kiln_v8i)x & ~m));
  m = (kiln_v8i)(x > h);
  return (kiln_v8f)(((kiln_v8i)h & m) | ((kiln_v8i)x & ~m));
}

/* A 1x1 convolution of one image (output blocks [mb0, mb1) at positions [p0, p1); x (C/8, hw,
 * 8), w (M/8, C, 8), bias (M) or null, y (M/8, hw, 8)), as kiln_support.conv_nchwc_pw_f32
 * states (module_abi.h): compiled once into kiln per vector ISA (runtime/support/conv_nchwc.c),
 * where gcc's code ran 1x1 layers 5-12% faster than clang's copy in each module. */
#define kiln_nchwc_pointwise (KILN_SUPPORT->conv_nchwc_pw_f32)

/* A direct convolution (any window, stride and padding) of one image, as
 * kiln_support.conv_nchwc_f32 states (module_abi.h): compiled once into kiln per vector ISA
 * (runtime/support/conv_nchwc.c), not into every module. */
#define kiln_nchwc_direct (KILN_SUPPORT->conv_nchwc_f32)

/* Depthwise: G consecutive output positions of one row, every tap in bounds (no checks).
 * xr: the input row of tap row 0 at the group's first position's column 0 tap; sx: input
 * floats between neighbouring output positions (stride x 8); wv: the block's taps. */
static inline __attribute__((always_inline)) void kiln_nchwc_dw_group(
    const int g, const float* restrict xr, int64_t row_step, int64_t sx, int kh, int kw,
    const int32_t* rows_ok, const float* restrict wv, kiln_v8f b, float* restrict yo, float lo,
    float hi, int clamps) {
  kiln_v8f acc[8];
  KILN_NCHWC_UNROLL for (int q = 0; q < g; ++q) acc[q] = b;
  for (int i = 0; i < kh; ++i) {
    if (!rows_ok[i]) continue;
    const float* xi = xr + i * row_step;
    for (int j = 0; j < kw; ++j) {
      const kiln_v8f wt = KILN_V8_LOAD(wv + (i * kw + j) * KILN_NCHWC_B);
      KILN_NCHWC_UNROLL for (int q = 0; q < g; ++q) acc[q] +=
          KILN_V8_LOAD(xi + q * sx + j * KILN_NCHWC_B) * wt;
    }
  }
  KILN_NCHWC_UNROLL for (int q = 0; q < g; ++q)
      KILN_V8_STORE(yo + q * KILN_NCHWC_B, clamps ? kiln_v8_clamp(acc[q], lo, hi) : acc[q]);
}

/* One function per group size, as for the pointwise blocks (a call each, never merged). */
#define KILN_NCHWC_DW_FN(G)                                                                     \
  static void kiln_nchwc_dw_##G(const float* xr, int64_t row_step, int64_t sx, int kh, int kw,  \
                                const int32_t* rows_ok, const float* wv, kiln_v8f b, float* yo, \
                                float lo, float hi, int clamps) {                               \
    kiln_nchwc_dw_group(G, xr, row_step, sx, kh, kw, rows_ok, wv, b, yo, lo, hi, clamps);       \
  }
KILN_NCHWC_DW_FN(8)
KILN_NCHWC_DW_FN(4)
KILN_NCHWC_DW_FN(1)
#undef KILN_NCHWC_DW_FN

/* A depthwise convolution of one image: channel blocks [cb0, cb1), output rows [oy0, oy1).
 * x (C/8, h, wd, 8), w (C/8, kh, kw, 8), bias (C) or null, y (C/8, oh, ow, 8). Interior
 * columns (every tap inside the row) go in groups of 8 and 4 without bounds checks; the
 * few at the edges test each tap. */
KILN_HELPER void kiln_nchwc_depthwise(const float* x, int64_t h, int64_t wd, const float* w,
                                      const float* bias, float* y, int64_t oh, int64_t ow, int kh,
                                      int kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                      int64_t cb0, int64_t cb1, int64_t oy0, int64_t oy1, float lo,
                                      float hi) {
  const int clamps = lo > -__builtin_inff() || hi < __builtin_inff();
  int32_t rows_ok[64];
  /* Interior output columns [ox_lo, ox_hi): ox*sw - pw >= 0 and ox*sw - pw + kw - 1 < wd. */
  int64_t ox_lo = (pw + sw - 1) / sw, ox_hi = wd - kw + pw >= 0 ? (wd - kw + pw) / sw + 1 : 0;
  if (ox_hi > ow) ox_hi = ow;
  if (ox_lo > ox_hi) ox_lo = ox_hi;
  const int64_t row = wd * KILN_NCHWC_B, sx = sw * KILN_NCHWC_B;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const float* xc = x + cb * h * row;
    const float* wv = w + cb * kh * kw * KILN_NCHWC_B;
    const kiln_v8f b = bias ? KILN_V8_LOAD(bias + cb * KILN_NCHWC_B) : (kiln_v8f){0};
    float* yc = y + cb * oh * ow * KILN_NCHWC_B;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      const int64_t iy0 = oy * sh - ph;
      for (int i = 0; i < kh && i < 64; ++i) rows_ok[i] = iy0 + i >= 0 && iy0 + i < h;
      /* Row pointer of tap row 0 (may lie outside x; only rows_ok rows are read). */
      const float* xr = xc + iy0 * row;
      float* yr = yc + oy * ow * KILN_NCHWC_B;
      int64_t ox = 0;
      for (; ox < ow; ++ox) {
        if (ox >= ox_lo && ox < ox_hi) {
          const float* xs = xr + (ox * sw - pw) * KILN_NCHWC_B;
          if (ox_hi - ox >= 8) {
            kiln_nchwc_dw_8(xs, row, sx, kh, kw, rows_ok, wv, b, yr + ox * KILN_NCHWC_B, lo, hi,
                            clamps);
            ox += 7;
            continue;
          }
          if (ox_hi - ox >= 4) {
            kiln_nchwc_dw_4(xs, row, sx, kh, kw, rows_ok, wv, b, yr + ox * KILN_NCHWC_B, lo, hi,
                            clamps);
            ox += 3;
            continue;
          }
          kiln_nchwc_dw_1(xs, row, sx, kh, kw, rows_ok, wv, b, yr + ox * KILN_NCHWC_B, lo, hi,
                          clamps);
          continue;
        }
        /* The taps inside the row [j0, j1), each tap row summed on its own and then added:
         * one running sum made every edge position a chain of kh x kw dependent
         * multiply-adds (36 cycles for 3 x 3, 100 for 5 x 5). */
        const int64_t c0 = ox * sw - pw;
        const int j0 = c0 < 0 ? (int)-c0 : 0, j1 = c0 + kw > wd ? (int)(wd - c0) : kw;
        kiln_v8f acc = b;
        for (int i = 0; i < kh; ++i) {
          if (!rows_ok[i] || j0 >= j1) continue;
          const float* xi = xr + i * row + c0 * KILN_NCHWC_B;
          const float* wi = wv + i * kw * KILN_NCHWC_B;
          kiln_v8f r = KILN_V8_LOAD(xi + j0 * KILN_NCHWC_B) * KILN_V8_LOAD(wi + j0 * KILN_NCHWC_B);
          for (int j = j0 + 1; j < j1; ++j)
            r += KILN_V8_LOAD(xi + j * KILN_NCHWC_B) * KILN_V8_LOAD(wi + j * KILN_NCHWC_B);
          acc += r;
        }
        KILN_V8_STORE(yr + ox * KILN_NCHWC_B, clamps ? kiln_v8_clamp(acc, lo, hi) : acc);
      }
    }
  }
}

/* Max pooling of one image: channel blocks [cb0, cb1), output rows [oy0, oy1). x (C/8, h, wd,
 * 8), y (C/8, oh, ow, 8). Padding is skipped, not read as -inf; a NaN wins and stays, as in
 * the NCHW pool (v > m or v is NaN).
 * A window's max is taken with one select per tap (v > m: a maxps), which skips NaN, and its
 * sum alongside: NaN when a tap is NaN (or +inf meets -inf), and only then is the window
 * taken again with the NaN test in every tap. Four operations per tap were half the speed
 * (ResNet's 3 x 3 pool on one core, 218 against 116 us). */
KILN_HELPER kiln_v8f kiln_nchwc_window_max(const float* xc, int64_t row, int64_t i0, int64_t i1,
                                           int64_t j0, int64_t j1) {
  kiln_v8f m = KILN_V8_SPLAT(-__builtin_inff()), sum = KILN_V8_SPLAT(0.0f);
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      const kiln_v8f v = KILN_V8_LOAD(xc + i * row + j * KILN_NCHWC_B);
      const kiln_v8i gt = (kiln_v8i)(v > m);
      m = (kiln_v8f)(((kiln_v8i)v & gt) | ((kiln_v8i)m & ~gt));
      sum += v;
    }
  const kiln_v8i nan = (kiln_v8i)(sum != sum);
  if (__builtin_expect((nan[0] | nan[1] | nan[2] | nan[3] | nan[4] | nan[5] | nan[6] | nan[7]) != 0,
                       0)) {
    m = KILN_V8_SPLAT(-__builtin_inff());
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        const kiln_v8f v = KILN_V8_LOAD(xc + i * row + j * KILN_NCHWC_B);
        const kiln_v8i take = (kiln_v8i)(v > m) | (kiln_v8i)(v != v);
        m = (kiln_v8f)(((kiln_v8i)v & take) | ((kiln_v8i)m & ~take));
      }
  }
  return m;
}

KILN_HELPER void kiln_nchwc_max_pool(const float* x, int64_t h, int64_t wd, float* y, int64_t oh,
                                     int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                     int64_t ph, int64_t pw, int64_t cb0, int64_t cb1, int64_t oy0,
                                     int64_t oy1) {
  const int64_t row = wd * KILN_NCHWC_B;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const float* xc = x + cb * h * row;
    float* yc = y + cb * oh * ow * KILN_NCHWC_B;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      int64_t i0 = oy * sh - ph, i1 = i0 + kh;
      if (i0 < 0) i0 = 0;
      if (i1 > h) i1 = h;
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t j0 = ox * sw - pw, j1 = j0 + kw;
        if (j0 < 0) j0 = 0;
        if (j1 > wd) j1 = wd;
        KILN_V8_STORE(yc + (oy * ow + ox) * KILN_NCHWC_B,
                      kiln_nchwc_window_max(xc, row, i0, i1, j0, j1));
      }
    }
  }
}

#endif /* KILN_NCHWC_H */
