// ONNX control flow: Loop, Scan and an If whose condition is computed at run time. Each body
// becomes an ONNX model of its own (the values it reads from enclosing scopes become its
// inputs, or its initializers where they are known at load time), which the caller compiles
// through the kernel cache like any model and runs on the host (frontend/control_node.h) as a
// step of the enclosing model's module; where the node's output shapes depend on run-time
// values, the executor plans the steps after it once it has run. The outputs are typed here
// by importing each body once.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <optional>
#include <set>

#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {

const onnx::GraphProto& graph_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name && a.has_g()) return a.g();
  }
  throw UserError(n.op_type() + " has no '" + name + "' graph attribute");
}

void free_names(const onnx::GraphProto& g, std::set<std::string> defined,
                std::vector<std::string>& out, std::set<std::string>& seen) {
  for (const auto& in : g.input()) defined.insert(in.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) out.push_back(name);
  };
  for (const auto& node : g.node()) {
    for (const auto& in : node.input()) use(in);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) free_names(a.g(), defined, out, seen);
      for (const auto& sub : a.graphs()) free_names(sub, defined, out, seen);
    }
    for (const auto& o : node.output()) defined.insert(o);
  }
  for (const auto& o : g.output()) use(o.name());
}

namespace {
namespace fs = std::filesystem;

// What the bodies read from the enclosing graph: values known at load time go into each body
// as initializers (so its module folds and packs them like weights); the others are passed
// at run time, after the node's own inputs.
struct OuterValues {
  std::vector<std::string> runtime;
  std::vector<TensorType> runtime_types;
  std::vector<std::pair<std::string, Tensor>> known;  // in their ONNX (storage) type
};

OuterValues outer_values(OnnxImporter& im, const onnx::NodeProto& n,
                         const std::vector<const onnx::GraphProto*>& bodies) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const onnx::GraphProto* body : bodies) free_names(*body, {}, names, seen);
  OuterValues out;
  for (const std::string& name : names) {
    onnx::NodeProto ref;  // type_of and logical_dtype read a node's input
    ref.add_input(name);
    if (const Tensor* v = im.known(name)) {
      const std::optional<DType> storage = im.storage(name);
      out.known.emplace_back(name, storage ? convert_tensor(*v, *storage) : *v);
      continue;
    }
    if (!im.variable(name) && !im.sym(name)) {
      throw UserError(n.op_type() + "'s body reads '" + name +
                      "', which no graph input, initializer or earlier node gives");
    }
    TensorType t = im.type_of(ref, 0);
    t.dtype = im.logical_dtype(ref, 0);
    out.runtime.push_back(name);
    out.runtime_types.push_back(t);
  }
  return out;
}

// The body as a model: its own inputs typed `own`, then the outer run-time values.
std::string body_model(OnnxImporter& im, const onnx::GraphProto& body, const std::string& what,
                       const std::vector<TensorType>& own, const OuterValues& outer) {
  if (body.input_size() != static_cast<int>(own.size())) {
    throw UserError(what + " declares " + std::to_string(body.input_size()) +
                    " inputs; it must take " + std::to_string(own.size()));
  }
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(im.opset());
  onnx::GraphProto* g = m.mutable_graph();
  *g = body;
  for (size_t i = 0; i < own.size(); ++i)
    set_onnx_value_type(g->mutable_input(static_cast<int>(i)), own[i],
                        "kiln_in" + std::to_string(i));
  for (size_t i = 0; i < outer.runtime.size(); ++i) {
    auto* in = g->add_input();
    in->set_name(outer.runtime[i]);
    set_onnx_value_type(in, outer.runtime_types[i], "kiln_outer" + std::to_string(i));
  }
  for (const auto& [name, value] : outer.known) tensor_to_onnx(value, name, g->add_initializer());
  return m.SerializeAsString();
}

