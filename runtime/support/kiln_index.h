/* kiln_index.h — index arithmetic for the strided loops of generated modules. */
#ifndef KILN_INDEX_H
#define KILN_INDEX_H
/* Index helpers run once per loop nest, not per element: keeping them out of line keeps
 * modules small and fast to compile. Helpers a module does not call must not warn. */
#define KILN_INDEX_FN static __attribute__((unused, noinline))
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KILN_MAX_DIMS 16

/* Strided fallback loops gain little from vectorizing (they gather) but cost clang time.
 * KILN_LANES goes on the 16-step loop over a reduction's lane accumulators: unrolled, the
 * lanes live in one vector register; left rolled (modules build with -fno-unroll-loops) they
 * stay in memory, a store-to-load chain on every step, 8x slower. */
/* KILN_SAME_INDEX goes on unit-stride elementwise loops, whose step j reads and writes index j
 * only: an output written in place over an input (a training step's update) aliases it at the
 * same index, which is safe to vectorize, but clang cannot prove it and would take the scalar
 * fallback behind its run-time overlap checks (8x slower with sqrt or division). */
#if defined(__clang__)
#define KILN_NOVEC _Pragma("clang loop vectorize(disable)")
#define KILN_SAME_INDEX _Pragma("clang loop vectorize(assume_safety)")
#define KILN_ILP _Pragma("clang loop interleave_count(4)")
#define KILN_LANES _Pragma("clang loop unroll(full)")
#else
#define KILN_NOVEC
#define KILN_SAME_INDEX _Pragma("GCC ivdep")
#define KILN_ILP
#define KILN_LANES _Pragma("GCC unroll 16")
#endif

#ifdef KILN_MODULE
/* In a generated module the host supplies these (kiln_support in module_abi.h): compiled
 * into every module, they cost clang a third of its time. */
#define kiln_collapse (KILN_SUPPORT->collapse)
#define kiln_part_range (KILN_SUPPORT->part_range)
#define kiln_seek (KILN_SUPPORT->seek)
#define kiln_copy_nd (KILN_SUPPORT->copy_nd)
#define kiln_copy_strided (KILN_SUPPORT->copy_strided)
#define kiln_slice_dim (KILN_SUPPORT->slice_dim)
#else
/* Simplifies an iteration space shared by `nops` operands: drops size-1 dimensions and
 * merges neighbours that every operand walks as one contiguous run, so a contiguous or
 * row-broadcast loop becomes one long inner loop. Works in place; returns the new rank
 * (at least 1). A stride of 0 marks a broadcast operand. */
KILN_INDEX_FN int kiln_collapse(int ndim, int nops, int64_t *shape,
                                int64_t strides[][KILN_MAX_DIMS]) {
  int r = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    shape[r] = shape[d];
    for (int k = 0; k < nops; ++k) strides[k][r] = strides[k][d];
    ++r;
  }
  if (r == 0) {
    shape[0] = 1;
    for (int k = 0; k < nops; ++k) strides[k][0] = 0;
    return 1;
  }
  int w = 0;
  for (int d = 1; d < r; ++d) {
    int merge = 1;
    for (int k = 0; k < nops && merge; ++k) {
      merge = strides[k][w] == strides[k][d] * shape[d];
    }
    if (merge) {
      shape[w] *= shape[d];
      for (int k = 0; k < nops; ++k) strides[k][w] = strides[k][d];
    } else {
      ++w;
      shape[w] = shape[d];
      for (int k = 0; k < nops; ++k) strides[k][w] = strides[k][d];
    }
  }
  return w + 1;
}

/* Part `part` of `n_parts` of the range [0, n): [*lo, *hi). Boundaries fall on multiples of
 * `grain` (e.g. a cache line of output) so parts never share one; trailing parts may be
 * empty. */
KILN_INDEX_FN void kiln_part_range(int64_t n, int32_t part, int32_t n_parts, int64_t grain,
                                   int64_t *lo, int64_t *hi) {
  if (n_parts <= 1) {
    *lo = 0;
    *hi = n;
    return;
  }
  const int64_t blocks = (n + grain - 1) / grain;
  int64_t a = blocks * part / n_parts * grain, b = blocks * (part + 1) / n_parts * grain;
  *lo = a < n ? a : n;
  *hi = b < n ? b : n;
}

/* Positions a collapsed loop nest of rank r at outer row `row` (the row-major index over
 * dimensions 0..r-2): fills idx[0..r-2] and each operand's element offset off[k]. */
