/* example.rotary — rotary position embedding, an op with state set up once per module: the
 * cos/sin tables for every position up to max_positions are computed when the module loads
 * (create_state) and shared by every run.
 *   x: (..., S, D) float32, D even, any strides. Position s rotates each pair
 *   (x[2i], x[2i+1]) by the angle s * base^(-2i/D).
 * Attributes: max_positions (int, required), base (float, default 10000). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "example_ops.h"

typedef struct rotary_state {
  int64_t positions, half;
  float *cos_table, *sin_table; /* [positions][half] */
} rotary_state;

static int check_attrs(const kiln_op_node *node) {
  const kiln_op_host *h = node->host;
  for (int32_t i = 0; i < h->attr_count(node->call); ++i) {
    const char *name = h->attr_name(node->call, i);
    if (strcmp(name, "max_positions") != 0 && strcmp(name, "base") != 0) {
      h->error(node->call, "unknown attribute '%s' (rotary takes max_positions, base)", name);
      return KILN_OP_ERROR;
    }
  }
  int64_t p;
  if (h->attr_int(node->call, "max_positions", &p) != 0 || p < 1 || p > (1 << 20)) {
    h->error(node->call, "max_positions must be an integer in [1, 2^20]");
    return KILN_OP_ERROR;
  }
  double base = 10000;
  if (h->attr_kind(node->call, "base") != KILN_ATTR_NONE &&
      (h->attr_float(node->call, "base", &base) != 0 || !(base > 0))) {
    h->error(node->call, "base must be a number > 0");
    return KILN_OP_ERROR;
  }
  return KILN_OP_OK;
}

static int infer_types(const kiln_op_node *node, int32_t *n_outputs, kiln_op_type *outputs) {
  const kiln_op_host *h = node->host;
  if (node->n_inputs != 1) {
    h->error(node->call, "takes 1 input, got %d", node->n_inputs);
    return KILN_OP_ERROR;
  }
  const kiln_op_type *x = &node->inputs[0];
  if (x->dtype != KILN_DTYPE_FLOAT32 || x->ndim < 2) {
    h->error(node->call, "x must be float32 with at least 2 dimensions (..., S, D)");
    return KILN_OP_ERROR;
  }
  if (x->dims[x->ndim - 1] >= 0 && x->dims[x->ndim - 1] % 2 != 0) {
    h->error(node->call, "the last axis (D = %lld) must be even", (long long)x->dims[x->ndim - 1]);
    return KILN_OP_ERROR;
  }
  *n_outputs = 1;
  outputs[0] = *x;
  return KILN_OP_OK;
}

static int infer_shapes(const kiln_op_node *node, kiln_op_type *outputs) {
  const kiln_op_type *x = &node->inputs[0];
  if (x->dims[x->ndim - 1] % 2 != 0) {
    node->host->error(node->call, "the last axis (D = %lld) must be even",
                      (long long)x->dims[x->ndim - 1]);
    return KILN_OP_ERROR;
  }
  for (int32_t i = 0; i < x->ndim; ++i) outputs[0].dims[i] = x->dims[i];
  return KILN_OP_OK;
}

static void destroy_state(void *op_data, void *p) {
  (void)op_data;
  rotary_state *s = (rotary_state *)p;
  free(s->cos_table);
  free(s->sin_table);
  free(s);
}

/* D must be static here: the tables are laid out for it. */
static void *create_state(const kiln_op_node *node) {
  const kiln_op_host *h = node->host;
  const kiln_op_type *x = &node->inputs[0];
  const int64_t d = x->dims[x->ndim - 1];
  if (d < 0) {
    h->error(node->call, "the last axis must be known when the module loads");
    return NULL;
  }
  int64_t positions = 0;
  double base = 10000;
  h->attr_int(node->call, "max_positions", &positions);
  h->attr_float(node->call, "base", &base);
  rotary_state *s = (rotary_state *)calloc(1, sizeof *s);
  if (!s) {
    h->error(node->call, "out of memory");
    return NULL;
  }
  s->positions = positions;
  s->half = d / 2;
  const size_t n = (size_t)(positions * s->half);
  s->cos_table = (float *)malloc((n ? n : 1) * sizeof(float));
  s->sin_table = (float *)malloc((n ? n : 1) * sizeof(float));
  if (!s->cos_table || !s->sin_table) {
    destroy_state(NULL, s);
    h->error(node->call, "out of memory for %zu table entries", n);
    return NULL;
  }
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < s->half; ++i) {
      const double angle = (double)p * pow(base, -2.0 * (double)i / (double)d);
      s->cos_table[p * s->half + i] = (float)cos(angle);
      s->sin_table[p * s->half + i] = (float)sin(angle);
    }
  }
  return s;
}

static int forward(const kiln_op_run *run) {
  const rotary_state *s = (const rotary_state *)run->state;
  const kiln_op_tensor *x = run->inputs[0], *y = run->outputs[0];
  const int nd = x->ndim;
  const int64_t seq = x->shape[nd - 2], d = x->shape[nd - 1];
  if (seq > s->positions) {
    run->host->error(run->call, "sequence length %lld exceeds max_positions %lld",
                     (long long)seq, (long long)s->positions);
    return KILN_OP_ERROR;
  }
  if (d != 2 * s->half) {
    run->host->error(run->call, "last axis %lld; the tables were built for %lld", (long long)d,
                     (long long)(2 * s->half));
    return KILN_OP_ERROR;
  }
  int64_t rows = 1;
  for (int k = 0; k < nd - 1; ++k) rows *= x->shape[k];
  const float *xd = (const float *)x->data;
  float *yd = (float *)y->data;
  const int64_t xs = x->strides[nd - 1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0, rem = r;
    for (int k = nd - 2; k >= 0; --k) {
      off += (rem % x->shape[k]) * x->strides[k];
      rem /= x->shape[k];
    }
    const int64_t pos = r % seq;
    const float *c = s->cos_table + pos * s->half, *sn = s->sin_table + pos * s->half;
    const float *xr = xd + off;
    float *yr = yd + r * d;
    for (int64_t i = 0; i < s->half; ++i) {
      const float a = xr[2 * i * xs], b = xr[(2 * i + 1) * xs];
      yr[2 * i] = a * c[i] - b * sn[i];
      yr[2 * i + 1] = a * sn[i] + b * c[i];
    }
  }
  return KILN_OP_OK;
}

const kiln_op_def *example_rotary_def(void) {
  static kiln_op_def def;
  def.size = sizeof def;
  def.name = "example.rotary";
  def.cache_version = 1;
  def.check_attrs = check_attrs;
  def.infer_types = infer_types;
  def.infer_shapes = infer_shapes;
  def.forward = forward;
  def.create_state = create_state;
  def.destroy_state = destroy_state;
  return &def;
}
