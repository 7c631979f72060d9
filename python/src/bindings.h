#pragma once
// The parts of kiln's Python extension (_kiln), each adding its names to the module.
#include <nanobind/nanobind.h>

#include "runtime/tensor.h"

namespace kiln::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_function(nb::module_& m);
void bind_graph(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_export(nb::module_& m);
void bind_device(nb::module_& m);

// A numpy array, a PyTorch tensor or anything with __dlpack__ / the buffer protocol as a
// kiln tensor sharing its memory (copied only when kiln cannot describe its layout or type);
// the producer's memory is released once the last kiln view of it is gone. A CUDA array is a
// device tensor; a CPU array is one only with `as_device` (the CUDA emulator's device memory
// is the host's, so host arrays stand in for device ones there).
Tensor tensor_from_python(nb::handle obj, bool as_device = false);
// A kiln tensor as a kiln.Tensor Python object.
nb::object tensor_to_python(Tensor t);

}  // namespace kiln::python
