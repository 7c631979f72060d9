#include "runtime/device/device_steps.h"

#include "runtime/device/device.h"
#include "runtime/device/staged_copies.h"
#include "util/error.h"

namespace kiln {

DeviceSteps::~DeviceSteps() {
  try {
    wait();
  } catch (...) {
    // Already failing (a host step threw): that error is the one reported.
  }
}

void DeviceSteps::add(const std::string& label, DeviceStream& stream,
                      std::unique_ptr<StagedCopies> copies) {
  std::shared_ptr<DeviceEvent> event;
  try {
    event = stream.record();
  } catch (const std::exception& e) {
    drain_after_failure(stream);
    throw Error(label + ": " + e.what());
  }
  steps_.push_back({label, std::move(event), std::move(copies)});
}

void DeviceSteps::wait() {
  std::string first;
  for (Step& s : steps_) {
    try {
      s.event->wait();
      if (first.empty()) {
        s.copies->finish();
      } else {
        s.copies->abandon();  // later steps read what the failed one did not write
      }
    } catch (const std::exception& e) {
      s.copies->abandon();
      if (first.empty()) first = s.label + ": " + e.what();
    }
  }
  steps_.clear();
  if (!first.empty()) throw Error(first);
}

void drain_after_failure(DeviceStream& stream) noexcept {
  try {
    stream.synchronize();
  } catch (...) {
    // The step's own failure is what gets reported.
  }
}

}  // namespace kiln
