#include "runtime/device/device.h"

#include "runtime/cuda/cuda_device.h"
#include "runtime/device/caller_stream.h"

namespace kiln {

// The runtime's one registration: the process's device is CUDA's (a GPU, or the emulator).
Device& accelerator() { return cuda_device(); }

DeviceStream& thread_stream() {
  if (DeviceStream* caller = CallerStream::current()) return *caller;
  // Destroyed at thread exit (a worker's stream drains then), before the device itself.
  thread_local std::unique_ptr<DeviceStream> stream;
  if (!stream) stream = accelerator().create_stream();
  return *stream;
}

}  // namespace kiln
