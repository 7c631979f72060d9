#include "compiler/c/linker.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "compiler/backend.h"
#include "compiler/c/binding_asm.h"
#include "ctemplate/c_layout.h"
#include "ctemplate/prelude.h"
#include "ops/c/workspace.h"
#include "ops/cop.h"
#include "ops/device_placed.h"
#include "runtime/module/module_abi.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln::embedded {
extern const std::pair<std::string_view, std::string_view> abi_headers[];
extern const int abi_headers_count;
}  // namespace kiln::embedded

namespace kiln {
namespace embedded {
extern const char generators_hash[];  // generators_hash.cpp, made at build time
}  // namespace embedded

namespace {

const COp& c_op(const Node& node) {
  const auto* op = dynamic_cast<const COp*>(node.op.get());
  if (!op) throw UserError(node.label() + ": op '" + node.op->name() + "' has no C implementation");
  return *op;
}

// The thunk's flags (KILN_THUNK_*) and split unit.
std::pair<int, int64_t> thunk_flags(const COp& op, const Node& node) {
  if (op.enqueues_device_work()) return {KILN_THUNK_DEVICE, 0};
  if (!op.c_splittable(node)) return {0, 0};
  return {KILN_THUNK_SPLIT | (op.c_heavy(node) ? KILN_THUNK_HEAVY : 0),
          std::max<int64_t>(op.c_split_unit(node), 0)};
}

// The thunk's flags and split unit, as kiln_thunk_info initializers.
std::string thunk_split(const COp& op, const Node& node) {
  if (op.enqueues_device_work()) return "KILN_THUNK_DEVICE, 0";
  if (!op.c_splittable(node)) return "0, 0";
  return std::string(op.c_heavy(node) ? "KILN_THUNK_SPLIT | KILN_THUNK_HEAVY"
                                      : "KILN_THUNK_SPLIT") +
         ", " + std::to_string(std::max<int64_t>(op.c_split_unit(node), 0));
}

void add_unique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

}  // namespace

// Bump when the stitched layout changes in a way the preludes and ABI header do not show.
constexpr int kLinkerVersion = 1;

std::string codegen_fingerprint_for(std::string_view generators) {
  Sha256 h;
  h.update("linker=" + std::to_string(kLinkerVersion) + "\n");
  h.update("generators=" + std::string(generators) + "\n");
  for (int i = 0; i < embedded::abi_headers_count; ++i) h.update(embedded::abi_headers[i].second);
  for (auto name : prelude_names()) {
    h.update(name);
    h.update(prelude(name));
  }
  return h.hex_digest();
}

const std::string& codegen_fingerprint() {
  static const std::string fingerprint = codegen_fingerprint_for(embedded::generators_hash);
  return fingerprint;
}

std::string node_banner(const Node& node) {
  std::vector<std::string> ins, outs, types;
  for (const auto* v : node.inputs) ins.push_back(v->name);
  for (const auto* v : node.outputs) {
    outs.push_back(v->name);
    types.push_back(v->type.to_string());
  }
  std::string s = "node " + std::to_string(node.id) + ": " + node.op->describe() + "(" +
                  join(ins, ", ") + ") -> " + join(outs, ", ") + "  [" + join(types, "; ") + "]";
  if (!node.name.empty()) s += "  '" + node.name + "'";
  return c_comment_text(s);
}

namespace {
// Ends a generated function body: the one cleanup label KILN_FAIL jumps to, and the status.
void close_function(CodeWriter& w) {
  w.dedent();
  w.line("kiln_cleanup: __attribute__((unused));");
  w.indent();
  w.line("return kiln_status;");
  w.dedent();
  w.line("}");
}
}  // namespace

namespace {
// Emits one braced block per node whose op has state init (or cleanup) code.
template <class Hook>
void emit_state_hooks(CodeWriter& w, const Graph& graph, const std::string& what,
                      const std::string& kind, Hook hook) {
  for (const auto& node : graph.nodes()) {
    Sub sub;
    sub.prefix = "n" + std::to_string(node->id) + "_";
    std::string code = hook(c_op(*node), *node, sub);
    if (code.empty()) continue;
    w.line("{ /* " + what + " " + node_banner(*node) + " */");
    w.indent();
    w.fragment(code, node->id, kind);
    w.dedent();
    w.line("}");
  }
}
}  // namespace

namespace {
// `code` with every name that starts with `prefix` (at an identifier boundary) renamed to
// start with '@': two nodes' kernels compare equal when only their prefixes differ.
std::string without_prefix(const std::string& code, const std::string& prefix) {
  std::string out;
  out.reserve(code.size());
  for (size_t i = 0; i < code.size();) {
    const bool boundary =
        i == 0 || !(std::isalnum(static_cast<unsigned char>(code[i - 1])) || code[i - 1] == '_');
    if (boundary && code.compare(i, prefix.size(), prefix) == 0) {
      out += '@';
      i += prefix.size();
    } else {
      out += code[i++];
    }
  }
  return out;
}

}  // namespace

namespace {

// What the prologue of a translation unit must hold for the code after it.
struct Needs {
  std::vector<std::string> headers{"<stddef.h>", "<stdint.h>"};
  std::vector<std::string> preludes;
  std::vector<std::pair<std::string, int>> support;  // op-level support code (text, node)
  void add(const COp& op, int node) {
    for (const auto& h : op.c_headers()) add_unique(headers, h);
    for (const auto& p : op.c_preludes()) add_unique(preludes, p);
    std::string text = op.c_support_code();
    if (text.empty()) return;
    for (const auto& [t, n] : support) {
      if (t == text) return;
    }
    support.emplace_back(std::move(text), node);
  }
};

// How a translation unit reaches the host's support table: a module of one unit keeps it
// static; a module linked from kernel objects defines it once (hidden) in the binding, and
// each kernel refers to that definition.
enum class SupportPointer { kStatic, kDefine, kExtern };

// Includes, the module ABI, the support table pointer, preludes, KILN_FAIL, support code.
void emit_prologue(CodeWriter& w, const Needs& needs, SupportPointer pointer) {
  for (const auto& h : needs.headers) w.line("#include " + h);
  w.line();
  check_internal(embedded::abi_headers_count == 1, "module ABI header not embedded");
  w.verbatim(embedded::abi_headers[0].second, -1, "prelude module_abi.h");
  // The preludes' loop-nest helpers come from the host's table (kiln_support), set once by
  // kiln_module(); atomics, since two threads may load the same module at once.
  w.line();
  w.line("#define KILN_MODULE 1");
  switch (pointer) {
    case SupportPointer::kStatic:
      w.line("static const kiln_support *kiln_support_;");
      break;
    case SupportPointer::kDefine:
      w.line("__attribute__((visibility(\"hidden\"))) const kiln_support *kiln_support_;");
      break;
    case SupportPointer::kExtern:
      w.line("extern __attribute__((visibility(\"hidden\"))) const kiln_support *kiln_support_;");
      break;
  }
  w.line("#define KILN_SUPPORT __atomic_load_n(&kiln_support_, __ATOMIC_RELAXED)");
  for (const auto& p : needs.preludes) {
    w.line();
    w.verbatim(prelude(p), -1, "prelude " + p);
  }
  w.line();
  w.line(
      "#define KILN_FAIL(...) do { ctx->fail(ctx, __VA_ARGS__); kiln_status = 1; goto "
      "kiln_cleanup; } while (0)");
  // Marks a function's parameters used in one line; the call folds away.
  w.line(
      "static inline __attribute__((always_inline, unused)) void kiln_unused_(int n, ...) { "
      "(void)n; }");
  w.line("#define KILN_UNUSED(...) kiln_unused_(0, __VA_ARGS__)");
  w.line(c_workspace_macro());
  for (const auto& [text, node] : needs.support) {
    w.line();
    w.fragment(text, node, "support_code");
  }
}

// Kernel code is generated with this prefix for its file-scope names, then given its own
// (the symbol's) once the code, and so the symbol, is known.
constexpr std::string_view kKernelPrefix = "kiln_kernel_prefix_";

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) {
    s.replace(p, from.size(), to);
  }
  return s;
}

