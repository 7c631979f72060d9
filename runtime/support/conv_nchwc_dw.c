/* The blocked-layout (NCHW8c) depthwise convolution behind kiln_support.conv_nchwc_dw_f32,
 * compiled once per vector ISA like conv_nchwc.c (module_abi.h states its contract). A vector
 * holds the 8 channels of one block at one position.
 *
 * Square 3x3 and 5x5 windows at stride 1 and 2 (every depthwise layer of the zoo's MobileNets,
 * EfficientNet, MNASNet and ShuffleNet) and 7x7 and 9x9 at stride 1 (ConvNeXt's, EdgeNeXt's;
 * a tap at a time they ran at 5-30 GFLOP/s, 2.6x onnxruntime's time on ConvNeXt-T) go in
 * groups of up to 8 neighbouring output positions
 * of a row: a tap row's weights sit in registers, and each input vector of the row is loaded
 * once and multiplied into every sum whose window holds it. A 3x3 row then costs 10 loads for
 * 24 multiply-adds, where loading each tap's input apart cost 24 (the kernel ran at 43-55% of
 * the FMA peak on data in L2, load-bound). Only a row's first and last groups test their
 * columns, reading zeros outside the row. Other windows take a tap at a time. */
#include "runtime/support/conv_nchwc_dw.h"

#include <stdint.h>

#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA)
#error "conv_nchwc_dw.c is compiled with KILN_ISA defined"
#endif

#define KILN_DW_CAT2(a, b) a##b
#define KILN_DW_CAT(a, b) KILN_DW_CAT2(a, b)
#define KILN_DW_FN(name) KILN_DW_CAT(name, KILN_DW_CAT(_, KILN_ISA))

/* Every trip of a constant-trip loop (see conv_nchwc.c for clang's reading of `GCC unroll`). */
#if defined(__clang__)
#define KILN_DW_UNROLL _Pragma("clang loop unroll(full)")
#else
#define KILN_DW_UNROLL _Pragma("GCC unroll 32")
#endif

/* The base copy's vectors never cross a call (see conv_nchwc.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float dw_v8 __attribute__((vector_size(32)));
typedef float dw_v8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t dw_v8i __attribute__((vector_size(32)));
KILN_CLAMP_FN(dw_clamp, dw_v8, dw_v8i, float)

enum { KILN_DW_B = 8, KILN_DW_G = 8 /* positions per group */ };

#define DW_LOAD(p) (*(const dw_v8u*)(p))
#define DW_STORE(p, v) (*(dw_v8u*)(p) = (v))

static const float dw_zeros[KILN_DW_B] __attribute__((aligned(32))) = {0};

/* G output positions of one row under a K x K window at stride S. x: the input row of tap row 0,
 * from the group's first window column (which may lie outside the row: EDGE groups read zeros
 * for columns u outside [ulo, uhi)); row: floats between input rows; rows_ok[i]: whether tap
 * row i lies inside the image. Each sum adds its taps in row-major order, as a tap-by-tap loop
 * would. */
static inline __attribute__((always_inline)) void dw_group(
    const int g, const int k, const int s, const int edge, const float* x, int64_t row,
    const int32_t* rows_ok, int64_t ulo, int64_t uhi, const float* zeros, const float* restrict w,
    dw_v8 b, float* restrict y, float lo, float hi, int clamps) {
  dw_v8 acc[KILN_DW_G];
  KILN_DW_UNROLL for (int q = 0; q < g; ++q) acc[q] = b;
  for (int i = 0; i < k; ++i) {
    if (!rows_ok[i]) continue;
    const float* xi = x + i * row;
    dw_v8 wt[9];
    KILN_DW_UNROLL for (int j = 0; j < k; ++j) wt[j] = DW_LOAD(w + (i * k + j) * KILN_DW_B);
    KILN_DW_UNROLL for (int u = 0; u < (g - 1) * s + k; ++u) {
      const float* p = xi + u * KILN_DW_B;
      if (edge && (u < ulo || u >= uhi)) p = zeros;
      const dw_v8 v = DW_LOAD(p);
      KILN_DW_UNROLL for (int j = 0; j < k; ++j) {
        const int qs = u - j; /* = q * s for the sum this tap of column u belongs to */
        if (qs >= 0 && qs % s == 0 && qs / s < g) acc[qs / s] += v * wt[j];
      }
    }
  }
  KILN_DW_UNROLL for (int q = 0; q < g; ++q)
      DW_STORE(y + q * KILN_DW_B, clamps ? dw_clamp(acc[q], lo, hi) : acc[q]);
}

typedef void (*dw_group_fn)(const float* x, int64_t row, const int32_t* rows_ok, int64_t ulo,
                            int64_t uhi, const float* zeros, const float* w, dw_v8 b, float* y,
                            float lo, float hi, int clamps);

#define KILN_DW_DEF(G, K, S, EDGE)                                                             \
  static void dw_##K##_##S##_##G##_##EDGE(                                                     \
      const float* x, int64_t row, const int32_t* rows_ok, int64_t ulo, int64_t uhi,           \
      const float* zeros, const float* w, dw_v8 b, float* y, float lo, float hi, int clamps) { \
    dw_group(G, K, S, EDGE, x, row, rows_ok, ulo, uhi, zeros, w, b, y, lo, hi, clamps);        \
  }
