/* kiln_support.qgemm_u8s8 (module_abi.h), once per ISA (KILN_ISA): AVX512-VNNI's vpdpbusd
 * where the CPU has it, plain C elsewhere (the avx2 copy is that C compiled for AVX2).
 *
 * Why u8 x s8 only: vpdpbusd multiplies unsigned by signed bytes. Other pairs reach it by
 * shifting: int8 activations xor 0x80 become uint8 + 128 (their zero point + 128), uint8
 * weights are packed as int8 - 128 (their zero point - 128), and the zero-point terms absorb
 * both shifts. vpdpbusd sums each group of four products straight into int32, so the
 * int16 pair-sum saturation of vpmaddubsw (255 * 127 * 2 > 32767) never arises; the C
 * copies widen every product to int32 before adding. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/support/qgemm.h"
#include "runtime/support/qgemm_epi.h"
#include "runtime/support/qrequant16.h"

#define KILN_CAT2(a, b) a##_##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)
#define KILN_QGEMM_FN KILN_CAT(kiln_qgemm_u8s8, KILN_ISA)

/* The corrected accumulator of (i, j), with rs the sum of row i. */
static inline int32_t qgemm_fix(const kiln_qgemm_epi* e, int64_t k, int64_t j, int32_t dot,
                                int32_t rs) {
  const int32_t bz = e->b_zp[j * e->b_zp_step];
  int32_t v = dot - e->a_zp * e->colsum[j] - bz * rs + (int32_t)k * e->a_zp * bz;
  return e->bias ? v + e->bias[j] : v;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

/* A tile of 6 rows by 4 panels keeps 24 accumulators, 4 panel vectors and a broadcast in
 * AVX-512's 32 registers. */
enum { kRows = 6, kPanelCols = 16, kMaxPanels = 4 };
/* Panels whose column terms one call keeps at a time (its column blocks are at most this). */
enum { kTermPanels = 64 };

/* acc + the 4-byte dot products of unsigned a by signed b, the accumulator tied to its
 * register: through the intrinsic, gcc 12 copied every accumulator to and from a scratch
 * register around each vpdpbusd (24 moves per 12 products in the 6 x 32 tile). */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

static inline int32_t load4(const uint8_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

static inline __attribute__((always_inline)) void qgemm_tile_store(
    int rows, int panels, int64_t i0, int64_t j0, int64_t n, __m512i acc[kRows][kMaxPanels],
    const kiln_qgemm_epi* e, void* c, const int32_t* rowsum, const float* col_scale, int stream);

/* rows x (16 * panels) outputs at (i0, j0): every group of four k in one vpdpbusd per
 * accumulator, then the zero-point terms, bias and requantization on the vectors. */
static inline __attribute__((always_inline)) void qgemm_tile(
    int rows, int panels, int gathered, int64_t i0, int64_t j0, int64_t n, int64_t k,
    const uint8_t* const* ar, int64_t lda, const int64_t* seg, int64_t nseg, int64_t len,
    const int8_t* bp, const kiln_qgemm_epi* e, void* c, const int32_t* rowsum,
    const int32_t* col_fix, const float* col_scale, const int64_t* offs) {
  const int64_t k4 = (k + 3) / 4, kfull = k / 4;
  /* The accumulators start from the column terms (column_terms): with a small k the
   * epilogue, not the products, bounds the tile. The epilogue's other vectors load after the
   * products: live across them, they pushed the 24 accumulators out of the 32 registers. */
  __m512i acc[kRows][kMaxPanels];
  for (int p = 0; p < panels; ++p) {
    const __m512i fix = _mm512_loadu_si512((const void*)(col_fix + p * kPanelCols));
    for (int r = 0; r < rows; ++r) acc[r][p] = fix;
  }
  const int8_t* b0 = bp + (j0 / kPanelCols) * k4 * 64;
  __m512i v[kMaxPanels];
  /* Row r's k values: segment s is len bytes at ar[r] + seg[s] (one segment of k for a
   * matrix; a window row's taps for a convolution, read from its image in place). */
  int64_t t = 0;
  if (!gathered) {
    /* A matrix (rows lda apart, one segment): the rows' starts stay in registers as one base
     * and a stride. The segment loop kept reloading the six pointers (10% slower on large
     * products), and compiled into the same function it slowed this loop too: `gathered` is
     * a constant where the tile is inlined. */
    const uint8_t* a0 = ar[0];
    for (; t < kfull; ++t) {
      for (int p = 0; p < panels; ++p)
        v[p] = _mm512_loadu_si512((const void*)(b0 + (p * k4 + t) * 64));
      for (int r = 0; r < rows; ++r) {
        const __m512i av = _mm512_set1_epi32(load4(a0 + r * lda + t * 4));
        for (int p = 0; p < panels; ++p) acc[r][p] = dpbusd(acc[r][p], av, v[p]);
      }
    }
    nseg = 0;
  }
  if (offs) {
    /* Segmented rows as one loop over the groups of four k, each group's offset in a row
     * from a table: nested loops over segments and their groups left gcc 12 short of
     * registers, and it copied every accumulator in and out of a scratch register around
     * each vpdpbusd (a third slower than the matrix loop). */
    for (; t < kfull; ++t) {
      const int64_t o = offs[t];
      for (int p = 0; p < panels; ++p)
        v[p] = _mm512_loadu_si512((const void*)(b0 + (p * k4 + t) * 64));
      for (int r = 0; r < rows; ++r) {
        const __m512i av = _mm512_set1_epi32(load4(ar[r] + o));
        for (int p = 0; p < panels; ++p) acc[r][p] = dpbusd(acc[r][p], av, v[p]);
      }
    }
    nseg = 0;
  }
  for (int64_t sg = 0; sg < nseg; ++sg) {
    const int64_t so = seg[sg];
    for (int64_t u = 0; u < len / 4; ++u, ++t) {
      for (int p = 0; p < panels; ++p)
        v[p] = _mm512_loadu_si512((const void*)(b0 + (p * k4 + t) * 64));
      for (int r = 0; r < rows; ++r) {
        const __m512i av = _mm512_set1_epi32(load4(ar[r] + so + u * 4));
        for (int p = 0; p < panels; ++p) acc[r][p] = dpbusd(acc[r][p], av, v[p]);
      }
    }
  }
  if (kfull < k4) { /* the last group's missing rows of B are zero; A's bytes past k are not read
                     * (one segment only: a segmented k is whole groups) */
    for (int p = 0; p < panels; ++p)
      v[p] = _mm512_loadu_si512((const void*)(b0 + (p * k4 + kfull) * 64));
    const __mmask16 tail = (__mmask16)((1u << (k - kfull * 4)) - 1u);
    for (int r = 0; r < rows; ++r) {
      const __m512i av =
          _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(tail, ar[r] + seg[0] + kfull * 4));
      for (int p = 0; p < panels; ++p) acc[r][p] = dpbusd(acc[r][p], av, v[p]);
    }
  }
  qgemm_tile_store(rows, panels, i0, j0, n, acc, e, c, rowsum, col_scale, 0);
}

/* The epilogue of a tile's accumulators (column terms already in): the row terms, then the
 * int32, dequantized float32 or requantized byte stores. */
static inline __attribute__((always_inline)) void qgemm_tile_store(
    int rows, int panels, int64_t i0, int64_t j0, int64_t n, __m512i acc[kRows][kMaxPanels],
    const kiln_qgemm_epi* e, void* c, const int32_t* rowsum, const float* col_scale, int stream) {
  __m512i bz[kMaxPanels];
  __m512 scale[kMaxPanels];
  __mmask16 mask[kMaxPanels];
  for (int p = 0; p < panels; ++p) {
    const int64_t j = j0 + p * kPanelCols;
    const int64_t cols = n - j < kPanelCols ? n - j : kPanelCols;
    mask[p] = (__mmask16)((1u << cols) - 1u);
    scale[p] = _mm512_loadu_ps(col_scale + p * kPanelCols);
    bz[p] = _mm512_setzero_si512();
    if (rowsum) {
      bz[p] = e->b_zp_step ? _mm512_maskz_loadu_epi32(mask[p], e->b_zp + j)
                           : _mm512_set1_epi32(e->b_zp[0]);
    }
  }
  const kiln_requant16 rq = kiln_requant16_of(e);
  if (e->out_u8 == KILN_Q_OUT_F32) {
    /* Dequantized: acc * scale as float32, rows rsc floats apart. */
    for (int r = 0; r < rows; ++r) {
      for (int p = 0; p < panels; ++p) {
        __m512i v = acc[r][p];
        if (rowsum)
          v = _mm512_sub_epi32(v, _mm512_mullo_epi32(bz[p], _mm512_set1_epi32(rowsum[r])));
        const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(v), scale[p]);
        float* dst = (float*)c + (i0 + r) * e->rsc;
        if (e->csc == 1) {
          float* at = dst + j0 + p * kPanelCols;
          /* stream: whole aligned lines bypass the caches (no read for ownership). */
          if (stream && mask[p] == 0xFFFF && ((uintptr_t)at & 63) == 0) {
            _mm512_stream_ps(at, y);
          } else {
            _mm512_mask_storeu_ps(at, mask[p], y);
          }
        } else {
          float tmp[16];
          _mm512_storeu_ps(tmp, y);
          const int64_t j = j0 + p * kPanelCols;
          for (int64_t q = 0; q < n - j && q < kPanelCols; ++q) dst[(j + q) * e->csc] = tmp[q];
        }
      }
    }
    return;
  }
  if (e->scale && e->csc == 1) {
    /* Bytes with a row's columns consecutive (channels-last): the row's panels packed to one
     * 64-byte vector. Saturating packs clamp to the byte type as the int32 bounds did (a sum
     * past +-2^31 after scaling is clipped high in float, or converts to INT_MIN low), then
     * the bounds of a fused activation apply to the bytes: half the epilogue's instructions
     * of a per-panel conversion, which bounds the tile when k is small. */
    const int64_t cols = n - j0 < panels * kPanelCols ? n - j0 : panels * kPanelCols;
    const __mmask64 out_mask = cols == 64 ? ~0ULL : (1ULL << cols) - 1ULL;
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512 clip = _mm512_set1_ps(1e9f);
    const __m512i lo = _mm512_set1_epi8((char)e->lo), hi = _mm512_set1_epi8((char)e->hi);
    for (int r = 0; r < rows; ++r) {
      __m512i q[kMaxPanels];
      for (int p = 0; p < kMaxPanels; ++p) {
        if (p >= panels) {
          q[p] = _mm512_setzero_si512();
          continue;
        }
        __m512i v = acc[r][p];
        if (rowsum)
          v = _mm512_sub_epi32(v, _mm512_mullo_epi32(bz[p], _mm512_set1_epi32(rowsum[r])));
        const __m512 y = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), scale[p]), clip);
        q[p] = _mm512_add_epi32(_mm512_cvtps_epi32(y), rq.y_zp);
      }
      /* Lane L of the packs holds 4 values of each vector: q[p][4L..4L+3] at dword 4L + p. */
      const __m512i h01 = _mm512_packs_epi32(q[0], q[1]), h23 = _mm512_packs_epi32(q[2], q[3]);
      __m512i b;
      if (e->out_u8) {
        b = _mm512_packus_epi16(h01, h23);
        b = _mm512_min_epu8(_mm512_max_epu8(b, lo), hi);
      } else {
        b = _mm512_packs_epi16(h01, h23);
        b = _mm512_min_epi8(_mm512_max_epi8(b, lo), hi);
      }
      b = _mm512_permutexvar_epi32(order, b);
      _mm512_mask_storeu_epi8((uint8_t*)c + (i0 + r) * e->rsc + j0, out_mask, b);
    }
    return;
  }
  for (int p = 0; p < panels; ++p) {
    const int64_t j = j0 + p * kPanelCols;
    const int64_t cols = n - j < kPanelCols ? n - j : kPanelCols;
#if defined(__AVX512VBMI__)
    const int transposed = e->scale && e->rsc == 1 && e->csc != 1;
    __m512i lo4 = _mm512_setzero_si512(), hi2 = _mm512_setzero_si512();
#endif
    for (int r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      __m512i v = acc[r][p];
      /* Per row: -rowsum * b_zp (none for symmetric weights). */
      if (rowsum) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(bz[p], _mm512_set1_epi32(rowsum[r])));
      if (!e->scale) {
        if (e->csc == 1) {
          _mm512_mask_storeu_epi32((int32_t*)c + i * e->rsc + j, mask[p], v);
        } else {
          int32_t tmp[16];
          _mm512_storeu_si512((void*)tmp, v);
          for (int64_t q = 0; q < cols; ++q) ((int32_t*)c)[i * e->rsc + (j + q) * e->csc] = tmp[q];
        }
        continue;
      }
      /* rint(acc * scale) in the default rounding mode (ties to even), clamped in float first
       * so that no conversion overflows, then the zero point and the byte range. */
      __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(v), scale[p]);
      y = _mm512_min_ps(_mm512_max_ps(y, rq.lo_clip), rq.hi_clip);
      __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(y), rq.y_zp);
      q = _mm512_min_epi32(_mm512_max_epi32(q, rq.lo), rq.hi);
      const __m128i bytes = _mm512_cvtepi32_epi8(q);
