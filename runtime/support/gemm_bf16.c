/* The bfloat16 packed GEMM behind kiln_support.gemm_packed_bf16 (module_abi.h states its
 * contract): float32 A and C, B packed as bfloat16 pairs of k. Compiled once per vector ISA
 * like gemm_tile.c, and once more for AVX512-BF16 (KILN_ISA avx512bf16), whose vdpbf16ps
 * multiplies 32 bfloat16 pairs and adds them into 16 float sums per instruction: twice the
 * multiply-adds of a float32 FMA, from half the bytes of B. The other copies are the float32
 * form, all a CPU without AVX512-BF16 has (and faster where vdpbf16ps issues at half the FMA's
 * rate): the same bfloat16 values widened to float32 and multiplied with FMAs, each pair's odd
 * k first as vdpbf16ps adds them. A product of two bfloat16 is exact in float32, so both
 * forms round the same sums in the same order and give the same bits, but for subnormals,
 * which vdpbf16ps flushes to zero.
 *
 * A block of A's rows (MR x KC) is rounded to bfloat16 once per column chunk, into a buffer
 * on the stack, whose values are then the broadcasts of the block loop. */
#include <stdint.h>
#include <string.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/gemm_bf16.h"
#include "runtime/support/kiln_clamp.h"
#include "runtime/support/kiln_half.h"

#if !defined(KILN_ISA)
#error "gemm_bf16.c is compiled with KILN_ISA defined"
#endif
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

/* The block loops unrolled whole, so the sums stay in registers. */
#define KILN_B_UNROLL _Pragma("GCC unroll 8")
#define KILN_B_CAT2(a, b) a##b
#define KILN_B_CAT(a, b) KILN_B_CAT2(a, b)

/* Panels per block, and per block of one or two rows (more sums in flight against the
 * multiply's latency): 6 x 4 sums fill AVX-512's registers; with 16 registers (a panel is two
 * AVX2 vectors) 6 x 2 do. */
#if defined(__AVX512BF16__) || KILN_VEC_BYTES >= 64
#define KILN_BF_NV 4
#define KILN_BF_NV_WIDE 8
#else
#define KILN_BF_NV 1
#define KILN_BF_NV_WIDE 2
#endif
enum {
  BP = 16, /* columns per panel: 64 bytes of float32 output */
  BMR = 6, /* rows per block */
  BNV = KILN_BF_NV,
  BNV_WIDE = KILN_BF_NV_WIDE,
  BKCP = 256, /* pairs of k per block: A's 6 x 512 values in L1 */
  BNC = 256   /* columns per chunk: its 256 pairs x 256 columns of B (256 KB) in L2 */
};
_Static_assert(BP * 4 == KILN_GEMM_PANEL_BYTES, "a bfloat16 panel is one float32 panel wide");
_Static_assert(BNC % (BNV_WIDE * BP) == 0, "a chunk is whole wide blocks");

#if defined(__AVX512BF16__)
/* A block's row as vdpbf16ps broadcasts them: bfloat16 pairs, the even k in the low half. */
typedef uint32_t brow;
enum { BROW = BKCP };
#else
/* A block's row as the float32 fallback broadcasts them: each bfloat16 widened, even k first. */
typedef float brow;
enum { BROW = 2 * BKCP };
typedef float fvec __attribute__((vector_size(KILN_VEC_BYTES)));
typedef float fvecu __attribute__((vector_size(KILN_VEC_BYTES), aligned(4)));
typedef uint32_t uvec __attribute__((vector_size(KILN_VEC_BYTES)));
typedef uint32_t uvecu __attribute__((vector_size(KILN_VEC_BYTES), aligned(4)));
typedef int32_t ivec __attribute__((vector_size(KILN_VEC_BYTES)));
enum { VW = KILN_VEC_BYTES / 4, VPP = BP / VW };
#endif

/* Row r of A, k in [k0, k0 + 2 * kp), rounded to bfloat16 (brow above); k past the end is
 * zero, as B's padding is. */
