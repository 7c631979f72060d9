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
 * 0 max, 1 average over in-bounds positions, 2 average counting the pads. */
#define KILN_POOL(T, S)                                                                       \
  KILN_WINDOW_FN void kiln_pool_##S(const T *x, int64_t sy, int64_t sx, const kiln_window *g, \
                                    int avg_mode, T *out) {                                   \
    for (int64_t oy = 0; oy < g->oh; ++oy)                                                    \
      for (int64_t ox = 0; ox < g->ow; ++ox) {                                                \
        const int64_t y0 = oy * g->sh - g->ph, x0 = ox * g->sw - g->pw;                       \
        T acc = avg_mode ? (T)0 : (T)-INFINITY;                                               \
        int64_t count = 0, padded = 0;                                                        \
        if (y0 >= 0 && x0 >= 0 && y0 + (g->kh - 1) * g->dh < g->h &&                          \
            x0 + (g->kw - 1) * g->dw < g->w) {                                                \
          /* The whole window lies inside the input: no bounds checks. */                     \
          const T *base = x + y0 * sy + x0 * sx;                                              \
          for (int64_t i = 0; i < g->kh; ++i)                                                 \
            for (int64_t j = 0; j < g->kw; ++j) {                                             \
              const T v = base[i * g->dh * sy + j * g->dw * sx];                              \
              if (avg_mode) {                                                                 \
                acc += v;                                                                     \
              } else if (v > acc || v != v) {                                                 \
                acc = v;                                                                      \
              }                                                                               \
            }                                                                                 \
          out[oy * g->ow + ox] = avg_mode ? acc / (T)(g->kh * g->kw) : acc;                   \
          continue;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < g->kh; ++i) {                                                 \
          const int64_t y = y0 + i * g->dh;                                                   \
          if (y >= g->h + g->eh) break;                                                       \
          for (int64_t j = 0; j < g->kw; ++j) {                                               \
            const int64_t xx = x0 + j * g->dw;                                                \
            if (xx >= g->w + g->ew) break;                                                    \
            ++padded;                                                                         \
            if (y < 0 || y >= g->h || xx < 0 || xx >= g->w) continue;                         \
            const T v = x[y * sy + xx * sx];                                                  \
            ++count;                                                                          \
            if (avg_mode) {                                                                   \
              acc += v;                                                                       \
            } else if (v > acc || v != v) {                                                   \
              acc = v;                                                                        \
            }                                                                                 \
          }                                                                                   \
        }                                                                                     \
        if (avg_mode) acc = acc / (T)(avg_mode == 2 ? padded : (count ? count : 1));          \
        out[oy * g->ow + ox] = acc;                                                           \
      }                                                                                       \
  }

#include <math.h>
KILN_IM2COL(float, f32)
KILN_IM2COL(double, f64)
KILN_POOL(float, f32)
KILN_POOL(double, f64)
#endif /* KILN_MODULE */

#endif /* KILN_WINDOW_H */
