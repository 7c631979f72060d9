#include "runtime/cuda/emulator_device.h"

#include <dlfcn.h>
#include <ucontext.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>

#define KILN_EMU_HOST_ONLY 1
#include "runtime/cuda/kiln_cuda_emu.h"
#include "util/error.h"

// Sanitizers must be told when the stack changes under them.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define KILN_EMU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define KILN_EMU_TSAN 1
#endif
#ifdef KILN_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif
#ifdef KILN_EMU_TSAN
#include <sanitizer/tsan_interface.h>
// The scheduler's own bookkeeping (fiber states, the current fiber, thread indices) is
// shared by the fibers without happens-before by design; only kernel code is checked.
#define KILN_EMU_UNCHECKED __attribute__((no_sanitize("thread")))
#else
#define KILN_EMU_UNCHECKED
#endif

namespace kiln {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

enum class FiberState { kRunning, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t context{};
  kiln_emu_thread index{};
  FiberState state = FiberState::kRunning;
  char* stack = nullptr;
  void* asan_fake = nullptr;  // ASan's fake stack of this fiber while it is switched out
#ifdef KILN_EMU_TSAN
  void* tsan = nullptr;
#endif
};

// One block in flight on this CPU thread.
struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  size_t current = 0;
  void (*entry)(void**) = nullptr;
  void** args = nullptr;
  std::vector<uint64_t> slots;  // shuffle exchange, one per thread
  // The scheduler's stack, as ASan must be told it when a fiber switches back to it.
  void* asan_fake = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
#ifdef KILN_EMU_TSAN
  void* scheduler_tsan = nullptr;
  // The addresses barriers release and acquire: __syncthreads orders the whole block, a
  // warp barrier (shuffles) only its warp, so a race across warps stays visible to TSan.
  // Each is 8 bytes: TSan keeps one sync object per 8-byte cell, so neighbouring chars
  // would be one object and every barrier would order every warp.
  uint64_t block_sync = 0;
  std::vector<uint64_t> warp_sync;
  // Block boundaries: the launching thread releases start_sync before each block (its
  // arguments and earlier blocks' writes), fibers release end_sync when they finish.
  uint64_t start_sync = 0, end_sync = 0;
#endif
};

thread_local Block* tl_block = nullptr;

// ASan follows each switch: start_switch_fiber names the stack being entered, and the code
// that resumes calls finish_switch_fiber (a fiber learns the scheduler's stack bounds there).
KILN_EMU_UNCHECKED void switch_to_fiber(Block& b, Fiber& f) {
#ifdef KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(&b.asan_fake, f.stack, kStackBytes);
#endif
#ifdef KILN_EMU_TSAN
  // No implicit happens-before: only barriers order the threads of a block, so a race
  // across a missing __syncthreads is reported as it would be between real threads.
  __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
#endif
  swapcontext(&b.scheduler, &f.context);
#ifdef KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(b.asan_fake, nullptr, nullptr);
#endif
}

KILN_EMU_UNCHECKED void switch_to_scheduler(Block& b, Fiber& f) {
#ifdef KILN_EMU_ASAN
  // A finished fiber's stack is gone: no fake stack to keep.
  __sanitizer_start_switch_fiber(f.state == FiberState::kDone ? nullptr : &f.asan_fake,
                                 b.scheduler_bottom, b.scheduler_size);
#endif
#ifdef KILN_EMU_TSAN
  __tsan_switch_to_fiber(b.scheduler_tsan, __tsan_switch_to_fiber_no_sync);
#endif
  swapcontext(&f.context, &b.scheduler);
#ifdef KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake, &b.scheduler_bottom, &b.scheduler_size);
#endif
}

KILN_EMU_UNCHECKED void fiber_main() {
  Block& b = *tl_block;
#ifdef KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_bottom, &b.scheduler_size);
#endif
#ifdef KILN_EMU_TSAN
  __tsan_acquire(&b.start_sync);
#endif
  b.entry(b.args);
  Fiber& f = b.fibers[b.current];
  f.state = FiberState::kDone;
#ifdef KILN_EMU_TSAN
  // Last: the launching thread reuses this block's memory for the next launch once it has
  // acquired end_sync, so every read of it here must come before the release.
  __tsan_release(&b.end_sync);
#endif
  switch_to_scheduler(b, f);
}

