#include "compiler/compile.h"

#include "compiler/backend.h"
#include "compiler/updates.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "cache/cache_store.h"
#include "cache/remote_tier.h"
#include "compiler/c/host_call_binding.h"
#include "compiler/c/kernel_build.h"
#include "compiler/c/linker.h"
#include "compiler/c/op_library_binding.h"
#include "compiler/compile_error.h"
#include "compiler/diagnostics.h"
#include "compiler/entries/entry_layout.h"
#include "compiler/entries/prepared_weights.h"
#include "compiler/entries/remote_entries.h"
#include "compiler/explain.h"
#include "compiler/graph_key.h"
#include "compiler/module_plan.h"
#include "compiler/weight_sets.h"
#include "ops/cop.h"
#include "ops/registry.h"
#include "rewrite/passes.h"
#include "rewrite/pipeline.h"
#include "runtime/engine/default_engine.h"
#include "runtime/module/module.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

void check_graph(const Graph& graph) {
  if (graph.outputs().empty()) throw UserError("graph '" + graph.name() + "' has no outputs");
}

// A module loaded in this process, with what keeps its files alive: the pin on its cache
// entry, or the scratch folder it was built in (removed when the last Function goes), and
// its plan (the program and how to prepare weights for it).
struct Loaded {
  std::shared_ptr<Module> module;
  std::shared_ptr<const void> pin;
  fs::path source_path, module_path;
  std::shared_ptr<const ModulePlan> plan;
  std::shared_ptr<WeightSets> weights = std::make_shared<WeightSets>();
  // Where prepared weight sets of this module are cached (null: not cached, e.g. KILN_CACHE=0).
  std::shared_ptr<PreparedWeights> prepared;
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

// False when some op has no cache_version, or is not one a cache hit can rebuild by name
// (the registry's ops; its plan names each step's op); warns once per op per process.
bool cacheable(const Graph& graph) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  bool ok = true;
  for (const auto& node : graph.nodes()) {
    const std::string& name = node->op->name();
    const char* why = nullptr;
    if (!node->op->cache_version()) {
      why = "has no cache_version";
    } else if (!OpRegistry::instance().contains(name) && name != "to_device" && name != "to_host" &&
               !backend_of_placed(name)) {
      why = "is not in the op registry";
    }
    if (!why) continue;
    ok = false;
    std::lock_guard lock(mutex);
    if (warned.insert(name).second) {
      warn("op '" + name + "' " + why + ": graphs using it are compiled but never cached");
    }
  }
  return ok;
}

// Everything besides the graph that enters the key, for one set of options (and the
// environment they defer to); resolved once per process for each distinct set.
struct KeyContext {
  fs::path root;
  const Toolchain* toolchain = nullptr;
  const Backend* backend = nullptr;
  bool device_io = false;
  std::string spec;  // the passes spec the pipeline runs (the device skips passes not for it)
  LinkMode link_mode = LinkMode::kKernels;
  KeyComponents components;
};

LinkMode link_mode(const CompileOptions& options) {
  if (options.kernel_units) return *options.kernel_units ? LinkMode::kKernels : LinkMode::kModule;
  const char* env = std::getenv("KILN_KERNELS");
  if (!env || !*env || std::string(env) == "1") return LinkMode::kKernels;
  if (std::string(env) == "0") return LinkMode::kModule;
  throw UserError(std::string("KILN_KERNELS: '") + env + "' is not 0 or 1");
}

