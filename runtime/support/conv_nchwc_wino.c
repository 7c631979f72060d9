/* The blocked-layout (NCHW8c) 3x3 convolutions by Winograd's F(2x2, 3x3) and F(4x4, 3x3)
 * behind kiln_support.conv_nchwc_wino_f32 and conv_nchwc_wino4_f32, compiled once per vector
 * ISA like conv_nchwc.c (module_abi.h states their contracts).
 *
 * Each T x T output tile (T = 2 or 4) is A^T [sum_c (G g G^T) . (B^T d B)] A over the
 * (T+2) x (T+2) input patch d of each input channel: (T+2)^2 multiplies per tile and channel
 * pair where the direct form takes 9 T^2 (16 for 36 at T = 2, 36 for 144 at T = 4), so the
 * products are (T+2)^2 pointwise convolutions (one per element of the transform) from C
 * transformed input channels to M outputs over the tiles, run by the register-blocked
 * pointwise kernel. ResNet's 3x3 layers ran at 90-95% of the FMA peak in the direct kernel,
 * the peak itself being what the other engines reach; fewer multiplies is the lever left.
 * F(4x4) took 0.36-0.37 of the direct kernel's time on ResNet's 56 x 56 and 28 x 28 layers
 * (one Zen 4 core, half an image), F(2x2) 0.51-0.55; its rounding errors are about 3x F(2x2)'s
 * (the transforms scale by up to 8 and 1/24).
 *
 * A call takes whole tile rows: it transforms their input into work ((T+2)^2, C/8, tiles, 8),
 * runs the products into work ((T+2)^2, blocks, tiles, 8) and transforms those back, so the
 * buffers of a few tile rows stay in L2 between the three steps.
 *
 * Non-finite inputs: the transforms add and subtract inputs, so an infinity meets its own
 * negative (inf - inf: NaN) where the direct sum would give the infinity. The input transform
 * therefore watches its results, and a call whose input holds an infinity or NaN computes
 * its outputs again by the direct sum, from the weights read back out of u (G's first and
 * last rows keep g's outer taps, scaled by a power of two; the middle one is a multiple of the
 * difference of rows 1 and 2, so a zero tap reads back as an exact zero),
 * so outputs are non-finite exactly where the direct convolution's are. */
#include "runtime/support/conv_nchwc_wino.h"

#include <stdint.h>

#include "runtime/support/conv_nchwc.h"
#include "runtime/support/kiln_clamp.h"

#if !defined(KILN_ISA)
#error "conv_nchwc_wino.c is compiled with KILN_ISA defined"
#endif

#define KILN_WG_CAT2(a, b) a##b
#define KILN_WG_CAT(a, b) KILN_WG_CAT2(a, b)
#define KILN_WG_FN(name) KILN_WG_CAT(name, KILN_WG_CAT(_, KILN_ISA))

/* The base copy's vectors never cross a call (see conv_nchwc.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float wg_v8 __attribute__((vector_size(32)));
typedef float wg_v8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t wg_v8i __attribute__((vector_size(32)));
KILN_CLAMP_FN(wg_clamp, wg_v8, wg_v8i, float)

#define WG_LOAD(p) (*(const wg_v8u*)(p))
#define WG_STORE(p, v) (*(wg_v8u*)(p) = (v))

/* B^T d B of one tile's 4x4 patch (F(2x2)), stored as the 16 elements' planes (`plane`
 * floats apart). `in` says which rows and columns of the patch lie inside the image; INTERIOR:
 * all of them (a constant, so the tests fold away off the edges). Returns the sum of the
 * elements: non-finite (or overflowing: then the direct sum runs needlessly, and still right)
 * when any input of the patch is. */
