#pragma once
// A CUDA device as kiln's runtime sees it: memory, copies, kernel images and launches. Two
// kinds stand behind it: the GPU through the driver API (libcuda loaded with dlopen), and
// the emulator (KILN_CUDA_DEVICE=emulator), which runs the same generated kernels on the CPU
// so the whole device path is exercised on machines without a GPU. Neither needs a CUDA
// header or library at build time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// Kernels loaded from one image, launched by their index in the module's kernel table.
class KernelImage {
 public:
  virtual ~KernelImage() = default;
  // dims = {grid x, y, z, block x, y, z}; throws Error with the device's reason.
  virtual void launch(int kernel, const uint32_t dims[6], uint32_t shared, void** args) = 0;
};

class CudaDevice {
 public:
  virtual ~CudaDevice() = default;
  // "emulator" or "gpu": what goes into cache keys and what `-v` reports.
  virtual bool emulated() const = 0;
  // "NVIDIA H100 80GB HBM3 (sm_90)" or "kiln CUDA emulator on the CPU (not a GPU)".
  virtual std::string describe() const = 0;
  // The architecture kernels are compiled for: "sm_90"; the emulator's is "emulator".
  virtual std::string arch() const = 0;
  // The file name of the kernel image in a cache entry: kernels.cubin or kernels.emu.so.
  virtual std::string image_name() const = 0;

  virtual void* allocate(size_t bytes) = 0;  // throws Error naming the size on failure
  virtual void release(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Waits for every launch and copy so far; throws the first asynchronous error.
  virtual void synchronize() = 0;
  virtual std::shared_ptr<KernelImage> load(const std::filesystem::path& image,
                                            const std::vector<std::string>& names) = 0;
};

// The device this process uses, chosen once: KILN_CUDA_DEVICE=emulator, else the first GPU.
// Throws UserError saying what is missing (no libcuda, no GPU) and how to use the emulator.
CudaDevice& cuda_device();
// What cuda_device() would pick: "emulator", "gpu", or "" with `why` set when there is no
// device. A KILN_CUDA_DEVICE that names no device kind is a UserError here too.
std::string cuda_device_kind(std::string* why = nullptr);

}  // namespace kiln