#if defined(__AVX512VBMI__)
      if (transposed) {
        if (r < 4) {
          lo4 = _mm512_mask_broadcast_i32x4(lo4, (__mmask16)(0xFu << (4 * r)), bytes);
        } else {
          hi2 = _mm512_mask_broadcast_i32x4(hi2, (__mmask16)(0xFu << (4 * (r - 4))), bytes);
        }
        continue;
      }
#endif
      if (e->csc == 1) {
        _mm_mask_storeu_epi8((uint8_t*)c + i * e->rsc + j, mask[p], bytes);
      } else {
        uint8_t tmp[16];
        _mm_storeu_si128((__m128i*)tmp, bytes);
        for (int64_t s = 0; s < cols; ++s) ((uint8_t*)c)[i * e->rsc + (j + s) * e->csc] = tmp[s];
      }
    }
#if defined(__AVX512VBMI__)
    if (transposed) {
      static const uint8_t kIx[2][64] = {
          {0,  16, 32, 48, 64, 80, 80, 80, 1,  17, 33, 49, 65, 81, 81, 81, 2,  18, 34, 50, 66, 82,
           82, 82, 3,  19, 35, 51, 67, 83, 83, 83, 4,  20, 36, 52, 68, 84, 84, 84, 5,  21, 37, 53,
           69, 85, 85, 85, 6,  22, 38, 54, 70, 86, 86, 86, 7,  23, 39, 55, 71, 87, 87, 87},
          {8,  24, 40, 56, 72, 88, 88, 88, 9,  25, 41, 57, 73, 89, 89, 89, 10, 26, 42, 58, 74, 90,
           90, 90, 11, 27, 43, 59, 75, 91, 91, 91, 12, 28, 44, 60, 76, 92, 92, 92, 13, 29, 45, 61,
           77, 93, 93, 93, 14, 30, 46, 62, 78, 94, 94, 94, 15, 31, 47, 63, 79, 95, 95, 95}};
      for (int h = 0; h < 2 && 8 * h < cols; ++h) {
        const __m512i t =
            _mm512_permutex2var_epi8(lo4, _mm512_loadu_si512((const void*)kIx[h]), hi2);
        uint64_t lanes[8];
        _mm512_storeu_si512((void*)lanes, t);
        for (int64_t q = 8 * h; q < cols && q < 8 * h + 8; ++q) {
          uint8_t* dst = (uint8_t*)c + i0 + (j + q) * e->csc;
          const uint64_t v8 = lanes[q - 8 * h];
          if (rows == 6) {
            const uint32_t a4 = (uint32_t)v8;
            const uint16_t b2 = (uint16_t)(v8 >> 32);
            memcpy(dst, &a4, 4);
            memcpy(dst + 4, &b2, 2);
          } else {
            memcpy(dst, &v8, (size_t)rows);
          }
        }
      }
    }
