#pragma once
// A device beside the host as kiln's runtime sees it: memory, copies, streams, kernel images
// and launches. The executor, the module loader and the device memory pools use this
// interface only; a backend's runtime folder implements it (runtime/cuda/: the GPU through
// the driver API, and an emulator that runs the same kernels on the CPU).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// Completion of the work a stream held when the event was recorded.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // Blocks until that work is done; throws Error with the device's reason when it failed
  // (a kernel that faulted, a launch the device refused).
  virtual void wait() = 0;
};

// An in-order queue of device work: launches and copies return once enqueued. The host
// memory of an async copy must stay untouched until an event recorded after it completes.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual void copy_to_device_async(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host_async(void* dst, const void* src, size_t bytes) = 0;
  virtual std::shared_ptr<DeviceEvent> record() = 0;
  // Waits for everything enqueued so far; throws the first error.
  void synchronize() { record()->wait(); }
  // The handle others know this stream by (a CUstream on a GPU): Device::adopt_stream takes it.
  virtual uintptr_t native() const = 0;
  // Kernel launches this stream has taken, counted where the device counts them (the
  // emulator; 0 on a GPU): lets a test see whose stream a run used.
  virtual uint64_t launches() const { return 0; }
};

// Kernels loaded from one image, launched by their index in the module's kernel table.
class KernelImage {
 public:
  virtual ~KernelImage() = default;
  // Enqueues on `stream`; dims = {grid x, y, z, block x, y, z}. The argument values are
  // copied before it returns (args may point at the caller's locals). Throws Error with the
  // device's reason when the launch is refused.
  virtual void launch(DeviceStream& stream, int kernel, const uint32_t dims[6], uint32_t shared,
                      void** args) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // True for a device that runs its kernels on the CPU (an emulator): never mixed with a real
  // one in cache keys, and `-v` says so.
  virtual bool emulated() const = 0;
  // "NVIDIA H100 80GB HBM3 (sm_90)" or "kiln CUDA emulator on the CPU (not a GPU)".
  virtual std::string describe() const = 0;
  // The architecture kernels are compiled for: "sm_90"; the emulator's is "emulator".
  virtual std::string arch() const = 0;
  // The file name of the kernel image in a cache entry: kernels.cubin or kernels.emu.so.
  virtual std::string image_name() const = 0;

  virtual void* allocate(size_t bytes) = 0;  // throws Error naming the size on failure
  virtual void release(void* ptr) = 0;
  // Page-locked host memory, which async copies move without an extra staging copy.
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void release_pinned(void* ptr) = 0;
  // A new stream, unordered with every other stream (each engine worker has its own).
  virtual std::unique_ptr<DeviceStream> create_stream() = 0;
  // A stream the caller owns (PyTorch's current stream: its CUstream handle, 0 for the legacy
  // default stream), used without taking it over: work kiln enqueues through it is ordered
  // after the caller's. On the emulator the handle must be a live stream kiln created.
  virtual std::unique_ptr<DeviceStream> adopt_stream(uintptr_t native) = 0;
  // Synchronous copies, ordered after nothing but themselves: for data no stream is using.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual std::shared_ptr<KernelImage> load(const std::filesystem::path& image,
                                            const std::vector<std::string>& names) = 0;
};

// The device this process runs placed nodes on, chosen once (accelerator.cpp: the one place a
// backend's runtime device is named). Throws UserError saying what is missing.
Device& accelerator();
// This thread's stream on accelerator(), created on first use: each engine worker (and each
// caller running a module itself) enqueues on its own stream; the caller's stream while a
// CallerStream lives (caller_stream.h).
DeviceStream& thread_stream();

}  // namespace kiln
