#include "compiler/c_linker.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "ctemplate/prelude.h"
#include "ops/cop.h"
#include "util/error.h"
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

// The thunk's flags and split unit, as kiln_thunk_info initializers.
std::string thunk_split(const COp& op, const Node& node) {
  if (op.enqueues_device_work()) return "KILN_THUNK_DEVICE, 0";
  if (!op.c_splittable(node)) return "0, 0";
  return std::string(op.c_heavy(node) ? "KILN_THUNK_SPLIT | KILN_THUNK_HEAVY" : "KILN_THUNK_SPLIT") +
         ", " + std::to_string(std::max<int64_t>(op.c_split_unit(node), 0));
}

void add_unique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

// Comments must not be closed early by names that contain "*/".
std::string comment_safe(std::string s) {
  for (size_t p; (p = s.find("*/")) != std::string::npos;) s.replace(p, 2, "*_/");
  return s;
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
  return comment_safe(s);
}

namespace {
// Emits one braced block per node whose op has state init (or cleanup) code.
template <class Hook>
void emit_state_hooks(CodeWriter& w, const Graph& graph, const std::string& what, const std::string& kind,
                      Hook hook) {
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
// A placed node's kernels: those it defines, and those whose code an earlier node's kernel
// already holds (its name, that kernel's symbol).
struct NodeKernels {
  int id;
  std::vector<CudaKernel> kernels;
  std::vector<std::pair<std::string, std::string>> shared;
};

// `code` with every name that starts with `prefix` (at an identifier boundary) renamed to
// start with '@': two nodes' kernels compare equal when only their prefixes differ.
std::string without_prefix(const std::string& code, const std::string& prefix) {
  std::string out;
  out.reserve(code.size());
  for (size_t i = 0; i < code.size();) {
    const bool boundary = i == 0 || !(std::isalnum(static_cast<unsigned char>(code[i - 1])) || code[i - 1] == '_');
    if (boundary && code.compare(i, prefix.size(), prefix) == 0) {
      out += '@';
      i += prefix.size();
    } else {
      out += code[i++];
    }
  }
  return out;
}

// kernels.cu: the CUDA preludes, every placed node's kernels (banner per node, inside
// extern "C" so each name is its symbol), and for the emulator one entry per kernel that
// unpacks CUDA's argument array.
void link_cuda_kernels(LinkedModule& m, const Graph& graph, const std::string& key,
                       const std::vector<NodeKernels>& node_kernels,
                       const std::vector<std::string>& preludes) {
  CodeWriter& w = m.cuda;
  w.line("/* kiln CUDA kernels for graph '" + comment_safe(graph.name()) + "': " +
         std::to_string(m.kernel_names.size()) + " kernels. Generated by kiln; do not edit. */");
  w.line("/* key " + key + " */");
  for (const char* p : {"kiln_cuda.cuh", "kiln_cuda_types.h", "kiln_cuda_index.cuh"}) {
    w.fragment(prelude(p), -1, std::string("prelude ") + p);
  }
  for (const auto& p : preludes) {
    w.line();
    w.fragment(prelude(p), -1, "prelude " + p);
  }
  w.line();
  w.line("extern \"C\" {");
  for (const auto& [id, kernels, shared] : node_kernels) {
    const Node& node = *graph.nodes()[static_cast<size_t>(id)];
    w.line();
    w.line("/* " + node_banner(node) + " */");
    for (const auto& k : kernels) w.fragment(k.code, id, "cuda_code");
    for (const auto& [name, symbol] : shared) w.line("/* " + name + ": the code of " + symbol + " */");
  }
  w.line();
  w.line("}  /* extern \"C\" */");
  w.line();
  w.line("#ifdef KILN_CUDA_EMULATOR");
  for (const auto& nk : node_kernels) {
    for (const auto& k : nk.kernels) {
      std::string args;
      for (size_t i = 0; i < k.params.size(); ++i) {
        args += (i ? ", " : "") + std::string("*(") + k.params[i] + " *)a[" + std::to_string(i) + "]";
      }
      std::string sizes;
      for (const auto& p : k.params) sizes += "sizeof(" + p + "), ";
      w.line("extern \"C\" __attribute__((visibility(\"default\"))) void kiln_emu_entry_" + k.name +
             "(void **a) { " + k.name + "(" + args + "); }");
      // What a launch copies out of the caller's argument array (0-terminated).
      w.line("extern \"C\" __attribute__((visibility(\"default\"))) const unsigned kiln_emu_sizes_" +
             k.name + "[] = {" + sizes + "0u};");
    }
  }
  w.line("#endif");
}
}  // namespace

LinkedModule link_c_module(const Graph& graph, const std::string& key) {
  LinkedModule m;
  CodeWriter& w = m.code;
  std::vector<std::string> headers{"<stddef.h>", "<stdint.h>"};
  std::vector<std::string> preludes;
  for (const auto& node : graph.nodes()) {
    const COp& op = c_op(*node);
    for (const auto& h : op.c_headers()) add_unique(headers, h);
    for (const auto& p : op.c_preludes()) add_unique(preludes, p);
    for (const auto& l : op.c_libraries()) add_unique(m.libraries, l);
    for (const auto& a : op.c_compile_args()) add_unique(m.compile_args, a);
  }

  w.line("/* kiln module for graph '" + comment_safe(graph.name()) + "': " +
         std::to_string(graph.nodes().size()) + " nodes. Generated by kiln; do not edit. */");
  w.line("/* key " + key + " */");
  for (const auto& h : headers) w.line("#include " + h);
  w.line();
  check_internal(embedded::abi_headers_count == 1, "module ABI header not embedded");
  w.fragment(embedded::abi_headers[0].second, -1, "prelude module_abi.h");
  // The preludes' loop-nest helpers come from the host's table (kiln_support), set once by
  // kiln_module(); atomics, since two threads may load the same module at once.
  w.line();
  w.line("#define KILN_MODULE 1");
  w.line("static const kiln_support *kiln_support_;");
  w.line("#define KILN_SUPPORT __atomic_load_n(&kiln_support_, __ATOMIC_RELAXED)");
  for (const auto& p : preludes) {
    w.line();
    w.fragment(prelude(p), -1, "prelude " + p);
  }
  w.line();
  w.line("#define KILN_FAIL(...) do { ctx->fail(ctx, __VA_ARGS__); kiln_status = 1; goto kiln_cleanup; } while (0)");

  // Support code: identical blocks (whichever hook produced them) are emitted once.
  std::set<std::string> seen_support;
  for (const auto& node : graph.nodes()) {
    const COp& op = c_op(*node);
    std::string prefix = "n" + std::to_string(node->id) + "_";
    std::pair<std::string, std::string> blocks[] = {
        {op.c_support_code(), "support_code"},
        {op.c_support_code_apply(*node, prefix), "support_code_apply"}};
    for (const auto& [text, kind] : blocks) {
      if (text.empty() || !seen_support.insert(text).second) continue;
      w.line();
      w.fragment(text, node->id, kind);
    }
  }

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
  emit_state_hooks(w, graph, "init", "init_code_struct",
                   [](const COp& op, const Node& n, const Sub& sub) { return op.c_init_code_struct(n, sub); });
  w.dedent();
  w.line("kiln_cleanup: __attribute__((unused));");
  w.indent();
  w.line("return kiln_status;");
  w.dedent();
  w.line("}");
  w.line();
  w.line("static void kiln_state_cleanup(void *state_) {");
  w.indent();
  w.line("kiln_state *state = (kiln_state *)state_;");
  w.line("(void)state;");
  emit_state_hooks(w, graph, "cleanup", "cleanup_code_struct",
                   [](const COp& op, const Node& n, const Sub& sub) { return op.c_cleanup_code_struct(n, sub); });
  w.dedent();
  w.line("}");

  // Bodies first: a CUDA node's launch names its kernels, whose table precedes the thunks.
  std::vector<std::string> bodies;
  std::vector<NodeKernels> node_kernels;
  std::map<std::string, std::string> kernel_symbol;  // code without prefix -> symbol
  std::vector<std::string> cuda_preludes;
  for (const auto& node : graph.nodes()) {
    const COp& op = c_op(*node);
    CodeNames names;
    for (size_t i = 0; i < node->inputs.size(); ++i) names.inputs.push_back("in[" + std::to_string(i) + "]");
    for (size_t i = 0; i < node->outputs.size(); ++i) names.outputs.push_back("out[" + std::to_string(i) + "]");
    Sub sub;
    sub.prefix = "n" + std::to_string(node->id) + "_";
    try {
      if (const COp* inner = op.placed_on_cuda()) {
        CudaCode cuda = inner->cuda_code(*node, names, sub);
        bodies.push_back(cuda.launch);
        for (const auto& p : cuda.preludes) add_unique(cuda_preludes, p);
        // A kernel whose code matches an earlier one but for the node prefix is that
        // kernel: one definition, compiled once, launched under both enum names.
        NodeKernels nk{node->id, {}, {}};
        for (auto& k : cuda.kernels) {
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
        bodies.push_back(op.c_code(*node, names, sub));
      }
    } catch (const UserError& e) {
      throw UserError(node->label() + ": " + (op.placed_on_cuda() ? "cuda_code: " : "c_code: ") +
                      e.what());
    }
  }
  if (!m.kernel_names.empty()) {
    w.line();
    w.line("/* the module's CUDA kernels, launched by index (kernels.cu holds their code) */");
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
    link_cuda_kernels(m, graph, key, node_kernels, cuda_preludes);
  }

  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const auto& node = graph.nodes()[i];
    const std::string id = std::to_string(node->id);
    w.line();
    w.line("/* " + node_banner(*node) + " */");
    w.line("static int kiln_node_" + id +
           "(void *state_, kiln_ctx *ctx, kiln_tensor *const *in, kiln_tensor *const *out) {");
    w.indent();
    w.line("kiln_state *state = (kiln_state *)state_;");
    w.line("int kiln_status = 0;");
    w.line("(void)state;");
    w.line("(void)ctx;");
    w.line("(void)in;");
    w.line("(void)out;");
    w.fragment(bodies[i], node->id, "c_code");
    w.dedent();
    w.line("kiln_cleanup: __attribute__((unused));");
    w.indent();
    w.line("return kiln_status;");
    w.dedent();
    w.line("}");
    m.thunk_nodes.push_back(node->id);
  }

  w.line();
  w.line("static const kiln_thunk_info kiln_thunks[] = {");
  w.indent();
  for (const auto& node : graph.nodes()) {
    std::string label = node->label();
    std::string escaped;
    for (char c : label) {
      // '?' too: "??/" is a trigraph wherever a user's flags pick a strict C standard.
      if (c == '"' || c == '\\' || c == '?') escaped.push_back('\\');
      if (static_cast<unsigned char>(c) >= 0x20) escaped.push_back(c);
    }
    w.line("{kiln_node_" + std::to_string(node->id) + ", \"" + escaped + "\", " +
           std::to_string(node->id) + ", " + std::to_string(node->inputs.size()) + ", " +
           std::to_string(node->outputs.size()) + ", " +
           thunk_split(c_op(*node), *node) + "},");
  }
  if (graph.nodes().empty()) w.line("{0, 0, 0, 0, 0, 0, 0},");
  w.dedent();
  w.line("};");
  w.line("static const kiln_module_info kiln_info = {KILN_ABI_VERSION, \"" + key + "\", " +
         std::to_string(graph.nodes().size()) +
         ", kiln_thunks, sizeof(kiln_state), kiln_state_init, kiln_state_cleanup, " +
         std::to_string(m.kernel_names.size()) +
         (m.kernel_names.empty() ? ", 0};" : ", kiln_kernel_names};"));
  w.line("__attribute__((visibility(\"default\"))) const kiln_module_info *kiln_module(const kiln_support *support) {");
  w.indent();
  w.line("__atomic_store_n(&kiln_support_, support, __ATOMIC_RELAXED);");
  w.line("return &kiln_info;");
  w.dedent();
  w.line("}");
  return m;
}

}  // namespace kiln
