/* The blocked-layout (NCHW8c) depthwise convolution, one copy per vector ISA (conv_nchwc_dw.c);
 * support.c hands modules the copy the running CPU supports as kiln_support.conv_nchwc_dw_f32
 * (whose contract module_abi.h states). */
#ifndef KILN_CONV_NCHWC_DW_H
#define KILN_CONV_NCHWC_DW_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CONV_NCHWC_DW_DECL(ISA)                                                      \
  void kiln_conv_nchwc_dw_f32_##ISA(                                                      \
      const float* x, int64_t h, int64_t wd, const float* w, const float* bias, float* y, \
      int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, \
      int64_t pw, int64_t cb0, int64_t cb1, int64_t oy0, int64_t oy1, float lo, float hi);
KILN_CONV_NCHWC_DW_DECL(base)
#if defined(__x86_64__)
KILN_CONV_NCHWC_DW_DECL(avx2)
KILN_CONV_NCHWC_DW_DECL(avx512)
#endif
#undef KILN_CONV_NCHWC_DW_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_CONV_NCHWC_DW_H */
