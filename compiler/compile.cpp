#include "compiler/compile.h"

#include <unistd.h>

#include <atomic>
#include <list>
#include <optional>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "cache/cache_store.h"
#include "cache/remote_tier.h"
#include "compiler/c_linker.h"
#include "compiler/compile_error.h"
#include "compiler/cuda_toolchain.h"
#include "compiler/diagnostics.h"
#include "compiler/explain.h"
#include "compiler/graph_key.h"
#include "ops/cop.h"
#include "rewrite/passes.h"
#include "rewrite/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/default_engine.h"
#include "runtime/module.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_graph(const Graph& graph) {
  if (graph.outputs().empty()) throw UserError("graph '" + graph.name() + "' has no outputs");
}

// A module loaded in this process, with what keeps its files alive: the pin on its cache
// entry, or the scratch folder it was built in (removed when the last Function goes).
struct Loaded {
  std::shared_ptr<Module> module;
  std::shared_ptr<const void> pin;
  fs::path source_path, module_path;
};

// The most recently used modules of this process, "<cache dir>\n<key>" -> module. Bounded, so
// a long-running process does not pin every entry it ever compiled against gc.
class Memo {
 public:
  std::optional<Loaded> find(const std::string& key) {
    capacity();  // a bad KILN_MEMO_SIZE fails here, before any compile
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void put(const std::string& key, const Loaded& loaded) {
    std::lock_guard lock(mutex_);
    if (index_.count(key)) return;
    order_.emplace_front(key, loaded);
    index_[key] = order_.begin();
    while (order_.size() > capacity()) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  void clear() {
    std::lock_guard lock(mutex_);
    index_.clear();
    order_.clear();
  }

 private:
  static size_t capacity() {
    const char* env = std::getenv("KILN_MEMO_SIZE");
    if (env && *env) {
      char* end = nullptr;
      long n = std::strtol(env, &end, 10);
      if (*end == '\0' && n >= 0) return static_cast<size_t>(n);
      throw UserError(std::string("KILN_MEMO_SIZE: '") + env + "' is not a count of modules");
    }
    return 64;
  }
  std::mutex mutex_;
  std::list<std::pair<std::string, Loaded>> order_;  // most recent first
  std::map<std::string, std::list<std::pair<std::string, Loaded>>::iterator> index_;
};

Memo& memo() {
  static Memo m;
  return m;
}

bool cache_enabled(const CompileOptions& options) {
  if (options.use_cache) return *options.use_cache;
  const char* env = std::getenv("KILN_CACHE");
  return !(env && std::string(env) == "0");
}

// False when some op has no cache_version; warns once per op per process.
bool cacheable(const Graph& graph) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  bool ok = true;
  for (const auto& node : graph.nodes()) {
    if (node->op->cache_version()) continue;
    ok = false;
    std::lock_guard lock(mutex);
    if (warned.insert(node->op->name()).second) {
      warn("op '" + node->op->name() +
           "' has no cache_version: graphs using it are compiled but never cached");
    }
  }
  return ok;
}

bool has_cuda_nodes(const Graph& graph) {
  for (const auto& node : graph.nodes()) {
    const auto* op = dynamic_cast<const COp*>(node->op.get());
    if (op && op->placed_on_cuda()) return true;
  }
  return false;
}

// The C toolchain's components, and the CUDA toolchain's when nodes run on the device.
ModuleKey graph_module_key(const Graph& graph, const Toolchain& tc) {
  KeyComponents components = tc.key_components();
  if (has_cuda_nodes(graph)) {
    for (auto& c : CudaToolchain::get().key_components()) components.push_back(c);
  }
  return module_key(graph, components);
}

// Slots: one per variable; steps: one per node (thunk i runs node i).
Program build_program(const Graph& graph) {
  Program p;
  std::map<const Variable*, int> slot;
  auto add_slot = [&](const Variable* v, SlotKind kind) {
    slot[v] = static_cast<int>(p.slots.size());
    p.slots.push_back(SlotSpec{v->name, v->type.dtype, v->type.dims, kind});
    if (v->owner) {
      const auto* op = dynamic_cast<const COp*>(v->owner->op.get());
      p.slots.back().on_device = op && op->output_on_device();
    } else {
      p.slots.back().on_device = v->on_device;
    }
    return slot[v];
  };
  for (const Variable* v : graph.inputs()) p.input_slots.push_back(add_slot(v, SlotKind::kInput));
  for (const Variable* v : graph.constants())
    p.params.emplace_back(add_slot(v, SlotKind::kParam), *v->value);
  for (const auto& node : graph.nodes()) {
    StepSpec step;
    step.thunk = node->id;
    for (const Variable* v : node->inputs) step.inputs.push_back(slot.at(v));
    for (const Variable* v : node->outputs) step.outputs.push_back(add_slot(v, SlotKind::kTemp));
    const auto* cop = dynamic_cast<const COp*>(node->op.get());
    if (const int k = cop && cop->output_on_device() ? cop->cuda_view_of(*node) : -1; k >= 0) {
      p.slots[static_cast<size_t>(step.outputs.at(0))].view_of = step.inputs.at(static_cast<size_t>(k));
    }
    step.label = node->label();
    std::shared_ptr<const Op> op = node->op;
    step.infer_shape = [op](const std::vector<Shape>& shapes) { return op->infer_shape(shapes); };
    p.steps.push_back(std::move(step));
  }
  for (const Variable* v : graph.outputs()) p.output_slots.push_back(slot.at(v));
  return p;
}

std::string format_compile_error(const std::string& title, const Graph& graph,
                                 const std::vector<Diagnostic>& diags, const std::string& log,
                                 const fs::path& kept) {
  std::string msg = title;
  const std::string file = kept.filename().string();
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
      msg += node.label() + ", " + d.origin.fragment + " line " +
             std::to_string(d.origin.fragment_line) + ": ";
    } else if (!d.origin.fragment.empty()) {
      msg += d.origin.fragment + " line " + std::to_string(d.origin.fragment_line) + ": ";
    }
    msg += d.severity + ": " + d.message + " (" + file + ":" + std::to_string(d.line) +
           (d.column > 0 ? ":" + std::to_string(d.column) : "") + ")";
    if (!d.source_line.empty()) msg += "\n      " + d.source_line;
  }
  if (shown == 0) msg += "\n" + log;  // e.g. a link error libclang cannot see
  msg += "\n  full source kept at " + kept.string();
  return msg;
}

