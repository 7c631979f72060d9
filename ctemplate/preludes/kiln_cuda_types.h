/* kiln_cuda_types.h — launch parameters shared by a module's host thunks (C) and its CUDA
 * kernels: the same struct on both sides of ctx->launch. */
#ifndef KILN_CUDA_TYPES_H
#define KILN_CUDA_TYPES_H
#define KILN_CUDA_MAX_RANK 8
#define KILN_CUDA_MAX_OPERANDS 12

/* An index space (numel elements of `shape`, row-major) and, per operand, the element
 * strides that map an index to that operand's offset (0 along broadcast dimensions). */
typedef struct kiln_cuda_nd {
  int64_t numel;
  int32_t ndim;
  int32_t contiguous; /* every operand's offset is the flat index itself */
  int64_t shape[KILN_CUDA_MAX_RANK];
  int64_t strides[KILN_CUDA_MAX_OPERANDS][KILN_CUDA_MAX_RANK];
} kiln_cuda_nd;

/* A pad's index map: the output's shape, and per dimension the input's size and stride and
 * the padding before it (negative: cropped). */
typedef struct kiln_cuda_pad {
  int64_t numel;
  int32_t ndim;
  int32_t mode;
  int64_t out_shape[KILN_CUDA_MAX_RANK];
  int64_t in_shape[KILN_CUDA_MAX_RANK];
  int64_t in_strides[KILN_CUDA_MAX_RANK];
  int64_t before[KILN_CUDA_MAX_RANK];
} kiln_cuda_pad;

/* Geometry of a 2-D sliding window (1-D runs as H = 1): kiln_window's fields, in order. */
typedef struct kiln_cuda_window {
  int64_t h, w, kh, kw, sh, sw, dh, dw, ph, pw, eh, ew, oh, ow;
} kiln_cuda_window;

/* A transposed convolution's geometry (1-D and 2-D padded at the front to three spatial
 * dimensions): output elements, input and output channels, groups, and per dimension the
 * input, kernel and output sizes, stride, dilation and begin pad. */
typedef struct kiln_cuda_tconv {
  int64_t numel, c, m, group;
  int64_t in[3], ker[3], out[3], st[3], dl[3], pb[3];
} kiln_cuda_tconv;
#endif
