// Kernel cache numbers on this machine, in one run, for the MLP example, a 200-node graph,
// ResNet-18 and ResNet-50 (ONNX, bench/models/resnet_onnx.py):
//  - cold compile: graph -> callable with an empty cache;
//  - warm hit in a fresh process: a new process builds the graph and times compile()
//    (graph -> callable: key, lookup, verification, dlopen), with a populated cache;
//  - in-process memo: compile() of the same Graph again, of an identical graph built anew
//    around the same weights, and of the model loaded again (new weights to prepare);
//  - index lookup with 100 000 entries (SQLite primary key), and a full store lookup (miss)
//    at that size, which shows there is no scan of the cache.
// Usage: cache_bench [--repeat N] [--smoke]   (--smoke: one round, a 2,000-entry index; for ctest)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/cache_index.h"
#include "cache/cache_store.h"
#include "cache/entry_signature.h"
#include "cache/redis_client.h"
#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/strings.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// 200 nodes: elementwise ops, reductions and matmuls over a few branches.
Graph graph200() {
  Graph g("bench_200");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 64});
  Var w = input(g, "w", DType::kFloat32, {64, 64});
  Var t = x;
  int nodes = 0;
  while (nodes + 5 <= 200) {
    t = tanh(t * x + w);  // mul, add, tanh: 3 nodes
    t = matmul(t, w);
    t = relu(t);
    nodes += 5;
  }
  g.set_outputs({t});
  return g;
}

// ResNet-18 and ResNet-50 as ONNX models (torchvision's layouts, seeded random weights; 47 and
// 102 MB), regenerated into bench/data/ by bench/models/resnet_onnx.py when missing.
fs::path resnet_file(int depth) {
  const std::string name = "resnet" + std::to_string(depth);
  const fs::path file = fs::path(KILN_BENCH_DATA) / (name + ".onnx");
  if (!fs::exists(file)) {
    fs::create_directories(file.parent_path());
    ProcessResult p = run_process({"/usr/bin/python3", KILN_BENCH_MODELS "/resnet_onnx.py",
                                   file.string(), "--depth", std::to_string(depth)});
    if (p.exit_code != 0) {
      std::fprintf(stderr, "could not write %s: %s\n", file.c_str(), p.err.c_str());
      std::exit(1);
    }
  }
  return file;
}

Graph make(const std::string& which) {
  if (which == "mlp") return load_model(KILN_MLP_JSON);
  if (which == "resnet18") return load_model(resnet_file(18));
  if (which == "resnet50") return load_model(resnet_file(50));
  return graph200();
}

// An identical graph built anew around the same weight tensors (as a program that builds
// its graph in code each time would).
Graph rebuild(const Graph& g) {
  Graph out(g.name());
  std::unordered_map<const Variable*, Variable*> map;
  for (const Variable* v : g.inputs()) map[v] = out.add_input(v->name, v->type);
  for (const Variable* v : g.constants()) {
    map[v] =
        v->parameter ? out.add_parameter(*v->value, v->name) : out.add_constant(*v->value, v->name);
  }
  for (const auto& node : g.nodes()) {
    std::vector<Variable*> inputs;
    for (const Variable* v : node->inputs) inputs.push_back(map.at(v));
    std::vector<std::string> names;
    for (const Variable* v : node->outputs) names.push_back(v->name);
    Node* n = out.add_node(node->op, inputs, node->name, names);
    for (size_t i = 0; i < n->outputs.size(); ++i) map[node->outputs[i]] = n->outputs[i];
  }
  std::vector<Variable*> outputs;
  for (const Variable* v : g.outputs()) outputs.push_back(map.at(v));
  out.set_outputs(outputs);
  return out;
}

// Child mode: one compile in a fresh process, timed from graph to callable.
int child(const std::string& which, const std::string& cache) {
  Graph g = make(which);
  CompileOptions opts;
  opts.cache_dir = cache;
  auto t = Clock::now();
  Function f = compile(g, opts);
  double ms = ms_since(t);
  std::printf("%.4f %s\n", ms, to_string(f.info().cache));
  return 0;
}

