#include "frontend/onnx/onnx_sequence.h"

#include <onnx/onnx_pb.h>

#include <set>

#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"

namespace kiln::onnx_import {
namespace {

// A value named alone (type_of and logical_dtype read a node's input).
onnx::NodeProto reading(const std::string& name) {
  onnx::NodeProto ref;
  ref.add_input(name);
  return ref;
}

DType dtype_of(OnnxImporter& im, const std::string& name) {
  onnx::NodeProto ref = reading(name);
  return im.logical_dtype(ref, 0);
}

Tensor scalar_value(DType dt, int64_t v) {
  Tensor t = Tensor::empty(dt, Shape{});
  t.store_int(0, v);
  return t;
}

const OnnxComposite& sequence_in(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  if (!OnnxImporter::has_input(n, i)) throw UserError("input " + std::to_string(i) + " is missing");
  const OnnxComposite* c = im.composite(n.input(i));
  if (!c || c->kind != ValueKind::kSequence) {
    throw UserError("input " + std::to_string(i) + " '" + n.input(i) + "' is " +
                    (c ? value_kind_name(c->kind) : "a tensor") + ", not a sequence");
  }
  return *c;
}

// A position into a sequence of `length` elements, known at load time; `end_ok`: the
// position just past the end is allowed (an insertion's).
size_t position_in(OnnxImporter& im, const onnx::NodeProto& n, int i, size_t length, bool end_ok) {
  const Tensor& t = im.const_in(n, i, "position");
  if (t.numel() != 1 || is_float(t.dtype()))
    throw UserError("position '" + n.input(i) + "' must be one integer, got " + t.describe());
  const int64_t p = t.load_int(0), len = static_cast<int64_t>(length);
  const int64_t hi = end_ok ? len : len - 1;
  if (p < -len || p > hi) {
    throw UserError("position " + std::to_string(p) + " is outside the sequence of " +
                    std::to_string(length) + " element" + (length == 1 ? "" : "s") +
                    " (allowed: " + std::to_string(-len) + " to " + std::to_string(hi) + ")");
  }
  return static_cast<size_t>(p < 0 ? p + len : p);
}

void check_element(OnnxImporter& im, const OnnxComposite& seq, const std::string& name) {
  if (im.composite(name))
    throw UserError("'" + name + "' is not a tensor; a sequence holds tensors only");
  const DType dt = dtype_of(im, name);
  if (dt != seq.elem_dtype) {
    throw UserError("'" + name + "' is " + std::string(dtype_name(dt)) + ", the sequence holds " +
                    std::string(dtype_name(seq.elem_dtype)));
  }
}

void collect_defined(const onnx::GraphProto& g, std::set<std::string>& out) {
  for (const auto& v : g.input()) out.insert(v.name());
  for (const auto& t : g.initializer()) out.insert(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output())
      if (!o.empty()) out.insert(o);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_defined(a.g(), out);
      for (const auto& sub : a.graphs()) collect_defined(sub, out);
    }
  }
}

void prefix_names(onnx::GraphProto& g, const std::set<std::string>& defined,
                  const std::string& prefix) {
  auto fix = [&](std::string* s) {
    if (!s->empty() && defined.count(*s)) *s = prefix + *s;
  };
  for (auto& v : *g.mutable_input()) fix(v.mutable_name());
  for (auto& v : *g.mutable_output()) fix(v.mutable_name());
  for (auto& v : *g.mutable_value_info()) fix(v.mutable_name());
  for (auto& t : *g.mutable_initializer()) fix(t.mutable_name());
  for (auto& n : *g.mutable_node()) {
    for (std::string& s : *n.mutable_input()) fix(&s);
    for (std::string& s : *n.mutable_output()) fix(&s);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) prefix_names(*a.mutable_g(), defined, prefix);
      for (auto& sub : *a.mutable_graphs()) prefix_names(sub, defined, prefix);
    }
  }
}

// The body's nodes join the graph under `prefix`, its inputs bound to `inputs` (the
// importer's names); returns the importer's names of its outputs.
std::vector<std::string> inline_body(OnnxImporter& im, const onnx::GraphProto& body,
                                     const std::vector<std::string>& inputs,
                                     const std::string& prefix, const SubgraphImport& sub) {
  onnx::GraphProto g = body;
  rename_locals(g, prefix);
  if (static_cast<size_t>(g.input_size()) != inputs.size()) {
    throw UserError("the body takes " + std::to_string(g.input_size()) + " inputs, given " +
                    std::to_string(inputs.size()));
  }
  for (int k = 0; k < g.input_size(); ++k)
    im.alias(g.input(k).name(), inputs[static_cast<size_t>(k)]);
  for (const auto& t : g.initializer()) {
    im.add_known(
        t.name(),
        tensor_from_onnx(t, sub.base_dir, im.origin() + ": body initializer '" + t.name() + "'"),
        true);
  }
  sub.import_nodes(g);
  std::vector<std::string> outs;
  for (const auto& o : g.output()) outs.push_back(o.name());
  return outs;
}