// The body's output types, from importing it once; where the import needs run-time values of
// its own (a NonZero, a shape from the iteration count), the types its outputs declare.
std::vector<TensorType> body_output_types(OnnxImporter& im, const std::string& bytes,
                                          const onnx::GraphProto& body, const std::string& what) {
  std::vector<TensorType> out;
  try {
    const Graph g = parse_onnx_model(bytes, im.origin() + ": " + what,
                                     fs::path(im.origin()).parent_path(), OnnxBindings{});
    for (const Variable* v : g.outputs()) out.push_back(v->type);
    return out;
  } catch (const InputValueNeeded&) {
  } catch (const RunTimeValueNeeded&) {
  }
  for (int i = 0; i < body.output_size(); ++i) {
    out.push_back(onnx_value_type(body.output(i), what + " output " + std::to_string(i) + " '" +
                                                      body.output(i).name() + "'"));
  }
  return out;
}

// The type a value takes over every iteration: dims that change become dynamic.
TensorType merge_types(const TensorType& a, const TensorType& b, const std::string& what) {
  if (a.dtype != b.dtype) {
    throw UserError(what + " is " + std::string(dtype_name(b.dtype)) + " but enters as " +
                    std::string(dtype_name(a.dtype)));
  }
  if (a.rank() != b.rank()) {
    throw UnsupportedError(what + " changes rank (" + a.to_string() + " to " + b.to_string() +
                           "); kiln's bodies keep each value's rank");
  }
  TensorType m = a;
  for (size_t d = 0; d < m.dims.size(); ++d) {
    if (a.dims[d] != b.dims[d]) m.dims[d] = kDynamic;
  }
  return m;
}

// Imports a loop body with `own` input types until the carried values' types are stable (`own`
// ends holding them)
// (the first `first_carried` inputs are not carried; output k + out_offset carries input
// k + first_carried). Returns the serialized body and its output types.
std::pair<std::string, std::vector<TensorType>> typed_body(
    OnnxImporter& im, const onnx::GraphProto& body, const std::string& what,
    std::vector<TensorType>& own, size_t first_carried, size_t carried, size_t out_offset,
    const OuterValues& outer) {
  for (int round = 0;; ++round) {
    std::string bytes = body_model(im, body, what, own, outer);
    std::vector<TensorType> outs = body_output_types(im, bytes, body, what);
    if (outs.size() < out_offset + carried) {
      throw UserError(what + " has " + std::to_string(outs.size()) + " outputs; it must give " +
                      std::to_string(out_offset + carried) + " at least");
    }
    bool stable = true;
    for (size_t k = 0; k < carried; ++k) {
      TensorType& in = own[first_carried + k];
      const TensorType merged = merge_types(in, outs[out_offset + k],
                                            what + " output " + std::to_string(out_offset + k) +
                                                " (carried value " + std::to_string(k) + ")");
      stable = stable && merged == in;
      in = merged;
    }
    // Each round makes one more dimension dynamic at least, so rank + 1 rounds suffice.
    if (stable || round > 64) return {bytes, outs};
  }
}

std::vector<std::string> outputs_of(const onnx::NodeProto& n) {
  return {n.output().begin(), n.output().end()};
}

std::string node_label(const onnx::NodeProto& n) {
  return n.name().empty() ? n.op_type() : n.op_type() + " '" + n.name() + "'";
}

// True when the body's condition output is its condition input unchanged (directly, through
// Identity nodes, or a constant true): a for loop, as exporters write `for i in range(n)`.
bool condition_passes_through(const onnx::GraphProto& body) {
  if (body.input_size() < 2 || body.output_size() < 1) return false;
  std::string name = body.output(0).name();
  for (int hops = 0; hops <= body.node_size(); ++hops) {
    if (name == body.input(1).name()) return true;
    const onnx::NodeProto* producer = nullptr;
    for (const auto& node : body.node())
      for (const auto& o : node.output())
        if (o == name) producer = &node;
    if (!producer) return false;
    if (producer->op_type() == "Constant" && producer->domain().empty()) {
      for (const auto& a : producer->attribute()) {
        if (a.name() != "value" || !a.has_t()) continue;
        const Tensor v = tensor_from_onnx(a.t(), {}, "the body's condition");
        return v.numel() == 1 && v.load(0) != 0;
      }
      return false;
    }
    if (producer->op_type() != "Identity" || producer->input_size() != 1) return false;
    name = producer->input(0);
  }
  return false;
}

