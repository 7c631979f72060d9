/* kiln module ABI — included by the loader and pasted into every generated module.
 * Plain C11 with only <stdint.h>/<stddef.h>: modules must compile fast. Bump
 * KILN_ABI_VERSION whenever a struct here changes. */
#ifndef KILN_MODULE_ABI_H
#define KILN_MODULE_ABI_H
#include <stddef.h>
#include <stdint.h>

#define KILN_ABI_VERSION 18

/* Strides count elements, not bytes. Outputs handed to a thunk are always contiguous. */
typedef struct kiln_tensor {
  void* data;
  const int64_t* shape;
  const int64_t* strides;
  int32_t ndim;
  int32_t dtype;
} kiln_tensor;

/* Host services a thunk may call; the executor owns the implementation. */
typedef struct kiln_ctx kiln_ctx;
struct kiln_ctx {
  /* Records a printf-style message; the thunk then returns non-zero. */
  void (*fail)(kiln_ctx* ctx, const char* fmt, ...);
  /* Scratch memory, 64-byte aligned, released after the thunk returns. NULL on failure. */
  void* (*workspace)(kiln_ctx* ctx, size_t bytes);
  void* impl;
  /* A thunk flagged KILN_THUNK_SPLIT may be called n_parts times (possibly at once, from
   * different threads) with part = 0..n_parts-1; each call computes its share of the
   * outputs. Every other thunk is called once with part = 0, n_parts = 1. */
  int32_t part;
  int32_t n_parts;
  /* Device thunks (CUDA): enqueue kernel `kernel` of the module's kernel table with
   * dims = {grid x, y, z, block x, y, z}, `shared` bytes of dynamic shared memory and CUDA's
   * argument convention (args[i] points at argument i); and copy `bytes` between host and
   * device (kind: KILN_COPY_*). Both return non-zero after ctx->fail. */
  int (*launch)(kiln_ctx* ctx, int32_t kernel, const uint32_t dims[6], uint32_t shared,
                void** args);
  int (*copy)(kiln_ctx* ctx, void* dst, const void* src, size_t bytes, int32_t kind);
};

#define KILN_COPY_TO_DEVICE 1
#define KILN_COPY_TO_HOST 2       /* the host bytes are there when copy returns */
#define KILN_COPY_TO_HOST_ASYNC 3 /* the host bytes are there once the step completes */

/* Geometry of a 2-D sliding window (1-D runs as H = 1), computed by the compiler. */
typedef struct kiln_window {
  int64_t h, w;   /* input spatial size */
  int64_t kh, kw; /* kernel */
  int64_t sh, sw; /* strides */
  int64_t dh, dw; /* dilations */
  int64_t ph, pw; /* leading pads */
  int64_t eh, ew; /* trailing pads */
  int64_t oh, ow; /* output spatial size */
} kiln_window;

/* The loop-nest helpers and GEMM of runtime/support (kiln_index.h, kiln_window.h, gemm.c), compiled
 * once into kiln and handed to each module when it is loaded, so no module compiles its own copy.
 * `size` is sizeof(kiln_support) of the host; entries are only ever appended. */
