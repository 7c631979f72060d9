/* The integer kernels' store of one corrected accumulator (module_abi.h's kiln_qgemm_epi):
 * as int32, dequantized to float32, or requantized to a byte, in the one formula every kernel
 * uses. */
#ifndef KILN_SUPPORT_QGEMM_EPI_H
#define KILN_SUPPORT_QGEMM_EPI_H
#include <math.h>

#include "runtime/module/module_abi.h"

static inline void qgemm_store(const kiln_qgemm_epi* e, void* c, int64_t i, int64_t j, int32_t v) {
  const int64_t at = i * e->rsc + j * e->csc;
  if (!e->scale) {
    ((int32_t*)c)[at] = v;
    return;
  }
  if (e->out_u8 == KILN_Q_OUT_F32) {
    ((float*)c)[at] = (float)v * e->scale[j * e->scale_step];
    return;
  }
  float y = rintf((float)v * e->scale[j * e->scale_step]) + (float)e->y_zp;
  y = y < (float)e->lo ? (float)e->lo : y > (float)e->hi ? (float)e->hi : y;
  if (e->out_u8) {
    ((uint8_t*)c)[at] = (uint8_t)(int32_t)y;
  } else {
    ((int8_t*)c)[at] = (int8_t)(int32_t)y;
  }
}

#endif /* KILN_SUPPORT_QGEMM_EPI_H */
