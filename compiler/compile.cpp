#include "compiler/compile.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>

#include "compiler/c_linker.h"
#include "compiler/compile_error.h"
#include "compiler/diagnostics.h"
#include "compiler/graph_key.h"
#include "runtime/module.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::filesystem::path work_dir(const CompileOptions& options) {
  return options.work_dir.empty() ? cache_root() / "builds" : options.work_dir;
}

void check_graph(const Graph& graph) {
  if (graph.outputs().empty()) throw UserError("graph '" + graph.name() + "' has no outputs");
}

// Slots: one per variable; steps: one per node (thunk i runs node i).
Program build_program(const Graph& graph) {
  Program p;
  std::map<const Variable*, int> slot;
  auto add_slot = [&](const Variable* v, SlotKind kind) {
    slot[v] = static_cast<int>(p.slots.size());
    p.slots.push_back(SlotSpec{v->name, v->type.dtype, v->type.dims, kind});
    return slot[v];
  };
  for (const Variable* v : graph.inputs()) p.input_slots.push_back(add_slot(v, SlotKind::kInput));
  for (const Variable* v : graph.constants()) p.params.emplace_back(add_slot(v, SlotKind::kParam), *v->value);
  for (const auto& node : graph.nodes()) {
    StepSpec step;
    step.thunk = node->id;
    for (const Variable* v : node->inputs) step.inputs.push_back(slot.at(v));
    for (const Variable* v : node->outputs) step.outputs.push_back(add_slot(v, SlotKind::kTemp));
    step.label = node->label();
    std::shared_ptr<const Op> op = node->op;
    step.infer_shape = [op](const std::vector<Shape>& shapes) { return op->infer_shape(shapes); };
    p.steps.push_back(std::move(step));
  }
  for (const Variable* v : graph.outputs()) p.output_slots.push_back(slot.at(v));
  return p;
}

std::string format_compile_error(const Graph& graph, const std::vector<Diagnostic>& diags,
                                 const std::string& log, const std::filesystem::path& kept) {
  std::string msg = "module for graph '" + graph.name() + "' failed to compile";
  int shown = 0;
  for (const auto& d : diags) {
    if (d.severity == "warning") continue;
    if (shown++ == 8) {
      msg += "\n  ...";
      break;
    }
    msg += "\n  ";
    if (d.origin.node >= 0) {
      const Node& node = *graph.nodes().at(static_cast<size_t>(d.origin.node));
      msg += node.label() + ", " + d.origin.fragment + " line " + std::to_string(d.origin.fragment_line) + ": ";
    } else if (!d.origin.fragment.empty()) {
      msg += d.origin.fragment + " line " + std::to_string(d.origin.fragment_line) + ": ";
    }
    msg += d.severity + ": " + d.message + " (module.c:" + std::to_string(d.line) + ":" +
           std::to_string(d.column) + ")";
    if (!d.source_line.empty()) msg += "\n      " + d.source_line;
  }
  if (shown == 0) msg += "\n" + log;  // e.g. a link error libclang cannot see
  msg += "\n  full source kept at " + kept.string();
  return msg;
}

std::filesystem::path unique_temp(const std::filesystem::path& target) {
  static std::atomic<int> counter{0};
  auto tmp = target;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  return tmp;
}

}  // namespace

std::string generate_source(const Graph& graph, const CompileOptions& options) {
  check_graph(graph);
  const Toolchain& tc = Toolchain::get(options.toolchain);
  return link_c_module(graph, module_key(graph, tc.fingerprint())).code.str();
}

Function compile(const Graph& graph, const CompileOptions& options) {
  check_graph(graph);
  CompileInfo info;
  auto t = Clock::now();
  const Toolchain& tc = Toolchain::get(options.toolchain);
  info.key = module_key(graph, tc.fingerprint());
  info.times.key_ms = ms_since(t);

  t = Clock::now();
  LinkedModule linked = link_c_module(graph, info.key);
  info.times.codegen_ms = ms_since(t);
  if (debug_level() >= 3) log_line("generated source:\n" + linked.code.str());

  const auto dir = work_dir(options) / info.key.substr(0, 2) / info.key;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError("cannot create build directory '" + dir.string() + "': " + ec.message());
  info.source_path = dir / "module.c";
  info.module_path = dir / "module.so";
  write_file_atomic(info.source_path, linked.code.str());

  t = Clock::now();
  auto tmp_so = unique_temp(info.module_path);
  CompileOutcome outcome = tc.compile(info.source_path, tmp_so, linked.compile_args, linked.libraries);
  info.times.compile_ms = ms_since(t);
  info.compiler_log = outcome.log;
  if (!outcome.ok) {
    std::filesystem::remove(tmp_so, ec);
    auto failed_dir = cache_root() / "failed" / info.key;
    std::filesystem::create_directories(failed_dir, ec);
    auto kept = failed_dir / "module.c";
    write_file_atomic(kept, linked.code.str());
    write_file_atomic(failed_dir / "compiler.log", outcome.log);
    std::vector<std::string> args{"-std=c11", "-march=" + tc.cpu()};
    args.insert(args.end(), linked.compile_args.begin(), linked.compile_args.end());
    auto diags = parse_diagnostics(kept, args, linked.code);
    std::string message = format_compile_error(graph, diags, outcome.log, kept);  // before diags is moved
    throw CompileError(message, std::move(diags), kept);
  }
  if (!outcome.log.empty()) warn("compiler output for graph '" + graph.name() + "':\n" + outcome.log);
  std::filesystem::rename(tmp_so, info.module_path, ec);
  if (ec) throw UserError("cannot place module at '" + info.module_path.string() + "': " + ec.message());

  t = Clock::now();
  auto module = Module::load(info.module_path);
  info.times.load_ms = ms_since(t);
  if (debug_level() >= 1) {
    log_line("graph '" + graph.name() + "': key " + format_double(info.times.key_ms) + " ms, codegen " +
             format_double(info.times.codegen_ms) + " ms, compile " + format_double(info.times.compile_ms) +
             " ms, load " + format_double(info.times.load_ms) + " ms");
  }

  auto executor = std::make_shared<Executor>(std::move(module), build_program(graph));
  std::vector<std::string> in_names, out_names;
  std::vector<TensorType> in_types;
  for (const Variable* v : graph.inputs()) {
    in_names.push_back(v->name);
    in_types.push_back(v->type);
  }
  for (const Variable* v : graph.outputs()) out_names.push_back(v->name);
  return Function(std::move(executor), std::move(in_names), std::move(in_types), std::move(out_names),
                  std::move(info));
}

}  // namespace kiln
