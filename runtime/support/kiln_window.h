/* kiln_window.h — sliding-window kernels for convolution and pooling (2-D; 1-D runs as
 * H = 1). Geometry (output size, pads) is computed by the compiler and passed in. */
#ifndef KILN_WINDOW_H
#define KILN_WINDOW_H
#include <stdint.h>

#ifndef KILN_WINDOW_FN
#define KILN_WINDOW_FN static __attribute__((unused, noinline))
#endif

/* kiln_window is defined in module_abi.h, which comes first (in a module, and in kiln). */
#ifdef KILN_MODULE
/* In a generated module the host supplies these (kiln_support in module_abi.h). */
#define kiln_im2col_f32 (KILN_SUPPORT->im2col_f32)
#define kiln_im2col_f64 (KILN_SUPPORT->im2col_f64)
#define kiln_pool_f32 (KILN_SUPPORT->pool_f32)
#define kiln_pool_f64 (KILN_SUPPORT->pool_f64)
#define kiln_conv_tile_f32 (KILN_SUPPORT->conv_tile_f32)
#define kiln_conv_tile_f64 (KILN_SUPPORT->conv_tile_f64)
#else

/* im2col for one image group: col[(c*kh + i)*kw + j][oy*ow + ox] = x[c][y][x] or 0 in the
 * padding; rows of col are ldc elements apart, so several images can sit side by side in
 * one matrix. x is addressed with element strides (sc, sy, sx): any input layout works. */
#define KILN_IM2COL(T, S)                                                                    \
  KILN_WINDOW_FN void kiln_im2col_##S(const T *x, int64_t channels, int64_t sc, int64_t sy, \
                                      int64_t sx, const kiln_window *g, T *col,             \
                                      int64_t ldc) {                                         \
    for (int64_t c = 0; c < channels; ++c)                                                   \
      for (int64_t i = 0; i < g->kh; ++i)                                                    \
        for (int64_t j = 0; j < g->kw; ++j) {                                                \
          T *row = col + ((c * g->kh + i) * g->kw + j) * ldc;                                \
          for (int64_t oy = 0; oy < g->oh; ++oy) {                                           \
            const int64_t y = oy * g->sh - g->ph + i * g->dh;                                \
            T *dst = row + oy * g->ow;                                                       \
            if (y < 0 || y >= g->h) {                                                        \
              for (int64_t ox = 0; ox < g->ow; ++ox) dst[ox] = 0;                            \
              continue;                                                                      \
            }                                                                                \
            const T *src = x + c * sc + y * sy;                                              \
            /* Outputs [lo, hi) read inside the row; the rest read the padding. */            \
            const int64_t x0 = j * g->dw - g->pw;                                            \
            int64_t lo = x0 >= 0 ? 0 : (-x0 + g->sw - 1) / g->sw;                            \
            int64_t hi = x0 >= g->w ? 0 : (g->w - x0 + g->sw - 1) / g->sw;                   \
            if (lo > g->ow) lo = g->ow;                                                      \
            if (hi > g->ow) hi = g->ow;                                                      \
            if (hi < lo) hi = lo;                                                            \
            for (int64_t ox = 0; ox < lo; ++ox) dst[ox] = 0;                                 \
            if (g->sw == 1 && sx == 1) {                                                     \
              for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = src[x0 + ox];                   \
            } else {                                                                         \
              for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = src[(x0 + ox * g->sw) * sx];    \
            }                                                                                \
            for (int64_t ox = hi; ox < g->ow; ++ox) dst[ox] = 0;                             \
          }                                                                                  \
        }                                                                                    \
  }

/* Max or average pooling of one (n, c) plane into a contiguous output plane. avg_mode:
 * 0 max, 1 average over in-bounds positions, 2 average counting the pads. Windows wholly
 * inside the input run tap by tap over a row of outputs (branch-free, vectorizable); only
 * the border windows check bounds. Max keeps NaN: a NaN tap wins and stays. */
