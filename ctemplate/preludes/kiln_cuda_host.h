/* kiln_cuda_host.h — host-side helpers of CUDA thunks (C): filling launch parameters and
 * launching through ctx->launch. */
#ifndef KILN_CUDA_HOST_H
#define KILN_CUDA_HOST_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif

/* Enqueues `kernel` (an index of the module's kernel table) with the addresses of its
 * arguments; a refused launch fails the thunk with the device's reason. */
#define KILN_LAUNCH(kernel, gx, gy, gz, bx, by, bz, shmem, ...)                               \
  do {                                                                                        \
    void *kiln_args_[] = {__VA_ARGS__};                                                       \
    const uint32_t kiln_dims_[6] = {(uint32_t)(gx), (uint32_t)(gy), (uint32_t)(gz),          \
                                    (uint32_t)(bx), (uint32_t)(by), (uint32_t)(bz)};         \
    if (ctx->launch(ctx, (kernel), kiln_dims_, (uint32_t)(shmem), kiln_args_) != 0) {        \
      kiln_status = 1;                                                                        \
      goto kiln_cleanup;                                                                      \
    }                                                                                         \
  } while (0)

/* Blocks for n items at `per_block` each, at most `cap` (kernels loop over the rest). */
KILN_HELPER uint32_t kiln_cuda_blocks(int64_t n, int64_t per_block, uint32_t cap) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return b > (int64_t)cap ? cap : (uint32_t)b;
}

/* The index space of `out` with each operand's strides broadcast against it (an operand
 * lacking leading dimensions or of size 1 along one gets stride 0). Returns non-zero when
 * the rank or operand count is above the kernels' limits. */
KILN_HELPER int kiln_cuda_nd_init(kiln_cuda_nd *nd, const kiln_tensor *out,
                                  const kiln_tensor *const *ops, int nops) {
  if (out->ndim > KILN_CUDA_MAX_RANK || nops > KILN_CUDA_MAX_OPERANDS) return 1;
  nd->ndim = out->ndim;
  nd->numel = 1;
  nd->contiguous = 1;
  for (int d = 0; d < out->ndim; ++d) {
    nd->shape[d] = out->shape[d];
    nd->numel *= out->shape[d];
  }
  for (int k = 0; k < nops; ++k) {
    const kiln_tensor *t = ops[k];
    const int lead = out->ndim - t->ndim;
    int64_t expect = 1;
    for (int d = out->ndim - 1; d >= 0; --d) {
      const int td = d - lead;
      int64_t s = 0;
      if (td >= 0 && t->shape[td] != 1) s = t->strides[td];
      if (td < 0 || t->shape[td] != out->shape[d] || (out->shape[d] != 1 && s != expect)) {
        nd->contiguous = 0;
      }
      nd->strides[k][d] = s;
      expect *= out->shape[d];
    }
  }
  return 0;
}

/* The index space of a copy of `shape`: operand 0 is the source, operand 1 the
 * destination, each with its own element strides. */
KILN_HELPER void kiln_cuda_copy_init(kiln_cuda_nd *nd, int ndim, const int64_t *shape,
                                     const int64_t *src_strides, const int64_t *dst_strides) {
  int64_t expect = 1;
  nd->ndim = ndim;
  nd->numel = 1;
  nd->contiguous = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    nd->shape[d] = shape[d];
    nd->strides[0][d] = src_strides[d];
    nd->strides[1][d] = dst_strides[d];
    if (shape[d] != 1 && (src_strides[d] != expect || dst_strides[d] != expect)) nd->contiguous = 0;
    expect *= shape[d];
    nd->numel *= shape[d];
  }
}
#endif
