// kiln.compile's native half: a model file (through ModelFunction, so models built per
// input value and staged NonZero work too) or a graph compiled through the kernel cache, called
// with arrays; the GIL is released while a function runs.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <mutex>

#include "compiler/compile.h"
#include "compiler/tiered_function.h"
#include "frontend/model_function.h"
#include "frontend/model_loader.h"
#include "python/src/bindings.h"
#include "python/src/graph_handle.h"
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
                          const std::optional<std::string>& precision) {
  CompileOptions o;
  o.device = device;
  if (passes) o.passes = *passes;
  if (precision) o.precision = *precision;
  return o;
}

// A model taking or giving sequences or optionals (frontend/model_value.h): a sequence input
// is a list or tuple of arrays, an empty optional None; a sequence output comes back as a
// list, an empty optional as None.
nb::list call_values(PyFunction& self, const std::vector<std::string>& names, nb::args args,
                     nb::kwargs kwargs) {
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
      for (nb::handle e : v) elems.push_back(tensor_from_python(e));
      return ModelValue::sequence_of(std::move(elems));
    }
    return ModelValue::of(tensor_from_python(v));
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

nb::list call(PyFunction& self, nb::args args, nb::kwargs kwargs) {
  const std::vector<std::string> names = self.input_names();
  if (args.size() > names.size()) {
    throw UserError(std::to_string(args.size()) + " inputs given, the function takes " +
                    std::to_string(names.size()) + " (" +
                    [&] {
                      std::string s;
                      for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
                      return s;
                    }() +
                    ")");
  }
  if (self.model && self.model->takes_values()) return call_values(self, names, args, kwargs);
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < args.size(); ++i) inputs[names[i]] = tensor_from_python(args[i]);
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    if (inputs.count(name)) throw UserError("input '" + name + "' given twice");
    inputs[name] = tensor_from_python(value);
  }
  std::vector<Tensor> outputs;
  {
    nb::gil_scoped_release release;
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
  }
  nb::list out;
  for (Tensor& t : outputs) out.append(tensor_to_python(std::move(t)));
  return out;
}

Graph load_path(const std::string& path) {
  nb::gil_scoped_release release;
  return load_model(path);
}

}  // namespace

void bind_function(nb::module_& m) {
  nb::class_<PyFunction>(m, "Function", "A compiled model or graph: call it with arrays.")
      .def("__call__", &call)
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
         std::optional<std::string> precision) {
        PyFunction f;
        nb::gil_scoped_release release;
        f.model = std::make_shared<ModelFunction>(path, options_of(device, passes, precision));
        return f;
      },
      nb::arg("path"), nb::arg("device") = "cpu", nb::arg("passes") = nb::none(),
      nb::arg("precision") = nb::none());
  m.def("clear_compile_memo", [] { clear_compile_memo(); },
        "Forgets the modules this process loaded: the next compile goes to the disk cache.");
  m.def(
      "compile_graph",
      [](const PyGraph& g, const std::string& device, std::optional<std::string> passes,
         bool tiered, std::optional<std::string> precision) {
        PyFunction f;
        const CompileOptions o = options_of(device, passes, precision);
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
      nb::arg("tiered") = false, nb::arg("precision") = nb::none(),
      "tiered: on a cache miss, calls run through the generic tier while the module compiles "
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
