#include "frontend/onnx/onnx_model.h"

#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_qdq.h"
#include "frontend/onnx/onnx_sequence.h"
#include "frontend/onnx/onnx_sym.h"
#include "frontend/onnx/onnx_tensor.h"
#include "frontend/onnx/onnx_wire.h"
#include "ops/library/op_library.h"
#include "ops/registry.h"
#include "runtime/io/mapped_file.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

std::string node_where(const onnx::NodeProto& n, int index) {
  std::string s = "node " + std::to_string(index);
  if (!n.name().empty()) s += " '" + n.name() + "'";
  return s + " (" + (n.domain().empty() || n.domain() == "ai.onnx" ? "" : n.domain() + ".") +
         n.op_type() + ")";
}

// Attributes as kiln props; TENSOR and GRAPH attributes are left to the converters.
Attrs attrs_of(const onnx::NodeProto& n) {
  Attrs a;
  for (const auto& at : n.attribute()) {
    switch (at.type()) {
      case onnx::AttributeProto::INT:
        a[at.name()] = static_cast<int64_t>(at.i());
        break;
      case onnx::AttributeProto::FLOAT:
        a[at.name()] = static_cast<double>(at.f());
        break;
      case onnx::AttributeProto::STRING:
        a[at.name()] = at.s();
        break;
      case onnx::AttributeProto::INTS:
        a[at.name()] = std::vector<int64_t>(at.ints().begin(), at.ints().end());
        break;
      case onnx::AttributeProto::FLOATS: {
        std::vector<double> v(at.floats().begin(), at.floats().end());
        a[at.name()] = v;
        break;
      }
      default:
        break;
    }
  }
  return a;
}

int default_opset(const onnx::ModelProto& m, const std::string& origin) {
  int opset = -1;
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(o.version());
  }
  if (opset < 0 && m.opset_import_size() > 0) {
    // Only other domains (a training-domain optimizer): no default-domain op can appear.
    return kOnnxMaxOpset;
  }
  if (opset < 0) {
    // IR version 2 models carry no opset_import; they are opset 1, which kiln predates.
    throw UnsupportedError(origin + ": the model imports no default-domain opset");
  }
  if (opset < kOnnxMinOpset || opset > kOnnxMaxOpset) {
    throw UnsupportedError(origin + ": opset " + std::to_string(opset) +
                           " is outside the supported " + std::to_string(kOnnxMinOpset) + ".." +
                           std::to_string(kOnnxMaxOpset));
  }
  return opset;
}

}  // namespace

void set_onnx_value_type(onnx::ValueInfoProto* v, const TensorType& t,
                         const std::string& dim_prefix) {
  v->mutable_type()->Clear();
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_dtype_code(t.dtype));
  auto* shape = tt->mutable_shape();
  for (size_t d = 0; d < t.dims.size(); ++d) {
    auto* dim = shape->add_dim();
    if (t.dims[d] == kDynamic) {
      // Distinct names: a shared dim_param would claim two sizes equal.
      dim->set_dim_param(dim_prefix + "_" + std::to_string(d));
    } else {
      dim->set_dim_value(t.dims[d]);
    }
  }
}

TensorType onnx_value_type(const onnx::ValueInfoProto& v, const std::string& where) {
  if (!v.type().has_tensor_type())
    throw UnsupportedError(where + ": only tensor values are supported");
  const auto& tt = v.type().tensor_type();
  auto dt = dtype_from_onnx(tt.elem_type());
  if (!dt) {
    throw UnsupportedError(where + ": element type " + onnx_dtype_name(tt.elem_type()) +
                           " is not supported");
  }
  if (!tt.has_shape())
    throw UnsupportedError(where + ": the value has no shape (its rank must be known)");
  TensorType t{*dt, {}};
  for (const auto& d : tt.shape().dim())
    t.dims.push_back(d.has_dim_value() ? d.dim_value() : kDynamic);
  return t;
}

namespace {

// What a declared type holds, and the tensor type of a sequence's or optional's element.
ValueKind value_kind(const onnx::TypeProto& t, const std::string& where,
                     onnx::ValueInfoProto* element = nullptr) {
  if (t.has_tensor_type() || t.value_case() == onnx::TypeProto::VALUE_NOT_SET) {
    if (element) *element->mutable_type() = t;
    return ValueKind::kTensor;
  }
  const onnx::TypeProto* inner = &t;
  bool optional = false;
  if (t.has_optional_type()) {
    optional = true;
    inner = &t.optional_type().elem_type();
  }
  bool sequence = false;
  if (inner->has_sequence_type()) {
    sequence = true;
    inner = &inner->sequence_type().elem_type();
  }
  if (!inner->has_tensor_type() || (!optional && !sequence)) {
    throw UnsupportedError(where +
                           ": only tensors, sequences of tensors and optionals of either are "
                           "supported");
  }
  if (element) *element->mutable_type() = *inner;
  if (optional) return sequence ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor;
  return ValueKind::kSequence;
}

// Every unsupported op, attribute and output in the graph, in one list.
void check_supported(const onnx::GraphProto& g, int opset, const std::string& origin) {
  std::vector<std::string> problems;
  std::set<std::string> bad_ops;
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    const OnnxOpSpec* spec = find_onnx_op(n.domain(), n.op_type());
    // An op library's op checks its own attributes when the node is built.
    if (!spec && find_library_onnx_op(n.domain(), n.op_type())) continue;
    if (!spec) {
      problems.push_back(node_where(n, i) + ": op " + n.op_type() + " is not supported");
      bad_ops.insert((default_domain ? "" : n.domain() + ".") + n.op_type());
      continue;
    }
    for (const auto& at : n.attribute()) {
      if (std::find(spec->attrs.begin(), spec->attrs.end(), at.name()) == spec->attrs.end()) {
        problems.push_back(node_where(n, i) + ": attribute '" + at.name() + "' is not supported");
      }
    }
    if (spec->check) {
      try {
        for (const auto& p : spec->check(attrs_of(n), n, opset))
          problems.push_back(node_where(n, i) + ": " + p);
      } catch (const UserError& e) {
        problems.push_back(node_where(n, i) + ": " + e.what());
      }
    }
  }
  if (problems.empty()) return;
  std::string msg = origin + ": the model uses " + std::to_string(problems.size()) +
                    " unsupported feature" + (problems.size() == 1 ? "" : "s");
  if (!bad_ops.empty())
    msg += " (ops: " + join(std::vector<std::string>(bad_ops.begin(), bad_ops.end()), ", ") + ")";
  msg += ":";
  for (const auto& p : problems) msg += "\n  " + p;
  throw UnsupportedError(msg);
}