struct kiln_qgemm_epi;
typedef struct kiln_support {
  uint32_t size;
  int (*collapse)(int ndim, int nops, int64_t* shape, int64_t strides[][16]);
  void (*part_range)(int64_t n, int32_t part, int32_t n_parts, int64_t grain, int64_t* lo,
                     int64_t* hi);
  void (*seek)(int r, int nops, const int64_t* shape, int64_t strides[][16], int64_t row,
               int64_t* idx, int64_t* off);
  void (*copy_nd)(void* dst, const int64_t* dst_strides, const void* src,
                  const int64_t* src_strides, int ndim, const int64_t* shape, size_t esize);
  void (*copy_strided)(void* dst, const void* src, int ndim, const int64_t* shape,
                       const int64_t* strides, size_t esize);
  void (*slice_dim)(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first,
                    int64_t* count);
  void (*im2col_f32)(const float* x, int64_t channels, int64_t sc, int64_t sy, int64_t sx,
                     const kiln_window* g, float* col, int64_t ldc);
  void (*im2col_f64)(const double* x, int64_t channels, int64_t sc, int64_t sy, int64_t sx,
                     const kiln_window* g, double* col, int64_t ldc);
  void (*pool_f32)(const float* x, int64_t sy, int64_t sx, const kiln_window* g, int avg_mode,
                   float* out);
  void (*pool_f64)(const double* x, int64_t sy, int64_t sx, const kiln_window* g, int avg_mode,
                   double* out);
  /* C[M,N] = alpha * A B + beta * C (OpenBLAS); A and B by (row, column) element strides.
   * Returns non-zero after ctx->fail. */
  int (*gemm_f32)(kiln_ctx* ctx, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t rsa, int64_t csa, const float* B, int64_t rsb, int64_t csb, float beta,
                  float* C, int64_t ldc);
  int (*gemm_f64)(kiln_ctx* ctx, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t rsa, int64_t csa, const double* B, int64_t rsb, int64_t csb, double beta,
                  double* C, int64_t ldc);
  /* Direct convolution of m output rows over npos positions: for r < m, j < npos,
   *   y[r*ldy + (j/wp)*ow + j%wp] = clamp(bias[r*bs] + sum_{t < taps} w[r*ldw + t] * b[off[t] + j],
   *                                       lo, hi)
   * for every j whose j % wp < ow (bias may be NULL: 0; clamp as gemm_packed's). b must stay
   * readable KILN_CONV_SLACK elements past b[off[t] + npos - 1]; what it reads there only reaches
   * dropped positions. */
  void (*conv_tile_f32)(int64_t m, int64_t npos, int64_t taps, const float* b, const int32_t* off,
                        const float* w, int64_t ldw, const float* bias, int64_t bs, float* y,
                        int64_t ldy, int64_t wp, int64_t ow, float lo, float hi);
  void (*conv_tile_f64)(int64_t m, int64_t npos, int64_t taps, const double* b, const int32_t* off,
                        const double* w, int64_t ldw, const double* bias, int64_t bs, double* y,
                        int64_t ldy, int64_t wp, int64_t ow, double lo, double hi);
  /* C[m,n] = clamp(alpha * A B + beta * C + bias, lo, hi) (C unread when beta is 0), with A
   * by (row, column) element strides and B packed: panel p holds columns [p*P, p*P + P) as k
   * rows of P elements, P = KILN_GEMM_PANEL_BYTES / sizeof(element), so B[i][j] sits at
   * bp[(j/P)*k*P + i*P + j%P], and the last panel's columns past n are zero padding. The bias
   * of C[i][j] is bias[i*rsb + j*csb] (bias may be NULL: none); clamp(x, lo, hi) is
   * x < lo ? lo : x, then > hi ? hi : x, so a NaN stays, and -inf, +inf clamp nothing. The
   * bias and clamp are how a convolution's or linear layer's bias and relu or clip need no
   * pass of their own over C. */
  void (*gemm_packed_f32)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa,
                          int64_t csa, const float* bp, float beta, float* c, int64_t ldc,
                          const float* bias, int64_t rsb, int64_t csb, float lo, float hi);
  void (*gemm_packed_f64)(int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                          int64_t rsa, int64_t csa, const double* bp, double beta, double* c,
                          int64_t ldc, const double* bias, int64_t rsb, int64_t csb, double lo,
                          double hi);
  /* Direct convolution with packed weights: for r < m, i < npos,
   *   y[r*ldy + i] = clamp(bias[r*bs] + sum_{t < taps} W[r][t] * b[off[t] + pos[i]], lo, hi)
   * (bias may be NULL: 0; clamp as gemm_packed's), the weights packed in blocks of KILN_CONV_BLOCK
   * rows: W[r][t] sits at wb[(r/B)*taps*B + t*B + r%B], B = KILN_CONV_BLOCK, the last block's rows
   * past m zero. */
  void (*conv_blocks_f32)(int64_t m, int64_t npos, int64_t taps, const float* b, const int32_t* pos,
                          const int32_t* off, const float* wb, const float* bias, int64_t bs,
                          float* y, int64_t ldy, float lo, float hi);
  void (*conv_blocks_f64)(int64_t m, int64_t npos, int64_t taps, const double* b,
                          const int32_t* pos, const int32_t* off, const double* wb,
                          const double* bias, int64_t bs, double* y, int64_t ldy, double lo,
                          double hi);
  /* Direct convolution over the blocked layout NCHW8c (ops/conv_nchwc.h), output blocks
   * [mb0, mb1) of 8 channels at positions [p0, p1) of one image: for each such block b,
   * position p (row p / ow of an ow-wide output map) and channel lane l < 8,
   *   y[(b*hw + p)*8 + l] = clamp(bias[b*8 + l] + sum_{t < taps, k < kb}
   *                                 w[((b*taps + t)*kb + k)*8 + l] * buf[pos[p - p0] + toff[t] +
   * k], lo, hi) (bias may be NULL: 0; clamp as gemm_packed's). kb is 8 (a blocked input) or 1 (a
   * plain one); within an output row, neighbouring positions' offsets are sx apart (pos[p + 1] =
   * pos[p] + sx). chunk_rows: output rows whose input the kernel passes over with every pair of
   * output blocks before it moves on (their rows should fit L2). */
  void (*conv_nchwc_f32)(const float* buf, const int32_t* pos, const int32_t* toff, int64_t taps,
                         int64_t kb, const float* w, const float* bias, float* y, int64_t hw,
                         int64_t ow, int64_t sx, int64_t mb0, int64_t mb1, int64_t p0, int64_t p1,
                         int64_t chunk_rows, float lo, float hi);
  /* A 1x1 convolution at stride 1 over NCHW8c, output blocks [mb0, mb1) at positions
   * [p0, p1) of one image of hw positions: x (C/8, hw, 8), w (M/8, C, 8), y (M/8, hw, 8),
   *   y[(b*hw + p)*8 + l] = clamp(bias[b*8 + l]
   *                               + sum_{i < c} w[(b*c + i)*8 + l] * x[((i/8)*hw + p)*8 + i%8],
   *                               lo, hi)
   * (bias may be NULL: 0; clamp as gemm_packed's). */
  void (*conv_nchwc_pw_f32)(const float* x, int64_t c, int64_t hw, const float* w,
                            const float* bias, float* y, int64_t mb0, int64_t mb1, int64_t p0,
                            int64_t p1, float lo, float hi);
  /* Compute functions outside the module (the precompiled ops of custom-op libraries):
   * bound once when the module loads, from a description kiln wrote into it (NULL after
   * ctx->fail), called per run (non-zero after ctx->fail), released at unload. */
  void* (*op_bind)(kiln_ctx* ctx, const char* spec);
  int (*op_run)(kiln_ctx* ctx, void* op, kiln_tensor* const* in, int32_t n_in,
                kiln_tensor* const* out, int32_t n_out);
  void (*op_release)(void* op);
  /* A depthwise convolution over NCHW8c, channel blocks [cb0, cb1) at output rows [oy0, oy1)
   * of one image: x (C/8, h, wd, 8), w (C/8, kh, kw, 8), y (C/8, oh, ow, 8),
   *   y[((b*oh + oy)*ow + ox)*8 + l] = clamp(bias[b*8 + l] + sum_{i < kh, j < kw, inside}
   *       w[((b*kh + i)*kw + j)*8 + l] * x[((b*h + iy)*wd + ix)*8 + l], lo, hi)
   * with iy = oy*sh - ph + i, ix = ox*sw - pw + j, the taps outside the image left out (bias
   * may be NULL: 0; clamp as gemm_packed's). */
  void (*conv_nchwc_dw_f32)(const float* x, int64_t h, int64_t wd, const float* w,
                            const float* bias, float* y, int64_t oh, int64_t ow, int64_t kh,
                            int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t cb0,
                            int64_t cb1, int64_t oy0, int64_t oy1, float lo, float hi);
  /* A 3x3 convolution at stride 1 with one zero of padding on each side over NCHW8c, by
   * Winograd's F(2x2, 3x3): output blocks [mb0, mb1) at output rows [oy0, oy1) (oy0 even) of
   * one image, x (C/8, h, wd, 8), y (M/8, h, wd, 8), each output as conv_nchwc_f32's (bias may
   * be NULL: 0; clamp as gemm_packed's) up to rounding. u (16, M/8, C, 8) holds the weights
   * transformed: u[((e*(M/8) + b)*C + i)*8 + l] = (G g G^T)[e/4][e%4] for g the 3x3 window of
   * output channel b*8 + l and input channel i, G = {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5},
   * {0, 0, 1}}. work holds 16 (C + 8 (mb1 - mb0)) ceil((oy1 - oy0) / 2) ceil(wd / 2) floats. */
  void (*conv_nchwc_wino_f32)(const float* x, int64_t c, int64_t h, int64_t wd, const float* u,
                              int64_t m, const float* bias, float* y, int64_t mb0, int64_t mb1,
                              int64_t oy0, int64_t oy1, float* work, float lo, float hi);
  /* The same convolution by F(4x4, 3x3): oy0 a multiple of 4; u (36, M/8, C, 8) holds
   * u[((e*(M/8) + b)*C + i)*8 + l] = (G g G^T)[e/6][e%6], G = {{1/4, 0, 0}, {-1/6, -1/6,
   * -1/6}, {-1/6, 1/6, -1/6}, {1/24, 1/12, 1/6}, {1/24, -1/12, 1/6}, {0, 0, 1}}; work holds
   * 36 (C + 8 (mb1 - mb0)) ceil((oy1 - oy0) / 4) ceil(wd / 4) floats. */
  void (*conv_nchwc_wino4_f32)(const float* x, int64_t c, int64_t h, int64_t wd, const float* u,
                               int64_t m, const float* bias, float* y, int64_t mb0, int64_t mb1,
                               int64_t oy0, int64_t oy1, float* work, float lo, float hi);
  /* Integer GEMM, u8 x s8 products summed in int32 (runtime/support/qgemm.c): for i < m, j < n,
   *   acc = sum_{t < k} a[i*lda + t] * B[t][j] - a_zp * colsum[j] - b_zp[j] * rowsum_i
   *         + k * a_zp * b_zp[j] + bias[j]
   * (rowsum_i the sum of row i of a; b_zp[j] at e->b_zp[j * e->b_zp_step]; bias may be NULL).
   * B is packed by qpack: panels of 16 columns, groups of 4 rows, B[t][j] at
   * bp[((j/16)*ceil(k/4) + t/4)*64 + (j%16)*4 + t%4], zero padded. Output element (i, j) is
   * c[i*e->rsc + j*e->csc]: acc as int32 when e->scale is NULL; the float32
   * (float)acc * scale[j*scale_step] when e->out_u8 is KILN_Q_OUT_F32; else the byte
   * clamp(rint(acc * scale[j*scale_step]) + y_zp, lo, hi), uint8 when e->out_u8, else int8. */
  void (*qgemm_u8s8)(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda,
                     const int8_t* bp, const struct kiln_qgemm_epi* e, void* c);
  /* Packs B (k x n; element (t, j) at b[t*rsb + j*csb], int8, or uint8 when b_u8, which is
   * stored shifted by -128 into int8) for qgemm_u8s8, and writes its column sums (of the
   * stored values) to colsum[0, ceil(n/16)*16). */
  void (*qpack)(int64_t k, int64_t n, const void* b, int64_t rsb, int64_t csb, int b_u8, int8_t* bp,
                int32_t* colsum);
  /* One image of an integer convolution in channels-last bytes with its padding: x's c planes
   * (sc elements apart, rows g->w apart) as buf[(y*wp + x)*c + ci], wp = pw + w + ew, the
   * padding rows and columns `fill`, each byte xor `flip` (0x80 turns int8 into uint8 shifted
   * by 128); only padded rows [r0, r1) are written (a part's share of the positions reads no
   * others). */
  void (*qnhwc)(const uint8_t* x, int64_t c, int64_t sc, const kiln_window* g, int64_t r0,
                int64_t r1, uint8_t fill, uint8_t flip, uint8_t* buf);
  /* Rows of positions from such an image: for positions p in [p0, p1) of the oh x ow output
   * (row p/ow, column p%ow) and taps (ky, kx, ci), row[(p - p0)*ldr + (ky*kw + kx)*c + ci] is
   * the byte under that tap: c channels of an image whose positions hold cs (a group's
   * channels of all the image's). It may write up to 31 bytes past the last row and read up to
   * 31 past the image: both need that much slack. */
  void (*qim2row)(const uint8_t* buf, int64_t c, int64_t cs, const kiln_window* g, int64_t p0,
                  int64_t p1, uint8_t* row, int64_t ldr);
  /* A depthwise integer convolution (one input and one output channel per group) of one
   * image, channels [c0, c1): x (C, h, w) bytes, each xor `flip` (int8 to uint8 + 128), w
   * (C, kh, kw) bytes (uint8 when w_u8, else int8), and for channel ch, output position p,
   *   acc = bias[ch] + sum_{taps inside the image} (x - e->a_zp) * (w' - b_zp[ch])
   * with w' = w - 128 for uint8 (b_zp, like a_zp, as qgemm_u8s8's epilogue has them), stored
   * at y[ch*oh*ow + p] as qgemm_u8s8 stores (int32, or requantized bytes). */
  void (*qdepthwise)(const uint8_t* x, const kiln_window* g, int64_t c0, int64_t c1, uint8_t flip,
                     const void* w, int w_u8, const struct kiln_qgemm_epi* e, void* y);
  /* The same convolution channels-last: x (h, w, c) bytes, output rows [r0, r1) of y
   * (oh, ow, c), every channel; element (oy, ox, ch) as qdepthwise computes it for channel ch,
   * position oy*ow + ox. */
  void (*qdepthwise_nhwc)(const uint8_t* x, const kiln_window* g, int64_t c, int64_t r0, int64_t r1,
                          uint8_t flip, const void* w, int w_u8, const struct kiln_qgemm_epi* e,
                          void* y);
  /* y[i] = table[x[i]] for i in [0, n) (x and y may be the same bytes). */
  void (*lut_bytes)(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table);
  /* gemm_packed_f32 with B in bfloat16 (uint16 bit patterns) packed as pairs of k: panel p
   * holds columns [p*16, p*16 + 16) as ceil(k/2) rows of 16 pairs, so B[i][j] sits at
   * bp[(j/16)*ceil(k/2)*32 + (i/2)*32 + (j%16)*2 + i%2], zero padded (an odd k's last row,
   * the last panel's columns past n). A is rounded to bfloat16 (to nearest, ties to even);
   * products sum in float32 (AVX512-BF16 treats subnormal inputs as zero). */
  void (*gemm_packed_bf16)(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                           int64_t rsa, int64_t csa, const uint16_t* bp, float beta, float* c,
                           int64_t ldc, const float* bias, int64_t rsb, int64_t csb, float lo,
                           float hi);
  /* qgemm_u8s8 with A's rows read in place: row i is the nseg segments of len bytes at
   * rows[i] + seg[s] (k = nseg * len; len a multiple of 4 when nseg > 1), so an integer
   * convolution reads its window rows from the padded channels-last image that qim2row would
   * copy them from. NULL where the CPU's integer kernel has no such form. */
  void (*qgemm_u8s8_gather)(int64_t m, int64_t n, int64_t len, int64_t nseg,
                            const uint8_t* const* rows, const int64_t* seg, const int8_t* bp,
                            const struct kiln_qgemm_epi* e, void* c);
} kiln_support;

