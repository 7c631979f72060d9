// The cache as compile() and the `kiln` command use it: keys, the in-process memo, hits in
// fresh processes, recovery from damaged entries, concurrency between processes, killed
// compiles, eviction of entries in use, --explain and every `kiln cache` subcommand.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <regex>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cache/cache_store.h"
#include "compiler/c/linker.h"
#include "compiler/entries/background_stores.h"
#include "compiler/compile.h"
#include "compiler/explain.h"
#include "compiler/graph_key.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "ops/cop.h"
#include "ops/registry.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

const std::string kKiln = KILN_BINARY;
const std::string kMlp = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";
const std::string kWrapper = KILN_TEST_CC_WRAPPER;

// Doubles a 1-D float32 tensor; its cache_version is whatever the test says.
class VersionedOp : public COp {
 public:
  // The version is a prop too, so the op registry can make it again (a cache hit does).
  explicit VersionedOp(std::optional<int> version, bool codegen_throws = false)
      : COp("versioned_test_op", version ? Attrs{{"version", int64_t{*version}}} : Attrs{}),
        version_(version),
        codegen_throws_(codegen_throws) {
    static const bool registered = [] {
      OpRegistry::instance().add("versioned_test_op", [](const Attrs& a) {
        auto it = a.find("version");
        return std::make_shared<VersionedOp>(
            it == a.end() ? std::nullopt : std::optional<int>(attr_int(a, "version")));
      });
      return true;
    }();
    (void)registered;
  }
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].store(i, 2 * in[0].load(i));
  }
  std::string c_code(const Node&, const CodeNames& n, const Sub&) const override {
    if (codegen_throws_) throw InternalError("codegen ran while computing a key");
    return "for (int64_t i = 0; i < " + n.inputs[0] + "->shape[0]; ++i)\n  ((float *)" +
           n.outputs[0] + "->data)[i] = 2 * ((const float *)" + n.inputs[0] + "->data)[i * " +
           n.inputs[0] + "->strides[0]];\n";
  }
  std::optional<int> cache_version() const override { return version_; }

 private:
  std::optional<int> version_;
  bool codegen_throws_;
};

Graph versioned_graph(std::optional<int> version, bool codegen_throws = false) {
  Graph g("versioned");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  Node* n = g.add_node(std::make_shared<VersionedOp>(version, codegen_throws), {exp(x)});
  g.set_outputs({n->outputs[0]});
  return g;
}

Graph small_graph(const std::string& name, DType dtype, int64_t width, double weight = 0.5) {
  Graph g(name);
  Var x = input(g, "x", dtype, {kDynamic, width});
  std::vector<double> w(static_cast<size_t>(width), weight);
  Var c = parameter(g, Tensor::from_doubles(dtype, {width}, w), "w");
  g.set_outputs({tanh(x * c) + exp(x)});
  return g;
}

std::string key_of(const Graph& g, const ToolchainConfig& tc = {}) {
  return module_key(g, Toolchain::get(tc)).key;
}

TEST(CacheKey, SameGraphSameKeyWhateverTheWeights) {
  EXPECT_EQ(key_of(small_graph("a", DType::kFloat32, 8, 0.5)),
            key_of(small_graph("b", DType::kFloat32, 8, 0.5)));
  EXPECT_EQ(key_of(small_graph("a", DType::kFloat32, 8, 0.5)),
            key_of(small_graph("a", DType::kFloat32, 8, 7.0)));
  EXPECT_NE(key_of(small_graph("a", DType::kFloat32, 8)),
            key_of(small_graph("a", DType::kFloat64, 8)));
  EXPECT_NE(key_of(small_graph("a", DType::kFloat32, 8)),
            key_of(small_graph("a", DType::kFloat32, 9)));
  // A plain constant is part of the program: the rewrites may read its values.
  auto with_constant = [](double value) {
    Graph g("c");
    Var x = input(g, "x", DType::kFloat32, {4});
    g.set_outputs({x * constant(g, Tensor::from_doubles(DType::kFloat32, {4}, {1, 1, 1, value}))});
    return key_of(g);
  };
  EXPECT_NE(with_constant(1), with_constant(2));
  EXPECT_EQ(with_constant(2), with_constant(2));
}

