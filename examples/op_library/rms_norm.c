/* example.rms_norm — a stateless op given as C fragments, stitched into the module:
 *   y = x / sqrt(mean(x^2 over the last axis) + epsilon) * scale
 * x: float32 or float64, rank >= 1, any strides; scale: the same dtype, shape (D,).
 * Attribute: epsilon (float, default 1e-6). ONNX: com.example RmsNorm. */
#include <string.h>

#include "example_ops.h"

static int check_attrs(const kiln_op_node *node) {
  const kiln_op_host *h = node->host;
  for (int32_t i = 0; i < h->attr_count(node->call); ++i) {
    const char *name = h->attr_name(node->call, i);
    if (strcmp(name, "epsilon") != 0) {
      h->error(node->call, "unknown attribute '%s' (rms_norm takes epsilon)", name);
      return KILN_OP_ERROR;
    }
  }
  double eps = 1e-6;
  if (h->attr_kind(node->call, "epsilon") != KILN_ATTR_NONE &&
      (h->attr_float(node->call, "epsilon", &eps) != 0 || !(eps >= 0))) {
    h->error(node->call, "epsilon must be a number >= 0");
    return KILN_OP_ERROR;
  }
  return KILN_OP_OK;
}

static int infer_types(const kiln_op_node *node, int32_t *n_outputs, kiln_op_type *outputs) {
  const kiln_op_host *h = node->host;
  if (node->n_inputs != 2) {
    h->error(node->call, "takes 2 inputs (x, scale), got %d", node->n_inputs);
    return KILN_OP_ERROR;
  }
  const kiln_op_type *x = &node->inputs[0], *g = &node->inputs[1];
  if (!example_c_type(x->dtype) || x->ndim < 1) {
    h->error(node->call, "x must be float32 or float64 with at least one dimension");
    return KILN_OP_ERROR;
  }
  if (g->dtype != x->dtype || g->ndim != 1) {
    h->error(node->call, "scale must be 1-D with x's dtype");
    return KILN_OP_ERROR;
  }
  const int64_t d = x->dims[x->ndim - 1];
  if (d >= 0 && g->dims[0] >= 0 && g->dims[0] != d) {
    h->error(node->call, "scale has %lld elements, x's last axis %lld", (long long)g->dims[0],
             (long long)d);
    return KILN_OP_ERROR;
  }
  *n_outputs = 1;
  outputs[0] = *x;
  return KILN_OP_OK;
}

static int infer_shapes(const kiln_op_node *node, kiln_op_type *outputs) {
  const kiln_op_type *x = &node->inputs[0], *g = &node->inputs[1];
  if (g->dims[0] != x->dims[x->ndim - 1]) {
    node->host->error(node->call, "scale has %lld elements, x's last axis %lld",
                      (long long)g->dims[0], (long long)x->dims[x->ndim - 1]);
    return KILN_OP_ERROR;
  }
  for (int32_t i = 0; i < x->ndim; ++i) outputs[0].dims[i] = x->dims[i];
  return KILN_OP_OK;
}

/* One row, shared by every node (kiln emits identical support code once per unit). */
static const char *c_support_code(void *op_data) {
  (void)op_data;
  return "#define EXAMPLE_RMS_ROW(T)                                                        \\\n"
         "  static inline void example_rms_row_##T(const T *x, int64_t xs, const T *g, int64_t gs, \\\n"
         "                                         T *y, int64_t d, double eps) {           \\\n"
         "    double ss = 0;                                                              \\\n"
         "    for (int64_t j = 0; j < d; ++j) ss += (double)x[j * xs] * (double)x[j * xs]; \\\n"
         "    const double inv = 1.0 / sqrt(ss / (double)(d > 0 ? d : 1) + eps);          \\\n"
         "    for (int64_t j = 0; j < d; ++j) y[j] = (T)((double)x[j * xs] * inv * (double)g[j * gs]); \\\n"
         "  }\n"
         "EXAMPLE_RMS_ROW(float)\n"
         "EXAMPLE_RMS_ROW(double)\n";
}

static const char *c_headers(void *op_data) {
  (void)op_data;
  return "<math.h>\n<stdint.h>";
}

static const char *c_code(const kiln_op_node *node) {
  const kiln_op_host *h = node->host;
  double eps = 1e-6;
  h->attr_float(node->call, "epsilon", &eps);
  const char *t = example_c_type(node->inputs[0].dtype);
  /* Rows of x by their strides (x may be a view); y is contiguous. */
  return h->format(node->call,
                   "{\n"
                   "  const kiln_tensor *x = %s, *g = %s;\n"
                   "  kiln_tensor *y = %s;\n"
                   "  const int nd = x->ndim;\n"
                   "  const int64_t d = x->shape[nd - 1];\n"
                   "  int64_t rows = 1;\n"
                   "  for (int k = 0; k < nd - 1; ++k) rows *= x->shape[k];\n"
                   "  for (int64_t r = 0; r < rows; ++r) {\n"
                   "    int64_t off = 0, rem = r;\n"
                   "    for (int k = nd - 2; k >= 0; --k) {\n"
                   "      off += (rem %% x->shape[k]) * x->strides[k];\n"
                   "      rem /= x->shape[k];\n"
                   "    }\n"
                   "    example_rms_row_%s((const %s *)x->data + off, x->strides[nd - 1],\n"
                   "                       (const %s *)g->data, g->strides[0], (%s *)y->data + r * d, d, %.17g);\n"
                   "  }\n"
                   "}\n",
                   node->input_names[0], node->input_names[1], node->output_names[0], t, t, t, t,
                   eps);
}

const kiln_op_def *example_rms_norm_def(void) {
  static kiln_op_def def;
  def.size = sizeof def;
  def.name = "example.rms_norm";
  def.onnx_domain = "com.example";
  def.onnx_op_type = "RmsNorm";
  def.cache_version = 1;
  def.check_attrs = check_attrs;
  def.infer_types = infer_types;
  def.infer_shapes = infer_shapes;
  def.c_code = c_code;
  def.c_support_code = c_support_code;
  def.c_headers = c_headers;
  return &def;
}