static void round_row(const float* a, int64_t csa, int64_t k0, int64_t k, int64_t kp, brow* out) {
  int64_t t = 0;
#if defined(__AVX512BF16__)
  if (csa == 1) {
    /* vcvtne2ps2bf16 rounds to nearest even, as kiln_f32_to_bf16 does. */
    for (; t + 16 <= kp && k0 + 2 * t + 32 <= k; t += 16) {
      const __m512 lo = _mm512_loadu_ps(a + k0 + 2 * t);
      const __m512 hi = _mm512_loadu_ps(a + k0 + 2 * t + 16);
      _mm512_storeu_si512((void*)(out + t), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
#else
  if (csa == 1) {
    /* kiln_f32_to_bf16 lane by lane: the dropped half rounds to nearest, ties to even; a NaN
     * is kept, quiet. The row's floats are in k order already. */
    for (; t + VW / 2 <= kp && k0 + 2 * t + VW <= k; t += VW / 2) {
      const uvec u = *(const uvecu*)(a + k0 + 2 * t);
      const uvec r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      const uvec nan = (uvec)((u & 0x7fffffffu) > 0x7f800000u);
      *(uvecu*)(out + 2 * t) = (((u | 0x400000u) & 0xffff0000u) & nan) | (r & ~nan);
    }
  }
#endif
  for (; t < kp; ++t) {
    const int64_t i = k0 + 2 * t;
    const uint16_t e = i < k ? kiln_f32_to_bf16(a[i * csa]) : 0;
    const uint16_t o = i + 1 < k ? kiln_f32_to_bf16(a[(i + 1) * csa]) : 0;
#if defined(__AVX512BF16__)
    out[t] = e | (uint32_t)o << 16;
#else
    out[2 * t] = kiln_bf16_to_f32(e);
    out[2 * t + 1] = kiln_bf16_to_f32(o);
#endif
  }
}

/* What a block's store adds and clamps. */
typedef struct {
  float alpha, beta;
  int first; /* the first k block: C is overwritten (beta * C joins) */
  int fin;   /* the last k block: the bias and the clamp join */
  const float* bias;
  int64_t rsb, csb;
  float lo, hi;
} bepi;

static inline float bstore_one(float v, float* d, int64_t r, int64_t j, const bepi* e) {
  float x = !e->first ? *d + v : e->beta == 0 ? v : v + e->beta * *d;
  if (e->fin) {
    if (e->bias) x += e->bias[r * e->rsb + j * e->csb];
    x = x < e->lo ? e->lo : x;
    x = x > e->hi ? e->hi : x;
  }
  return x;
}

#if defined(__AVX512BF16__)
/* Rows [0, mr) x panels [0, nv) of C from kp pairs: b is the first panel's row at this k
 * block, pk elements from one panel to the next; columns from `cols` on are not stored. */
static inline __attribute__((always_inline)) void bblock(const int mr, const int nv, int64_t kp,
                                                         const brow* ap, const uint16_t* b,
                                                         int64_t pk, float* c, int64_t ldc,
                                                         int64_t cols, const bepi* e) {
  __m512 acc[BMR][BNV_WIDE];
  KILN_B_UNROLL for (int r = 0; r < mr; ++r) KILN_B_UNROLL for (int v = 0; v < nv; ++v) acc[r][v] =
      _mm512_setzero_ps();
  for (int64_t t = 0; t < kp; ++t) {
    __m512bh x[BNV_WIDE];
    KILN_B_UNROLL for (int v = 0; v < nv; ++v) x[v] =
        (__m512bh)_mm512_loadu_si512(b + v * pk + t * 2 * BP);
    KILN_B_UNROLL for (int r = 0; r < mr; ++r) {
      const __m512bh as = (__m512bh)_mm512_set1_epi32((int)ap[r * BROW + t]);
      KILN_B_UNROLL for (int v = 0; v < nv; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], as, x[v]);
    }
  }
  for (int r = 0; r < mr; ++r) {
    KILN_B_UNROLL for (int v = 0; v < nv; ++v) {
      float* d = c + r * ldc + v * BP;
      const int64_t left = cols - (int64_t)v * BP;
      const __mmask16 keep = left >= BP ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      __m512 x = _mm512_mul_ps(acc[r][v], _mm512_set1_ps(e->alpha));
      if (!e->first) {
        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, d));
      } else if (e->beta != 0) {
        x = _mm512_fmadd_ps(_mm512_set1_ps(e->beta), _mm512_maskz_loadu_ps(keep, d), x);
      }
      if (e->fin) {
        if (e->bias) {
          const float* bv = e->bias + r * e->rsb + (int64_t)v * BP * e->csb;
          if (e->csb == 0) {
            x = _mm512_add_ps(x, _mm512_set1_ps(bv[0]));
          } else if (e->csb == 1) {
            x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, bv));
          } else {
            float g[BP] = {0};
            for (int i = 0; i < BP && i < left; ++i) g[i] = bv[i * e->csb];
            x = _mm512_add_ps(x, _mm512_loadu_ps(g));
          }
        }
        /* x < lo ? lo : x, then x > hi ? hi : x: a NaN compares false and stays, as the
         * ABI's clamp has it. */
        x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(e->lo), _CMP_LT_OQ),
                               _mm512_set1_ps(e->lo));
        x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(e->hi), _CMP_GT_OQ),
                               _mm512_set1_ps(e->hi));
      }
      _mm512_mask_storeu_ps(d, keep, x);
    }
  }
}
#else
KILN_CLAMP_FN(bclamp, fvec, ivec, float)

