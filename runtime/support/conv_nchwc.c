/* The blocked-layout (NCHW8c) direct and pointwise convolutions behind
 * kiln_support.conv_nchwc_f32 and conv_nchwc_pw_f32, compiled once per vector ISA like
 * conv_tile.c (module_abi.h states their contracts). A vector holds the
 * 8 channels of one output block at one position; a register block holds NP positions x NB
 * (1 or 2) output blocks, and each input channel of each tap costs NB weight loads and NP
 * broadcasts for NP x NB fused multiply-adds.
 *
 * The positions of a register block are neighbours in one output row wherever the rows are
 * long enough, so one base pointer and constant displacements (the position step is a
 * compile-time constant for strides 1 and 2) address every broadcast. With a base pointer
 * per position, as the module-side kernel had, the general registers ran out and clang's code
 * reached 91-95% of the FMA peak on a Zen 4; row runs reach 99% (one core, gcc 12).
 * Short rows (a 7 x 7 map where 16 vector registers cannot hold 7 x 2 sums) keep a pointer per
 * position and run across rows. */
#include <stdint.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/conv_nchwc.h"
#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA) || !defined(KILN_VEC_REGS)
#error "conv_nchwc.c is compiled with KILN_ISA and KILN_VEC_REGS defined"
#endif

#define KILN_NC_CAT2(a, b) a##b
#define KILN_NC_CAT(a, b) KILN_NC_CAT2(a, b)
#define KILN_NC_FN(name) KILN_NC_CAT(name, KILN_NC_CAT(_, KILN_ISA))

/* A constant-trip loop unrolled whole. clang's `GCC unroll N` unrolls a loop of fewer than N
 * trips by N with a run-time remainder, which kept the sums in memory (a third of the speed);
 * `unroll(full)` is its spelling of "every trip". */
#if defined(__clang__)
#define KILN_NC_UNROLL _Pragma("clang loop unroll(full)")
#else
#define KILN_NC_UNROLL _Pragma("GCC unroll 16")
#endif

/* Positions per register block: 7 x 2 sums, two weight vectors and a broadcast fit 32
 * vector registers (runs of 7 and 8 both reach 99% of the FMA peak on a Zen 4; 6 reached
 * 95-97%); 16 registers hold 6 x 2. Where a pair of blocks shares one 16-float vector
 * (KILN_NC_PAIRED below), 14 positions keep 14 sums in flight, enough to cover the fused
 * multiply-add's latency on two full-width units. */
#if defined(KILN_VEC_BYTES) && KILN_VEC_BYTES >= 64
#define KILN_NC_NP_MAX 14
#elif KILN_VEC_REGS >= 32
#define KILN_NC_NP_MAX 7
#else
#define KILN_NC_NP_MAX 6
#endif
enum {
  KILN_NC_B = 8, /* channels per block */
  KILN_NC_NP = KILN_NC_NP_MAX
};

/* The base copy has no 32-byte vector registers; its vectors never cross a call (the clamp is
 * inlined), so gcc's note that passing one would change the ABI does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float nc_v8 __attribute__((vector_size(32)));
typedef float nc_v8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t nc_v8i __attribute__((vector_size(32)));
KILN_CLAMP_FN(nc_clamp, nc_v8, nc_v8i, float)
/* Where vectors hold 16 floats, a pair of output blocks shares one: the two blocks' 8 weights
 * side by side, one broadcast and one fused multiply-add per position for both. Full-width
 * AVX-512 FMA units (a Zen 5) do twice the work per 16-float instruction as per 8-float one;
 * on cores that split a 16-float operation in two halves (a Zen 4) it costs the same. */
#if KILN_VEC_BYTES >= 64
#define KILN_NC_PAIRED 1
typedef float nc_v16 __attribute__((vector_size(64)));
typedef int32_t nc_v16i __attribute__((vector_size(64)));
KILN_CLAMP_FN(nc_clamp16, nc_v16, nc_v16i, float)
#define KILN_NC_JOIN(a, b) \
  __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define KILN_NC_LOW(v) __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
#define KILN_NC_HIGH(v) __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)
#else
#define KILN_NC_PAIRED 0
#endif

/* Where a block's positions read: neighbours in a row (base x, step s) or anywhere (xs). */
typedef struct nc_at {
  const float* x;
  int64_t s;
  const float* const* xs;
} nc_at;

