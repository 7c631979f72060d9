/* Accuracy of kiln_math.h's float64 functions against long-double libm (64-bit mantissa on
 * x86-64): 4M random bit patterns over the whole double range, a dense sweep of [-40, 40],
 * sweeps where each function is delicate (near 0, near overflow, into subnormal results,
 * around 1 for log, erf's and gelu's interval seams, gelu's underflowing tail) and the
 * special values. Prints the largest error in double ulps per
 * function; fails when it exceeds the bound below or a special value is wrong. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln_math.h"

typedef double (*fn64)(double);
typedef long double (*fnl)(long double);

static long double ref_sigmoid(long double x) { return 1.0L / (1.0L + expl(-x)); }
static long double ref_gelu(long double x) {
  return isinf(x) && x < 0 ? -0.0L : 0.5L * x * erfcl(-x * 0.707106781186547524400844362104849L);
}
static long double ref_softplus(long double x) {
  return (x > 0 ? x : 0.0L) + log1pl(expl(-fabsl(x)));
}

typedef struct {
  const char* name;
  fn64 f;
  fnl ref;
  double bound; /* ulps */
} Case;

/* One double ulp at the size of `v` (the subnormal step below DBL_MIN). */
static long double ulp_of(long double v) {
  long double a = fabsl(v);
  if (a < DBL_MIN) return ldexpl(1.0L, -1074);
  int e;
  frexpl(a, &e);
  return ldexpl(1.0L, e - 53);
}

typedef struct {
  double max_ulp;
  double worst;
  long bad_special;
} Stats;

static void check_one(const Case* c, double x, Stats* st) {
  double y = c->f(x);
  long double r = c->ref((long double)x);
  double rd = (double)r;
  if (isnan(r)) {
    if (!isnan(y) && st->bad_special++ < 5) printf("  %s(%a) = %a, want NaN\n", c->name, x, y);
    return;
  }
  if (isinf(rd) || isinf(y)) {
    if (y != rd && st->bad_special++ < 5) printf("  %s(%a) = %a, want %a\n", c->name, x, y, rd);
    return;
  }
  double err = (double)(fabsl((long double)y - r) / ulp_of(r));
  if (err > st->max_ulp) {
    st->max_ulp = err;
    st->worst = x;
  }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t next_u64(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dULL;
}

static void sweep(const Case* c, double lo, double hi, int n, Stats* st) {
  for (int i = 0; i <= n; ++i) check_one(c, lo + (hi - lo) * i / n, st);
}

static int run(const Case* c) {
  Stats st = {0, 0, 0};
  rng_state = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 4000000; ++i) {
    uint64_t u = next_u64();
    double x;
    memcpy(&x, &u, sizeof x);
    check_one(c, x, &st);
  }
  sweep(c, -40, 40, 2000000, &st);
  sweep(c, -1e-5, 1e-5, 200000, &st);
  sweep(c, 0.5, 2.0, 200000, &st);
  sweep(c, 709.0, 709.79, 100000, &st);
  sweep(c, -746.0, -700.0, 100000, &st);
  sweep(c, 0.91, 0.93, 100000, &st);    /* erf's seam at 0.921875 */
  sweep(c, -1.31, -1.29, 100000, &st);  /* gelu's, at -0.921875 sqrt 2 */
  sweep(c, -39.0, -37.0, 100000, &st);  /* gelu's tail into subnormals and 0 */
  for (int e = -1074; e <= 1023; ++e) {
    check_one(c, ldexp(1.0, e), &st);
    check_one(c, -ldexp(1.0, e), &st);
    check_one(c, ldexp(1.0, e) * 1.3, &st);
    check_one(c, 1.0 + ldexp(1.0, e < -60 ? -60 : e), &st);
  }
  const double specials[] = {0.0,
                             -0.0,
                             INFINITY,
                             -INFINITY,
                             NAN,
                             1.0,
                             -1.0,
                             DBL_MAX,
                             -DBL_MAX,
                             DBL_MIN,
                             4.9e-324,
                             -4.9e-324,
                             709.782712893384,
                             709.7827128933841,
                             -745.1332191019411,
                             -745.1332191019412,
                             22.0,
                             22.000001,
                             0.7071067811865476};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) check_one(c, specials[i], &st);
  double z = c->f(-0.0);
  long double rz = c->ref(-0.0L);
  if (rz == 0 && !signbit(z) != !signbit(rz)) {
    printf("  %s(-0) = %a, want %La\n", c->name, z, rz);
    ++st.bad_special;
  }
  int ok = st.max_ulp <= c->bound && st.bad_special == 0;
  printf("%-9s max error %6.3f ulp (at %a)  bound %.1f  special-value failures %ld  %s\n", c->name,
         st.max_ulp, st.worst, c->bound, st.bad_special, ok ? "ok" : "FAIL");
  return ok;
}

int main(void) {
  const Case cases[] = {
      {"exp", kiln_exp, expl, 2.0},
      {"log", kiln_log, logl, 2.0},
      {"log1p", kiln_log1p, log1pl, 3.0},
      {"expm1", kiln_expm1, expm1l, 3.0},
      {"tanh", kiln_tanh, tanhl, 4.0},
      {"sigmoid", kiln_sigmoid, ref_sigmoid, 3.0},
      {"softplus", kiln_softplus, ref_softplus, 3.0},
      {"erf", kiln_erf, erfl, 3.0},
      {"gelu", kiln_gelu, ref_gelu, 8.0},
  };
  int ok = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) ok &= run(&cases[i]);
  return ok ? 0 : 1;
}