// The exact number of iterations when it is known as the model loads: a trip count M known
// then, a condition absent or known true, and a body that passes the condition through.
std::optional<int64_t> static_trip_count(OnnxImporter& im, const onnx::NodeProto& n,
                                         const onnx::GraphProto& body) {
  if (!OnnxImporter::has_input(n, 0)) return std::nullopt;
  const Tensor* m = im.known(n.input(0));
  if (!m || m->numel() != 1) return std::nullopt;
  if (OnnxImporter::has_input(n, 1)) {
    const Tensor* cond = im.known(n.input(1));
    if (!cond || cond->numel() != 1) return std::nullopt;
    if (cond->load(0) == 0) return int64_t{0};
  }
  if (!condition_passes_through(body)) return std::nullopt;
  return std::max<int64_t>(0, m->load_int(0));
}

// Loop (opsets 1-17): M, cond, N carried values; the body maps (i, cond, carried) to
// (cond, carried, K scan outputs).
[[noreturn]] void stage_loop(OnnxImporter& im, const onnx::NodeProto& n) {
  const onnx::GraphProto& body = graph_attr(n, "body");
  if (!OnnxImporter::has_input(n, 0) && !OnnxImporter::has_input(n, 1)) {
    throw UnsupportedError(
        "a Loop with neither a trip count M nor a condition never ends; kiln refuses it");
  }
  const int carried = n.input_size() - 2;
  if (carried < 0) throw UserError("Loop needs its M and cond inputs (either may be \"\")");
  std::vector<TensorType> own{TensorType{DType::kInt64, {}}, TensorType{DType::kBool, {}}};
  for (int k = 0; k < carried; ++k) {
    TensorType t = im.type_of(n, 2 + k);
    t.dtype = im.logical_dtype(n, 2 + k);
    own.push_back(t);
  }
  const OuterValues outer = outer_values(im, n, {&body});
  const std::string what = node_label(n) + "'s body";
  auto [bytes, outs] = typed_body(im, body, what, own, 2, static_cast<size_t>(carried), 1, outer);
  if (outs.size() != static_cast<size_t>(n.output_size()) + 1) {
    throw UserError(what + " has " + std::to_string(outs.size()) + " outputs; the Loop has " +
                    std::to_string(n.output_size()) + " (the body gives the condition first)");
  }
  // One slice per iteration: a static count when the trip count is exact.
  const std::optional<int64_t> trips = static_trip_count(im, n, body);
  std::vector<TensorType> types;
  for (int k = 0; k < n.output_size(); ++k) {
    TensorType t = outs[static_cast<size_t>(k) + 1];
    if (k < carried) {
      t = own[2 + static_cast<size_t>(k)];
    } else {
      t.dims.insert(t.dims.begin(), trips.value_or(kDynamic));
    }
    types.push_back(t);
  }
  std::vector<std::string> values(n.input().begin(), n.input().end());
  values.insert(values.end(), outer.runtime.begin(), outer.runtime.end());
  throw RunTimeValueNeeded(
      values, outputs_of(n), types, "Loop",
      {{"body", bytes}, {"inputs", static_cast<int64_t>(n.input_size())}},
      "Loop: its body runs as a compiled model of its own, driven by kiln run "
      "and ModelFunction as a step of the model's module (one whose output sizes "
      "depend on run-time values plans the steps after it once it has run)");
}

int64_t norm_axis(int64_t axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= rank) {
    throw UserError(what + " " + std::to_string(axis) + " is outside a rank-" +
                    std::to_string(rank) + " value");
  }
  return axis < 0 ? axis + rank : axis;
}