// Apart from the launch loop, whose locals getcontext would otherwise put at risk.
KILN_EMU_UNCHECKED __attribute__((noinline)) void prepare_fiber(Block& b, Fiber& f) {
  f.state = FiberState::kRunning;
  f.asan_fake = nullptr;
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = &b.scheduler;
  makecontext(&f.context, fiber_main, 0);
}

KILN_EMU_UNCHECKED Fiber& current_fiber() { return tl_block->fibers[tl_block->current]; }

KILN_EMU_UNCHECKED void wait_at(FiberState where) {
  Block& b = *tl_block;
  Fiber& f = b.fibers[b.current];
#ifdef KILN_EMU_TSAN
  uint64_t* sync =
      where == FiberState::kAtBlockBarrier ? &b.block_sync : &b.warp_sync[b.current / 32];
  __tsan_release(sync);
#endif
  f.state = where;
  switch_to_scheduler(b, f);
#ifdef KILN_EMU_TSAN
  __tsan_acquire(sync);
#endif
}

KILN_EMU_UNCHECKED const kiln_emu_thread* host_self() { return &current_fiber().index; }
void host_syncthreads() { wait_at(FiberState::kAtBlockBarrier); }
void host_syncwarp() { wait_at(FiberState::kAtWarpBarrier); }
KILN_EMU_UNCHECKED void* host_lane_slot(unsigned lane) {
  Block& b = *tl_block;
  const size_t base = b.current / 32 * 32;
  return &b.slots[std::min(base + lane, b.slots.size() - 1)];
}
KILN_EMU_UNCHECKED unsigned host_warp_width() {
  Block& b = *tl_block;
  const size_t base = b.current / 32 * 32;
  return static_cast<unsigned>(std::min<size_t>(32, b.fibers.size() - base));
}

const kiln_emu_host kHost = {KILN_EMU_HOST_ABI, host_self,      host_syncthreads,
                             host_syncwarp,     host_lane_slot, host_warp_width};

// Runs one block to completion: every runnable fiber in turn; when none can run, the warps
// whose live threads all wait at a warp barrier go on, else (all waiting at __syncthreads)
// the block does. Anything else is threads of a block waiting at different barriers.
KILN_EMU_UNCHECKED void run_block(Block& b, const std::string& kernel) {
  for (;;) {
    for (size_t i = 0; i < b.fibers.size(); ++i) {
      if (b.fibers[i].state != FiberState::kRunning) continue;
      b.current = i;
      switch_to_fiber(b, b.fibers[i]);
    }
    bool all_done = true, released = false, block_barrier = false, warp_barrier = false;
    for (size_t w = 0; w < b.fibers.size(); w += 32) {
      const size_t end = std::min(w + 32, b.fibers.size());
      bool waiting = false, ready = true;
      for (size_t i = w; i < end; ++i) {
        const FiberState s = b.fibers[i].state;
        all_done = all_done && s == FiberState::kDone;
        block_barrier = block_barrier || s == FiberState::kAtBlockBarrier;
        waiting = waiting || s == FiberState::kAtWarpBarrier;
        ready = ready && (s == FiberState::kAtWarpBarrier || s == FiberState::kDone);
      }
      warp_barrier = warp_barrier || waiting;
      if (waiting && ready) {
        for (size_t i = w; i < end; ++i) {
          if (b.fibers[i].state == FiberState::kAtWarpBarrier)
            b.fibers[i].state = FiberState::kRunning;
        }
        released = true;
      }
    }
    if (all_done) return;
    if (released) continue;
    if (block_barrier && !warp_barrier) {
      // Threads that have exited count as arrived, as on the GPU.
      for (auto& f : b.fibers) {
        if (f.state == FiberState::kAtBlockBarrier) f.state = FiberState::kRunning;
      }
      continue;
    }
    throw Error("CUDA emulator: kernel '" + kernel +
                "' deadlocked: threads of one block wait at different barriers "
                "(__syncthreads in divergent code, or a shuffle some lanes skip)");
  }
}