const KeyContext& key_context(const CompileOptions& options) {
  const fs::path root = options.cache_dir.empty() ? cache_root() : options.cache_dir;
  const char* env_cc = std::getenv("KILN_CC");
  const char* env_cflags = std::getenv("KILN_CFLAGS");
  const std::optional<std::string> given = effective_passes(options);
  const std::string spec = passes_spec(given);
  std::string id = root.string();
  for (const std::string& part :
       {options.toolchain.cc, options.toolchain.cflags, options.toolchain.cache_dir.string(),
        std::string(env_cc ? env_cc : ""), std::string(env_cflags ? env_cflags : ""),
        options.device, std::string(options.device_io ? "io" : ""), spec,
        std::string(given ? "1" : "0"),
        std::string(link_mode(options) == LinkMode::kKernels ? "kernels" : "module")}) {
    id.append("\n").append(part);
  }
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<const KeyContext>> contexts;
  {
    std::lock_guard lock(mutex);
    if (auto it = contexts.find(id); it != contexts.end()) return *it->second;
  }
  auto ctx = std::make_unique<KeyContext>();
  ctx->root = root;
  ctx->backend = &backend_named(options.device);
  ctx->device_io = options.device_io;
  if (ctx->device_io && ctx->backend->is_host()) {
    throw UserError("device_io needs a device (device '" + options.device + "' is the host)");
  }
  ctx->spec = spec;
  ctx->link_mode = link_mode(options);
  const std::string passes =
      passes_component(ctx->spec, given ? "passes" : "KILN_PASSES", ctx->backend->name());
  ToolchainConfig tc_config = options.toolchain;
  if (tc_config.cache_dir.empty()) tc_config.cache_dir = root;
  ctx->toolchain = &Toolchain::get(tc_config);
  ctx->components = ctx->toolchain->key_components();
  for (auto& c : ctx->backend->key_components()) ctx->components.push_back(c);
  ctx->components.emplace_back("passes", passes);
  ctx->components.emplace_back("device", options.device + (options.device_io ? " device_io" : ""));
  // The two layouts are different code (sizes as literals, or read from kp).
  ctx->components.emplace_back("link", ctx->link_mode == LinkMode::kKernels ? "kernels" : "module");
  std::lock_guard lock(mutex);
  auto& slot = contexts[id];
  if (!slot) slot = std::move(ctx);
  return *slot;
}

// The key of a graph as given. A graph object this process keyed before, unchanged since
// (same generation, options and constant tensors), costs no hashing at all.
std::shared_ptr<const ModuleKey> key_of(const Graph& graph, const KeyContext& ctx) {
  struct Seen {
    uint64_t generation = 0;
    const KeyContext* ctx = nullptr;
    std::vector<const void*> constants;
    std::shared_ptr<const ModuleKey> key;
  };
  static std::mutex mutex;
  static std::unordered_map<uint64_t, Seen> seen;
  auto constants = [&] {
    std::vector<const void*> ids;
    ids.reserve(graph.constants().size());
    for (const Variable* c : graph.constants()) {
      ids.push_back(c->value ? c->value->data() : nullptr);
    }
    return ids;
  };
  {
    std::lock_guard lock(mutex);
    auto it = seen.find(graph.uid());
    if (it != seen.end() && it->second.generation == graph.generation() && it->second.ctx == &ctx &&
        it->second.constants == constants()) {
      return it->second.key;
    }
  }
  auto key = std::make_shared<const ModuleKey>(module_key(graph, ctx.components));
  std::lock_guard lock(mutex);
  if (seen.size() >= 1024) seen.clear();  // a bound for processes that build many graphs
  seen[graph.uid()] = Seen{graph.generation(), &ctx, constants(), key};
  return key;
}

Graph optimize_for(const Graph& source, const KeyContext& ctx) {
  Graph optimized = optimize(source, ctx.spec, ctx.backend->name());
  if (ctx.backend->is_host()) return optimized;
  return place_on_device(optimized, *ctx.backend->op_code(), ctx.device_io);
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
  // e.g. a link error, which names no line: the compiler's own words (cut short).
  if (shown == 0) msg += "\n" + (log.size() > 4000 ? log.substr(0, 4000) + "\n  ..." : log);
  msg += "\n  full source kept at " + kept.string();
  return msg;
}