static inline __attribute__((always_inline)) wg_v8 wg_input_tile2(const float* const* rows,
                                                                  int64_t ix0, int64_t wd,
                                                                  int interior, float* v,
                                                                  int64_t plane) {
  wg_v8 d[4][4];
  const wg_v8 zero = {0};
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 4; ++j) {
      const int64_t ix = ix0 + j;
      d[r][j] = interior || (rows[r] && ix >= 0 && ix < wd) ? WG_LOAD(rows[r] + ix * 8) : zero;
    }
  wg_v8 t[4][4];
  for (int r = 0; r < 4; ++r) {
    t[r][0] = d[r][0] - d[r][2];
    t[r][1] = d[r][1] + d[r][2];
    t[r][2] = d[r][2] - d[r][1];
    t[r][3] = d[r][1] - d[r][3];
  }
  wg_v8 sum = {0};
  for (int j = 0; j < 4; ++j) {
    const wg_v8 v0 = t[0][j] - t[2][j], v1 = t[1][j] + t[2][j], v2 = t[2][j] - t[1][j],
                v3 = t[1][j] - t[3][j];
    WG_STORE(v + (0 * 4 + j) * plane, v0);
    WG_STORE(v + (1 * 4 + j) * plane, v1);
    WG_STORE(v + (2 * 4 + j) * plane, v2);
    WG_STORE(v + (3 * 4 + j) * plane, v3);
    sum += (v0 + v1) + (v2 + v3);
  }
  return sum;
}

/* F(4x4)'s B^T over six values (points 0, +-1, +-2 and infinity). */
static inline __attribute__((always_inline)) void wg_bt6(const wg_v8 d[6], wg_v8 o[6]) {
  const wg_v8 a = d[4] - 4 * d[2], b = d[3] - 4 * d[1], c = d[4] - d[2], e = 2 * (d[3] - d[1]);
  o[0] = 4 * d[0] - 5 * d[2] + d[4];
  o[1] = a + b;
  o[2] = a - b;
  o[3] = c + e;
  o[4] = c - e;
  o[5] = 4 * d[1] - 5 * d[3] + d[5];
}

/* B^T d B of one tile's 6x6 patch (F(4x4)), as wg_input_tile2. */
static inline __attribute__((always_inline)) wg_v8 wg_input_tile4(const float* const* rows,
                                                                  int64_t ix0, int64_t wd,
                                                                  int interior, float* v,
                                                                  int64_t plane) {
  const wg_v8 zero = {0};
  wg_v8 t[6][6];
  for (int r = 0; r < 6; ++r) {
    wg_v8 d[6];
    for (int j = 0; j < 6; ++j) {
      const int64_t ix = ix0 + j;
      d[j] = interior || (rows[r] && ix >= 0 && ix < wd) ? WG_LOAD(rows[r] + ix * 8) : zero;
    }
    wg_bt6(d, t[r]);
  }
  wg_v8 sum = {0};
  for (int j = 0; j < 6; ++j) {
    const wg_v8 col[6] = {t[0][j], t[1][j], t[2][j], t[3][j], t[4][j], t[5][j]};
    wg_v8 o[6];
    wg_bt6(col, o);
    for (int i = 0; i < 6; ++i) {
      WG_STORE(v + (i * 6 + j) * plane, o[i]);
      sum += o[i];
    }
  }
  return sum;
}

/* F(4x4)'s A^T over six values: four outputs. */
static inline __attribute__((always_inline)) void wg_at6(const wg_v8 q[6], wg_v8 o[4]) {
  const wg_v8 p1 = q[1] + q[2], m1 = q[1] - q[2], p3 = q[3] + q[4], m3 = q[3] - q[4];
  o[0] = q[0] + p1 + p3;
  o[1] = m1 + 2 * m3;
  o[2] = p1 + 4 * p3;
  o[3] = m1 + 8 * m3 + q[5];
}

/* The T x T outputs of one tile from its (T+2)^2 products (`plane` floats apart), into o. */
static inline __attribute__((always_inline)) void wg_output_tile(const int T, const float* mt,
                                                                 int64_t plane, wg_v8 o[4][4]) {
  if (T == 2) {
    wg_v8 s[4][2];
    for (int i = 0; i < 4; ++i) {
      const wg_v8 m0 = WG_LOAD(mt + (i * 4 + 0) * plane), m1 = WG_LOAD(mt + (i * 4 + 1) * plane);
      const wg_v8 m2 = WG_LOAD(mt + (i * 4 + 2) * plane), m3 = WG_LOAD(mt + (i * 4 + 3) * plane);
      s[i][0] = m0 + m1 + m2;
      s[i][1] = m1 - m2 - m3;
    }
    for (int j = 0; j < 2; ++j) {
      o[0][j] = s[0][j] + s[1][j] + s[2][j];
      o[1][j] = s[1][j] - s[2][j] - s[3][j];
    }
    return;
  }
  wg_v8 s[6][4];
  for (int i = 0; i < 6; ++i) {
    wg_v8 q[6];
    for (int j = 0; j < 6; ++j) q[j] = WG_LOAD(mt + (i * 6 + j) * plane);
    wg_at6(q, s[i]);
  }
  for (int j = 0; j < 4; ++j) {
    const wg_v8 col[6] = {s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j]};
    wg_v8 r[4];
    wg_at6(col, r);
    for (int a = 0; a < 4; ++a) o[a][j] = r[a];
  }
}