// Scan: opset 8 (a batch axis on every input, sequence_lens first) and 9-17 (scan axes and
// directions per input and output).
[[noreturn]] void stage_scan(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const onnx::GraphProto& body = graph_attr(n, "body");
  const bool batched = im.opset() < 9;
  const int first = batched ? 1 : 0;  // opset 8's sequence_lens
  const int64_t scans = attr_int(a, "num_scan_inputs", -1);
  const int given = n.input_size() - first;
  if (scans < 1 || scans > given) {
    throw UserError("num_scan_inputs is " + std::to_string(scans) + "; the Scan has " +
                    std::to_string(given) + " inputs");
  }
  const int states = given - static_cast<int>(scans);
  if (n.output_size() < states) {
    throw UserError("the Scan has " + std::to_string(n.output_size()) +
                    " outputs, fewer than its " + std::to_string(states) + " state values");
  }
  const int scan_outs = n.output_size() - states;
  auto ints = [&](const char* name, int count, int64_t fallback) {
    std::vector<int64_t> v = attr_ints(a, name, std::vector<int64_t>(count, fallback));
    if (static_cast<int>(v.size()) != count) {
      throw UserError(std::string(name) + " has " + std::to_string(v.size()) +
                      " entries; the Scan needs " + std::to_string(count));
    }
    return v;
  };
  std::vector<int64_t> in_axes = ints("scan_input_axes", static_cast<int>(scans), 0);
  std::vector<int64_t> in_dirs = batched
                                     ? ints("directions", static_cast<int>(scans), 0)
                                     : ints("scan_input_directions", static_cast<int>(scans), 0);
  std::vector<int64_t> out_axes = ints("scan_output_axes", scan_outs, 0);
  const std::vector<int64_t> out_dirs = ints("scan_output_directions", scan_outs, 0);
  for (int64_t d : in_dirs)
    if (d != 0 && d != 1) throw UserError("a scan direction is 0 or 1, got " + std::to_string(d));
  for (int64_t d : out_dirs)
    if (d != 0 && d != 1) throw UserError("a scan direction is 0 or 1, got " + std::to_string(d));
  if (batched && (a.count("scan_input_axes") || a.count("scan_output_axes")))
    throw UserError("opset 8's Scan has no scan axes attributes");

  std::vector<TensorType> own;
  for (int k = 0; k < states; ++k) {
    TensorType t = im.type_of(n, first + k);
    t.dtype = im.logical_dtype(n, first + k);
    if (batched) {
      if (t.rank() < 1)
        throw UserError("opset 8's Scan state " + std::to_string(k) + " has no batch axis");
      t.dims.erase(t.dims.begin());
    }
    own.push_back(t);
  }
  int64_t length = -1;  // the static scan length, when every input's is known
  for (int k = 0; k < scans; ++k) {
    TensorType t = im.type_of(n, first + states + k);
    t.dtype = im.logical_dtype(n, first + states + k);
    if (batched) {
      if (t.rank() < 2)
        throw UserError("opset 8's Scan input " + std::to_string(k) + " needs batch and scan axes");
      t.dims.erase(t.dims.begin());
    }
    const size_t axis = static_cast<size_t>(
        norm_axis(in_axes[static_cast<size_t>(k)], t.rank(), "scan_input_axes entry"));
    in_axes[static_cast<size_t>(k)] = static_cast<int64_t>(axis);
    const int64_t len = t.dims[axis];
    if (k == 0) length = len;
    if (len != length) length = kDynamic;
    t.dims.erase(t.dims.begin() + static_cast<std::ptrdiff_t>(axis));
    own.push_back(t);
  }
  const OuterValues outer = outer_values(im, n, {&body});
  const std::string what = node_label(n) + "'s body";
  auto [bytes, outs] = typed_body(im, body, what, own, 0, static_cast<size_t>(states), 0, outer);
  if (outs.size() != static_cast<size_t>(n.output_size())) {
    throw UserError(what + " has " + std::to_string(outs.size()) + " outputs; the Scan has " +
                    std::to_string(n.output_size()));
  }
  std::vector<TensorType> types;
  for (int k = 0; k < n.output_size(); ++k) {
    TensorType t = k < states ? own[static_cast<size_t>(k)] : outs[static_cast<size_t>(k)];
    if (k >= states) {
      const size_t j = static_cast<size_t>(k - states);
      out_axes[j] = norm_axis(out_axes[j], t.rank() + 1, "scan_output_axes entry");
      t.dims.insert(t.dims.begin() + out_axes[j], length < 0 ? kDynamic : length);
    }
    if (batched) t.dims.insert(t.dims.begin(), im.type_of(n, first).dims.at(0));
    types.push_back(t);
  }
  std::vector<std::string> values(n.input().begin(), n.input().end());
  values.insert(values.end(), outer.runtime.begin(), outer.runtime.end());
  throw RunTimeValueNeeded(
      values, outputs_of(n), types, "Scan",
      {{"body", bytes},
       {"inputs", static_cast<int64_t>(n.input_size())},
       {"states", static_cast<int64_t>(states)},
       {"batched", static_cast<int64_t>(batched)},
       {"input_axes", in_axes},
       {"input_directions", in_dirs},
       {"output_axes", out_axes},
       {"output_directions", out_dirs}},
      "Scan: its body runs as a compiled model of its own, driven by kiln run "
      "and ModelFunction as a step of the model's module (one whose output sizes "
      "depend on run-time values plans the steps after it once it has run)");
}

}  // namespace