/* The float32 fallback of the block above. A arrives as floats (each a bfloat16 widened:
 * even k, odd k), so its broadcasts come from memory; each row of a panel's pairs is read
 * twice, widened to its even k (the low halves shifted up) and then its odd k (the high
 * halves, the low cleared), so only one set of B vectors is live beside the sums. */
static inline __attribute__((always_inline)) void bblock(const int mr, const int nv, int64_t kp,
                                                         const brow* ap, const uint16_t* b,
                                                         int64_t pk, float* c, int64_t ldc,
                                                         int64_t cols, const bepi* e) {
  fvec acc[BMR][BNV_WIDE * VPP];
  const int nvv = nv * VPP;
  KILN_B_UNROLL for (int r = 0; r < mr; ++r) KILN_B_UNROLL for (int v = 0; v < nvv; ++v) acc[r][v] =
      (fvec){0};
  for (int64_t t = 0; t < kp; ++t) {
    /* The odd k first, as vdpbf16ps adds them: each product of two bfloat16 is exact in
     * float32, so both add the same values in the same order, and give the same bits (but for
     * subnormals, which vdpbf16ps flushes). */
    KILN_B_UNROLL for (int h = 1; h >= 0; --h) {
      fvec x[BNV_WIDE * VPP];
      KILN_B_UNROLL for (int v = 0; v < nvv; ++v) {
        const uvec w = *(const uvecu*)(b + v / VPP * pk + t * 2 * BP + v % VPP * 2 * VW);
        x[v] = (fvec)(h ? w & 0xffff0000u : w << 16);
      }
      KILN_B_UNROLL for (int r = 0; r < mr; ++r) {
        const fvec s = ap[r * BROW + 2 * t + h] + -(fvec){0};
        KILN_B_UNROLL for (int v = 0; v < nvv; ++v) acc[r][v] += s * x[v];
      }
    }
  }
  KILN_B_UNROLL for (int r = 0; r < mr; ++r) {
    KILN_B_UNROLL for (int v = 0; v < nvv; ++v) {
      float* d = c + r * ldc + v * VW;
      const fvec val = acc[r][v] * e->alpha;
      if ((int64_t)(v + 1) * VW <= cols) {
        fvecu* dv = (fvecu*)d;
        fvec x = !e->first ? *dv + val : e->beta == 0 ? val : val + e->beta * *dv;
        if (e->fin) {
          if (e->bias) {
            const float* bv = e->bias + r * e->rsb + (int64_t)v * VW * e->csb;
            if (e->csb == 0)
              x += bv[0] + -(fvec){0};
            else if (e->csb == 1)
              x += *(const fvecu*)bv;
            else
              for (int i = 0; i < VW; ++i) x[i] += bv[i * e->csb];
          }
          x = bclamp(x, e->lo, e->hi);
        }
        *dv = x;
      } else {
        for (int i = 0; i < VW && (int64_t)v * VW + i < cols; ++i)
          d[i] = bstore_one(val[i], d + i, r, (int64_t)v * VW + i, e);
      }
    }
  }
}
#endif