#endif
  }
}

static void row_sums(int rows, const uint8_t* a, int64_t lda, int64_t k, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* p = a + r * lda;
    __m512i s = _mm512_setzero_si512();
    int64_t t = 0;
    for (; t + 64 <= k; t += 64) {
      s = _mm512_add_epi64(
          s, _mm512_sad_epu8(_mm512_loadu_si512((const void*)(p + t)), _mm512_setzero_si512()));
    }
    /* The tail in one masked load: a stem's k of 27 was 27 scalar adds per row. */
    if (t < k) {
      const __m512i tail = _mm512_maskz_loadu_epi8(~0ULL >> (64 - (k - t)), p + t);
      s = _mm512_add_epi64(s, _mm512_sad_epu8(tail, _mm512_setzero_si512()));
    }
    out[r] = (int32_t)_mm512_reduce_add_epi64(s);
  }
}

/* Columns [j0, j0 + 16 * panels): -a_zp * colsum + k * a_zp * b_zp + bias, and the scales
 * (0 past n), once per call rather than per tile. */
static void column_terms(int64_t j0, int64_t panels, int64_t n, int64_t k, const kiln_qgemm_epi* e,
                         int32_t* fix, float* scale) {
  for (int64_t q = 0; q < panels * kPanelCols; ++q) {
    const int64_t j = j0 + q;
    if (j >= n) {
      fix[q] = 0;
      scale[q] = 0.0f;
      continue;
    }
    const int32_t bz = e->b_zp[e->b_zp_step ? j : 0];
    fix[q] = (int32_t)k * e->a_zp * bz - e->a_zp * e->colsum[j] + (e->bias ? e->bias[j] : 0);
    scale[q] = e->scale ? e->scale[e->scale_step ? j : 0] : 0.0f;
  }
}