// Keeps a failed build's source and log for the user: in the cache's failed/<key>/, or, where
// the cache cannot be written, in a private temporary folder.
fs::path keep_failed(CacheStore* store, const std::string& key, const std::string& source,
                     const std::string& log) {
  std::vector<std::pair<std::string, std::string>> files{{"module.c", source},
                                                         {"compiler.log", log}};
  if (store && store->writable()) {
    try {
      return store->keep_failed(key, files);
    } catch (const Error& e) {
      warn(std::string("could not keep the failed build in the cache: ") + e.what());
    }
  }
  std::string tmpl = (fs::temp_directory_path() / "kiln-failed-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw UserError("cannot create a folder for the failed build");
  for (const auto& [name, contents] : files) write_file_atomic(fs::path(tmpl) / name, contents);
  return tmpl;
}

// The CUDA half of a module: kernels.cu and the device image beside module.so. A failed
// build keeps its source and names each diagnostic's node, as for the C module.
void build_kernels(const Graph& graph, const LinkedModule& linked, const std::string& key,
                   const fs::path& dir, CacheStore* store, CompileInfo& info) {
  const CudaToolchain& cuda = CudaToolchain::get();
  write_file_atomic(dir / "kernels.cu", linked.cuda.str());
  auto t = Clock::now();
  CompileOutcome outcome = cuda.build(dir);
  info.times.compile_ms += ms_since(t);
  if (!outcome.log.empty()) info.compiler_log += outcome.log;
  if (outcome.ok) return;
  fs::path kept = keep_failed(store, key, linked.code.str(), outcome.log);
  write_file_atomic(kept / "kernels.cu", linked.cuda.str());
  std::vector<Diagnostic> diags = cuda_diagnostics(outcome.log, linked.cuda);
  const std::string msg = format_compile_error(
      "CUDA kernels for graph '" + graph.name() + "' failed to compile (" +
          (cuda.emulated() ? "emulator" : cuda.arch()) + ")",
      graph, diags, outcome.log, kept / "kernels.cu");
  throw CompileError(msg, std::move(diags), kept / "kernels.cu");
}

// Generates and compiles the module into `dir` (module.c, module.so). On a compile error the
// source and log are kept (see keep_failed) and a CompileError names the nodes.
void build_module(const Graph& graph, const Toolchain& tc, const std::string& key,
                  const fs::path& dir, CacheStore* store, CompileInfo& info) {
  auto t = Clock::now();
  LinkedModule linked = link_c_module(graph, key);
  info.times.codegen_ms = ms_since(t);
  if (debug_level() >= 3) log_line("generated source:\n" + linked.code.str());
  write_file_atomic(dir / "module.c", linked.code.str());

  t = Clock::now();
  CompileOutcome outcome =
      tc.compile(dir / "module.c", dir / "module.so", linked.compile_args, linked.libraries);
  info.times.compile_ms = ms_since(t);
  info.compiler_log = outcome.log;
  if (!outcome.ok) {
    auto kept = keep_failed(store, key, linked.code.str(), outcome.log) / "module.c";
    std::vector<std::string> args{"-std=gnu11", "-march=" + tc.cpu()};
    args.insert(args.end(), linked.compile_args.begin(), linked.compile_args.end());
    auto diags = parse_diagnostics(kept, args, linked.code);
    std::string message =
        format_compile_error("module for graph '" + graph.name() + "' failed to compile", graph,
                             diags, outcome.log, kept);  // before diags is moved
    throw CompileError(message, std::move(diags), kept);
  }
  if (!outcome.log.empty())
    warn("compiler output for graph '" + graph.name() + "':\n" + outcome.log);
  if (!linked.kernel_names.empty()) build_kernels(graph, linked, key, dir, store, info);
}

std::string graph_summary(const Graph& graph) {
  std::map<std::string, int> ops;
  for (const auto& node : graph.nodes()) ++ops[node->op->name()];
  std::vector<std::string> parts;
  for (const auto& [name, n] : ops) parts.push_back(std::to_string(n) + " " + name);
  std::vector<std::string> ins;
  for (const Variable* v : graph.inputs()) ins.push_back(v->name + ": " + v->type.to_string());
  return std::to_string(graph.nodes().size()) + " nodes (" + join(parts, ", ") + "); inputs " +
         join(ins, ", ");
}

// What one remote operation did, into the local index's counters (for `kiln cache stats`).
void record_remote(CacheStore& store, const RemoteCounters& a, const RemoteCounters& b) {
  const std::pair<const char*, double> deltas[] = {
      {"remote_hits", static_cast<double>(b.hits - a.hits)},
      {"remote_misses", static_cast<double>(b.misses - a.misses)},
      {"remote_rejects", static_cast<double>(b.rejects - a.rejects)},
      {"remote_errors", static_cast<double>(b.errors - a.errors)},
      {"remote_uploads", static_cast<double>(b.uploads - a.uploads)},
      {"remote_bytes", static_cast<double>((b.bytes_in + b.bytes_out) - (a.bytes_in + a.bytes_out))}};
  for (const auto& [name, by] : deltas) {
    if (by != 0) store.count(name, by);
  }
}

// Hit, or compile under the key's lock and publish. Returns the pinned entry.
CacheEntry lookup_or_build(CacheStore& store, const Graph& graph, const Toolchain& tc,
                           const ModuleKey& mk, const CompileOptions& options, CompileInfo& info) {
  auto t = Clock::now();
  LookupResult r = store.lookup(mk.key, false);
  info.cache = CacheStatus::kHit;
  if (r.entry) {
    info.times.lookup_ms = ms_since(t);
    if (debug_level() >= 2) log_line("cache: hit " + r.entry->dir.string());
    return std::move(*r.entry);
  }
  // Miss: whoever holds the key's lock is compiling it; wait, then look again.
  auto w = Clock::now();
  FileLock lock = store.lock_key(mk.key);
  info.times.wait_ms = ms_since(w);
  r = store.lookup(mk.key, true);
  info.times.lookup_ms = ms_since(t) - info.times.wait_ms;
  if (r.entry) {
    if (debug_level() >= 2) {
      log_line("cache: hit after waiting " + format_double(info.times.wait_ms) +
               " ms for another compile of " + mk.key);
    }
    return std::move(*r.entry);
  }

  info.cache = CacheStatus::kMiss;
  store.record_miss();
  if (!r.problem.empty()) info.cache_note = "recompiled a bad cache entry (" + r.problem + ")";
  if (options.explain) {
    std::string why = explain_miss(store, mk, graph.name());
    info.cache_note = info.cache_note.empty() ? why : info.cache_note + "\n" + why;
  }
  RemoteTier* remote = RemoteTier::process_default();
  std::unique_ptr<RemoteLease> lease;  // released (token-checked) when this function returns
  if (remote) {
    // The remote tier: verified before anything is written here, then published locally.
    auto r0 = Clock::now();
    const RemoteCounters before = remote->counters();
    std::optional<RemoteEntry> fetched = remote->fetch(mk.key);
    record_remote(store, before, remote->counters());
    if (!fetched) {
      // One compile per key across machines: claim it, or wait for whoever has.
      auto w0 = Clock::now();
      auto claimed = remote->claim_or_wait(mk.key);
      lease = std::move(claimed.first);
      fetched = std::move(claimed.second);
      info.times.wait_ms += ms_since(w0);
      if (fetched) store.count("remote_hits");
    }
    info.times.remote_ms = ms_since(r0);
    if (fetched) {
      WorkFolder staging = store.new_staging(mk.key);
      for (const auto& [name, bytes] : fetched->files)
        write_file_atomic(staging.path() / name, bytes, store.access().file_mode(), true);
      info.cache = CacheStatus::kRemoteHit;
      if (debug_level() >= 2) log_line("cache: remote hit for " + mk.key);
      return store.publish(std::move(staging), std::move(fetched->meta));
    }
  }
  if (debug_level() >= 2) log_line("cache: miss for " + mk.key + ", compiling");
  WorkFolder staging = store.new_staging(mk.key);  // removed unless published
  build_module(graph, tc, mk.key, staging.path(), &store, info);
  EntryMeta meta;
  meta.key = mk.key;
  meta.label = graph.name();
  meta.family = mk.family;
  meta.summary = graph_summary(graph);
  meta.created = unix_now();
  meta.compile_ms = info.times.codegen_ms + info.times.compile_ms;
  meta.components = mk.components;
  meta.files = {FileRecord{"module.so", 0, ""}, FileRecord{"module.c", 0, ""}};
  if (has_cuda_nodes(graph)) {
    meta.files.push_back(FileRecord{"kernels.cu", 0, ""});
    for (const auto& f : CudaToolchain::get().outputs()) meta.files.push_back(FileRecord{f, 0, ""});
  }
  CacheEntry entry = store.publish(std::move(staging), std::move(meta));
  if (remote && remote->can_write()) {
    auto r0 = Clock::now();
    const RemoteCounters before = remote->counters();
    remote->upload(entry.meta, entry.dir);
    record_remote(store, before, remote->counters());
    info.times.remote_ms += ms_since(r0);
  }
  return entry;
}

Function make_function(const Graph& graph, const Loaded& loaded, CompileInfo info,
                       const CompileOptions& options) {
  info.source_path = loaded.source_path;
  info.module_path = loaded.module_path;
  auto executor = std::make_shared<Executor>(loaded.module, build_program(graph),
                                             options.engine ? options.engine : &default_engine());
  if (options.split_grain > 0) executor->set_split_grain(options.split_grain);
  executor->set_poison_buffers(options.poison_buffers);
  std::vector<std::string> in_names, out_names;
  std::vector<TensorType> in_types;
  for (const Variable* v : graph.inputs()) {
    in_names.push_back(v->name);
    in_types.push_back(v->type);
  }
  for (const Variable* v : graph.outputs()) out_names.push_back(v->name);
  return Function(std::move(executor), std::move(in_names), std::move(in_types),
                  std::move(out_names), std::move(info), loaded.pin);
}

void log_times(const Graph& graph, const CompileInfo& info) {
  if (debug_level() < 1) return;
  log_line("graph '" + graph.name() + "': cache " + to_string(info.cache) + "; rewrite " +
           format_double(info.times.rewrite_ms) + " ms, key " +
           format_double(info.times.key_ms) + " ms, lookup " + format_double(info.times.lookup_ms) +
           " ms, wait " + format_double(info.times.wait_ms) + " ms, codegen " +
           format_double(info.times.codegen_ms) + " ms, compile " +
           format_double(info.times.compile_ms) + " ms, load " + format_double(info.times.load_ms) +
           " ms");
}

}  // namespace