std::string node_id(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  for (const auto& o : n.output())
    if (!o.empty()) return o;
  return n.op_type();
}

Var stack(OnnxImporter& im, const std::vector<std::string>& elems, int64_t axis) {
  std::vector<Var> parts;
  for (const std::string& e : elems) {
    onnx::NodeProto ref = reading(e);
    Var v = im.in(ref, 0);
    parts.push_back(unsqueeze_at(v, static_cast<int>(rank_axis(axis, v.rank() + 1))));
  }
  return concat(parts, axis);
}

// A Loop whose state holds a sequence or an optional (or whose body reads one): unrolled.
void unroll_loop(OnnxImporter& im, const onnx::NodeProto& n, const SubgraphImport& sub) {
  const onnx::GraphProto& body = graph_attr(n, "body");
  const int carried = n.input_size() - 2;
  if (carried < 0) throw UserError("Loop needs its M and cond inputs (either may be \"\")");
  const std::string why =
      "; a Loop carrying or reading a sequence or an optional is unrolled when the model loads";
  auto known_input = [&](int i, const std::string& what) -> const Tensor& {
    try {
      return im.const_in(n, i, what);
    } catch (const InputValueNeeded&) {
      throw;
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(e.what() + why);
    }
  };
  std::optional<int64_t> trip;
  if (OnnxImporter::has_input(n, 0)) trip = known_input(0, "the trip count M").load_int(0);
  bool cond = !OnnxImporter::has_input(n, 1) || known_input(1, "the condition").load(0) != 0;
  if (!trip && !OnnxImporter::has_input(n, 1)) {
    throw UnsupportedError(
        "a Loop with neither a trip count M nor a condition never ends; kiln refuses it");
  }
  std::vector<std::string> state(n.input().begin() + 2, n.input().end());
  const int scans = n.output_size() - carried;
  if (scans < 0)
    throw UserError("the Loop has " + std::to_string(n.output_size()) + " outputs for " +
                    std::to_string(carried) + " carried values");
  std::vector<std::vector<std::string>> scanned(static_cast<size_t>(scans));
  const std::string id = node_id(n);
  int64_t it = 0;
  for (; cond && (!trip || it < *trip); ++it) {
    if (it == kMaxUnrolledIterations) {
      throw UnsupportedError("the Loop runs past " + std::to_string(kMaxUnrolledIterations) +
                             " iterations" + why + ", which bounds it");
    }
    const std::string prefix = id + "/" + std::to_string(it) + "/";
    im.add_known(prefix + "iteration", scalar_value(DType::kInt64, it), false);
    im.add_known(prefix + "condition", scalar_value(DType::kBool, 1), false);
    std::vector<std::string> inputs{prefix + "iteration", prefix + "condition"};
    inputs.insert(inputs.end(), state.begin(), state.end());
    const std::vector<std::string> outs = inline_body(im, body, inputs, prefix, sub);
    if (outs.size() != 1 + static_cast<size_t>(n.output_size())) {
      throw UserError("the body has " + std::to_string(outs.size()) + " outputs; the Loop has " +
                      std::to_string(n.output_size()) + " (the body gives the condition first)");
    }
    const Tensor* c = im.known(outs[0]);
    if (!c) {
      throw UnsupportedError("iteration " + std::to_string(it) + "'s condition '" + outs[0] +
                             "' is computed at run time" + why + ", which needs it then");
    }
    cond = c->load(0) != 0;
    for (int k = 0; k < carried; ++k)
      state[static_cast<size_t>(k)] = outs[1 + static_cast<size_t>(k)];
    for (int j = 0; j < scans; ++j)
      scanned[static_cast<size_t>(j)].push_back(outs[1 + static_cast<size_t>(carried + j)]);
  }
  for (int k = 0; k < carried; ++k)
    if (!n.output(k).empty()) im.alias(n.output(k), state[static_cast<size_t>(k)]);
  for (int j = 0; j < scans; ++j) {
    const std::string& out = n.output(carried + j);
    if (out.empty()) continue;
    const auto& slices = scanned[static_cast<size_t>(j)];
    if (slices.empty()) {
      throw UnsupportedError("scan output '" + out + "' after zero iterations" + why +
                             ", which leaves its shape unknown");
    }
    for (const std::string& s : slices) {
      if (im.composite(s))
        throw UnsupportedError("scan output '" + out + "' holds sequences, not tensors");
    }
    im.bind(out, stack(im, slices, 0));
    if (auto st = im.storage(slices[0])) im.set_storage(out, *st);
  }
}