#define KILN_TILE_CASE(R, G)                                                                 \
  case R:                                                                                    \
    switch (panels) {                                                                        \
      case 4:                                                                                \
        qgemm_tile(R, 4, G, i0, j, n, k, ap, lda, seg, nseg, len, bp, e, c, rs, cf, cs, of); \
        break;                                                                               \
      case 3:                                                                                \
        qgemm_tile(R, 3, G, i0, j, n, k, ap, lda, seg, nseg, len, bp, e, c, rs, cf, cs, of); \
        break;                                                                               \
      case 2:                                                                                \
        qgemm_tile(R, 2, G, i0, j, n, k, ap, lda, seg, nseg, len, bp, e, c, rs, cf, cs, of); \
        break;                                                                               \
      default:                                                                               \
        qgemm_tile(R, 1, G, i0, j, n, k, ap, lda, seg, nseg, len, bp, e, c, rs, cf, cs, of); \
        break;                                                                               \
    }                                                                                        \
    break;

/* Row sums of segmented rows (see qgemm_tile). */
static void row_sums_segments(int rows, const uint8_t* const* ar, const int64_t* seg, int64_t nseg,
                              int64_t len, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    int32_t total = 0;
    for (int64_t sg = 0; sg < nseg; ++sg) {
      int32_t one;
      row_sums(1, ar[r] + seg[sg], len, len, &one);
      total += one;
    }
    out[r] = total;
  }
}

