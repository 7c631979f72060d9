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
#define kiln_conv_blocks_f32 (KILN_SUPPORT->conv_blocks_f32)
#define kiln_conv_blocks_f64 (KILN_SUPPORT->conv_blocks_f64)
#endif

/* Each tap's input offset at each output position of one image plane: tab[t * oh*ow + q] =
 * y * sy + x * sx for tap t = i * kw + j read at output position q = oy * ow + ox, or -1
 * where the tap falls in the padding. Built once per call, it lets a small image's columns
 * (im2col into a GEMM's panels, or a product folded back) go as gathers without a window's
 * bounds arithmetic per short row. */
static __attribute__((unused)) void kiln_window_offsets(const kiln_window* g, int64_t sy,
                                                        int64_t sx, int64_t* tab) {
  const int64_t npos = g->oh * g->ow;
  for (int64_t i = 0, t = 0; i < g->kh; ++i)
    for (int64_t j = 0; j < g->kw; ++j, ++t)
      for (int64_t oy = 0; oy < g->oh; ++oy) {
        const int64_t y = oy * g->sh - g->ph + i * g->dh;
        for (int64_t ox = 0; ox < g->ow; ++ox) {
          const int64_t x = ox * g->sw - g->pw + j * g->dw;
          tab[t * npos + oy * g->ow + ox] =
              y >= 0 && y < g->h && x >= 0 && x < g->w ? y * sy + x * sx : -1;
        }
      }
}

#ifndef KILN_MODULE

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
          /* Outputs [lo, hi) read inside the row, the rest the padding: per tap, not per    \
           * row (the divisions cost more than a short row's copy). */                       \
          const int64_t x0 = j * g->dw - g->pw;                                              \
          int64_t lo = x0 >= 0 ? 0 : (-x0 + g->sw - 1) / g->sw;                              \
          int64_t hi = x0 >= g->w ? 0 : (g->w - x0 + g->sw - 1) / g->sw;                     \
          if (lo > g->ow) lo = g->ow;                                                        \
          if (hi > g->ow) hi = g->ow;                                                        \
          if (hi < lo) hi = lo;                                                              \
          for (int64_t oy = 0; oy < g->oh; ++oy) {                                           \
            const int64_t y = oy * g->sh - g->ph + i * g->dh;                                \
            T *dst = row + oy * g->ow;                                                       \
            if (y < 0 || y >= g->h) {                                                        \
              for (int64_t ox = 0; ox < g->ow; ++ox) dst[ox] = 0;                            \
              continue;                                                                      \
            }                                                                                \
            const T *src = x + c * sc + y * sy;                                              \
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

/* ev[i] = src[2i] for 2i < w, od[i] = src[2i + 1] for 2i + 1 < w: a row split into its even
 * and odd columns (stride-2 phases), two vectors at a time through a shuffle, where a
 * strided loop would be a scalar gather. */
typedef float kiln_v16f_ __attribute__((vector_size(64), aligned(4), may_alias));
typedef double kiln_v8d_ __attribute__((vector_size(64), aligned(8), may_alias));
static inline void kiln_deinterleave_f32(const float *src, int64_t w, float *restrict ev,
                                         float *restrict od) {
  int64_t i = 0;
  for (; 2 * i + 32 <= w; i += 16) {
    const kiln_v16f_ a = *(const kiln_v16f_ *)(src + 2 * i);
    const kiln_v16f_ b = *(const kiln_v16f_ *)(src + 2 * i + 16);
    *(kiln_v16f_ *)(ev + i) = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                                      20, 22, 24, 26, 28, 30);
    *(kiln_v16f_ *)(od + i) = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19,
                                                      21, 23, 25, 27, 29, 31);
  }
  for (; 2 * i + 1 < w; ++i) {
    ev[i] = src[2 * i];
    od[i] = src[2 * i + 1];
  }
  if (2 * i < w) ev[i] = src[2 * i];
}
static inline void kiln_deinterleave_f64(const double *src, int64_t w, double *restrict ev,
                                         double *restrict od) {
  int64_t i = 0;
  for (; 2 * i + 16 <= w; i += 8) {
    const kiln_v8d_ a = *(const kiln_v8d_ *)(src + 2 * i);
    const kiln_v8d_ b = *(const kiln_v8d_ *)(src + 2 * i + 8);
    *(kiln_v8d_ *)(ev + i) = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
    *(kiln_v8d_ *)(od + i) = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
  }
  for (; 2 * i + 1 < w; ++i) {
    ev[i] = src[2 * i];
    od[i] = src[2 * i + 1];
  }
  if (2 * i < w) ev[i] = src[2 * i];
}

