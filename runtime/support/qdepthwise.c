/* kiln_support.qdepthwise (module_abi.h), once per ISA like the GEMM: a depthwise integer
 * convolution (MobileNet's and EfficientNet's 3x3 and 5x5 layers) as row loops the compiler
 * vectorizes. Through the GEMM each channel was a 1-column product of 9 taps: 15 of 16
 * lanes idle, and a gather per position. */
#include <math.h>
#include <string.h>

#include "runtime/support/qdepthwise_quads.h"
#include "runtime/support/qgemm.h"
#include "runtime/support/qrequant16.h"

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

/* One position's sums over all its taps (xp[t]: the tap's channels from the block's first,
 * or a row of bytes that read as the zero point where the tap is padding), for a block's
 * channels [j0, n): 16 at a time in a vector that stays in registers across the taps (per
 * tap, an array accumulator was a load and a store), the rest one by one. */
static inline void position_sums(const uint8_t* const* xp, const int32_t* wt, int64_t taps,
                                 const int32_t* bias, int64_t j0, int64_t n, uint8_t flip,
                                 int32_t az, int32_t* acc) {
  const kiln_u8x16 flips = {flip, flip, flip, flip, flip, flip, flip, flip,
                            flip, flip, flip, flip, flip, flip, flip, flip};
  int64_t j = j0;
  for (; j + 16 <= n; j += 16) {
    kiln_i32x16 a;
    memcpy(&a, bias + j, sizeof a);
    for (int64_t t = 0; t < taps; ++t) {
      kiln_u8x16 b;
      kiln_i32x16 w;
      memcpy(&b, xp[t] + j, sizeof b);
      memcpy(&w, wt + t * kChannelBlock + j, sizeof w);
      a += (__builtin_convertvector(b ^ flips, kiln_i32x16) - az) * w;
    }
    memcpy(acc + j, &a, sizeof a);
  }
  for (; j < n; ++j) {
    int32_t a = bias[j];
    for (int64_t t = 0; t < taps; ++t)
      a += ((int32_t)(uint8_t)(xp[t][j] ^ flip) - az) * wt[t * kChannelBlock + j];
    acc[j] = a;
  }
}

#if defined(__AVX512BW__)
#include <immintrin.h>

/* Taps in pairs on 32 channels: bytes widened to int16 less the zero point (|v| <= 255), the
 * two taps' values interleaved per channel (unpacklo/hi within each 128-bit lane) and
 * multiplied by the pair's int16 weights, interleaved alike, with vpmaddwd (or VNNI's
 * vpdpwssd): two taps per multiply where the int32 loop did one. Products and pair sums fit
 * int32 (2 x 255 x 255). The lo half holds channels 8L + 0..3 of lane L, the hi half 8L + 4..7;
 * two permutes put them back in order, and the bias is added. wp: per pair, 32 channels' lo
 * then hi weights. */
static inline void position_sums_pairs(const uint8_t* const* xp, const int16_t* wp, int64_t pairs,
                                       int64_t j, uint8_t flip, int32_t az, const int32_t* bias,
                                       __m512i out[2]) {
  const __m256i flips = _mm256_set1_epi8((char)flip);
  const __m512i azv = _mm512_set1_epi16((short)az);
  __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m256i ra = _mm256_xor_si256(_mm256_loadu_si256((const void*)(xp[2 * p] + j)), flips);
    const __m256i rb =
        _mm256_xor_si256(_mm256_loadu_si256((const void*)(xp[2 * p + 1] + j)), flips);
    const __m512i a = _mm512_sub_epi16(_mm512_cvtepu8_epi16(ra), azv);
    const __m512i b = _mm512_sub_epi16(_mm512_cvtepu8_epi16(rb), azv);
    const __m512i wlo = _mm512_loadu_si512((const void*)(wp + p * 64));
    const __m512i whi = _mm512_loadu_si512((const void*)(wp + p * 64 + 32));
#if defined(__AVX512VNNI__)
    lo = _mm512_dpwssd_epi32(lo, _mm512_unpacklo_epi16(a, b), wlo);
    hi = _mm512_dpwssd_epi32(hi, _mm512_unpackhi_epi16(a, b), whi);
#else
    lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), wlo));
    hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), whi));
#endif
  }
  const __m512i first = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i second =
      _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  out[0] = _mm512_add_epi32(_mm512_permutex2var_epi32(lo, first, hi),
                            _mm512_loadu_si512((const void*)(bias + j)));
  out[1] = _mm512_add_epi32(_mm512_permutex2var_epi32(lo, second, hi),
                            _mm512_loadu_si512((const void*)(bias + j + 16)));
}