Graph optimized_graph(const Graph& graph, const CompileOptions& options) {
  check_graph(graph);
  if (options.device == "cpu") return optimize(graph, options.passes);
  if (options.device != "cuda") {
    throw UserError("device '" + options.device + "' is not one kiln has (cpu, cuda)");
  }
  // Packed GEMM weights and fused reductions are CPU forms with no CUDA
  // kernels yet: those passes stay off so the nodes they would replace can go to the device.
  std::string spec = passes_spec(options.passes);
  if (spec != "none") spec += std::string(spec.empty() ? "" : ",") + "-pack,-reduction";
  return place_on_cuda(optimize(graph, spec), options.device_io);
}

std::string generate_source(const Graph& source, const CompileOptions& options) {
  Graph graph = optimized_graph(source, options);
  ToolchainConfig tc_config = options.toolchain;
  if (tc_config.cache_dir.empty()) tc_config.cache_dir = options.cache_dir;
  const Toolchain& tc = Toolchain::get(tc_config);
  return link_c_module(graph, graph_module_key(graph, tc).key).code.str();
}

void clear_compile_memo() { memo().clear(); }

namespace {

// A build outside the cache (KILN_CACHE=0, an uncacheable graph, a read-only cache): its
// folder lives as long as the functions that use the module, then goes.
Loaded build_unstored(const Graph& graph, const Toolchain& tc, const ModuleKey& mk,
                      CacheStore* store, CompileInfo& info) {
  std::shared_ptr<WorkFolder> folder;
  if (store && store->writable()) {
    folder = std::make_shared<WorkFolder>(store->new_scratch(mk.key.substr(0, 16)));
  } else {
    // A private per-user folder: the module built there is loaded, so nobody else may write it.
    fs::path parent = fs::temp_directory_path() / ("kiln-scratch-" + std::to_string(::geteuid()));
    folder = std::make_shared<WorkFolder>(
        WorkFolder::create(parent, mk.key.substr(0, 16), CacheAccess::private_access()));
  }
  build_module(graph, tc, mk.key, folder->path(), store, info);
  Loaded loaded;
  loaded.source_path = folder->path() / "module.c";
  loaded.module_path = folder->path() / "module.so";
  loaded.pin = folder;
  return loaded;
}

}  // namespace

