#include "runtime/device/device_tensor.h"

#include "runtime/device/device.h"
#include "runtime/device/device_memory.h"
#include "util/error.h"

namespace kiln {

Tensor to_device(const Tensor& host) {
  if (!host.defined()) throw UserError("to_device: no tensor");
  if (host.storage()->on_device())
    throw UserError("to_device: " + host.describe() + " is already on the device");
  const Tensor src = host.contiguous();
  Device& device = accelerator();
  const size_t bytes = src.nbytes();
  Tensor out(allocate_device_storage(device, bytes), 0, src.dtype(), src.shape(),
             contiguous_strides(src.shape()));
  if (bytes) device.copy_to_device(out.data(), src.data(), bytes);
  return out;
}

Tensor to_host(const Tensor& dev) {
  if (!dev.defined()) throw UserError("to_host: no tensor");
  if (!dev.storage()->on_device())
    throw UserError("to_host: " + dev.describe() + " is not on the device");
  if (!dev.is_contiguous()) throw UserError("to_host: " + dev.describe() + " is not contiguous");
  Tensor out = Tensor::empty(dev.dtype(), dev.shape());
  if (out.nbytes()) accelerator().copy_to_host(out.data(), dev.data(), out.nbytes());
  return out;
}

}  // namespace kiln
