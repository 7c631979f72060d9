#pragma once
// Turns device events into engine completions: one thread waits for each event in the order
// they were handed over and then calls its callback (with the event's error, if any), so a
// GPU step's engine function can return as soon as its work is enqueued. Callbacks run on
// that thread and may call the device (host copies out of staging) and the engine.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kiln {

class DeviceEvent;

// `done` gets "" on success, else the device's error message.
void when_complete(std::shared_ptr<DeviceEvent> event, std::function<void(std::string)> done);
// How many completions this process has delivered (engine steps that ran asynchronously).
uint64_t completions_delivered();

}  // namespace kiln