#define KILN_POOL(T, S)                                                                       \
  /* The larger of a and b, or NaN when either is NaN; three plain selects, a form compilers \
   * vectorize (a combined condition stays a branch). */                                    \
  static inline T kiln_pool_max2_##S(T a, T b) {                                              \
    T m = b > a ? b : a;                                                                      \
    m = b != b ? b : m;                                                                       \
    return a != a ? a : m;                                                                    \
  }                                                                                           \
  static inline void kiln_pool_border_##S(const T *x, int64_t sy, int64_t sx,                 \
                                          const kiln_window *g, int avg_mode, int64_t oy,     \
                                          int64_t a, int64_t b, T *o) {                       \
    for (int64_t ox = a; ox < b; ++ox) {                                                      \
      const int64_t y0 = oy * g->sh - g->ph, x0 = ox * g->sw - g->pw;                         \
      T acc = avg_mode ? (T)0 : (T)-INFINITY;                                                 \
      int64_t count = 0, padded = 0;                                                          \
      for (int64_t i = 0; i < g->kh; ++i) {                                                   \
        const int64_t y = y0 + i * g->dh;                                                     \
        if (y >= g->h + g->eh) break;                                                         \
        for (int64_t j = 0; j < g->kw; ++j) {                                                 \
          const int64_t xx = x0 + j * g->dw;                                                  \
          if (xx >= g->w + g->ew) break;                                                      \
          ++padded;                                                                           \
          if (y < 0 || y >= g->h || xx < 0 || xx >= g->w) continue;                           \
          const T v = x[y * sy + xx * sx];                                                    \
          ++count;                                                                            \
          if (avg_mode) acc += v;                                                             \
          else acc = kiln_pool_max2_##S(acc, v);                                              \
        }                                                                                     \
      }                                                                                       \
      if (avg_mode) acc = acc / (T)(avg_mode == 2 ? padded : (count ? count : 1));            \
      o[ox] = acc;                                                                            \
    }                                                                                         \
  }                                                                                           \
  KILN_WINDOW_FN void kiln_pool_##S(const T *x, int64_t sy, int64_t sx, const kiln_window *g, \
                                    int avg_mode, T *out) {                                   \
    /* Columns [cx0, cx1) and rows [cy0, cy1) have windows inside the input. */               \
    int64_t cx0, cx1, cy0, cy1;                                                               \
    kiln_window_inside(g->w, g->kw, g->sw, g->dw, g->pw, g->ow, &cx0, &cx1);                  \
    kiln_window_inside(g->h, g->kh, g->sh, g->dh, g->ph, g->oh, &cy0, &cy1);                  \
    for (int64_t oy = 0; oy < g->oh; ++oy) {                                                  \
      T *restrict o = out + oy * g->ow;                                                       \
      if (oy < cy0 || oy >= cy1 || cx0 >= cx1) {                                             \
        kiln_pool_border_##S(x, sy, sx, g, avg_mode, oy, 0, g->ow, o);                        \
        continue;                                                                             \
      }                                                                                       \
      kiln_pool_border_##S(x, sy, sx, g, avg_mode, oy, 0, cx0, o);                            \
      kiln_pool_border_##S(x, sy, sx, g, avg_mode, oy, cx1, g->ow, o);                        \
      const T *row = x + (oy * g->sh - g->ph) * sy;                                           \
      const T init = avg_mode ? (T)0 : (T)-INFINITY;                                          \
      const int64_t step = g->sw * sx;                                                        \
      if (g->kh == 2 && g->kw == 2 && g->dh == 1 && g->dw == 1 && step == 2 && sx == 1) {     \
        /* The common 2x2, stride-2 window: one pass, four taps per output. */                \
        const T *restrict r0 = row - g->pw, *restrict r1 = row - g->pw + sy;                  \
        if (avg_mode)                                                                         \
          for (int64_t ox = cx0; ox < cx1; ++ox)                                              \
            o[ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) / (T)4;       \
        else                                                                                  \
          for (int64_t ox = cx0; ox < cx1; ++ox) {                                            \
            const T a = kiln_pool_max2_##S(r0[2 * ox], r0[2 * ox + 1]);                           \
            const T b = kiln_pool_max2_##S(r1[2 * ox], r1[2 * ox + 1]);                           \
            o[ox] = kiln_pool_max2_##S(a, b);                                                     \
          }                                                                                   \
        continue;                                                                             \
      }                                                                                       \
      for (int64_t ox = cx0; ox < cx1; ++ox) o[ox] = init;                                    \
      for (int64_t i = 0; i < g->kh; ++i)                                                     \
        for (int64_t j = 0; j < g->kw; ++j) {                                                 \
          const T *restrict src = row + i * g->dh * sy + (j * g->dw - g->pw) * sx;            \
          if (avg_mode) {                                                                     \
            if (step == 1)                                                                    \
              for (int64_t ox = cx0; ox < cx1; ++ox) o[ox] += src[ox];                        \
            else if (step == 2)                                                               \
              for (int64_t ox = cx0; ox < cx1; ++ox) o[ox] += src[2 * ox];                    \
            else                                                                              \
              for (int64_t ox = cx0; ox < cx1; ++ox) o[ox] += src[ox * step];                 \
          } else {                                                                            \
            if (step == 1)                                                                    \
              for (int64_t ox = cx0; ox < cx1; ++ox) {                                        \
                const T v = src[ox];                                                          \
                o[ox] = kiln_pool_max2_##S(o[ox], v);                                      \
              }                                                                               \
            else if (step == 2)                                                               \
              for (int64_t ox = cx0; ox < cx1; ++ox) {                                        \
                const T v = src[2 * ox];                                                      \
                o[ox] = kiln_pool_max2_##S(o[ox], v);                                      \
              }                                                                               \
            else                                                                              \
              for (int64_t ox = cx0; ox < cx1; ++ox) {                                        \
                const T v = src[ox * step];                                                   \
                o[ox] = kiln_pool_max2_##S(o[ox], v);                                      \
              }                                                                               \
          }                                                                                   \
        }                                                                                     \
      if (avg_mode)                                                                           \
        for (int64_t ox = cx0; ox < cx1; ++ox) o[ox] = o[ox] / (T)(g->kh * g->kw);            \
    }                                                                                         \
  }

