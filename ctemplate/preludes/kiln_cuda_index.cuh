/* kiln_cuda_index.cuh — helpers of the elementwise, reduction and softmax kernels: the
 * broadcast offset of an operand, and a block-wide reduction. */
#ifndef KILN_CUDA_INDEX_CUH
#define KILN_CUDA_INDEX_CUH
/* The offset of operand `op` for flat index i of `nd`'s index space. */
KILN_HELPER int64_t kiln_cuda_offset(const kiln_cuda_nd *nd, int op, int64_t i) {
  if (nd->contiguous) return i;
  int64_t off = 0;
  for (int d = nd->ndim - 1; d >= 0; --d) {
    const int64_t n = nd->shape[d];
    off += (i % n) * nd->strides[op][d];
    i /= n;
  }
  return off;
}

/* f over every thread's v (blockDim.x a multiple of 32, at most 1024); every thread gets
 * the result. `scratch` holds 33 values of shared memory. Warp shuffles first, then one
 * value per warp through shared memory. */
template <class T, class F>
KILN_HELPER T kiln_block_reduce(T v, T ident, F f, T *scratch) {
  for (int s = 16; s > 0; s >>= 1) v = f(v, __shfl_down_sync(0xffffffffu, v, s));
  const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? scratch[lane] : ident;
    for (int s = 16; s > 0; s >>= 1) v = f(v, __shfl_down_sync(0xffffffffu, v, s));
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  v = scratch[32];
  __syncthreads(); /* the caller may reuse scratch at once */
  return v;
}
#endif