/* The product of m rows given as segments (row i: nseg segments of len bytes at
 * rows[i] + seg[s], or, with rows NULL, a + i*lda + seg[s]) by packed B. */
static void qgemm_segments(int64_t m, int64_t n, const uint8_t* a, int64_t lda,
                           const uint8_t* const* rows, const int64_t* seg, int64_t nseg,
                           int64_t len, const int8_t* bp, const kiln_qgemm_epi* e, void* c) {
  const int64_t k = nseg * len, k4 = (k + 3) / 4;
  /* Columns in blocks whose packed panels fit in about half of L2, so every row tile reuses
   * them from there. */
  int64_t block = (256 * 1024) / (k4 * 64 > 0 ? k4 * 64 : 1);
  block = block < kMaxPanels ? kMaxPanels : block - block % kMaxPanels;
  if (block > kTermPanels) block = kTermPanels;
  int32_t col_fix[kTermPanels * kPanelCols];
  float col_scale[kTermPanels * kPanelCols];
  const int64_t np = (n + kPanelCols - 1) / kPanelCols;
  /* Row sums only correct for B's zero points: symmetric weights (all zero, as onnxruntime's
   * quantizer writes them) need none. */
  int32_t any_bz = 0;
  for (int64_t j = 0; j < (e->b_zp_step ? n : 1); ++j) any_bz |= e->b_zp[j];
  const int zero_bz = any_bz == 0;
  /* Segmented rows: each group of four k's offset in its row (qgemm_tile), for k up to
   * kMaxOffsets (a 3x3 window of 512 channels is 1152 groups). */
  enum { kMaxOffsets = 4096 };
  int64_t offs_table[kMaxOffsets];
  const int64_t* of = 0;
  if (rows && len % 4 == 0 && k4 <= kMaxOffsets) {
    const int64_t per = len / 4;
    for (int64_t t = 0; t < k4; ++t) offs_table[t] = seg[t / per] + (t % per) * 4;
    of = offs_table;
  }
  for (int64_t p0 = 0; p0 < np; p0 += block) {
    const int64_t p1 = p0 + block < np ? p0 + block : np;
    column_terms(p0 * kPanelCols, p1 - p0, n, k, e, col_fix, col_scale);
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int rows_here = (int)(m - i0 < kRows ? m - i0 : kRows);
      const uint8_t* ap[kRows];
      for (int r = 0; r < rows_here; ++r) ap[r] = rows ? rows[i0 + r] : a + (i0 + r) * lda;
      int32_t sums[kRows] = {0};
      const int32_t* rs = zero_bz ? 0 : sums;
      if (rs) row_sums_segments(rows_here, ap, seg, nseg, len, sums);
      for (int64_t p = p0; p < p1; p += kMaxPanels) {
        const int panels = (int)(p1 - p < kMaxPanels ? p1 - p : kMaxPanels);
        const int64_t j = p * kPanelCols;
        const int32_t* cf = col_fix + (p - p0) * kPanelCols;
        const float* cs = col_scale + (p - p0) * kPanelCols;
        if (rows) {
          switch (rows_here) {
            KILN_TILE_CASE(1, 1)
            KILN_TILE_CASE(2, 1)
            KILN_TILE_CASE(3, 1)
            KILN_TILE_CASE(4, 1)
            KILN_TILE_CASE(5, 1)
            KILN_TILE_CASE(6, 1)
            default:
              break;
          }
        } else {
          switch (rows_here) {
            KILN_TILE_CASE(1, 0)
            KILN_TILE_CASE(2, 0)
            KILN_TILE_CASE(3, 0)
            KILN_TILE_CASE(4, 0)
            KILN_TILE_CASE(5, 0)
            KILN_TILE_CASE(6, 0)
            default:
              break;
          }
        }
      }
    }
  }
}

