#pragma once
// Running on the caller's stream. A framework that hands kiln device tensors (PyTorch through
// DLPack) has enqueued the work producing them on its own stream; while a CallerStream lives,
// this thread's device work (thread_stream()) goes on that stream instead of kiln's, so it
// starts after the caller's work without the host waiting for it, and the caller's later work
// starts after kiln's. Runs on this thread then keep their steps in order on it.
#include <cstdint>
#include <memory>

#include "runtime/device/device.h"

namespace kiln {

class CallerStream {
 public:
  // `native` as Device::adopt_stream takes it; throws UserError naming it when the device
  // has no such stream.
  explicit CallerStream(uintptr_t native);
  ~CallerStream();
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;
  // The caller's stream in effect on this thread, or nullptr.
  static DeviceStream* current();

 private:
  std::unique_ptr<DeviceStream> stream_;
  DeviceStream* previous_;
};

}  // namespace kiln
