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

void kiln_qim2row(const uint8_t* x, int64_t c, int64_t sc, const kiln_window* g, int64_t p0,
                  int64_t p1, uint8_t fill, uint8_t flip, uint8_t* row, int64_t ldr) {
  const int64_t taps = g->kh * g->kw;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t oy = p / g->ow, ox = p % g->ow;
    uint8_t* dst = row + (p - p0) * ldr;
    for (int64_t ci = 0; ci < c; ++ci) {
      const uint8_t* plane = x + ci * sc;
      for (int64_t i = 0; i < g->kh; ++i) {
        const int64_t y = oy * g->sh - g->ph + i * g->dh;
        uint8_t* d = dst + ci * taps + i * g->kw;
        if (y < 0 || y >= g->h) {
          memset(d, fill, (size_t)g->kw);
          continue;
        }
        for (int64_t j = 0; j < g->kw; ++j) {
          const int64_t xx = ox * g->sw - g->pw + j * g->dw;
          d[j] = xx < 0 || xx >= g->w ? fill : (uint8_t)(plane[y * g->w + xx] ^ flip);
        }
      }
    }
  }
}