TEST(CacheKey, OperandOrderOverIdenticalSubgraphsMatters) {
  auto build = [](bool swap) {
    Graph g("order");
    Var x = input(g, "x", DType::kFloat32, {4});
    Var y = input(g, "y", DType::kFloat32, {4});
    Var a = exp(x), c = exp(y);  // identical subgraphs
    g.set_outputs({swap ? sub(c, a) : sub(a, c)});
    return key_of(g);
  };
  EXPECT_NE(build(false), build(true));
  EXPECT_EQ(build(false), build(false));
}

TEST(CacheKey, OpVersionFlagsAndCompilerEnterTheKey) {
  EXPECT_NE(key_of(versioned_graph(1)), key_of(versioned_graph(2)));
  EXPECT_NE(key_of(versioned_graph(1)), key_of(versioned_graph(std::nullopt)));
  EXPECT_NE(key_of(versioned_graph(1)), key_of(versioned_graph(1), {"", "-DKILN_KEY_TEST=1"}));
  EXPECT_NE(key_of(versioned_graph(1)), key_of(versioned_graph(1), {"gcc", ""}));
  EXPECT_EQ(key_of(versioned_graph(1)), key_of(versioned_graph(1), {"clang", ""}));
}

TEST(CacheKey, TwoBuildsWithDifferentGeneratorsNeverShareAKey) {
  Graph g = small_graph("generators", DType::kFloat32, 8);
  const KeyComponents tc = Toolchain::get().key_components();
  ModuleKey a = module_key(g, tc, codegen_fingerprint_for("generators of build a"));
  ModuleKey b = module_key(g, tc, codegen_fingerprint_for("generators of build b"));
  EXPECT_NE(a.key, b.key);
  EXPECT_EQ(a.family, b.family);  // --explain still finds the other build's entry
  EXPECT_EQ(module_key(g, tc).key, module_key(g, tc, codegen_fingerprint()).key);
  EXPECT_NE(codegen_fingerprint(), codegen_fingerprint_for(""));  // this build's hash is in it
  auto diffs = component_differences(a.components, b.components);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_NE(diffs[0].find("codegen: the code generators differ"), std::string::npos) << diffs[0];
}

TEST(CacheKey, IsComputedWithoutGeneratingSource) {
  Graph g = versioned_graph(1, true);
  EXPECT_EQ(key_of(g).size(), 64u);
  EXPECT_THROW(generate_source(g), InternalError);
}

using testing::kiln_env;

std::string printed_key(const ProcessResult& r) {
  auto p = r.out.find("key     ");
  return p == std::string::npos ? "" : r.out.substr(p + 8, 64);
}

TEST(CacheKey, AttributeOrderDoesNotMatterAcrossProcesses) {
  std::string dir = temp_dir("attr-order");
  auto model = [&](const std::string& file, const std::string& attrs) {
    write_file_atomic(
        dir + "/" + file,
        R"({"name": "r", "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 6]}],
      "nodes": [{"op": "reduce_sum", "inputs": ["x"], "outputs": ["y"], "attrs": )" +
            attrs + R"(}],
      "outputs": ["y"]})");
    return dir + "/" + file;
  };
  std::vector<std::string> env{"KILN_CACHE_DIR=" + dir + "/cache"};
  auto a = kiln_env(env, {"compile", model("a.json", R"({"axes": [1], "keepdims": 1})")});
  auto b = kiln_env(env, {"compile", model("b.json", R"({"keepdims": 1, "axes": [1]})")});
  auto c = kiln_env(env, {"compile", model("c.json", R"({"keepdims": 0, "axes": [1]})")});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(printed_key(a), printed_key(b));
  EXPECT_EQ(printed_key(a).size(), 64u);
  EXPECT_NE(printed_key(a), printed_key(c));
}

class CacheCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_compile_memo();
    dir_ = temp_dir(std::string("cc-") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    opts_.cache_dir = dir_ / "cache";
  }
  void TearDown() override { clear_compile_memo(); }
  int entries() const {
    int n = 0;
    std::error_code ec;
    for (const auto& shard : fs::directory_iterator(opts_.cache_dir / "objects", ec)) {
      for (const auto& e : fs::directory_iterator(shard.path()))
        n += !fs::exists(e.path() / "kernel.o");
    }
    return n;  // modules: kernel objects are counted apart
  }
  fs::path dir_;
  CompileOptions opts_;
};

Tensor run_small(const Function& f, DType dtype = DType::kFloat32) {
  return f({Tensor::from_doubles(dtype, {2, 8}, std::vector<double>(16, 0.25))})[0];
}

TEST_F(CacheCompile, MissThenMemoThenHitAfterTheMemoIsCleared) {
  Graph g = small_graph("m", DType::kFloat32, 8);
  Function f1 = compile(g, opts_);
  EXPECT_EQ(f1.info().cache, CacheStatus::kMiss);
  EXPECT_EQ(f1.info().module_path.parent_path(),
            opts_.cache_dir / "objects" / f1.info().key.substr(0, 2) / f1.info().key);
  EXPECT_TRUE(fs::exists(f1.info().source_path));
  Function f2 = compile(g, opts_);
  EXPECT_EQ(f2.info().cache, CacheStatus::kMemo);
  EXPECT_EQ(f2.info().module_path, f1.info().module_path);
  clear_compile_memo();
  Function f3 =
      compile(small_graph("m", DType::kFloat32, 8, 3.0), opts_);  // new weights, same module
  EXPECT_EQ(f3.info().cache, CacheStatus::kHit);
  Graph ref = small_graph("m", DType::kFloat32, 8, 3.0);
  Tensor expected = Tensor::from_doubles(DType::kFloat32, {2, 8},
                                         std::vector<double>(16, std::tanh(0.75) + std::exp(0.25)));
  EXPECT_TRUE(testing::tensors_close(run_small(f3), expected));
  EXPECT_EQ(entries(), 1);
}

TEST_F(CacheCompile, MemoHitTouchesNoFile) {
  Graph g = small_graph("memo", DType::kFloat32, 8);
  Function f1 = compile(g, opts_);
  fs::rename(opts_.cache_dir, dir_ / "moved");
  Function f2 = compile(g, opts_);
  EXPECT_EQ(f2.info().cache, CacheStatus::kMemo);
  EXPECT_FALSE(fs::exists(opts_.cache_dir));  // not even recreated
}

TEST_F(CacheCompile, DamagedEntriesAreRecompiledNeverLoaded) {
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> damage;
  };
  std::vector<Case> cases{
      {"truncated",
       [](const fs::path& d) {
         fs::resize_file(d / "module.so", fs::file_size(d / "module.so") / 2);
       }},
      {"bit-flipped",
       [](const fs::path& d) {
         std::string b = read_file(d / "module.so");
         b[b.size() / 2] ^= 0x01;
         std::ofstream(d / "module.so", std::ios::binary | std::ios::trunc) << b;
       }},
      {"missing", [](const fs::path& d) { fs::remove(d / "module.so"); }},
      {"plan edited",  // a plan that points a parameter at another slot would misbind weights
       [](const fs::path& d) {
         std::string b = read_file(d / "plan");
         b[b.find("params") + 10] ^= 0x01;
         std::ofstream(d / "plan", std::ios::binary | std::ios::trunc) << b;
       }},
      {"plan missing", [](const fs::path& d) { fs::remove(d / "plan"); }},
      {"garbled meta",
       [](const fs::path& d) {
         std::ofstream(d / "meta.json", std::ios::trunc) << "{\"format\": 1, \"ke";
       }},
  };
  for (const auto& c : cases) {
    Graph g = small_graph("damaged", DType::kFloat32, 8);
    fs::path entry;
    {
      Function f = compile(g, opts_);
      entry = f.info().module_path.parent_path();
    }
    clear_compile_memo();
    c.damage(entry);
    ::testing::internal::CaptureStderr();
    Function again = compile(g, opts_);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(again.info().cache, CacheStatus::kMiss) << c.what;
    EXPECT_NE(again.info().cache_note.find("recompiled a bad cache entry"), std::string::npos)
        << c.what;
    EXPECT_NE(err.find("failed verification"), std::string::npos) << c.what << ": " << err;
    Tensor expected = Tensor::from_doubles(
        DType::kFloat32, {2, 8}, std::vector<double>(16, std::tanh(0.125) + std::exp(0.25)));
    EXPECT_TRUE(testing::tensors_close(run_small(again), expected)) << c.what;
    clear_compile_memo();
  }
  int quarantined = 0;
  for ([[maybe_unused]] const auto& q : fs::directory_iterator(opts_.cache_dir / "quarantine"))
    ++quarantined;
  EXPECT_EQ(quarantined, 6);
}