Function compile(const Graph& source, const CompileOptions& options) {
  CompileInfo info;
  auto t = Clock::now();
  const Graph graph = optimized_graph(source, options);
  info.times.rewrite_ms = ms_since(t);
  t = Clock::now();
  const fs::path root = options.cache_dir.empty() ? cache_root() : options.cache_dir;
  ToolchainConfig tc_config = options.toolchain;
  if (tc_config.cache_dir.empty()) tc_config.cache_dir = root;
  const Toolchain& tc = Toolchain::get(tc_config);
  ModuleKey mk = graph_module_key(graph, tc);
  info.key = mk.key;
  info.times.key_ms = ms_since(t);

  const bool use_cache = cache_enabled(options);
  const bool storable = cacheable(graph);
  Loaded loaded;
  bool memoize = false;
  if (!use_cache || !storable) {
    info.cache = use_cache ? CacheStatus::kUncacheable : CacheStatus::kBypassed;
    loaded = build_unstored(graph, tc, mk, CacheStore::open(root).get(), info);
  } else {
    const std::string memo_key = root.string() + "\n" + mk.key;
    if (auto hit = memo().find(memo_key)) {
      info.cache = CacheStatus::kMemo;
      if (hit->module->kernels()) info.device = cuda_device().describe();
      return make_function(graph, *hit, std::move(info), options);
    }
    auto store = CacheStore::open(root);
    if (std::string blocker = store->publish_blocker(); !blocker.empty()) {
      // Hits still load; a miss is compiled beside the cache and not stored.
      LookupResult r = store->lookup(mk.key, false);
      if (r.entry) {
        info.cache = CacheStatus::kHit;
        loaded.source_path = r.entry->file("module.c");
        loaded.module_path = r.entry->file("module.so");
        memoize = true;
      } else {
        warn(blocker + ": compiling without storing the module" +
             (r.problem.empty() ? "" : " (the entry there: " + r.problem + ")"));
        info.cache = CacheStatus::kUncacheable;
        loaded = build_unstored(graph, tc, mk, store.get(), info);
      }
    } else {
      CacheEntry entry = lookup_or_build(*store, graph, tc, mk, options, info);
      loaded.source_path = entry.file("module.c");
      loaded.module_path = entry.file("module.so");
      loaded.pin = entry.pin;
      memoize = true;
    }
  }

  t = Clock::now();
  loaded.module = Module::load(loaded.module_path);
  info.times.load_ms = ms_since(t);
  if (loaded.module->kernels()) info.device = cuda_device().describe();
  log_times(graph, info);
  if (memoize) memo().put(root.string() + "\n" + mk.key, loaded);
  return make_function(graph, loaded, std::move(info), options);
}

}  // namespace kiln
