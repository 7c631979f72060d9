// kiln's CUDA device from Python: what it is, and streams a caller may run functions on
// (Function.run(..., stream=handle)). PyTorch's own streams are passed by their handle
// (torch.cuda.current_stream().cuda_stream); kiln.cuda_stream() makes one of kiln's, which is
// what the emulator accepts.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "python/src/bindings.h"
#include "runtime/device/device.h"

namespace kiln::python {
namespace {

struct PyStream {
  std::unique_ptr<DeviceStream> stream;
};

}  // namespace

void bind_device(nb::module_& m) {
  m.def(
      "cuda_device", [] { return accelerator().describe(); },
      "The CUDA device kiln runs on ('... (sm_90)', or the emulator); raises kiln.Error saying "
      "what is missing when there is none.");
  m.def(
      "cuda_emulated", [] { return accelerator().emulated(); },
      "True when the CUDA device is kiln's emulator (KILN_CUDA_DEVICE=emulator): its device "
      "memory is host memory, so CPU arrays stand in for device ones.");
  nb::class_<PyStream>(m, "CudaStream", "A stream of kiln's on its CUDA device.")
      .def_prop_ro("handle",
                   [](const PyStream& s) { return static_cast<uint64_t>(s.stream->native()); })
      .def_prop_ro(
          "launches", [](const PyStream& s) { return s.stream->launches(); },
          "Kernel launches it has taken (counted on the emulator; 0 on a GPU).")
      .def(
          "synchronize",
          [](PyStream& s) {
            nb::gil_scoped_release release;
            s.stream->synchronize();
          },
          "Waits for the work enqueued on it; raises the first device error.");
  m.def(
      "cuda_stream", [] { return PyStream{accelerator().create_stream()}; },
      "A new stream on kiln's CUDA device.");
}

}  // namespace kiln::python
