/* The VNNI form of kiln_support.qdepthwise_nhwc (qdepthwise_quads.c), compiled with each
 * integer-kernel ISA like qdepthwise.c, which calls it first. */
#ifndef KILN_SUPPORT_QDEPTHWISE_QUADS_H
#define KILN_SUPPORT_QDEPTHWISE_QUADS_H
#include "runtime/module/module_abi.h"

#define KILN_QUADS_CAT2(a, b) a##_##b
#define KILN_QUADS_CAT(a, b) KILN_QUADS_CAT2(a, b)
#define KILN_QDEPTHWISE_QUADS KILN_QUADS_CAT(kiln_qdepthwise_nhwc_quads, KILN_ISA)

/* qdepthwise_nhwc's contract, through vpdpbusd on four horizontal taps at a time. Returns 0
 * without touching y where it does not apply (no VNNI in this ISA, a horizontal dilation, a
 * row of more than 8 taps, a weight less its zero point outside int8, or rows too wide for
 * its buffers); the caller then runs the general loops. */
int KILN_QDEPTHWISE_QUADS(const uint8_t* x, const kiln_window* g, int64_t c, int64_t r0, int64_t r1,
                          uint8_t flip, const void* w, int w_u8, const kiln_qgemm_epi* e, void* y);

#endif /* KILN_SUPPORT_QDEPTHWISE_QUADS_H */
