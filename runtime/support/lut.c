/* kiln_support.lut_bytes (module_abi.h), once per ISA like the integer GEMM: a byte -> byte
 * table applied to a run of bytes. A quantized activation (sigmoid, swish, GELU between
 * QuantizeLinear and DequantizeLinear) of one byte tensor is a function of the byte alone, so
 * the chain is evaluated 256 times and the tensor is looked up; with VBMI, 64 bytes per
 * two two-table byte permutes and a blend. */
#include "runtime/support/lut.h"

#if defined(__AVX512VBMI__)
#include <immintrin.h>
#endif

#define KILN_CAT2(a, b) a##_##b
#define KILN_CAT(a, b) KILN_CAT2(a, b)

void KILN_CAT(kiln_lut_bytes, KILN_ISA)(const uint8_t* x, uint8_t* y, int64_t n,
                                        const uint8_t* table) {
  int64_t i = 0;
#if defined(__AVX512VBMI__)
  const __m512i t0 = _mm512_loadu_si512((const void*)table);
  const __m512i t1 = _mm512_loadu_si512((const void*)(table + 64));
  const __m512i t2 = _mm512_loadu_si512((const void*)(table + 128));
  const __m512i t3 = _mm512_loadu_si512((const void*)(table + 192));
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512((const void*)(x + i));
    /* Index bits 0-6 pick within a half; bit 7 picks the half. */
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_storeu_si512((void*)(y + i), _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
#endif
  for (; i < n; ++i) y[i] = table[x[i]];
}
