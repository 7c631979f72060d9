/* kiln_support.qdepthwise (module_abi.h), once per ISA like the GEMM: a depthwise integer
 * convolution (MobileNet's and EfficientNet's 3x3 and 5x5 layers) as row loops the compiler
 * vectorizes. Through the GEMM each channel was a 1-column product of 9 taps: 15 of 16
 * lanes idle, and a gather per position. */
#include <math.h>
#include <string.h>

#include "runtime/support/qgemm.h"

#define KILN_CAT2(a, b) a##_##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)

/* Requantizes (or copies) count sums to y[at...] for channel ch: rint(acc * s) + y_zp,
 * saturated, as every integer kernel stores. The rounding adds and subtracts 1.5 * 2^23, which
 * rounds to nearest even like rint in the default mode for |v| < 2^22 (v is clamped to 1e6
 * first: past that the byte saturates anyway), and vectorizes where rintf stayed a call. */
static inline float requant(int32_t acc, float s, float yz, float lo, float hi) {
  const float magic = 12582912.0f;
  float v = (float)acc * s;
  v = v < -1e6f ? -1e6f : v > 1e6f ? 1e6f : v;
  v = (v + magic) - magic + yz;
  return v < lo ? lo : v > hi ? hi : v;
}

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
    for (int64_t q = 0; q < count; ++q) out[q] = (uint8_t)(int32_t)requant(acc[q], s, yz, lo, hi);
  } else {
    int8_t* out = (int8_t*)y + at;
    for (int64_t q = 0; q < count; ++q) out[q] = (int8_t)(int32_t)requant(acc[q], s, yz, lo, hi);
  }
}

enum { kMaxAcc = 4096, kMaxPhase = 4096 };

