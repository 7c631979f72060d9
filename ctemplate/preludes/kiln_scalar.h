/* kiln_scalar.h — scalar helpers whose plain C form would be undefined or differ from
 * the reference semantics: integer division by zero or of INT_MIN by -1 (no trap: 0 and
 * wrap-around), Python-style modulo (sign of the divisor), integer powers. */
#ifndef KILN_SCALAR_H
#define KILN_SCALAR_H
#ifndef KILN_HELPER
/* Helpers a module does not call must not warn. */
#define KILN_HELPER static inline __attribute__((unused))
#endif
#ifndef __CUDACC_RTC__ /* NVRTC has no C library: kiln_cuda.cuh stands in */
#include <math.h>
#include <stdint.h>
#endif

#define KILN_INT_HELPERS(T, S, UT)                                         \
  KILN_HELPER T kiln_div_##S(T a, T b) {                                 \
    if (b == 0) return 0;                                                  \
    if (b == -1) return (T)(0 - (UT)a);                                    \
    return (T)(a / b);                                                     \
  }                                                                        \
  KILN_HELPER T kiln_mod_##S(T a, T b) {                                 \
    if (b == 0 || b == -1) return 0;                                       \
    T r = (T)(a % b);                                                      \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;              \
  }                                                                        \
  KILN_HELPER T kiln_pow_##S(T a, T b) {                                 \
    if (b < 0) return (T)(a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0)); \
    UT r = 1, x = (UT)a;                                                   \
    while (b) {                                                            \
      if (b & 1) r *= x;                                                   \
      x *= x;                                                              \
      b = (T)(b >> 1);                                                     \
    }                                                                      \
    return (T)r;                                                           \
  }

KILN_INT_HELPERS(int8_t, i8, uint8_t)
KILN_INT_HELPERS(int32_t, i32, uint32_t)
KILN_INT_HELPERS(int64_t, i64, uint64_t)

KILN_HELPER uint8_t kiln_div_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a / b) : 0; }
KILN_HELPER uint8_t kiln_mod_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a % b) : 0; }
KILN_HELPER uint8_t kiln_pow_u8(uint8_t a, uint8_t b) {
  uint8_t r = 1;
  while (b) {
    if (b & 1) r = (uint8_t)(r * a);
    a = (uint8_t)(a * a);
    b = (uint8_t)(b >> 1);
  }
  return r;
}

KILN_HELPER float kiln_mod_f32(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KILN_HELPER double kiln_mod_f64(double a, double b) {
  double r = fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#endif /* KILN_SCALAR_H */
