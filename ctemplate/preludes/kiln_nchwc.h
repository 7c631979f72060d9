/* kiln_nchwc.h — float32 convolution kernels over the blocked channel layout NCHW8c: a
 * tensor (N, C, H, W) is held as (N, C/8, H, W, 8), the 8 channels of a block side by side
 * at each position. A vector then holds 8 channels of one position, so the kernels vectorize
 * over channels and never over a row (a 7 x 7 map's rows fill no vector in NCHW). The layout
 * pass (rewrite/cpu/layout_nchwc.cpp) puts MobileNet-style chains of pointwise and depthwise
 * convolutions into it and reorders once at the chain's edges (ops/conv_nchwc.h). The
 * convolutions themselves run from kiln's support library; the max pool is here. */
#ifndef KILN_NCHWC_H
#define KILN_NCHWC_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#include <stdint.h>

#define KILN_NCHWC_B 8
typedef float kiln_v8f __attribute__((vector_size(32)));
typedef float kiln_v8fu __attribute__((vector_size(32), aligned(4)));
typedef int32_t kiln_v8i __attribute__((vector_size(32)));
/* s + -0.0 is s for every s, so this folds to one broadcast (0.0 + s would add first). */
#define KILN_V8_SPLAT(s) ((s) + -(kiln_v8f){0})
#define KILN_V8_LOAD(p) (*(const kiln_v8fu*)(p))
#define KILN_V8_STORE(p, v) (*(kiln_v8fu*)(p) = (v))

/* A 1x1 convolution of one image (output blocks [mb0, mb1) at positions [p0, p1); x (C/8, hw,
 * 8), w (M/8, C, 8), bias (M) or null, y (M/8, hw, 8)), as kiln_support.conv_nchwc_pw_f32
 * states (module_abi.h): compiled once into kiln per vector ISA (runtime/support/conv_nchwc.c),
 * where gcc's code ran 1x1 layers 5-12% faster than clang's copy in each module. */
#define kiln_nchwc_pointwise (KILN_SUPPORT->conv_nchwc_pw_f32)

/* A direct convolution (any window, stride and padding) of one image, as
 * kiln_support.conv_nchwc_f32 states (module_abi.h): compiled once into kiln per vector ISA
 * (runtime/support/conv_nchwc.c), not into every module. */
#define kiln_nchwc_direct (KILN_SUPPORT->conv_nchwc_f32)

/* A depthwise convolution of one image (channel blocks [cb0, cb1), output rows [oy0, oy1)), as
 * kiln_support.conv_nchwc_dw_f32 states (module_abi.h): compiled once into kiln per vector ISA
 * (runtime/support/conv_nchwc_dw.c). */
#define kiln_nchwc_depthwise (KILN_SUPPORT->conv_nchwc_dw_f32)

/* A 3x3 convolution at stride 1 and pads 1 by Winograd's F(2x2, 3x3) of one image (output
 * blocks [mb0, mb1), output rows [oy0, oy1), oy0 even; u the transformed weights), as
 * kiln_support.conv_nchwc_wino_f32 states (module_abi.h): compiled once into kiln per vector
 * ISA (runtime/support/conv_nchwc_wino.c). */
#define kiln_nchwc_winograd (KILN_SUPPORT->conv_nchwc_wino_f32)
/* The same by F(4x4, 3x3) (oy0 a multiple of 4; u from F(4x4)'s transform), as
 * kiln_support.conv_nchwc_wino4_f32 states. */
#define kiln_nchwc_winograd4 (KILN_SUPPORT->conv_nchwc_wino4_f32)

/* Max pooling of one image: channel blocks [cb0, cb1), output rows [oy0, oy1). x (C/8, h, wd,
 * 8), y (C/8, oh, ow, 8). Padding is skipped, not read as -inf; a NaN wins and stays, as in
 * the NCHW pool (v > m or v is NaN).
 * A window's max is taken with one select per tap (v > m: a maxps), which skips NaN, and its
 * sum alongside: NaN when a tap is NaN (or +inf meets -inf), and only then is the window
 * taken again with the NaN test in every tap. Four operations per tap were half the speed
 * (ResNet's 3 x 3 pool on one core, 218 against 116 us). */
KILN_HELPER kiln_v8f kiln_nchwc_window_max(const float* xc, int64_t row, int64_t i0, int64_t i1,
                                           int64_t j0, int64_t j1) {
  kiln_v8f m = KILN_V8_SPLAT(-__builtin_inff()), sum = KILN_V8_SPLAT(0.0f);
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      const kiln_v8f v = KILN_V8_LOAD(xc + i * row + j * KILN_NCHWC_B);
      const kiln_v8i gt = (kiln_v8i)(v > m);
      m = (kiln_v8f)(((kiln_v8i)v & gt) | ((kiln_v8i)m & ~gt));
      sum += v;
    }
  const kiln_v8i nan = (kiln_v8i)(sum != sum);
  if (__builtin_expect((nan[0] | nan[1] | nan[2] | nan[3] | nan[4] | nan[5] | nan[6] | nan[7]) != 0,
                       0)) {
    m = KILN_V8_SPLAT(-__builtin_inff());
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        const kiln_v8f v = KILN_V8_LOAD(xc + i * row + j * KILN_NCHWC_B);
        const kiln_v8i take = (kiln_v8i)(v > m) | (kiln_v8i)(v != v);
        m = (kiln_v8f)(((kiln_v8i)v & take) | ((kiln_v8i)m & ~take));
      }
  }
  return m;
}

KILN_HELPER void kiln_nchwc_max_pool(const float* x, int64_t h, int64_t wd, float* y, int64_t oh,
                                     int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                     int64_t ph, int64_t pw, int64_t cb0, int64_t cb1, int64_t oy0,
                                     int64_t oy1) {
  const int64_t row = wd * KILN_NCHWC_B;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const float* xc = x + cb * h * row;
    float* yc = y + cb * oh * ow * KILN_NCHWC_B;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      int64_t i0 = oy * sh - ph, i1 = i0 + kh;
      if (i0 < 0) i0 = 0;
      if (i1 > h) i1 = h;
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t j0 = ox * sw - pw, j1 = j0 + kw;
        if (j0 < 0) j0 = 0;
        if (j1 > wd) j1 = wd;
        KILN_V8_STORE(yc + (oy * ow + ox) * KILN_NCHWC_B,
                      kiln_nchwc_window_max(xc, row, i0, i1, j0, j1));
      }
    }
  }
}

#endif /* KILN_NCHWC_H */
