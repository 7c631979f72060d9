#include "runtime/cuda/driver_device.h"

#include <dlfcn.h>

#include <mutex>

#include "util/error.h"

namespace kiln {
namespace {

// The few driver API types and entry points kiln uses (cuda.h is not needed to build).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
constexpr unsigned kStreamNonBlocking = 1;             // CU_STREAM_NON_BLOCKING
constexpr unsigned kEventDisableTiming = 2;            // CU_EVENT_DISABLE_TIMING
constexpr CUresult kOutOfMemory = 2;                   // CUDA_ERROR_OUT_OF_MEMORY
constexpr int kComputeMajor = 75, kComputeMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*

struct Driver {
  void* handle = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuMemGetInfo)(size_t*, size_t*) = nullptr;  // optional: only for messages

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (cuGetErrorString) cuGetErrorString(r, &s);
    return s ? s : "CUDA error " + std::to_string(r);
  }
};

template <class F>
bool bind(Driver& d, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(d.handle, name));
  return fn != nullptr;
}

void check(const Driver& d, CUresult r, const std::string& what) {
  if (r != 0) throw Error("CUDA: " + what + ": " + d.error(r));
}

class DriverEvent : public DeviceEvent {
 public:
  DriverEvent(const Driver& d, CUcontext ctx, CUevent event) : d_(d), ctx_(ctx), event_(event) {}
  ~DriverEvent() override {
    d_.cuCtxSetCurrent(ctx_);
    d_.cuEventDestroy(event_);
  }
  void wait() override {
    d_.cuCtxSetCurrent(ctx_);
    check(d_, d_.cuEventSynchronize(event_), "waiting for device work");
  }

 private:
  const Driver& d_;
  CUcontext ctx_;
  CUevent event_;
};

class DriverStream : public DeviceStream {
 public:
  DriverStream(const Driver& d, CUcontext ctx) : d_(d), ctx_(ctx), owned_(true) {
    d_.cuCtxSetCurrent(ctx_);
    // Non-blocking: no implicit ordering with the legacy default stream or other streams;
    // the engine orders what depends on what.
    check(d_, d_.cuStreamCreate(&stream_, kStreamNonBlocking), "creating a stream");
  }
  // The caller's stream (PyTorch's current one): used, never destroyed.
  DriverStream(const Driver& d, CUcontext ctx, CUstream adopted)
      : d_(d), ctx_(ctx), stream_(adopted), owned_(false) {}
  ~DriverStream() override {
    if (!owned_) return;
    d_.cuCtxSetCurrent(ctx_);
    d_.cuStreamDestroy(stream_);
  }
  uintptr_t native() const override { return reinterpret_cast<uintptr_t>(stream_); }
  CUstream handle() const { return stream_; }
  void copy_to_device_async(void* dst, const void* src, size_t bytes) override {
    d_.cuCtxSetCurrent(ctx_);
    check(d_, d_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes, stream_),
          "copy to device");
  }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    d_.cuCtxSetCurrent(ctx_);
    check(d_, d_.cuMemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), bytes, stream_),
          "copy to host");
  }
  std::shared_ptr<DeviceEvent> record() override {
    d_.cuCtxSetCurrent(ctx_);
    CUevent e = nullptr;
    check(d_, d_.cuEventCreate(&e, kEventDisableTiming), "creating an event");
    auto event = std::make_shared<DriverEvent>(d_, ctx_, e);
    check(d_, d_.cuEventRecord(e, stream_), "recording an event");
    return event;
  }

 private:
  const Driver& d_;
  CUcontext ctx_;
  CUstream stream_ = nullptr;
  bool owned_;
};

class DriverImage : public KernelImage {
 public:
  DriverImage(const Driver& d, CUcontext ctx, CUmodule module, std::vector<CUfunction> fns,
              std::vector<std::string> names)
      : d_(d), ctx_(ctx), module_(module), fns_(std::move(fns)), names_(std::move(names)) {}
  ~DriverImage() override {
    d_.cuCtxSetCurrent(ctx_);
    d_.cuModuleUnload(module_);
  }
  void launch(DeviceStream& stream, int kernel, const uint32_t dims[6], uint32_t shared,
              void** args) override;