bool is_onnx_op(const onnx::NodeProto& n, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (n.op_type() == name) return true;
  }
  return false;
}

// uint64 values compute as int64 (the same bits): sums, differences, products and moves
// stay exact, but an order or a quotient of values past 2^63 would not. Such ops on uint64
// are refused rather than answered wrongly.
void check_storage_inputs(OnnxImporter& im, const onnx::NodeProto& n) {
  bool u64 = false;
  for (int i = 0; i < n.input_size(); ++i) {
    u64 = u64 || (!n.input(i).empty() && im.storage(n.input(i)) == DType::kUInt64);
  }
  if (u64 && !is_onnx_op(n, {"Add",     "Sub",       "Mul",       "Identity", "Reshape", "Flatten",
                             "Squeeze", "Unsqueeze", "Transpose", "Concat",   "Slice",   "Split",
                             "Gather",  "Expand",    "Cast",      "CastLike", "Equal",   "Where",
                             "Sum",     "BitShift",  "Min",       "Max",      "Mod",     "Pow"})) {
    throw UnsupportedError(n.op_type() +
                           " on uint64 values (computed as int64, so values past "
                           "2^63 would order and divide wrongly)");
  }
}

// After an op on storage-type values, its results are stored back in that type: rounded
// to float16 / bfloat16, or wrapped to the narrow integer, as a storage-type kernel would
// (ops that only move or select values need nothing). Outputs of ONNX's fixed types (indices,
// shapes, booleans) are left alone; Cast decides its own type.
void round_to_storage(OnnxImporter& im, const onnx::NodeProto& n, std::vector<Var>& outs) {
  const bool own_type =
      is_onnx_op(n, {"Cast", "CastLike", "ArgMax", "ArgMin", "Shape", "Size", "NonZero"});
  std::optional<DType> st;
  for (int i = 0; i < n.input_size() && !st; ++i) {
    if (!n.input(i).empty()) st = im.storage(n.input(i));
  }
  const bool moves_only = is_onnx_op(
      n, {"Identity", "Reshape", "Flatten", "Squeeze",        "Unsqueeze", "Transpose", "Concat",
          "Slice",    "Split",   "Gather",  "GatherElements", "Expand",    "Tile",      "Pad",
          "Max",      "Min",     "Where",   "Relu",           "MaxPool",   "ReduceMax", "ReduceMin",
          "Dropout",  "Clip"});
  for (size_t k = 0; k < outs.size() && static_cast<int>(k) < n.output_size(); ++k) {
    const DType dt = outs[k].dtype();
    if (auto compute = OnnxImporter::compute_type(dt)) {
      // A converter made a storage-type value (Constant, Cast): enter its compute type.
      // (A Cast to bfloat16 feeding a MatMul with a bfloat16 weight, which enters as float32,
      // met it in bfloat16 before this applied to Cast.)
      outs[k] = apply("convert", {outs[k]}, {{"to", std::string(dtype_name(*compute))}});
      im.set_storage(n.output(static_cast<int>(k)), dt);
      continue;
    }
    if (own_type || !st || OnnxImporter::compute_type(*st) != dt) continue;
    if (n.op_type() == "TopK" && k == 1) continue;  // indices
    if (!moves_only) {
      outs[k] =
          apply("convert", {apply("convert", {outs[k]}, {{"to", std::string(dtype_name(*st))}})},
                {{"to", std::string(dtype_name(dt))}});
    }
    im.set_storage(n.output(static_cast<int>(k)), *st);
  }
}

// A node of a custom domain (or an op kiln lacks) that a loaded op library implements: every
// given input in order, every attribute, and as many outputs as the op infers.
std::vector<Var> convert_library_op(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  auto def = find_library_onnx_op(n.domain(), n.op_type());
  check_internal(def != nullptr, "library op vanished");
  for (const auto& at : n.attribute()) {
    if (!a.count(at.name())) {
      throw UnsupportedError("attribute '" + at.name() +
                             "' is a tensor or graph, which ops from "
                             "op libraries do not take");
    }
  }
  std::vector<Variable*> inputs;
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty()) {
      throw UnsupportedError("input " + std::to_string(i) + " is omitted; " + def->where() +
                             " takes its inputs in order");
    }
    inputs.push_back(im.in(n, i).var());
  }
  Node* node = im.graph().add_node(OpRegistry::instance().create(def->name, a), inputs, n.name());
  std::vector<Var> outs;
  for (Variable* v : node->outputs) outs.push_back(Var(&im.graph(), v));
  return outs;
}