/* NP positions x NB output blocks over every tap, their sums starting at b0p / b1p's 8 values. STEP
 * > 0: the positions are x + r * STEP; STEP == 0: x + r * at.s; STEP < 0: at.xs[r]. Tap t reads
 * toff[t] further on, or, for a pointwise convolution (PW), t input blocks of at.s floats
 * further (a step of 8 then). KB input channels per tap (8 from a blocked input, 1 from a plain
 * one); w0/w1 hold each tap's KB x 8 weights, input channel major. */
static inline __attribute__((always_inline)) void nc_block(
    const int np, const int nb, const int kb, const int64_t step, const int pw, nc_at at,
    int64_t nblk, const int32_t* restrict toff, int64_t taps, const float* restrict w0,
    const float* restrict w1, const float* b0p, const float* b1p, float* restrict y0,
    float* restrict y1, float lo, float hi, int clamps) {
  const nc_v8 b0 = *(const nc_v8u*)b0p, b1 = nb > 1 ? *(const nc_v8u*)b1p : b0;
  nc_v8 a0[KILN_NC_NP], a1[KILN_NC_NP];
  const float* xr[KILN_NC_NP];
#if KILN_NC_PAIRED
  if (nb > 1) {
    /* The same sums in the same order as below, two blocks to a vector. */
    const nc_v16 b = KILN_NC_JOIN(b0, b1);
    nc_v16 a[KILN_NC_NP];
    for (; nblk > 0; --nblk, at.x += np * (step > 0 ? step : at.s), y0 += np * KILN_NC_B,
                     y1 += np * KILN_NC_B) {
      KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
        xr[r] = step < 0 ? at.xs[r] : at.x + r * (step > 0 ? step : at.s);
        a[r] = b;
      }
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t o = pw ? t * at.s : toff[t];
        const float *wa = w0 + t * kb * KILN_NC_B, *wb = w1 + t * kb * KILN_NC_B;
        KILN_NC_UNROLL for (int k = 0; k < kb; ++k) {
          const nc_v16 v = KILN_NC_JOIN(*(const nc_v8u*)(wa + k * KILN_NC_B),
                                        *(const nc_v8u*)(wb + k * KILN_NC_B));
          KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
            const nc_v16 s = (step > 0 ? at.x[r * step + o + k] : xr[r][o + k]) + -(nc_v16){0};
            a[r] += s * v;
          }
        }
      }
      KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
        const nc_v16 out = clamps ? nc_clamp16(a[r], lo, hi) : a[r];
        *(nc_v8u*)(y0 + r * KILN_NC_B) = KILN_NC_LOW(out);
        *(nc_v8u*)(y1 + r * KILN_NC_B) = KILN_NC_HIGH(out);
      }
    }
    return;
  }
#endif
  /* nblk blocks one after another (step >= 0: each the next np positions of a row), one call
   * for all: a pointwise layer of 16 channels spent 11% of its time between calls of one
   * block each. */
  for (; nblk > 0;
       --nblk, at.x += np * (step > 0 ? step : at.s), y0 += np * KILN_NC_B, y1 += np * KILN_NC_B) {
    KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
      xr[r] = step < 0 ? at.xs[r] : at.x + r * (step > 0 ? step : at.s);
      a0[r] = b0;
      if (nb > 1) a1[r] = b1;
    }
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t o = pw ? t * at.s : toff[t];
      const float *wa = w0 + t * kb * KILN_NC_B, *wb = w1 + t * kb * KILN_NC_B;
      KILN_NC_UNROLL for (int k = 0; k < kb; ++k) {
        const nc_v8 va = *(const nc_v8u*)(wa + k * KILN_NC_B);
        const nc_v8 vb = nb > 1 ? *(const nc_v8u*)(wb + k * KILN_NC_B) : va;
        KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
          /* s + -0.0 is s for every s: one broadcast (0.0 + s would add first). */
          const nc_v8 s = (step > 0 ? at.x[r * step + o + k] : xr[r][o + k]) + -(nc_v8){0};
          a0[r] += s * va;
          if (nb > 1) a1[r] += s * vb;
        }
      }
    }
    KILN_NC_UNROLL for (int r = 0; r < np; ++r) {
      *(nc_v8u*)(y0 + r * KILN_NC_B) = clamps ? nc_clamp(a0[r], lo, hi) : a0[r];
      if (nb > 1) *(nc_v8u*)(y1 + r * KILN_NC_B) = clamps ? nc_clamp(a1[r], lo, hi) : a1[r];
    }
  }
}