constexpr std::string_view kKernelParams =
    "(void *state_, kiln_ctx *ctx, kiln_tensor *const *in, kiln_tensor *const *out, "
    "const int64_t *kp)";

// One node's code as a kernel: a function of the tensors and the argument array `kp`.
struct NodeCode {
  std::string body;           // the c_code fragment
  std::string support_apply;  // file-scope helpers of this node
  KernelArgs args;            // the values the module passes this node's kernel
  int kernel = -1;            // index into LinkedModule::c_kernels; -1: inline in the module
};

void emit_kernel_function(CodeWriter& w, const CKernel& k, const NodeCode& code, int node) {
  if (!code.support_apply.empty()) {
    w.fragment(code.support_apply, node, "support_code_apply");
    w.line();
  }
  w.line("__attribute__((visibility(\"hidden\"))) int " + k.symbol + std::string(kKernelParams) +
         " {");
  w.indent();
  w.line("int kiln_status = 0;");
  w.line("KILN_UNUSED(state_, ctx, in, out, kp);");
  for (const auto& line : code.args.declarations(code.body)) w.verbatim(line, -1, "kernel args");
  w.fragment(code.body, node, "c_code");
  for (const auto& line : code.args.undefinitions(code.body)) w.verbatim(line, -1, "kernel args");
  close_function(w);
}

