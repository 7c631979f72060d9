/* The integer GEMM of kiln_support (qgemm_u8s8, qpack, qim2row; module_abi.h states their
 * contracts): the kernel once per ISA (qgemm.c), the packing and gathering once (qpack.c). */
#ifndef KILN_SUPPORT_QGEMM_H
#define KILN_SUPPORT_QGEMM_H
#include "runtime/module/module_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_QGEMM_DECL(ISA)                                                                     \
  void kiln_qdepthwise_##ISA(const uint8_t* x, const kiln_window* g, int64_t c0, int64_t c1,     \
                             uint8_t flip, const void* w, int w_u8, const kiln_qgemm_epi* e,     \
                             void* y);                                                           \
  void kiln_qdepthwise_nhwc_##ISA(const uint8_t* x, const kiln_window* g, int64_t c, int64_t r0, \
                                  int64_t r1, uint8_t flip, const void* w, int w_u8,             \
                                  const kiln_qgemm_epi* e, void* y);                             \
  void kiln_qgemm_u8s8_##ISA(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda,     \
                             const int8_t* bp, const kiln_qgemm_epi* e, void* c);
KILN_QGEMM_DECL(base)
#if defined(__x86_64__)
KILN_QGEMM_DECL(avx2)
KILN_QGEMM_DECL(vnni)
KILN_QGEMM_DECL(vbmi)
KILN_QGEMM_DECL(amx)
#endif
#undef KILN_QGEMM_DECL
/* kiln_support.qgemm_u8s8_gather, in the VNNI kernels only. */
#define KILN_QGEMM_GATHER_DECL(ISA)                                                  \
  void kiln_qgemm_u8s8_gather_##ISA(int64_t m, int64_t n, int64_t len, int64_t nseg, \
                                    const uint8_t* const* rows, const int64_t* seg,  \
                                    const int8_t* bp, const kiln_qgemm_epi* e, void* c);
#if defined(__x86_64__)
KILN_QGEMM_GATHER_DECL(vnni)
KILN_QGEMM_GATHER_DECL(vbmi)
KILN_QGEMM_GATHER_DECL(amx)
#endif
#undef KILN_QGEMM_GATHER_DECL

void kiln_qpack(int64_t k, int64_t n, const void* b, int64_t rsb, int64_t csb, int b_u8, int8_t* bp,
                int32_t* colsum);
void kiln_qnhwc(const uint8_t* x, int64_t c, int64_t sc, const kiln_window* g, int64_t r0,
                int64_t r1, uint8_t fill, uint8_t flip, uint8_t* buf);
void kiln_qim2row(const uint8_t* buf, int64_t c, int64_t cs, const kiln_window* g, int64_t p0,
                  int64_t p1, uint8_t* row, int64_t ldr);

#ifdef __cplusplus
}
#endif

#endif /* KILN_SUPPORT_QGEMM_H */