void stage_if(OnnxImporter& im, const onnx::NodeProto& n) {
  const onnx::GraphProto& then_g = graph_attr(n, "then_branch");
  const onnx::GraphProto& else_g = graph_attr(n, "else_branch");
  if (!OnnxImporter::has_input(n, 0)) throw UserError("If has no condition");
  // Sequences are followed when the model loads (onnx_sequence.h): a branch giving one needs
  // the condition then.
  for (const onnx::GraphProto* branch : {&then_g, &else_g}) {
    for (const auto& o : branch->output()) {
      if (o.type().has_sequence_type() || o.type().has_optional_type())
        throw UnsupportedError("its output '" + o.name() +
                               "' is a sequence or an optional, which kiln follows when the "
                               "model loads, so the condition must be known then (a constant, "
                               "or a graph input); '" +
                               n.input(0) + "' is computed at run time");
    }
  }
  const OuterValues outer = outer_values(im, n, {&then_g, &else_g});
  const std::string label = node_label(n);
  const std::string then_bytes = body_model(im, then_g, label + "'s then_branch", {}, outer);
  const std::string else_bytes = body_model(im, else_g, label + "'s else_branch", {}, outer);
  const std::vector<TensorType> then_types =
      body_output_types(im, then_bytes, then_g, label + "'s then_branch");
  const std::vector<TensorType> else_types =
      body_output_types(im, else_bytes, else_g, label + "'s else_branch");
  if (then_types.size() != static_cast<size_t>(n.output_size()) ||
      else_types.size() != static_cast<size_t>(n.output_size())) {
    throw UserError("the branches give " + std::to_string(then_types.size()) + " and " +
                    std::to_string(else_types.size()) + " outputs; the If has " +
                    std::to_string(n.output_size()));
  }
  std::vector<TensorType> types;
  for (size_t k = 0; k < then_types.size(); ++k) {
    types.push_back(
        merge_types(then_types[k], else_types[k], "else_branch output " + std::to_string(k)));
  }
  std::vector<std::string> values{n.input(0)};
  values.insert(values.end(), outer.runtime.begin(), outer.runtime.end());
  throw RunTimeValueNeeded(values, outputs_of(n), types, "If",
                           {{"then_branch", then_bytes}, {"else_branch", else_bytes}},
                           "If with a condition known only at run time: each branch runs as a "
                           "compiled model of its own, chosen by kiln run and ModelFunction as a "
                           "step of the model's module (when the branches' shapes differ, the "
                           "steps after it are planned once it has run)");
}

void add_control_ops(OpTable& t) {
  t["Loop"] = {
      {"body"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) -> Outs {
        stage_loop(im, n);
      }};
  t["Scan"] = {{"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
                "scan_output_axes", "scan_output_directions", "directions"},
               nullptr,
               [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) -> Outs {
                 stage_scan(im, n, a);
               }};
}

}  // namespace kiln::onnx_import