// Keeps a failed build's source and log for the user: in the cache's failed/<key>/, or, where
// the cache cannot be written, in a private temporary folder.
fs::path keep_failed(CacheStore* store, const std::string& key, const std::string& source,
                     const std::string& log,
                     std::vector<std::pair<std::string, std::string>> files = {}) {
  files.emplace_back("module.c", source);
  files.emplace_back("compiler.log", log);
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

// The device half of a module: the device unit and its image beside module.so. A failed
// build keeps its source and names each diagnostic's node, as for the C module.
void build_device_unit(const Graph& graph, const LinkedModule& linked, const std::string& key,
                       const fs::path& dir, CacheStore* store, CompileInfo& info) {
  const Backend& backend = *linked.device;
  const std::string unit = backend.unit_name();
  write_file_atomic(dir / unit, linked.device_unit.str());
  auto t = Clock::now();
  CompileOutcome outcome = backend.build_unit(dir);
  info.times.compile_ms += ms_since(t);
  if (!outcome.log.empty()) info.compiler_log += outcome.log;
  if (outcome.ok) return;
  fs::path kept = keep_failed(store, key, linked.code.str(), outcome.log);
  write_file_atomic(kept / unit, linked.device_unit.str());
  std::vector<Diagnostic> diags = backend.unit_diagnostics(outcome.log, linked.device_unit);
  const std::string msg =
      format_compile_error(backend.title() + " kernels for graph '" + graph.name() +
                               "' failed to compile (" + backend.target() + ")",
                           graph, diags, outcome.log, kept / unit);
  throw CompileError(msg, std::move(diags), kept / unit);
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

// What building a module gave besides its files.
struct Built {
  std::shared_ptr<const ModulePlan> plan;
  std::vector<Tensor> prepared;  // the weight set the rewrites prepared (ModulePlan::prepared_in)
  bool kernels = false;          // it has a device half (the device unit and its image)
  std::string summary;           // of the optimized graph, for `kiln cache ls`
};

// Runs the rewrites and generates and compiles the module into `dir` (module.c, module.so,
// plan). On a compile error the source and log are kept (see keep_failed) and a CompileError
// names the nodes.
Built build_module(const Graph& source, const KeyContext& ctx, const std::string& key,
                   const fs::path& dir, CacheStore* store, bool stored, CompileInfo& info) {
  auto t = Clock::now();
  const Graph graph = optimize_for(source, ctx);
  info.times.rewrite_ms = ms_since(t);
  t = Clock::now();
  LinkedModule linked = link_c_module(graph, key, ctx.link_mode);
  Built built{ModulePlan::from_graph(graph, source),
              {},
              !linked.kernel_names.empty(),
              graph_summary(graph)};
  const std::string plan = built.plan->serialize();
  // A stored module's plan goes through its text, so every miss runs the parser a hit runs.
  // (An unstored one keeps the graph's ops, which need not be in the op registry.)
  if (stored) built.plan = ModulePlan::parse(plan, (dir / "plan").string());
  built.prepared = built.plan->prepared_in(graph);
  info.times.codegen_ms = ms_since(t);
  if (debug_level() >= 3) log_line("generated source:\n" + linked.code.str());
  write_file_atomic(dir / "plan", plan);
  write_file_atomic(dir / "module.c", linked.code.str());

  t = Clock::now();
  if (linked.mode == LinkMode::kKernels) {
    // Kernels go to the cache only where modules could (not with KILN_CACHE=0, nor where
    // publishing is blocked); elsewhere they are compiled for this module alone.
    CacheStore* kernel_store =
        info.cache != CacheStatus::kBypassed && store && store->publish_blocker().empty() ? store
                                                                                          : nullptr;
    std::optional<UnitFailure> failed =
        build_from_kernels(linked, *ctx.toolchain, kernel_store, dir, info);
    if (failed) {
      auto kept = keep_failed(store, key, linked.code.str(), failed->log,
                              {{failed->file, failed->code->str()}}) /
                  failed->file;
      auto diags = parse_diagnostics(failed->log, *failed->code);
      std::string message =
          format_compile_error("module for graph '" + graph.name() + "' failed to compile", graph,
                               diags, failed->log, kept);  // before diags is moved
      throw CompileError(message, std::move(diags), kept);
    }
    if (!info.compiler_log.empty())
      warn("compiler output for graph '" + graph.name() + "':\n" + info.compiler_log);
    if (built.kernels) build_device_unit(graph, linked, key, dir, store, info);
    return built;
  }
  CompileOutcome outcome = ctx.toolchain->compile(dir / "module.c", dir / "module.so",
                                                  linked.compile_args, linked.libraries);
  info.times.compile_ms = ms_since(t);
  info.compiler_log = outcome.log;
  if (!outcome.ok) {
    auto kept = keep_failed(store, key, linked.code.str(), outcome.log) / "module.c";
    auto diags = parse_diagnostics(outcome.log, linked.code);
    std::string message =
        format_compile_error("module for graph '" + graph.name() + "' failed to compile", graph,
                             diags, outcome.log, kept);  // before diags is moved
    throw CompileError(message, std::move(diags), kept);
  }
  if (!outcome.log.empty())
    warn("compiler output for graph '" + graph.name() + "':\n" + outcome.log);
  if (built.kernels) build_device_unit(graph, linked, key, dir, store, info);
  return built;
}

// What one remote operation did, into the local index's counters (for `kiln cache stats`).
// Hit, or compile under the key's lock and publish. Returns the pinned entry; nullopt for
// a miss of a graph the cache cannot hold (see cacheable), which the caller builds unstored.
std::optional<CacheEntry> lookup_or_build(CacheStore& store, const Graph& graph,
                                          const KeyContext& ctx, const ModuleKey& mk,
                                          const CompileOptions& options, CompileInfo& info,
                                          std::optional<Built>& built_here) {
  auto t = Clock::now();
  LookupResult r = store.lookup(mk.key, false);
  info.cache = CacheStatus::kHit;
  if (r.entry) {
    info.times.lookup_ms = ms_since(t);
    if (debug_level() >= 2) log_line("cache: hit " + r.entry->dir.string());
    return std::move(*r.entry);
  }
  // Only a miss asks: no entry can exist for a graph the cache never stores.
  if (!cacheable(graph)) return std::nullopt;
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
    const StoreCounters before = remote->counters_by_store();
    std::optional<RemoteEntry> fetched = remote->fetch(mk.key);
    record_remote(store, before, remote->counters_by_store());
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
      info.cache = CacheStatus::kRemoteHit;
      if (debug_level() >= 2) log_line("cache: remote hit for " + mk.key);
      return store.publish_fetched(std::move(fetched->meta), fetched->files);
    }
  }
  if (debug_level() >= 2) log_line("cache: miss for " + mk.key + ", compiling");
  WorkFolder staging = store.new_staging(mk.key);  // removed unless published
  const Built& built =
      built_here.emplace(build_module(graph, ctx, mk.key, staging.path(), &store, true, info));
  EntryMeta meta;
  meta.key = mk.key;
  meta.label = graph.name();
  meta.family = mk.family;
  meta.summary = built.summary;
  meta.created = unix_now();
  meta.compile_ms = info.times.rewrite_ms + info.times.codegen_ms + info.times.compile_ms;
  meta.components = mk.components;
  for (const auto& f :
       built.kernels ? module_entry_files(ctx.backend->unit_name(), ctx.backend->image_files())
                     : module_entry_files())
    meta.files.push_back(FileRecord{f, 0, ""});
  CacheEntry entry = store.publish(std::move(staging), std::move(meta));
  if (remote && remote->can_write()) {
    auto r0 = Clock::now();
    const StoreCounters before = remote->counters_by_store();
    // Released without an upload, the lease leaves a failure marker for the waiters.
    if (remote->upload(entry.meta, entry.dir) && lease) lease->set_uploaded();
    record_remote(store, before, remote->counters_by_store());
    info.times.remote_ms += ms_since(r0);
  }
  return entry;
}