bool touches_composites(OnnxImporter& im, const onnx::NodeProto& n) {
  for (const auto& in : n.input())
    if (!in.empty() && im.composite(in)) return true;
  std::vector<std::string> reads;
  std::set<std::string> seen;
  for (const auto& a : n.attribute()) {
    if (a.has_g()) free_names(a.g(), {}, reads, seen);
  }
  for (const std::string& r : reads)
    if (im.composite(r)) return true;
  return false;
}

void split_to_sequence(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.rank() == 0)
    throw UserError("SplitToSequence splits a tensor of rank 1 or more, got a scalar");
  const int64_t axis = rank_axis(attr_int(a, "axis", 0), x.rank());
  const int64_t dim = x.type().dims[static_cast<size_t>(axis)];
  if (dim == kDynamic)
    throw UnsupportedError("SplitToSequence needs a static size along axis " +
                           std::to_string(axis) + ", got " + x.type().to_string());
  Ints sizes;
  bool squeeze = false;
  if (!OnnxImporter::has_input(n, 1)) {
    sizes.assign(static_cast<size_t>(dim), 1);
    squeeze = attr_int(a, "keepdims", 1) == 0;
  } else {
    const Tensor& split = im.const_in(n, 1, "split");
    if (split.ndim() == 0) {
      const int64_t each = split.load_int(0);
      if (each <= 0) throw UserError("split " + std::to_string(each) + " is not positive");
      for (int64_t at = 0; at < dim; at += each) sizes.push_back(std::min(each, dim - at));
    } else {
      int64_t total = 0;
      for (int64_t k = 0; k < split.numel(); ++k) {
        const int64_t s = split.load_int(k);
        if (s < 0 || __builtin_add_overflow(total, s, &total))
          throw UserError("split size " + std::to_string(s) + " is negative or too large");
        sizes.push_back(s);
      }
      if (total != dim) {
        throw UserError("split sizes add up to " + std::to_string(total) + ", axis " +
                        std::to_string(axis) + " has " + std::to_string(dim));
      }
    }
  }
  OnnxComposite seq{ValueKind::kSequence, true, dtype_of(im, n.input(0)), {}};
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Var part =
        apply("slice", {x},
              {{"starts", Ints{start}}, {"ends", Ints{start + sizes[k]}}, {"axes", Ints{axis}}});
    start += sizes[k];
    if (squeeze) {
      Ints dims;
      std::vector<int> src;
      for (int d = 0; d < x.rank(); ++d) {
        if (d == axis) continue;
        dims.push_back(x.type().dims[static_cast<size_t>(d)]);
        src.push_back(d);
      }
      part = reshape_to(part, dims, src);
    }
    const std::string name = element_name(n.output(0), k);
    im.bind(name, part);
    if (auto st = im.storage(n.input(0))) im.set_storage(name, *st);
    seq.elems.push_back(name);
  }
  im.add_composite(n.output(0), std::move(seq));
}

