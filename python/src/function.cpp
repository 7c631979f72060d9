// kiln.compile's native half: a model file (through ModelFunction, so models built per
// input value and staged NonZero work too) or a graph compiled through the kernel cache, called
// with arrays; the GIL is released while a function runs.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "compiler/compile.h"
#include "compiler/tiered_function.h"
#include "frontend/model_function.h"
#include "frontend/model_loader.h"
#include "python/src/bindings.h"
#include "python/src/graph_handle.h"
#include "runtime/device/caller_stream.h"
#include "util/error.h"

namespace kiln::python {
namespace {

struct PyFunction {
  std::shared_ptr<ModelFunction> model;  // compiled from a file
  std::shared_ptr<Function> function;    // compiled from a graph
  // Compiled from a graph in tiers: the generic tier answers while the module compiles. The
  // tiered function reads `graph` until it is done, so it holds it.
  std::shared_ptr<Graph> graph;
  std::shared_ptr<TieredFunction> tiered;
  std::shared_ptr<std::mutex> model_mutex = std::make_shared<std::mutex>();
  bool on_device = false;  // compiled for a device ("cuda"): a caller's stream may be given
  bool device_io = false;  // its inputs and outputs are device tensors
  // Arrays that enter as device tensors: CUDA arrays always; CPU arrays too on the emulator,
  // whose device memory is the host's.
  bool host_arrays_as_device() const { return device_io && accelerator().emulated(); }

  const Function& current() const {
    if (tiered) return tiered->compiled();
    return model ? model->function() : *function;
  }
  std::vector<std::string> input_names() const {
    if (tiered) {
      std::vector<std::string> out;
      for (const Variable* v : graph->inputs()) out.push_back(v->name);
      return out;
    }
    if (!model) return function->input_names();
    std::vector<std::string> out;
    for (const ModelInput& in : model->inputs()) out.push_back(in.name);
    return out;
  }
};

CompileOptions options_of(const std::string& device, const std::optional<std::string>& passes,
                          const std::optional<std::string>& precision, bool device_io = false) {
  CompileOptions o;
  o.device = device;
  o.device_io = device_io;
  if (device_io && device == "cpu")
    throw UserError("device_io=True needs a device: compile with device='cuda'");
  if (passes) o.passes = *passes;
  if (precision) o.precision = *precision;
  return o;
}

// A model taking or giving sequences or optionals (frontend/model_value.h): a sequence input
// is a list or tuple of arrays, an empty optional None; a sequence output comes back as a
// list, an empty optional as None.
nb::list call_values(PyFunction& self, const std::vector<std::string>& names, nb::args args,
                     nb::kwargs kwargs) {
  const bool as_device = self.host_arrays_as_device();
  std::map<std::string, ModelValue> inputs;
  auto value_of = [&](const std::string& name, nb::handle v) {
    ValueKind kind = ValueKind::kTensor;
    for (const ModelInput& in : self.model->inputs())
      if (in.name == name) kind = in.kind;
    const bool list = nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v);
    if (v.is_none() && is_optional(kind)) return ModelValue::none();
    if ((v.is_none() || list) && !holds_sequence(kind))
      throw UserError("input '" + name + "' is a " + value_kind_name(kind) + ", given " +
                      (list ? "a list" : "None"));
    if (holds_sequence(kind) && list) {
      std::vector<Tensor> elems;
      for (nb::handle e : v) elems.push_back(tensor_from_python(e, as_device));
      return ModelValue::sequence_of(std::move(elems));
    }
    return ModelValue::of(tensor_from_python(v, as_device));
  };
  for (size_t i = 0; i < args.size(); ++i) inputs[names[i]] = value_of(names[i], args[i]);
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    if (inputs.count(name)) throw UserError("input '" + name + "' given twice");
    inputs[name] = value_of(name, value);
  }
  std::vector<ModelValue> outputs;
  {
    nb::gil_scoped_release release;
    std::lock_guard lock(*self.model_mutex);
    outputs = self.model->run_values(inputs);
    inputs.clear();
  }
  nb::list out;
  for (ModelValue& v : outputs) {
    if (!v.present) {
      out.append(nb::none());
    } else if (v.sequence) {
      nb::list elems;
      for (Tensor& t : v.tensors) elems.append(tensor_to_python(std::move(t)));
      out.append(elems);
    } else {
      out.append(tensor_to_python(std::move(v.tensors.at(0))));
    }
  }
  return out;
}

