/* example.matmul — a precompiled compute function: the library's own GEMM, which the
 * module calls through kiln's support table.
 *   C = alpha * A B,  A: (M, K), B: (K, N), float32 or float64, any strides.
 * Attribute: alpha (float, default 1). */
#include <string.h>

#include "example_ops.h"

static int check_attrs(const kiln_op_node *node) {
  const kiln_op_host *h = node->host;
  for (int32_t i = 0; i < h->attr_count(node->call); ++i) {
    if (strcmp(h->attr_name(node->call, i), "alpha") != 0) {
      h->error(node->call, "unknown attribute '%s' (matmul takes alpha)",
               h->attr_name(node->call, i));
      return KILN_OP_ERROR;
    }
  }
  double alpha;
  if (h->attr_kind(node->call, "alpha") != KILN_ATTR_NONE &&
      h->attr_float(node->call, "alpha", &alpha) != 0) {
    h->error(node->call, "alpha must be a number");
    return KILN_OP_ERROR;
  }
  return KILN_OP_OK;
}

static int infer_types(const kiln_op_node *node, int32_t *n_outputs, kiln_op_type *outputs) {
  const kiln_op_host *h = node->host;
  if (node->n_inputs != 2) {
    h->error(node->call, "takes 2 inputs (A, B), got %d", node->n_inputs);
    return KILN_OP_ERROR;
  }
  const kiln_op_type *a = &node->inputs[0], *b = &node->inputs[1];
  if (!example_c_type(a->dtype) || a->dtype != b->dtype || a->ndim != 2 || b->ndim != 2) {
    h->error(node->call, "A and B must be 2-D, both float32 or both float64");
    return KILN_OP_ERROR;
  }
  if (a->dims[1] >= 0 && b->dims[0] >= 0 && a->dims[1] != b->dims[0]) {
    h->error(node->call, "A has %lld columns, B %lld rows", (long long)a->dims[1],
             (long long)b->dims[0]);
    return KILN_OP_ERROR;
  }
  *n_outputs = 1;
  outputs[0].dtype = a->dtype;
  outputs[0].ndim = 2;
  outputs[0].dims[0] = a->dims[0];
  outputs[0].dims[1] = b->dims[1];
  return KILN_OP_OK;
}

static int infer_shapes(const kiln_op_node *node, kiln_op_type *outputs) {
  const kiln_op_type *a = &node->inputs[0], *b = &node->inputs[1];
  if (a->dims[1] != b->dims[0]) {
    node->host->error(node->call, "A has %lld columns, B %lld rows", (long long)a->dims[1],
                      (long long)b->dims[0]);
    return KILN_OP_ERROR;
  }
  outputs[0].dims[0] = a->dims[0];
  outputs[0].dims[1] = b->dims[1];
  return KILN_OP_OK;
}

/* Row i of C accumulates alpha * A[i][p] * B[p][:] over p, a block of KB rows of B at a
 * time so the block stays in cache while every row of A passes over it. */
#define KB 64
#define EXAMPLE_GEMM(T)                                                                    \
  static void gemm_##T(int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa,  \
                       int64_t csa, const T *b, int64_t rsb, int64_t csb, T *c) {          \
    for (int64_t i = 0; i < m * n; ++i) c[i] = 0;                                          \
    for (int64_t p0 = 0; p0 < k; p0 += KB) {                                               \
      const int64_t p1 = p0 + KB < k ? p0 + KB : k;                                        \
      for (int64_t i = 0; i < m; ++i) {                                                    \
        T *ci = c + i * n;                                                                 \
        for (int64_t p = p0; p < p1; ++p) {                                                \
          const T aip = alpha * a[i * rsa + p * csa];                                      \
          const T *bp = b + p * rsb;                                                       \
          if (csb == 1) {                                                                  \
            for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];                          \
          } else {                                                                         \
            for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j * csb];                    \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }
EXAMPLE_GEMM(float)
EXAMPLE_GEMM(double)

static int forward(const kiln_op_run *run) {
  const kiln_op_host *h = run->host;
  const kiln_op_tensor *a = run->inputs[0], *b = run->inputs[1], *c = run->outputs[0];
  double alpha = 1;
  h->attr_float(run->call, "alpha", &alpha);
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  if (a->dtype == KILN_DTYPE_FLOAT32) {
    gemm_float(m, n, k, (float)alpha, (const float *)a->data, a->strides[0], a->strides[1],
               (const float *)b->data, b->strides[0], b->strides[1], (float *)c->data);
  } else {
    gemm_double(m, n, k, alpha, (const double *)a->data, a->strides[0], a->strides[1],
                (const double *)b->data, b->strides[0], b->strides[1], (double *)c->data);
  }
  return KILN_OP_OK;
}

const kiln_op_def *example_matmul_def(void) {
  static kiln_op_def def;
  def.size = sizeof def;
  def.name = "example.matmul";
  def.cache_version = 1;
  def.check_attrs = check_attrs;
  def.infer_types = infer_types;
  def.infer_shapes = infer_shapes;
  def.forward = forward;
  return &def;
}
