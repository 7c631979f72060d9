/* float16 and bfloat16 as storage types: conversions to and from float with
 * round-to-nearest-even (the IEEE default), subnormals, infinities and NaN kept. One
 * definition serves the runtime (Tensor element access) and generated modules (a prelude),
 * so both round alike. C and C++. */
#ifndef KILN_HALF_H
#define KILN_HALF_H

#include <stdint.h>
#include <string.h>

/* A module uses some of these: the others must not warn. */
#define KILN_HALF_FN static inline __attribute__((unused))

KILN_HALF_FN float kiln_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  float f;
  if (e == 0) {
    f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24: zero and subnormals, exact */
    return sign ? -f : f;
  }
  bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &bits, sizeof f);
  return f;
}

KILN_HALF_FN uint16_t kiln_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return (uint16_t)(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
  if (x < 0x38800000u) {
    /* Below 2^-14: a subnormal half, |f| * 2^24 rounded to the nearest integer, ties to
     * even (the product is exact; adding 2^23 rounds it in the float's last place). */
    float a, r;
    uint32_t ar = x;
    memcpy(&a, &ar, sizeof a);
    r = a * 16777216.0f + 8388608.0f;
    memcpy(&ar, &r, sizeof ar);
    return (uint16_t)(sign | (ar - 0x4b000000u));
  }
  x += 0xfffu + ((x >> 13) & 1u); /* round the 13 dropped bits, ties to even */
  x -= 112u << 23;                /* rebias the exponent: 127 -> 15 */
  return (uint16_t)(sign | (x >> 13));
}

KILN_HALF_FN float kiln_bf16_to_f32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

KILN_HALF_FN uint16_t kiln_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

#endif /* KILN_HALF_H */