// The outputs of a run, computed with the GIL released; on the caller's stream `stream` (a
// CUstream handle, or one of kiln.cuda_stream()) when given.
std::vector<Tensor> run_released(PyFunction& self, std::map<std::string, Tensor>& inputs,
                                 std::optional<uint64_t> stream) {
  std::vector<Tensor> outputs;
  nb::gil_scoped_release release;
  std::optional<CallerStream> on;
  if (stream) on.emplace(static_cast<uintptr_t>(*stream));
  if (self.model) {
    std::lock_guard lock(*self.model_mutex);  // ModelFunction builds variants as calls come
    outputs = self.model->run(inputs);
  } else if (self.tiered) {
    std::lock_guard lock(*self.model_mutex);
    outputs = self.tiered->run(inputs);
  } else {
    outputs = self.function->run(inputs);
  }
  inputs.clear();  // the producers' memory is released with the GIL held (nanobind does)
  return outputs;
}

std::vector<std::string> checked_names(const PyFunction& self, size_t given) {
  std::vector<std::string> names = self.input_names();
  if (given > names.size()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw UserError(std::to_string(given) + " inputs given, the function takes " +
                    std::to_string(names.size()) + " (" + list + ")");
  }
  return names;
}

nb::list python_outputs(std::vector<Tensor> outputs) {
  nb::list out;
  for (Tensor& t : outputs) out.append(tensor_to_python(std::move(t)));
  return out;
}

nb::list call(PyFunction& self, nb::args args, nb::kwargs kwargs) {
  const std::vector<std::string> names = checked_names(self, args.size());
  if (self.model && self.model->takes_values()) return call_values(self, names, args, kwargs);
  const bool as_device = self.host_arrays_as_device();
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < args.size(); ++i)
    inputs[names[i]] = tensor_from_python(args[i], as_device);
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    if (inputs.count(name)) throw UserError("input '" + name + "' given twice");
    inputs[name] = tensor_from_python(value, as_device);
  }
  return python_outputs(run_released(self, inputs, std::nullopt));
}

// Function.run(inputs, stream=...): the inputs in order, the run on the caller's stream.
nb::list run_on(PyFunction& self, nb::sequence args, std::optional<uint64_t> stream) {
  const size_t n = nb::len(args);
  const std::vector<std::string> names = checked_names(self, n);
  if (stream && !self.on_device) {
    throw UserError(
        "stream given, but the function runs on the CPU (compile it with "
        "device='cuda')");
  }
  const bool as_device = self.host_arrays_as_device();
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < n; ++i) inputs[names[i]] = tensor_from_python(args[i], as_device);
  return python_outputs(run_released(self, inputs, stream));
}

Graph load_path(const std::string& path) {
  nb::gil_scoped_release release;
  return load_model(path);
}

}  // namespace