TEST_F(CacheCompile, OpWithoutCacheVersionIsCompiledButNeverStored) {
  ::testing::internal::CaptureStderr();
  Function a = compile(versioned_graph(std::nullopt), opts_);
  Function b = compile(versioned_graph(std::nullopt), opts_);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(a.info().cache, CacheStatus::kUncacheable);
  EXPECT_EQ(b.info().cache, CacheStatus::kUncacheable);
  EXPECT_NE(a.info().module_path, b.info().module_path);  // compiled twice
  const std::string warning = "op 'versioned_test_op' has no cache_version";
  auto first = err.find(warning);
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(warning, first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_EQ(entries(), 0);
  Tensor x = Tensor::from_doubles(DType::kFloat32, {3}, {0, 1, 2});
  EXPECT_TRUE(testing::tensors_close(
      b({x})[0], Tensor::from_doubles(DType::kFloat32, {3}, {2, 2 * M_E, 2 * std::exp(2.0)})));
}

TEST_F(CacheCompile, BypassNeverStoresOrReuses) {
  opts_.use_cache = false;
  Function a = compile(small_graph("bypass", DType::kFloat32, 8), opts_);
  Function b = compile(small_graph("bypass", DType::kFloat32, 8), opts_);
  EXPECT_EQ(a.info().cache, CacheStatus::kBypassed);
  EXPECT_EQ(b.info().cache, CacheStatus::kBypassed);
  EXPECT_NE(a.info().module_path, b.info().module_path);
  EXPECT_EQ(entries(), 0);
}

TEST_F(CacheCompile, ExplainNamesWhatDiffersFromTheNearestEntry) {
  ToolchainConfig flagged{"", "-DKILN_EXPLAIN_TEST=1"};
  CompileOptions with_flag = opts_;
  with_flag.toolchain = flagged;
  compile(small_graph("explained", DType::kFloat32, 8), with_flag);
  opts_.explain = true;
  Function f = compile(small_graph("explained", DType::kFloat32, 8), opts_);
  const std::string& note = f.info().cache_note;
  EXPECT_NE(note.find("cache miss: nearest entry"), std::string::npos) << note;
  EXPECT_NE(note.find("toolchain.flags"), std::string::npos) << note;
  EXPECT_NE(note.find("-DKILN_EXPLAIN_TEST=1"), std::string::npos) << note;
  EXPECT_EQ(note.find("graph:"), std::string::npos) << note;

  std::string dtype_note =
      compile(small_graph("explained", DType::kFloat64, 8), opts_).info().cache_note;
  EXPECT_NE(dtype_note.find("float64"), std::string::npos) << dtype_note;
  EXPECT_NE(dtype_note.find("graph: 'input i0 float32 (?, 8)' in the entry"), std::string::npos)
      << dtype_note;

  compile(versioned_graph(1), opts_);
  std::string version_note = compile(versioned_graph(2), opts_).info().cache_note;
  EXPECT_NE(version_note.find("node 1 (versioned_test_op): cache_version 1 in the entry, 2 now"),
            std::string::npos)
      << version_note;

  Graph other("unrelated");
  Var x = input(other, "x", DType::kInt32, {3});
  other.set_outputs({neg(x)});
  std::string none = compile(other, opts_).info().cache_note;
  EXPECT_NE(none.find("no entry for this graph"), std::string::npos) << none;
}

std::vector<std::string> cache_env(const fs::path& dir) {
  return {"KILN_CACHE_DIR=" + dir.string()};
}

TEST(CacheCli, DamagedToolchainMemoFallsBackToTheDriverLink) {
  fs::path cache = fs::path(temp_dir("cli-memo")) / "cache";
  auto env = cache_env(cache);
  auto first = kiln_env(env, {"compile", kMlp});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Line 4 of the memo is the remembered link command: point it at a linker that is gone.
  int damaged = 0;
  for (const auto& e : fs::directory_iterator(cache / "toolchains")) {
    std::istringstream in(read_file(e.path()));
    std::string text, line;
    for (int i = 0; std::getline(in, line); ++i) {
      text += (i == 3 ? std::string("/nonexistent/ld\x1f@OBJ@\x1f-o\x1f@OUT@") : line) + "\n";
    }
    write_file_atomic(e.path(), text);
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  fs::remove_all(cache / "objects");
  fs::remove(cache / "index.sqlite");
  auto again = kiln_env(env, {"compile", "-v", kMlp});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("cache miss"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("the remembered link command failed"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("/nonexistent/ld"), std::string::npos)
      << "names the command: " << again.err;
  // The damaged memo is dropped, so the next process probes afresh and links directly.
  fs::remove_all(cache / "objects");
  fs::remove(cache / "index.sqlite");
  auto third = kiln_env(env, {"compile", "-v", kMlp});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(third.err.find("the remembered link command failed"), std::string::npos) << third.err;
}

// From `kiln compile -v`'s stderr: how many kernels the compile built.
int kernels_compiled(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(kernels \d+ \(\d+ reused, (\d+) compiled)")))
    return -1;
  return std::stoi(m[1]);
}

TEST(CacheCli, HitOrMissAndEveryCacheCommand) {
  fs::path cache = fs::path(temp_dir("cli-cache")) / "cache";
  auto env = cache_env(cache);
  auto miss = kiln_env(env, {"compile", "-v", kMlp});
  ASSERT_EQ(miss.exit_code, 0) << miss.err;
  EXPECT_NE(miss.err.find("cache miss"), std::string::npos) << miss.err;
  auto hit = kiln_env(env, {"compile", "-v", kMlp});
  EXPECT_NE(hit.err.find("cache hit"), std::string::npos) << hit.err;
  const std::string key = printed_key(hit);
  ASSERT_EQ(key.size(), 64u);
  EXPECT_EQ(key, printed_key(miss));

  auto ls = kiln_env(env, {"cache", "ls"});
  EXPECT_EQ(ls.exit_code, 0);
  EXPECT_NE(ls.out.find(key.substr(0, 16) + "  mlp"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("1 entries"), std::string::npos) << ls.out;

  auto show = kiln_env(env, {"cache", "show", key.substr(0, 10)});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  for (const std::string& word :
       {"key        " + key, std::string("model      mlp"), std::string("toolchain.flags"),
        std::string("graph:"), std::string("node 0 matmul"),
        std::string(
            "fold@3,simplify@7,cse@1,norm@1,layout@7,nhwc@4,winograd@2,pack@7,views@2,attention@1"),
        std::string("with_epilogue"), std::string("module.so"), std::string("plan"),
        std::string("source     ") + (cache / "objects").string()}) {
    EXPECT_NE(show.out.find(word), std::string::npos) << word << " not in\n" << show.out;
  }

  auto stats = kiln_env(env, {"cache", "stats"});
  for (const char* word : {"entries    1", "hits       1", "misses     1", "hit rate   50.0%",
                           "compiles   1", "saved"}) {
    EXPECT_NE(stats.out.find(word), std::string::npos) << word << " not in\n" << stats.out;
  }

  // Entries are the module, its kernels' objects and its prepared weights (the MLP's packed
  // GEMM panels).
  EXPECT_NE(stats.out.find("prepared   1 weight sets"), std::string::npos) << stats.out;
  EXPECT_NE(ls.out.find("and 1 prepared weight sets"), std::string::npos) << ls.out;
  const int kernels = kernels_compiled(miss.err);
  ASSERT_GT(kernels, 0) << miss.err;
  EXPECT_NE(ls.out.find("and " + std::to_string(kernels) + " kernel objects"), std::string::npos)
      << ls.out;
  EXPECT_NE(stats.out.find("kernels    " + std::to_string(kernels) + " objects"), std::string::npos)
      << stats.out;
  auto verify = kiln_env(env, {"cache", "verify"});
  EXPECT_EQ(verify.exit_code, 0);
  EXPECT_NE(verify.out.find(std::to_string(2 + kernels) + " entries good, 0 bad"),
            std::string::npos)
      << verify.out;
  fs::path so = cache / "objects" / key.substr(0, 2) / key / "module.so";
  fs::resize_file(so, 100);
  verify = kiln_env(env, {"cache", "verify"});
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_NE(verify.out.find("bad  " + key + ": module.so is 100 bytes"), std::string::npos)
      << verify.out;
  EXPECT_NE(kiln_env(env, {"compile", "-v", kMlp}).err.find("cache miss"), std::string::npos);

  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"})
    fs::remove(cache / f);
  auto reindex = kiln_env(env, {"cache", "reindex"});
  EXPECT_NE(reindex.out.find("indexed " + std::to_string(2 + kernels) + " entries"),
            std::string::npos)
      << reindex.out << reindex.err;
  EXPECT_NE(kiln_env(env, {"cache", "ls"}).out.find(key.substr(0, 16)), std::string::npos);

  auto flagged = kiln_env({"KILN_CACHE_DIR=" + cache.string(), "KILN_CFLAGS=-DKILN_CLI_EXPLAIN=1"},
                          {"compile", kMlp});
  ASSERT_EQ(flagged.exit_code, 0) << flagged.err;
  auto explain = kiln_env({"KILN_CACHE_DIR=" + cache.string(), "KILN_CFLAGS=-DKILN_CLI_EXPLAIN=2"},
                          {"compile", "--explain", kMlp});
  EXPECT_NE(explain.err.find("cache miss: nearest entry"), std::string::npos) << explain.err;
  EXPECT_NE(explain.err.find("toolchain.flags: '"), std::string::npos) << explain.err;
  EXPECT_NE(explain.err.find("-DKILN_CLI_EXPLAIN=1' in the entry"), std::string::npos)
      << explain.err;

  auto clear = kiln_env(env, {"cache", "clear"});
  // Three modules (the MLP, then under two other flags), the kernels of each flag set and
  // each module's prepared weights.
  EXPECT_NE(clear.out.find("removed " + std::to_string(6 + 3 * kernels) + " entries"),
            std::string::npos)
      << clear.out;
  EXPECT_NE(kiln_env(env, {"cache", "ls"}).out.find("0 entries"), std::string::npos);

  auto bypass =
      kiln_env({"KILN_CACHE_DIR=" + cache.string(), "KILN_CACHE=0"}, {"compile", "-v", kMlp});
  EXPECT_NE(bypass.err.find("cache bypassed"), std::string::npos) << bypass.err;
  EXPECT_NE(kiln_env(env, {"cache", "ls"}).out.find("0 entries"), std::string::npos);

  for (const auto& args :
       std::vector<std::vector<std::string>>{{"cache"},
                                             {"cache", "bogus"},
                                             {"cache", "show"},
                                             {"cache", "ls", "extra"},
                                             {"cache", "ls", "--max-age", "1d"},
                                             {"compile", "--max-size", "1G", kMlp}}) {
    auto r = kiln_env(env, args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
  }
  auto bad_size = kiln_env(env, {"cache", "gc", "--max-size", "lots"});
  EXPECT_EQ(bad_size.exit_code, 1);
  EXPECT_NE(bad_size.err.find("--max-size: 'lots' is not a size"), std::string::npos)
      << bad_size.err;
  auto bad_cap = kiln_env({"KILN_CACHE_DIR=" + cache.string(), "KILN_CACHE_MAX_SIZE=lots"},
                          {"compile", "-v", kMlp});
  EXPECT_EQ(bad_cap.exit_code, 1);
  EXPECT_NE(bad_cap.err.find("KILN_CACHE_MAX_SIZE: 'lots' is not a size"), std::string::npos)
      << bad_cap.err;
  EXPECT_EQ(bad_cap.err.find("cache miss"), std::string::npos);  // failed before compiling
  auto unknown = kiln_env(env, {"cache", "show", "0000"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("no cache entry with key '0000'"), std::string::npos) << unknown.err;
}

TEST(CacheCli, GcNeverRemovesAnEntryALiveProcessHasLoaded) {
  clear_compile_memo();
  fs::path cache = fs::path(temp_dir("cli-inuse")) / "cache";
  CompileOptions opts;
  opts.cache_dir = cache;
  std::optional<Function> f = compile(load_model(kMlp), opts);
  fs::path entry = f->info().module_path.parent_path();
  wait_for_background_stores();  // the prepared weights are published behind the compile
  auto gc = kiln_env(cache_env(cache), {"cache", "gc", "--max-size", "1"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  // The kernels' objects go (the loaded module has them linked in), and so do its prepared
  // weights (the process holds them in memory, or maps them: a removed file stays mapped);
  // the module stays.
  ASSERT_GT(f->info().kernels.kernels, 0);
  EXPECT_NE(gc.out.find("removed " + std::to_string(f->info().kernels.kernels + 1) + " entries"),
            std::string::npos)
      << gc.out;
  EXPECT_NE(gc.out.find("kept 1 in use"), std::string::npos) << gc.out;
  EXPECT_TRUE(fs::exists(entry / "module.so"));
  f.reset();
  clear_compile_memo();
  gc = kiln_env(cache_env(cache), {"cache", "gc", "--max-size", "1"});
  EXPECT_NE(gc.out.find("removed 1 entries"), std::string::npos) << gc.out;
  EXPECT_FALSE(fs::exists(entry));
}

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(CacheCli, EightProcessesStartedTogetherCompileOnce) {
  fs::path dir = temp_dir("cli-eight");
  fs::path log = dir / "cc.log";
  std::string script = "for i in 1 2 3 4 5 6 7 8; do KILN_CACHE_DIR='" + (dir / "cache").string() +
                       "' KILN_CC='" + kWrapper + "' KILN_TEST_CC_LOG='" + log.string() + "' '" +
                       kKiln + "' compile -v '" + kMlp + "' > \"" + dir.string() +
                       "/out$i\" 2> \"" + dir.string() + "/err$i\" || echo $i >> '" + dir.string() +
                       "/failed' & done; wait";
  auto r = run_process({"/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir / "failed")) << read_file(dir / "failed");
  int misses = 0, hits = 0, units = 0;
  std::string key;
  for (int i = 1; i <= 8; ++i) {
    std::string err = read_file(dir / ("err" + std::to_string(i)));
    if (err.find("cache miss") != std::string::npos) units = kernels_compiled(err);
    misses += count_lines_starting(err, "cache miss");
    hits += count_lines_starting(err, "cache hit");
    std::string out = read_file(dir / ("out" + std::to_string(i)));
    if (i == 1) key = out.substr(0, 72);
    EXPECT_EQ(out.substr(0, 72), key);
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(hits, 7);
  // Only the one compiling process ran the compiler: once per kernel (and for the binding
  // where it is not assembled).
  EXPECT_GT(units, 0);
  const int starts = count_lines_starting(read_file(log), "start ");
  EXPECT_GE(starts, units) << read_file(log);
  EXPECT_LE(starts, units + 1) << read_file(log);
  auto stats = kiln_env(cache_env(dir / "cache"), {"cache", "stats"});
  EXPECT_NE(stats.out.find("compiles   1\n"), std::string::npos) << stats.out;
}

TEST(CacheCli, DifferentKeysCompileInParallel) {
  fs::path dir = temp_dir("cli-parallel");
  write_file_atomic(dir / "tiny.json",
                    R"({"name": "tiny", "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}],
    "nodes": [{"op": "exp", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  fs::path log = dir / "cc.log";
  // One compile job per process: only the two processes can meet at the barrier.
  std::string env = "KILN_CACHE_DIR='" + (dir / "cache").string() + "' KILN_CC='" + kWrapper +
                    "' KILN_TEST_CC_LOG='" + log.string() + "' KILN_TEST_CC_BARRIER=2 KILN_JOBS=1 ";
  std::string script = env + "'" + kKiln + "' compile '" + kMlp + "' >/dev/null & " + env + "'" +
                       kKiln + "' compile '" + (dir / "tiny.json").string() + "' >/dev/null & wait";
  auto r = run_process({"/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(read_file(log));
  std::vector<std::string> kinds;
  for (std::string kind, pid; in >> kind >> pid;) kinds.push_back(kind);
  // Each compile waited at the barrier for the other to start: had anything serialised them,
  // the first would have given up there and failed.
  ASSERT_GE(kinds.size(), 4u) << read_file(log);
  EXPECT_EQ(std::vector<std::string>(kinds.begin(), kinds.begin() + 2),
            (std::vector<std::string>{"start", "start"}))
      << read_file(log);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "start"),
            std::count(kinds.begin(), kinds.end(), "end"));
}

TEST(CacheCli, CompileKilledMidwayLeavesNoEntryAndNoLock) {
  fs::path dir = temp_dir("cli-killed");
  fs::path cache = dir / "cache", log = dir / "cc.log", started = dir / "started",
           hold = dir / "hold";
  ASSERT_EQ(::mkfifo(started.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(hold.c_str(), 0600), 0);
  // Opened before the child runs: the compiler's write finds a reader, and poll() below
  // waits for it explicitly.
  int started_fd = ::open(started.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(started_fd, 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so the compiler it runs dies with it
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::string e1 = "KILN_CACHE_DIR=" + cache.string(), e2 = "KILN_CC=" + kWrapper,
                e3 = "KILN_TEST_CC_STARTED=" + started.string(),
                e4 = "KILN_TEST_CC_HOLD=" + hold.string();
    ::execl("/usr/bin/env", "env", e1.c_str(), e2.c_str(), e3.c_str(), e4.c_str(), kKiln.c_str(),
            "compile", kMlp.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  pollfd pfd{started_fd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, 60000);
  ::close(started_fd);
  if (ready != 1) ::kill(-pid, SIGKILL);
  ASSERT_EQ(ready, 1) << "the compile never started (60 s)";
  ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));

  int visible = 0;
  for (const auto& shard : fs::directory_iterator(cache / "objects")) {
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(shard.path())) ++visible;
  }
  EXPECT_EQ(visible, 0);
  EXPECT_FALSE(
      fs::is_empty(cache / "staging"));  // the half-built entry, private to the dead process
  auto ls = kiln_env(cache_env(cache), {"cache", "ls"});
  EXPECT_NE(ls.out.find("0 entries"), std::string::npos) << ls.out;

  // Same key, same compiler: the dead process's lock must not block (timeout guards a hang).
  auto again =
      run_process({"/usr/bin/timeout", "120", "/usr/bin/env", "KILN_CACHE_DIR=" + cache.string(),
                   "KILN_CC=" + kWrapper, kKiln, "compile", "-v", kMlp});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("cache miss"), std::string::npos) << again.err;
  auto gc = kiln_env(cache_env(cache), {"cache", "gc"});
  // The dead process's staging folders (its module's and its kernels').
  EXPECT_TRUE(std::regex_search(gc.out, std::regex("cleaned [1-9][0-9]* leftovers"))) << gc.out;
  EXPECT_TRUE(fs::is_empty(cache / "staging"));
}

}  // namespace
}  // namespace kiln