// The entry's plan, as its builder wrote it (the lookup has verified the file).
std::shared_ptr<const ModulePlan> read_plan(const CacheEntry& entry) {
  const fs::path file = entry.file("plan");
  if (!entry.meta.file("plan"))
    throw CacheEntryError(entry.dir.string() + ": the entry has no plan");
  return ModulePlan::parse(read_file(file), file.string());
}

Loaded loaded_from(const CacheEntry& entry) {
  Loaded loaded;
  loaded.source_path = entry.file("module.c");
  loaded.module_path = entry.file("module.so");
  loaded.pin = entry.pin;
  loaded.plan = read_plan(entry);
  return loaded;
}

Function make_function(const Graph& graph, const Loaded& loaded, CompileInfo info,
                       const CompileOptions& options,
                       const std::vector<std::pair<int, int>>& updates) {
  info.source_path = loaded.source_path;
  info.module_path = loaded.module_path;
  auto t = Clock::now();
  std::shared_ptr<const Program> program = program_with_updates(
      loaded.weights->program(*loaded.plan, graph, loaded.prepared.get(), &info.weights),
      *loaded.plan, updates);
  info.times.prepare_ms = ms_since(t);
  for (const ProgramUpdate& u : program->updates)
    ++(u.in_place ? info.updates_in_place : info.updates_copied);
  auto executor = std::make_shared<Executor>(loaded.module, std::move(program),
                                             options.engine ? options.engine : &default_engine());
  if (options.split_grain > 0) executor->set_split_grain(options.split_grain);
  executor->set_poison_buffers(options.poison_buffers);
  std::vector<std::string> in_names, out_names;
  std::vector<TensorType> in_types;
  in_names.reserve(graph.inputs().size());
  in_types.reserve(graph.inputs().size());
  for (const Variable* v : graph.inputs()) {
    in_names.push_back(v->name);
    in_types.push_back(v->type);
  }
  // The update values are outputs of the module, not of the function.
  const size_t n_out = graph.outputs().size() - updates.size();
  out_names.reserve(n_out);
  for (size_t i = 0; i < n_out; ++i) out_names.push_back(graph.outputs()[i]->name);
  return Function(std::move(executor), std::move(in_names), std::move(in_types),
                  std::move(out_names), std::move(info), loaded.pin);
}