KILN_INDEX_FN void kiln_seek(int r, int nops, const int64_t *shape,
                             int64_t strides[][KILN_MAX_DIMS], int64_t row, int64_t *idx,
                             int64_t *off) {
  for (int k = 0; k < nops; ++k) off[k] = 0;
  for (int d = r - 2; d >= 0; --d) {
    idx[d] = row % shape[d];
    row /= shape[d];
    for (int k = 0; k < nops; ++k) off[k] += idx[d] * strides[k][d];
  }
}

/* One row of kiln_copy_nd: n elements at strides sd (dst) and ss (src), typed so a strided
 * row costs a load and a store per element (a memcpy call per element cost ~5 ns). */
#define KILN_COPY_ROW(U)                                     \
  do {                                                       \
    U *restrict d_ = (U *)d;                                 \
    const U *restrict s_ = (const U *)s;                     \
    for (int64_t j = 0; j < n; ++j) d_[j * sd] = s_[j * ss]; \
  } while (0)
KILN_INDEX_FN void kiln_copy_row(char *d, int64_t sd, const char *s, int64_t ss, int64_t n,
                                 size_t esize) {
  const int64_t es = (int64_t)esize;
  if (sd == 1 && ss == 1) {
    memcpy(d, s, (size_t)n * esize);
  } else if (sd == 1 && ss == -1 && esize == 4) {
    /* A reversed row (a convolution weight's flipped taps): constant strides vectorize. */
    uint32_t* restrict d_ = (uint32_t*)d;
    const uint32_t* restrict s_ = (const uint32_t*)s;
    for (int64_t j = 0; j < n; ++j) d_[j] = s_[-j];
  } else if (esize == 4) {
    KILN_COPY_ROW(uint32_t);
  } else if (esize == 8) {
    KILN_COPY_ROW(uint64_t);
  } else if (esize == 2) {
    KILN_COPY_ROW(uint16_t);
  } else if (esize == 1) {
    KILN_COPY_ROW(uint8_t);
  } else {
    for (int64_t j = 0; j < n; ++j) memcpy(d + j * sd * es, s + j * ss * es, esize);
  }
}
#undef KILN_COPY_ROW

