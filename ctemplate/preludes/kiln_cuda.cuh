/* kiln_cuda.cuh — the start of every kernels.cu: what NVRTC lacks (it has no C library
 * headers), kiln_cuda_types.h and kiln_cuda_index.cuh follow it. Under the
 * emulator (KILN_CUDA_EMULATOR) the C library and kiln_cuda_emu.h provide the rest. */
#ifndef KILN_CUDA_CUH
#define KILN_CUDA_CUH
#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define __builtin_memcpy memcpy
#define __builtin_fmaf fmaf
#define __builtin_fma fma
#endif
#define KILN_HELPER static __device__ __forceinline__
/* Kept out of line: code a kernel calls at many unrolled sites (a GEMM's epilogue, 16 times
 * per thread), which inlined would multiply NVRTC's and ptxas's work. */
#ifdef __CUDACC_RTC__
#define KILN_NOINLINE static __device__ __noinline__
#else
#define KILN_NOINLINE static __attribute__((noinline))
#endif
#endif