void log_times(const Graph& graph, const CompileInfo& info) {
  if (debug_level() < 1) return;
  log_line("graph '" + graph.name() + "': cache " + to_string(info.cache) + "; key " +
           format_double(info.times.key_ms) + " ms, lookup " + format_double(info.times.lookup_ms) +
           " ms, wait " + format_double(info.times.wait_ms) + " ms, rewrite " +
           format_double(info.times.rewrite_ms) + " ms, codegen " +
           format_double(info.times.codegen_ms) + " ms, compile " +
           format_double(info.times.compile_ms) + " ms, load " + format_double(info.times.load_ms) +
           " ms");  // (preparing weights follows: see PhaseTimes::prepare_ms)
}

// A remote hit for a cache this process cannot publish its own compiles to (a read-only
// folder, or signatures required and no key to sign): the remote entry carries its writer's
// signature, so where the folder is writable it is published as usual; otherwise it is
// materialised in a private folder that lives as long as the functions using it.
std::optional<Loaded> remote_hit_without_publishing(CacheStore& store, const ModuleKey& mk,
                                                    CompileInfo& info) {
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote) return std::nullopt;
  auto r0 = Clock::now();
  const StoreCounters before = remote->counters_by_store();
  std::optional<RemoteEntry> fetched = remote->fetch(mk.key);
  if (!fetched) fetched = remote->claim_or_wait(mk.key).second;  // a reader never gets a lease
  record_remote(store, before, remote->counters_by_store());
  info.times.remote_ms = ms_since(r0);
  if (!fetched) return std::nullopt;
  info.cache = CacheStatus::kRemoteHit;
  if (store.writable())
    return loaded_from(store.publish_fetched(std::move(fetched->meta), fetched->files));
  const fs::path parent =
      fs::temp_directory_path() / ("kiln-scratch-" + std::to_string(::geteuid()));
  auto folder = std::make_shared<WorkFolder>(
      WorkFolder::create(parent, mk.key.substr(0, 16), CacheAccess::private_access()));
  for (const auto& [name, bytes] : fetched->files)
    write_file_atomic(folder->path() / name, bytes, 0600, true);
  Loaded loaded;
  loaded.source_path = folder->path() / "module.c";
  loaded.module_path = folder->path() / "module.so";
  loaded.plan =
      ModulePlan::parse(read_file(folder->path() / "plan"), (folder->path() / "plan").string());
  loaded.pin = folder;
  return loaded;
}