class EmulatedImage : public KernelImage, public std::enable_shared_from_this<EmulatedImage> {
 public:
  EmulatedImage(const std::filesystem::path& path, const std::vector<std::string>& names)
      : path_(path), names_(names) {
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = ::dlerror();
      throw Error("CUDA emulator: cannot load kernel image " + path.string() + ": " +
                  (e ? e : "unknown error"));
    }
    auto bind = reinterpret_cast<int (*)(const kiln_emu_host*)>(::dlsym(handle_, "kiln_emu_bind"));
    if (!bind || bind(&kHost) != KILN_EMU_HOST_ABI) {
      ::dlclose(handle_);
      throw Error("CUDA emulator: " + path.string() + " is not a kernel image of this kiln");
    }
    touch_shared_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "kiln_emu_touch_shared"));
    for (const auto& n : names) {
      auto fn =
          reinterpret_cast<void (*)(void**)>(::dlsym(handle_, ("kiln_emu_entry_" + n).c_str()));
      if (!fn) {
        ::dlclose(handle_);
        throw Error("CUDA emulator: kernel '" + n + "' is missing from " + path.string());
      }
      entries_.push_back(fn);
      // The argument sizes, so a launch can copy the values as cuLaunchKernel does.
      auto sizes =
          reinterpret_cast<const unsigned*>(::dlsym(handle_, ("kiln_emu_sizes_" + n).c_str()));
      if (!sizes) {
        ::dlclose(handle_);
        throw Error("CUDA emulator: kernel '" + n + "' has no argument sizes in " + path.string());
      }
      arg_sizes_.push_back(sizes);
    }
  }
  size_t kernels() const { return entries_.size(); }
  const std::string& name(int kernel) const { return names_[static_cast<size_t>(kernel)]; }
  const unsigned* arg_sizes(int kernel) const { return arg_sizes_[static_cast<size_t>(kernel)]; }
  ~EmulatedImage() override {
    if (handle_) ::dlclose(handle_);
  }

  void launch(DeviceStream& stream, int kernel, const uint32_t dims[6], uint32_t shared,
              void** args) override;

  // Runs one launch on the calling thread (the stream's), blocks one after another.
  KILN_EMU_UNCHECKED void execute(int kernel, const uint32_t dims[6], uint32_t shared,
                                  void** args) {
    const std::string& name = names_[static_cast<size_t>(kernel)];
    // Fault injection: the device failing while it runs a kernel, which a GPU reports only
    // at the next synchronization point (as a sticky launch failure).
    if (const char* fault = std::getenv("KILN_CUDA_EMULATOR_FAULT");
        fault && *fault && name.find(fault) != std::string::npos) {
      throw Error("CUDA emulator: kernel '" + name +
                  "' failed on the device (injected by KILN_CUDA_EMULATOR_FAULT)");
    }
    const uint64_t threads = uint64_t{dims[3]} * dims[4] * dims[5];
    if (threads == 0 || threads > 1024 || dims[0] == 0 || dims[1] == 0 || dims[2] == 0 ||
        dims[1] > 65535 || dims[2] > 65535) {
      throw Error("CUDA emulator: kernel '" + name + "': invalid launch grid (" +
                  std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " +
                  std::to_string(dims[2]) + ") block (" + std::to_string(dims[3]) + ", " +
                  std::to_string(dims[4]) + ", " + std::to_string(dims[5]) + ")");
    }
    if (shared > 0) throw Error("CUDA emulator: dynamic shared memory is not emulated");
    Block b;
    b.entry = entries_[static_cast<size_t>(kernel)];
    b.args = args;
    b.fibers.resize(threads);
    b.slots.assign(threads, 0);
    std::vector<std::unique_ptr<char[]>> stacks;
    for (auto& f : b.fibers) {
      stacks.emplace_back(new char[kStackBytes]);
      f.stack = stacks.back().get();
    }
#ifdef KILN_EMU_TSAN
    b.scheduler_tsan = __tsan_get_current_fiber();
    b.warp_sync.assign((threads + 31) / 32, 0);
    for (auto& f : b.fibers) f.tsan = __tsan_create_fiber(0);
#endif
    if (touch_shared_) touch_shared_();
    Block* outer = tl_block;
    tl_block = &b;
    try {
      for (uint32_t bz = 0; bz < dims[2]; ++bz)
        for (uint32_t by = 0; by < dims[1]; ++by)
          for (uint32_t bx = 0; bx < dims[0]; ++bx) {
            size_t i = 0;
            for (uint32_t tz = 0; tz < dims[5]; ++tz)
              for (uint32_t ty = 0; ty < dims[4]; ++ty)
                for (uint32_t tx = 0; tx < dims[3]; ++tx, ++i) {
                  Fiber& f = b.fibers[i];
                  f.index = {{tx, ty, tz},
                             {bx, by, bz},
                             {dims[3], dims[4], dims[5]},
                             {dims[0], dims[1], dims[2]}};
                  prepare_fiber(b, f);
                }
#ifdef KILN_EMU_TSAN
            __tsan_acquire(&b.end_sync);
            __tsan_release(&b.start_sync);
#endif
            run_block(b, name);
          }
#ifdef KILN_EMU_TSAN
      __tsan_acquire(&b.end_sync);  // the caller reads what the blocks wrote
#endif
    } catch (...) {
      tl_block = outer;
#ifdef KILN_EMU_TSAN
      for (auto& f : b.fibers) __tsan_destroy_fiber(f.tsan);
#endif
      throw;
    }
    tl_block = outer;
#ifdef KILN_EMU_TSAN
    for (auto& f : b.fibers) __tsan_destroy_fiber(f.tsan);
#endif
  }

 private:
  std::filesystem::path path_;
  std::vector<std::string> names_;
  void* handle_ = nullptr;
  std::vector<void (*)(void**)> entries_;
  std::vector<const unsigned*> arg_sizes_;  // per kernel, 0-terminated
  void (*touch_shared_)() = nullptr;
};

