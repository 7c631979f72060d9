#include "ops/library/library_op.h"

#include "graph/wire_text.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "ops/c/foreign_call.h"
#include "ops/library/op_library_host.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// One hook call's view of a node: kiln_op_node and the arrays it points into.
class NodeCall {
 public:
  NodeCall(const LibraryOpDef& d, const Attrs& attrs, const std::vector<TensorType>& inputs,
           const std::vector<TensorType>* outputs) {
    call.attrs = &attrs;
    for (size_t i = 0; i < inputs.size(); ++i)
      in_.push_back(to_op_type(inputs[i], "input " + std::to_string(i)));
    if (outputs) {
      for (size_t i = 0; i < outputs->size(); ++i)
        out_.push_back(to_op_type((*outputs)[i], "output " + std::to_string(i)));
    }
    node.size = sizeof(kiln_op_node);
    node.host = op_host();
    node.call = &call;
    node.op_data = d.def.op_data;
    node.n_inputs = static_cast<int32_t>(in_.size());
    node.inputs = in_.data();
    node.n_outputs = static_cast<int32_t>(out_.size());
    node.outputs = outputs ? out_.data() : nullptr;
  }
  NodeCall(const NodeCall&) = delete;
  NodeCall& operator=(const NodeCall&) = delete;

  // The names a code hook may use.
  void set_code(const CodeNames& names, const std::string& prefix, const std::string& fail,
                const std::string& state) {
    in_names_ = names.inputs;
    out_names_ = names.outputs;
    for (const auto& s : in_names_) in_ptrs_.push_back(s.c_str());
    for (const auto& s : out_names_) out_ptrs_.push_back(s.c_str());
    prefix_ = prefix;
    fail_ = fail;
    state_ = state;
    node.input_names = in_ptrs_.data();
    node.output_names = out_ptrs_.data();
    node.prefix = prefix_.c_str();
    node.fail = fail_.c_str();
    node.state = state_.c_str();
  }

  kiln_op_call call;
  kiln_op_node node{};

 private:
  std::vector<kiln_op_type> in_, out_;
  std::vector<std::string> in_names_, out_names_;
  std::vector<const char*> in_ptrs_, out_ptrs_;
  std::string prefix_, fail_, state_;
};

std::vector<TensorType> types_of(const std::vector<Variable*>& vars) {
  std::vector<TensorType> out;
  for (const Variable* v : vars) out.push_back(v->type);
  return out;
}

std::vector<TensorType> checked_types(const LibraryOpDef& d, int32_t n, const kiln_op_type* outs) {
  auto bad = [&](const std::string& what) {
    throw UserError(d.where() + ": infer_types: " + what);
  };
  if (n < 1 || n > KILN_OP_MAX_OUTPUTS) {
    bad("gave " + std::to_string(n) + " outputs (1 to " + std::to_string(KILN_OP_MAX_OUTPUTS) +
        " allowed)");
  }
  std::vector<TensorType> types;
  for (int32_t i = 0; i < n; ++i) {
    const kiln_op_type& t = outs[i];
    const std::string which = "output " + std::to_string(i);
    if (t.dtype < 0 || t.dtype > static_cast<int32_t>(DType::kUInt64))
      bad(which + " has dtype " + std::to_string(t.dtype) + ", which is not a kiln dtype");
    if (t.ndim < 0 || t.ndim > KILN_OP_MAX_DIMS)
      bad(which + " has " + std::to_string(t.ndim) + " dimensions (0 to " +
          std::to_string(KILN_OP_MAX_DIMS) + " allowed)");
    TensorType tt{static_cast<DType>(t.dtype), {}};
    for (int32_t k = 0; k < t.ndim; ++k) {
      if (t.dims[k] < KILN_OP_DYNAMIC)
        bad(which + " dimension " + std::to_string(k) + " is " + std::to_string(t.dims[k]));
      tt.dims.push_back(t.dims[k]);
    }
    types.push_back(std::move(tt));
  }
  return types;
}

// A C string literal holding `s` byte for byte.
std::string c_string_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f && c != '?') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    }
  }
  return out + "\"";
}

std::vector<kiln_op_tensor> tensor_views(const std::vector<Tensor>& ts) {
  std::vector<kiln_op_tensor> out;
  for (const Tensor& t : ts) {
    out.push_back(kiln_op_tensor{t.data(), t.shape().data(), t.strides().data(), t.ndim(),
                                 static_cast<int32_t>(t.dtype())});
  }
  return out;
}

