/* The blocked-layout (NCHW8c) direct and pointwise convolution kernels, one copy per vector ISA
 * (conv_nchwc.c); support.c hands modules the copy the running CPU supports, as
 * kiln_support.conv_nchwc_f32 and conv_nchwc_pw_f32 (whose contracts module_abi.h states). */
#ifndef KILN_CONV_NCHWC_H
#define KILN_CONV_NCHWC_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CONV_NCHWC_DECL(ISA)                                                                \
  void kiln_conv_nchwc_f32_##ISA(                                                                \
      const float* buf, const int32_t* pos, const int32_t* toff, int64_t taps, int64_t kb,       \
      const float* w, const float* bias, float* y, int64_t hw, int64_t ow, int64_t sx,           \
      int64_t mb0, int64_t mb1, int64_t p0, int64_t p1, int64_t chunk_rows, float lo, float hi); \
  void kiln_conv_nchwc_pw_f32_##ISA(const float* x, int64_t c, int64_t hw, const float* w,       \
                                    const float* bias, float* y, int64_t mb0, int64_t mb1,       \
                                    int64_t p0, int64_t p1, float lo, float hi);
KILN_CONV_NCHWC_DECL(base)
#if defined(__x86_64__)
KILN_CONV_NCHWC_DECL(avx2)
KILN_CONV_NCHWC_DECL(avx512)
#endif
#undef KILN_CONV_NCHWC_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_CONV_NCHWC_H */
