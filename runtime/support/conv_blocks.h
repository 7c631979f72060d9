/* The packed-weight direct-convolution kernel, one copy per vector ISA (conv_blocks.c);
 * support.c hands modules the copy the running CPU supports, as
 * kiln_support.conv_blocks_f32/f64 (whose contract, and the weight layout, module_abi.h
 * states). */
#ifndef KILN_CONV_BLOCKS_H
#define KILN_CONV_BLOCKS_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CONV_BLOCKS_DECL(T, S, ISA)                                                 \
  void kiln_conv_blocks_##S##_##ISA(int64_t m, int64_t npos, int64_t taps, const T* b,   \
                                    const int32_t* pos, const int32_t* off, const T* wb, \
                                    const T* bias, int64_t bs, T* y, int64_t ldy, T lo, T hi);
KILN_CONV_BLOCKS_DECL(float, f32, base)
KILN_CONV_BLOCKS_DECL(double, f64, base)
#if defined(__x86_64__)
KILN_CONV_BLOCKS_DECL(float, f32, avx2)
KILN_CONV_BLOCKS_DECL(double, f64, avx2)
KILN_CONV_BLOCKS_DECL(float, f32, avx512)
KILN_CONV_BLOCKS_DECL(double, f64, avx512)
#endif
#undef KILN_CONV_BLOCKS_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_CONV_BLOCKS_H */
