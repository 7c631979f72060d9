/* The packed-panel GEMM behind kiln_support.gemm_packed_f32/f64. This file is compiled once
 * per vector ISA (KILN_ISA: avx512, avx2 or base), each copy with that ISA's flags; support.c
 * picks the copy the running CPU can execute. B arrives packed in panels of
 * KILN_GEMM_PANEL_BYTES columns (module_abi.h): one cache line per k step, so a block's slice
 * of B is one sequential stream. A block keeps MR x NV output vectors in registers while it
 * walks k: NV vector loads and MR broadcasts of A buy MR * NV fused multiply-adds. Its NV
 * vectors share a panel where vectors are narrower than a panel (AVX2: two per panel) and take
 * one panel each where they are as wide (AVX-512).
 *
 * The loops keep a row block's slice of A (MR rows x KC steps) in L1 while a chunk of NC
 * columns passes under it, the chunk's KC x NC slice of B in L2. (The order before this kept a
 * column block's slice of B in L1 and streamed A's rows from L2 under it: on the Zen 3 host,
 * one thread, the transformer shapes of the zoo ran 5-12% slower that way; its 16 KB of B
 * per block shares L1 with whatever else the core runs.) */
#include <stdint.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/gemm_tile.h"
#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA) || !defined(KILN_VEC_BYTES) || !defined(KILN_VEC_REGS)
#error "gemm_tile.c is compiled with KILN_ISA, KILN_VEC_BYTES and KILN_VEC_REGS defined"
#endif
#if KILN_GEMM_PANEL_BYTES % KILN_VEC_BYTES != 0
#error "a packed panel holds whole vectors"
#endif

#define KILN_CAT2(a, b) a##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)
/* Rows per block: 6 x 4 vectors fill AVX-512's 32 registers; with AVX2's 16, 6 x 2 sums, the
 * two panel vectors and a broadcast make 15, and gcc 12 keeps them all in registers (no
 * stack access in the loop; an older form of this loop spilled one and kept 5 rows). Six
 * rows measured 3-5% faster than five on one Zen 3 core (gemm_bench, best of six runs). */
#define KILN_GEMM_MR 6
#define KILN_GEMM_MR_MAX 6
#define KILN_GEMM_NV_MAX 8
/* Vectors per row of a block (a column block's width): MR x CBV sums, the CBV panel vectors
 * and one broadcast must fit the register file. Column blocks are whole panels or a whole
 * fraction of one. */
#define KILN_GEMM_CBV (KILN_VEC_REGS >= 32 ? 4 : 2)
/* A block of one or two rows (a batch-1 classifier's matrix-vector product, the last row of
 * 49 or 193) takes 8 / rows vectors per row: its sums are the only dependency chains, and two
 * of them (one row x CBV) left the FMA units waiting on their latency: MNASNet's 1280 -> 1000
 * head ran at 7 GFLOP/s. Each element still sums its k terms in the same order, so a row's
 * result does not depend on the block it falls in. */
#define KILN_GEMM_WIDE(mr) ((mr) <= 2 && 8 / (mr) > KILN_GEMM_CBV ? 8 / (mr) : KILN_GEMM_CBV)
/* k is walked in blocks of KC steps and the columns in chunks of NC: a row block's slice of
 * A (MR x KC: 12 KB of float) stays in L1, a chunk's slice of B (KC x NC: 256 KB of float)
 * in L2. Fewer, longer k blocks also mean fewer passes of the sums through C: KC = 512 ran
 * 3-5% faster than 256 on the zoo's transformer shapes (K = 384, 1536). */
/* Blocks of 4 rows and more ask for their panels' lines KILN_GEMM_PFD steps ahead. Each
 * row block walks its B slice again from L2, a line per panel per step, and the first walks
 * it from L3 or memory; the hardware's streams restart at every page. A transformer layer
 * whose weights had left L2 (BERT's 128 x 3072 x 768, one thread) ran 20% slower than the
 * same product on weights still there; with the prefetch BERT and GPT-2 ran 4% faster
 * (alternating onnx_bench runs; 8 steps ahead gained less, 32 no more). Smaller blocks
 * stream B at the speed memory gives it and are left alone. */