bool has_state(const COp& op, const Node& node) {
  Sub sub;
  sub.prefix = "n" + std::to_string(node.id) + "_";
  return !op.c_state_fields(node, sub.prefix).empty() ||
         !op.c_init_code_struct(node, sub).empty() || !op.c_cleanup_code_struct(node, sub).empty();
}

// The state struct, one thunk per node (its code inline, or a call of its kernel with its
// argument array), the thunk table and kiln_module().
void emit_binding(const LinkedModule& m, CodeWriter& w, const Graph& graph, const std::string& key,
                  const std::vector<NodeCode>& codes) {
  // State struct with every node's fields; init and cleanup run at load and unload.
  w.line();
  w.line("typedef struct kiln_state {");
  w.indent();
  w.line("int32_t kiln_reserved;");
  for (const auto& node : graph.nodes()) {
    std::string fields = c_op(*node).c_state_fields(*node, "n" + std::to_string(node->id) + "_");
    if (!fields.empty()) w.fragment(fields, node->id, "state_fields");
  }
  w.dedent();
  w.line("} kiln_state;");
  w.line();
  w.line("static int kiln_state_init(void *state_, kiln_ctx *ctx) {");
  w.indent();
  w.line("kiln_state *state = (kiln_state *)state_;");
  w.line("int kiln_status = 0;");
  w.line("(void)state;");
  w.line("(void)ctx;");
  emit_state_hooks(
      w, graph, "init", "init_code_struct",
      [](const COp& op, const Node& n, const Sub& sub) { return op.c_init_code_struct(n, sub); });
  close_function(w);
  w.line();
  w.line("static void kiln_state_cleanup(void *state_) {");
  w.indent();
  w.line("kiln_state *state = (kiln_state *)state_;");
  w.line("(void)state;");
  emit_state_hooks(w, graph, "cleanup", "cleanup_code_struct",
                   [](const COp& op, const Node& n, const Sub& sub) {
                     return op.c_cleanup_code_struct(n, sub);
                   });
  w.dedent();
  w.line("}");

  if (!m.kernel_names.empty()) {
    w.line();
    w.line("/* the module's " + m.device->title() + " kernels, launched by index (" +
           m.device->unit_name() + " holds their code) */");
    w.line("enum kiln_kernel {");
    w.indent();
    for (size_t i = 0; i < m.kernel_names.size(); ++i) {
      w.line(m.kernel_names[i] + " = " + std::to_string(i) + ",");
    }
    w.dedent();
    w.line("};");
    w.line("static const char *const kiln_kernel_names[] = {");
    w.indent();
    for (const auto& k : m.kernel_symbols) w.line("\"" + k + "\",");
    w.dedent();
    w.line("};");
  }

  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const auto& node = graph.nodes()[i];
    const NodeCode& code = codes[i];
    const std::string id = std::to_string(node->id);
    w.line();
    w.line("/* " + node_banner(*node) + " */");
    if (code.kernel >= 0) {
      std::string args = "0";
      if (!code.args.values.empty()) {
        w.line("static const int64_t kiln_args_" + id + "[] = {");
        w.indent();
        for (const auto& line : code.args.commented_values()) w.line(line);
        w.dedent();
        w.line("};");
        args = "kiln_args_" + id;
      }
      w.line("static int kiln_node_" + id +
             "(void *state_, kiln_ctx *ctx, kiln_tensor *const *in, kiln_tensor *const *out) {");
      w.indent();
      w.line("return " + m.c_kernels[static_cast<size_t>(code.kernel)].symbol +
             "(state_, ctx, in, out, " + args + ");");
      w.dedent();
      w.line("}");
      continue;
    }
    w.line("static int kiln_node_" + id +
           "(void *state_, kiln_ctx *ctx, kiln_tensor *const *in, kiln_tensor *const *out) {");
    w.indent();
    w.line("kiln_state *state = (kiln_state *)state_;");
    w.line("int kiln_status = 0;");
    w.line("(void)state;");
    w.line("(void)ctx;");
    w.line("(void)in;");
    w.line("(void)out;");
    w.fragment(code.body, node->id, "c_code");
    close_function(w);
  }

  w.line();
  w.line("static const kiln_thunk_info kiln_thunks[] = {");
  w.indent();
  for (const auto& node : graph.nodes()) {
    w.line("{kiln_node_" + std::to_string(node->id) + ", " + c_string_literal(node->label()) +
           ", " + std::to_string(node->id) + ", " + std::to_string(node->inputs.size()) + ", " +
           std::to_string(node->outputs.size()) + ", " + thunk_split(c_op(*node), *node) + "},");
  }
  if (graph.nodes().empty()) w.line("{0, 0, 0, 0, 0, 0, 0},");
  w.dedent();
  w.line("};");
  w.line("static const kiln_module_info kiln_info = {KILN_ABI_VERSION, \"" + key + "\", " +
         std::to_string(graph.nodes().size()) +
         ", kiln_thunks, sizeof(kiln_state), kiln_state_init, kiln_state_cleanup, " +
         std::to_string(m.kernel_names.size()) +
         (m.kernel_names.empty() ? ", 0};" : ", kiln_kernel_names};"));
  w.line(
      "__attribute__((visibility(\"default\"))) const kiln_module_info *kiln_module(const "
      "kiln_support *support) {");
  w.indent();
  w.line("__atomic_store_n(&kiln_support_, support, __ATOMIC_RELAXED);");
  w.line("return &kiln_info;");
  w.dedent();
  w.line("}");
}

}  // namespace

