/* Sixteen int32 sums stored as the integer kernels store one (qgemm_epi.h): int32, or
 * rint(acc * scale) + y_zp saturated to [lo, hi] as bytes, with the epilogue's constants
 * read once into registers (a byte store may alias the epilogue, so the compiler reloaded
 * them for every store). AVX-512 only. */
#ifndef KILN_SUPPORT_QREQUANT16_H
#define KILN_SUPPORT_QREQUANT16_H
#if defined(__AVX512BW__)
#include <immintrin.h>

#include "runtime/module/module_abi.h"

typedef struct kiln_requant16 {
  int requant;
  __m512 lo_clip, hi_clip;
  __m512i y_zp, lo, hi;
} kiln_requant16;

static inline kiln_requant16 kiln_requant16_of(const kiln_qgemm_epi* e) {
  kiln_requant16 r;
  r.requant = e->scale != 0;
  r.lo_clip = _mm512_set1_ps(-1e6f);
  r.hi_clip = _mm512_set1_ps(1e6f);
  r.y_zp = _mm512_set1_epi32(e->y_zp);
  r.lo = _mm512_set1_epi32(e->lo);
  r.hi = _mm512_set1_epi32(e->hi);
  return r;
}

/* Lanes in mask m of acc to y[at...] (bytes or int32). The product is clipped to +-1e6 (past
 * that the byte saturates anyway) so vcvtps2dq, which rounds to nearest even like rint in the
 * default mode, stays in range; y_zp and the bounds then apply exactly in int32. */
static inline void kiln_requant16_store(const kiln_requant16* r, void* y, int64_t at, __m512i acc,
                                        __m512 scales, __mmask16 m) {
  if (!r->requant) {
    _mm512_mask_storeu_epi32((int32_t*)y + at, m, acc);
    return;
  }
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scales);
  v = _mm512_min_ps(_mm512_max_ps(v, r->lo_clip), r->hi_clip);
  __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), r->y_zp);
  q = _mm512_min_epi32(_mm512_max_epi32(q, r->lo), r->hi);
  /* In range of the byte type: truncating to 8 bits keeps the value (two's complement). */
  _mm_mask_storeu_epi8((uint8_t*)y + at, m, _mm512_cvtepi32_epi8(q));
}

#endif
#endif /* KILN_SUPPORT_QREQUANT16_H */
