#include "compiler/report/report.h"

#include <map>
#include <nlohmann/json.hpp>

#include "cache/cache_store.h"
#include "cache/remote_tier.h"
#include "compiler/backend.h"
#include "compiler/c/linker.h"
#include "compiler/report/report_page.h"
#include "ops/cop.h"
#include "rewrite/pipeline.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/json_text.h"

namespace kiln {
namespace {

using nlohmann::json;

// The colour class of an op in the picture.
std::string kind_of(const std::string& op_name) {
  std::string op = op_name;
  if (backend_of_placed(op)) op = op.substr(op.find(':') + 1);  // "cuda:gemm" is a gemm
  if (op == "matmul" || op == "gemm" || op == "conv" || op == "with_epilogue") return "compute";
  if (op == "fused_elementwise") return "fused";
  if (op.rfind("reduce", 0) == 0 || op == "fused_reduce" || op == "softmax" ||
      op == "log_softmax" || op == "max_pool" || op == "average_pool" ||
      op == "global_average_pool" || op == "layer_norm") {
    return "reduction";
  }
  static const char* const kMovement[] = {
      "transpose", "reshape",  "concat",  "slice",     "gather",  "pad",   "expand", "to_device",
      "to_host",   "identity", "squeeze", "unsqueeze", "flatten", "split", "tile"};
  for (const char* m : kMovement) {
    if (op == m) return "movement";
  }
  return "elementwise";
}

json var_json(const Variable* v) {
  json dims = json::array();
  for (int64_t d : v->type.dims) dims.push_back(d);
  const char* kind = v->kind == VarKind::kInput      ? "input"
                     : v->kind == VarKind::kConstant ? "constant"
                                                     : "value";
  return {{"id", v->id},  {"name", v->name}, {"dtype", std::string(dtype_name(v->type.dtype))},
          {"dims", dims}, {"kind", kind},    {"producer", v->owner ? v->owner->id : -1}};
}

json graph_json(const Graph& g) {
  json nodes = json::array(), vars = json::object();
  auto add_var = [&](const Variable* v) { vars[std::to_string(v->id)] = var_json(v); };
  for (const Variable* v : g.inputs()) add_var(v);
  for (const Variable* v : g.constants()) add_var(v);
  for (const auto& n : g.nodes()) {
    json in = json::array(), out = json::array();
    for (const Variable* v : n->inputs) in.push_back(v->id);
    for (const Variable* v : n->outputs) {
      out.push_back(v->id);
      add_var(v);
    }
    nodes.push_back({{"id", n->id},
                     {"op", n->op->name()},
                     {"name", n->name},
                     {"label", n->label()},
                     {"describe", n->op->describe()},
                     {"kind", kind_of(n->op->name())},
                     {"inputs", in},
                     {"outputs", out}});
  }
  json outputs = json::array();
  for (const Variable* v : g.outputs()) outputs.push_back(v->id);
  return {{"name", g.name()}, {"nodes", nodes}, {"vars", vars}, {"outputs", outputs}};
}

// Each pass of the pipeline on its own, in order: node counts and the ops it removed and
// added, so the page can say what every pass did.
json passes_json(const Graph& graph, const CompileOptions& options) {
  json out = json::array();
  auto count = [](const Graph& g) {
    std::map<std::string, int> ops;
    for (const auto& n : g.nodes()) ++ops[n->op->name()];
    return ops;
  };
  optimize(
      graph, effective_passes(options),
      [&](const PassInfo& p, const Graph& before_graph, const Graph& after_graph, double ms) {
        auto before = count(before_graph), after = count(after_graph);
        json changes = json::array();
        for (const auto& [op, k] : before) {
          const int now = after.count(op) ? after[op] : 0;
          if (now < k) changes.push_back("-" + std::to_string(k - now) + " " + op);
        }
        for (const auto& [op, k] : after) {
          const int was = before.count(op) ? before[op] : 0;
          if (k > was) changes.push_back("+" + std::to_string(k - was) + " " + op);
        }
        out.push_back({{"name", p.name},
                       {"version", p.version},
                       {"nodes_before", before_graph.nodes().size()},
                       {"nodes_after", after_graph.nodes().size()},
                       {"ms", ms},
                       {"changes", changes}});
      },
      options.device);
  return out;
}

// Each node's lines of the module source with their fragment origins. Identical segments
// (the same kernel run by many nodes) are stored once in `texts`.
// The lines of `w`'s text, as many as it has origins.
std::vector<std::string> lines_of(const CodeWriter& w) {
  std::vector<std::string> lines;
  const std::string& text = w.str();
  size_t at = 0;
  while (at <= text.size() && lines.size() < w.origins().size()) {
    const size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return lines;
}

json code_json(const Graph& optimized, const std::string& key) {
  const LinkedModule m = link_c_module(optimized, key, LinkMode::kModule);
  json texts = json::array(), nodes = json::object();
  std::map<std::string, int> text_index;
  auto intern = [&](const std::string& t) {
    auto [it, fresh] = text_index.emplace(t, static_cast<int>(texts.size()));
    if (fresh) texts.push_back(t);
    return it->second;
  };
  // Consecutive lines of one node and fragment form a segment: the C module's, then the
  // CUDA unit's (kernels.cu) for nodes placed on the device.
  auto add_segments = [&](const CodeWriter& w, const std::string& unit) {
    const auto& origins = w.origins();
    const std::vector<std::string> lines = lines_of(w);
    size_t i = 0;
    while (i < lines.size()) {
      const SourceOrigin& o = origins[i];
      size_t j = i;
      std::string body;
      while (j < lines.size() && origins[j].node == o.node && origins[j].fragment == o.fragment) {
        body += lines[j] + "\n";
        ++j;
      }
      if (o.node >= 0) {
        nodes[std::to_string(o.node)].push_back({{"fragment", unit + o.fragment},
                                                 {"line", o.fragment_line},
                                                 {"module_line", i + 1},
                                                 {"text", intern(body)}});
      }
      i = j;
    }
  };
  add_segments(m.code, "");
  if (m.device) add_segments(m.device_unit, m.device->unit_name() + ": ");
  // A CUDA kernel identical to an earlier node's is defined once, under that node's name
  // ("n3_gemm" launched as "n6_gemm"): the nodes that launch it show that definition too.
  auto node_of = [](const std::string& kernel) {
    if (kernel.size() < 3 || kernel[0] != 'n') return -1;
    const size_t us = kernel.find('_');
    try {
      return us == std::string::npos ? -1 : std::stoi(kernel.substr(1, us - 1));
    } catch (const std::exception&) {
      return -1;
    }
  };
  for (size_t i = 0; i < m.kernel_names.size() && i < m.kernel_symbols.size(); ++i) {
    const int user = node_of(m.kernel_names[i]), owner = node_of(m.kernel_symbols[i]);
    const std::string from = std::to_string(owner), to = std::to_string(user);
    if (user < 0 || owner < 0 || user == owner || !nodes.contains(from)) continue;
    for (const json& seg : json(nodes[from])) {
      const std::string fragment = seg.at("fragment");
      if (fragment.rfind("kernels.cu: ", 0) != 0) continue;
      json shared = seg;
      shared["fragment"] = fragment + " (node " + from + "'s: the same kernel)";
      bool have = false;
      for (const json& mine : nodes[to]) have = have || mine == shared;
      if (!have) nodes[to].push_back(std::move(shared));
    }
  }
  return {{"texts", texts}, {"nodes", nodes}, {"module_lines", m.code.origins().size()}};
}

json cache_json(const Function& f, const CompileOptions& options) {
  const CompileInfo& info = f.info();
  const PhaseTimes& t = info.times;
  json times = {{"rewrite", t.rewrite_ms}, {"key", t.key_ms},         {"lookup", t.lookup_ms},
                {"wait", t.wait_ms},       {"remote", t.remote_ms},   {"codegen", t.codegen_ms},
                {"compile", t.compile_ms}, {"kernels", t.kernels_ms}, {"binding", t.binding_ms},
                {"link", t.link_ms},       {"load", t.load_ms},       {"prepare", t.prepare_ms}};
  json kernels = json::array();
  for (const auto& [symbol, ms] : info.kernels.compile_ms) kernels.push_back({symbol, ms});
  json components = json::array();
  try {
    auto store = CacheStore::open(options.cache_dir.empty() ? cache_root() : options.cache_dir);
    if (auto meta = store->read_meta(info.key)) {
      for (const auto& [name, value] : meta->components) components.push_back({name, value});
    }
  } catch (const Error&) {
    // No readable store (e.g. KILN_CACHE=0): the page shows the key alone.
  }
  // What each tier answered, from the one status the lookup ended with: memory (modules
  // loaded in this process), the local disk cache, the remote tier when configured.
  const CacheStatus st = info.cache;
  const bool off = st == CacheStatus::kBypassed || st == CacheStatus::kUncacheable;
  bool remote_configured = false;
  try {
    remote_configured = RemoteConfig::from_env().has_value();
  } catch (const Error&) {
    // A malformed KILN_REMOTE_CACHE fails the compile itself; here it reads as absent.
  }
  const std::string remote = !remote_configured              ? "not configured"
                             : st == CacheStatus::kRemoteHit ? "hit"
                             : st == CacheStatus::kMiss      ? "miss (uploaded)"
                             : off                           ? "off"
                                                             : "not asked";
  json tiers = json::array(
      {json::array({"memory (this process)", st == CacheStatus::kMemo ? "hit" : "miss"}),
       json::array({"local disk", off                        ? "off"
                                  : st == CacheStatus::kHit  ? "hit"
                                  : st == CacheStatus::kMemo ? "not asked"
                                                             : "miss"}),
       json::array({"remote", remote})});
  return {{"key", info.key},
          {"status", to_string(info.cache)},
          {"tiers", tiers},
          {"note", info.cache_note},
          {"device", info.device},
          {"times_ms", times},
          {"components", components},
          {"kernels",
           {{"count", info.kernels.kernels},
            {"reused", info.kernels.reused},
            {"fetched", info.kernels.fetched},
            {"compiled", info.kernels.compiled},
            {"jobs", info.kernels.jobs},
            {"compile_ms", kernels}}}};
}

json profile_json(const Function& f, const Graph& optimized, const ReportOptions& options) {
  std::vector<Tensor> in;
  for (const Variable* v : optimized.inputs()) {
    auto it = options.inputs.find(v->name);
    if (it == options.inputs.end()) return nullptr;
    // With --device-io the function takes device tensors: copy the inputs there once.
    in.push_back(options.compile.device_io
                     ? backend_named(options.compile.device).to_device(it->second)
                     : it->second);
  }
  f(in);  // warm-up: plans memory, uploads weights
  f.set_profiling(true);
  for (int r = 0; r < options.repeat; ++r) f(in);
  const auto steps = f.profile();
  const RunProfile runs = f.run_profile();
  f.set_profiling(false);
  json rows = json::array();
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepTime& s = steps[i];
    const double per_run_ms =
        static_cast<double>(s.total_ns) / std::max<int64_t>(runs.runs, 1) / 1e6;
    // Steps follow the optimized graph's nodes in order (one thunk per node).
    rows.push_back({{"node", i < optimized.nodes().size() ? optimized.nodes()[i]->id : -1},
                    {"label", s.label},
                    {"ms", per_run_ms},
                    {"calls", s.calls},
                    {"parts", s.calls > 0 && s.parts > 0 ? double(s.parts) / s.calls : 1.0},
                    {"bytes", s.bytes},
                    {"flops", s.flops}});
  }
  json busy = json::array();
  for (int64_t b : runs.thread_busy_ns) busy.push_back(b);
  return {{"runs", runs.runs},
          {"wall_ms", static_cast<double>(runs.wall_ns) / std::max<int64_t>(runs.runs, 1) / 1e6},
          {"thread_busy_ns", busy},
          {"wall_ns", runs.wall_ns},
          {"steps", rows}};
}

}  // namespace

std::string report_json(const Graph& graph, const ReportOptions& options) {
  const Graph optimized = optimized_graph(graph, options.compile);
  Function f = compile(graph, options.compile);
  json doc = {{"model", graph.name()},
              {"given", graph_json(graph)},
              {"graph", graph_json(optimized)},
              {"passes", passes_json(graph, options.compile)},
              {"code", code_json(optimized, f.info().key)},
              {"cache", cache_json(f, options.compile)},
              {"profile", profile_json(f, optimized, options)}};
  return json_text(doc);
}

std::string report_html(const Graph& graph, const ReportOptions& options) {
  const std::string data = json_for_html_script(report_json(graph, options));
  std::string page = report_page_template();
  const std::string slot = "@KILN_REPORT_DATA@";
  page.replace(page.find(slot), slot.size(), data);
  return page;
}

}  // namespace kiln
