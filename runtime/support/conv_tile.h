/* The direct-convolution tile kernel, one copy per vector ISA (conv_tile.c); support.c hands
 * modules the copy the running CPU supports, as kiln_support.conv_tile_f32/f64 (whose
 * contract module_abi.h states). */
#ifndef KILN_CONV_TILE_H
#define KILN_CONV_TILE_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CONV_TILE_DECL(T, S, ISA)                                                         \
  void kiln_conv_tile_##S##_##ISA(int64_t m, int64_t npos, int64_t taps, const T* b,           \
                                  const int32_t* off, const T* w, int64_t ldw, const T* bias,  \
                                  int64_t bs, T* y, int64_t ldy, int64_t wp, int64_t ow, T lo, \
                                  T hi);
KILN_CONV_TILE_DECL(float, f32, base)
KILN_CONV_TILE_DECL(double, f64, base)
#if defined(__x86_64__)
KILN_CONV_TILE_DECL(float, f32, avx2)
KILN_CONV_TILE_DECL(double, f64, avx2)
KILN_CONV_TILE_DECL(float, f32, avx512)
KILN_CONV_TILE_DECL(double, f64, avx512)
#endif
#undef KILN_CONV_TILE_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_CONV_TILE_H */