/* Outputs [*lo, *hi) along one axis whose windows lie wholly inside [0, in). */
static inline void kiln_window_inside(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p,
                                      int64_t out, int64_t *lo, int64_t *hi) {
  const int64_t last = in - 1 - (k - 1) * d + p; /* o * s <= last */
  *lo = (p + s - 1) / s;
  *hi = last < 0 ? 0 : last / s + 1;
  if (*lo > out) *lo = out;
  if (*hi > out) *hi = out;
  if (*hi < *lo) *hi = *lo;
}

#include <math.h>
KILN_IM2COL(float, f32)
KILN_IM2COL(double, f64)
KILN_POOL(float, f32)
KILN_POOL(double, f64)
#endif /* KILN_MODULE */

/* Copies the interior of a zero-padded image group into its stride phases (the direct
 * convolution's buffer, ops/conv.cpp): padded pixel (py, px) = (y + pt, x + pl) goes to
 * plane ((c*sh + py % sh)*sw + px % sw) at (py / sh, px / sw), planes hq x wq apart. The
 * padding is left as it is (the caller zeroes it once). x is addressed with element strides
 * (sc, sy, sx); each phase row is one strided run, so there is no division per pixel. */
#define KILN_PHASE_COPY(T, S)                                                                 \
  static __attribute__((unused)) void kiln_phase_copy_##S(                                   \
      const T *x, int64_t channels, int64_t sc, int64_t sy, int64_t sx, int64_t h, int64_t w, \
      int64_t pt, int64_t pl, int64_t sh, int64_t sw, int64_t hq, int64_t wq, T *buf) {      \
    for (int64_t c = 0; c < channels; ++c)                                                   \
      for (int64_t y = 0; y < h; ++y) {                                                      \
        const int64_t py = y + pt;                                                           \
        const T *src = x + c * sc + y * sy;                                                  \
        T *row = buf + (c * sh + py % sh) * sw * hq * wq + py / sh * wq;                     \
        if (sw == 1) {                                                                       \
          T *restrict dst = row + pl;                                                        \
          if (sx == 1) {                                                                     \
            for (int64_t i = 0; i < w; ++i) dst[i] = src[i];                                 \
          } else {                                                                           \
            for (int64_t i = 0; i < w; ++i) dst[i] = src[i * sx];                            \
          }                                                                                  \
          continue;                                                                          \
        }                                                                                    \
        for (int64_t b = 0; b < sw; ++b) {                                                   \
          /* The first padded column at or after pl in phase b, and its image column. */     \
          const int64_t px0 = pl + ((b - pl % sw) % sw + sw) % sw, x0 = px0 - pl;            \
          if (x0 >= w) continue;                                                             \
          const int64_t n = (w - x0 + sw - 1) / sw;                                          \
          T *restrict dst = row + b * hq * wq + px0 / sw;                                    \
          const T *s0 = src + x0 * sx;                                                       \
          const int64_t step = sw * sx;                                                      \
          /* Stride 2 of a contiguous row, the common case, with a constant step the         \
           * compiler vectorizes (a variable one is a scalar gather). */                      \
          if (step == 2) {                                                                   \
            for (int64_t i = 0; i < n; ++i) dst[i] = s0[2 * i];                              \
          } else {                                                                           \
            for (int64_t i = 0; i < n; ++i) dst[i] = s0[i * step];                           \
          }                                                                                  \
        }                                                                                    \
      }                                                                                      \
  }