void bind_function(nb::module_& m) {
  nb::class_<PyFunction>(m, "Function", "A compiled model or graph: call it with arrays.")
      .def("__call__", &call)
      .def("run", &run_on, nb::arg("inputs"), nb::kw_only(), nb::arg("stream") = nb::none(),
           "Runs on the inputs in order; with `stream` (PyTorch's "
           "torch.cuda.current_stream().cuda_stream, or a kiln.cuda_stream()'s handle) the "
           "device work goes on that stream, after what the caller enqueued there.")
      .def_prop_ro("device_io", [](const PyFunction& f) { return f.device_io; })
      .def(
          "set_profiling", [](const PyFunction& f, bool on) { f.current().set_profiling(on); },
          "Times each step of the runs from now on (profile() reads them).")
      .def(
          "profile",
          [](const PyFunction& f) {
            // The steps of the profiled runs, most time first: what `kiln run --profile` shows.
            std::vector<StepTime> steps = f.current().profile();
            std::sort(steps.begin(), steps.end(),
                      [](const StepTime& a, const StepTime& b) { return a.total_ns > b.total_ns; });
            nb::list out;
            for (const StepTime& t : steps) {
              nb::dict d;
              d["step"] = t.label;
              d["calls"] = t.calls;
              d["ms"] = static_cast<double>(t.total_ns) / 1e6;
              d["parts"] = t.parts;
              d["flops"] = t.flops;
              d["bytes"] = t.bytes;
              out.append(d);
            }
            return out;
          },
          "Per step of the runs since set_profiling(True): its label (node and op), calls, "
          "total ms, split parts, and per call its flops and bytes moved.")
      .def_prop_ro("input_names", &PyFunction::input_names)
      .def_prop_ro("output_names", [](const PyFunction& f) { return f.current().output_names(); })
      .def_prop_ro("tier",
                   [](const PyFunction& f) {
                     // Which tier answered the last call: "generic" or "compiled".
                     if (f.tiered) return std::string(to_string(f.tiered->last_tier()));
                     return std::string(to_string(Tier::kCompiled));
                   })
      .def_prop_ro(
          "cache_status",
          [](const PyFunction& f) { return std::string(to_string(f.current().info().cache)); })
      .def_prop_ro("key", [](const PyFunction& f) { return f.current().info().key; })
      .def_prop_ro("source_path",
                   [](const PyFunction& f) { return f.current().info().source_path.string(); })
      .def_prop_ro("compile_ms", [](const PyFunction& f) {
        const PhaseTimes& t = f.current().info().times;
        return t.key_ms + t.lookup_ms + t.rewrite_ms + t.codegen_ms + t.compile_ms + t.load_ms +
               t.prepare_ms;
      });

  m.def(
      "_native_call_seconds",
      [](PyFunction& f, nb::tuple args, int calls) {
        // The same calls from C++, for the Python call overhead benchmark (bench/python).
        std::vector<Tensor> inputs;
        for (nb::handle a : args) inputs.push_back(tensor_from_python(a));
        nb::gil_scoped_release release;
        const Function& fn = f.current();
        fn(inputs);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) fn(inputs);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
               calls;
      },
      nb::arg("f"), nb::arg("args"), nb::arg("calls"));
  m.def(
      "compile_path",
      [](const std::string& path, const std::string& device, std::optional<std::string> passes,
         std::optional<std::string> precision, bool device_io) {
        PyFunction f;
        const CompileOptions o = options_of(device, passes, precision, device_io);
        f.on_device = device != "cpu";
        f.device_io = device_io;
        nb::gil_scoped_release release;
        f.model = std::make_shared<ModelFunction>(path, o);
        return f;
      },
      nb::arg("path"), nb::arg("device") = "cpu", nb::arg("passes") = nb::none(),
      nb::arg("precision") = nb::none(), nb::arg("device_io") = false);
  m.def("clear_compile_memo", [] { clear_compile_memo(); },
        "Forgets the modules this process loaded: the next compile goes to the disk cache.");
  m.def(
      "compile_graph",
      [](const PyGraph& g, const std::string& device, std::optional<std::string> passes,
         bool tiered, std::optional<std::string> precision, bool device_io) {
        PyFunction f;
        const CompileOptions o = options_of(device, passes, precision, device_io);
        f.on_device = device != "cpu";
        f.device_io = device_io;
        nb::gil_scoped_release release;
        if (tiered) {
          f.graph = g.graph;
          f.tiered = std::make_shared<TieredFunction>(*f.graph, o);
        } else {
          f.function = std::make_shared<Function>(compile(*g.graph, o));
        }
        return f;
      },
      nb::arg("graph"), nb::arg("device") = "cpu", nb::arg("passes") = nb::none(),
      nb::arg("tiered") = false, nb::arg("precision") = nb::none(), nb::arg("device_io") = false,
      "device_io: inputs and outputs are device tensors (CUDA arrays; CPU arrays on the "
      "emulator). tiered: on a cache miss, calls run through the generic tier while the module "
      "compiles "
      "in the background (KILN_GENERIC_START=0 waits instead); the graph must not change "
      "afterwards.");
  m.def(
      "source",
      [](nb::handle path_or_graph, const std::string& device, std::optional<std::string> passes,
         std::optional<std::string> precision) {
        const CompileOptions o = options_of(device, passes, precision);
        if (nb::isinstance<PyGraph>(path_or_graph)) {
          const PyGraph& g = nb::cast<const PyGraph&>(path_or_graph);
          nb::gil_scoped_release release;
          return generate_source(*g.graph, o);
        }
        Graph g = load_path(nb::cast<std::string>(path_or_graph));
        nb::gil_scoped_release release;
        return generate_source(g, o);
      },
      nb::arg("path_or_graph"), nb::arg("device") = "cpu", nb::arg("passes") = nb::none(),
      nb::arg("precision") = nb::none());
}

}  // namespace kiln::python
