// kiln.Tensor: a kiln tensor seen from Python. It exports itself through DLPack (legacy and
// versioned capsules, strides always filled) and __array__, so numpy and PyTorch share its
// memory; arrays coming in are viewed, not copied, when kiln can describe them.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <optional>

#include "python/src/bindings.h"
#include "python/src/dlpack.h"
#include "runtime/device/device.h"
#include "runtime/storage.h"
#include "util/error.h"

namespace kiln::python {
namespace {

using namespace nb::literals;

// Exports alive in consumers' hands (created, deleter not yet called): tests check that
// every capsule's deleter runs exactly once.
std::atomic<int64_t> live_exports{0};

struct PyTensor {
  Tensor tensor;
  bool read_only = false;
};

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::kBool:
      return {kDLBool, 8, 1};
    case DType::kInt8:
      return {kDLInt, 8, 1};
    case DType::kInt16:
      return {kDLInt, 16, 1};
    case DType::kInt32:
      return {kDLInt, 32, 1};
    case DType::kInt64:
      return {kDLInt, 64, 1};
    case DType::kUInt8:
      return {kDLUInt, 8, 1};
    case DType::kUInt16:
      return {kDLUInt, 16, 1};
    case DType::kUInt32:
      return {kDLUInt, 32, 1};
    case DType::kUInt64:
      return {kDLUInt, 64, 1};
    case DType::kFloat16:
      return {kDLFloat, 16, 1};
    case DType::kBFloat16:
      return {kDLBfloat, 16, 1};
    case DType::kFloat32:
      return {kDLFloat, 32, 1};
    case DType::kFloat64:
      return {kDLFloat, 64, 1};
  }
  throw InternalError("dtype without a DLPack code");
}

std::optional<DType> kiln_dtype(uint8_t code, uint8_t bits) {
  for (DType d : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                  DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kFloat16,
                  DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    const DLDataType t = dl_dtype(d);
    if (t.code == code && t.bits == bits) return d;
  }
  return std::nullopt;
}

// What a capsule's manager_ctx owns: a reference to the tensor's storage and the arrays
// the DLTensor points at.
struct Export {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

template <class Managed>
void delete_export(Managed* self) {
  delete static_cast<Export*>(self->manager_ctx);
  delete self;
  live_exports.fetch_sub(1);
}

// Where a kiln tensor's memory is, as DLPack says it: device memory is the GPU's, except on
// the CUDA emulator, whose device memory is the host's (a CPU consumer reads it as it is).
DLDevice dl_device(const Tensor& t) {
  if (!t.storage()->on_device() || accelerator().emulated()) return {kDLCPU, 0};
  return {kDLCUDA, 0};
}

template <class Managed>
void fill(Managed* m, const Tensor& t) {
  auto* e = new Export{t, t.shape(), t.strides()};
  m->manager_ctx = e;
  DLTensor& d = m->dl_tensor;
  d.data = t.storage()->data();
  d.byte_offset = t.byte_offset();
  d.device = dl_device(t);
  d.ndim = t.ndim();
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();  // always filled, even when contiguous
  m->deleter = delete_export<Managed>;
  live_exports.fetch_add(1);
}

// A capsule not consumed (still under its original name) owns its tensor.
template <class Managed>
void capsule_destructor(PyObject* capsule) {
  const char* name = std::is_same_v<Managed, DLManagedTensor> ? "dltensor" : "dltensor_versioned";
  if (!PyCapsule_IsValid(capsule, name)) return;  // renamed "used_...": the consumer owns it
  auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, name));
  if (m && m->deleter) m->deleter(m);
}

nb::object dlpack(const PyTensor& self, nb::object stream, nb::object max_version,
                  nb::object dl_device, nb::object copy) {
  if (!copy.is_none() && nb::cast<bool>(copy))
    throw nb::buffer_error("kiln.Tensor.__dlpack__: copy=True is not supported (kiln shares)");
  bool versioned = false;
  if (!max_version.is_none()) {
    auto v = nb::cast<std::pair<int, int>>(max_version);
    versioned = v.first >= 1;
  }
  if (versioned) {
    auto* m = new DLManagedTensorVersioned{};
    m->version = {1, 0};
    fill(m, self.tensor);
    m->flags = self.read_only ? kDLFlagReadOnly : 0;
    return nb::steal(
        PyCapsule_New(m, "dltensor_versioned", capsule_destructor<DLManagedTensorVersioned>));
  }
  // A legacy capsule cannot say read-only: refuse rather than hand out writable memory.
  if (self.read_only)
    throw nb::buffer_error(
        "kiln.Tensor is read-only; legacy DLPack cannot mark it so (ask "
        "for max_version=(1, 0))");
  auto* m = new DLManagedTensor{};
  fill(m, self.tensor);
  return nb::steal(PyCapsule_New(m, "dltensor", capsule_destructor<DLManagedTensor>));
}

}  // namespace

nb::object tensor_to_python(Tensor t) { return nb::cast(PyTensor{std::move(t), false}); }

