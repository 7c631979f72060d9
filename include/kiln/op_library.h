/* kiln custom-op libraries: the C ABI between kiln and a shared library that adds ops.
 *
 * A library exports one function, kiln_op_library(), returning a kiln_op_library_info. kiln
 * checks the ABI version it reports (same major, minor <= kiln's), calls its init, which
 * registers each op with a kiln_op_def, and then offers the ops under their names: in kiln
 * JSON graphs, in ONNX models (by ONNX domain and op type) and to the C++ builder.
 *
 * An op gives its code in one or both of two forms:
 *   - C fragments (c_code and friends): text kiln stitches into the generated module exactly
 *     like a built-in op's code, compiled with it;
 *   - a precompiled compute function (forward) in the library, which the module calls
 *     through kiln's support table.
 *
 * Rules of the boundary: only C types cross it. Every hook returns a status (KILN_OP_OK or
 * KILN_OP_ERROR after host->error(...)) or text; kiln copies every string and message before
 * the hook's caller returns, so text may live in the library's static storage or be built
 * with host->format (freed by kiln after the hook returns). Nothing may throw across it:
 * kiln catches what does and reports it as the op's error, but a library must not rely on it.
 * Hooks may be called from several threads at once (different nodes, different calls).
 *
 * Versioning: structs carry their size and grow only at the end; a library built against
 * an older minor keeps working with a newer kiln. KILN_OP_HAS(ptr, field) tells whether a
 * struct handed over by the other side is new enough to hold a field. */
#ifndef KILN_OP_LIBRARY_H
#define KILN_OP_LIBRARY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_OP_ABI_MAJOR 1
#define KILN_OP_ABI_MINOR 1

#define KILN_OP_OK 0
#define KILN_OP_ERROR 1

#define KILN_OP_MAX_DIMS 16
#define KILN_OP_MAX_OUTPUTS 16
#define KILN_OP_DYNAMIC (-1) /* a dimension known only at run time */

/* Element types: the values of kiln_op_tensor.dtype and kiln_op_type.dtype. */
#define KILN_DTYPE_BOOL 0
#define KILN_DTYPE_INT8 1
#define KILN_DTYPE_UINT8 2
#define KILN_DTYPE_INT32 3
#define KILN_DTYPE_INT64 4
#define KILN_DTYPE_FLOAT16 5
#define KILN_DTYPE_BFLOAT16 6
#define KILN_DTYPE_FLOAT32 7
#define KILN_DTYPE_FLOAT64 8
#define KILN_DTYPE_INT16 9
#define KILN_DTYPE_UINT16 10
#define KILN_DTYPE_UINT32 11
#define KILN_DTYPE_UINT64 12

/* Attribute kinds (host->attr_kind). */
#define KILN_ATTR_NONE 0
#define KILN_ATTR_INT 1
#define KILN_ATTR_FLOAT 2
#define KILN_ATTR_STRING 3
#define KILN_ATTR_INTS 4
#define KILN_ATTR_FLOATS 5

/* True when the struct *p (whose first member is its size) holds `field`. */
#define KILN_OP_HAS(p, field) \
  ((p)->size >= offsetof(__typeof__(*(p)), field) + sizeof((p)->field))

#if defined(_WIN32)
#define KILN_OP_EXPORT __declspec(dllexport)
#else
#define KILN_OP_EXPORT __attribute__((visibility("default")))
#endif

/* A tensor's static type: dims[i] is KILN_OP_DYNAMIC where only the run time knows it. At
 * run time (infer_shapes) every dimension is known. */
typedef struct kiln_op_type {
  int32_t dtype;
  int32_t ndim;
  int64_t dims[KILN_OP_MAX_DIMS];
} kiln_op_type;

/* A tensor at run time. Strides count elements, not bytes; inputs may be strided views,
 * outputs arrive allocated and contiguous. The layout of kiln's own module tensors. */
typedef struct kiln_op_tensor {
  void *data;
  const int64_t *shape;
  const int64_t *strides;
  int32_t ndim;
  int32_t dtype;
} kiln_op_tensor;