/* How qgemm_u8s8 corrects for zero points and writes its output (see there). */
typedef struct kiln_qgemm_epi {
  int32_t a_zp;
  const int32_t* b_zp;
  int64_t b_zp_step;
  const int32_t* colsum;
  const int32_t* bias;
  const float* scale;
  int64_t scale_step;
  int32_t y_zp, lo, hi, out_u8;
  int64_t rsc, csc;
} kiln_qgemm_epi;

/* kiln_qgemm_epi.out_u8: 0 int8, 1 uint8, or this: float32, the accumulator times the scale
 * (a dynamically quantized product's dequantization), no zero point or clamp. */
#define KILN_Q_OUT_F32 2

#define KILN_CONV_SLACK 64
#define KILN_CONV_BLOCK 16
#define KILN_GEMM_PANEL_BYTES 64

typedef int (*kiln_thunk_fn)(void* state, kiln_ctx* ctx, kiln_tensor* const* in,
                             kiln_tensor* const* out);

/* kiln_thunk_info.flags */
#define KILN_THUNK_SPLIT 1 /* the work divides into disjoint parts (see kiln_ctx.part) */
/* Each output element costs many operations (a convolution's taps), so the executor splits
 * the thunk at a far smaller size than an elementwise one. */
#define KILN_THUNK_HEAVY 2
/* The thunk enqueues device work (kernels, copies) on its context's stream and returns;
 * the step completes when the stream has done that work. */
