/* The host side of kiln_support: the loop-nest helpers compiled once into kiln. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/module/module_abi.h"
#include "runtime/support/conv_blocks.h"
#include "runtime/support/conv_nchwc.h"
#include "runtime/support/conv_nchwc_dw.h"
#include "runtime/support/conv_nchwc_wino.h"
#include "runtime/support/conv_tile.h"
#include "runtime/support/gemm.h"
#include "runtime/support/gemm_bf16.h"
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
    (t).gemm_packed_bf16 = kiln_gemm_packed_bf16_##ISA;         \
  } while (0)

#if defined(__x86_64__)
typedef void (*kiln_bf16_fn)(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t,
                             const uint16_t*, float, float*, int64_t, const float*, int64_t,
                             int64_t, float, float);

static double bf16_kernel_ns(kiln_bf16_fn f) {
  enum { M = 6, N = 256, K = 512 };
  static float a[M * K], c[M * N];
  static uint16_t b[N * K];
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    f(M, N, K, 1.0f, a, K, 1, b, 0.0f, c, N, 0, 0, 0, -__builtin_inff(), __builtin_inff());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    best = ns < best ? ns : best;
  }
  return best;
}

/* On a CPU with AVX512-BF16, the faster of its two bfloat16 kernels on six rows of a 256-wide
 * product (about 0.1 ms; B's zeros do not change the speed). Where vdpbf16ps issues at
 * half the FMA's rate (the Xeon this was measured on: 85 against 173 GFLOP/s of float32 FMAs),
 * widening to float32 wins; where it issues at the FMA's rate, vdpbf16ps does twice the work. Both
 * give the same bits (the float32 kernel adds each pair's products in vdpbf16ps's order), so the
 * choice changes only the time. */
/* A product of one or two rows streams B once with few multiplies per byte: vdpbf16ps's
 * fewer instructions win there even at half rate (1 x 256 x 784: 78 against 62 GFLOP/s). */
static void bf16_rows_split(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                            int64_t rsa, int64_t csa, const uint16_t* bp, float beta, float* c,
                            int64_t ldc, const float* bias, int64_t rsb, int64_t csb, float lo,
                            float hi) {
  (m <= 2 ? kiln_gemm_packed_bf16_avx512bf16 : kiln_gemm_packed_bf16_avx512)(
      m, n, k, alpha, a, rsa, csa, bp, beta, c, ldc, bias, rsb, csb, lo, hi);
}

static kiln_bf16_fn bf16_chosen;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void choose_bf16_kernel(void) {
  const double dp = bf16_kernel_ns(kiln_gemm_packed_bf16_avx512bf16);
  const double fma = bf16_kernel_ns(kiln_gemm_packed_bf16_avx512);
  bf16_chosen = dp <= fma ? kiln_gemm_packed_bf16_avx512bf16 : bf16_rows_split;
}

/* The table's entry: times the two on the first call, so a process that runs no bfloat16
 * product never pays for it. */
static void bf16_timed_once(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                            int64_t rsa, int64_t csa, const uint16_t* bp, float beta, float* c,
                            int64_t ldc, const float* bias, int64_t rsb, int64_t csb, float lo,
                            float hi) {
  pthread_once(&bf16_once, choose_bf16_kernel);
  bf16_chosen(m, n, k, alpha, a, rsa, csa, bp, beta, c, ldc, bias, rsb, csb, lo, hi);
}
#endif

#if defined(__x86_64__)
/* AMX-TILE and AMX-INT8 in CPUID (leaf 7: EDX bits 24 and 25), the OS saving the tile state
 * (XCR0 bits 17 and 18), and Linux's permission for this process to use the tile data
 * (arch_prctl ARCH_REQ_XCOMP_PERM; without it the first tile instruction faults). */
static int amx_int8_usable(void) {
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  if (!((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return 0; /* OSXSAVE */
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3) != 3) return 0;
#if defined(__linux__)
  enum { kReqXcompPerm = 0x1023, kXfeatureTileData = 18 };
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) != 0) return 0;
#endif
  return 1;
}
#endif

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
    t.qgemm_u8s8_gather = kiln_qgemm_u8s8_gather_vnni;
    t.qdepthwise = kiln_qdepthwise_vnni;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vnni;
  }
  const int bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  if (bf16) t.gemm_packed_bf16 = bf16_timed_once;
  if (vnni && __builtin_cpu_supports("avx512vbmi")) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vbmi;
    t.qgemm_u8s8_gather = kiln_qgemm_u8s8_gather_vbmi;
    t.qdepthwise = kiln_qdepthwise_vbmi;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vbmi;
    t.lut_bytes = kiln_lut_bytes_vbmi;
    if (amx_int8_usable()) t.qgemm_u8s8 = kiln_qgemm_u8s8_amx;
  }
#endif
  /* KILN_QGEMM=c: the plain C kernels, =avx2: AVX2's, =vnni: VNNI without VBMI, =vbmi: VNNI
   * with VBMI but no AMX, where the CPU has them (tests compare each with the one the CPU
   * picks). */
  const char* force = getenv("KILN_QGEMM");
  if (force && strcmp(force, "c") == 0) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_base;
    t.qgemm_u8s8_gather = 0;
    t.qdepthwise = kiln_qdepthwise_base;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_base;
    t.lut_bytes = kiln_lut_bytes_base;
  }
#if defined(__x86_64__)
  if (force && strcmp(force, "avx2") == 0 && __builtin_cpu_supports("avx2")) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_avx2;
    t.qgemm_u8s8_gather = 0;
    t.qdepthwise = kiln_qdepthwise_avx2;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_avx2;
  }
  if (force && strcmp(force, "vbmi") == 0 && vnni && __builtin_cpu_supports("avx512vbmi"))
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vbmi;
  if (force && strcmp(force, "vnni") == 0 && vnni) {
    t.qgemm_u8s8 = kiln_qgemm_u8s8_vnni;
    t.qgemm_u8s8_gather = kiln_qgemm_u8s8_gather_vnni;
    t.qdepthwise = kiln_qdepthwise_vnni;
    t.qdepthwise_nhwc = kiln_qdepthwise_nhwc_vnni;
  }
  /* KILN_GEMM_BF16=dp: vdpbf16ps, =fma: the float32 kernel, where the CPU has AVX512-BF16
   * (tests compare the two, bit for bit). */
  const char* bf = getenv("KILN_GEMM_BF16");
  if (bf && strcmp(bf, "dp") == 0 && bf16) t.gemm_packed_bf16 = kiln_gemm_packed_bf16_avx512bf16;
  if (bf && strcmp(bf, "fma") == 0 && bf16) t.gemm_packed_bf16 = kiln_gemm_packed_bf16_avx512;
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
                          0,
                          0,
                          0};
  host_table = pick_kernels(t);
}

const kiln_support* kiln_host_support(void) {
  pthread_once(&host_table_once, build_host_table);
  return &host_table;
}