 private:
  const Driver& d_;
  CUcontext ctx_;
  CUmodule module_;
  std::vector<CUfunction> fns_;
  std::vector<std::string> names_;
};

// cuLaunchKernel copies the argument values, so args may point at the thunk's locals.
void DriverImage::launch(DeviceStream& stream, int kernel, const uint32_t dims[6], uint32_t shared,
                         void** args) {
  d_.cuCtxSetCurrent(ctx_);  // per thread: engine workers call this too
  const auto k = static_cast<size_t>(kernel);
  const CUresult r =
      d_.cuLaunchKernel(fns_.at(k), dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], shared,
                        static_cast<DriverStream&>(stream).handle(), args, nullptr);
  if (r != 0) throw Error("launching kernel '" + names_.at(k) + "': " + d_.error(r));
}

// Synchronous copies use the legacy default stream; kiln's own work runs on per-thread
// non-blocking streams, and the engine orders the two.
class DriverDevice : public Device {
 public:
  DriverDevice(Driver d, CUcontext ctx, std::string name, std::string arch)
      : d_(std::move(d)), ctx_(ctx), name_(std::move(name)), arch_(std::move(arch)) {}
  bool emulated() const override { return false; }
  std::string describe() const override { return name_ + " (" + arch_ + ")"; }
  std::string arch() const override { return arch_; }
  std::string image_name() const override { return "kernels.cubin"; }
  void* allocate(size_t bytes) override {
    bind_thread();
    CUdeviceptr p = 0;
    const CUresult r = d_.cuMemAlloc(&p, std::max<size_t>(bytes, 1));
    if (r == kOutOfMemory) {
      size_t free = 0, total = 0;
      std::string state;
      if (d_.cuMemGetInfo && d_.cuMemGetInfo(&free, &total) == 0) {
        state = " (" + std::to_string(free) + " of " + std::to_string(total) + " bytes free)";
      }
      throw Error("CUDA: out of memory allocating " + std::to_string(bytes) +
                  " bytes of device memory" + state);
    }
    if (r != 0) {
      throw Error("CUDA: allocating " + std::to_string(bytes) +
                  " bytes of device memory: " + d_.error(r));
    }
    return reinterpret_cast<void*>(p);
  }
  void release(void* ptr) override {
    bind_thread();
    d_.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr));
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    bind_thread();
    check(d_.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "copy to device");
    // From pageable memory the call may return before the DMA lands, and kiln's streams
    // do not wait for the legacy stream: finish it here.
    check(d_.cuCtxSynchronize(), "copy to device");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    bind_thread();
    check(d_.cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "copy to host");
  }
  void* allocate_pinned(size_t bytes) override {
    bind_thread();
    void* p = nullptr;
    check(d_.cuMemHostAlloc(&p, std::max<size_t>(bytes, 1), 0),
          "allocating " + std::to_string(bytes) + " bytes of pinned host memory");
    return p;
  }
  void release_pinned(void* ptr) override {
    bind_thread();
    d_.cuMemFreeHost(ptr);
  }
  std::unique_ptr<DeviceStream> create_stream() override {
    return std::make_unique<DriverStream>(d_, ctx_);
  }
  // The primary context is the one PyTorch's runtime API uses, so its streams are valid here.
  std::unique_ptr<DeviceStream> adopt_stream(uintptr_t native) override {
    return std::make_unique<DriverStream>(d_, ctx_, reinterpret_cast<CUstream>(native));
  }
  std::shared_ptr<KernelImage> load(const std::filesystem::path& image,
                                    const std::vector<std::string>& names) override {
    bind_thread();
    std::string bytes = read_image(image);
    CUmodule module = nullptr;
    check(d_.cuModuleLoadData(&module, bytes.data()), "loading " + image.string());
    std::vector<CUfunction> fns;
    for (const auto& n : names) {
      CUfunction f = nullptr;
      const CUresult r = d_.cuModuleGetFunction(&f, module, n.c_str());
      if (r != 0) {
        d_.cuModuleUnload(module);
        throw Error("CUDA: kernel '" + n + "' in " + image.string() + ": " + d_.error(r));
      }
      fns.push_back(f);
    }
    return std::make_shared<DriverImage>(d_, ctx_, module, std::move(fns), names);
  }

 private:
  void bind_thread() { d_.cuCtxSetCurrent(ctx_); }
  void check(CUresult r, const std::string& what) { kiln::check(d_, r, what); }
  static std::string read_image(const std::filesystem::path& p) {
    FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) throw Error("CUDA: cannot open kernel image " + p.string());
    std::string s;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
    return s;
  }
  Driver d_;
  CUcontext ctx_;
  std::string name_, arch_;
};

}  // namespace

