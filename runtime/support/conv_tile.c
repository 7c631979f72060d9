/* The direct-convolution tile kernel behind kiln_support.conv_tile_f32/f64. This file is
 * compiled once per vector ISA (KILN_ISA: avx512, avx2 or base), each copy with that ISA's
 * flags; support.c picks the copy the running CPU can execute. The blocking keeps an MR x NV
 * block of output vectors in registers while it walks the taps, so each tap costs NV vector
 * loads and MR broadcasts for MR * NV fused multiply-adds. */
#include <stdint.h>
#include <stdlib.h>

#include "runtime/support/conv_tile.h"
#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA) || !defined(KILN_VEC_BYTES) || !defined(KILN_VEC_REGS)
#error "conv_tile.c is compiled with KILN_ISA, KILN_VEC_BYTES and KILN_VEC_REGS defined"
#endif

#define KILN_CAT2(a, b) a##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)
/* Rows per block: 8 where 32 vector registers hold 8 x 3 sums, 4 where 16 hold 4 x 3 (two
 * blocks per 8-row split unit). An 8 x 1 block under AVX2 re-read all the weights for every
 * 8 positions and ran at a fifth of the FMA peak. */
#define KILN_MR (KILN_VEC_REGS >= 32 ? 8 : 4)
/* The block kernel's array bounds: the dispatch switch instantiates every (mr, nv) case. */
#define KILN_MR_MAX 8
#define KILN_NV_MAX 4
/* Taps per block when a convolution has many (see kiln_conv_tile). */
#define KILN_CONV_KC 128
/* At most this many column blocks take the weight-streaming order (see kiln_conv_tile). */
#define KILN_CONV_FEW_COLS 4
/* The most vectors per row a block of mr rows keeps in registers (accumulators, the NV input
 * vectors and one broadcast must fit the register file). */
#define KILN_NV_FOR(mr) \
  (KILN_VEC_REGS >= 32 ? ((mr) <= 6 ? 4 : 3) : ((mr) <= 2 ? 4 : (mr) <= 4 ? 3 : (mr) <= 6 ? 2 : 1))
/* A broadcast: s + -0.0 is s for every s (+0.0 would turn -0.0 into +0.0), so it folds to one
 * vbroadcastss where (V){0} + s costs a scalar add first. */
#define KILN_SPLAT(V, s) ((s) + -(V){0})