typedef void (*nc_block_fn)(nc_at at, int64_t nblk, const int32_t* toff, int64_t taps,
                            const float* w0, const float* w1, const float* b0, const float* b1,
                            float* y0, float* y1, float lo, float hi, int clamps);

/* One function per (positions, blocks, channels per tap, step, pointwise): a switch over
 * always-inline calls let clang merge the calls into one with a variable count before inlining. */
#define KILN_NC_DEF(NP, NB, KB, STEP, PW, TAG)                                                     \
  static void nc_##TAG##_##NP##_##NB(                                                              \
      nc_at at, int64_t nblk, const int32_t* toff, int64_t taps, const float* w0, const float* w1, \
      const float* b0, const float* b1, float* y0, float* y1, float lo, float hi, int clamps) {    \
    nc_block(NP, NB, KB, STEP, PW, at, nblk, toff, taps, w0, w1, b0, b1, y0, y1, lo, hi, clamps);  \
  }
#define KILN_NC_DEF2(NP, KB, STEP, TAG)               \
  KILN_NC_DEF(NP, 1, KB, STEP, KILN_NC_PW_##TAG, TAG) \
  KILN_NC_DEF(NP, 2, KB, STEP, KILN_NC_PW_##TAG, TAG)
#if KILN_VEC_REGS >= 32
#define KILN_NC_DEF_7(KB, STEP, TAG) KILN_NC_DEF2(7, KB, STEP, TAG)
#define KILN_NC_ROW_7(TAG) {nc_##TAG##_7_1, nc_##TAG##_7_2},
#else
#define KILN_NC_DEF_7(KB, STEP, TAG)
#define KILN_NC_ROW_7(TAG)
#endif
#if KILN_NC_NP_MAX > 7
#define KILN_NC_DEF_14(KB, STEP, TAG) \
  KILN_NC_DEF2(8, KB, STEP, TAG)      \
  KILN_NC_DEF2(9, KB, STEP, TAG)      \
  KILN_NC_DEF2(10, KB, STEP, TAG)     \
  KILN_NC_DEF2(11, KB, STEP, TAG)     \
  KILN_NC_DEF2(12, KB, STEP, TAG)     \
  KILN_NC_DEF2(13, KB, STEP, TAG)     \
  KILN_NC_DEF2(14, KB, STEP, TAG)
#define KILN_NC_ROW_14(TAG)                                                   \
  {nc_##TAG##_8_1, nc_##TAG##_8_2}, {nc_##TAG##_9_1, nc_##TAG##_9_2},         \
      {nc_##TAG##_10_1, nc_##TAG##_10_2}, {nc_##TAG##_11_1, nc_##TAG##_11_2}, \
      {nc_##TAG##_12_1, nc_##TAG##_12_2}, {nc_##TAG##_13_1, nc_##TAG##_13_2}, \
      {nc_##TAG##_14_1, nc_##TAG##_14_2},
#else
#define KILN_NC_DEF_14(KB, STEP, TAG)
#define KILN_NC_ROW_14(TAG)
#endif
/* Every position count of one variant, and its table [np - 1][nb - 1]. */
#define KILN_NC_VARIANT(KB, STEP, TAG)                                         \
  KILN_NC_DEF2(1, KB, STEP, TAG)                                               \
  KILN_NC_DEF2(2, KB, STEP, TAG)                                               \
  KILN_NC_DEF2(3, KB, STEP, TAG)                                               \
  KILN_NC_DEF2(4, KB, STEP, TAG)                                               \
  KILN_NC_DEF2(5, KB, STEP, TAG)                                               \
  KILN_NC_DEF2(6, KB, STEP, TAG)                                               \
  KILN_NC_DEF_7(KB, STEP, TAG)                                                 \
  KILN_NC_DEF_14(KB, STEP, TAG)                                                \
  static const nc_block_fn nc_##TAG[KILN_NC_NP][2] = {                         \
      {nc_##TAG##_1_1, nc_##TAG##_1_2},      {nc_##TAG##_2_1, nc_##TAG##_2_2}, \
      {nc_##TAG##_3_1, nc_##TAG##_3_2},      {nc_##TAG##_4_1, nc_##TAG##_4_2}, \
      {nc_##TAG##_5_1, nc_##TAG##_5_2},      {nc_##TAG##_6_1, nc_##TAG##_6_2}, \
      KILN_NC_ROW_7(TAG) KILN_NC_ROW_14(TAG)};

/* Which variants are pointwise (offsets computed, no toff). */
enum {
  KILN_NC_PW_b8s1 = 0,
  KILN_NC_PW_b8s2 = 0,
  KILN_NC_PW_b8sn = 0,
  KILN_NC_PW_b8pp = 0,
  KILN_NC_PW_b1s1 = 0,
  KILN_NC_PW_b1s2 = 0,
  KILN_NC_PW_b1sn = 0,
  KILN_NC_PW_b1pp = 0,
  KILN_NC_PW_pw = 1
};
KILN_NC_VARIANT(8, 8, pw)    /* pointwise: a blocked input, its positions one after another */
KILN_NC_VARIANT(8, 8, b8s1)  /* blocked input, stride 1 */
KILN_NC_VARIANT(8, 16, b8s2) /* blocked input, stride 2 */
KILN_NC_VARIANT(8, 0, b8sn)  /* blocked input, any stride */
KILN_NC_VARIANT(8, -1, b8pp) /* blocked input, a pointer per position */
KILN_NC_VARIANT(1, 1, b1s1)  /* plain input (an RGB stem), stride 1 */
KILN_NC_VARIANT(1, 2, b1s2)  /* plain input, stride 2 */
KILN_NC_VARIANT(1, 0, b1sn)  /* plain input, any stride */
KILN_NC_VARIANT(1, -1, b1pp) /* plain input, a pointer per position */

/* Whether rows of ow positions go in row runs: where their runs average at least 4.5
 * positions (under 16 registers a 14-wide row's 5 + 5 + 4 beat runs of 6 across rows by 4%);
 * shorter ones (a 7 x 7 map under 16 registers: 4 + 3) run across rows, a pointer per
 * position. */
static int nc_row_runs(int64_t ow) {
  const int64_t runs = ow <= KILN_NC_NP ? 1 : (ow + KILN_NC_NP - 1) / KILN_NC_NP;
  return ow * 2 >= runs * 9;
}

void KILN_NC_FN(kiln_conv_nchwc_f32)(const float* buf, const int32_t* pos, const int32_t* toff,
                                     int64_t taps, int64_t kb, const float* w, const float* bias,
                                     float* y, int64_t hw, int64_t ow, int64_t sx, int64_t mb0,
                                     int64_t mb1, int64_t p0, int64_t p1, int64_t chunk_rows,
                                     float lo, float hi) {
  const int clamps = KILN_CLAMPS_ANY(float, lo, hi);
  const int64_t plane = hw * KILN_NC_B, wblock = taps * kb * KILN_NC_B;
  const int rows = nc_row_runs(ow);
  const nc_block_fn(*fns)[2] = kb == KILN_NC_B ? (!rows      ? nc_b8pp
                                                  : sx == 8  ? nc_b8s1
                                                  : sx == 16 ? nc_b8s2
                                                             : nc_b8sn)
                                               : (!rows     ? nc_b1pp
                                                  : sx == 1 ? nc_b1s1
                                                  : sx == 2 ? nc_b1s2
                                                            : nc_b1sn);
  static const float zeros[KILN_NC_B] = {0};
  if (chunk_rows < 1) chunk_rows = 1;
  const float* xs[KILN_NC_NP];
  /* Chunks of whole rows whose input stays in L2 while every pair of output blocks passes
   * over them. */
  for (int64_t q0 = p0; q0 < p1;) {
    const int64_t q_end = (q0 / ow + chunk_rows) * ow, q1 = q_end < p1 ? q_end : p1;
    for (int64_t mb = mb0; mb < mb1; mb += 2) {
      const int nb = mb1 - mb >= 2 ? 2 : 1;
      const float *w0 = w + mb * wblock, *w1 = w0 + wblock;
      const float* b0 = bias ? bias + mb * KILN_NC_B : zeros;
      const float* b1 = bias && nb > 1 ? b0 + KILN_NC_B : zeros;
      float *y0 = y + mb * plane, *y1 = y0 + plane;
      nc_at at = {0, sx, xs};
      for (int64_t p = q0; p < q1;) {
        if (!rows) {
          const int64_t n = q1 - p < KILN_NC_NP ? q1 - p : KILN_NC_NP;
          for (int64_t r = 0; r < n; ++r) xs[r] = buf + pos[p - p0 + r];
          fns[n - 1][nb - 1](at, 1, toff, taps, w0, w1, b0, b1, y0 + p * KILN_NC_B,
                             y1 + p * KILN_NC_B, lo, hi, clamps);
          p += n;
          continue;
        }
        /* The rest of p's row (in this chunk) in runs of n and then n + 1 positions, each
         * length's runs in one call (a 27-tap RGB stem's calls of one run each cost 12%). */
        const int64_t row_end = (p / ow + 1) * ow, e = row_end < q1 ? row_end : q1;
        const int64_t left = e - p;
        const int64_t runs = left <= KILN_NC_NP ? 1 : (left + KILN_NC_NP - 1) / KILN_NC_NP;
        const int64_t n = left / runs, longer = left % runs;
        at.x = buf + pos[p - p0];
        fns[n - 1][nb - 1](at, runs - longer, toff, taps, w0, w1, b0, b1, y0 + p * KILN_NC_B,
                           y1 + p * KILN_NC_B, lo, hi, clamps);
        p += (runs - longer) * n;
        if (longer > 0) {
          at.x = buf + pos[p - p0];
          fns[n][nb - 1](at, longer, toff, taps, w0, w1, b0, b1, y0 + p * KILN_NC_B,
                         y1 + p * KILN_NC_B, lo, hi, clamps);
        }
        p = e;
      }
    }
    q0 = q1;
  }
}

/* A 1x1 convolution of one image at stride 1 (module_abi.h: kiln_support.conv_nchwc_pw_f32):
 * positions one after another, input blocks hw x 8 floats apart. The positions go in chunks
 * whose input (chunk x C floats) stays in L1/L2 while every pair of output blocks passes over
 * them. */
void KILN_NC_FN(kiln_conv_nchwc_pw_f32)(const float* x, int64_t c, int64_t hw, const float* w,
                                        const float* bias, float* y, int64_t mb0, int64_t mb1,
                                        int64_t p0, int64_t p1, float lo, float hi) {
  static const float zeros[KILN_NC_B] = {0};
  const int clamps = KILN_CLAMPS_ANY(float, lo, hi);
  const int64_t plane = hw * KILN_NC_B, taps = c / KILN_NC_B;
  int64_t chunk = 65536 / 4 / (c > 0 ? c : 1) / KILN_NC_NP * KILN_NC_NP;
  if (chunk < KILN_NC_NP) chunk = KILN_NC_NP;
  for (int64_t q0 = p0; q0 < p1; q0 += chunk) {
    const int64_t q1 = p1 - q0 < chunk ? p1 : q0 + chunk;
    for (int64_t mb = mb0; mb < mb1; mb += 2) {
      const int nb = mb1 - mb >= 2 ? 2 : 1;
      const float *w0 = w + mb * c * KILN_NC_B, *w1 = w0 + c * KILN_NC_B;
      const float* b0 = bias ? bias + mb * KILN_NC_B : zeros;
      const float* b1 = bias && nb > 1 ? b0 + KILN_NC_B : zeros;
      float *y0 = y + mb * plane, *y1 = y0 + plane;
      /* The chunk's whole blocks in one call, then its last few positions. */
      const int64_t whole = (q1 - q0) / KILN_NC_NP, tail = (q1 - q0) % KILN_NC_NP;
      const nc_at at = {x + q0 * KILN_NC_B, plane, 0};
      if (whole > 0)
        nc_pw[KILN_NC_NP - 1][nb - 1](at, whole, 0, taps, w0, w1, b0, b1, y0 + q0 * KILN_NC_B,
                                      y1 + q0 * KILN_NC_B, lo, hi, clamps);
      if (tail > 0) {
        const int64_t p = q0 + whole * KILN_NC_NP;
        const nc_at rest = {x + p * KILN_NC_B, plane, 0};
        nc_pw[tail - 1][nb - 1](rest, 1, 0, taps, w0, w1, b0, b1, y0 + p * KILN_NC_B,
                                y1 + p * KILN_NC_B, lo, hi, clamps);
      }
    }
  }
}
