/* kiln_support.qdepthwise (module_abi.h), once per ISA like the GEMM: a depthwise integer
 * convolution (MobileNet's and EfficientNet's 3x3 and 5x5 layers) as row loops the compiler
 * vectorizes. Through the GEMM each channel was a 1-column product of 9 taps: 15 of 16
 * lanes idle, and a gather per position. */
#include <math.h>

#include "runtime/support/qgemm.h"

#define KILN_CAT2(a, b) a##_##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)

/* Requantizes (or copies) count sums to y[at...] for channel ch. */
static void store_block(const kiln_qgemm_epi* e, void* y, int64_t ch, int64_t at,
                        const int32_t* acc, int64_t count) {
  if (!e->scale) {
    for (int64_t q = 0; q < count; ++q) ((int32_t*)y)[at + q] = acc[q];
    return;
  }
  const float s = e->scale[ch * e->scale_step];
  const float lo = (float)e->lo, hi = (float)e->hi, yz = (float)e->y_zp;
  if (e->out_u8) {
    uint8_t* out = (uint8_t*)y + at;
    for (int64_t q = 0; q < count; ++q) {
      float v = rintf((float)acc[q] * s) + yz;
      v = v < lo ? lo : v > hi ? hi : v;
      out[q] = (uint8_t)(int32_t)v;
    }
  } else {
    int8_t* out = (int8_t*)y + at;
    for (int64_t q = 0; q < count; ++q) {
      float v = rintf((float)acc[q] * s) + yz;
      v = v < lo ? lo : v > hi ? hi : v;
      out[q] = (int8_t)(int32_t)v;
    }
  }
}

enum { kMaxAcc = 4096, kMaxPhase = 4096 };

/* floor(a / b) and a - b * floor(a / b) for b > 0. */
static inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

void KILN_CAT(kiln_qdepthwise, KILN_ISA)(const uint8_t* x, const kiln_window* g, int64_t c0,
                                         int64_t c1, uint8_t flip, const void* w, int w_u8,
                                         const kiln_qgemm_epi* e, void* y) {
  const int64_t taps = g->kh * g->kw, ohw = g->oh * g->ow;
  /* Rows of outputs whose sums fit the accumulator at once (at least one, in pieces of at
   * most kMaxAcc columns), so the requantizing loop runs over whole blocks of a small map. */
  const int64_t piece = g->ow < kMaxAcc ? g->ow : kMaxAcc;
  const int64_t rows = g->ow <= kMaxAcc ? kMaxAcc / g->ow : 1;
  int32_t acc[kMaxAcc];
  int32_t wt[64];
  /* An input row less the zero point, widened to int32 once for all its taps (a loop over
   * bytes would vectorize 64 at a time, more than a small map's row), and split into its sw
   * phases (every sw-th value from each offset) so each tap reads consecutive values. */
  int32_t xrow[kMaxPhase + 64];
  const int phased = g->w + g->sw <= kMaxPhase;
  for (int64_t ch = c0; ch < c1; ++ch) {
    const uint8_t* plane = x + ch * g->h * g->w;
    /* The weights less their zero point (both as packed: uint8 shifted by -128). */
    const int32_t wz = e->b_zp[ch * e->b_zp_step];
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t v = w_u8 ? (int32_t)((const uint8_t*)w)[ch * taps + t] - 128
                             : (int32_t)((const int8_t*)w)[ch * taps + t];
      wt[t] = v - wz;
    }
    const int32_t bias = e->bias ? e->bias[ch] : 0;
    const int32_t az = e->a_zp;
    for (int64_t y0 = 0; y0 < g->oh; y0 += rows) {
      const int64_t y1 = y0 + rows < g->oh ? y0 + rows : g->oh;
      for (int64_t x0 = 0; x0 < g->ow; x0 += piece) {
        const int64_t x1 = x0 + piece < g->ow ? x0 + piece : g->ow;
        const int64_t span = x1 - x0;
        for (int64_t q = 0; q < (y1 - y0) * span; ++q) acc[q] = bias;
        for (int64_t oy = y0; oy < y1; ++oy) {
          int32_t* row_acc = acc + (oy - y0) * span - x0;
          for (int64_t i = 0; i < g->kh; ++i) {
            const int64_t iy = oy * g->sh - g->ph + i * g->dh;
            if (iy < 0 || iy >= g->h) continue;
            const uint8_t* src = plane + iy * g->w;
            const int64_t plen = (g->w + g->sw - 1) / g->sw;
            if (phased) {
              for (int64_t r = 0; r < g->sw; ++r)
                for (int64_t k = 0; k * g->sw + r < g->w; ++k)
                  xrow[r * plen + k] = (int32_t)(uint8_t)(src[k * g->sw + r] ^ flip) - az;
            }
            for (int64_t j = 0; j < g->kw; ++j) {
              /* Outputs [lo, hi) read inside the row; outside, the tap reads padding (x_zp),
               * which adds nothing. */
              const int64_t off = j * g->dw - g->pw;
              int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
              int64_t hi = off >= g->w ? 0 : (g->w - off + g->sw - 1) / g->sw;
              if (lo < x0) lo = x0;
              if (hi > x1) hi = x1;
              const int32_t wv = wt[i * g->kw + j];
              if (!phased) {
                for (int64_t ox = lo; ox < hi; ++ox)
                  row_acc[ox] += ((int32_t)(uint8_t)(src[ox * g->sw + off] ^ flip) - az) * wv;
                continue;
              }
              const int64_t fd = floor_div(off, g->sw);
              const int32_t* xs = xrow + (off - g->sw * fd) * plen + fd;
              for (int64_t ox = lo; ox < hi; ++ox) row_acc[ox] += xs[ox] * wv;
            }
          }
        }
        /* Whole rows are consecutive in y; a piece of one long row is too. */
        store_block(e, y, ch, ch * ohw + y0 * g->ow + x0, acc, (y1 - y0) * span);
      }
    }
  }
}