/* The weight pairs of a block for position_sums_pairs: wt's (tap, channel) rows, for each
 * 32 channels [j, j + 32) of the block (whole groups only) and each tap pair (the last
 * paired with a zero tap when the count is odd). */
static void pair_weights(const int32_t* wt, int64_t taps, int64_t n, int16_t* wp) {
  const int64_t pairs = (taps + 1) / 2;
  for (int64_t j = 0; j + 32 <= n; j += 32) {
    int16_t* dst = wp + (j / 32) * pairs * 64;
    for (int64_t p = 0; p < pairs; ++p) {
      for (int half = 0; half < 2; ++half) {
        for (int lane = 0; lane < 4; ++lane) {
          for (int k = 0; k < 4; ++k) {
            const int64_t ch = j + lane * 8 + half * 4 + k;
            const int64_t at = p * 64 + half * 32 + lane * 8 + 2 * k;
            dst[at] = (int16_t)wt[(2 * p) * kChannelBlock + ch];
            dst[at + 1] = 2 * p + 1 < taps ? (int16_t)wt[(2 * p + 1) * kChannelBlock + ch] : 0;
          }
        }
      }
    }
  }
}
#endif

/* Channels-last: a position's channels are consecutive, so blocks of 64 channels are the
 * vectors and no phase split or transposition is needed (MobileNet's inverted residuals
 * stay channels-last between their 1 x 1 products). Per block, its weights less their zero
 * points as (tap, channel) rows, then every output position of rows [r0, r1). */
void KILN_CAT(kiln_qdepthwise_nhwc, KILN_ISA)(const uint8_t* x, const kiln_window* g, int64_t c,
                                              int64_t r0, int64_t r1, uint8_t flip, const void* w,
                                              int w_u8, const kiln_qgemm_epi* e, void* y) {
  if (KILN_QDEPTHWISE_QUADS(x, g, c, r0, r1, flip, w, w_u8, e, y)) return;
  const int64_t taps = g->kh * g->kw;
  int32_t wt[64 * kChannelBlock];
  int32_t acc[kChannelBlock], bias[kChannelBlock];
  float scales[kChannelBlock];
  const int32_t az = e->a_zp;
  /* Padding taps read this row: bytes that flip to the zero point, so they add nothing. */
  uint8_t pad[kChannelBlock];
  memset(pad, (uint8_t)az ^ flip, sizeof pad);
#if defined(__AVX512BW__)
  int16_t wp[32 * 64 * 2];
  const int64_t pairs = (taps + 1) / 2;
  const kiln_requant16 rq = kiln_requant16_of(e);
#endif
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
#if defined(__AVX512BW__)
    pair_weights(wt, taps, n, wp);
#endif
    for (int64_t oy = r0; oy < r1; ++oy) {
      /* Per tap, its input row's start (null where the row is padding). */
      const uint8_t* rows[64];
      for (int64_t ky = 0; ky < g->kh; ++ky) {
        const int64_t iy = oy * g->sh - g->ph + ky * g->dh;
        for (int64_t kx = 0; kx < g->kw; ++kx)
          rows[ky * g->kw + kx] = iy >= 0 && iy < g->h ? x + iy * g->w * c + c0 : 0;
      }
      for (int64_t ox = 0; ox < g->ow; ++ox) {
        /* Every tap in order (one spare for an odd count's pair). */
        const uint8_t* xp[65];
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t ix = ox * g->sw - g->pw + (t % g->kw) * g->dw;
          xp[t] = rows[t] && ix >= 0 && ix < g->w ? rows[t] + ix * c : pad;
        }
        xp[taps] = pad;
        const int64_t at = (oy * g->ow + ox) * c + c0;
        int64_t j = 0;
#if defined(__AVX512BW__)
        for (; j + 32 <= n; j += 32) {
          __m512i sums[2];
          position_sums_pairs(xp, wp + (j / 32) * pairs * 64, pairs, j, flip, az, bias, sums);
          kiln_requant16_store(&rq, y, at + j, sums[0], _mm512_loadu_ps(scales + j), 0xffff);
          kiln_requant16_store(&rq, y, at + j + 16, sums[1], _mm512_loadu_ps(scales + j + 16),
                               0xffff);
        }
        if (j == n) continue;
#endif
        position_sums(xp, wt, taps, bias, j, n, flip, az, acc);
        store_channels(e, y, at + j, acc + j, n - j, scales + j);
      }
    }
  }
}
