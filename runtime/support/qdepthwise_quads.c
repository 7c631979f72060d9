/* A channels-last depthwise integer convolution through VNNI's vpdpbusd (MobileNet's and
 * EfficientNet's 3x3 and 5x5 layers, which dominate their int8 time). A lane of vpdpbusd
 * sums four u8 x s8 products into one int32: here one channel's four horizontally adjacent
 * taps, so a 3x3 window is three instructions per 16 channels where the int16 pair loops
 * (qdepthwise.c) spent a widening, an interleave and a multiply per two taps.
 *
 * Per chunk of 16 channels, each padded input row becomes a row of quads: entry s holds, for
 * each channel, the bytes of padded columns s..s+3 (one 64-byte vector; built once per input
 * row and kept in a ring for the kernel rows that read it). Output (oy, ox) sums, for each
 * kernel row ky and each group of four taps, the quad at ox*sw + 4*group of input row
 * oy*sh - ph + ky*dh times that group's weights (zero past the row's last tap). Padding holds
 * the zero point, and the inputs enter as they are, not less the zero point, so each
 * channel's bias drops x_zp times the sum of its weights (less their zero point) once. */
#include "runtime/support/qdepthwise_quads.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <string.h>

#include "runtime/support/qrequant16.h"

enum { kRingBytes = 65536, kMaxSpan = 64, kMaxQuadRows = 16 };

/* Padded columns [0, cols) of input row iy, channels [c0, c0 + 16) (lanes outside mask m
 * are don't-care), as 16 bytes per column: the input byte xor flip, or az in the padding. */
static void chunk_bytes(const uint8_t* x, const kiln_window* g, int64_t c, int64_t c0, __mmask16 m,
                        int64_t iy, int64_t cols, uint8_t flip, uint8_t az, uint8_t* out) {
  const __m128i fill = _mm_set1_epi8((char)az), flips = _mm_set1_epi8((char)flip);
  const int64_t in0 = g->pw < cols ? g->pw : cols;
  const int64_t in1 = g->pw + g->w < cols ? g->pw + g->w : cols;
  const uint8_t* src = x + iy * g->w * c + c0;
  int64_t k = 0;
  for (; k < in0; ++k) _mm_storeu_si128((__m128i*)(out + k * 16), fill);
  for (; k < in1; ++k)
    _mm_storeu_si128((__m128i*)(out + k * 16),
                     _mm_xor_si128(_mm_maskz_loadu_epi8(m, src + (k - g->pw) * c), flips));
  for (; k < cols; ++k) _mm_storeu_si128((__m128i*)(out + k * 16), fill);
}

/* quads[s] = for each of the 16 channels, the bytes of columns s..s+3 (bytes holds
 * count + 3 columns): a 4 x 16 byte transpose of 64 consecutive bytes, for every step-th s
 * (the only ones a stride of `step` reads). */
static void chunk_quads(const uint8_t* bytes, int64_t count, int64_t step, uint8_t* quads) {
#if defined(__AVX512VBMI__)
  /* Output byte 4j + k is column k's channel j: input byte 16k + j. */
  uint8_t order[64];
  for (int j = 0; j < 16; ++j)
    for (int k = 0; k < 4; ++k) order[4 * j + k] = (uint8_t)(16 * k + j);
  const __m512i idx = _mm512_loadu_si512((const void*)order);
  for (int64_t s = 0; s < count; s += step)
    _mm512_storeu_si512((void*)(quads + s * 64),
                        _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(bytes + s * 16)));
#else
  for (int64_t s = 0; s < count; s += step) {
    const uint8_t* p = bytes + s * 16;
    const __m128i a = _mm_loadu_si128((const __m128i*)p);
    const __m128i b = _mm_loadu_si128((const __m128i*)(p + 16));
    const __m128i c = _mm_loadu_si128((const __m128i*)(p + 32));
    const __m128i d = _mm_loadu_si128((const __m128i*)(p + 48));
    const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    uint8_t* q = quads + s * 64;
    _mm_storeu_si128((__m128i*)q, _mm_unpacklo_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i*)(q + 16), _mm_unpackhi_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i*)(q + 32), _mm_unpacklo_epi16(ab1, cd1));
    _mm_storeu_si128((__m128i*)(q + 48), _mm_unpackhi_epi16(ab1, cd1));
  }