// Names become C comments, JSON, file names and messages: proto2 strings may hold any bytes,
// so a name that is not UTF-8 is refused here, naming where it is, before anything is built.
void check_names_utf8(const onnx::GraphProto& g, const std::string& where) {
  auto check = [&](const std::string& name, const std::string& what) {
    if (!is_utf8(name))
      throw UserError(where + ": " + what + " " + in_quotes(name) + " is not UTF-8");
  };
  check(g.name(), "the graph name");
  for (const auto& v : g.input()) check(v.name(), "graph input");
  for (const auto& v : g.output()) check(v.name(), "graph output");
  for (const auto& v : g.value_info()) check(v.name(), "value_info");
  for (const auto& t : g.initializer()) check(t.name(), "initializer");
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const std::string node = "node " + std::to_string(i) + " (" + terminal_line(n.op_type()) + ")";
    check(n.name(), node + ": the name");
    check(n.op_type(), node + ": the op type");
    check(n.domain(), node + ": the domain");
    for (int k = 0; k < n.input_size(); ++k)
      check(n.input(k), node + ": input " + std::to_string(k));
    for (int k = 0; k < n.output_size(); ++k)
      check(n.output(k), node + ": output " + std::to_string(k));
    for (const auto& a : n.attribute()) {
      check(a.name(), node + ": an attribute name");
      if (a.has_g()) check_names_utf8(a.g(), where + ": " + node + " attribute " + a.name());
      for (const auto& sub : a.graphs())
        check_names_utf8(sub, where + ": " + node + " attribute " + a.name());
    }
  }
}

// The checks every parsed model gets, however it was read.
void check_model_proto(const onnx::ModelProto& model, const std::string& origin) {
  if (!model.has_graph())
    throw UserError(origin + ": the model has no graph (is this an ONNX model file?)");
  check_names_utf8(model.graph(), origin);
}

onnx::ModelProto parse_model_proto(const std::string& bytes, const std::string& origin) {
  onnx::ModelProto model;
  if (bytes.empty()) throw UserError(origin + ": the file is empty");
  if (!model.ParseFromString(bytes)) {
    throw UserError(origin +
                    ": not a valid ONNX model (the protobuf data is truncated or corrupt; " +
                    std::to_string(bytes.size()) + " bytes read)");
  }
  check_model_proto(model, origin);
  return model;
}

// A parsed model file, and where the initializers' raw_data lies when it was lifted out of
// the bytes protobuf parsed (onnx_wire.h).
struct ModelFile {
  onnx::ModelProto model;
  std::shared_ptr<Storage> mapping;
  std::vector<std::optional<RawDataSpan>> raw;
};

// Parsed as it is read, through a 1 MiB buffer: the weights are copied once, from the page
// cache into their strings, with no buffer of the whole file between (for a 100 MB model,
// a buffer the file's size cost as much as the parse).
onnx::ModelProto parse_model_stream(int fd, const std::string& origin) {
  const auto unreadable = [&](const std::string& why) {
    return UserError(origin + ": cannot read the model file (" + why + ")");
  };
  google::protobuf::io::FileInputStream in(fd, 1 << 20);
  onnx::ModelProto model;
  const bool parsed = model.ParseFromZeroCopyStream(&in);
  if (in.GetErrno() != 0) throw unreadable(std::string("read: ") + std::strerror(in.GetErrno()));
  if (in.ByteCount() == 0) throw UserError(origin + ": the file is empty");
  if (!parsed) {
    throw UserError(origin +
                    ": not a valid ONNX model (the protobuf data is truncated or corrupt; " +
                    std::to_string(in.ByteCount()) + " bytes read)");
  }
  check_model_proto(model, origin);
  return model;
}