/* Copies the interior of a zero-padded image group into its stride phases (the direct
 * convolution's buffer, ops/conv.cpp): padded pixel (py, px) = (y + pt, x + pl) goes to
 * plane ((c*sh + py % sh)*sw + px % sw) at (py / sh, px / sw), planes hq x wq apart. The
 * padding is left as it is (the caller zeroes it once). x is addressed with element strides
 * (sc, sy, sx); each phase row is one strided run, so there is no division per pixel. */
#define KILN_PHASE_COPY(T, S)                                                                 \
  static __attribute__((unused)) void kiln_phase_copy_##S(                                    \
      const T* x, int64_t channels, int64_t sc, int64_t sy, int64_t sx, int64_t h, int64_t w, \
      int64_t pt, int64_t pl, int64_t sh, int64_t sw, int64_t hq, int64_t wq, T* buf) {       \
    for (int64_t c = 0; c < channels; ++c)                                                    \
      /* (py % sh, py / sh) stepped along, not divided: a depthwise call copies a 7-pixel     \
       * row per division otherwise. */                                                       \
      for (int64_t y = 0, ph = pt % sh, qy = pt / sh; y < h; ++y) {                           \
        const T* src = x + c * sc + y * sy;                                                   \
        T* row = buf + (c * sh + ph) * sw * hq * wq + qy * wq;                                \
        if (++ph == sh) {                                                                     \
          ph = 0;                                                                             \
          ++qy;                                                                               \
        }                                                                                     \
        if (sw == 1) {                                                                        \
          T* restrict dst = row + pl;                                                         \
          if (sx == 1) {                                                                      \
            for (int64_t i = 0; i < w; ++i) dst[i] = src[i];                                  \
          } else {                                                                            \
            for (int64_t i = 0; i < w; ++i) dst[i] = src[i * sx];                             \
          }                                                                                   \
          continue;                                                                           \
        }                                                                                     \
        if (sw == 2 && sx == 1) {                                                             \
          /* Image column 2i is padded column 2i + pl: phase pl % 2 at i + pl / 2; column     \
           * 2i + 1 the other phase at i + (pl + 1) / 2. */                                   \
          kiln_deinterleave_##S(src, w, row + pl % 2 * hq * wq + pl / 2,                      \
                                row + (pl + 1) % 2 * hq * wq + (pl + 1) / 2);                 \
          continue;                                                                           \
        }                                                                                     \
        for (int64_t b = 0; b < sw; ++b) {                                                    \
          /* The first padded column at or after pl in phase b, and its image column. */      \
          const int64_t px0 = pl + ((b - pl % sw) % sw + sw) % sw, x0 = px0 - pl;             \
          if (x0 >= w) continue;                                                              \
          const int64_t n = (w - x0 + sw - 1) / sw;                                           \
          T* restrict dst = row + b * hq * wq + px0 / sw;                                     \
          const T* s0 = src + x0 * sx;                                                        \
          const int64_t step = sw * sx;                                                       \
          /* Stride 2 of a contiguous row, the common case, with a constant step the          \
           * compiler vectorizes (a variable one is a scalar gather). */                      \
          if (step == 2) {                                                                    \
            for (int64_t i = 0; i < n; ++i) dst[i] = s0[2 * i];                               \
          } else {                                                                            \
            for (int64_t i = 0; i < n; ++i) dst[i] = s0[i * step];                            \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
  }
KILN_PHASE_COPY(float, f32)
KILN_PHASE_COPY(double, f64)

/* Max pooling of one plane over its stride phases (padding -inf, ops/pool.cpp): flat output
 * i = oy*wq + ox is the largest of buf[i + off[t]] over the taps, NaN when any is NaN (as
 * kiln_pool). 2x2 and 3x3 windows keep each output in registers over all taps; others go
 * one tap at a time (a NaN tap replaces the running maximum, nothing replaces a NaN), each
 * pass one contiguous vector loop. */
#define KILN_MAXPOOL_TAP(b, m) (((b) > (m) || (b) != (b)) ? (b) : (m))
/* The fixed windows take the plain maximum as a tree (each compare-and-select waits only on
 * its pair) and mark NaN apart: an unordered compare per pair of taps, ORed, then NaN where
 * any tap was. */
#define KILN_MAXPOOL_FIXED(T, S)                                                               \
  static inline __attribute__((always_inline)) T kiln_maxpool_max_##S(T a, T b) {             \
    return b > a ? b : a;                                                                      \
  }                                                                                            \
  static inline __attribute__((always_inline)) int kiln_maxpool_nan_##S(T a, T b) {           \
    return (a != a) | (b != b);                                                                \
  }                                                                                            \
  static inline __attribute__((always_inline)) void kiln_maxpool4_##S(                        \
      const T *buf, const int32_t *off, T *restrict dst, int64_t n) {                          \
    const T *p0 = buf + off[0], *p1 = buf + off[1], *p2 = buf + off[2], *p3 = buf + off[3];    \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      const T m = kiln_maxpool_max_##S(kiln_maxpool_max_##S(p0[i], p1[i]),                    \
                                       kiln_maxpool_max_##S(p2[i], p3[i]));                    \
      const int bad = kiln_maxpool_nan_##S(p0[i], p1[i]) | kiln_maxpool_nan_##S(p2[i], p3[i]); \
      dst[i] = bad ? (T)__builtin_nan("") : m;                                                 \
    }                                                                                          \
  }                                                                                            \
  static inline __attribute__((always_inline)) void kiln_maxpool9_##S(                        \
      const T *buf, const int32_t *off, T *restrict dst, int64_t n) {                          \
    const T *p[9];                                                                             \
    _Pragma("GCC unroll 9") for (int t = 0; t < 9; ++t) p[t] = buf + off[t];                   \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      const T a = kiln_maxpool_max_##S(kiln_maxpool_max_##S(p[0][i], p[1][i]),                 \
                                       kiln_maxpool_max_##S(p[2][i], p[3][i]));                \
      const T b = kiln_maxpool_max_##S(kiln_maxpool_max_##S(p[4][i], p[5][i]),                 \
                                       kiln_maxpool_max_##S(p[6][i], p[7][i]));                \
      const int bad = kiln_maxpool_nan_##S(p[0][i], p[1][i]) |                                 \
                      kiln_maxpool_nan_##S(p[2][i], p[3][i]) |                                 \
                      kiln_maxpool_nan_##S(p[4][i], p[5][i]) |                                 \
                      kiln_maxpool_nan_##S(p[6][i], p[7][i]) |                                 \
                      kiln_maxpool_nan_##S(p[8][i], p[8][i]);                                  \
      const T m = kiln_maxpool_max_##S(kiln_maxpool_max_##S(a, b), p[8][i]);                   \
      dst[i] = bad ? (T)__builtin_nan("") : m;                                                 \
    }                                                                                          \
  }