/* The three rows of g's taps along one axis from the T + 2 transformed values h: G's first and
 * last rows hold the outer taps (F(4x4)'s first scaled by 1/4), the middle tap is a multiple of
 * the difference of rows 1 and 2. */
static inline __attribute__((always_inline)) void wg_read_back(const int T, const wg_v8* h,
                                                               wg_v8 g[3]) {
  if (T == 2) {
    g[0] = h[0];
    g[1] = h[1] - h[2];
    g[2] = h[3];
  } else {
    g[0] = 4 * h[0];
    g[1] = 3 * (h[2] - h[1]);
    g[2] = h[5];
  }
}

/* The direct sum for output blocks [mb0, mb1) at rows [oy0, oy1), the weights read back out
 * of u: y accumulates, then takes the clamp. */
static inline __attribute__((always_inline)) void wg_direct(const int T, const float* x, int64_t c,
                                                            int64_t h, int64_t wd, const float* u,
                                                            int64_t m, const float* bias, float* y,
                                                            int64_t mb0, int64_t mb1, int64_t oy0,
                                                            int64_t oy1, float lo, float hi) {
  const int A = T + 2;
  const int clamps = KILN_CLAMPS_ANY(float, lo, hi);
  const int64_t plane = (m / 8) * c * 8;
  for (int64_t b = mb0; b < mb1; ++b) {
    float* yb = y + b * h * wd * 8;
    const wg_v8 bv = bias ? WG_LOAD(bias + b * 8) : (wg_v8){0};
    for (int64_t p = oy0 * wd; p < oy1 * wd; ++p) WG_STORE(yb + p * 8, bv);
    for (int64_t ic = 0; ic < c; ++ic) {
      const float* ub = u + (b * c + ic) * 8;
      wg_v8 hh[3][6], g[3][3];
      for (int e = 0; e < A; ++e) {
        wg_v8 col[6], rows3[3];
        for (int a = 0; a < A; ++a) col[a] = WG_LOAD(ub + (a * A + e) * plane);
        wg_read_back(T, col, rows3);
        for (int i = 0; i < 3; ++i) hh[i][e] = rows3[i];
      }
      for (int i = 0; i < 3; ++i) wg_read_back(T, hh[i], g[i]);
      const float* xc = x + (ic / 8 * h * wd) * 8 + ic % 8;
      for (int64_t oy = oy0; oy < oy1; ++oy)
        for (int64_t ox = 0; ox < wd; ++ox) {
          wg_v8 acc = WG_LOAD(yb + (oy * wd + ox) * 8);
          for (int i = 0; i < 3; ++i) {
            const int64_t iy = oy - 1 + i;
            if (iy < 0 || iy >= h) continue;
            for (int j = 0; j < 3; ++j) {
              const int64_t ix = ox - 1 + j;
              if (ix >= 0 && ix < wd) acc += g[i][j] * xc[(iy * wd + ix) * 8];
            }
          }
          WG_STORE(yb + (oy * wd + ox) * 8, acc);
        }
    }
    if (clamps)
      for (int64_t p = oy0 * wd; p < oy1 * wd; ++p)
        WG_STORE(yb + p * 8, wg_clamp(WG_LOAD(yb + p * 8), lo, hi));
  }
}