#define KILN_GEMM_PFD 16
#define KILN_GEMM_KC_BYTES 2048
#define KILN_GEMM_NC_BYTES 512
/* A broadcast: s + -0.0 is s for every s, so it folds to one vbroadcastss where (V){0} + s
 * costs a scalar add first (+0.0 would turn -0.0 into +0.0). */
#define KILN_SPLAT(V, s) ((s) + -(V){0})

#define KILN_GEMM_TILE(T, IT, S)                                                                   \
  typedef T KILN_CAT(gvec_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                       \
  typedef T KILN_CAT(gvecu_, S) __attribute__((vector_size(KILN_VEC_BYTES), aligned(sizeof(T))));  \
  typedef IT KILN_CAT(gveci_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                     \
  /* What the last store adds and clamps (see kiln_support.gemm_packed). */                        \
  typedef struct {                                                                                 \
    const T* bias;                                                                                 \
    int64_t rsb, csb;                                                                              \
    T lo, hi;                                                                                      \
    int fin; /* this k block is the last and the bounds clamp something */                         \
  } KILN_CAT(gepi_, S);                                                                            \
                                                                                                   \
  KILN_CLAMP_FN(KILN_CAT(gclamp_, S), KILN_CAT(gvec_, S), KILN_CAT(gveci_, S), T)                  \
  enum {                                                                                           \
    KILN_CAT(GVW_, S) = KILN_VEC_BYTES / (int)sizeof(T),                                           \
    KILN_CAT(GP_, S) = KILN_GEMM_PANEL_BYTES / (int)sizeof(T),                                     \
    KILN_CAT(GVPP_, S) = KILN_GEMM_PANEL_BYTES / KILN_VEC_BYTES                                    \
  };                                                                                               \
  /* A column block is whole panels, or a whole fraction of one: never straddles two. */           \
  _Static_assert(                                                                                  \
      KILN_CAT(GVPP_, S) % KILN_GEMM_CBV == 0 || KILN_GEMM_CBV % KILN_CAT(GVPP_, S) == 0,          \
      "column blocks must line up with panels");                                                   \
                                                                                                   \
  /* Rows [0, mr) x vectors [0, nv) of C: c = alpha * A B + beta * c on the first k block          \
   * (c unread when beta is 0), c += alpha * A B on later ones. Columns from `cols` on are         \
   * padding and are not stored. Vector v of B's rows sits at b + (v / VPP) * pk +                 \
   * (v % VPP) * VW (pk: elements from one panel to the next). */                                  \
  static inline __attribute__((always_inline)) void KILN_CAT(gblock_, S)(                          \
      const int mr, const int nv, int64_t kc, const T* restrict a, int64_t rsa, int64_t csa,       \
      const T* restrict b, int64_t pk, T alpha, T beta, int first, int64_t cols, T* restrict c,    \
      int64_t ldc, const KILN_CAT(gepi_, S) * e) {                                                 \
    typedef KILN_CAT(gvec_, S) V;                                                                  \
    typedef KILN_CAT(gvecu_, S) VU;                                                                \
    enum { VW = KILN_CAT(GVW_, S), P = KILN_CAT(GP_, S), VPP = KILN_CAT(GVPP_, S) };               \
    V acc[KILN_GEMM_MR_MAX][KILN_GEMM_NV_MAX];                                                     \
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; ++r)                                           \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) acc[r][v] = (V){0};                   \
    for (int64_t t = 0; t < kc; ++t) {                                                             \
      V x[KILN_GEMM_NV_MAX];                                                                       \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) x[v] =                                  \
          *(const VU*)(b + t * P + v / VPP * pk + v % VPP * VW);                                   \
      if (KILN_GEMM_PFD > 0 && mr >= 4)                                                            \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; v += VPP)                                  \
            __builtin_prefetch(b + (t + KILN_GEMM_PFD) * P + v / VPP * pk, 0, 3);                  \
      _Pragma("GCC unroll 6") for (int r = 0; r < mr; ++r) {                                       \
        const V as = KILN_SPLAT(V, a[r * rsa + t * csa]);                                          \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) acc[r][v] += as * x[v];               \
      }                                                                                            \
    }                                                                                              \
    /* The bias joins on the first k block, the clamp on the last (e->fin). */                     \
    const T* bias = first ? e->bias : 0;                                                           \
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; ++r) {                                         \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) {                                       \
        V val = acc[r][v] * alpha;                                                                 \
        T* d = c + r * ldc + v * VW;                                                               \
        const T* bv = bias ? bias + r * e->rsb + v * VW * e->csb : 0;                              \
        if ((int64_t)(v + 1) * VW <= cols) {                                                       \
          VU* dv = (VU*)d;                                                                         \
          V x = !first ? *dv + val : beta == 0 ? val : val + beta * *dv;                           \
          if (bv) {                                                                                \
            if (e->csb == 0)                                                                       \
              x += KILN_SPLAT(V, bv[0]);                                                           \
            else if (e->csb == 1)                                                                  \
              x += *(const VU*)bv;                                                                 \
            else                                                                                   \
              for (int i = 0; i < VW; ++i) x[i] += bv[i * e->csb];                                 \
          }                                                                                        \
          if (e->fin) x = KILN_CAT(gclamp_, S)(x, e->lo, e->hi);                                   \
          *dv = x;                                                                                 \
        } else {                                                                                   \
          for (int i = 0; i < VW && (int64_t)v * VW + i < cols; ++i) {                             \
            T x = !first ? d[i] + val[i] : beta == 0 ? val[i] : val[i] + beta * d[i];              \
            if (bv) x += bv[i * e->csb];                                                           \
            if (e->fin) {                                                                          \
              x = x < e->lo ? e->lo : x;                                                           \
              x = x > e->hi ? e->hi : x;                                                           \
            }                                                                                      \
            d[i] = x;                                                                              \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* Calls the block kernel with mr and nv as constants, so each pair gets its own code. */        \
  static void KILN_CAT(gdispatch_, S)(                                                             \
      int mr, int nv, int64_t kc, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t pk,    \
      T alpha, T beta, int first, int64_t cols, T* c, int64_t ldc, const KILN_CAT(gepi_, S) * e) { \
    switch (mr * 16 + nv) {                                                                        \
      KILN_GCASES_MR(S, 1)                                                                         \
      KILN_GCASES_MR(S, 2)                                                                         \
      KILN_GCASES_MR(S, 3)                                                                         \
      KILN_GCASES_MR(S, 4)                                                                         \
      KILN_GCASES_MR(S, 5)                                                                         \
      KILN_GCASES_MR(S, 6)                                                                         \
      default:                                                                                     \
        break;                                                                                     \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  void KILN_CAT(KILN_CAT(kiln_gemm_packed_, S), KILN_CAT(_, KILN_ISA))(                            \
      int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rsa, int64_t csa, const T* bp, \
      T beta, T* c, int64_t ldc, const T* bias, int64_t rsb, int64_t csb, T lo, T hi) {            \
    enum { VW = KILN_CAT(GVW_, S), P = KILN_CAT(GP_, S) };                                         \
    if (m <= 0 || n <= 0) return;                                                                  \
    const int clamps = KILN_CLAMPS_ANY(T, lo, hi);                                                 \
    if (k <= 0) {                                                                                  \
      for (int64_t i = 0; i < m; ++i)                                                              \
        for (int64_t j = 0; j < n; ++j) {                                                          \
          T x = beta == 0 ? (T)0 : beta * c[i * ldc + j];                                          \
          if (bias) x += bias[i * rsb + j * csb];                                                  \
          if (clamps) {                                                                            \
            x = x < lo ? lo : x;                                                                   \
            x = x > hi ? hi : x;                                                                   \
          }                                                                                        \
          c[i * ldc + j] = x;                                                                      \
        }                                                                                          \
      return;                                                                                      \
    }                                                                                              \
    enum {                                                                                         \
      KC = KILN_GEMM_KC_BYTES / (int)sizeof(T),                                                    \
      NC = KILN_GEMM_NC_BYTES / (int)sizeof(T),                                                    \
      CB = KILN_GEMM_CBV * VW                                                                      \
    };                                                                                             \
    _Static_assert(NC % (KILN_GEMM_WIDE(1) * VW) == 0 && NC % (KILN_GEMM_WIDE(2) * VW) == 0,       \
                   "a column chunk is whole column blocks");                                       \
    _Static_assert(KILN_GEMM_WIDE(1) * VW % P == 0 && KILN_GEMM_WIDE(2) * VW % P == 0,             \
                   "a wide column block is whole panels");                                         \
    for (int64_t n0 = 0; n0 < n; n0 += NC) {                                                       \
      const int64_t n1 = n - n0 < NC ? n : n0 + NC;                                                \
      for (int64_t k0 = 0; k0 < k; k0 += KC) {                                                     \
        const int64_t kc = k - k0 < KC ? k - k0 : KC;                                              \
        const KILN_CAT(gepi_, S) e0 = {0, rsb, csb, lo, hi, clamps && k0 + kc == k};               \
        for (int64_t r0 = 0; r0 < m; r0 += KILN_GEMM_MR) {                                         \
          const int mr = (int)(m - r0 < KILN_GEMM_MR ? m - r0 : KILN_GEMM_MR);                     \
          const int wide = KILN_GEMM_WIDE(mr);                                                     \
          for (int64_t j0 = n0; j0 < n1; j0 += wide * VW) {                                        \
            const int64_t cols = n - j0;                                                           \
            const int nv = (int)((cols + VW - 1) / VW < wide ? (cols + VW - 1) / VW : wide);       \
            KILN_CAT(gepi_, S) e = e0;                                                             \
            e.bias = bias ? bias + r0 * rsb + j0 * csb : 0;                                        \
            KILN_CAT(gdispatch_, S)                                                                \
            (mr, nv, kc, a + r0 * rsa + k0 * csa, rsa, csa, bp + j0 / P * k * P + j0 % P + k0 * P, \
             k * P, alpha, beta, k0 == 0, cols, c + r0 * ldc + j0, ldc, &e);                       \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

#define KILN_GCASE(S, MR, NV)                                                                  \
  case MR * 16 + NV:                                                                           \
    KILN_CAT(gblock_, S)(MR, NV, kc, a, rsa, csa, b, pk, alpha, beta, first, cols, c, ldc, e); \
    break;
/* A pair past the register budget still needs its constant label, but is never reached; it
 * forwards to nv = 1, which keeps it small. */
#define KILN_GCASE_IF(ok, S, MR, NV)                                                  \
  case MR * 16 + NV:                                                                  \
    if (ok) KILN_CAT(gblock_, S)                                                      \
    (MR, (ok) ? NV : 1, kc, a, rsa, csa, b, pk, alpha, beta, first, cols, c, ldc, e); \
    break;
#define KILN_GCASES_MR(S, MR)                      \
  KILN_GCASE(S, MR, 1)                             \
  KILN_GCASE(S, MR, 2)                             \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 3, S, MR, 3) \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 4, S, MR, 4) \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 5, S, MR, 5) \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 6, S, MR, 6) \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 7, S, MR, 7) \
  KILN_GCASE_IF(KILN_GEMM_WIDE(MR) >= 8, S, MR, 8)

KILN_GEMM_TILE(float, int32_t, f32)
KILN_GEMM_TILE(double, int64_t, f64)
