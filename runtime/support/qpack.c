/* kiln_support.qpack and qim2row (module_abi.h): the run-time halves of the integer GEMM's
 * operands, for weights that are not constants and for a convolution's input. */
#include <string.h>

#include "runtime/support/qgemm.h"

void kiln_qpack(int64_t k, int64_t n, const void* b, int64_t rsb, int64_t csb, int b_u8, int8_t* bp,
                int32_t* colsum) {
  const int64_t k4 = (k + 3) / 4, np = (n + 15) / 16;
  memset(bp, 0, (size_t)(np * k4 * 64));
  memset(colsum, 0, (size_t)(np * 16) * sizeof(int32_t));
  for (int64_t t = 0; t < k; ++t) {
    int8_t* row = bp + (t / 4) * 64 + t % 4;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = t * rsb + j * csb;
      const int8_t v = b_u8 ? (int8_t)((int)((const uint8_t*)b)[at] - 128) : ((const int8_t*)b)[at];
      row[(j / 16) * k4 * 64 + (j % 16) * 4] = v;
      colsum[j] += v;
    }
  }
}

void kiln_qnhwc(const uint8_t* x, int64_t c, int64_t sc, const kiln_window* g, int64_t r0,
                int64_t r1, uint8_t fill, uint8_t flip, uint8_t* buf) {
  const int64_t hp = g->ph + g->h + g->eh, wp = g->pw + g->w + g->ew;
  if (r0 < 0) r0 = 0;
  if (r1 > hp) r1 = hp;
  if (r0 >= r1) return;
  memset(buf + r0 * wp * c, fill, (size_t)((r1 - r0) * wp * c));
  const int64_t y0 = r0 - g->ph > 0 ? r0 - g->ph : 0;
  const int64_t y1 = r1 - g->ph < g->h ? r1 - g->ph : g->h;
  for (int64_t y = y0; y < y1; ++y) {
    uint8_t* row = buf + ((y + g->ph) * wp + g->pw) * c;
    /* Blocks of 16 channels by 16 columns: both sides stay within a few cache lines. */
    for (int64_t c0 = 0; c0 < c; c0 += 16) {
      const int64_t c1 = c0 + 16 < c ? c0 + 16 : c;
      for (int64_t x0 = 0; x0 < g->w; x0 += 16) {
        const int64_t x1 = x0 + 16 < g->w ? x0 + 16 : g->w;
        for (int64_t ci = c0; ci < c1; ++ci) {
          const uint8_t* src = x + ci * sc + y * g->w;
          for (int64_t xx = x0; xx < x1; ++xx) row[xx * c + ci] = (uint8_t)(src[xx] ^ flip);
        }
      }
    }
  }
}

/* Copies n bytes in 32-byte blocks: up to 31 bytes past dst + n are written too (the caller's
 * rows are written in order, and its buffers have slack), and past src + n read. A
 * variable-length memcpy was a library call per tap. */
static inline void copy_blocks(uint8_t* dst, const uint8_t* src, int64_t n) {
  for (int64_t o = 0; o < n; o += 32) memcpy(dst + o, src + o, 32);
}

void kiln_qim2row(const uint8_t* buf, int64_t c, int64_t cs, const kiln_window* g, int64_t p0,
                  int64_t p1, uint8_t* row, int64_t ldr) {
  const int64_t wp = g->pw + g->w + g->ew;
  /* With dilation 1 and all the image's channels, a window row's taps are one run of bytes. */
  const int runs = g->dw == 1 && cs == c;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t oy = p / g->ow, ox = p % g->ow;
    uint8_t* dst = row + (p - p0) * ldr;
    for (int64_t i = 0; i < g->kh; ++i) {
      const uint8_t* src = buf + ((oy * g->sh + i * g->dh) * wp + ox * g->sw) * cs;
      if (runs) {
        copy_blocks(dst, src, g->kw * c);
        dst += g->kw * c;
        continue;
      }
      for (int64_t j = 0; j < g->kw; ++j, dst += c) copy_blocks(dst, src + j * g->dw * cs, c);
    }
  }
}
