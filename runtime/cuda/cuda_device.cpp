#include "runtime/cuda/cuda_device.h"

#include <cstdlib>
#include <mutex>

#include "runtime/cuda/driver_device.h"
#include "runtime/cuda/emulator_device.h"
#include "util/error.h"

namespace kiln {
namespace {

struct Choice {
  std::unique_ptr<Device> device;
  std::string why;           // when there is none
  bool bad_setting = false;  // KILN_CUDA_DEVICE names no device kind
};

Choice& choice() {
  static Choice c = [] {
    Choice r;
    const char* env = std::getenv("KILN_CUDA_DEVICE");
    const std::string want = env ? env : "";
    if (want == "emulator") {
      r.device = make_emulator_device();
    } else if (want.empty() || want == "gpu") {
      r.device = make_driver_device(&r.why);
    } else {
      r.why = "KILN_CUDA_DEVICE='" + want + "' is not a device (use 'gpu' or 'emulator')";
      r.bad_setting = true;
    }
    return r;
  }();
  return c;
}

}  // namespace

std::string cuda_device_kind(std::string* why) {
  Choice& c = choice();
  if (c.bad_setting) throw UserError(c.why);
  if (why) *why = c.why;
  if (!c.device) return "";
  return c.device->emulated() ? "emulator" : "gpu";
}

Device& cuda_device() {
  Choice& c = choice();
  if (!c.device) {
    throw UserError("--device cuda: " + c.why +
                    "; on a machine without a GPU, KILN_CUDA_DEVICE=emulator runs the CUDA code "
                    "on the CPU");
  }
  return *c.device;
}

}  // namespace kiln
