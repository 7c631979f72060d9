/* kiln_cuda_emu.h — what CUDA device code needs to compile as plain C++ (clang++) and run
 * on kiln's CUDA emulator: the CUDA keywords, the thread and block indices, __syncthreads,
 * warp shuffles and shared memory. Every CUDA thread of a block is a fiber of one CPU
 * thread; the emulator (runtime/cuda/emulator_device.cpp) switches fibers at barriers.
 * Included (-include) ahead of a module's kernels.cu; the emulator binds the host table
 * with kiln_emu_bind() after loading. Bump KILN_EMU_HOST_ABI when kiln_emu_host changes. */
#ifndef KILN_CUDA_EMU_H
#define KILN_CUDA_EMU_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define KILN_EMU_HOST_ABI 1

struct kiln_uint3 {
  unsigned x, y, z;
};
struct kiln_emu_thread {
  kiln_uint3 thread_idx, block_idx, block_dim, grid_dim;
};
struct kiln_emu_host {
  uint32_t abi;
  const kiln_emu_thread *(*self)(void);
  void (*syncthreads)(void);
  void (*syncwarp)(void);
  /* The 8-byte exchange slot of `lane` in the calling thread's warp. */
  void *(*lane_slot)(unsigned lane);
  /* Number of threads in the calling thread's warp (32 but for a block's last warp). */
  unsigned (*warp_width)(void);
};

/* The emulator itself includes only the table above. */
#ifndef KILN_EMU_HOST_ONLY

static const kiln_emu_host *kiln_emu_;
extern "C" __attribute__((visibility("default"))) int kiln_emu_bind(const kiln_emu_host *h) {
  kiln_emu_ = h;
  return KILN_EMU_HOST_ABI;
}
/* Touches this image's thread-local block (the __shared__ variables) on the launching
 * thread, so the C library allocates it there before any fiber runs, not inside one. */
extern "C" __attribute__((visibility("default"))) void kiln_emu_touch_shared(void) {
  static thread_local volatile char touched;
  touched = 1;
}

#define __global__
/* Kernel parameters are plain arguments here: taking their address copies nothing. */
#define __grid_constant__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
/* One copy per CPU thread: the block's fibers share it, as a block shares shared memory. */
#define __shared__ static thread_local
#define threadIdx (kiln_emu_->self()->thread_idx)
#define blockIdx (kiln_emu_->self()->block_idx)
#define blockDim (kiln_emu_->self()->block_dim)
#define gridDim (kiln_emu_->self()->grid_dim)
#define warpSize 32

static inline void __syncthreads(void) { kiln_emu_->syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  kiln_emu_->syncwarp();
}
static inline unsigned kiln_emu_lane(void) {
  const kiln_emu_thread *t = kiln_emu_->self();
  return (t->thread_idx.x + t->block_dim.x * (t->thread_idx.y + t->block_dim.y * t->thread_idx.z)) &
         31u;
}
/* Every lane publishes its value, the warp meets, each reads its source lane's, and the warp
 * meets again before a slot may be reused. A source outside the warp returns the caller's
 * own value, as on the GPU. */
template <class T>
static inline T kiln_emu_shuffle(T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  const unsigned lane = kiln_emu_lane();
  memcpy(kiln_emu_->lane_slot(lane), &v, sizeof v);
  kiln_emu_->syncwarp();
  T r = v;
  if (src < kiln_emu_->warp_width()) memcpy(&r, kiln_emu_->lane_slot(src), sizeof r);
  kiln_emu_->syncwarp();
  return r;
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  (void)width;
  return kiln_emu_shuffle(v, kiln_emu_lane() + delta);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, unsigned lane_mask, int width = 32) {
  (void)mask;
  (void)width;
  return kiln_emu_shuffle(v, kiln_emu_lane() ^ lane_mask);
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  (void)mask;
  (void)width;
  return kiln_emu_shuffle(v, (unsigned)src);
}

static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __ldg(const float *p) { return *p; }

#endif /* KILN_EMU_HOST_ONLY */
#endif