// Mapped, with the initializers' raw_data left in the mapping, so each weight is copied at
// most once; anything the wire walk does not take (a malformed file, a pipe) is parsed as a
// stream, whose errors say what is wrong.
ModelFile parse_model_file(const fs::path& path) {
  const std::string origin = path.string();
  const auto unreadable = [&](const std::string& why) {
    return UserError(origin + ": cannot read the model file (" + why + ")");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw unreadable("cannot open '" + origin + "': " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw unreadable(std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw unreadable("cannot read '" + origin + "': it is a folder");
  ModelFile file;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    try {
      file.mapping = map_file(fd, static_cast<size_t>(st.st_size), path);
    } catch (const UserError&) {
      file.mapping.reset();  // read as a stream instead
    }
  }
  if (file.mapping) {
    const std::string_view bytes(static_cast<const char*>(file.mapping->data()),
                                 file.mapping->bytes());
    std::optional<LiftedModel> lifted = lift_initializer_data(bytes);
    if (lifted && file.model.ParseFromString(lifted->rest) &&
        lifted->raw.size() == static_cast<size_t>(file.model.graph().initializer_size())) {
      check_model_proto(file.model, origin);
      file.raw = std::move(lifted->raw);
      return file;
    }
    file.model.Clear();
    file.mapping.reset();
  }
  file.model = parse_model_stream(fd, origin);
  return file;
}

}  // namespace

std::vector<ModelInput> onnx_model_inputs(const std::string& bytes, const std::string& origin,
                                          std::vector<ValueKind>* output_kinds) {
  const onnx::ModelProto model = parse_model_proto(bytes, origin);
  if (output_kinds) {
    output_kinds->clear();
    for (const auto& o : model.graph().output())
      output_kinds->push_back(value_kind(o.type(), origin + ": graph output '" + o.name() + "'"));
  }
  const auto& gp = model.graph();
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) init_names.insert(t.name());
  std::vector<ModelInput> out;
  for (int i = 0; i < gp.input_size(); ++i) {
    const auto& v = gp.input(i);
    if (init_names.count(v.name())) continue;
    const std::string where = origin + ": graph input " + std::to_string(i) + " '" + v.name() + "'";
    onnx::ValueInfoProto element;
    const ValueKind kind = value_kind(v.type(), where, &element);
    // A sequence's elements may leave their shape undeclared: each call's give their ranks.
    const bool unranked = kind != ValueKind::kTensor && !element.type().tensor_type().has_shape();
    if (unranked) element.mutable_type()->mutable_tensor_type()->mutable_shape();
    out.push_back({v.name(), onnx_value_type(element, where), kind});
  }
  return out;
}

std::vector<ValueKind> onnx_output_kinds(const std::string& bytes, const std::string& origin) {
  std::vector<ValueKind> kinds;
  onnx_model_inputs(bytes, origin, &kinds);
  return kinds;
}

Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const fs::path& base_dir) {
  return parse_onnx_model(bytes, origin, base_dir, OnnxBindings{});
}

Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const fs::path& base_dir,
                       const std::map<std::string, Tensor>& input_values) {
  OnnxBindings bindings;
  bindings.input_values = input_values;
  return parse_onnx_model(bytes, origin, base_dir, bindings);
}

namespace {

// Every name a node reads: its inputs and what its subgraphs read from enclosing scopes.
void node_reads(const onnx::NodeProto& n, std::vector<std::string>& out) {
  for (const auto& in : n.input())
    if (!in.empty()) out.push_back(in);
  std::function<void(const onnx::GraphProto&)> sub = [&](const onnx::GraphProto& g) {
    for (const auto& m : g.node()) {
      for (const auto& in : m.input())
        if (!in.empty()) out.push_back(in);
      for (const auto& a : m.attribute()) {
        if (a.has_g()) sub(a.g());
        for (const auto& s2 : a.graphs()) sub(s2);
      }
    }
    for (const auto& o : g.output()) out.push_back(o.name());
  };
  for (const auto& a : n.attribute()) {
    if (a.has_g()) sub(a.g());
    for (const auto& g : a.graphs()) sub(g);
  }
}

}  // namespace