std::vector<const kiln_op_tensor*> pointers(const std::vector<kiln_op_tensor>& v) {
  std::vector<const kiln_op_tensor*> out;
  for (const auto& t : v) out.push_back(&t);
  return out;
}

// The bind spec as wire text (graph/wire_text.h).
constexpr std::string_view kSpecMagic = "kiln-op-bind 1 ";
constexpr const char* kSpecWhere = "the module's custom-op binding is malformed";

}  // namespace

std::string LibraryOpDef::where() const {
  return "op library '" + (library ? library->name : std::string("?")) + "' op '" + name + "'";
}

std::vector<std::string> LibraryOpDef::forms() const {
  std::vector<std::string> f;
  if (def.c_code) f.push_back("c");
  if (def.forward) f.push_back("compute");
  if (def.create_state || def.c_state_fields || def.c_init_code) f.push_back("state");
  if (def.perform) f.push_back("perform");
  if (def.cuda_kernel) f.push_back("cuda");
  if (!grad_op.empty()) f.push_back("grad");
  return f;
}

kiln_op_type to_op_type(const TensorType& t, const std::string& what) {
  if (t.dims.size() > KILN_OP_MAX_DIMS) {
    throw UserError(what + " has " + std::to_string(t.dims.size()) +
                    " dimensions; custom ops take at most " + std::to_string(KILN_OP_MAX_DIMS));
  }
  kiln_op_type o{};
  o.dtype = static_cast<int32_t>(t.dtype);
  o.ndim = static_cast<int32_t>(t.dims.size());
  for (size_t i = 0; i < t.dims.size(); ++i) o.dims[i] = t.dims[i];
  return o;
}

LibraryOp::LibraryOp(std::shared_ptr<const LibraryOpDef> def, const Attrs& attrs)
    : COp(def->name, attrs), def_(std::move(def)) {
  const kiln_op_def& d = def_->def;
  if (!d.check_attrs) {
    if (!attrs.empty()) {
      throw UserError(def_->where() + " takes no attributes, got " + attrs_to_string(attrs));
    }
    return;
  }
  NodeCall c(*def_, props(), {}, nullptr);
  check_status(def_->where(), "check_attrs", c.call, [&] { return d.check_attrs(&c.node); });
}

std::vector<TensorType> LibraryOp::infer_type(const std::vector<TensorType>& inputs) const {
  NodeCall c(*def_, props(), inputs, nullptr);
  int32_t n = 0;
  kiln_op_type outs[KILN_OP_MAX_OUTPUTS] = {};
  check_status(def_->where(), "infer_types", c.call,
               [&] { return def_->def.infer_types(&c.node, &n, outs); });
  return checked_types(*def_, n, outs);
}

std::vector<Shape> LibraryOp::infer_shape(const std::vector<Shape>&) const {
  throw InternalError(def_->where() +
                      ": its shape rule needs the inputs' dtypes (infer_run_shape)");
}