#endif
}

/* One output row of a chunk: nq = kh * ng quad products per position. Inlined with the
 * common shapes' constants, so the weights stay in registers and the loops unroll. */
static inline __attribute__((always_inline)) void chunk_row(const uint8_t* const* rows, int64_t kh,
                                                            int64_t ng, int64_t ow, int64_t sw,
                                                            const __m512i* wq, __m512i bias,
                                                            __m512 scales, const kiln_requant16* rq,
                                                            void* y, int64_t at, int64_t c,
                                                            __mmask16 m) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    __m512i acc = bias;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t gi = 0; gi < ng; ++gi)
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(rows[ky] + (ox * sw + 4 * gi) * 64),
                                  wq[ky * ng + gi]);
    kiln_requant16_store(rq, y, at + ox * c, acc, scales, m);
  }
}

int KILN_QDEPTHWISE_QUADS(const uint8_t* x, const kiln_window* g, int64_t c, int64_t r0, int64_t r1,
                          uint8_t flip, const void* w, int w_u8, const kiln_qgemm_epi* e, void* y) {
  if (g->dw != 1 || g->kw > 8 || g->ow < 1) return 0;
  const int64_t ng = (g->kw + 3) / 4, nq = g->kh * ng, taps = g->kh * g->kw;
  const int64_t span = (g->kh - 1) * g->dh + 1;
  /* Quad starts one row reads, and the columns they cover. */
  const int64_t count = (g->ow - 1) * g->sw + 4 * (ng - 1) + 1, cols = count + 3;
  const int64_t row_bytes = count * 64;
  /* Quads start at ox*sw + 4*group: with sw dividing 4, only every sw-th one is read. */
  const int64_t step = 4 % g->sw == 0 ? g->sw : 1;
  if (nq > kMaxQuadRows || span > kMaxSpan || (span + 1) * row_bytes + cols * 16 > kRingBytes)
    return 0;
  /* Each weight less its zero point must be an int8 for vpdpbusd: int8 weights with zero
   * points of 0 (ONNX's symmetric per-channel weights) are, without looking at each. */
  int32_t any_wz = 0;
  for (int64_t ch = 0; ch < (e->b_zp_step ? c : 1); ++ch) any_wz |= e->b_zp[ch * e->b_zp_step];
  for (int64_t ch = 0; (w_u8 || any_wz) && ch < c; ++ch) {
    const int32_t wz = e->b_zp[ch * e->b_zp_step];
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t v = (w_u8 ? (int32_t)((const uint8_t*)w)[ch * taps + t] - 128
                              : (int32_t)((const int8_t*)w)[ch * taps + t]) -
                        wz;
      if (v < -128 || v > 127) return 0;
    }
  }
  uint8_t mem[kRingBytes] __attribute__((aligned(64)));
  const uint8_t az = (uint8_t)e->a_zp;
  uint8_t* pad_row = mem; /* the quads of a padding row: every byte the zero point */
  uint8_t* ring = mem + row_bytes;
  uint8_t* bytes = ring + span * row_bytes;
  memset(pad_row, az, (size_t)row_bytes);
  const kiln_requant16 rq = kiln_requant16_of(e);
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const int64_t n = c - c0 < 16 ? c - c0 : 16;
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    /* Per kernel row and group of four taps, lane j's bytes are channel c0 + j's weights
     * less their zero point (0 past the row's taps and the chunk's channels). */
    __m512i wq[kMaxQuadRows];
    int32_t bias[16], sums[16];
    float scales[16];
    for (int64_t j = 0; j < 16; ++j) {
      bias[j] = 0;
      sums[j] = 0;
      scales[j] = 0.0f;
    }
    int64_t q = 0;
    if (!w_u8 && !any_wz) {
      /* Symmetric int8 weights (onnxruntime's per-channel ones) as they are: each lane one
       * 4-byte gather from its channel's row of taps, the bytes past the row's taps cleared.
       * Byte by byte, a 5x5 layer of 1152 channels on a 7x7 map spent more on these vectors
       * than on its products. A group whose gather would read past the weights' end (the
       * last channel's last taps) takes the byte loop below. */
      const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
      __m512i sumv = _mm512_setzero_si512();
      for (; q < nq; ++q) {
        const int64_t ky = q / ng, k0 = (q % ng) * 4;
        const int64_t first = c0 * taps + ky * g->kw + k0;
        if ((c0 + n - 1) * taps + ky * g->kw + k0 + 4 > c * taps) break;
        const int64_t kc = g->kw - k0 < 4 ? g->kw - k0 : 4;
        const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int32_t)taps));
        const __m512i got = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx,
                                                        (const int8_t*)w + first, 1);
        const uint32_t keep = kc == 4 ? 0xffffffffu : (1u << (8 * kc)) - 1u;
        wq[q] = _mm512_and_si512(got, _mm512_set1_epi32((int32_t)keep));
        sumv = _mm512_dpbusd_epi32(sumv, _mm512_set1_epi8(1), wq[q]);
      }
      _mm512_storeu_si512((void*)sums, sumv);
    }
    for (; q < nq; ++q) {
      int8_t lanes[64];
      memset(lanes, 0, sizeof lanes);
      const int64_t ky = q / ng, k0 = (q % ng) * 4;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t ch = c0 + j;
        const int32_t wz = e->b_zp[ch * e->b_zp_step];
        for (int64_t k = 0; k < 4 && k0 + k < g->kw; ++k) {
          const int64_t t = ch * taps + ky * g->kw + k0 + k;
          const int32_t v =
              (w_u8 ? (int32_t)((const uint8_t*)w)[t] - 128 : (int32_t)((const int8_t*)w)[t]) - wz;
          lanes[4 * j + k] = (int8_t)v;
          sums[j] += v;
        }
      }
      wq[q] = _mm512_loadu_si512((const void*)lanes);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t ch = c0 + j;
      bias[j] = (e->bias ? e->bias[ch] : 0) - (int32_t)az * sums[j];
      scales[j] = e->scale ? e->scale[ch * e->scale_step] : 0.0f;
    }
    const __m512i biasv = _mm512_loadu_si512((const void*)bias);
    const __m512 scalev = _mm512_loadu_ps(scales);
    int64_t tag[kMaxSpan]; /* the input row each ring slot holds */
    for (int64_t i = 0; i < span; ++i) tag[i] = -1;
    for (int64_t oy = r0; oy < r1; ++oy) {
      const uint8_t* rows[kMaxQuadRows];
      for (int64_t ky = 0; ky < g->kh; ++ky) {
        const int64_t iy = oy * g->sh - g->ph + ky * g->dh;
        if (iy < 0 || iy >= g->h) {
          rows[ky] = pad_row;
          continue;
        }
        const int64_t slot = iy % span;
        uint8_t* quads = ring + slot * row_bytes;
        if (tag[slot] != iy) {
          chunk_bytes(x, g, c, c0, m, iy, cols, flip, az, bytes);
          chunk_quads(bytes, count, step, quads);
          tag[slot] = iy;
        }
        rows[ky] = quads;
      }
      const int64_t at = oy * g->ow * c + c0;
      if (g->kh == 3 && ng == 1) {
        chunk_row(rows, 3, 1, g->ow, g->sw, wq, biasv, scalev, &rq, y, at, c, m);
      } else if (g->kh == 5 && ng == 2) {
        chunk_row(rows, 5, 2, g->ow, g->sw, wq, biasv, scalev, &rq, y, at, c, m);
      } else {
        chunk_row(rows, g->kh, ng, g->ow, g->sw, wq, biasv, scalev, &rq, y, at, c, m);
      }
    }
  }
  return 1;
}

#else
int KILN_QDEPTHWISE_QUADS(const uint8_t* x, const kiln_window* g, int64_t c, int64_t r0, int64_t r1,
                          uint8_t flip, const void* w, int w_u8, const kiln_qgemm_epi* e, void* y) {
  (void)x, (void)g, (void)c, (void)r0, (void)r1, (void)flip, (void)w, (void)w_u8, (void)e, (void)y;
  return 0;
}
#endif