std::string onnx_prefix_model(const std::string& bytes, const std::string& origin,
                              const std::vector<std::string>& values,
                              const std::map<std::string, TensorType>& available,
                              std::vector<std::string>* carried) {
  onnx::ModelProto model = parse_model_proto(bytes, origin);
  auto* gp = model.mutable_graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < gp->node_size(); ++i) {
    for (const std::string& out : gp->node(i).output())
      if (!out.empty()) producer[out] = i;
  }
  int last = -1;
  for (const std::string& value : values) {
    bool known = false;  // a graph input or an initializer
    for (const auto& in : gp->input()) known = known || in.name() == value;
    for (const auto& init : gp->initializer()) known = known || init.name() == value;
    auto at = producer.find(value);
    if (at == producer.end() && !known)
      throw UserError(origin + ": no node produces '" + value + "'");
    if (at != producer.end()) last = std::max(last, at->second);
  }
  std::vector<std::string> outputs = values;
  if (carried) {
    // What the rest reads from the cut: node outputs before it read by a node after it or by
    // the model's outputs. Shape arithmetic (values computed only from Shape, Size and
    // constants) stays out: its readers need it when the model loads, so the tensors whose
    // shapes it reads are carried instead.
    std::set<std::string> shape_like, init_names;
    for (const auto& t : gp->initializer()) init_names.insert(t.name());
    for (int i = 0; i <= last; ++i) {
      const auto& n = gp->node(i);
      bool derived = n.op_type() == "Shape" || n.op_type() == "Size" || n.op_type() == "Constant" ||
                     n.input_size() > 0;
      if (n.op_type() != "Shape" && n.op_type() != "Size" && n.op_type() != "Constant") {
        for (const auto& in : n.input())
          derived = derived && (in.empty() || shape_like.count(in) || init_names.count(in));
      }
      if (derived)
        for (const auto& o : n.output()) shape_like.insert(o);
    }
    std::vector<std::string> read;
    for (int i = last + 1; i < gp->node_size(); ++i) node_reads(gp->node(i), read);
    for (const auto& o : gp->output()) read.push_back(o.name());
    std::set<std::string> chosen(values.begin(), values.end());
    std::set<std::string> seen;
    while (!read.empty()) {
      const std::string v = read.back();
      read.pop_back();
      if (!seen.insert(v).second || available.count(v)) continue;
      auto at = producer.find(v);
      if (at == producer.end() || at->second > last) continue;  // an input, or after the cut
      if (shape_like.count(v)) {
        const auto& n = gp->node(at->second);
        // Shape and Size read only their input's type: carrying the input keeps it known.
        for (const auto& in : n.input())
          if (!in.empty()) read.push_back(in);
        continue;
      }
      if (chosen.insert(v).second) {
        carried->push_back(v);
        outputs.push_back(v);
      }
    }
  }
  // Nodes are in topological order, so the prefix holds everything the values need. Only
  // the nodes the outputs need are kept, back to the values at hand (which become inputs),
  // and only the initializers those nodes read: a stage late in a detector's post-processing
  // neither imports the backbone nor copies its weights.
  std::set<int> keep;
  std::set<std::string> read_names, entered;
  std::vector<std::string> todo = outputs;
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    if (!read_names.insert(v).second) continue;
    if (available.count(v)) {
      entered.insert(v);
      continue;
    }
    auto at = producer.find(v);
    if (at == producer.end() || at->second > last || !keep.insert(at->second).second) continue;
    std::vector<std::string> reads;
    node_reads(gp->node(at->second), reads);
    todo.insert(todo.end(), reads.begin(), reads.end());
  }
  // A value at hand that a kept node makes anyway stays that node's output.
  for (int i : keep)
    for (const auto& o : gp->node(i).output()) entered.erase(o);
  onnx::GraphProto pruned;
  pruned.set_name(gp->name());
  for (int i = 0; i <= last; ++i)
    if (keep.count(i)) *pruned.add_node() = gp->node(i);
  for (const auto& t : gp->initializer())
    if (read_names.count(t.name())) *pruned.add_initializer() = t;
  std::set<std::string> init_names;
  for (const auto& t : pruned.initializer()) init_names.insert(t.name());
  for (const auto& in : gp->input()) {
    const bool dropped_weight = !init_names.count(in.name()) &&
                                std::any_of(gp->initializer().begin(), gp->initializer().end(),
                                            [&](const auto& t) { return t.name() == in.name(); });
    if (!dropped_weight && !entered.count(in.name())) *pruned.add_input() = in;
  }
  int k = 0;
  for (const std::string& name : entered) {
    auto* in = pruned.add_input();
    in->set_name(name);
    set_onnx_value_type(in, available.at(name), "kiln_staged" + std::to_string(k++));
  }
  for (const std::string& value : outputs) pruned.add_output()->set_name(value);
  *gp = std::move(pruned);
  return model.SerializeAsString();
}