/* kiln's side of one hook call: pass it back to the host functions. */
typedef struct kiln_op_call kiln_op_call;

/* What kiln offers a library. Valid during the hook it is handed to. */
typedef struct kiln_op_host {
  uint32_t size;
  uint16_t abi_major, abi_minor; /* kiln's own */
  /* Records this call's error message (printf-style); the hook then returns KILN_OP_ERROR. */
  void (*error)(kiln_op_call *call, const char *fmt, ...);
  /* Formats text that kiln owns and frees after the hook returns; NULL if out of memory. */
  const char *(*format)(kiln_op_call *call, const char *fmt, ...);
  /* The node's attributes. Getters return 0 and set *value when the attribute exists with
   * that kind (an int is accepted as a float), -1 otherwise. Arrays and strings stay valid
   * for the hook's duration. */
  int32_t (*attr_count)(kiln_op_call *call);
  const char *(*attr_name)(kiln_op_call *call, int32_t i); /* sorted by name */
  int32_t (*attr_kind)(kiln_op_call *call, const char *name);
  int (*attr_int)(kiln_op_call *call, const char *name, int64_t *value);
  int (*attr_float)(kiln_op_call *call, const char *name, double *value);
  int (*attr_string)(kiln_op_call *call, const char *name, const char **value);
  int (*attr_ints)(kiln_op_call *call, const char *name, const int64_t **values, int64_t *count);
  int (*attr_floats)(kiln_op_call *call, const char *name, const double **values,
                     int64_t *count);
  /* ---- minor 1 ---- */
  /* Scratch memory for forward/perform, 64-byte aligned, released when the call returns;
   * NULL (with the call's error set) on failure or outside a run. */
  void *(*workspace)(kiln_op_call *call, size_t bytes);
} kiln_op_host;

/* A node of the op, handed to every compile-time hook and to create_state. */
typedef struct kiln_op_node {
  uint32_t size;
  const kiln_op_host *host;
  kiln_op_call *call;
  void *op_data; /* kiln_op_def.op_data */
  int32_t n_inputs;
  const kiln_op_type *inputs;
  int32_t n_outputs; /* 0 (and outputs NULL) in check_attrs and infer_types */
  const kiln_op_type *outputs;
  /* The code hooks only (NULL elsewhere): */
  const char *const *input_names;  /* C expressions of type kiln_tensor * (kiln_op_tensor) */
  const char *const *output_names; /* allocated and contiguous when the code runs */
  const char *prefix; /* unique per node: begin every file-scope name and state field with it */
  const char *fail;   /* a macro: FAIL("fmt", ...) records a message and ends the thunk */
  const char *state;  /* the module state pointer: STATE->PREFIXfield */
} kiln_op_node;

/* One run of forward or perform. */
typedef struct kiln_op_run {
  uint32_t size;
  const kiln_op_host *host;
  kiln_op_call *call;
  void *op_data;
  void *state; /* what create_state returned for this node (NULL without create_state) */
  int32_t n_inputs;
  const kiln_op_tensor *const *inputs;
  int32_t n_outputs;
  const kiln_op_tensor *const *outputs;
} kiln_op_run;