KILN_PHASE_COPY(float, f32)
KILN_PHASE_COPY(double, f64)

/* Output rows [oy0, oy1) of one depthwise channel (one input plane, one kh x kw filter).
 * Rows of x are sy elements apart, columns contiguous. A 3x3 or 5x5 filter of stride 1 or 2
 * reads zero-padded copies of the input rows it needs, kept in a ring in `scratch` (each
 * row copied once, padding zero once) plus a zero row for rows in the padding, and keeps
 * each output's sum in a register over all its taps, vectorized over the row. At stride 2
 * a copy holds its even columns, then its odd ones, so every tap still reads a contiguous
 * run. Other filters add one tap at a time over the columns it reaches. Padding is never
 * read as data. scratch: kiln_depthwise_scratch() elements. */
static __attribute__((unused)) int64_t kiln_depthwise_width(int64_t ow, int64_t kw, int64_t sw,
                                                            int64_t dw) {
  return (ow - 1) * sw + (kw - 1) * dw + 1;
}
static __attribute__((unused)) int64_t kiln_depthwise_scratch(int64_t ow, int64_t kh, int64_t kw,
                                                              int64_t sw, int64_t dh,
                                                              int64_t dw) {
  return (kh * dh + 1) * kiln_depthwise_width(ow, kw, sw, dw);
}
#define KILN_DW_FIXED(T, S, K)                                                                 \
  static inline __attribute__((always_inline)) void kiln_dw##K##_##S(                         \
      const T *const *rows, const int64_t *col, const T *k, T bias, T *restrict dst,           \
      int64_t ow) {                                                                            \
    /* Tap pointers and weights in locals: nothing in the loop is reloaded or may alias. */   \
    const T *p[K * K];                                                                         \
    T kv[K * K];                                                                               \
    _Pragma("GCC unroll 25") for (int t = 0; t < K * K; ++t) {                                 \
      p[t] = rows[t / K] + col[t % K];                                                         \
      kv[t] = k[t];                                                                            \
    }                                                                                          \
    for (int64_t ox = 0; ox < ow; ++ox) {                                                      \
      T acc = bias;                                                                            \
      _Pragma("GCC unroll 25") for (int t = 0; t < K * K; ++t) acc += kv[t] * p[t][ox];        \
      dst[ox] = acc;                                                                           \
    }                                                                                          \
  }