// A build outside the cache (KILN_CACHE=0, an uncacheable graph, a read-only cache): its
// folder lives as long as the functions that use the module, then goes.
Loaded build_unstored(const Graph& graph, const KeyContext& ctx, const ModuleKey& mk,
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
  Loaded loaded;
  Built built = build_module(graph, ctx, mk.key, folder->path(), store, false, info);
  loaded.plan = built.plan;
  loaded.weights->seed(*loaded.plan, graph, std::move(built.prepared));
  loaded.source_path = folder->path() / "module.c";
  loaded.module_path = folder->path() / "module.so";
  loaded.pin = folder;
  return loaded;
}

}  // namespace

std::optional<std::string> effective_passes(const CompileOptions& options) {
  std::string precision = options.precision;
  const char* origin = "precision";
  if (precision.empty()) {
    const char* env = std::getenv("KILN_PRECISION");
    precision = env ? env : "";
    origin = "KILN_PRECISION";
  }
  if (precision.empty() || precision == "f32") return options.passes;
  if (precision != "bf16") {
    throw UserError(std::string(origin) + ": expects f32 or bf16, got '" + precision + "'");
  }
  if (!backend_named(options.device).is_host()) {
    throw UserError(std::string(origin) + " bf16 is for the CPU (bfloat16 products through " +
                    "AVX512-BF16); device '" + options.device + "' has no bfloat16 conversion");
  }
  // Convolutions become GEMMs of their windows first (bf16conv), then every packed weight
  // product takes bfloat16 panels (bf16); a spec that turns one off ("-bf16conv") keeps it
  // off.
  std::string spec = passes_spec(options.passes);
  for (const char* pass : {"bf16conv", "bf16"}) {
    const std::string off = std::string("-") + pass;
    bool named_off = false;
    for (size_t at = 0; at <= spec.size();) {
      size_t end = spec.find(',', at);
      if (end == std::string::npos) end = spec.size();
      size_t b = at, e = end;  // components may carry spaces ("-fusion, -cse")
      while (b < e && spec[b] == ' ') ++b;
      while (e > b && spec[e - 1] == ' ') --e;
      named_off = named_off || spec.compare(b, e - b, off) == 0;
      at = end + 1;
    }
    if (!named_off) spec += spec.empty() ? pass : std::string(",") + pass;
  }
  return spec;
}

Graph optimized_graph(const Graph& given, const CompileOptions& options) {
  check_graph(given);
  if (!given.updates().empty()) return optimized_graph(with_update_outputs(given), options);
  return optimize_for(given, key_context(options));
}

