/* The blocked-layout (NCHW8c) 3x3 convolutions by Winograd's F(2x2, 3x3) and F(4x4, 3x3), one
 * copy per vector ISA (conv_nchwc_wino.c); support.c hands modules the copies the running CPU
 * supports as kiln_support.conv_nchwc_wino_f32 and conv_nchwc_wino4_f32 (whose contracts
 * module_abi.h states). */
#ifndef KILN_CONV_NCHWC_WINO_H
#define KILN_CONV_NCHWC_WINO_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CONV_NCHWC_WINO_DECL(ISA)                                                         \
  void kiln_conv_nchwc_wino_f32_##ISA(const float* x, int64_t c, int64_t h, int64_t wd,        \
                                      const float* u, int64_t m, const float* bias, float* y,  \
                                      int64_t mb0, int64_t mb1, int64_t oy0, int64_t oy1,      \
                                      float* work, float lo, float hi);                        \
  void kiln_conv_nchwc_wino4_f32_##ISA(const float* x, int64_t c, int64_t h, int64_t wd,       \
                                       const float* u, int64_t m, const float* bias, float* y, \
                                       int64_t mb0, int64_t mb1, int64_t oy0, int64_t oy1,     \
                                       float* work, float lo, float hi);
KILN_CONV_NCHWC_WINO_DECL(base)
#if defined(__x86_64__)
KILN_CONV_NCHWC_WINO_DECL(avx2)
KILN_CONV_NCHWC_WINO_DECL(avx512)
#endif
#undef KILN_CONV_NCHWC_WINO_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_CONV_NCHWC_WINO_H */
