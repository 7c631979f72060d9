// kiln.graph's native half: the C++ builder (ops/builders.h) from Python. Every call runs
// the op's type inference at once, so a mismatch raises where it was made.
#include <nanobind/operators.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "ops/control_builders.h"
#include "ops/scalar_table.h"
#include "python/src/bindings.h"
#include "python/src/graph_handle.h"
#include "rewrite/autodiff/grad.h"
#include "rewrite/autodiff/optimizer.h"
#include "util/error.h"

namespace kiln::python {
namespace {

DType dtype_arg(const std::string& name) {
  auto d = dtype_from_name(name);
  if (!d) throw UserError("unknown dtype '" + name + "'");
  return *d;
}

PyVar wrap(const PyGraph& g, Var v) { return PyVar{g.graph, v}; }
PyVar wrap(const PyVar& like, Var v) { return PyVar{like.graph, v}; }

// Python values as op props: int, float, str, or lists of ints / floats.
AttrValue attr_of(const std::string& name, nb::handle v) {
  if (nb::isinstance<nb::bool_>(v) || nb::isinstance<nb::int_>(v)) return nb::cast<int64_t>(v);
  if (nb::isinstance<nb::float_>(v)) return nb::cast<double>(v);
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) {
    bool floats = false;
    for (nb::handle e : v) floats = floats || nb::isinstance<nb::float_>(e);
    if (floats) return nb::cast<std::vector<double>>(v);
    return nb::cast<std::vector<int64_t>>(v);
  }
  throw UserError("prop '" + name + "': expected an int, float, str or a list of them, got " +
                  std::string(nb::type_name(v.type()).c_str()));
}

Var operand(const PyVar& like, nb::handle other) {
  if (nb::isinstance<PyVar>(other)) return nb::cast<const PyVar&>(other).var;
  return scalar(*like.graph, like.var.dtype(), nb::cast<double>(other));
}

// What a Python step or branch returned: one Var or a sequence of them, all of `graph`.
std::vector<Var> vars_returned(nb::handle r, const std::shared_ptr<Graph>& graph,
                               const std::string& what) {
  std::vector<Var> out;
  auto add = [&](nb::handle v) {
    if (!nb::isinstance<PyVar>(v))
      throw UserError(what + " returned a " + std::string(nb::type_name(v.type()).c_str()) +
                      ", not a kiln.graph.Var");
    const PyVar& pv = nb::cast<const PyVar&>(v);
    if (pv.graph != graph) throw UserError(what + " returned a Var of another graph");
    out.push_back(pv.var);
  };
  if (nb::isinstance<PyVar>(r)) {
    add(r);
  } else {
    for (nb::handle v : r) add(v);
  }
  return out;
}

nb::list wrapped(const std::shared_ptr<Graph>& graph, const std::vector<Var>& vars) {
  nb::list out;
  for (const Var& v : vars) out.append(PyVar{graph, v});
  return out;
}

std::vector<int64_t> dims_arg(const std::vector<std::optional<int64_t>>& dims) {
  std::vector<int64_t> out;
  for (const auto& d : dims) out.push_back(d ? *d : kDynamic);  // None: dynamic
  return out;
}

}  // namespace

