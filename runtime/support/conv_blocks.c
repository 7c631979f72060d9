/* The packed-weight direct-convolution kernel behind kiln_support.conv_blocks_f32/f64,
 * compiled once per vector ISA like conv_tile.c. Its vectors run along output channels:
 * the weights come packed in blocks of KILN_CONV_BLOCK output channels, each tap's block
 * one aligned run, and each position's input element is broadcast. A register block holds
 * NP positions x KILN_CONV_BLOCK channels, so any set of positions (a part's, a strided
 * convolution's, a 7 x 7 map's) fills it: the tile kernel's vectors ran along positions and
 * computed the padded rows' overhang (29% of a 7 x 7 map) and its weight broadcasts came
 * from KILN_MR separate rows. Each tap costs KILN_CONV_BLOCK / VW vector loads and NP
 * broadcasts for NP * KILN_CONV_BLOCK / VW fused multiply-adds. */
#include <stdint.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/conv_blocks.h"
#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA) || !defined(KILN_VEC_BYTES) || !defined(KILN_VEC_REGS)
#error "conv_blocks.c is compiled with KILN_ISA, KILN_VEC_BYTES and KILN_VEC_REGS defined"
#endif

#define KILN_CB_CAT2(a, b) a##b
#define KILN_CB_CAT(a, b) KILN_CB_CAT2(a, b)
/* The register block's bounds: NP positions of KILN_CONV_BLOCK / VW vectors each, the
 * accumulators leaving room for one weight block and a broadcast (6 x 2 under AVX2 for
 * floats, the shape of OpenBLAS's Haswell SGEMM kernel). */
#define KILN_CB_NP_MAX 12
#define KILN_CB_NV_MAX (KILN_CONV_BLOCK / 2)
#define KILN_CB_NP(nv) \
  ((KILN_VEC_REGS - 4) / (nv) > KILN_CB_NP_MAX ? KILN_CB_NP_MAX : (KILN_VEC_REGS - 4) / (nv))
#define KILN_CB_SPLAT(V, s) ((s) + -(V){0})