/* floor(a / b) and a - b * floor(a / b) for b > 0. */
static inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Row by row: for maps too wide for the banded loops below. */
static void depthwise_rows(const uint8_t* x, const kiln_window* g, int64_t c0, int64_t c1,
                           uint8_t flip, const void* w, int w_u8, const kiln_qgemm_epi* e,
                           void* y) {
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

/* The weights of channel ch less their zero point (both as packed: uint8 shifted by -128). */
static void tap_weights(const void* w, int w_u8, int64_t ch, int64_t taps, int32_t wz,
                        int32_t* wt) {
  for (int64_t t = 0; t < taps; ++t) {
    const int32_t v = w_u8 ? (int32_t)((const uint8_t*)w)[ch * taps + t] - 128
                           : (int32_t)((const int8_t*)w)[ch * taps + t];
    wt[t] = v - wz;
  }
}

enum { kBandAcc = 2048, kBandPhases = 16384 };

/* acc[q] += src[q] * w, kept out of line: inlined, gcc 12 fused two taps' loops into one
 * that it left scalar. */
__attribute__((noinline)) static void mac_row(int32_t* restrict acc, const int32_t* restrict src,
                                              int64_t n, int32_t w) {
  for (int64_t q = 0; q < n; ++q) acc[q] += src[q] * w;
}

/* Bands of output rows, each tap one long loop: the padded input split into its sh x sw
 * phases (every sh-th row and sw-th column from each offset) as int32 less the zero point
 * (padding 0), so tap (ky, kx) reads phase ((ky*dh) % sh, (kx*dw) % sw) at a fixed offset
 * for the whole band, on a grid as wide as a phase row (the columns past ow are computed
 * and dropped). A 7x7 map was 63 loops of 7 per channel; here it is 9 of 63. */
void KILN_CAT(kiln_qdepthwise, KILN_ISA)(const uint8_t* x, const kiln_window* g, int64_t c0,
                                         int64_t c1, uint8_t flip, const void* w, int w_u8,
                                         const kiln_qgemm_epi* e, void* y) {
  const int64_t sh = g->sh, sw = g->sw, taps = g->kh * g->kw, ohw = g->oh * g->ow;
  const int64_t wp = g->pw + g->w + g->ew, wq = (wp + sw - 1) / sw;
  const int64_t amax = ((g->kh - 1) * g->dh) / sh;
  int64_t band = kBandAcc / (wq > 0 ? wq : 1);
  while (band > 1 && sh * sw * (band + amax + 1) * wq > kBandPhases) --band;
  if (band < 1 || sh * sw * (band + amax + 1) * wq > kBandPhases || taps > 64) {
    depthwise_rows(x, g, c0, c1, flip, w, w_u8, e, y);
    return;
  }
  int32_t acc[kBandAcc];
  int32_t phase[kBandPhases];
  int32_t wt[64];
  const int32_t az = e->a_zp;
  for (int64_t ch = c0; ch < c1; ++ch) {
    const uint8_t* plane = x + ch * g->h * g->w;
    tap_weights(w, w_u8, ch, taps, e->b_zp[ch * e->b_zp_step], wt);
    const int32_t bias = e->bias ? e->bias[ch] : 0;
    for (int64_t oy0 = 0; oy0 < g->oh; oy0 += band) {
      const int64_t rows = oy0 + band < g->oh ? band : g->oh - oy0;
      const int64_t prow = rows + amax + 1; /* phase rows, one spare for the column offsets */
      /* Phase (ry, rx) row i, column j: padded input row (oy0 + i)*sh + ry, column j*sw + rx. */
      for (int64_t ry = 0; ry < sh; ++ry) {
        for (int64_t rx = 0; rx < sw; ++rx) {
          int32_t* q = phase + (ry * sw + rx) * prow * wq;
          for (int64_t i = 0; i < prow; ++i) {
            const int64_t iy = (oy0 + i) * sh + ry - g->ph;
            int32_t* qr = q + i * wq;
            if (iy < 0 || iy >= g->h) {
              for (int64_t j = 0; j < wq; ++j) qr[j] = 0;
              continue;
            }
            /* Columns [jlo, jhi) read the row; the rest are padding. */
            const int64_t off = rx - g->pw;
            int64_t jlo = off >= 0 ? 0 : (-off + sw - 1) / sw;
            int64_t jhi = g->w - off <= 0 ? 0 : (g->w - off + sw - 1) / sw;
            if (jhi > wq) jhi = wq;
            if (jlo > jhi) jlo = jhi;
            for (int64_t j = 0; j < jlo; ++j) qr[j] = 0;
            for (int64_t j = jhi; j < wq; ++j) qr[j] = 0;
            const uint8_t* src = plane + iy * g->w + off;
            if (sw == 1) {
              for (int64_t j = jlo; j < jhi; ++j) qr[j] = (int32_t)(uint8_t)(src[j] ^ flip) - az;
            } else {
              for (int64_t j = jlo; j < jhi; ++j)
                qr[j] = (int32_t)(uint8_t)(src[j * sw] ^ flip) - az;
            }
          }
        }
      }
      const int64_t len = rows * wq;
      for (int64_t q = 0; q < len; ++q) acc[q] = bias;
      for (int64_t ky = 0; ky < g->kh; ++ky) {
        for (int64_t kx = 0; kx < g->kw; ++kx) {
          const int64_t ry = (ky * g->dh) % sh, a = (ky * g->dh) / sh;
          const int64_t rx = (kx * g->dw) % sw, b = (kx * g->dw) / sw;
          const int32_t* src = phase + (ry * sw + rx) * prow * wq + a * wq + b;
          mac_row(acc, src, len, wt[ky * g->kw + kx]);
        }
      }
      for (int64_t r = 0; r < rows; ++r)
        store_block(e, y, ch, ch * ohw + (oy0 + r) * g->ow, acc + r * wq, g->ow);
    }
  }
}

enum { kChannelBlock = 64 };

/* Stores acc[j] of a block's channel j < n at y[at + j] (channels-last: one position's
 * channels are consecutive), each with its channel's scale. */
static void store_channels(const kiln_qgemm_epi* e, void* y, int64_t at, const int32_t* acc,
                           int64_t n, const float* scales) {
  if (!e->scale) {
    for (int64_t j = 0; j < n; ++j) ((int32_t*)y)[at + j] = acc[j];
    return;
  }
  const float lo = (float)e->lo, hi = (float)e->hi, yz = (float)e->y_zp;
  if (e->out_u8) {
    uint8_t* out = (uint8_t*)y + at;
    for (int64_t j = 0; j < n; ++j)
      out[j] = (uint8_t)(int32_t)requant(acc[j], scales[j], yz, lo, hi);
  } else {
    int8_t* out = (int8_t*)y + at;
    for (int64_t j = 0; j < n; ++j)
      out[j] = (int8_t)(int32_t)requant(acc[j], scales[j], yz, lo, hi);
  }
}

typedef int32_t kiln_i32x16 __attribute__((vector_size(64)));
typedef uint8_t kiln_u8x16 __attribute__((vector_size(16)));

/* One position's sums over its taps inside the image (offsets xo into x, wo into the
 * (tap, channel) weight rows), for a block's n channels: 16 channels at a time in a vector
 * that stays in registers across the taps (per tap, an array accumulator was a load and a
 * store), the last n % 16 one by one. */
static inline void position_sums(const uint8_t* x, const int64_t* xo, const int32_t* wt,
                                 const int64_t* wo, int nt, const int32_t* bias, int64_t n,
                                 uint8_t flip, int32_t az, int32_t* acc) {
  const kiln_u8x16 flips = {flip, flip, flip, flip, flip, flip, flip, flip,
                            flip, flip, flip, flip, flip, flip, flip, flip};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    kiln_i32x16 a;
    memcpy(&a, bias + j, sizeof a);
    for (int t = 0; t < nt; ++t) {
      kiln_u8x16 b;
      kiln_i32x16 w;
      memcpy(&b, x + xo[t] + j, sizeof b);
      memcpy(&w, wt + wo[t] + j, sizeof w);
      a += (__builtin_convertvector(b ^ flips, kiln_i32x16) - az) * w;
    }
    memcpy(acc + j, &a, sizeof a);
  }
  for (; j < n; ++j) {
    int32_t a = bias[j];
    for (int t = 0; t < nt; ++t)
      a += ((int32_t)(uint8_t)(x[xo[t] + j] ^ flip) - az) * wt[wo[t] + j];
    acc[j] = a;
  }
}