#define KILN_THUNK_DEVICE 4

typedef struct kiln_thunk_info {
  kiln_thunk_fn fn;
  const char* name; /* "node 3: add" — for errors and tracing */
  int32_t node;     /* node index in the graph */
  int32_t n_in;
  int32_t n_out;
  int32_t flags; /* KILN_THUNK_* */
  /* A split thunk whose parts take whole units of this many flat elements of its first output
   * (kiln_ctx.part gets units kiln_part_range(numel / split_unit, ...)); 0: any element
   * range. It caps the parts at the number of units, so a one-row GEMM stays one call. */
  int64_t split_unit;
} kiln_thunk_info;

typedef struct kiln_module_info {
  uint32_t abi_version;
  const char* key;
  int32_t n_thunks;
  const kiln_thunk_info* thunks;
  size_t state_size;
  /* Run once after load / before unload; init returns non-zero and calls ctx->fail on error. */
  int (*state_init)(void* state, kiln_ctx* ctx);
  void (*state_cleanup)(void* state);
  /* Device kernels the thunks launch by index (ctx->launch), by their names in the kernel
   * image stored beside the module (kernels.cubin / kernels.emu.so); 0 on a CPU module. */
  int32_t n_kernels;
  const char* const* kernel_names;
} kiln_module_info;

/* The module's entry point. `support` outlives the module; the module keeps the pointer. */
typedef const kiln_module_info* (*kiln_module_fn)(const kiln_support* support);

#endif