#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
/* AMX (Sapphire Rapids and later): tdpbusd multiplies a 16 x 64-byte tile of A by a tile of
 * 16 groups of four k by 16 columns of B, into a 16 x 16 int32 tile, 1024 multiply-adds an
 * instruction where vpdpbusd does 64. The packed panels of B (qpack.c: per panel, each group
 * of four k as 64 bytes) are already tiles of B, 64 bytes a row. Blocks of 32 rows by 2
 * panels keep four accumulator tiles, two of A and two of B; each block's sums go through a
 * buffer to the same epilogue as the vpdpbusd tiles (qgemm_tile_store). The caller takes at
 * least 16 rows; the rows past a multiple of 16 are vpdpbusd's.
 *
 * A k that is not a multiple of 64 (a 1x1 convolution of 24, 40 or 96 channels) ends in a
 * partial chunk. Its B tile comes from a copy of the panel's last groups, zero past them, so
 * the A tile can read whole 64-byte rows: the bytes past k in a row are the next row's (or
 * the packed zeros of a partial group), and each meets a zero weight. Only where such a read
 * would run past A's last row (a_rows of them) are the rows copied out first. */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} qgemm_tilecfg;

static void qgemm_amx(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda,
                      int64_t a_rows, const int8_t* bp, const kiln_qgemm_epi* e, void* c) {
  qgemm_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  const int64_t k4 = (k + 3) / 4, np = (n + kPanelCols - 1) / kPanelCols;
  /* The last chunk's start and its groups of four k (16 when k is a multiple of 64). */
  const int64_t t_last = (k4 - 1) / 16 * 64, g_last = k4 - t_last / 4;
  /* A's last byte the product may read, and the partial chunk's copies. */
  const int64_t a_end = (a_rows - 1) * lda + k;
  int8_t b_tail[2][16 * 64];
  uint8_t a_tail[32 * 64];
  int32_t any_bz = 0;
  for (int64_t j = 0; j < (e->b_zp_step ? n : 1); ++j) any_bz |= e->b_zp[j];
  int32_t col_fix[2 * kPanelCols];
  float col_scale[2 * kPanelCols];
  int32_t sums[32];
  int32_t buf[32][2 * kPanelCols];
  /* Float32 results larger than the caches (a language model's logits, 25 MB for GPT-2's
   * head) are stored past them: each line's read for ownership was a fifth of the kernel's
   * time there. Smaller ones stay cached for whatever reads them next. */
  const int stream = e->scale && e->out_u8 == KILN_Q_OUT_F32 && e->csc == 1 &&
                     m * n * (int64_t)sizeof(float) > ((int64_t)4 << 20);
  for (int64_t p = 0; p < np; p += 2) {
    const int panels = np - p >= 2 ? 2 : 1;
    const int64_t j0 = p * kPanelCols;
    column_terms(j0, panels, n, k, e, col_fix, col_scale);
    const int8_t* b0 = bp + p * k4 * 64;
    const int8_t* b1 = b0 + k4 * 64;
    if (g_last < 16) {
      for (int q = 0; q < panels; ++q) {
        memset(b_tail[q], 0, sizeof b_tail[q]);
        memcpy(b_tail[q], (q ? b1 : b0) + t_last * 16, (size_t)(g_last * 64));
      }
    }
    for (int64_t i0 = 0; i0 < m; i0 += 32) {
      const int two = m - i0 >= 32;
      const uint8_t* a0 = a + i0 * lda;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      /* The first row block brings the next panels in from memory while this one's products
       * run: a language model's head streams 38 MB of B, which tile loads alone left waiting. */
      const int8_t* next = i0 == 0 && p + 2 < np ? bp + (p + 2) * k4 * 64 : 0;
      const int64_t next_bytes = (np - p - 2 >= 2 ? 2 : 1) * k4 * 64;
      for (int64_t t = 0; t < k; t += 64) {
        if (next) {
          const int64_t o1 = (t + 64) * next_bytes / k;
          for (int64_t o = t * next_bytes / k; o < o1 && o < next_bytes; o += 64)
            _mm_prefetch((const char*)next + o, _MM_HINT_T1);
        }
        const int partial = t == t_last && g_last < 16;
        const uint8_t* at = a0 + t;
        int64_t as = lda;
        if (partial && (i0 + (two ? 31 : 15)) * lda + t + 64 > a_end) {
          const int rows = two ? 32 : 16;
          memset(a_tail, 0, sizeof a_tail);
          for (int r = 0; r < rows; ++r) memcpy(a_tail + r * 64, at + r * lda, (size_t)(k - t));
          at = a_tail;
          as = 64;
        }
        const int8_t* bt0 = partial ? b_tail[0] : b0 + t * 16;
        const int8_t* bt1 = partial ? b_tail[1] : b1 + t * 16;
        _tile_loadd(4, at, as);
        _tile_loadd(6, bt0, 64);
        _tile_dpbusd(0, 4, 6);
        if (panels == 2) {
          _tile_loadd(7, bt1, 64);
          _tile_dpbusd(1, 4, 7);
        }
        if (two) {
          _tile_loadd(5, at + 16 * as, as);
          _tile_dpbusd(2, 5, 6);
          if (panels == 2) _tile_dpbusd(3, 5, 7);
        }
      }
      _tile_stored(0, &buf[0][0], sizeof buf[0]);
      if (panels == 2) _tile_stored(1, &buf[0][kPanelCols], sizeof buf[0]);
      if (two) {
        _tile_stored(2, &buf[16][0], sizeof buf[0]);
        if (panels == 2) _tile_stored(3, &buf[16][kPanelCols], sizeof buf[0]);
      }
      const int rows_here = two ? 32 : 16;
      if (any_bz) row_sums(rows_here, a0, lda, k, sums);
      for (int r0 = 0; r0 < rows_here; r0 += kRows) {
        const int rows = rows_here - r0 < kRows ? rows_here - r0 : kRows;
        __m512i acc[kRows][kMaxPanels];
        for (int r = 0; r < rows; ++r) {
          for (int q = 0; q < panels; ++q) {
            acc[r][q] =
                _mm512_add_epi32(_mm512_loadu_si512((const void*)&buf[r0 + r][q * kPanelCols]),
                                 _mm512_loadu_si512((const void*)(col_fix + q * kPanelCols)));
          }
        }
        qgemm_tile_store(rows, panels, i0 + r0, j0, n, acc, e, c, any_bz ? sums + r0 : 0, col_scale,
                         stream);
      }
    }
  }
  _tile_release();
  if (stream) _mm_sfence(); /* streamed stores are ordered before whatever signals the end */
}
#endif