// Memo columns: compile() of the very Graph compiled before (no hashing); of an identical
// graph built anew around the same weights (one signature hash); of the model loaded again
// (new weight tensors, so its weights are prepared again: folded, packed).
void compile_rows(const std::string& self, int repeat) {
  std::printf("%-22s %9s %12s %12s %12s %12s\n", "graph", "cold ms", "fresh hit ms", "memo same us",
              "memo new us", "reloaded us");
  for (std::string which : {"mlp", "g200", "resnet18", "resnet50"}) {
    fs::path cache = fs::temp_directory_path() / ("kiln-cache-bench-" + which);
    std::vector<double> cold, warm, same, fresh, reloaded;
    std::string nodes;
    for (int r = 0; r < repeat; ++r) {
      wait_for_background_stores();  // nothing may still write into it
      fs::remove_all(cache);
      clear_compile_memo();
      Graph g = make(which);
      nodes = std::to_string(g.nodes().size());
      CompileOptions opts;
      opts.cache_dir = cache;
      auto t = Clock::now();
      Function f = compile(g, opts);
      cold.push_back(ms_since(t));
      for (int i = 0; i < 50; ++i) {
        auto m = Clock::now();
        Function again = compile(g, opts);
        same.push_back(ms_since(m) * 1000);
      }
      for (int i = 0; i < 20; ++i) {
        Graph built = rebuild(g);
        auto m = Clock::now();
        Function again = compile(built, opts);
        fresh.push_back(ms_since(m) * 1000);
      }
      for (int i = 0; i < 3; ++i) {
        Graph loaded = make(which);
        auto m = Clock::now();
        Function again = compile(loaded, opts);
        reloaded.push_back(ms_since(m) * 1000);
      }
    }
    // The hits use a cache a child process filled: this process keeps its own cache's index
    // open, which would spare the children work a user's `kiln` commands do (e.g. SQLite
    // setting up its write-ahead log again once the last connection has closed).
    const fs::path hits = cache.string() + "-hits";
    wait_for_background_stores();  // nothing may still write into it
    fs::remove_all(hits);
    run_process({self, "--child", which, hits.string()});
    for (int r = 0; r < 2 * repeat + 1; ++r) {
      ProcessResult p = run_process({self, "--child", which, hits.string()});
      if (p.exit_code != 0 || p.out.find(" hit") == std::string::npos) {
        std::fprintf(stderr, "child failed or missed: %s %s\n", p.out.c_str(), p.err.c_str());
        continue;
      }
      warm.push_back(std::stod(p.out));
    }
    std::printf("%-22s %9.1f %12.2f %12.1f %12.1f %12.1f\n",
                (which + " (" + nodes + " nodes)").c_str(), median(cold),
                warm.empty() ? -1.0 : median(warm), median(same), median(fresh), median(reloaded));
    wait_for_background_stores();  // nothing may still write into it
    fs::remove_all(cache);
    wait_for_background_stores();  // nothing may still write into it
    fs::remove_all(hits);
  }
}

// A redis-server on a free loopback port for the remote rows; stopped with the bench.
struct Redis {
  pid_t pid = -1;
  int port = 0;
  Redis() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    port = ntohs(a.sin_port);
    pid = ::fork();
    if (pid == 0) {
      int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      std::string p = std::to_string(port);
      ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save",
               "", "--appendonly", "no", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    RedisClient c(RedisUrl::parse(url(), "bench"), 200, 500);
    for (int i = 0; i < 100; ++i) {
      try {
        if (c.command({"PING"}).str == "PONG") return;
      } catch (const RemoteError&) {
      }
      ::usleep(50000);
    }
    std::fprintf(stderr, "redis-server did not start\n");
  }
  ~Redis() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port); }
};

// Remote hits against a real Redis: a writer compiles and uploads; each reader is a fresh
// process with an empty local cache. Then a simulated cluster: N processes with their own
// caches compiling the same set of models at once.
void remote_rows(const std::string& self, int repeat) {
  if (run_process({"redis-server", "--version"}).exit_code != 0) {
    std::printf("\nremote tier: skipped (no redis-server; scripts/setup installs it)\n");
    return;
  }
  Redis redis;
  const fs::path base = fs::temp_directory_path() / "kiln-cache-bench-remote";
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(base);
  fs::create_directories(base);
  auto [secret, pub] = generate_key_pair("bench");
  write_file_atomic(base / "bench.secret", secret + "\n", 0600, true);
  ::setenv("KILN_REMOTE_CACHE", redis.url().c_str(), 1);
  ::setenv("KILN_CACHE_TRUSTED_KEYS", pub.c_str(), 1);
  std::printf("\nremote tier (redis-server on loopback; fresh process, empty local cache)\n");
  // Every reader's cache folder is new. "Empty local cache": the host has run kiln before, so
  // this user's default cache remembers the compiler probe. "New host": nothing on the machine
  // knows the compiler yet, so the reader probes it (one clang run, ~20 ms of library loading).
  std::printf("%-22s %24s %26s\n", "graph", "remote hit, empty cache", "remote hit, new host");
  const fs::path host = base / "host";
  const char* saved_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string xdg = saved_xdg ? saved_xdg : "";
  for (std::string which : {"mlp", "g200"}) {
    ::setenv("KILN_CACHE_SIGNING_KEY", (base / "bench.secret").c_str(), 1);
    ::setenv("XDG_CACHE_HOME", host.c_str(), 1);
    ProcessResult w = run_process({self, "--child", which, (base / ("w-" + which)).string()});
    ::unsetenv("KILN_CACHE_SIGNING_KEY");
    if (w.exit_code != 0) {
      std::fprintf(stderr, "writer failed: %s\n", w.err.c_str());
      continue;
    }
    std::vector<double> hits[2];
    for (int fresh_host = 0; fresh_host < 2; ++fresh_host) {
      for (int r = 0; r < 2 * repeat + 1; ++r) {
        const std::string run = which + "-r" + std::to_string(r) + "-" + std::to_string(fresh_host);
        ::setenv("XDG_CACHE_HOME", (fresh_host ? base / ("xdg-" + run) : host).c_str(), 1);
        ProcessResult p = run_process({self, "--child", which, (base / run).string()});
        if (p.exit_code != 0 || p.out.find("hit (remote)") == std::string::npos) {
          std::fprintf(stderr, "reader missed: %s %s\n", p.out.c_str(), p.err.c_str());
          continue;
        }
        hits[fresh_host].push_back(std::stod(p.out));
      }
    }
    std::printf("%-22s %24.2f %26.2f\n", which.c_str(), hits[0].empty() ? -1.0 : median(hits[0]),
                hits[1].empty() ? -1.0 : median(hits[1]));
  }
  // The cluster: 4 machines x {mlp, g200}, all writers, started together.
  ::setenv("XDG_CACHE_HOME", host.c_str(), 1);
  ::setenv("KILN_CACHE_SIGNING_KEY", (base / "bench.secret").c_str(), 1);
  ::setenv("KILN_REMOTE_CACHE_NAMESPACE", "cluster", 1);
  std::string script;
  for (int m = 0; m < 4; ++m) {
    for (std::string which : {"mlp", "g200"}) {
      script += "'" + self + "' --child " + which + " '" +
                (base / ("c" + std::to_string(m))).string() + "' & ";
    }
  }
  script += "wait";
  auto t = Clock::now();
  ProcessResult c = run_process({"/bin/sh", "-c", script});
  const double wall = ms_since(t);
  int compiled = 0, remote = 0;
  for (const auto& line : split_lines(c.out)) {
    compiled += line.find(" miss") != std::string::npos;
    remote += line.find("hit (remote)") != std::string::npos;
  }
  std::printf(
      "\ncluster: 4 machines x 2 models at once: %d compiles (2 distinct keys), %d remote hits, "
      "%.0f ms wall\n",
      compiled, remote, wall);
  for (const char* v : {"KILN_REMOTE_CACHE", "KILN_CACHE_TRUSTED_KEYS", "KILN_CACHE_SIGNING_KEY",
                        "KILN_REMOTE_CACHE_NAMESPACE", "XDG_CACHE_HOME"})
    ::unsetenv(v);
  if (saved_xdg) ::setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(base);
}