std::unique_ptr<Device> make_driver_device(std::string* why) {
  Driver d;
  d.handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.handle) {
    *why = "no CUDA driver (libcuda.so.1 not found: no NVIDIA driver is installed)";
    return nullptr;
  }
  bool ok =
      bind(d, d.cuInit, "cuInit") && bind(d, d.cuDeviceGetCount, "cuDeviceGetCount") &&
      bind(d, d.cuDeviceGet, "cuDeviceGet") && bind(d, d.cuDeviceGetName, "cuDeviceGetName") &&
      bind(d, d.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
      bind(d, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
      bind(d, d.cuCtxSetCurrent, "cuCtxSetCurrent") &&
      bind(d, d.cuCtxSynchronize, "cuCtxSynchronize") && bind(d, d.cuMemAlloc, "cuMemAlloc_v2") &&
      bind(d, d.cuMemFree, "cuMemFree_v2") && bind(d, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
      bind(d, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
      bind(d, d.cuModuleLoadData, "cuModuleLoadData") &&
      bind(d, d.cuModuleUnload, "cuModuleUnload") &&
      bind(d, d.cuModuleGetFunction, "cuModuleGetFunction") &&
      bind(d, d.cuLaunchKernel, "cuLaunchKernel") &&
      bind(d, d.cuGetErrorString, "cuGetErrorString") &&
      bind(d, d.cuMemHostAlloc, "cuMemHostAlloc") && bind(d, d.cuMemFreeHost, "cuMemFreeHost") &&
      bind(d, d.cuStreamCreate, "cuStreamCreate") &&
      bind(d, d.cuStreamDestroy, "cuStreamDestroy_v2") &&
      bind(d, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") &&
      bind(d, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2") &&
      bind(d, d.cuEventCreate, "cuEventCreate") && bind(d, d.cuEventRecord, "cuEventRecord") &&
      bind(d, d.cuEventSynchronize, "cuEventSynchronize") &&
      bind(d, d.cuEventDestroy, "cuEventDestroy_v2");
  bind(d, d.cuMemGetInfo, "cuMemGetInfo_v2");
  if (!ok) {
    *why = "libcuda.so.1 lacks a driver API function kiln needs (driver too old)";
    return nullptr;
  }
  int count = 0;
  if (CUresult r = d.cuInit(0); r != 0) {
    *why = "the CUDA driver does not start: " + d.error(r);
    return nullptr;
  }
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) {
    *why = "the CUDA driver sees no GPU";
    return nullptr;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int major = 0, minor = 0;
  char name[256] = {};
  if (d.cuDeviceGet(&dev, 0) != 0 || d.cuDevicePrimaryCtxRetain(&ctx, dev) != 0 ||
      d.cuDeviceGetAttribute(&major, kComputeMajor, dev) != 0 ||
      d.cuDeviceGetAttribute(&minor, kComputeMinor, dev) != 0) {
    *why = "cannot open GPU 0";
    return nullptr;
  }
  d.cuDeviceGetName(name, sizeof name - 1, dev);
  return std::make_unique<DriverDevice>(std::move(d), ctx, name,
                                        "sm_" + std::to_string(major * 10 + minor));
}

}  // namespace kiln