Tensor tensor_from_python(nb::handle obj, bool as_device) {
  if (nb::isinstance<PyTensor>(obj)) return nb::cast<const PyTensor&>(obj).tensor;
  // nanobind takes numpy (buffer protocol or DLPack), PyTorch and any DLPack producer with
  // any strides and offset; it holds the producer's memory while the handle lives.
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(obj, a, false)) {
    throw UserError(std::string("expected an array (numpy, a PyTorch tensor or anything with "
                                "__dlpack__), got ") +
                    nb::type_name(obj.type()).c_str());
  }
  bool on_device = false;
  if (a.device_type() == nb::device::cuda::value) {
    // kiln runs on the first GPU (runtime/cuda): memory of another cannot be read there.
    if (a.device_id() != 0) {
      throw UserError("a CUDA tensor on cuda:" + std::to_string(a.device_id()) +
                      "; kiln runs on cuda:0 (move it there, or set CUDA_VISIBLE_DEVICES)");
    }
    on_device = true;
  } else if (a.device_type() == nb::device::cpu::value) {
    // A host array standing in for device memory, where the device is the emulator.
    on_device = as_device;
  } else {
    throw UserError("an array on DLPack device type " + std::to_string(a.device_type()) +
                    "; kiln takes CPU and CUDA arrays");
  }
  const std::optional<DType> dtype = kiln_dtype(a.dtype().code, a.dtype().bits);
  if (!dtype || a.dtype().lanes != 1) {
    throw UserError("arrays of DLPack type code " + std::to_string(a.dtype().code) + ", " +
                    std::to_string(a.dtype().bits) + " bits have no kiln dtype");
  }
  Shape shape(a.ndim()), strides(a.ndim());
  int64_t lo = 0, hi = 0;  // element span the view touches, relative to data()
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  bool empty = false;
  for (int64_t d : shape) empty = empty || d == 0;
  if (!empty) {
    for (size_t i = 0; i < a.ndim(); ++i) {
      const int64_t reach = (shape[i] - 1) * strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
  }
  const size_t item = dtype_size(*dtype);
  char* data = static_cast<char*>(const_cast<void*>(a.data()));
  char* base = data + lo * static_cast<int64_t>(item);
  const size_t bytes = empty ? 0 : static_cast<size_t>(hi - lo + 1) * item;
  // The storage starts at the lowest element the view reaches (negative strides reach
  // below data()); its release drops nanobind's handle, which calls the producer's deleter.
  auto holder = std::make_shared<nb::ndarray<nb::ro>>(std::move(a));
  auto storage = std::make_shared<Storage>(
      base, bytes, [holder](void*) mutable { holder.reset(); }, on_device);
  return Tensor(storage, static_cast<size_t>(-lo) * item, *dtype, shape, strides);
}

void bind_tensor(nb::module_& m) {
  nb::class_<PyTensor>(m, "Tensor",
                       "A tensor kiln computed: shares its memory with numpy (np.asarray) and "
                       "PyTorch (torch.from_dlpack).")
      .def_prop_ro("shape",
                   [](const PyTensor& t) {
                     nb::list out;
                     for (int64_t d : t.tensor.shape()) out.append(d);
                     return nb::tuple(out);
                   })
      .def_prop_ro("strides",  // in elements, as DLPack counts them
                   [](const PyTensor& t) {
                     nb::list out;
                     for (int64_t d : t.tensor.strides()) out.append(d);
                     return nb::tuple(out);
                   })
      .def_prop_ro("dtype",
                   [](const PyTensor& t) { return std::string(dtype_name(t.tensor.dtype())); })
      .def_prop_ro("ndim", [](const PyTensor& t) { return t.tensor.ndim(); })
      .def_prop_ro("read_only", [](const PyTensor& t) { return t.read_only; })
      .def(
          "set_read_only", [](PyTensor& t) { t.read_only = true; },
          "From now on, exports carry DLPack's read-only flag (legacy capsules are refused).")
      .def("__dlpack__", &dlpack, nb::kw_only(), nb::arg("stream") = nb::none(),
           nb::arg("max_version") = nb::none(), nb::arg("dl_device") = nb::none(),
           nb::arg("copy") = nb::none())
      .def("__dlpack_device__",
           [](const PyTensor& t) {
             const DLDevice d = dl_device(t.tensor);
             return std::make_pair(int(d.device_type), int(d.device_id));
           })
      .def(
          "__array__",
          [](nb::handle self, nb::object dtype, nb::object copy) {
            nb::object np = nb::module_::import_("numpy");
            nb::object a = np.attr("from_dlpack")(self);
            if (!dtype.is_none()) a = a.attr("astype")(dtype, "copy"_a = false);
            if (!copy.is_none() && nb::cast<bool>(copy)) a = a.attr("copy")();
            return a;
          },
          nb::arg("dtype") = nb::none(), nb::kw_only(), nb::arg("copy") = nb::none())
      .def("__len__",
           [](const PyTensor& t) {
             if (t.tensor.ndim() == 0) throw nb::type_error("len() of a 0-d kiln.Tensor");
             return t.tensor.shape()[0];
           })
      .def("__repr__",
           [](const PyTensor& t) { return "kiln.Tensor(" + t.tensor.describe() + ")"; });
  m.def(
      "_as_tensor", [](nb::handle obj) { return tensor_to_python(tensor_from_python(obj)); },
      "Views an array as a kiln.Tensor (sharing memory where the layout allows).");
  m.def(
      "_live_exports", [] { return live_exports.load(); },
      "DLPack capsules kiln handed out whose deleter has not run yet.");
}

}  // namespace kiln::python