#define KILN_CONV_TILE(T, IT, S)                                                                   \
  typedef T KILN_CAT(vec_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                        \
  typedef IT KILN_CAT(veci_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                      \
  KILN_CLAMP_FN(KILN_CAT(cclamp_, S), KILN_CAT(vec_, S), KILN_CAT(veci_, S), T)                    \
  typedef T KILN_CAT(vecu_, S) __attribute__((vector_size(KILN_VEC_BYTES), aligned(sizeof(T))));   \
  enum { KILN_CAT(VW_, S) = KILN_VEC_BYTES / (int)sizeof(T) };                                     \
                                                                                                   \
  /* Accumulates rows [0, mr) x vectors [0, nv) of one block into tile (rows VW*NV_MAX apart). */  \
  static inline __attribute__((always_inline)) void KILN_CAT(block_, S)(                           \
      const int mr, const int nv, int64_t taps, const T* restrict b, const int32_t* restrict off,  \
      const T* restrict w, int64_t ldw, const T* bias, int64_t bs, T* restrict tile, int64_t ldt,  \
      int acc_in, T lo, T hi, int fin) {                                                           \
    typedef KILN_CAT(vec_, S) V;                                                                   \
    typedef KILN_CAT(vecu_, S) VU;                                                                 \
    enum { VW = KILN_CAT(VW_, S) };                                                                \
    V acc[KILN_MR_MAX][KILN_NV_MAX];                                                               \
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; ++r) {                                         \
      const V init = KILN_SPLAT(V, bias ? bias[r * bs] : (T)0);                                    \
      /* acc_in: a later block of taps adds to the sums the earlier ones left in tile. */          \
      _Pragma("GCC unroll 4") for (int v = 0; v < nv; ++v) acc[r][v] =                             \
          acc_in ? *(const VU*)(tile + r * ldt + v * VW) : init;                                   \
    }                                                                                              \
    for (int64_t t = 0; t < taps; ++t) {                                                           \
      const T* p = b + off[t];                                                                     \
      V x[KILN_NV_MAX];                                                                            \
      _Pragma("GCC unroll 4") for (int v = 0; v < nv; ++v) x[v] = *(const VU*)(p + v * VW);        \
      _Pragma("GCC unroll 8") for (int r = 0; r < mr; ++r) {                                       \
        const V ws = KILN_SPLAT(V, w[r * ldw + t]);                                                \
        _Pragma("GCC unroll 4") for (int v = 0; v < nv; ++v) acc[r][v] += ws * x[v];               \
      }                                                                                            \
    }                                                                                              \
    /* fin: the last block of taps, which clamps (kiln_clamp.h). */                                \
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; ++r) {                                         \
      _Pragma("GCC unroll 4") for (int v = 0; v < nv; ++v) {                                       \
        V x = acc[r][v];                                                                           \
        if (fin) x = KILN_CAT(cclamp_, S)(x, lo, hi);                                              \
        *(VU*)(tile + r * ldt + v * VW) = x;                                                       \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* Calls the block kernel with mr and nv as constants, so each pair gets its own code. */        \
  static void KILN_CAT(dispatch_, S)(int mr, int nv, int64_t taps, const T* b, const int32_t* off, \
                                     const T* w, int64_t ldw, const T* bias, int64_t bs, T* tile,  \
                                     int64_t ldt, int acc_in, T lo, T hi, int fin) {               \
    switch (mr * 8 + nv) {                                                                         \
      KILN_CASES_MR(S, 1)                                                                          \
      KILN_CASES_MR(S, 2)                                                                          \
      KILN_CASES_MR(S, 3)                                                                          \
      KILN_CASES_MR(S, 4) KILN_CASES_MR(S, 5) KILN_CASES_MR(S, 6) KILN_CASES_MR(S, 7)              \
          KILN_CASES_MR(S, 8) default : break;                                                     \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  void KILN_CAT(KILN_CAT(kiln_conv_tile_, S), KILN_CAT(_, KILN_ISA))(                              \
      int64_t m, int64_t npos, int64_t taps, const T* b, const int32_t* off, const T* w,           \
      int64_t ldw, const T* bias, int64_t bs, T* y, int64_t ldy, int64_t wp, int64_t ow, T lo,     \
      T hi) {                                                                                      \
    enum { VW = KILN_CAT(VW_, S) };                                                                \
    const int clamps = KILN_CLAMPS_ANY(T, lo, hi);                                                 \
    T tile[KILN_MR * KILN_NV_MAX * VW] __attribute__((aligned(64)));                               \
    /* Column blocks outside, row blocks inside: a block's slice of b (taps x jw) stays in L1      \
     * while every row block of w passes over it, instead of b streaming from L2 once per          \
     * row block (1.5-2x on pointwise convolutions). Many taps (a deep layer's C x 3 x 3)          \
     * go in blocks of KILN_CONV_KC, each adding to the sums the last one left in `part`, so       \
     * that slice still fits L1 and the weights' block L2. */                                      \
    const int64_t jw = (int64_t)KILN_NV_FOR(KILN_MR) * VW, ldp = KILN_NV_MAX * VW;                 \
    const int64_t kc = taps > 2 * KILN_CONV_KC ? KILN_CONV_KC : taps;                              \
    /* Few positions (a 7 x 7 map) under many taps: the weights, not b's slice, are the big        \
     * operand, and with column blocks outside they streamed from L3 once per column block.        \
     * Then row blocks go outside and each block's weights stay in L1 across the column            \
     * blocks, which keep their sums side by side in `part` (512 -> 512 at 7 x 7 under AVX2:       \
     * 34% -> 60% of the FMA peak). */                                                             \
    const int64_t ncb = (npos + jw - 1) / jw;                                                      \
    const int few = kc < taps && ncb <= KILN_CONV_FEW_COLS;                                        \
    T* part = kc < taps ? (T*)malloc((size_t)((m + KILN_MR) * (few ? ncb : 1) * ldp) * sizeof(T))  \
                        : NULL;                                                                    \
    const int64_t step = part ? kc : taps;                                                         \
    if (part && few) {                                                                             \
      const int64_t lda = ncb * ldp;                                                               \
      for (int64_t t0 = 0; t0 < taps; t0 += kc) {                                                  \
        const int64_t tk = taps - t0 < kc ? taps - t0 : kc;                                        \
        for (int64_t r0 = 0; r0 < m; r0 += KILN_MR) {                                              \
          const int mr = (int)(m - r0 < KILN_MR ? m - r0 : KILN_MR);                               \
          for (int64_t j0 = 0; j0 < npos; j0 += jw) {                                              \
            const int64_t n = npos - j0 < jw ? npos - j0 : jw;                                     \
            KILN_CAT(dispatch_, S)                                                                 \
            ((int)mr, (int)((n + VW - 1) / VW), tk, b + j0, off + t0, w + r0 * ldw + t0, ldw,      \
             bias && t0 == 0 ? bias + r0 * bs : 0, bs, part + r0 * lda + j0 / jw * ldp, lda,       \
             t0 > 0, lo, hi, clamps && t0 + tk == taps);                                           \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
      for (int64_t r0 = 0; r0 < m; r0 += KILN_MR)                                                  \
        for (int64_t j0 = 0; j0 < npos; j0 += jw) KILN_CAT(store_, S)                              \
      ((int)(m - r0 < KILN_MR ? m - r0 : KILN_MR), j0, npos - j0 < jw ? npos - j0 : jw,            \
       part + r0 * lda + j0 / jw * ldp, lda, y + r0 * ldy, ldy, wp, ow);                           \
      free(part);                                                                                  \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t j0 = 0; j0 < npos; j0 += jw) {                                                    \
      const int64_t n = npos - j0 < jw ? npos - j0 : jw;                                           \
      const int nv = (int)((n + VW - 1) / VW);                                                     \
      /* Whole vectors go straight to the output when they skip no overhang: always without        \
       * (wp == ow), else when the block ends inside its first row's kept columns (4 of 5          \
       * blocks of a 112-wide phase row). Through the tile, every block of a 27-tap RGB stem       \
       * was copied out by a scalar loop (with the clamp here too: stems 0.82x). */                \
      const int64_t oy = j0 / wp, col = j0 - oy * wp;                                              \
      const int direct = !part && n == (int64_t)nv * VW && (wp == ow || col + n <= ow);            \
      for (int64_t t0 = 0; t0 < taps; t0 += step) {                                                \
        const int64_t tk = taps - t0 < step ? taps - t0 : step;                                    \
        for (int64_t r0 = 0; r0 < m; r0 += KILN_MR) {                                              \
          const int mr = (int)(m - r0 < KILN_MR ? m - r0 : KILN_MR);                               \
          T* dst = part ? part + r0 * ldp : direct ? y + r0 * ldy + oy * ow + col : tile;          \
          KILN_CAT(dispatch_, S)                                                                   \
          (mr, nv, tk, b + j0, off + t0, w + r0 * ldw + t0, ldw,                                   \
           bias && t0 == 0 ? bias + r0 * bs : 0, bs, dst, part || !direct ? ldp : ldy, t0 > 0, lo, \
           hi, clamps && t0 + tk == taps);                                                         \
          if (!part && !direct)                                                                    \
            KILN_CAT(store_, S)(mr, j0, n, tile, ldp, y + r0 * ldy, ldy, wp, ow);                  \
        }                                                                                          \
      }                                                                                            \
      if (part)                                                                                    \
        for (int64_t r0 = 0; r0 < m; r0 += KILN_MR) KILN_CAT(store_, S)                            \
      ((int)(m - r0 < KILN_MR ? m - r0 : KILN_MR), j0, n, part + r0 * ldp, ldp, y + r0 * ldy, ldy, \
       wp, ow);                                                                                    \
    }                                                                                              \
    free(part);                                                                                    \
  }

#define KILN_CASE(S, MR, NV)                                                                     \
  case MR * 8 + NV:                                                                              \
    KILN_CAT(block_, S)(MR, NV, taps, b, off, w, ldw, bias, bs, tile, ldt, acc_in, lo, hi, fin); \
    break;
/* Only the (mr, nv) pairs the register budget allows get code. */
#define KILN_CASES_MR(S, MR)                   \
  KILN_CASE(S, MR, 1)                          \
  KILN_CASE_IF(KILN_NV_FOR(MR) >= 2, S, MR, 2) \
  KILN_CASE_IF(KILN_NV_FOR(MR) >= 3, S, MR, 3) \
  KILN_CASE_IF(KILN_NV_FOR(MR) >= 4, S, MR, 4)
/* A case whose pair exceeds the budget still compiles (the switch needs a constant label) but
 * is never reached: it forwards to nv = 1, which keeps it small. */
#define KILN_CASE_IF(ok, S, MR, NV)                                                        \
  case MR * 8 + NV:                                                                        \
    if (ok)                                                                                \
      KILN_CAT(block_, S)                                                                  \
      (MR, (ok) ? NV : 1, taps, b, off, w, ldw, bias, bs, tile, ldt, acc_in, lo, hi, fin); \
    break;

/* Writes positions [j0, j0 + n) of rows [0, mr) of the tile to y: position j is output
 * (j / wp, j % wp) and is dropped when its column is past ow (the padded rows' overhang). */
#define KILN_CONV_STORE(T, S)                                                                      \
  static inline void KILN_CAT(store_, S)(int mr, int64_t j0, int64_t n, const T* tile, int64_t ts, \
                                         T* y, int64_t ldy, int64_t wp, int64_t ow) {              \
    for (int r = 0; r < mr; ++r) {                                                                 \
      const T* src = tile + r * ts;                                                                \
      T* dst = y + r * ldy;                                                                        \
      if (wp == ow) {                                                                              \
        for (int64_t i = 0; i < n; ++i) dst[j0 + i] = src[i];                                      \
        continue;                                                                                  \
      }                                                                                            \
      for (int64_t j = j0; j < j0 + n;) {                                                          \
        const int64_t oy = j / wp;                                                                 \
        const int64_t row_end = oy * wp + wp < j0 + n ? oy * wp + wp : j0 + n;                     \
        const int64_t keep = oy * wp + ow < row_end ? oy * wp + ow : row_end;                      \
        for (int64_t k = j; k < keep; ++k) dst[oy * ow + (k - oy * wp)] = src[k - j0];             \
        j = row_end;                                                                               \
      }                                                                                            \
    }                                                                                              \
  }

KILN_CONV_STORE(float, f32)
KILN_CONV_STORE(double, f64)
KILN_CONV_TILE(float, int32_t, f32)
KILN_CONV_TILE(double, int64_t, f64)