// Completion of what a stream held when it was recorded, and the first error in that work.
class EmulatedEvent : public DeviceEvent {
 public:
  void complete(std::string error) {
    std::lock_guard lock(mutex_);
    error_ = std::move(error);
    done_ = true;
    cv_.notify_all();
  }
  void wait() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    if (!error_.empty()) throw Error(error_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

// A stream is a CPU thread working through a queue, so device work really runs while the
// host goes on, as on a GPU: a host that reads results without waiting reads stale bytes.
// A failing operation's error goes to the next event recorded after it.
class EmulatedQueue {
 public:
  EmulatedQueue() : thread_([this] { work(); }) {}
  ~EmulatedQueue() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void enqueue(std::function<void()> task, bool launch = false) {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    launches_ += launch;
    cv_.notify_all();
  }
  std::shared_ptr<DeviceEvent> record() {
    auto event = std::make_shared<EmulatedEvent>();
    enqueue([this, event] { event->complete(std::exchange(error_, {})); });
    return event;
  }
  uint64_t launches() {
    std::lock_guard lock(mutex_);
    return launches_;
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything enqueued has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        task();
      } catch (const std::exception& e) {
        if (error_.empty()) error_ = e.what();  // only this thread touches error_
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  uint64_t launches_ = 0;
  std::string error_;
  std::thread thread_;  // last: started once the members above exist
};

// The queues of the streams alive, by their native handle (the queue's address), so a
// caller's handle is adopted only while its stream lives.
class QueueRegistry {
 public:
  void add(const std::shared_ptr<EmulatedQueue>& q) {
    std::lock_guard lock(mutex_);
    queues_[reinterpret_cast<uintptr_t>(q.get())] = q;
  }
  void remove(const EmulatedQueue* q) {
    std::lock_guard lock(mutex_);
    queues_.erase(reinterpret_cast<uintptr_t>(q));
  }
  std::shared_ptr<EmulatedQueue> find(uintptr_t native) {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(native);
    return it == queues_.end() ? nullptr : it->second.lock();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uintptr_t, std::weak_ptr<EmulatedQueue>> queues_;
};

QueueRegistry& queue_registry() {
  static QueueRegistry* registry = new QueueRegistry;  // outlives thread-exit streams
  return *registry;
}

// A stream object: the queue's owner (create_stream), or one more handle on a stream that
// lives elsewhere (adopt_stream); work through either goes into the same queue, in order.
class EmulatedStream : public DeviceStream {
 public:
  EmulatedStream() : queue_(std::make_shared<EmulatedQueue>()), owner_(true) {
    queue_registry().add(queue_);
  }
  explicit EmulatedStream(std::shared_ptr<EmulatedQueue> adopted)
      : queue_(std::move(adopted)), owner_(false) {}
  ~EmulatedStream() override {
    if (owner_) queue_registry().remove(queue_.get());
  }
  void enqueue(std::function<void()> task, bool launch) {
    queue_->enqueue(std::move(task), launch);
  }
  void copy_to_device_async(void* dst, const void* src, size_t bytes) override {
    enqueue(
        [dst, src, bytes] {
          if (bytes) std::memcpy(dst, src, bytes);
        },
        false);
  }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    enqueue(
        [dst, src, bytes] {
          if (bytes) std::memcpy(dst, src, bytes);
        },
        false);
  }
  std::shared_ptr<DeviceEvent> record() override { return queue_->record(); }
  uintptr_t native() const override { return reinterpret_cast<uintptr_t>(queue_.get()); }
  uint64_t launches() const override { return queue_->launches(); }

 private:
  std::shared_ptr<EmulatedQueue> queue_;
  bool owner_;
};

// Copies the argument values now (args may point at the thunk's locals) and enqueues the
// launch; its grid is checked when it runs, so a bad one fails asynchronously.
void EmulatedImage::launch(DeviceStream& stream, int kernel, const uint32_t dims[6],
                           uint32_t shared, void** args) {
  if (kernel < 0 || static_cast<size_t>(kernel) >= kernels()) {
    throw Error("CUDA emulator: no kernel " + std::to_string(kernel) + " in " + path_.string());
  }
  constexpr size_t kAlign = alignof(std::max_align_t);
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const unsigned* z = arg_sizes(kernel); *z; ++z) {
    offsets.push_back(total);
    total += (*z + kAlign - 1) / kAlign * kAlign;
  }
  struct Launch {
    std::unique_ptr<std::max_align_t[]> values;
    std::vector<void*> args;
    uint32_t dims[6];
  };
  auto l = std::make_shared<Launch>();
  l->values.reset(new std::max_align_t[total / kAlign + 1]);
  auto* base = reinterpret_cast<unsigned char*>(l->values.get());
  const unsigned* z = arg_sizes(kernel);
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::memcpy(base + offsets[i], args[i], z[i]);
    l->args.push_back(base + offsets[i]);
  }
  std::copy(dims, dims + 6, l->dims);
  auto self = shared_from_this();
  static_cast<EmulatedStream&>(stream).enqueue(
      [self, kernel, shared, l] { self->execute(kernel, l->dims, shared, l->args.data()); }, true);
}

class EmulatorDevice : public Device {
 public:
  bool emulated() const override { return true; }
  std::string describe() const override { return "kiln CUDA emulator on the CPU (not a GPU)"; }
  std::string arch() const override { return "emulator"; }
  std::string image_name() const override { return "kernels.emu.so"; }
  // KILN_CUDA_EMULATOR_MEMORY=bytes gives the emulated device that much memory, so a run
  // that does not fit fails as it would on a small GPU.
  void* allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    std::lock_guard lock(mutex_);
    if (const char* cap = std::getenv("KILN_CUDA_EMULATOR_MEMORY"); cap && *cap) {
      const unsigned long long limit = std::strtoull(cap, nullptr, 10);
      if (in_use_ + rounded > limit) {
        throw Error("CUDA emulator: out of memory allocating " + std::to_string(bytes) +
                    " bytes (" + std::to_string(in_use_) + " of " + std::to_string(limit) +
                    " bytes in use; KILN_CUDA_EMULATOR_MEMORY)");
      }
    }
    void* p = std::aligned_alloc(256, rounded);
    if (!p)
      throw Error("CUDA emulator: out of memory allocating " + std::to_string(bytes) + " bytes");
    sizes_[p] = rounded;
    in_use_ += rounded;
    return p;
  }
  void release(void* ptr) override {
    std::lock_guard lock(mutex_);
    auto it = sizes_.find(ptr);
    if (it != sizes_.end()) {
      in_use_ -= it->second;
      sizes_.erase(it);
    }
    std::free(ptr);
  }
  void* allocate_pinned(size_t bytes) override {
    void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (!p)
      throw Error("CUDA emulator: out of host memory pinning " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release_pinned(void* ptr) override { std::free(ptr); }
  std::unique_ptr<DeviceStream> create_stream() override {
    return std::make_unique<EmulatedStream>();
  }
  std::unique_ptr<DeviceStream> adopt_stream(uintptr_t native) override {
    std::shared_ptr<EmulatedQueue> q = queue_registry().find(native);
    if (!q) {
      char handle[32];  // this file builds alone (tests/emulator_race): no kiln helper
      std::snprintf(handle, sizeof handle, "0x%llx", static_cast<unsigned long long>(native));
      throw UserError(std::string("CUDA emulator: stream handle ") + handle +
                      " is not a live stream of the emulator (on the emulator a caller's "
                      "stream must be one kiln created: kiln.cuda_stream())");
    }
    return std::make_unique<EmulatedStream>(std::move(q));
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  std::shared_ptr<KernelImage> load(const std::filesystem::path& image,
                                    const std::vector<std::string>& names) override {
    return std::make_shared<EmulatedImage>(image, names);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;  // device blocks: their rounded sizes
  size_t in_use_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_emulator_device() { return std::make_unique<EmulatorDevice>(); }

}  // namespace kiln
