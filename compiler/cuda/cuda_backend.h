#pragma once
// The CUDA backend: its ops' code (ops/cuda/), kernels.cu and the toolchain that builds it
// (NVRTC for a GPU, clang++ for the emulator), and the device its modules run on.
#include "compiler/backend.h"

namespace kiln {

const Backend& cuda_backend();

}  // namespace kiln