namespace {

// `w`'s text with each run of lines from one prelude (the module ABI header included) shown as
// a one-line stub: what `kiln source` prints unless asked for the preludes.
std::string with_prelude_stubs(const CodeWriter& w) {
  const std::string& text = w.str();
  const std::vector<SourceOrigin>& origins = w.origins();
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.emplace_back(text.data() + pos, end - pos);
    pos = end + 1;
  }
  std::string out;
  for (size_t i = 0; i < lines.size();) {
    const std::string& fragment = i < origins.size() ? origins[i].fragment : std::string();
    if (fragment.rfind("prelude ", 0) != 0) {
      out.append(lines[i]).append("\n");
      ++i;
      continue;
    }
    size_t j = i;
    while (j < lines.size() && j < origins.size() && origins[j].fragment == fragment) ++j;
    out += "/* #include \"" + fragment.substr(8) + "\": " + std::to_string(j - i) +
           " lines; kiln source --preludes prints them */\n";
    i = j;
  }
  return out;
}

std::string source_text(const Graph& source, const CompileOptions& options, bool preludes) {
  check_graph(source);
  if (!source.updates().empty()) return source_text(with_update_outputs(source), options, preludes);
  const KeyContext& ctx = key_context(options);
  const LinkedModule linked =
      link_c_module(optimize_for(source, ctx), key_of(source, ctx)->key, ctx.link_mode);
  auto shown = [&](const CodeWriter& w) { return preludes ? w.str() : with_prelude_stubs(w); };
  if (!linked.device) return shown(linked.code);
  // The device unit follows the host C under its own banner.
  const std::string unit = linked.device->unit_name();
  return shown(linked.code) + "\n/* ==== " + unit + ": the " + linked.device->title() +
         " kernels of the nodes placed there (" + std::to_string(linked.kernel_names.size()) +
         " launch sites) ==== */\n" + shown(linked.device_unit);
}

}  // namespace

std::string generate_source(const Graph& source, const CompileOptions& options) {
  return source_text(source, options, true);
}

std::string readable_source(const Graph& source, const CompileOptions& options) {
  return source_text(source, options, false);
}

void clear_compile_memo() { memo().clear(); }

bool is_cached(const Graph& given, const CompileOptions& options) {
  if (!cache_enabled(options)) return false;
  if (!given.updates().empty()) return is_cached(with_update_outputs(given), options);
  const Graph& source = given;
  check_graph(source);
  const KeyContext& ctx = key_context(options);
  const std::shared_ptr<const ModuleKey> mk = key_of(source, ctx);
  if (memo().find(ctx.root.string() + "\n" + mk->key)) return true;
  return CacheStore::open(ctx.root)->lookup(mk->key, false).entry.has_value();
}

StandaloneModule standalone_module(const Graph& source, const CompileOptions& options) {
  check_graph(source);
  if (!backend_named(options.device).is_host()) {
    throw UserError("only CPU modules can be exported (device '" + options.device + "' asked for)");
  }
  const KeyContext& ctx = key_context(options);
  StandaloneModule out;
  out.key = key_of(source, ctx)->key;
  auto graph = std::make_shared<const Graph>(optimize_for(source, ctx));
  out.linked =
      std::make_shared<const LinkedModule>(link_c_module(*graph, out.key, LinkMode::kModule));
  auto plan = ModulePlan::from_graph(*graph, source);
  out.program = plan->program(source, plan->prepared_in(*graph));
  out.graph = std::move(graph);
  return out;
}

