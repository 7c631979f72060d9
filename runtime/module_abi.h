/* kiln module ABI — included by the loader and pasted into every generated module.
 * Plain C11 with only <stdint.h>/<stddef.h>: modules must compile fast. Bump
 * KILN_ABI_VERSION whenever a struct here changes. */
#ifndef KILN_MODULE_ABI_H
#define KILN_MODULE_ABI_H
#include <stddef.h>
#include <stdint.h>

#define KILN_ABI_VERSION 2

/* Strides count elements, not bytes. Outputs handed to a thunk are always contiguous. */
typedef struct kiln_tensor {
  void *data;
  const int64_t *shape;
  const int64_t *strides;
  int32_t ndim;
  int32_t dtype;
} kiln_tensor;

/* Host services a thunk may call; the executor owns the implementation. */
typedef struct kiln_ctx kiln_ctx;
struct kiln_ctx {
  /* Records a printf-style message; the thunk then returns non-zero. */
  void (*fail)(kiln_ctx *ctx, const char *fmt, ...);
  /* Scratch memory, 64-byte aligned, released after the thunk returns. NULL on failure. */
  void *(*workspace)(kiln_ctx *ctx, size_t bytes);
  void *impl;
  /* A thunk flagged KILN_THUNK_SPLIT may be called n_parts times (possibly at once, from
   * different threads) with part = 0..n_parts-1; each call computes its share of the
   * outputs. Every other thunk is called once with part = 0, n_parts = 1. */
  int32_t part;
  int32_t n_parts;
};

typedef int (*kiln_thunk_fn)(void *state, kiln_ctx *ctx, kiln_tensor *const *in,
                             kiln_tensor *const *out);

/* kiln_thunk_info.flags */
#define KILN_THUNK_SPLIT 1 /* the work divides into disjoint parts (see kiln_ctx.part) */

typedef struct kiln_thunk_info {
  kiln_thunk_fn fn;
  const char *name;  /* "node 3: add" — for errors and tracing */
  int32_t node;      /* node index in the graph */
  int32_t n_in;
  int32_t n_out;
  int32_t flags;     /* KILN_THUNK_* */
} kiln_thunk_info;

typedef struct kiln_module_info {
  uint32_t abi_version;
  const char *key;
  int32_t n_thunks;
  const kiln_thunk_info *thunks;
  size_t state_size;
  /* Run once after load / before unload; init returns non-zero and calls ctx->fail on error. */
  int (*state_init)(void *state, kiln_ctx *ctx);
  void (*state_cleanup)(void *state);
} kiln_module_info;

typedef const kiln_module_info *(*kiln_module_fn)(void);

#endif
