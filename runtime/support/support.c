/* The host side of kiln_support: the loop-nest helpers compiled once into kiln. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/conv_blocks.h"
#include "runtime/support/conv_nchwc.h"
#include "runtime/support/conv_nchwc_dw.h"
#include "runtime/support/conv_nchwc_wino.h"
#include "runtime/support/conv_tile.h"
#include "runtime/support/gemm.h"
#include "runtime/support/gemm_tile.h"
#include "runtime/support/kiln_index.h"
#include "runtime/support/kiln_window.h"
#include "runtime/support/lut.h"
#include "runtime/support/qgemm.h"
#include "runtime/support/support.h"

_Static_assert(KILN_MAX_DIMS == 16, "kiln_support's stride arrays are declared [][16]");

/* The widest copy of the convolution and GEMM kernels this CPU runs (decided once, at first
 * use). */
#define KILN_USE_ISA(t, ISA)                                    \
  do {                                                          \
    (t).conv_tile_f32 = kiln_conv_tile_f32_##ISA;               \
    (t).conv_tile_f64 = kiln_conv_tile_f64_##ISA;               \
    (t).conv_blocks_f32 = kiln_conv_blocks_f32_##ISA;           \
    (t).conv_blocks_f64 = kiln_conv_blocks_f64_##ISA;           \
    (t).conv_nchwc_f32 = kiln_conv_nchwc_f32_##ISA;             \
    (t).conv_nchwc_pw_f32 = kiln_conv_nchwc_pw_f32_##ISA;       \
    (t).conv_nchwc_dw_f32 = kiln_conv_nchwc_dw_f32_##ISA;       \
    (t).conv_nchwc_wino_f32 = kiln_conv_nchwc_wino_f32_##ISA;   \
    (t).conv_nchwc_wino4_f32 = kiln_conv_nchwc_wino4_f32_##ISA; \
    (t).gemm_packed_f32 = kiln_gemm_packed_f32_##ISA;           \
    (t).gemm_packed_f64 = kiln_gemm_packed_f64_##ISA;           \
  } while (0)

static kiln_support pick_kernels(kiln_support t) {
  KILN_USE_ISA(t, base);
  t.qgemm_u8s8 = kiln_qgemm_u8s8_base;
  t.qdepthwise = kiln_qdepthwise_base;
  t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_base;
  t.lut_bytes = kiln_lut_bytes_base;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    KILN_USE_ISA(t, avx512);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    KILN_USE_ISA(t, avx2);
  }
  if (__builtin_cpu_supports("avx2")) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_avx2;
    t.qdepthwise = kiln_qdepthwise_avx2;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_avx2;
  }
  const int vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  if (vnni) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vnni;
    t.qdepthwise = kiln_qdepthwise_vnni;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vnni;
  }
  if (vnni && __builtin_cpu_supports("avx512vbmi")) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vbmi;
    t.qdepthwise = kiln_qdepthwise_vbmi;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vbmi;
    t.lut_bytes = kiln_lut_bytes_vbmi;
  }
#endif
  /* KILN_QGEMM=c: the plain C kernels, =avx2: AVX2's, =vnni: VNNI without VBMI, where the CPU
   * has them (tests compare each with the one the CPU picks). */
  const char* force = getenv("KILN_QGEMM");
  if (force && strcmp(force, "c") == 0) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_base;
    t.qdepthwise = kiln_qdepthwise_base;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_base;
    t.lut_bytes = kiln_lut_bytes_base;
  }
#if defined(__x86_64__)
  if (force && strcmp(force, "avx2") == 0 && __builtin_cpu_supports("avx2")) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_avx2;
    t.qdepthwise = kiln_qdepthwise_avx2;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_avx2;
  }
  if (force && strcmp(force, "vnni") == 0 && vnni) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vnni;
    t.qdepthwise = kiln_qdepthwise_vnni;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vnni;
  }
#endif
  return t;
}

static kiln_support host_table;
static pthread_once_t host_table_once = PTHREAD_ONCE_INIT;

static void build_host_table(void) {
  const kiln_support t = {sizeof(kiln_support),
                          kiln_collapse,
                          kiln_part_range,
                          kiln_seek,
                          kiln_copy_nd,
                          kiln_copy_strided,
                          kiln_slice_dim,
                          kiln_im2col_f32,
                          kiln_im2col_f64,
                          kiln_pool_f32,
                          kiln_pool_f64,
                          kiln_support_gemm_f32,
                          kiln_support_gemm_f64,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          kiln_foreign_op_bind,
                          kiln_foreign_op_run,
                          kiln_foreign_op_release,
                          0,
                          0,
                          0,
                          0,
                          kiln_qpack,
                          kiln_qnhwc,
                          kiln_qim2row,
                          0,
                          0,
                          0};
  host_table = pick_kernels(t);
}

const kiln_support* kiln_host_support(void) {
  pthread_once(&host_table_once, build_host_table);
  return &host_table;
}