/* F(T x T, 3x3) over output rows [oy0, oy1) (oy0 a multiple of T). */
static inline __attribute__((always_inline)) void wg_conv(const int T, const float* x, int64_t c,
                                                          int64_t h, int64_t wd, const float* u,
                                                          int64_t m, const float* bias, float* y,
                                                          int64_t mb0, int64_t mb1, int64_t oy0,
                                                          int64_t oy1, float* work, float lo,
                                                          float hi) {
  if (oy0 >= oy1 || mb0 >= mb1 || c <= 0) return;
  const int A = T + 2, E = A * A;
  const int64_t cb = c / 8, tw = (wd + T - 1) / T, ty0 = oy0 / T, ty1 = (oy1 + T - 1) / T;
  const int64_t nt = (ty1 - ty0) * tw, nmb = mb1 - mb0;
  float* v = work;               /* (E, C/8, nt, 8) */
  float* mm = work + E * c * nt; /* (E, nmb, nt, 8) */
  const int64_t vplane = c * nt, mplane = nmb * nt * 8;
  /* The input transform: a tile row at a time; only the tiles that reach past an edge test
   * their rows and columns. */
  wg_v8 finite = {0}; /* stays 0 while every patch is finite */
  for (int64_t b = 0; b < cb; ++b) {
    const float* xb = x + b * h * wd * 8;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* rows[6];
      int inside = 1;
      for (int r = 0; r < A; ++r) {
        const int64_t iy = T * ty - 1 + r;
        rows[r] = iy >= 0 && iy < h ? xb + iy * wd * 8 : 0;
        inside &= rows[r] != 0;
      }
      float* vt = v + (b * nt + (ty - ty0) * tw) * 8;
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t ix0 = T * tx - 1;
        const int interior = inside && ix0 >= 0 && ix0 + A <= wd;
        wg_v8 sum;
        if (T == 2)
          sum = interior ? wg_input_tile2(rows, ix0, wd, 1, vt + tx * 8, vplane)
                         : wg_input_tile2(rows, ix0, wd, 0, vt + tx * 8, vplane);
        else
          sum = interior ? wg_input_tile4(rows, ix0, wd, 1, vt + tx * 8, vplane)
                         : wg_input_tile4(rows, ix0, wd, 0, vt + tx * 8, vplane);
        finite += sum * 0.0f;
      }
    }
  }
  const wg_v8i nan = (wg_v8i)(finite != finite);
  if ((nan[0] | nan[1] | nan[2] | nan[3] | nan[4] | nan[5] | nan[6] | nan[7]) != 0) {
    wg_direct(T, x, c, h, wd, u, m, bias, y, mb0, mb1, oy0, oy1, lo, hi);
    return;
  }
  /* The products: pointwise convolutions over the tiles. */
  const float inf = __builtin_inff();
  for (int64_t e = 0; e < E; ++e) KILN_WG_FN(kiln_conv_nchwc_pw_f32)
  (v + e * vplane, c, nt, u + (e * (m / 8) + mb0) * c * 8, 0, mm + e * mplane, 0, nmb, 0, nt, -inf,
   inf);
  /* The output transform A^T M A, the bias and clamp, into the rows [oy0, oy1). */
  const int clamps = KILN_CLAMPS_ANY(float, lo, hi);
  for (int64_t b = 0; b < nmb; ++b) {
    const wg_v8 bv = bias ? WG_LOAD(bias + (mb0 + b) * 8) : (wg_v8){0};
    float* yb = y + (mb0 + b) * h * wd * 8;
    for (int64_t t = 0; t < nt; ++t) {
      wg_v8 o[4][4];
      wg_output_tile(T, mm + (b * nt + t) * 8, mplane, o);
      const int64_t oy = T * (ty0 + t / tw), ox = T * (t % tw);
      for (int a = 0; a < T && oy + a < oy1; ++a)
        for (int j = 0; j < T && ox + j < wd; ++j) {
          const wg_v8 r = o[a][j] + bv;
          WG_STORE(yb + ((oy + a) * wd + ox + j) * 8, clamps ? wg_clamp(r, lo, hi) : r);
        }
    }
  }
}

void KILN_WG_FN(kiln_conv_nchwc_wino_f32)(const float* x, int64_t c, int64_t h, int64_t wd,
                                          const float* u, int64_t m, const float* bias, float* y,
                                          int64_t mb0, int64_t mb1, int64_t oy0, int64_t oy1,
                                          float* work, float lo, float hi) {
  wg_conv(2, x, c, h, wd, u, m, bias, y, mb0, mb1, oy0, oy1, work, lo, hi);
}

void KILN_WG_FN(kiln_conv_nchwc_wino4_f32)(const float* x, int64_t c, int64_t h, int64_t wd,
                                           const float* u, int64_t m, const float* bias, float* y,
                                           int64_t mb0, int64_t mb1, int64_t oy0, int64_t oy1,
                                           float* work, float lo, float hi) {
  wg_conv(4, x, c, h, wd, u, m, bias, y, mb0, mb1, oy0, oy1, work, lo, hi);
}