LinkedModule link_c_module(const Graph& graph, const std::string& key, LinkMode mode) {
  LinkedModule m;
  m.mode = mode;
  Needs all;      // the whole module as one unit
  Needs binding;  // kKernels: the binding unit (inline nodes only)
  for (const auto& node : graph.nodes()) {
    const COp& op = c_op(*node);
    all.add(op, node->id);
    for (const auto& l : op.c_libraries()) add_unique(m.libraries, l);
    for (const auto& a : op.c_compile_args()) add_unique(m.compile_args, a);
  }

  // Bodies first: a CUDA node's launch names its kernels, whose table precedes the thunks.
  // In kKernels mode a node without CUDA code or module state becomes a kernel: nodes whose
  // code (sizes read from `kp`) is the same share one.
  std::vector<NodeCode> codes(graph.nodes().size());
  std::vector<PlacedKernels> node_kernels;
  std::map<std::string, std::string> kernel_symbol;  // code without prefix -> symbol
  std::map<std::string, int> kernel_index;           // kernel identity -> c_kernels index
  std::vector<std::string> device_preludes;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = *graph.nodes()[i];
    const COp& op = c_op(node);
    const auto* placed = dynamic_cast<const DevicePlaced*>(&op);
    NodeCode& code = codes[i];
    CodeNames names;
    for (size_t k = 0; k < node.inputs.size(); ++k)
      names.inputs.push_back("in[" + std::to_string(k) + "]");
    for (size_t k = 0; k < node.outputs.size(); ++k)
      names.outputs.push_back("out[" + std::to_string(k) + "]");
    Sub sub;
    sub.prefix = "n" + std::to_string(node.id) + "_";
    const bool as_kernel = mode == LinkMode::kKernels && !placed && !has_state(op, node);
    try {
      if (placed) {
        // One device unit per module: every placed node is on the backend of the first.
        const Backend& backend = backend_named(placed->device());
        if (m.device && m.device != &backend) {
          throw UserError("nodes placed on both " + m.device->name() + " and " + backend.name());
        }
        m.device = &backend;
        DeviceCode device = placed->device_code(node, names, sub);
        code.body = device.launch;
        for (const auto& p : device.preludes) add_unique(device_preludes, p);
        // A kernel whose code matches an earlier one but for the node prefix is that
        // kernel: one definition, compiled once, launched under both enum names.
        PlacedKernels nk{node.id, {}, {}};
        for (auto& k : device.kernels) {
          auto [it, fresh] = kernel_symbol.emplace(without_prefix(k.code, sub.prefix), k.name);
          m.kernel_names.push_back(k.name);
          m.kernel_symbols.push_back(it->second);
          if (fresh) {
            nk.kernels.push_back(std::move(k));
          } else {
            nk.shared.emplace_back(k.name, it->second);
          }
        }
        node_kernels.push_back(std::move(nk));
      } else {
        if (as_kernel) {
          sub.prefix = std::string(kKernelPrefix);
          sub.args = &code.args;
        }
        // Laid out once here, so a kernel's identity does not depend on its emitter's spacing.
        code.body = lay_out_c_text(op.c_code(node, names, sub));
        code.support_apply = lay_out_c_text(op.c_support_code_apply(node, sub.prefix));
      }
    } catch (const UserError& e) {
      throw UserError(node.label() + ": " +
                      (placed ? placed->device() + " code: " : std::string("c_code: ")) + e.what());
    }
    if (!as_kernel) {
      binding.add(op, node.id);
      continue;
    }
    // The kernel is what its unit compiles: everything it includes and its code.
    Needs needs;
    needs.add(op, node.id);
    Sha256 h;
    for (const auto& part :
         {join(needs.headers, "\n"), join(needs.preludes, "\n"),
          needs.support.empty() ? std::string() : needs.support[0].first, code.support_apply,
          join(code.args.names, ","), code.body, join(op.c_libraries(), "\n"),
          join(op.c_compile_args(), "\n")}) {
      h.update(std::to_string(part.size()) + ":");
      h.update(part);
    }
    const std::string identity = h.hex_digest();
    auto [it, fresh] = kernel_index.emplace(identity, static_cast<int>(m.c_kernels.size()));
    code.kernel = it->second;
    if (fresh) {
      CKernel k;
      k.symbol = "kiln_k_" + identity.substr(0, 16);
      k.op = op.name();
      k.libraries = op.c_libraries();
      k.compile_args = op.c_compile_args();
      m.c_kernels.push_back(std::move(k));
    }
    CKernel& k = m.c_kernels[static_cast<size_t>(code.kernel)];
    k.nodes.push_back(node.id);
    const std::string prefix = k.symbol + "_";
    code.body = replace_all(std::move(code.body), kKernelPrefix, prefix);
    code.support_apply = replace_all(std::move(code.support_apply), kKernelPrefix, prefix);
    if (!fresh) continue;
    // Its own unit: nothing in it names a node, so every model with this code shares it.
    CodeWriter& w = k.code;
    w.line("/* kiln kernel " + k.symbol + " (" + c_comment_text(k.op) +
           "). Generated by kiln; do not edit. */");
    emit_prologue(w, needs, SupportPointer::kExtern);
    w.line();
    emit_kernel_function(w, k, code, node.id);
  }

  // The module as one unit: kiln source shows it, and LinkMode::kModule compiles it.
  const SupportPointer own =
      mode == LinkMode::kKernels ? SupportPointer::kDefine : SupportPointer::kStatic;
  auto emit_head = [&](CodeWriter& w, const Needs& needs, bool with_kernel_code) {
    w.line(
        "/* kiln module for graph '" + c_comment_text(graph.name()) +
        "': " + std::to_string(graph.nodes().size()) + " nodes" +
        (mode == LinkMode::kKernels ? ", " + std::to_string(m.c_kernels.size()) + " kernels" : "") +
        ". Generated by kiln; do not edit. */");
    w.line("/* key " + key + " */");
    emit_prologue(w, needs, own);
    // Support code of the inline nodes (identical blocks once).
    std::set<std::string> seen;
    for (size_t i = 0; i < codes.size(); ++i) {
      if (codes[i].kernel >= 0 || codes[i].support_apply.empty()) continue;
      if (!seen.insert(codes[i].support_apply).second) continue;
      w.line();
      w.fragment(codes[i].support_apply, graph.nodes()[i]->id, "support_code_apply");
    }
    if (m.c_kernels.empty()) return;
    w.line();
    if (!with_kernel_code) {
      w.line("/* the kernels this module binds its nodes to, each compiled on its own */");
      for (const auto& k : m.c_kernels) {
        w.line("__attribute__((visibility(\"hidden\"))) int " + k.symbol +
               std::string(kKernelParams) + ";");
      }
      return;
    }
    w.line("/* ---- kernels: each node below runs one of these with its own sizes (kp) ---- */");
    for (size_t i = 0; i < codes.size(); ++i) {
      const NodeCode& code = codes[i];
      if (code.kernel < 0) continue;
      const CKernel& k = m.c_kernels[static_cast<size_t>(code.kernel)];
      if (k.nodes.front() != graph.nodes()[i]->id) continue;  // defined once, at its first node
      // The banner of every node that runs it, directly above it.
      w.line();
      w.line("/* kernel " + k.symbol + ", run by " + std::to_string(k.nodes.size()) + " node" +
             (k.nodes.size() > 1 ? "s:" : ":"));
      for (int n : k.nodes) {
        w.line(" *   " + node_banner(*graph.nodes()[static_cast<size_t>(n)]));
      }
      w.line(" */");
      emit_kernel_function(w, k, code, graph.nodes()[i]->id);
    }
    w.line();
    w.line("/* ---- the module: state, one thunk per node, the table ---- */");
  };
  if (!m.kernel_names.empty()) {
    m.device->link_unit(m.device_unit, graph, key, m.kernel_names.size(), node_kernels,
                        device_preludes);
  }
  if (mode == LinkMode::kKernels) {
    emit_head(m.binding, binding, false);
    emit_binding(m, m.binding, graph, key, codes);
    std::vector<BoundNode> bound;
    for (size_t i = 0; i < codes.size() && bound.size() == i; ++i) {
      if (codes[i].kernel < 0) break;  // an inline node: the binding is C
      const Node& node = *graph.nodes()[i];
      BoundNode b;
      b.id = node.id;
      b.label = node.label();
      b.n_in = static_cast<int>(node.inputs.size());
      b.n_out = static_cast<int>(node.outputs.size());
      std::tie(b.flags, b.split_unit) = thunk_flags(c_op(node), node);
      b.kernel = m.c_kernels[static_cast<size_t>(codes[i].kernel)].symbol;
      b.args = codes[i].args.values;
      b.arg_names = codes[i].args.names;
      bound.push_back(std::move(b));
    }
    if (bound.size() == codes.size() && !bound.empty())
      m.binding_asm = binding_assembly(key, bound);
  }
  emit_head(m.code, all, true);
  emit_binding(m, m.code, graph, key, codes);
  return m;
}

}  // namespace kiln