std::vector<Shape> LibraryOp::infer_run_shape(const std::vector<Shape>& inputs,
                                              const std::vector<DType>& dtypes) const {
  check_internal(inputs.size() == dtypes.size(), "infer_run_shape: shapes and dtypes differ");
  std::vector<TensorType> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(TensorType{dtypes[i], inputs[i]});
  // The output types (dtype, rank, static dims) for these inputs, then their sizes.
  const std::vector<TensorType> types = infer_type(in);
  NodeCall c(*def_, props(), in, &types);
  std::vector<kiln_op_type> outs;
  for (size_t i = 0; i < types.size(); ++i) outs.push_back(to_op_type(types[i], "output"));
  check_status(def_->where(), "infer_shapes", c.call,
               [&] { return def_->def.infer_shapes(&c.node, outs.data()); });
  std::vector<Shape> shapes;
  for (size_t i = 0; i < outs.size(); ++i) {
    const kiln_op_type& o = outs[i];
    Shape s(o.dims, o.dims + types[i].dims.size());
    bool ok = o.ndim == static_cast<int32_t>(types[i].dims.size());
    for (size_t k = 0; ok && k < s.size(); ++k)
      ok = s[k] >= 0 && (types[i].dims[k] < 0 || types[i].dims[k] == s[k]);
    if (!ok) {
      throw UserError(def_->where() + ": infer_shapes gave output " + std::to_string(i) + " " +
                      dims_to_string(s) + " (ndim " + std::to_string(o.ndim) +
                      "), which does not fit its type " + types[i].to_string());
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

void run_library_op(const LibraryOpDef& d, const char* hook, const Attrs& attrs, void* state,
                    const std::vector<const kiln_op_tensor*>& inputs,
                    const std::vector<const kiln_op_tensor*>& outputs,
                    const std::function<void*(size_t)>& workspace) {
  const auto fn = std::string(hook) == "perform" ? d.def.perform : d.def.forward;
  check_internal(fn != nullptr, d.where() + ": no " + hook);
  kiln_op_call call;
  call.attrs = &attrs;
  call.workspace = workspace;
  kiln_op_run run{};
  run.size = sizeof(kiln_op_run);
  run.host = op_host();
  run.call = &call;
  run.op_data = d.def.op_data;
  run.state = state;
  run.n_inputs = static_cast<int32_t>(inputs.size());
  run.inputs = inputs.data();
  run.n_outputs = static_cast<int32_t>(outputs.size());
  run.outputs = outputs.data();
  check_status(d.where(), hook, call, [&] { return fn(&run); });
}

void* create_library_state(const LibraryOpDef& d, const Attrs& attrs,
                           const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs) {
  if (!d.def.create_state) return nullptr;
  NodeCall c(d, attrs, inputs, &outputs);
  void* state = nullptr;
  guard_hook(d.where(), "create_state", [&] { state = d.def.create_state(&c.node); });
  if (!state) {
    throw UserError(d.where() + ": create_state: " +
                    (c.call.failed ? c.call.error : "returned NULL without an error"));
  }
  return state;
}

void LibraryOp::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const LibraryOpDef& d = *def_;
  if (!d.def.perform && !d.def.forward) {
    throw UnsupportedError(d.where() +
                           " has no reference implementation (perform) or compute "
                           "function (forward): it runs only in compiled modules");
  }
  auto in_views = tensor_views(inputs);
  auto out_views = tensor_views(outputs);
  if (d.def.perform) {
    run_library_op(d, "perform", props(), nullptr, pointers(in_views), pointers(out_views), {});
    return;
  }
  std::vector<TensorType> in_types, out_types;
  for (const Tensor& t : inputs) in_types.push_back(TensorType{t.dtype(), t.shape()});
  for (const Tensor& t : outputs) out_types.push_back(TensorType{t.dtype(), t.shape()});
  void* state = create_library_state(d, props(), in_types, out_types);
  struct Release {
    const LibraryOpDef& d;
    void* state;
    ~Release() {
      if (state && d.def.destroy_state) d.def.destroy_state(d.def.op_data, state);
    }
  } release{d, state};
  run_library_op(d, "forward", props(), state, pointers(in_views), pointers(out_views), {});
}

std::string LibraryOp::node_text(const char* hook, TextHook fn, const Node& node,
                                 const CodeNames& names, const Sub& sub) const {
  const LibraryOpDef& d = *def_;
  auto outs = types_of(node.outputs);
  NodeCall c(d, props(), types_of(node.inputs), &outs);
  c.set_code(names, sub.prefix, sub.fail, sub.state);
  return call_text(d.where(), hook, c.call, [&] { return fn(&c.node); });
}

std::string LibraryOp::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const LibraryOpDef& d = *def_;
  if (!d.compute_form()) {
    auto outs = types_of(node.outputs);
    NodeCall c(d, props(), types_of(node.inputs), &outs);
    c.set_code(names, sub.prefix, sub.fail, sub.state);
    return call_text(d.where(), "c_code", c.call, [&] { return d.def.c_code(&c.node); });
  }
  // The compute function, bound when the module loaded (c_init_code_struct).
  return foreign_call_code(names, sub);
}

std::string LibraryOp::c_support_code() const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form() || !d.def.c_support_code) return "";
  kiln_op_call call;
  call.attrs = &props();
  return call_text(d.where(), "c_support_code", call,
                   [&] { return d.def.c_support_code(d.def.op_data); });
}

std::string LibraryOp::c_support_code_apply(const Node& node, const std::string& prefix) const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form() || !d.def.c_support_code_apply) return "";
  auto outs = types_of(node.outputs);
  NodeCall c(d, props(), types_of(node.inputs), &outs);
  CodeNames none{std::vector<std::string>(node.inputs.size()),
                 std::vector<std::string>(node.outputs.size())};
  c.set_code(none, prefix, "KILN_FAIL", "state");
  return call_text(d.where(), "c_support_code_apply", c.call,
                   [&] { return d.def.c_support_code_apply(&c.node); });
}