namespace {

// compile() of a graph without updates (`updates` says which of its outputs are update
// values of the caller's graph, and which inputs they overwrite).
Function compile_graph(const Graph& source, const CompileOptions& options,
                       const std::vector<std::pair<int, int>>& updates) {
  install_op_library_binder();  // modules with custom ops bind them as they load
  install_host_call_binder();   // and those with control flow their bodies' drivers
  install_entry_layout();       // verifications know which files a module entry holds
  // A malformed remote setting is an error on every compile, a warm hit too, not only on the
  // first miss that would use it (no connection is made here).
  RemoteTier::process_default();
  CompileInfo info;
  check_graph(source);
  auto t = Clock::now();
  const KeyContext& ctx = key_context(options);
  const std::shared_ptr<const ModuleKey> mk = key_of(source, ctx);
  info.key = mk->key;
  info.times.key_ms = ms_since(t);

  const bool use_cache = cache_enabled(options);
  const std::string memo_key = ctx.root.string() + "\n" + mk->key;
  if (use_cache) {
    if (auto hit = memo().find(memo_key)) {
      info.cache = CacheStatus::kMemo;
      if (hit->module->kernels()) {
        info.backend = ctx.backend->name();
        info.device = ctx.backend->describe_device();
      }
      return make_function(source, *hit, std::move(info), options, updates);
    }
  }
  Loaded loaded;
  bool memoize = false;
  if (!use_cache) {
    info.cache = CacheStatus::kBypassed;
    loaded = build_unstored(source, ctx, *mk, CacheStore::open(ctx.root).get(), info);
  } else {
    auto store = CacheStore::open(ctx.root);
    if (std::string blocker = store->publish_blocker(); !blocker.empty()) {
      // Hits still load; a miss is compiled beside the cache and not stored.
      LookupResult r = store->lookup(mk->key, false);
      if (r.entry) {
        info.cache = CacheStatus::kHit;
        loaded = loaded_from(*r.entry);
        loaded.prepared = std::make_shared<PreparedWeights>(store, mk->key);
        memoize = true;
      } else if (std::optional<Loaded> remote;
                 cacheable(source) && (remote = remote_hit_without_publishing(*store, *mk, info))) {
        loaded = std::move(*remote);
        loaded.prepared = std::make_shared<PreparedWeights>(store, mk->key);
        memoize = true;
      } else {
        if (cacheable(source)) {
          warn(blocker + ": compiling without storing the module" +
               (r.problem.empty() ? "" : " (the entry there: " + r.problem + ")"));
        }
        info.cache = CacheStatus::kUncacheable;
        loaded = build_unstored(source, ctx, *mk, store.get(), info);
      }
    } else if (std::optional<Built> built; std::optional<CacheEntry> entry = lookup_or_build(
                                               *store, source, ctx, *mk, options, info, built)) {
      if (built) {
        // Built here: the plan and the weights its rewrites prepared are at hand, and are
        // stored for the next process.
        loaded.source_path = entry->file("module.c");
        loaded.module_path = entry->file("module.so");
        loaded.pin = entry->pin;
        loaded.plan = built->plan;
        loaded.prepared = std::make_shared<PreparedWeights>(store, mk->key);
        loaded.weights->seed(*loaded.plan, source, std::move(built->prepared),
                             loaded.prepared.get());
      } else {
        loaded = loaded_from(*entry);
        loaded.prepared = std::make_shared<PreparedWeights>(store, mk->key);
      }
      memoize = true;
    } else {
      info.cache = CacheStatus::kUncacheable;
      loaded = build_unstored(source, ctx, *mk, store.get(), info);
    }
  }

  t = Clock::now();
  loaded.module = Module::load(loaded.module_path);
  info.times.load_ms = ms_since(t);
  if (loaded.module->kernels()) {
    info.backend = ctx.backend->name();
    info.device = ctx.backend->describe_device();
  }
  log_times(source, info);
  if (memoize) memo().put(memo_key, loaded);
  return make_function(source, loaded, std::move(info), options, updates);
}

}  // namespace

Function compile(const Graph& source, const CompileOptions& options) {
  if (source.updates().empty()) return compile_graph(source, options, {});
  if (!backend_named(options.device).is_host()) {
    throw UnsupportedError("graph '" + source.name() +
                           "' updates its inputs: state updates run on "
                           "the CPU device only for now (device '" +
                           options.device + "' asked for)");
  }
  return compile_graph(with_update_outputs(source), options, update_positions(source));
}

}  // namespace kiln
