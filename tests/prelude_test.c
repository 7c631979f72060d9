/* The preludes compiled on their own, as C11 with -Wall -Werror, and checked. */
#include <assert.h>
#include <stdio.h>

#include "kiln_index.h"
#include "kiln_scalar.h"

int main(void) {
  /* A contiguous (2, 3, 4) iteration space with a broadcast row collapses to two dims. */
  int64_t shape[KILN_MAX_DIMS] = {2, 3, 4};
  int64_t st[2][KILN_MAX_DIMS] = {{12, 4, 1}, {0, 0, 1}};
  int r = kiln_collapse(3, 2, shape, st);
  assert(r == 2 && shape[0] == 6 && shape[1] == 4);
  assert(st[0][0] == 4 && st[0][1] == 1 && st[1][0] == 0 && st[1][1] == 1);
  /* Size-1 dims vanish; all-ones leaves one dim of size 1. */
  int64_t ones[KILN_MAX_DIMS] = {1, 1};
  int64_t st1[1][KILN_MAX_DIMS] = {{1, 1}};
  assert(kiln_collapse(2, 1, ones, st1) == 1 && ones[0] == 1 && st1[0][0] == 0);
  /* Part ranges cover [0, n) exactly once, on grain boundaries. */
  for (int64_t n = 0; n < 300; n += 37) {
    for (int32_t parts = 1; parts <= 7; ++parts) {
      int64_t next = 0;
      for (int32_t p = 0; p < parts; ++p) {
        int64_t lo, hi;
        kiln_part_range(n, p, parts, 16, &lo, &hi);
        assert(lo == next && hi >= lo && hi <= n && (hi == n || hi % 16 == 0));
        next = hi;
      }
      assert(next == n);
    }
  }
  /* Tiles cover the grid exactly once, start on unit boundaries, and the largest is never
   * bigger than a plain columns-first cut's. */
  for (int64_t rows = 0; rows <= 70; rows += 7) {
    for (int64_t cols = 0; cols <= 300; cols += 49) {
      for (int32_t parts = 1; parts <= 8; ++parts) {
        static unsigned char seen[71 * 301];
        memset(seen, 0, sizeof seen);
        int64_t largest = 0;
        for (int32_t p = 0; p < parts; ++p) {
          int64_t r0, r1, c0, c1;
          kiln_tile_part(rows, cols, 8, 64, p, parts, &r0, &r1, &c0, &c1);
          assert(r0 <= r1 && r1 <= rows && c0 <= c1 && c1 <= cols);
          if (r0 == r1 || c0 == c1) continue;
          assert(r0 % 8 == 0 && c0 % 64 == 0);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) assert(seen[r * 301 + c]++ == 0);
          if ((r1 - r0) * (c1 - c0) > largest) largest = (r1 - r0) * (c1 - c0);
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) assert(seen[r * 301 + c] == 1);
        const int64_t cb_n = (cols + 63) / 64, rb_n = (rows + 7) / 8;
        int64_t cb = parts < cb_n ? parts : cb_n, rb = 1;
        if (cb < 1) cb = 1;
        while (parts % cb) --cb;
        if (parts / cb > 1) rb = parts / cb < rb_n ? parts / cb : rb_n;
        if (rb < 1) rb = 1;
        assert(largest <= kiln_tile_widest(cols, 64, cb_n, cb) *
                              kiln_tile_widest(rows, 8, rb_n, rb));
      }
    }
  }
  /* 196 positions (a 14 x 14 map) in units of 64 over 4 parts: a cut by columns gave parts
   * of 64, 64, 64 and 4; rows of 96 channels split evenly instead. */
  for (int32_t p = 0; p < 4; ++p) {
    int64_t r0, r1, c0, c1;
    kiln_tile_part(96, 196, 8, 64, p, 4, &r0, &r1, &c0, &c1);
    assert(c0 == 0 && c1 == 196 && r1 - r0 == 24 && r0 == 24 * p);
  }
  /* Seeking row 5 of a (3, 4, x) nest: idx (1, 1); offsets follow each operand's strides. */
  {
    int64_t sshape[KILN_MAX_DIMS] = {3, 4, 8};
    int64_t sst[2][KILN_MAX_DIMS] = {{32, 8, 1}, {0, 1, 0}};
    int64_t idx[KILN_MAX_DIMS], off[2];
    kiln_seek(3, 2, sshape, sst, 5, idx, off);
    assert(idx[0] == 1 && idx[1] == 1 && off[0] == 40 && off[1] == 1);
  }
  /* Transposed copy. */
  float src[6] = {1, 2, 3, 4, 5, 6}; /* (2, 3) */
  float dst[6];
  const int64_t tshape[2] = {3, 2}, tstrides[2] = {1, 3};
  kiln_copy_strided(dst, src, 2, tshape, tstrides, sizeof(float));
  const float want[6] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; ++i) assert(dst[i] == want[i]);
  /* Integer helpers never trap. */
  assert(kiln_div_i32(7, 0) == 0 && kiln_div_i32(INT32_MIN, -1) == INT32_MIN);
  assert(kiln_mod_i32(-7, 2) == 1 && kiln_mod_i32(7, -2) == -1 && kiln_mod_i64(5, 0) == 0);
  assert(kiln_pow_i64(3, 4) == 81 && kiln_pow_i32(2, -1) == 0 && kiln_pow_i32(-1, -3) == -1);
  assert(kiln_mod_f64(-7.5, 2.0) == 0.5);
  puts("1 passed, 0 failed");
  return 0;
}