/* A whole 8 x 8 tile of 4-byte elements transposed in vector registers (three rounds of
 * shuffles): eight vector loads and stores instead of 64 scalar ones. The blocked layout's
 * reorders (ops/conv_nchwc.h) are all such tiles: 8 channels by 8 positions. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
typedef uint32_t kiln_tile8_v __attribute__((vector_size(32), aligned(4)));
#define KILN_TILE8(U, rows, cols) (sizeof(U) == 4 && (rows) == 8 && (cols) == 8)
/* The host library is built for baseline x86-64: an AVX2 clone runs where the CPU has it. */
#if defined(__x86_64__) && !defined(__clang__)
#define KILN_TILE8_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KILN_TILE8_CLONES
#endif
KILN_TILE8_CLONES static __attribute__((unused, noinline)) void kiln_tile8_u32(uint32_t* d,
                                                                               int64_t dr,
                                                                               const uint32_t* s,
                                                                               int64_t sc) {
  kiln_tile8_v v[8], t[8], u[8];
  for (int j = 0; j < 8; ++j) v[j] = *(const kiln_tile8_v*)(s + j * sc);
  for (int j = 0; j < 8; j += 2) {
    t[j] = __builtin_shufflevector(v[j], v[j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[j + 1] = __builtin_shufflevector(v[j], v[j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int j = 0; j < 8; j += 4) {
    u[j] = __builtin_shufflevector(t[j], t[j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[j + 1] = __builtin_shufflevector(t[j], t[j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[j + 2] = __builtin_shufflevector(t[j + 1], t[j + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[j + 3] = __builtin_shufflevector(t[j + 1], t[j + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {
    *(kiln_tile8_v*)(d + i * dr) =
        __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    *(kiln_tile8_v*)(d + (i + 4) * dr) =
        __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}
#else
#define KILN_TILE8(U, rows, cols) 0
KILN_INDEX_FN void kiln_tile8_u32(uint32_t* d, int64_t dr, const uint32_t* s, int64_t sc) {
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) d[i * dr + j] = s[i + j * sc];
}
#endif

/* A transpose tile: rows [0, h) x columns [0, w) of dst (row stride dr, contiguous rows) from
 * src, whose rows run contiguously down dst's columns (src element (i, j) at i + j * sc). An
 * 8 x 8 tile reads 8 runs of src and writes 8 runs of dst, where a row at a time would touch
 * a new cache line of src on every element. */
#define KILN_COPY_TILE(U)                                                                          \
  do {                                                                                             \
    U* restrict d_ = (U*)d;                                                                        \
    const U* restrict s_ = (const U*)s;                                                            \
    for (int64_t i0 = 0; i0 < h; i0 += 8)                                                          \
      for (int64_t j0 = 0; j0 < w; j0 += 8) {                                                      \
        const int64_t i1 = i0 + 8 < h ? i0 + 8 : h, j1 = j0 + 8 < w ? j0 + 8 : w;                  \
        if (KILN_TILE8(U, i1 - i0, j1 - j0)) {                                                     \
          kiln_tile8_u32((uint32_t*)(d_ + i0 * dr + j0), dr, (const uint32_t*)(s_ + i0 + j0 * sc), \
                         sc);                                                                      \
          continue;                                                                                \
        }                                                                                          \
        for (int64_t i = i0; i < i1; ++i)                                                          \
          for (int64_t j = j0; j < j1; ++j) d_[i * dr + j] = s_[i + j * sc];                       \
      }                                                                                            \
  } while (0)
/* esize is 2, 4 or 8. */
KILN_INDEX_FN void kiln_copy_tile(char *d, int64_t dr, const char *s, int64_t sc, int64_t h,
                                  int64_t w, size_t esize) {
  if (esize == 4) {
    KILN_COPY_TILE(uint32_t);
  } else if (esize == 8) {
    KILN_COPY_TILE(uint64_t);
  } else {
    KILN_COPY_TILE(uint16_t);
  }
}
#undef KILN_COPY_TILE

/* Copies `shape` elements from src to dst, both with arbitrary element strides. */
KILN_INDEX_FN void kiln_copy_nd(void *dst, const int64_t *dst_strides, const void *src,
                                const int64_t *src_strides, int ndim, const int64_t *shape,
                                size_t esize) {
  int64_t shp[KILN_MAX_DIMS];
  int64_t st[2][KILN_MAX_DIMS];
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    n *= shape[d];
    shp[d] = shape[d];
    st[0][d] = dst_strides[d];
    st[1][d] = src_strides[d];
  }
  if (n == 0) return;
  const int r = kiln_collapse(ndim, 2, shp, st);
  const int64_t es = (int64_t)esize;
  char *d8 = (char *)dst;
  const char *s8 = (const char *)src;
  /* A transpose (dst's rows contiguous, src contiguous down dst's columns) goes by tiles of
   * the last two dimensions, and the loop below walks the dimensions outside them. */
  const int tile = r >= 2 && st[0][r - 1] == 1 && st[1][r - 2] == 1 && st[1][r - 1] != 1 &&
                   (esize == 2 || esize == 4 || esize == 8);
  /* Short contiguous runs (a blocked layout's 8 channels of one position, read at every
   * other position by a strided slice) go two dimensions at a time: a memcpy call and an
   * odometer step per 32-byte run cost more than the copy. */
  const int runs = !tile && r >= 2 && st[0][r - 1] == 1 && st[1][r - 1] == 1 &&
                   shp[r - 1] * (int64_t)esize <= 64 && esize == 4;
  const int loop_r = tile || runs ? r - 1 : r; /* dimensions [0, loop_r - 1) are walked */
  const int64_t w = shp[r - 1], h = tile || runs ? shp[r - 2] : 1;
  const int64_t outer = n / (w * h);
  int64_t idx[KILN_MAX_DIMS] = {0};
  int64_t od = 0, os = 0;
  for (int64_t it = 0; it < outer; ++it) {
    if (tile) {
      kiln_copy_tile(d8 + od * es, st[0][r - 2], s8 + os * es, st[1][r - 1], h, w, esize);
    } else if (runs) {
      uint32_t* restrict d4 = (uint32_t*)(d8 + od * es);
      const uint32_t* restrict s4 = (const uint32_t*)(s8 + os * es);
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) d4[i * st[0][r - 2] + j] = s4[i * st[1][r - 2] + j];
    } else {
      kiln_copy_row(d8 + od * es, st[0][r - 1], s8 + os * es, st[1][r - 1], w, esize);
    }
    for (int d = loop_r - 2; d >= 0; --d) {
      od += st[0][d];
      os += st[1][d];
      if (++idx[d] < shp[d]) break;
      od -= st[0][d] * shp[d];
      os -= st[1][d] * shp[d];
      idx[d] = 0;
    }
  }
}

/* Copies a strided tensor into a contiguous buffer in row-major order. */
KILN_INDEX_FN void kiln_copy_strided(void *dst, const void *src, int ndim, const int64_t *shape,
                                     const int64_t *strides, size_t esize) {
  int64_t cs[KILN_MAX_DIMS];
  int64_t c = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    cs[d] = c;
    c *= shape[d];
  }
  kiln_copy_nd(dst, cs, src, strides, ndim, shape, esize);
}

/* ONNX Slice on one dimension of size `dim`: clamps start/end (negative counts from the end)
 * and returns the first index and the element count for `step` (non-zero). */
KILN_INDEX_FN void kiln_slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step,
                                  int64_t *first, int64_t *count) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = start < 0 ? 0 : (start > dim ? dim : start);
    end = end < 0 ? 0 : (end > dim ? dim : end);
    *count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = start < 0 ? 0 : (start > dim - 1 ? dim - 1 : start);
    end = end < -1 ? -1 : (end > dim - 1 ? dim - 1 : end);
    *count = start > end ? (start - end - step - 1) / -step : 0;
  }
  *first = *count > 0 ? start : 0;
}

#endif /* KILN_MODULE */

/* The largest of `blocks` near-equal blocks of `n_units` units of `unit` over `total`: block b
 * spans units [n_units * b / blocks, n_units * (b + 1) / blocks), the last one clipped. */
static __attribute__((unused)) int64_t kiln_tile_widest(int64_t total, int64_t unit,
                                                        int64_t n_units, int64_t blocks) {
  int64_t widest = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t lo = n_units * b / blocks * unit, hi = n_units * (b + 1) / blocks * unit;
    if (hi > total) hi = total;
    if (hi - lo > widest) widest = hi - lo;
  }
  return widest;
}

/* Part `part` of `n_parts` of a rows x cols grid (each image of an output laid out as
 * [image][row][col]): the tile [*r0, *r1) x [*c0, *c1). The grid is cut into cb column
 * blocks (whole units of col_unit, cb dividing n_parts) times rb row blocks (units of
 * row_unit); of those cuts the one whose largest tile is smallest wins, columns first among
 * equals so parts share rows (a GEMM's A, a convolution's weights) rather than columns.
 * Measuring the tiles, not counting units, matters for a clipped last unit: 196 positions in
 * units of 64 cut by columns gave three parts of 64 and one of 4, so one of two workers ran
 * two parts and the other one (77% of both cores); by rows all four are equal. Parts past
 * the grid get an empty tile. An op and its epilogue call this with the same arguments, so
 * the epilogue reads exactly the elements its part computed. */
static __attribute__((unused)) void kiln_tile_part(int64_t rows, int64_t cols, int64_t row_unit,
                                                   int64_t col_unit, int32_t part,
                                                   int32_t n_parts, int64_t *r0, int64_t *r1,
                                                   int64_t *c0, int64_t *c1) {
  const int64_t cb_n = (cols + col_unit - 1) / col_unit, rb_n = (rows + row_unit - 1) / row_unit;
  int64_t cb = 1, rb = 1, best = -1;
  for (int64_t c = n_parts < cb_n ? n_parts : cb_n; c >= 1; --c) {
    if (n_parts % c) continue;
    int64_t r = n_parts / c < rb_n ? n_parts / c : rb_n;
    if (r < 1) r = 1;
    const int64_t cost = kiln_tile_widest(cols, col_unit, cb_n, c) *
                         kiln_tile_widest(rows, row_unit, rb_n, r);
    if (best < 0 || cost < best) {
      best = cost;
      cb = c;
      rb = r;
    }
  }
  if (part >= cb * rb) {
    *r0 = *r1 = *c0 = *c1 = 0;
    return;
  }
  const int64_t ci = part % cb, ri = part / cb;
  *c0 = cb_n * ci / cb * col_unit;
  *c1 = cb_n * (ci + 1) / cb * col_unit;
  *r0 = rb_n * ri / rb * row_unit;
  *r1 = rb_n * (ri + 1) / rb * row_unit;
  if (*c1 > cols) *c1 = cols;
  if (*r1 > rows) *r1 = rows;
  if (*c0 > *c1) *c0 = *c1;
  if (*r0 > *r1) *r0 = *r1;
}

#endif /* KILN_INDEX_H */