#define KILN_DEPTHWISE(T, S)                                                                   \
  KILN_DW_FIXED(T, S, 3)                                                                       \
  KILN_DW_FIXED(T, S, 5)                                                                       \
  static __attribute__((unused)) void kiln_depthwise_rows_##S(                                \
      const T *x, int64_t sy, int64_t h, int64_t w, const T *k, int64_t kh, int64_t kw,        \
      T bias, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,          \
      T *scratch, T *y, int64_t ow, int64_t oy0, int64_t oy1) {                                \
    if (kh == kw && (kh == 3 || kh == 5) && (sw == 1 || sw == 2) && ow > 0) {                  \
      const int64_t wp = kiln_depthwise_width(ow, kw, sw, dw), slots = kh * dh;                \
      /* Padded columns [c0, c1) hold image columns [c0 - pl, c1 - pl). */                     \
      const int64_t c0 = pl > 0 ? pl : 0, c1 = pl + w < wp ? pl + w : wp;                      \
      T *zero = scratch, *ring = scratch + wp;                                                 \
      const int64_t he = (wp + 1) / 2; /* stride 2: where the odd columns start */              \
      int64_t held[25], col[5];                                                                \
      for (int64_t j = 0; j < kw; ++j)                                                         \
        col[j] = sw == 1 ? j * dw : (j * dw % 2 ? he : 0) + j * dw / 2;                        \
      for (int64_t i = 0; i < (slots + 1) * wp; ++i) scratch[i] = 0;                           \
      for (int64_t i = 0; i < slots; ++i) held[i] = -1;                                        \
      for (int64_t oy = oy0; oy < oy1; ++oy) {                                                 \
        const T *rows[5];                                                                      \
        for (int64_t i = 0; i < kh; ++i) {                                                     \
          const int64_t iy = oy * sh - pt + i * dh;                                            \
          if (iy < 0 || iy >= h) {                                                             \
            rows[i] = zero;                                                                    \
            continue;                                                                          \
          }                                                                                    \
          T *r = ring + iy % slots * wp;                                                       \
          if (held[iy % slots] != iy) {                                                        \
            const T *src = x + iy * sy - pl;                                                   \
            if (sw == 1) {                                                                     \
              for (int64_t c = c0; c < c1; ++c) r[c] = src[c];                                 \
            } else { /* padded column c at c / 2, in the even or the odd half */               \
              for (int64_t q = (c0 + 1) / 2; q < (c1 + 1) / 2; ++q) r[q] = src[2 * q];         \
              for (int64_t q = c0 / 2; q < c1 / 2; ++q) r[he + q] = src[2 * q + 1];            \
            }                                                                                  \
            held[iy % slots] = iy;                                                             \
          }                                                                                    \
          rows[i] = r;                                                                         \
        }                                                                                      \
        if (kh == 3)                                                                           \
          kiln_dw3_##S(rows, col, k, bias, y + oy * ow, ow);                                   \
        else                                                                                   \
          kiln_dw5_##S(rows, col, k, bias, y + oy * ow, ow);                                   \
      }                                                                                        \
      return;                                                                                  \
    }                                                                                          \
    for (int64_t oy = oy0; oy < oy1; ++oy) {                                                   \
      T *restrict dst = y + oy * ow;                                                           \
      for (int64_t ox = 0; ox < ow; ++ox) dst[ox] = bias;                                      \
      for (int64_t i = 0; i < kh; ++i) {                                                       \
        const int64_t iy = oy * sh - pt + i * dh;                                              \
        if (iy < 0 || iy >= h) continue;                                                       \
        const T *row = x + iy * sy;                                                            \
        for (int64_t j = 0; j < kw; ++j) {                                                     \
          const T kv = k[i * kw + j];                                                          \
          const int64_t o = j * dw - pl; /* input column of output ox: ox*sw + o */            \
          int64_t lo = o >= 0 ? 0 : (-o + sw - 1) / sw;                                        \
          int64_t hi = o >= w ? 0 : (w - 1 - o) / sw + 1;                                      \
          if (hi > ow) hi = ow;                                                                \
          const T *restrict src = row + o;                                                     \
          for (int64_t ox = lo; ox < hi; ++ox) dst[ox] += kv * src[ox * sw];                   \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }
KILN_DEPTHWISE(float, f32)
KILN_DEPTHWISE(double, f64)

#endif /* KILN_WINDOW_H */
