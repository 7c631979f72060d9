#pragma once
// The CUDA device: the GPU through the driver API (libcuda loaded with dlopen), or the
// emulator (KILN_CUDA_DEVICE=emulator), which runs the same generated kernels on the CPU so
// the whole device path is exercised on machines without a GPU. Neither needs a CUDA header
// or library at build time.
#include <string>

#include "runtime/device/device.h"

namespace kiln {

// The CUDA device this process uses, chosen once: KILN_CUDA_DEVICE=emulator, else the first
// GPU. Throws UserError saying what is missing (no libcuda, no GPU) and how to use the
// emulator.
Device& cuda_device();
// What cuda_device() would pick: "emulator", "gpu", or "" with `why` set when there is no
// device. A KILN_CUDA_DEVICE that names no device kind is a UserError here too.
std::string cuda_device_kind(std::string* why = nullptr);

}  // namespace kiln