void KILN_QGEMM_FN(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda, const int8_t* bp,
                   const kiln_qgemm_epi* e, void* c) {
  const int64_t seg = 0;
#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
  /* Below 64 (a chunk mostly of zeros), each output's few products cost less on vpdpbusd
   * than the tile's trip through the buffer: qgemm_bench's 1x1 16->96 and 40->240 ran
   * 1.2x slower on tiles, 144->24 and 672->112 2-2.4x faster. */
  if (k >= 64 && m >= 16) {
    const int64_t m16 = m - m % 16;
    qgemm_amx(m16, n, k, a, lda, m, bp, e, c);
    if (m16 == m) return;
    /* The last rows by vpdpbusd, from their own row of the output (int32 and float32
     * outputs are 4 bytes an element, requantized ones 1). */
    const int64_t size = !e->scale || e->out_u8 == KILN_Q_OUT_F32 ? 4 : 1;
    qgemm_segments(m - m16, n, a + m16 * lda, lda, 0, &seg, 1, k, bp, e,
                   (char*)c + m16 * e->rsc * size);
    return;
  }
#endif
  qgemm_segments(m, n, a, lda, 0, &seg, 1, k, bp, e, c);
}

void KILN_CAT(kiln_qgemm_u8s8_gather,
              KILN_ISA)(int64_t m, int64_t n, int64_t len, int64_t nseg, const uint8_t* const* rows,
                        const int64_t* seg, const int8_t* bp, const kiln_qgemm_epi* e, void* c) {
  qgemm_segments(m, n, 0, 0, rows, seg, nseg, len, bp, e, c);
}

#elif defined(__AVX2__)
#include <immintrin.h>