void sequence_map(OnnxImporter& im, const onnx::NodeProto& n, const SubgraphImport& sub) {
  const onnx::GraphProto& body = graph_attr(n, "body");
  const size_t length = sequence_in(im, n, 0).elems.size();
  for (int i = 1; i < n.input_size(); ++i) {
    const OnnxComposite* c = im.composite(n.input(i));
    if (c && c->kind != ValueKind::kSequence)
      throw UserError("input " + std::to_string(i) + " '" + n.input(i) + "' is " +
                      value_kind_name(c->kind) + "; SequenceMap takes sequences and tensors");
    if (c && c->elems.size() != length) {
      throw UserError("input " + std::to_string(i) + " '" + n.input(i) + "' holds " +
                      std::to_string(c->elems.size()) + " elements, input 0 holds " +
                      std::to_string(length));
    }
  }
  if (body.output_size() != n.output_size()) {
    throw UserError("the body has " + std::to_string(body.output_size()) +
                    " outputs; SequenceMap has " + std::to_string(n.output_size()));
  }
  std::vector<OnnxComposite> outs(static_cast<size_t>(n.output_size()));
  for (int j = 0; j < body.output_size(); ++j) {
    const auto& t = body.output(j).type();
    const std::optional<DType> dt =
        t.has_tensor_type() ? dtype_from_onnx(t.tensor_type().elem_type()) : std::nullopt;
    outs[static_cast<size_t>(j)].elem_dtype = dt.value_or(DType::kFloat32);
  }
  for (size_t e = 0; e < length; ++e) {
    std::vector<std::string> inputs;
    for (int i = 0; i < n.input_size(); ++i) {
      const OnnxComposite* c = im.composite(n.input(i));
      inputs.push_back(c ? c->elems[e] : n.input(i));
    }
    const auto got = inline_body(im, body, inputs, node_id(n) + "/" + std::to_string(e) + "/", sub);
    for (size_t j = 0; j < got.size(); ++j) {
      if (im.composite(got[j]))
        throw UnsupportedError("the body's output '" + got[j] + "' is not a tensor");
      outs[j].elem_dtype = dtype_of(im, got[j]);
      outs[j].elems.push_back(got[j]);
    }
  }
  for (int j = 0; j < n.output_size(); ++j)
    if (!n.output(j).empty()) im.add_composite(n.output(j), outs[static_cast<size_t>(j)]);
}

void optional_of(OnnxImporter& im, const onnx::NodeProto& n) {
  if (OnnxImporter::has_input(n, 0)) {
    const std::string& in = n.input(0);
    const OnnxComposite* c = im.composite(in);
    if (c && c->kind != ValueKind::kSequence)
      throw UnsupportedError("an optional of " + std::string(value_kind_name(c->kind)));
    OnnxComposite opt =
        c ? *c : OnnxComposite{ValueKind::kOptionalTensor, true, dtype_of(im, in), {in}};
    if (c) opt.kind = ValueKind::kOptionalSequence;
    im.add_composite(n.output(0), std::move(opt));
    return;
  }
  const onnx::TypeProto* type = nullptr;
  for (const auto& at : n.attribute())
    if (at.name() == "type" && at.has_tp()) type = &at.tp();
  if (!type) throw UserError("an Optional without an input needs its 'type' attribute");
  OnnxComposite none{ValueKind::kOptionalTensor, false, DType::kFloat32, {}};
  const onnx::TypeProto* elem = type;
  if (type->has_sequence_type()) {
    none.kind = ValueKind::kOptionalSequence;
    elem = &type->sequence_type().elem_type();
  }
  if (!elem->has_tensor_type())
    throw UnsupportedError("an Optional's type must hold a tensor or a sequence of tensors");
  if (auto dt = dtype_from_onnx(elem->tensor_type().elem_type())) none.elem_dtype = *dt;
  im.add_composite(n.output(0), std::move(none));
}

}  // namespace

void rename_locals(onnx::GraphProto& g, const std::string& prefix) {
  std::set<std::string> defined;
  collect_defined(g, defined);
  prefix_names(g, defined, prefix);
}

