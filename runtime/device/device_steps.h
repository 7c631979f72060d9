#pragma once
// The device steps of a run that have been enqueued and not yet waited for: a run in one
// thread enqueues device steps back to back on its stream and waits only where a host step
// comes next (it may read what they copied back) and at the end.
#include <memory>
#include <string>
#include <vector>

namespace kiln {

class DeviceEvent;
class DeviceStream;
class StagedCopies;

class DeviceSteps {
 public:
  DeviceSteps() = default;
  DeviceSteps(const DeviceSteps&) = delete;
  DeviceSteps& operator=(const DeviceSteps&) = delete;
  // Waits for what is still queued (errors dropped): its buffers must outlive it.
  ~DeviceSteps();
  // After `label`'s work went to `stream`: records its event.
  void add(const std::string& label, DeviceStream& stream, std::unique_ptr<StagedCopies> copies);
  // Waits for every step added, finishes their copies back to the host, and throws an Error
  // naming the first step whose device work failed.
  void wait();

 private:
  struct Step {
    std::string label;
    std::shared_ptr<DeviceEvent> event;
    std::unique_ptr<StagedCopies> copies;
  };
  std::vector<Step> steps_;
};

// For a device step that threw after enqueueing some of its work: waits for `stream` so the
// memory that work uses may be released (its own error is the one that matters).
void drain_after_failure(DeviceStream& stream) noexcept;

}  // namespace kiln