/* AVX2 without VNNI. vpmaddubsw would multiply the bytes directly but saturates its 16-bit
 * pair sums (255 * 127 * 2 > 32767, a wrong answer on full-range data), so both operands are
 * widened to int16 and vpmaddwd sums each pair of products into int32, which cannot
 * overflow. A tile is 2 rows by one 16-column panel: per group of 4 k, the panel's 64 bytes
 * widen once (four registers of 4 columns x 4 k) and serve both rows; each row's 4 bytes
 * widen to (a0 a1 a2 a3) x 4. vpmaddwd leaves two partial sums per column (k 0-1 and 2-3)
 * in adjacent lanes, added at the end. */
/* One tile of `rows` (1 or 2, a constant where it is inlined) rows by one panel. */
static inline __attribute__((always_inline)) void avx2_tile(int rows, int64_t i0, int64_t j0,
                                                            int64_t n, int64_t k, const uint8_t* a,
                                                            int64_t lda, const int8_t* panel,
                                                            const kiln_qgemm_epi* e, void* c,
                                                            const int32_t* rs) {
  const int64_t k4 = (k + 3) / 4, kfull = k / 4;
  __m256i acc[2][4];
  for (int r = 0; r < rows; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_si256();
  for (int64_t t = 0; t < k4; ++t) {
    const __m256i lo = _mm256_loadu_si256((const __m256i*)(panel + t * 64));
    const __m256i hi = _mm256_loadu_si256((const __m256i*)(panel + t * 64 + 32));
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(lo));
    const __m256i b1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(lo, 1));
    const __m256i b2 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(hi));
    const __m256i b3 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(hi, 1));
    for (int r = 0; r < rows; ++r) {
      const uint8_t* ar = a + (i0 + r) * lda + t * 4;
      int32_t four = 0;
      if (t < kfull) {
        memcpy(&four, ar, 4);
      } else { /* the last group's bytes past k are not read (its rows of B are zero) */
        for (int64_t x = 0; x < k - kfull * 4; ++x) ((uint8_t*)&four)[x] = ar[x];
      }
      const __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(four));
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
      acc[r][2] = _mm256_add_epi32(acc[r][2], _mm256_madd_epi16(av, b2));
      acc[r][3] = _mm256_add_epi32(acc[r][3], _mm256_madd_epi16(av, b3));
    }
  }
  const int64_t cols = n - j0 < 16 ? n - j0 : 16;
  for (int r = 0; r < rows; ++r) {
    int32_t part[32];
    for (int q = 0; q < 4; ++q) _mm256_storeu_si256((__m256i*)(part + 8 * q), acc[r][q]);
    /* Register q holds columns 4q..4q+3, two partial sums each. */
    for (int64_t col = 0; col < cols; ++col) {
      const int32_t dot = part[2 * col] + part[2 * col + 1];
      qgemm_store(e, c, i0 + r, j0 + col, qgemm_fix(e, k, j0 + col, dot, rs[r]));
    }
  }
}

void KILN_QGEMM_FN(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda, const int8_t* bp,
                   const kiln_qgemm_epi* e, void* c) {
  const int64_t k4 = (k + 3) / 4;
  for (int64_t i0 = 0; i0 < m; i0 += 2) {
    const int rows = m - i0 < 2 ? 1 : 2;
    int32_t rs[2] = {0, 0};
    for (int r = 0; r < rows; ++r)
      for (int64_t t = 0; t < k; ++t) rs[r] += a[(i0 + r) * lda + t];
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int8_t* panel = bp + (j0 / 16) * k4 * 64;
      if (rows == 2) {
        avx2_tile(2, i0, j0, n, k, a, lda, panel, e, c, rs);
      } else {
        avx2_tile(1, i0, j0, n, k, a, lda, panel, e, c, rs);
      }
    }
  }
}

#else /* plain C */

void KILN_QGEMM_FN(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda, const int8_t* bp,
                   const kiln_qgemm_epi* e, void* c) {
  const int64_t k4 = (k + 3) / 4;
  int32_t acc[16];
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* ar = a + i * lda;
    int32_t rs = 0;
    for (int64_t t = 0; t < k; ++t) rs += ar[t];
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int8_t* panel = bp + (j0 / 16) * k4 * 64;
      for (int q = 0; q < 16; ++q) acc[q] = 0;
      for (int64_t t = 0; t < k; ++t) {
        const int32_t av = ar[t];
        const int8_t* row = panel + (t / 4) * 64 + t % 4;
        for (int q = 0; q < 16; ++q) acc[q] += av * (int32_t)row[q * 4];
      }
      const int64_t cols = n - j0 < 16 ? n - j0 : 16;
      for (int64_t q = 0; q < cols; ++q) {
        qgemm_store(e, c, i, j0 + q, qgemm_fix(e, k, j0 + q, acc[q], rs));
      }
    }
  }
}

#endif