bool import_sequence_op(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                        const SubgraphImport& sub) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  if (op == "Loop") {
    if (!touches_composites(im, n)) return false;
    unroll_loop(im, n, sub);
    return true;
  }
  if (op == "Identity") {
    if (!OnnxImporter::has_input(n, 0) || !im.composite(n.input(0))) return false;
    im.alias(n.output(0), n.input(0));
    return true;
  }
  if (op == "SequenceEmpty") {
    const std::optional<DType> dt = dtype_from_onnx(static_cast<int>(attr_int(a, "dtype", 1)));
    if (!dt)
      throw UnsupportedError("SequenceEmpty's dtype " + std::to_string(attr_int(a, "dtype", 1)));
    im.add_composite(n.output(0), {ValueKind::kSequence, true, *dt, {}});
  } else if (op == "SequenceConstruct") {
    if (n.input_size() == 0) throw UserError("SequenceConstruct needs at least one tensor");
    OnnxComposite seq{ValueKind::kSequence, true, dtype_of(im, n.input(0)), {}};
    for (int i = 0; i < n.input_size(); ++i) {
      check_element(im, seq, n.input(i));
      seq.elems.push_back(n.input(i));
    }
    im.add_composite(n.output(0), std::move(seq));
  } else if (op == "SequenceInsert") {
    OnnxComposite seq = sequence_in(im, n, 0);
    if (!OnnxImporter::has_input(n, 1)) throw UserError("SequenceInsert has no tensor to insert");
    check_element(im, seq, n.input(1));
    const size_t at = OnnxImporter::has_input(n, 2) ? position_in(im, n, 2, seq.elems.size(), true)
                                                    : seq.elems.size();
    seq.elems.insert(seq.elems.begin() + static_cast<std::ptrdiff_t>(at), n.input(1));
    im.add_composite(n.output(0), std::move(seq));
  } else if (op == "SequenceAt") {
    const OnnxComposite& seq = sequence_in(im, n, 0);
    im.alias(n.output(0), seq.elems[position_in(im, n, 1, seq.elems.size(), false)]);
  } else if (op == "SequenceErase") {
    OnnxComposite seq = sequence_in(im, n, 0);
    if (seq.elems.empty()) throw UserError("SequenceErase of an empty sequence");
    const size_t at = OnnxImporter::has_input(n, 1) ? position_in(im, n, 1, seq.elems.size(), false)
                                                    : seq.elems.size() - 1;
    seq.elems.erase(seq.elems.begin() + static_cast<std::ptrdiff_t>(at));
    im.add_composite(n.output(0), std::move(seq));
  } else if (op == "SequenceLength") {
    const OnnxComposite& seq = sequence_in(im, n, 0);
    im.add_known(n.output(0), scalar_value(DType::kInt64, static_cast<int64_t>(seq.elems.size())),
                 false);
  } else if (op == "SplitToSequence") {
    split_to_sequence(im, n, a);
  } else if (op == "ConcatFromSequence") {
    const OnnxComposite& seq = sequence_in(im, n, 0);
    if (seq.elems.empty()) throw UserError("ConcatFromSequence of an empty sequence");
    const int64_t axis = attr_int(a, "axis");
    Var out;
    if (attr_int(a, "new_axis", 0) != 0) {
      out = stack(im, seq.elems, axis);
    } else {
      std::vector<Var> parts;
      for (const std::string& e : seq.elems) {
        onnx::NodeProto ref = reading(e);
        parts.push_back(im.in(ref, 0));
      }
      out = concat(parts, axis);
    }
    im.bind(n.output(0), out);
    if (auto st = im.storage(seq.elems[0])) im.set_storage(n.output(0), *st);
  } else if (op == "SequenceMap") {
    sequence_map(im, n, sub);
  } else if (op == "Optional") {
    optional_of(im, n);
  } else if (op == "OptionalHasElement") {
    const OnnxComposite* c = OnnxImporter::has_input(n, 0) ? im.composite(n.input(0)) : nullptr;
    const bool has = OnnxImporter::has_input(n, 0) && (!c || c->present);
    im.add_known(n.output(0), scalar_value(DType::kBool, has ? 1 : 0), false);
  } else if (op == "OptionalGetElement") {
    if (!OnnxImporter::has_input(n, 0)) throw UserError("OptionalGetElement has no input");
    const OnnxComposite* c = im.composite(n.input(0));
    if (c && !c->present) throw UserError("the optional '" + n.input(0) + "' is empty");
    if (c && c->kind == ValueKind::kOptionalTensor) {
      im.alias(n.output(0), c->elems.at(0));
    } else if (c && c->kind == ValueKind::kOptionalSequence) {
      OnnxComposite seq = *c;
      seq.kind = ValueKind::kSequence;
      im.add_composite(n.output(0), std::move(seq));
    } else {
      im.alias(n.output(0), n.input(0));  // opset 18: a tensor or sequence passes through
    }
  } else {
    return false;
  }
  return true;
}

void add_sequence_ops(OpTable& t) {
  // import_sequence_op imports these before any converter is asked.
  const OnnxConvert never = [](OnnxImporter&, const onnx::NodeProto& n, const Attrs&) -> Outs {
    throw InternalError(n.op_type() + " reached the tensor converters");
  };
  for (const char* op : {"SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase",
                         "SequenceLength", "OptionalHasElement", "OptionalGetElement"})
    t[op] = {{}, nullptr, never};
  t["SequenceEmpty"] = {{"dtype"}, nullptr, never};
  t["SplitToSequence"] = {{"axis", "keepdims"}, nullptr, never};
  t["ConcatFromSequence"] = {{"axis", "new_axis"}, nullptr, never};
  t["SequenceMap"] = {{"body"}, nullptr, never};
  t["Optional"] = {{"type"}, nullptr, never};
}

}  // namespace kiln::onnx_import