/* A pair past the block widths still needs its label, but is never reached; it forwards to
 * nv = 1, which keeps it small. */
#define KILN_BCASE(MR, NV)                                                                 \
  case MR * 16 + NV:                                                                       \
    bblock(MR, NV <= (MR <= 2 ? BNV_WIDE : BNV) ? NV : 1, kp, ap, b, pk, c, ldc, cols, e); \
    break;
#define KILN_BCASES4(MR) KILN_BCASE(MR, 1) KILN_BCASE(MR, 2) KILN_BCASE(MR, 3) KILN_BCASE(MR, 4)
#define KILN_BCASES8(MR) \
  KILN_BCASES4(MR) KILN_BCASE(MR, 5) KILN_BCASE(MR, 6) KILN_BCASE(MR, 7) KILN_BCASE(MR, 8)

/* Calls the block kernel with mr and nv as constants, so each pair gets its own code. */
static void bdispatch(int mr, int nv, int64_t kp, const brow* ap, const uint16_t* b, int64_t pk,
                      float* c, int64_t ldc, int64_t cols, const bepi* e) {
  switch (mr * 16 + nv) {
    KILN_BCASES8(1)
    KILN_BCASES8(2)
    KILN_BCASES4(3)
    KILN_BCASES4(4)
    KILN_BCASES4(5)
    KILN_BCASES4(6)
    default:
      break;
  }
}

void KILN_B_CAT(kiln_gemm_packed_bf16_,
                KILN_ISA)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa,
                          int64_t csa, const uint16_t* bp, float beta, float* c, int64_t ldc,
                          const float* bias, int64_t rsb, int64_t csb, float lo, float hi) {
  if (m <= 0 || n <= 0) return;
  const int64_t k2 = (k + 1) / 2; /* rows of pairs in a panel */
  if (k <= 0) {
    const bepi e = {alpha, beta, 1, 1, bias, rsb, csb, lo, hi};
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = bstore_one(0, c + i * ldc + j, i, j, &e);
    return;
  }
  brow ap[BMR * BROW] __attribute__((aligned(64)));
  for (int64_t t0 = 0; t0 < k2; t0 += BKCP) {
    const int64_t kp = k2 - t0 < BKCP ? k2 - t0 : BKCP;
    for (int64_t n0 = 0; n0 < n; n0 += BNC) {
      const int64_t n1 = n - n0 < BNC ? n : n0 + BNC;
      for (int64_t r0 = 0; r0 < m; r0 += BMR) {
        const int mr = (int)(m - r0 < BMR ? m - r0 : BMR);
        for (int r = 0; r < mr; ++r)
          round_row(a + (r0 + r) * rsa, csa, 2 * t0, k, kp, ap + r * BROW);
        const int wide = mr <= 2 ? BNV_WIDE : BNV;
        for (int64_t j0 = n0; j0 < n1; j0 += wide * BP) {
          const int64_t cols = n - j0;
          const int nv = (int)((cols + BP - 1) / BP < wide ? (cols + BP - 1) / BP : wide);
          const bepi e = {
              alpha, beta, t0 == 0, t0 + kp == k2, bias ? bias + r0 * rsb + j0 * csb : 0, rsb,
              csb,   lo,   hi};
          bdispatch(mr, nv, kp, ap, bp + j0 / BP * k2 * 2 * BP + t0 * 2 * BP, k2 * 2 * BP,
                    c + r0 * ldc + j0, ldc, cols, &e);
        }
      }
    }
  }
}