void bind_graph(nb::module_& m) {
  nb::class_<PyGraph>(m, "Graph", "A kiln graph under construction.")
      .def(
          "__init__",
          [](PyGraph* self, const std::string& name) {
            new (self) PyGraph{std::make_shared<Graph>(name)};
          },
          nb::arg("name") = "graph")
      .def(
          "input",
          [](const PyGraph& g, const std::string& name, const std::string& dtype,
             const std::vector<std::optional<int64_t>>& dims) {
            return wrap(g, input(*g.graph, name, dtype_arg(dtype), dims_arg(dims)));
          },
          nb::arg("name"), nb::arg("dtype"), nb::arg("shape"),
          "A graph input; None in the shape is a dimension known only at run time.")
      .def(
          "constant",
          [](const PyGraph& g, nb::handle value, const std::string& name) {
            return wrap(g, constant(*g.graph, tensor_from_python(value).clone(), name));
          },
          nb::arg("value"), nb::arg("name") = "",
          "A constant of the program (its value is in the code and the cache key).")
      .def(
          "parameter",
          [](const PyGraph& g, nb::handle value, const std::string& name) {
            return wrap(g, parameter(*g.graph, tensor_from_python(value).clone(), name));
          },
          nb::arg("value"), nb::arg("name"),
          "A weight: bound when the function runs, never in the code or the key.")
      .def(
          "scalar",
          [](const PyGraph& g, double value, const std::string& dtype) {
            return wrap(g, scalar(*g.graph, dtype_arg(dtype), value));
          },
          nb::arg("value"), nb::arg("dtype") = "float32")
      .def("set_outputs",
           [](const PyGraph& g, const std::vector<PyVar>& outs) {
             std::vector<Variable*> vars;
             for (const PyVar& v : outs) {
               if (v.graph != g.graph) throw UserError("an output belongs to another graph");
               vars.push_back(v.var.var());
             }
             g.graph->set_outputs(vars);
           })
      .def(
          "add_update",
          [](const PyGraph& g, const PyVar& state, const PyVar& value) {
            if (state.graph != g.graph || value.graph != g.graph)
              throw UserError("add_update: a value belongs to another graph");
            g.graph->add_update(state.var.var(), value.var.var());
          },
          nb::arg("state"), nb::arg("value"),
          "After each run, graph input `state` holds `value` (written in place where it can be).")
      .def_prop_ro("name", [](const PyGraph& g) { return g.graph->name(); })
      .def("__repr__", [](const PyGraph& g) {
        return "kiln.graph.Graph('" + g.graph->name() + "', " +
               std::to_string(g.graph->nodes().size()) + " nodes)";
      });

  nb::class_<PyVar>(m, "Var", "A value of a graph: an input, a constant or an op's output.")
      .def_prop_ro("dtype", [](const PyVar& v) { return std::string(dtype_name(v.var.dtype())); })
      .def_prop_ro("shape",
                   [](const PyVar& v) {
                     nb::list out;
                     for (int64_t d : v.var.type().dims) {
                       if (d == kDynamic) {
                         out.append(nb::none());
                       } else {
                         out.append(d);
                       }
                     }
                     return nb::tuple(out);
                   })
      .def_prop_ro("ndim", [](const PyVar& v) { return v.var.rank(); })
      .def_prop_ro("name", [](const PyVar& v) { return v.var.var()->name; })
      .def("__add__", [](const PyVar& a, nb::handle b) { return wrap(a, a.var + operand(a, b)); })
      .def("__radd__", [](const PyVar& a, nb::handle b) { return wrap(a, operand(a, b) + a.var); })
      .def("__sub__", [](const PyVar& a, nb::handle b) { return wrap(a, a.var - operand(a, b)); })
      .def("__rsub__", [](const PyVar& a, nb::handle b) { return wrap(a, operand(a, b) - a.var); })
      .def("__mul__", [](const PyVar& a, nb::handle b) { return wrap(a, a.var * operand(a, b)); })
      .def("__rmul__", [](const PyVar& a, nb::handle b) { return wrap(a, operand(a, b) * a.var); })
      .def("__truediv__",
           [](const PyVar& a, nb::handle b) { return wrap(a, a.var / operand(a, b)); })
      .def("__rtruediv__",
           [](const PyVar& a, nb::handle b) { return wrap(a, operand(a, b) / a.var); })
      .def("__matmul__",
           [](const PyVar& a, const PyVar& b) { return wrap(a, matmul(a.var, b.var)); })
      .def("__neg__", [](const PyVar& a) { return wrap(a, -a.var); })
      .def("__repr__", [](const PyVar& v) {
        return "kiln.graph.Var(" + v.var.var()->name + ": " + v.var.type().to_string() + ")";
      });

  m.def(
      "scalar_ops",
      [] {
        nb::list out;
        for (const ScalarOpDef& d : scalar_ops()) {
          nb::list params;
          for (const ScalarParam& p : d.params)
            params.append(nb::make_tuple(std::string(p.name), p.fallback));
          out.append(nb::make_tuple(std::string(d.name), d.arity, params));
        }
        return out;
      },
      "The scalar-op table: (name, arity, [(param, default)]) per elementwise op; kiln.graph "
      "makes its builders from it.");
  m.def(
      "grad",
      [](const PyVar& cost, const std::vector<PyVar>& wrt) {
        std::vector<Variable*> vars;
        for (const PyVar& v : wrt) {
          if (v.graph != cost.graph) throw UserError("grad: a wrt value belongs to another graph");
          vars.push_back(v.var.var());
        }
        nb::list out;
        for (Variable* gv : grad(*cost.graph, cost.var.var(), vars))
          out.append(PyVar{cost.graph, Var(cost.graph.get(), gv)});
        return out;
      },
      nb::arg("cost"), nb::arg("wrt"),
      "Reverse-mode gradients of the scalar `cost` with respect to each of `wrt`, as new Vars.");
  m.def(
      "scan",
      [](nb::callable fn, const std::vector<PyVar>& sequences, const std::vector<PyVar>& init,
         std::optional<int64_t> n_steps, bool reverse) {
        std::shared_ptr<Graph> graph = !sequences.empty() ? sequences[0].graph
                                       : !init.empty()    ? init[0].graph
                                                          : nullptr;
        if (!graph) throw UserError("scan: give at least one sequence or initial state");
        std::vector<Var> seqs, states;
        for (const PyVar& v : sequences) seqs.push_back(v.var);
        for (const PyVar& v : init) states.push_back(v.var);
        for (const PyVar& v : sequences) {
          if (v.graph != graph) throw UserError("scan: values from two graphs");
        }
        for (const PyVar& v : init) {
          if (v.graph != graph) throw UserError("scan: values from two graphs");
        }
        const ScanStep step = [&](int64_t t, const std::vector<Var>& slices,
                                  const std::vector<Var>& now) {
          return vars_returned(fn(t, wrapped(graph, slices), wrapped(graph, now)), graph,
                               "scan: step " + std::to_string(t));
        };
        const ScanResult r = scan(step, seqs, states, n_steps, reverse);
        return nb::make_tuple(wrapped(graph, r.states), wrapped(graph, r.outputs));
      },
      nb::arg("fn"), nb::arg("sequences"), nb::arg("init"), nb::arg("n_steps") = nb::none(),
      nb::arg("reverse") = false,
      "Theano's scan, unrolled into the graph (ops/control_builders.h): fn(t, slices, states) "
      "returns the new states then any per-step outputs; returns (states, stacked outputs).");
  m.def(
      "cond",
      [](const PyVar& pred, nb::callable then_fn, nb::callable else_fn) {
        auto branch = [&](nb::callable f, const char* which) {
          return [&pred, f, which] {
            return vars_returned(f(), pred.graph, std::string("cond: the ") + which + " branch");
          };
        };
        return wrapped(pred.graph,
                       cond(pred.var, branch(then_fn, "then"), branch(else_fn, "else")));
      },
      nb::arg("pred"), nb::arg("then_branch"), nb::arg("else_branch"),
      "Theano's ifelse: a condition known when built keeps one branch; otherwise where() of "
      "both, computed both.");
  m.def(
      "add_optimizer_step",
      [](const PyVar& loss, const std::vector<PyVar>& params, const std::string& spec) {
        std::vector<Variable*> vars;
        for (const PyVar& v : params) vars.push_back(v.var.var());
        nb::list out;
        for (Variable* s :
             add_optimizer_step(*loss.graph, loss.var.var(), vars, OptimizerOptions::parse(spec))) {
          out.append(PyVar{loss.graph, Var(loss.graph.get(), s)});
        }
        return out;
      },
      nb::arg("loss"), nb::arg("params"), nb::arg("optimizer"),
      "Adds the gradients and an optimizer's updates (\"sgd:lr=0.1,momentum=0.9\", "
      "\"adam:lr=1e-3\"); returns the optimizer-state inputs it created (start them at 0).");
  m.def(
      "apply",
      [](const std::string& op, const std::vector<PyVar>& inputs, nb::kwargs props) {
        if (inputs.empty()) throw UserError("op '" + op + "' needs at least one input");
        Attrs attrs;
        for (auto [k, v] : props) {
          const std::string key = nb::cast<std::string>(k);
          attrs[key] = attr_of(key, v);
        }
        std::vector<Var> vars;
        for (const PyVar& v : inputs) {
          if (v.graph != inputs[0].graph)
            throw UserError("op '" + op + "': inputs from two graphs");
          vars.push_back(v.var);
        }
        std::vector<Var> outs = apply_multi(op, vars, attrs);
        nb::list result;
        for (Var& o : outs) result.append(wrap(inputs[0], o));
        return result;
      },
      nb::arg("op"), nb::arg("inputs"), nb::arg("props"),
      "Applies any kiln op by name with props; returns its outputs.");
}

}  // namespace kiln::python
