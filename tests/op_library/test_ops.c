/* Op libraries for the tests: a healthy pair of ops (LIB.twice as C fragments, LIB.add_one
 * as a compute function) built many times, with one FAULT_* defined to break one thing, or
 * against the frozen ABI 1.0 header (tests/op_library/abi_1_0) to check an older minor still
 * loads. LIB is the library's name; VERSION its version text (two builds that differ only in
 * it are "the same library rebuilt"). */
#include <string.h>

#include <kiln/op_library.h>

#define STR(x) #x
#define XSTR(x) STR(x)
#define LIB_NAME XSTR(LIB)
#ifndef VERSION
#define VERSION "1"
#endif

static int one_vector(const kiln_op_node *node, int32_t *n_outputs, kiln_op_type *outputs) {
#if defined(FAULT_BAD_STATUS)
  (void)node, (void)n_outputs, (void)outputs;
  return 7;
#elif defined(FAULT_GARBAGE_TYPES)
  (void)node;
  *n_outputs = 1;
  outputs[0].dtype = 42;
  outputs[0].ndim = 1;
  return KILN_OP_OK;
#else
  if (node->n_inputs != 1 || node->inputs[0].dtype != KILN_DTYPE_FLOAT32 ||
      node->inputs[0].ndim != 1) {
    node->host->error(node->call, "takes one 1-D float32 input");
    return KILN_OP_ERROR;
  }
  *n_outputs = 1;
  outputs[0] = node->inputs[0];
  return KILN_OP_OK;
#endif
}

static int same_shape(const kiln_op_node *node, kiln_op_type *outputs) {
  outputs[0].dims[0] = node->inputs[0].dims[0];
  return KILN_OP_OK;
}

static const char *twice_code(const kiln_op_node *node) {
#if defined(FAULT_NULL_CODE)
  (void)node;
  return 0;
#elif defined(FAULT_BAD_C)
  (void)node;
  return "int ok = 1;\nthis is not C at all;\n";
#else
  return node->host->format(node->call,
                            "{\n"
                            "  const kiln_tensor *x = %s;\n"
                            "  float *y = (float *)%s->data;\n"
                            "  for (int64_t i = 0; i < x->shape[0]; ++i)\n"
                            "    y[i] = 2.0f * ((const float *)x->data)[i * x->strides[0]];\n"
                            "}\n",
                            node->input_names[0], node->output_names[0]);
#endif
}

#if KILN_OP_ABI_MINOR >= 1
/* CUDA code for LIB.twice (a minor-1 hook): one thread per element. */
static const char *twice_cuda_kernel(const kiln_op_node *node) {
  return node->host->format(node->call,
                            "__global__ void %skernel(const float *x, int64_t xs, float *y, "
                            "int64_t n) {\n"
                            "  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                            "  if (i < n) y[i] = 2.0f * x[i * xs];\n"
                            "}\n",
                            node->prefix);
}
static const char *twice_cuda_params(const kiln_op_node *node) {
  (void)node;
  return "const float *, int64_t, float *, int64_t";
}
static const char *twice_cuda_launch(const kiln_op_node *node) {
  return node->host->format(node->call,
                            "{\n"
                            "  const float *kx = (const float *)%s->data;\n"
                            "  int64_t ks = %s->strides[0];\n"
                            "  float *ky = (float *)%s->data;\n"
                            "  int64_t kn = %s->shape[0];\n"
                            "  if (kn > 0) KILN_LAUNCH(%skernel, (kn + 127) / 128, 1, 1, 128, 1, 1, 0, "
                            "&kx, &ks, &ky, &kn);\n"
                            "}\n",
                            node->input_names[0], node->input_names[0], node->output_names[0],
                            node->output_names[0], node->prefix);
}
#endif

static int add_one(const kiln_op_run *run) {
  const kiln_op_tensor *x = run->inputs[0], *y = run->outputs[0];
#if defined(FAULT_RUN_ERROR)
  run->host->error(run->call, "refusing %lld elements", (long long)x->shape[0]);
  return KILN_OP_ERROR;
#endif
  const int64_t n = x->shape[0];
  float *tmp = 0;
#if KILN_OP_ABI_MINOR >= 1
  /* Stage x in the run's workspace (a minor-1 host service) when this kiln has it. */
  if (KILN_OP_HAS(run->host, workspace) && run->host->workspace && n > 0) {
    tmp = (float *)run->host->workspace(run->call, (size_t)n * sizeof(float));
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float v = ((const float *)x->data)[i * x->strides[0]];
    if (tmp) tmp[i] = v;
    ((float *)y->data)[i] = (tmp ? tmp[i] : v) + 1.0f;
  }
  return KILN_OP_OK;
}

#ifdef FAULT_STATE_ERROR
static void *no_state(const kiln_op_node *node) {
  node->host->error(node->call, "cannot set up: no device here");
  return 0;
}
#endif

static int init(const kiln_op_registry *r) {
#ifdef FAULT_INIT_ERROR
  r->host->error(r->call, "license check failed");
  return KILN_OP_ERROR;
#endif
  kiln_op_def twice;
  memset(&twice, 0, sizeof twice);
  twice.size = sizeof twice;
#if defined(FAULT_DUP_BUILTIN)
  twice.name = "relu";
#elif defined(FAULT_DUP_EXAMPLE)
  twice.name = "example.rms_norm";
#else
  twice.name = LIB_NAME ".twice";
#endif
  twice.cache_version = 3;
  twice.infer_types = one_vector;
#ifndef FAULT_MISSING_SHAPES
  twice.infer_shapes = same_shape;
#endif
  twice.c_code = twice_code;
#if KILN_OP_ABI_MINOR >= 1
  twice.cuda_kernel = twice_cuda_kernel;
  twice.cuda_kernel_params = twice_cuda_params;
  twice.cuda_launch = twice_cuda_launch;
  twice.grad_op = LIB_NAME ".twice";  /* d(2x) = 2 dy: twice again */
#endif
  if (r->register_op(r->call, &twice) != KILN_OP_OK) return KILN_OP_ERROR;

  kiln_op_def add;
  memset(&add, 0, sizeof add);
  add.size = sizeof add;
  add.name = LIB_NAME ".add_one";
  add.onnx_domain = "com.kiln.test." LIB_NAME;
  add.onnx_op_type = "AddOne";
  add.cache_version = 1;
  add.infer_types = one_vector;
  add.infer_shapes = same_shape;
  add.forward = add_one;
#ifdef FAULT_STATE_ERROR
  add.create_state = no_state;
#endif
  return r->register_op(r->call, &add);
}

KILN_OP_EXPORT const kiln_op_library_info *kiln_op_library(void) {
#if defined(FAULT_MAJOR2)
  static const kiln_op_library_info info = {sizeof info, 2, 0, LIB_NAME, VERSION, init};
#elif defined(FAULT_MINOR_NEWER)
  static const kiln_op_library_info info = {sizeof info, KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR + 1,
                                            LIB_NAME, VERSION, init};
#else
  static const kiln_op_library_info info = {sizeof info, KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR,
                                            LIB_NAME, VERSION, init};
#endif
  return &info;
}
