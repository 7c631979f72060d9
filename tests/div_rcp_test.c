/* kiln_math.h's kiln_div_rcpf (a quantizer's division by a known scale s as a product by
 * r = RN(1/s) with one fused correction) against the division itself, per float bit pattern:
 *   - bit for bit wherever |x| >= 2^-100 and |x / s| < 2^127 (the claim docs/onnx.md makes);
 *   - rounded to an integer (saturated past 2^24, as any quantizer's clip saturates), equal
 *     for every x, NaN for NaN, zeros' signs included.
 * Scales: 1 - 2^-24 (its reciprocal rounds up), 2^-7 (1 - 2^-24), 1 + 2^-23, powers of two,
 * and seeded random ones from 2^-24 to 2^14. By default every 509th pattern of all 2^32 for 40
 * scales; `div_rcp_test --all [SCALES]` walks all 2^32 per scale (about 10 s each). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_math.h"

static float from_bits(uint32_t u) { return kiln_bits_to_f32((int32_t)u); }
static uint32_t to_bits(float f) { return (uint32_t)kiln_f32_to_bits(f); }
/* A quantizer's view of a quotient: its nearest integer, saturated. */
static float as_integer(float v) {
  const float n = nearbyintf(v);
  return n > 0x1p24f ? 0x1p24f : n < -0x1p24f ? -0x1p24f : n;
}

static float scale_at(int k, uint32_t* seed) {
  switch (k) {
    case 0:
      return 1.0f - 0x1p-24f;
    case 1:
      return (1.0f - 0x1p-24f) * 0x1p-7f;
    case 2:
      return 1.0f + 0x1p-23f;
    case 3:
      return 0x1p-10f;
    case 4:
      return 0.1f;
    default:
      break;
  }
  *seed = *seed * 1664525u + 1013904223u;
  const float mantissa = 1.0f + (float)(*seed >> 9) * 0x1p-23f;
  *seed = *seed * 1664525u + 1013904223u;
  return ldexpf(mantissa, (int)(*seed % 39u) - 24);
}

int main(int argc, char** argv) {
  const int all = argc > 1 && strcmp(argv[1], "--all") == 0;
  const int scales = argc > 2 ? atoi(argv[2]) : 40;
  const uint64_t step = all ? 1 : 509;
  uint32_t seed = 12345;
  long bad = 0;
  for (int k = 0; k < scales; ++k) {
    const float s = scale_at(k, &seed), r = 1.0f / s;
    long claim = 0, integer = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += step) {
      const float x = from_bits((uint32_t)u);
      const float want = x / s, got = kiln_div_rcpf(x, s, r);
      if (to_bits(want) == to_bits(got) || (isnan(want) && isnan(got))) continue;
      if (fabsf(x) >= 0x1p-100f && fabsf(want) < 0x1p127f && claim++ < 3)
        printf("  s=%a x=%a: x / s = %a, kiln_div_rcpf %a\n", s, x, want, got);
      if (to_bits(as_integer(want)) != to_bits(as_integer(got)) && integer++ < 3)
        printf("  s=%a x=%a: rounds to %a, kiln_div_rcpf's to %a\n", s, x, as_integer(want),
               as_integer(got));
    }
    if (claim || integer)
      printf("s=%a: %ld quotients differ in the claimed range, %ld integers differ\n", s, claim,
             integer);
    bad += claim + integer;
  }
  printf("%d scales, every %llu-th float: %s\n", scales, (unsigned long long)step,
         bad ? "FAILED" : "exact");
  return bad ? 1 : 0;
}