#define KILN_CONV_BLOCKS(T, IT, S)                                                                 \
  typedef T KILN_CB_CAT(cbv_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                     \
  typedef IT KILN_CB_CAT(cbvi_, S) __attribute__((vector_size(KILN_VEC_BYTES)));                   \
  KILN_CLAMP_FN(KILN_CB_CAT(cbclamp_, S), KILN_CB_CAT(cbv_, S), KILN_CB_CAT(cbvi_, S), T)          \
  typedef T KILN_CB_CAT(cbvu_, S)                                                                  \
      __attribute__((vector_size(KILN_VEC_BYTES), aligned(sizeof(T))));                            \
  enum {                                                                                           \
    KILN_CB_CAT(CBW_, S) = KILN_VEC_BYTES / (int)sizeof(T),                                        \
    KILN_CB_CAT(CBV_, S) =                                                                         \
        KILN_CONV_BLOCK / KILN_CB_CAT(CBW_, S) > 0 ? KILN_CONV_BLOCK / KILN_CB_CAT(CBW_, S) : 1    \
  };                                                                                               \
                                                                                                   \
  /* Positions pos[0, np) x one block's rows [0, rows) into y (rows ldy apart), nv of the          \
   * block's vectors computed (one for a tail block of VW rows or fewer).                          \
   */                                                                                              \
  static inline __attribute__((always_inline)) void KILN_CB_CAT(cblock_, S)(                       \
      const int np, const int nv, int64_t taps, const T* restrict b, const int32_t* restrict pos,  \
      const int32_t* restrict off, const T* restrict wb, const T* restrict init, int rows,         \
      T* restrict y, int64_t ldy, T lo, T hi, int clamps) {                                        \
    typedef KILN_CB_CAT(cbv_, S) V;                                                                \
    typedef KILN_CB_CAT(cbvu_, S) VU; /* a weight blob need not be vector-aligned */               \
    enum { VW = KILN_CB_CAT(CBW_, S) };                                                            \
    V acc[KILN_CB_NP_MAX][KILN_CB_NV_MAX];                                                         \
    /* One base per position and one index per tap: each broadcast is one addressed load. */       \
    const T* bp[KILN_CB_NP_MAX];                                                                   \
    _Pragma("GCC unroll 12") for (int i = 0; i < np; ++i) {                                        \
      bp[i] = b + pos[i];                                                                          \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) acc[i][v] = *(const V*)(init + v * VW); \
    }                                                                                              \
    for (int64_t t = 0; t < taps; ++t) {                                                           \
      const int64_t o = off[t];                                                                    \
      const T* wt = wb + t * KILN_CONV_BLOCK;                                                      \
      _Pragma("GCC unroll 12") for (int i = 0; i < np; ++i) {                                      \
        const V x = KILN_CB_SPLAT(V, bp[i][o]);                                                    \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) acc[i][v] +=                          \
            x * *(const VU*)(wt + v * VW);                                                         \
      }                                                                                            \
    }                                                                                              \
    /* y is channel-major: each sum vector's lanes go to nv * VW rows. */                          \
    _Pragma("GCC unroll 12") for (int i = 0; i < np; ++i) {                                        \
      T lanes[KILN_CONV_BLOCK] __attribute__((aligned(64)));                                       \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; ++v) {                                       \
        V x = acc[i][v];                                                                           \
        if (clamps) x = KILN_CB_CAT(cbclamp_, S)(x, lo, hi);                                       \
        *(V*)(lanes + v * VW) = x;                                                                 \
      }                                                                                            \
      for (int r = 0; r < rows; ++r) y[r * ldy + i] = lanes[r];                                    \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* One block's positions, np at a time: the whole block's NV vectors, or (rows <= VW) one.       \
   */                                                                                              \
  static inline __attribute__((always_inline)) void KILN_CB_CAT(cblocks_, S)(                      \
      const int nv, int64_t npos, int64_t taps, const T* b, const int32_t* pos,                    \
      const int32_t* off, const T* wblk, const T* init, int rows, T* yr, int64_t ldy, T lo, T hi,  \
      int clamps) {                                                                                \
    const int NP = KILN_CB_NP(nv);                                                                 \
    int64_t i0 = 0;                                                                                \
    for (; i0 + NP <= npos; i0 += NP) KILN_CB_CAT(cblock_, S)                                      \
    (NP, nv, taps, b, pos + i0, off, wblk, init, rows, yr + i0, ldy, lo, hi, clamps);              \
    switch ((int)(npos - i0)) {                                                                    \
      KILN_CB_TAILS(S)                                                                             \
      default:                                                                                     \
        break;                                                                                     \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  void KILN_CB_CAT(KILN_CB_CAT(kiln_conv_blocks_, S), KILN_CB_CAT(_, KILN_ISA))(                   \
      int64_t m, int64_t npos, int64_t taps, const T* b, const int32_t* pos, const int32_t* off,   \
      const T* wb, const T* bias, int64_t bs, T* y, int64_t ldy, T lo, T hi) {                     \
    enum { VW = KILN_CB_CAT(CBW_, S), NV = KILN_CB_CAT(CBV_, S) };                                 \
    const int clamps = KILN_CLAMPS_ANY(T, lo, hi);                                                 \
    /* One block's weights (KILN_CONV_BLOCK x taps: 73 KB for 128 channels of 3 x 3) stay in       \
     * L2 while every group of positions passes over them. */                                      \
    for (int64_t r0 = 0; r0 < m; r0 += KILN_CONV_BLOCK) {                                          \
      const int rows = (int)(m - r0 < KILN_CONV_BLOCK ? m - r0 : KILN_CONV_BLOCK);                 \
      T init[KILN_CONV_BLOCK] __attribute__((aligned(64)));                                        \
      for (int r = 0; r < KILN_CONV_BLOCK; ++r)                                                    \
        init[r] = bias && r < rows ? bias[(r0 + r) * bs] : (T)0;                                   \
      const T* wblk = wb + r0 * taps;                                                              \
      /* A tail block of 24 channels' second half (8 rows) need not compute 8 zero rows. */        \
      if (NV > 1 && rows <= VW) KILN_CB_CAT(cblocks_, S)                                           \
      (1, npos, taps, b, pos, off, wblk, init, rows, y + r0 * ldy, ldy, lo, hi, clamps);           \
      else KILN_CB_CAT(cblocks_, S)(NV, npos, taps, b, pos, off, wblk, init, rows, y + r0 * ldy,   \
                                    ldy, lo, hi, clamps);                                          \
    }                                                                                              \
  }

/* The last group's positions (1 to NP - 1), each count with its own code. */
#define KILN_CB_TAIL(S, K)                                                                        \
  case K:                                                                                         \
    if (K < NP) KILN_CB_CAT(cblock_, S)                                                           \
    (K < NP ? K : 1, nv, taps, b, pos + i0, off, wblk, init, rows, yr + i0, ldy, lo, hi, clamps); \
    break;
#define KILN_CB_TAILS(S)                                                                         \
  KILN_CB_TAIL(S, 1)                                                                             \
  KILN_CB_TAIL(S, 2)                                                                             \
  KILN_CB_TAIL(S, 3) KILN_CB_TAIL(S, 4) KILN_CB_TAIL(S, 5) KILN_CB_TAIL(S, 6) KILN_CB_TAIL(S, 7) \
      KILN_CB_TAIL(S, 8) KILN_CB_TAIL(S, 9) KILN_CB_TAIL(S, 10) KILN_CB_TAIL(S, 11)

KILN_CONV_BLOCKS(float, int32_t, f32)
KILN_CONV_BLOCKS(double, int64_t, f64)
