/* kiln_support.lut_bytes (module_abi.h states its contract): lut.c, once per ISA. */
#ifndef KILN_SUPPORT_LUT_H
#define KILN_SUPPORT_LUT_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void kiln_lut_bytes_base(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table);
#if defined(__x86_64__)
void kiln_lut_bytes_vbmi(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table);
#endif

#ifdef __cplusplus
}
#endif

#endif /* KILN_SUPPORT_LUT_H */