#define KILN_MAXPOOL_FLAT(T, S)                                                                \
  KILN_MAXPOOL_FIXED(T, S)                                                                     \
  static __attribute__((unused)) void kiln_maxpool_flat_##S(const T *buf, const int32_t *off, \
                                                            int64_t taps, T *restrict dst,    \
                                                            int64_t n) {                      \
    if (taps == 9) {                                                                           \
      kiln_maxpool9_##S(buf, off, dst, n);                                                     \
      return;                                                                                  \
    }                                                                                          \
    if (taps == 4) {                                                                           \
      kiln_maxpool4_##S(buf, off, dst, n);                                                     \
      return;                                                                                  \
    }                                                                                          \
    const T *restrict first = buf + off[0];                                                    \
    for (int64_t i = 0; i < n; ++i) dst[i] = first[i];                                         \
    for (int64_t t = 1; t < taps; ++t) {                                                       \
      const T *restrict src = buf + off[t];                                                    \
      for (int64_t i = 0; i < n; ++i) dst[i] = KILN_MAXPOOL_TAP(src[i], dst[i]);              \
    }                                                                                          \
  }
KILN_MAXPOOL_FLAT(float, f32)
KILN_MAXPOOL_FLAT(double, f64)

/* Depthwise convolution of one channel over its phase buffer (the direct convolution's,
 * ops/conv.cpp, for one input channel): flat output i = oy*wq + ox sums k[t] * buf[i + off[t]]
 * over the taps, so every tap is one contiguous run at any stride and the loop runs over
 * whole rows at once (rows as short as 7 still fill vectors). 3x3 and 5x5 filters keep each
 * sum in a register over all taps; others add one tap at a time. The outputs go to dst with
 * the few overhanging columns (ox >= OW) that the caller drops. */
/* The fixed sizes run whole 64-byte vectors only: n is rounded up to a vector, so dst must
 * hold that many and the buffer a vector past its last tap (the phase buffer's
 * KILN_CONV_SLACK); the extra outputs read bytes no kept output reads. A scalar tail ran 9
 * of a 7 x 7 image's 73 flat outputs at a quarter of the vector loop's speed. Four vectors
 * at a time: one sum is a chain of K*K dependent multiply-adds, which alone would wait on
 * the FMA latency. -0.0 + bias is bias for every bias (the sum of an all -0.0 window stays
 * -0.0). */