std::string LibraryOp::c_state_fields(const Node& node, const std::string& prefix) const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form()) return foreign_state_field(prefix);
  if (!d.def.c_state_fields) return "";
  auto outs = types_of(node.outputs);
  NodeCall c(d, props(), types_of(node.inputs), &outs);
  CodeNames none{std::vector<std::string>(node.inputs.size()),
                 std::vector<std::string>(node.outputs.size())};
  c.set_code(none, prefix, "KILN_FAIL", "state");
  return call_text(d.where(), "c_state_fields", c.call,
                   [&] { return d.def.c_state_fields(&c.node); });
}

std::string LibraryOp::c_init_code_struct(const Node& node, const Sub& sub) const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form()) {
    BindSpec spec{d.name,  d.library->name,       d.library->sha256,
                  props(), types_of(node.inputs), types_of(node.outputs)};
    return foreign_bind_code(encode_bind_spec(spec), sub);
  }
  if (!d.def.c_init_code) return "";
  auto outs = types_of(node.outputs);
  NodeCall c(d, props(), types_of(node.inputs), &outs);
  CodeNames none{std::vector<std::string>(node.inputs.size()),
                 std::vector<std::string>(node.outputs.size())};
  c.set_code(none, sub.prefix, sub.fail, sub.state);
  return call_text(d.where(), "c_init_code", c.call, [&] { return d.def.c_init_code(&c.node); });
}

std::string LibraryOp::c_cleanup_code_struct(const Node& node, const Sub& sub) const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form()) return foreign_release_code(sub);
  if (!d.def.c_cleanup_code) return "";
  auto outs = types_of(node.outputs);
  NodeCall c(d, props(), types_of(node.inputs), &outs);
  CodeNames none{std::vector<std::string>(node.inputs.size()),
                 std::vector<std::string>(node.outputs.size())};
  c.set_code(none, sub.prefix, sub.fail, sub.state);
  return call_text(d.where(), "c_cleanup_code", c.call,
                   [&] { return d.def.c_cleanup_code(&c.node); });
}

std::vector<std::string> LibraryOp::c_headers() const {
  const LibraryOpDef& d = *def_;
  if (d.compute_form() || !d.def.c_headers) return {};
  kiln_op_call call;
  call.attrs = &props();
  const std::string text =
      call_text(d.where(), "c_headers", call, [&] { return d.def.c_headers(d.def.op_data); });
  std::vector<std::string> out;
  for (std::string line : split_lines(text)) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    while (!line.empty() && line.front() == ' ') line.erase(0, 1);
    if (line.empty()) continue;
    const bool ok = line.size() > 2 && ((line.front() == '<' && line.back() == '>') ||
                                        (line.front() == '"' && line.back() == '"'));
    if (!ok) {
      throw UserError(d.where() + ": c_headers: '" + line +
                      "' is not a header (expected <name.h> or \"name.h\", one per line)");
    }
    out.push_back(line);
  }
  return out;
}

std::string bind_spec_prefix() {  // the magic without its version
  return std::string(kSpecMagic.substr(0, kSpecMagic.find(' ') + 1));
}

std::string encode_bind_spec(const BindSpec& spec) {
  WireWriter w(kSpecMagic);
  w.word(spec.op);
  w.word(spec.library);
  w.word(spec.sha256);
  w.attrs(spec.attrs);
  for (const auto* types : {&spec.inputs, &spec.outputs}) {
    w.num(static_cast<int64_t>(types->size()));
    for (const TensorType& t : *types) w.type(t);
  }
  return w.take();
}

BindSpec decode_bind_spec(const std::string& text) {
  WireReader r(text, kSpecMagic, kSpecWhere);
  BindSpec spec;
  spec.op = r.word("op");
  spec.library = r.word("library");
  spec.sha256 = r.word("sha256");
  spec.attrs = r.attrs();
  for (auto* types : {&spec.inputs, &spec.outputs}) {
    types->resize(r.count("types", 1024));
    for (TensorType& t : *types) t = r.type(KILN_OP_MAX_DIMS);
  }
  r.finish();
  return spec;
}

}  // namespace kiln
