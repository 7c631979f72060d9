/* Accuracy of kiln_math.h against libm in double precision, over the whole float range:
 * every 257th bit pattern of all 2^32 (both signs, subnormals, up to inf), plus a dense
 * sweep of [-4, 4] and the special values. Prints the largest error in float ulps per
 * function and fails when it exceeds the bound below or a special value is wrong.
 * `math_prelude_test --all` walks all 2^32 patterns (about a minute per function). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln_math.h"
#include "kiln_softmax.h"

typedef float (*fn32)(float);
typedef double (*fn64)(double);

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* In long double, so the reference is libm's own erfc, not kiln's. */
static double ref_gelu(double x) {
  long double l = x;
  return isinf(x) && x < 0 ? -0.0 : (double)(0.5L * l * erfcl(-l * 0.707106781186547524400844362104849L));
}
static double ref_softplus(double x) { return (x > 0 ? x : 0.0) + log1p(exp(-fabs(x))); }
/* kiln_exp_nonpos_f32 takes x <= 0 only: both signs of every pattern map onto its domain. */
static float exp_nonpos_neg_abs(float x) { return kiln_exp_nonpos_f32(-fabsf(x)); }
static double ref_exp_neg_abs(double x) { return exp(-fabs(x)); }
/* kiln_softmax.h's 8-lane copy of it, one lane of a vector whose other lanes differ. */
static float exp_nonpos_v8_neg_abs(float x) {
  kiln_sv8f v = {-1.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f};
  v[5] = -fabsf(x);
  return kiln_sv8_exp_nonpos(v)[5];
}

typedef struct {
  const char *name;
  fn32 f;
  fn64 ref;
  double bound; /* ulps */
} Case;

/* One float ulp at the size of `v` (the smallest subnormal step below FLT_MIN). */
static double ulp_of(double v) {
  double a = fabs(v);
  if (a < 1.17549435e-38) return ldexp(1.0, -149);
  int e;
  frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return ldexp(1.0, e - 24);
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

typedef struct {
  double max_ulp;
  float worst;
  long bad_special;
} Stats;

static void check_one(const Case *c, float x, Stats *st) {
  float y = c->f(x);
  double r = c->ref((double)x);
  float rf = (float)r; /* what a correctly rounded float function returns */
  if (isnan(r)) {
    if (!isnan(y)) {
      if (st->bad_special++ < 5) printf("  %s(%a) = %a, want NaN\n", c->name, x, y);
    }
    return;
  }
  if (isinf(rf) || isinf(y)) {
    if (y != rf) {
      if (st->bad_special++ < 5) printf("  %s(%a) = %a, want %a\n", c->name, x, y, rf);
    }
    return;
  }
  double err = fabs((double)y - r) / ulp_of(r);
  if (err > st->max_ulp) {
    st->max_ulp = err;
    st->worst = x;
  }
}

static int run(const Case *c, int all) {
  Stats st = {0, 0, 0};
  const uint64_t step = all ? 1 : 257;
  for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += step) check_one(c, from_bits((uint32_t)u), &st);
  for (int i = -400000; i <= 400000; ++i) check_one(c, (float)i / 100000.0f, &st);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 88.72f, 88.73f,
                            -87.33f, -103.9f, -104.0f, 1e-45f, -1e-45f, 1.17549435e-38f,
                            0.625f, 0.921875f, 0.92187494f, -1.3f, 3.9f, 3.92f, 4.0f, -4.0f,
                            4.0000005f, 10.0f, -10.0f, 1e-7f, -1e-7f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) check_one(c, specials[i], &st);
  /* Signed zero and NaN propagation, which a ulp measure cannot see. */
  float z = c->f(-0.0f);
  double rz = c->ref(-0.0);
  if (rz == 0 && !signbit(z) != !signbit(rz)) {
    printf("  %s(-0) = %a, want %a\n", c->name, z, rz);
    ++st.bad_special;
  }
  int ok = st.max_ulp <= c->bound && st.bad_special == 0;
  printf("%-9s max error %6.3f ulp (at %a)  bound %.1f  special-value failures %ld  %s\n", c->name,
         st.max_ulp, st.worst, c->bound, st.bad_special, ok ? "ok" : "FAIL");
  return ok;
}

int main(int argc, char **argv) {
  int all = argc > 1 && strcmp(argv[1], "--all") == 0;
  const Case cases[] = {
      {"exp", kiln_expf, exp, 2.0},
      {"exp<=0", exp_nonpos_neg_abs, ref_exp_neg_abs, 2.0},
      {"exp<=0 x8", exp_nonpos_v8_neg_abs, ref_exp_neg_abs, 2.0},
      {"log", kiln_logf, log, 2.0},
      {"log1p", kiln_log1pf, log1p, 3.0},
      {"expm1", kiln_expm1f, expm1, 3.0},
      {"tanh", kiln_tanhf, tanh, 3.0},
      {"sigmoid", kiln_sigmoidf, ref_sigmoid, 3.0},
      {"erf", kiln_erff, erf, 3.0},
      {"gelu", kiln_geluf, ref_gelu, 7.0},
      {"softplus", kiln_softplusf, ref_softplus, 3.0},
  };
  int ok = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) ok &= run(&cases[i], all);
  return ok ? 0 : 1;
}