void lookup_rows(int n) {
  fs::path root = fs::temp_directory_path() / "kiln-cache-bench-index";
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(root);
  fs::create_directories(root);
  std::vector<IndexRow> rows(n);
  std::vector<std::string> keys(n);
  for (int i = 0; i < n; ++i) {
    keys[static_cast<size_t>(i)] = sha256_hex("entry " + std::to_string(i));
    IndexRow& r = rows[static_cast<size_t>(i)];
    r.key = keys[static_cast<size_t>(i)];
    r.label = "model" + std::to_string(i % 100);
    r.family = sha256_hex("family " + std::to_string(i % 1000));
    r.size = 50000 + static_cast<uint64_t>(i);
    r.created = r.last_used = 1.7e9 + i;
    r.compile_ms = 250;
  }
  auto t = Clock::now();
  {
    CacheIndex index(root / "index.sqlite", 10000);
    index.replace_all(rows);
  }
  double fill_s = ms_since(t) / 1000;
  auto store = CacheStore::open(root);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, n - 1);
  const int lookups = 20000;
  // The index as a process sees it: an open connection, lookups by key.
  CacheIndex index(root / "index.sqlite", 10000);
  t = Clock::now();
  int found = 0;
  for (int i = 0; i < lookups; ++i)
    found += index.find(keys[static_cast<size_t>(pick(rng))]).has_value();
  double find_us = ms_since(t) * 1000 / lookups;
  t = Clock::now();
  for (int i = 0; i < lookups; ++i) index.find(sha256_hex("absent " + std::to_string(i)));
  double absent_us = ms_since(t) * 1000 / lookups;
  t = Clock::now();
  for (int i = 0; i < 2000; ++i) store->lookup(sha256_hex("absent " + std::to_string(i)), false);
  double store_us = ms_since(t) * 1000 / 2000;
  t = Clock::now();
  CacheIndex reopened(root / "index.sqlite", 10000);
  reopened.find(keys[0]);
  double open_ms = ms_since(t);
  std::printf("\nindex with %d entries (filled in %.1f s)\n", n, fill_s);
  std::printf("  lookup by key (hit)        %8.2f us   (%d/%d found)\n", find_us, found, lookups);
  std::printf("  lookup by key (absent)     %8.2f us\n", absent_us);
  std::printf("  store lookup (miss)        %8.2f us\n", store_us);
  std::printf("  open index + first lookup  %8.2f ms\n", open_ms);
  std::printf("  entries counted            %8lld\n",
              static_cast<long long>(index.totals().entries));
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(root);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  int repeat = 5, index_entries = 100000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[i + 1]));
    // ctest: every row once, a small index.
    if (std::strcmp(argv[i], "--smoke") == 0) repeat = 1, index_entries = 2000;
  }
  std::printf("kiln cache benchmark (%d repeats; medians)\n\n", repeat);
  compile_rows(fs::canonical("/proc/self/exe").string(), repeat);
  remote_rows(fs::canonical("/proc/self/exe").string(), repeat);
  lookup_rows(index_entries);
  return 0;
}