/* Channels-last: a position's channels are consecutive, so blocks of 64 channels are the
 * vectors and no phase split or transposition is needed (MobileNet's inverted residuals
 * stay channels-last between their 1 x 1 products). Per block, its weights less their zero
 * points as (tap, channel) rows, then every output position of rows [r0, r1). */
void KILN_CAT(kiln_qdepthwise_nhwc, KILN_ISA)(const uint8_t* x, const kiln_window* g, int64_t c,
                                              int64_t r0, int64_t r1, uint8_t flip, const void* w,
                                              int w_u8, const kiln_qgemm_epi* e, void* y) {
  const int64_t taps = g->kh * g->kw;
  int32_t wt[64 * kChannelBlock];
  int32_t acc[kChannelBlock], bias[kChannelBlock];
  float scales[kChannelBlock];
  const int32_t az = e->a_zp;
  for (int64_t c0 = 0; c0 < c; c0 += kChannelBlock) {
    const int64_t n = c - c0 < kChannelBlock ? c - c0 : kChannelBlock;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t ch = c0 + j;
      int32_t one[64];
      tap_weights(w, w_u8, ch, taps, e->b_zp[ch * e->b_zp_step], one);
      for (int64_t t = 0; t < taps; ++t) wt[t * kChannelBlock + j] = one[t];
      bias[j] = e->bias ? e->bias[ch] : 0;
      scales[j] = e->scale ? e->scale[ch * e->scale_step] : 0.0f;
    }
    for (int64_t oy = r0; oy < r1; ++oy) {
      for (int64_t ox = 0; ox < g->ow; ++ox) {
        /* The taps inside the image (padding is x_zp: it adds nothing). */
        int64_t xo[64], wo[64];
        int nt = 0;
        for (int64_t ky = 0; ky < g->kh; ++ky) {
          const int64_t iy = oy * g->sh - g->ph + ky * g->dh;
          if (iy < 0 || iy >= g->h) continue;
          for (int64_t kx = 0; kx < g->kw; ++kx) {
            const int64_t ix = ox * g->sw - g->pw + kx * g->dw;
            if (ix < 0 || ix >= g->w) continue;
            xo[nt] = (iy * g->w + ix) * c + c0;
            wo[nt++] = (ky * g->kw + kx) * kChannelBlock;
          }
        }
        position_sums(x, xo, wt, wo, nt, bias, n, flip, az, acc);
        store_channels(e, y, (oy * g->ow + ox) * c + c0, acc, n, scales);
      }
    }
  }
}