/* One op. Required: name, infer_types, infer_shapes, and c_code or forward. */
typedef struct kiln_op_def {
  uint32_t size; /* sizeof(kiln_op_def) */
  /* Letters, digits, '_' and '.'; a library's prefix keeps names apart ("mylib.rms_norm"). */
  const char *name;
  /* Optional: ONNX nodes of this domain ("" for the default domain) and op type load as
   * this op, their attributes as its attributes. */
  const char *onnx_domain;
  const char *onnx_op_type;
  /* Bump whenever the op's code or meaning changes (>= 0); part of every cache key. */
  int32_t cache_version;
  int32_t reserved;
  void *op_data; /* handed back in every call */

  /* Validates the attributes (unknown names, bad values). Optional: without it, an op
   * takes no attributes. */
  int (*check_attrs)(const kiln_op_node *node);
  /* Sets *n_outputs (1..KILN_OP_MAX_OUTPUTS) and each output's dtype, ndim and dims from
   * the inputs' types; refuses inputs that do not fit. */
  int (*infer_types)(const kiln_op_node *node, int32_t *n_outputs, kiln_op_type *outputs);
  /* At run time: every dimension of node->inputs is known; sets outputs[i].dims (ndim and
   * dtype arrive filled in from infer_types). */
  int (*infer_shapes)(const kiln_op_node *node, kiln_op_type *outputs);

  /* -- form 1: C fragments, stitched into the module (C11; kiln_tensor is kiln_op_tensor) */
  const char *(*c_code)(const kiln_op_node *node);
  /* File-scope helpers shared by every node of the op (identical text is emitted once). */
  const char *(*c_support_code)(void *op_data);
  /* File-scope helpers of one node (names begin with node->prefix). */
  const char *(*c_support_code_apply)(const kiln_op_node *node);
  /* Headers, one per line: "<math.h>\n<string.h>". */
  const char *(*c_headers)(void *op_data);
  /* Per-module state: struct members ("double PREFIXscale;"), and code run when the module
   * loads (may use FAIL) and unloads. */
  const char *(*c_state_fields)(const kiln_op_node *node);
  const char *(*c_init_code)(const kiln_op_node *node);
  const char *(*c_cleanup_code)(const kiln_op_node *node);

  /* -- form 2: a precompiled compute function, called by the module through kiln */
  int (*forward)(const kiln_op_run *run);
  /* Optional: set up once per node when a module loads (tables, plans), freed at unload.
   * Returns NULL with host->error(...) on failure. forward may run from several threads at
   * once: treat the state as read-only or synchronise. */
  void *(*create_state)(const kiln_op_node *node);
  void (*destroy_state)(void *op_data, void *state);

  /* Optional reference implementation for tests and constant folding (same contract as
   * forward; run->state is NULL). Without it, kiln uses forward. */
  int (*perform)(const kiln_op_run *run);

  /* ---- minor 1 ---- */
  /* Optional CUDA code: one __global__ kernel named PREFIXkernel with its device helpers,
   * the C types of its parameters (comma-separated), and the host fragment that computes
   * grid and block from the run-time shapes and starts it with KILN_LAUNCH. */
  const char *(*cuda_kernel)(const kiln_op_node *node);
  const char *(*cuda_kernel_params)(const kiln_op_node *node);
  const char *(*cuda_launch)(const kiln_op_node *node);
  /* Optional: the name of the op computing this op's vector-Jacobian products. It takes
   * (inputs..., outputs..., output gradients...) and gives one gradient per input, with
   * this node's attributes. */
  const char *grad_op;
} kiln_op_def;

/* Handed to the library's init. */
typedef struct kiln_op_registry {
  uint32_t size;
  const kiln_op_host *host;
  kiln_op_call *call;
  /* Registers one op (kiln copies the def); KILN_OP_ERROR with a message if refused. */
  int (*register_op)(kiln_op_call *call, const kiln_op_def *def);
} kiln_op_registry;

typedef struct kiln_op_library_info {
  uint32_t size; /* sizeof(kiln_op_library_info) */
  uint16_t abi_major, abi_minor; /* KILN_OP_ABI_MAJOR / _MINOR as the library was built */
  const char *name;              /* the library's name: in errors, keys and `kiln ops` */
  const char *version;           /* free text for people; optional */
  /* Registers the library's ops; called once, after the version check. */
  int (*init)(const kiln_op_registry *registry);
} kiln_op_library_info;

/* The entry point every library exports. */
#define KILN_OP_LIBRARY_ENTRY "kiln_op_library"
typedef const kiln_op_library_info *(*kiln_op_library_fn)(void);
KILN_OP_EXPORT const kiln_op_library_info *kiln_op_library(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_OP_LIBRARY_H */