#define KILN_DW_DEF2(G, K, S) KILN_DW_DEF(G, K, S, 0) KILN_DW_DEF(G, K, S, 1)
/* Every group size of one window and stride, and its table [g - 1][edge]. */
#define KILN_DW_VARIANT(K, S)                                                             \
  KILN_DW_DEF2(1, K, S)                                                                   \
  KILN_DW_DEF2(2, K, S)                                                                   \
  KILN_DW_DEF2(3, K, S)                                                                   \
  KILN_DW_DEF2(4, K, S)                                                                   \
  KILN_DW_DEF2(5, K, S)                                                                   \
  KILN_DW_DEF2(6, K, S)                                                                   \
  KILN_DW_DEF2(7, K, S)                                                                   \
  KILN_DW_DEF2(8, K, S)                                                                   \
  static const dw_group_fn dw_##K##_##S[KILN_DW_G][2] = {                                 \
      {dw_##K##_##S##_1_0, dw_##K##_##S##_1_1}, {dw_##K##_##S##_2_0, dw_##K##_##S##_2_1}, \
      {dw_##K##_##S##_3_0, dw_##K##_##S##_3_1}, {dw_##K##_##S##_4_0, dw_##K##_##S##_4_1}, \
      {dw_##K##_##S##_5_0, dw_##K##_##S##_5_1}, {dw_##K##_##S##_6_0, dw_##K##_##S##_6_1}, \
      {dw_##K##_##S##_7_0, dw_##K##_##S##_7_1}, {dw_##K##_##S##_8_0, dw_##K##_##S##_8_1}};
KILN_DW_VARIANT(3, 1)
KILN_DW_VARIANT(3, 2)
KILN_DW_VARIANT(5, 1)
KILN_DW_VARIANT(5, 2)
KILN_DW_VARIANT(7, 1)
KILN_DW_VARIANT(9, 1)

/* Any other window: a tap at a time, each tap row summed on its own and then added (one
 * running sum made each position a chain of kh x kw dependent multiply-adds). Tap row i is
 * input row iy0 + i (any kh: rows_ok holds only the first 64). */
static void dw_any(const float* xr, int64_t row, int64_t wd, int64_t c0, int64_t kh, int64_t kw,
                   int64_t iy0, int64_t h, const float* w, dw_v8 b, float* y, float lo, float hi,
                   int clamps) {
  const int64_t j0 = c0 < 0 ? -c0 : 0, j1 = c0 + kw > wd ? wd - c0 : kw;
  dw_v8 acc = b;
  for (int64_t i = 0; i < kh; ++i) {
    if (iy0 + i < 0 || iy0 + i >= h || j0 >= j1) continue;
    const float* xi = xr + i * row + c0 * KILN_DW_B;
    const float* wi = w + i * kw * KILN_DW_B;
    dw_v8 r = DW_LOAD(xi + j0 * KILN_DW_B) * DW_LOAD(wi + j0 * KILN_DW_B);
    for (int64_t j = j0 + 1; j < j1; ++j)
      r += DW_LOAD(xi + j * KILN_DW_B) * DW_LOAD(wi + j * KILN_DW_B);
    acc += r;
  }
  DW_STORE(y, clamps ? dw_clamp(acc, lo, hi) : acc);
}

void KILN_DW_FN(kiln_conv_nchwc_dw_f32)(const float* x, int64_t h, int64_t wd, const float* w,
                                        const float* bias, float* y, int64_t oh, int64_t ow,
                                        int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                                        int64_t pw, int64_t cb0, int64_t cb1, int64_t oy0,
                                        int64_t oy1, float lo, float hi) {
  const int clamps = KILN_CLAMPS_ANY(float, lo, hi);
  const dw_group_fn(*fns)[2] = 0;
  if (kh == kw && sw == sh) {
    if (kh == 3) fns = sw == 1 ? dw_3_1 : sw == 2 ? dw_3_2 : 0;
    if (kh == 5) fns = sw == 1 ? dw_5_1 : sw == 2 ? dw_5_2 : 0;
    if (kh == 7 && sw == 1) fns = dw_7_1;
    if (kh == 9 && sw == 1) fns = dw_9_1;
  }
  int32_t rows_ok[64];
  const int64_t row = wd * KILN_DW_B;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const float* xc = x + cb * h * row;
    const float* wc = w + cb * kh * kw * KILN_DW_B;
    const dw_v8 b = bias ? DW_LOAD(bias + cb * KILN_DW_B) : (dw_v8){0};
    float* yc = y + cb * oh * ow * KILN_DW_B;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      const int64_t iy0 = oy * sh - ph;
      /* For the group functions (kh <= 9); dw_any tests its rows itself. */
      for (int64_t i = 0; i < kh && i < 64; ++i) rows_ok[i] = iy0 + i >= 0 && iy0 + i < h;
      /* The input row of tap row 0 (it may lie outside x; only rows_ok rows are read). */
      const float* xr = xc + iy0 * row;
      float* yr = yc + oy * ow * KILN_DW_B;
      for (int64_t ox = 0; ox < ow;) {
        const int64_t c0 = ox * sw - pw;
        if (!fns) {
          dw_any(xr, row, wd, c0, kh, kw, iy0, h, wc, b, yr + ox * KILN_DW_B, lo, hi, clamps);
          ++ox;
          continue;
        }
        const int64_t g = ow - ox < KILN_DW_G ? ow - ox : KILN_DW_G;
        const int edge = c0 < 0 || c0 + (g - 1) * sw + kw > wd;
        fns[g - 1][edge](xr + c0 * KILN_DW_B, row, rows_ok, -c0, wd - c0, dw_zeros, wc, b,
                         yr + ox * KILN_DW_B, lo, hi, clamps);
        ox += g;
      }
    }
  }
}