#define KILN_DW_FIXED(T, S, K, V, VW)                                                          \
  static inline __attribute__((always_inline)) void kiln_dw##K##_##S(                         \
      const T *buf, const int32_t *off, const T *k, T bias, T *restrict dst, int64_t n) {      \
    /* Tap pointers and weights in locals: nothing in the loop is reloaded or may alias. */   \
    const T *p[K * K];                                                                         \
    T kv[K * K];                                                                               \
    _Pragma("GCC unroll 25") for (int t = 0; t < K * K; ++t) {                                 \
      p[t] = buf + off[t];                                                                     \
      kv[t] = k[t];                                                                            \
    }                                                                                          \
    const V init = -(V){} + bias;                                                              \
    int64_t i = 0;                                                                             \
    for (; i + 4 * VW <= n; i += 4 * VW) {                                                     \
      V a0 = init, a1 = init, a2 = init, a3 = init;                                            \
      _Pragma("GCC unroll 25") for (int t = 0; t < K * K; ++t) {                               \
        a0 += kv[t] * *(const V *)(p[t] + i);                                                  \
        a1 += kv[t] * *(const V *)(p[t] + i + VW);                                             \
        a2 += kv[t] * *(const V *)(p[t] + i + 2 * VW);                                         \
        a3 += kv[t] * *(const V *)(p[t] + i + 3 * VW);                                         \
      }                                                                                        \
      *(V *)(dst + i) = a0;                                                                    \
      *(V *)(dst + i + VW) = a1;                                                               \
      *(V *)(dst + i + 2 * VW) = a2;                                                           \
      *(V *)(dst + i + 3 * VW) = a3;                                                           \
    }                                                                                          \
    for (; i < n; i += VW) {                                                                   \
      V a = init;                                                                              \
      _Pragma("GCC unroll 25") for (int t = 0; t < K * K; ++t) a += kv[t] * *(const V *)(p[t] + i); \
      *(V *)(dst + i) = a;                                                                     \
    }                                                                                          \
  }
#define KILN_DEPTHWISE(T, S, V, VW)                                                            \
  KILN_DW_FIXED(T, S, 3, V, VW)                                                                \
  KILN_DW_FIXED(T, S, 5, V, VW)                                                                \
  static __attribute__((unused)) void kiln_depthwise_flat_##S(                                \
      const T *buf, const int32_t *off, int64_t kh, int64_t kw, const T *k, T bias,           \
      T *restrict dst, int64_t n) {                                                            \
    if (kh == 3 && kw == 3) {                                                                  \
      kiln_dw3_##S(buf, off, k, bias, dst, n);                                                 \
      return;                                                                                  \
    }                                                                                          \
    if (kh == 5 && kw == 5) {                                                                  \
      kiln_dw5_##S(buf, off, k, bias, dst, n);                                                 \
      return;                                                                                  \
    }                                                                                          \
    for (int64_t i = 0; i < n; ++i) dst[i] = bias;                                             \
    for (int64_t t = 0; t < kh * kw; ++t) {                                                    \
      const T kv = k[t], *restrict src = buf + off[t];                                         \
      for (int64_t i = 0; i < n; ++i) dst[i] += kv * src[i];                                   \
    }                                                                                          \
  }
KILN_DEPTHWISE(float, f32, kiln_v16f_, 16)
KILN_DEPTHWISE(double, f64, kiln_v8d_, 8)

/* Rows of a flat phase-row buffer (rows wq apart) to output rows (ow apart), a vector at a
 * time: a vector may run past its row into the rows after it, which are copied later, but
 * never past the last row, so parts never write each other's rows (a row narrower than half
 * a vector would otherwise reach two rows on, into another part's channel). The source has a
 * vector's slack past its last row (KILN_CONV_SLACK). */
#define KILN_ROWS_COPY(T, S, V, VW)                                                      \
  static __attribute__((unused)) void kiln_rows_copy_##S(                                \
      const T* src, int64_t wq, T* restrict dst, int64_t ow, int64_t rows) {             \
    for (int64_t r = 0; r < rows; ++r) {                                                 \
      const T* s = src + r * wq;                                                         \
      T* d = dst + r * ow;                                                               \
      const int64_t room = (rows - r) * ow; /* elements from d to the end of the rows */ \
      int64_t i = 0;                                                                     \
      for (; i < ow && i + VW <= room; i += VW) *(V*)(d + i) = *(const V*)(s + i);       \
      for (; i < ow; ++i) d[i] = s[i];                                                   \
    }                                                                                    \
  }
typedef float kiln_v8f_ __attribute__((vector_size(32), aligned(4), may_alias));
typedef double kiln_v4d_ __attribute__((vector_size(32), aligned(8), may_alias));
KILN_ROWS_COPY(float, f32, kiln_v8f_, 8)
KILN_ROWS_COPY(double, f64, kiln_v4d_, 4)

#endif /* KILN_WINDOW_H */