namespace {

// `mapped`, when not empty, holds per initializer the raw_data parse_model_file lifted out.
Graph import_model(const onnx::ModelProto& model, const std::string& origin,
                   const fs::path& base_dir, const OnnxBindings& bindings,
                   const std::vector<std::optional<MappedRawData>>& mapped = {}) {
  const std::map<std::string, Tensor>& input_values = bindings.input_values;
  const int opset = default_opset(model, origin);
  const auto& gp = model.graph();
  check_supported(gp, opset, origin);

  Graph graph(gp.name().empty() ? fs::path(origin).stem().string() : gp.name());
  OnnxImporter im(graph, opset, origin);
  std::set<std::string> init_names;
  MappedCopies copies;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& t = gp.initializer(i);
    const std::string where = origin + ": initializer " + std::to_string(i) + " '" + t.name() + "'";
    if (t.name().empty()) throw UserError(where + " has no name");
    const MappedRawData* raw =
        static_cast<size_t>(i) < mapped.size() && mapped[static_cast<size_t>(i)]
            ? &*mapped[static_cast<size_t>(i)]
            : nullptr;
    // A weight converted here is read now; the others are filled before any node reads them.
    const std::optional<DType> dt = dtype_from_onnx(t.data_type());
    const bool converted = dt && OnnxImporter::compute_type(*dt);
    Tensor value = tensor_from_onnx(t, base_dir, where, raw, converted ? nullptr : &copies);
    if (auto compute = OnnxImporter::compute_type(value.dtype())) {
      // Weights of a storage type are kept in their compute type (exactly).
      im.set_storage(t.name(), value.dtype());
      value = convert_tensor(value, *compute);
    }
    im.add_known(t.name(), std::move(value), true);
    init_names.insert(t.name());
  }
  copies.run();
  if (gp.sparse_initializer_size() > 0)
    throw UnsupportedError(origin + ": sparse initializers are not supported");
  // A graph input (`name` in the graph, `as` in the importer); a storage-type input enters in
  // its compute type.
  auto add_tensor_input = [&](const std::string& name, const std::string& as,
                              const TensorType& type) {
    Variable* in = graph.add_input(name, type);
    if (auto compute = OnnxImporter::compute_type(type.dtype)) {
      in = apply("convert", {Var(&graph, in)}, {{"to", std::string(dtype_name(*compute))}}).var();
      im.set_storage(as, type.dtype);
    }
    im.add_graph_input(as, in);
  };
  // A sequence's elements enter as inputs of their own, as many as the call brings.
  auto add_composite_input = [&](const std::string& name, ValueKind kind,
                                 onnx::ValueInfoProto element, const std::string& where) {
    auto st = bindings.structures.find(name);
    if (st == bindings.structures.end()) {
      throw UnsupportedError(where + ": a " + std::string(value_kind_name(kind)) +
                             "; the graph follows its length (or presence), so it is built when "
                             "a call brings the value (ModelFunction::run_values does this)");
    }
    if (st->second.sequence != holds_sequence(kind) || (!st->second.present && !is_optional(kind)))
      throw UserError(where + " is a " + std::string(value_kind_name(kind)) + ", given " +
                      st->second.str());
    const bool unranked = !element.type().tensor_type().has_shape();
    if (unranked) element.mutable_type()->mutable_tensor_type()->mutable_shape();
    const TensorType declared = onnx_value_type(element, where);
    OnnxComposite c{kind, st->second.present, declared.dtype, {}};
    const int64_t count = !c.present                             ? 0
                          : c.kind == ValueKind::kOptionalTensor ? 1
                                                                 : st->second.length;
    for (int64_t k = 0; k < count; ++k) {
      const std::string as = element_name(name, static_cast<size_t>(k));
      TensorType elem = declared;
      if (unranked) {
        // Undeclared: each element's rank as the call gives it, every dimension dynamic.
        if (static_cast<size_t>(k) >= st->second.ranks.size())
          throw UserError(where + ": the rank of element " + std::to_string(k) + " is not given");
        elem.dims.assign(static_cast<size_t>(st->second.ranks[static_cast<size_t>(k)]), kDynamic);
      }
      add_tensor_input(c.kind == ValueKind::kOptionalTensor ? name : as, as, elem);
      c.elems.push_back(as);
    }
    im.add_composite(name, std::move(c));
  };
  for (int i = 0; i < gp.input_size(); ++i) {
    const auto& v = gp.input(i);
    if (init_names.count(v.name())) continue;  // IR < 4 lists weights as inputs too
    const std::string where = origin + ": graph input " + std::to_string(i) + " '" + v.name() + "'";
    onnx::ValueInfoProto element;
    const ValueKind kind = value_kind(v.type(), where, &element);
    if (kind != ValueKind::kTensor) {
      add_composite_input(v.name(), kind, element, where);
      continue;
    }
    const TensorType type = onnx_value_type(v, where);
    if (auto bound = input_values.find(v.name()); bound != input_values.end()) {
      if (bound->second.dtype() != type.dtype || !type.accepts(bound->second.shape())) {
        throw UserError(where + ": the value given is " + bound->second.describe() +
                        ", the input is " + type.to_string());
      }
      if (auto compute = OnnxImporter::compute_type(type.dtype)) {
        im.set_storage(v.name(), type.dtype);
        im.add_known(v.name(), convert_tensor(bound->second, *compute), false);
      } else {
        im.add_known(v.name(), bound->second, false);
      }
      continue;
    }
    add_tensor_input(v.name(), v.name(), type);
  }
  std::set<Variable*> named;
  // Imports a graph's nodes (the model's, or an If branch inlined into it).
  std::function<void(const onnx::GraphProto&)> import_nodes;
  // An If whose condition is known at load time (exporters emit these for shape checks):
  // the chosen branch's nodes join the graph and its outputs become the If's.
  auto inline_if = [&](const onnx::NodeProto& n) {
    const Tensor* cond = OnnxImporter::has_input(n, 0) ? im.known(n.input(0)) : nullptr;
    // A condition given as a graph input: ModelFunction builds the model per its value.
    if (!cond && OnnxImporter::has_input(n, 0) && im.is_graph_input(n.input(0)))
      cond = &im.const_in(n, 0, "cond");
    // A condition computed at run time: both branches run as models of their own.
    if (!cond) onnx_import::stage_if(im, n);
    if (cond->numel() != 1)
      throw UserError("If's condition has " + std::to_string(cond->numel()) + " elements, not 1");
    const std::string which = cond->load(0) != 0 ? "then_branch" : "else_branch";
    const onnx::GraphProto* branch = nullptr;
    for (const auto& at : n.attribute()) {
      if (at.name() == which && at.has_g()) branch = &at.g();
    }
    if (!branch) throw UserError("If has no " + which);
    for (int i = 0; i < branch->initializer_size(); ++i) {
      const auto& t = branch->initializer(i);
      im.add_known(
          t.name(),
          tensor_from_onnx(t, base_dir, origin + ": " + which + " initializer '" + t.name() + "'"),
          true);
    }
    import_nodes(*branch);
    if (branch->output_size() != n.output_size()) {
      throw UserError(which + " has " + std::to_string(branch->output_size()) +
                      " outputs, the If " + std::to_string(n.output_size()));
    }
    for (int k = 0; k < n.output_size(); ++k) {
      const std::string &from = branch->output(k).name(), &to = n.output(k);
      if (to.empty()) continue;
      try {
        im.alias(to, from);
      } catch (const UserError&) {
        throw UserError(which + " output '" + from + "' is not produced by any node");
      }
    }
  };
  // A value computed between stages enters as a graph input (a storage type in its compute
  // type, as the model's own inputs do).
  auto add_staged_input = [&](const std::string& name, const TensorType& type) {
    add_tensor_input(name, name, type);
  };
  auto enter_staged = [&](const onnx::NodeProto& n) {
    bool staged = n.output_size() > 0, inputs_known = true;
    for (int k = 0; k < n.output_size(); ++k)
      staged = staged && (n.output(k).empty() || bindings.staged.count(n.output(k)));
    for (int k = 0; k < n.input_size(); ++k)
      inputs_known = inputs_known && (n.input(k).empty() || im.known(n.input(k)));
    if (!staged || (inputs_known && !is_onnx_op(n, {"Loop", "Scan", "If"}))) return false;
    for (const std::string& name : n.output())
      if (!name.empty()) add_staged_input(name, bindings.staged.at(name));
    return true;
  };
  // A node the caller runs on the host as a step of the module (bindings.host_node): its
  // inputs and outputs in their own types (no storage-only type to convert at its edges).
  auto add_host_node = [&](const RunTimeValueNeeded& need, const onnx::NodeProto& n) {
    if (!bindings.host_node) return false;
    for (const TensorType& t : need.types())
      if (OnnxImporter::compute_type(t.dtype)) return false;
    std::vector<Variable*> ins;
    std::vector<TensorType> types;
    for (const std::string& v : need.values()) {
      if (v.empty()) continue;
      Variable* var = im.storage(v) ? nullptr : im.variable(v);
      if (!var) return false;
      ins.push_back(var);
      types.push_back(var->type);
    }
    std::shared_ptr<const Op> op = bindings.host_node(need, types);
    if (!op) return false;
    Node* node = graph.add_node(op, ins, n.name());
    for (size_t k = 0; k < need.outputs().size(); ++k) {
      const std::string& name = need.outputs()[k];
      if (name.empty()) continue;
      Variable* out = node->outputs.at(k);
      if (!graph.find_variable(name)) {
        graph.rename(out, name);
        named.insert(out);
      }
      im.bind(name, Var(&graph, out));
    }
    return true;
  };
  import_nodes = [&](const onnx::GraphProto& gp_) {
    QdqFusion qdq(gp_);
    for (int i = 0; i < gp_.node_size(); ++i) {
      const auto& n = gp_.node(i);
      if (qdq.absorbed(n)) continue;
      const Attrs attrs = attrs_of(n);
      const OnnxOpSpec* found = find_onnx_op(n.domain(), n.op_type());
      const OnnxOpSpec library_spec{
          {}, nullptr, [&](OnnxImporter& im_, const onnx::NodeProto& node, const Attrs& a) {
            return convert_library_op(im_, node, a);
          }};
      const OnnxOpSpec& spec = found ? *found : library_spec;
      try {
        // A subgraph's ops were not in the model-wide check.
        if (!found && !find_library_onnx_op(n.domain(), n.op_type()))
          throw UnsupportedError("op " + n.op_type() + " is not supported");
        // A NonZero or NonMaxSuppression of tensors computed at run time, or control flow
        // the caller runs: its outputs, computed between stages, enter as graph inputs.
        if (enter_staged(n)) continue;
        // Sequences and optionals are followed here, on names (onnx_sequence.h).
        if (found && onnx_import::import_sequence_op(im, n, attrs, {import_nodes, base_dir}))
          continue;
        if (found && n.op_type() == "If") {
          inline_if(n);
          continue;
        }
        // Shape arithmetic on dynamic dimensions stays symbolic (onnx_sym.h).
        if (found && fold_symbolic(im, n)) continue;
        auto convert = [&] { return spec.convert(im, n, attrs); };
        // Library ops are left to the rewrites' folding, which skips ops without a reference.
        if (found && n.op_type() != "Shape" && n.op_type() != "Size" && n.input_size() > 0 &&
            im.try_fold(n, convert))
          continue;
        check_storage_inputs(im, n);
        const size_t first_new = graph.nodes().size();
        if (found && qdq.fuse(im, n)) {
          for (size_t k = first_new; k < graph.nodes().size(); ++k) {
            if (graph.nodes()[k]->name.empty()) graph.nodes()[k]->name = n.name();
          }
          continue;
        }
        std::vector<Var> outs = convert();
        round_to_storage(im, n, outs);
        im.record_value_deps(n);
        // The nodes this ONNX node became carry its name (in labels, errors, kiln report).
        for (size_t k = first_new; k < graph.nodes().size(); ++k) {
          if (graph.nodes()[k]->name.empty()) graph.nodes()[k]->name = n.name();
        }
        if (static_cast<int>(outs.size()) < n.output_size()) {
          for (int k = static_cast<int>(outs.size()); k < n.output_size(); ++k) {
            if (!n.output(k).empty())
              throw UnsupportedError("output " + std::to_string(k) + " '" + n.output(k) +
                                     "' is not supported");
          }
        }
        for (int k = 0; k < n.output_size(); ++k) {
          if (n.output(k).empty()) continue;
          Var v = outs[static_cast<size_t>(k)];
          // Values known at load time (Constant, Shape, ...) are recorded as values, so
          // later shape inputs can read them; they reach the graph only if used as data.
          if (v.var()->kind == VarKind::kConstant && !v.var()->parameter && v.var()->value) {
            Tensor value = *v.var()->value;
            if (auto compute = OnnxImporter::compute_type(value.dtype())) {
              im.set_storage(n.output(k), value.dtype());
              value = convert_tensor(value, *compute);
            }
            im.add_known(n.output(k), value, false);
          } else {
            // Node outputs carry their ONNX names (in errors, `kiln source`, output files).
            Variable* var = v.var();
            if (var->kind == VarKind::kNodeOutput && !named.count(var) &&
                !graph.find_variable(n.output(k))) {
              graph.rename(var, n.output(k));
              named.insert(var);
            }
            im.bind(n.output(k), v);
          }
        }
      } catch (const InputValueNeeded& e) {
        throw InputValueNeeded(e.input(), origin + ": " + node_where(n, i) + ": " + e.what());
      } catch (const RunTimeValueNeeded& e) {
        RunTimeValueNeeded located(e.values(), e.outputs(), e.types(), e.kind(), e.attrs(),
                                   origin + ": " + node_where(n, i) + ": " + e.what());
        if (add_host_node(located, n)) continue;
        if (!bindings.deferred) throw located;
        // Recorded, and the import goes on with the node's outputs as inputs: the caller
        // learns every stage from one import.
        bindings.deferred->push_back(located);
        for (size_t k = 0; k < e.outputs().size(); ++k)
          if (!e.outputs()[k].empty()) add_staged_input(e.outputs()[k], e.types().at(k));
      } catch (const UnsupportedError& e) {
        throw UnsupportedError(origin + ": " + node_where(n, i) + ": " + e.what());
      } catch (const UserError& e) {
        throw UserError(origin + ": " + node_where(n, i) + ": " + e.what());
      }
    }
  };
  import_nodes(gp);
  std::vector<Variable*> outputs;
  std::set<Variable*> used;
  // The graph output `name` giving the importer's value `src` (the same but for a sequence's
  // or optional's elements).
  auto add_output = [&](const std::string& src, const std::string& name) {
    Variable* v = graph.find_variable(src);
    if (const Tensor* value = im.known(src); value && (!v || v->kind != VarKind::kNodeOutput)) {
      // A value known at load time (Constant, Shape): the module copies it out.
      v = graph.add_constant(*value, graph.fresh_name(name + ":value"));
    } else {
      v = im.variable(src);
    }
    if (!v) throw UserError(origin + ": graph output '" + name + "' is not produced by any node");
    if (auto st = im.storage(src)) {
      // Back to the storage type the model declares, under the output's name (the value
      // in its compute type gives the name up).
      if (v->name == name)
        graph.rename(v, graph.fresh_name(name + ":" + std::string(dtype_name(v->type.dtype))));
      Node* c = graph.add_node(
          OpRegistry::instance().create("convert", {{"to", std::string(dtype_name(*st))}}), {v}, "",
          {name});
      used.insert(c->outputs[0]);
      outputs.push_back(c->outputs[0]);
      return;
    }
    // Every output gets its own node-computed variable carrying the ONNX name, so the CLI
    // can write DIR/<name>.npy and outputs that repeat a value stay distinct.
    const bool input_itself = v->kind == VarKind::kInput && v->name == name;
    if (!input_itself && (v->kind != VarKind::kNodeOutput || used.count(v) || v->name != name)) {
      Var src(&graph, v);
      std::vector<int64_t> same(static_cast<size_t>(src.rank()), 0);
      Node* copy = graph.add_node(OpRegistry::instance().create("reshape", {{"shape", same}}), {v},
                                  "", {name});
      v = copy->outputs[0];
    }
    used.insert(v);
    outputs.push_back(v);
  };
  std::vector<ValueStructure> structures;
  for (int i = 0; i < gp.output_size(); ++i) {
    const std::string& name = gp.output(i).name();
    const OnnxComposite* c = im.composite(name);
    if (!c) {
      structures.push_back({});
      add_output(name, name);
      continue;
    }
    if (!bindings.output_structures) {
      throw UnsupportedError(origin + ": graph output '" + name + "' is a " +
                             value_kind_name(c->kind) +
                             "; it is returned by ModelFunction::run_values, element by element");
    }
    const bool sequence = holds_sequence(c->kind);
    structures.push_back(
        {c->present, sequence, c->present ? static_cast<int64_t>(c->elems.size()) : 0, {}});
    for (size_t k = 0; k < c->elems.size(); ++k)
      add_output(c->elems[k], sequence ? element_name(name, k) : name);
  }
  if (bindings.output_structures) *bindings.output_structures = structures;
  graph.set_outputs(outputs);
  if (bindings.deferred && !bindings.deferred->empty()) throw bindings.deferred->front();
  return graph;
}

}  // namespace

Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const fs::path& base_dir, const OnnxBindings& bindings) {
  return import_model(parse_model_proto(bytes, origin), origin, base_dir, bindings);
}

namespace {

bool has_external_data(const onnx::GraphProto& g) {
  for (const auto& t : g.initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL) return true;
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_t() && a.t().data_location() == onnx::TensorProto::EXTERNAL) return true;
      if (a.has_g() && has_external_data(a.g())) return true;
      for (const auto& sub : a.graphs())
        if (has_external_data(sub)) return true;
    }
  }
  return false;
}

}  // namespace

Graph load_onnx_model(const fs::path& path, bool* uses_external_data) {
  const ModelFile file = parse_model_file(path);
  if (uses_external_data) *uses_external_data = has_external_data(file.model.graph());
  std::vector<std::optional<MappedRawData>> mapped;
  for (const std::optional<RawDataSpan>& span : file.raw) {
    if (span) {
      mapped.emplace_back(MappedRawData{file.mapping, span->offset, span->length});
    } else {
      mapped.emplace_back();
    }
  }
  return import_model(file.model, path.string(), path.parent_path(), OnnxBindings{}, mapped);
}

}  // namespace kiln
