// The warm path: the key is the graph as given, a memo or cache hit runs no rewrite pass, and
// weights are prepared (folded, packed) from the entry's plan once per weight set.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "cache/entry_meta.h"
#include "cache/entry_signature.h"
#include "compiler/entries/background_stores.h"
#include "compiler/compile.h"
#include "compiler/module_plan.h"
#include "helpers.h"
#include "ops/builders.h"
#include "ops/cop.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "util/fs.h"
#include "util/sha256.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln_env;
using testing::temp_dir;
using testing::tensors_close;

// y = x + w elementwise, counting its reference runs: constant folding and weight
// preparation are the only callers of perform here, so the count says how often weights
// were prepared.
std::atomic<int> g_performs{0};

class CountedOp : public COp {
 public:
  CountedOp() : COp("counted_test_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    ++g_performs;
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].store(i, 3 * in[0].load(i));
  }
  std::string c_code(const Node&, const CodeNames& n, const Sub&) const override {
    return "for (int64_t i = 0; i < " + n.inputs[0] + "->shape[0]; ++i)\n  ((float *)" +
           n.outputs[0] + "->data)[i] = 3 * ((const float *)" + n.inputs[0] + "->data)[i];\n";
  }
  std::optional<int> cache_version() const override { return 1; }
};

void register_counted() {
  static const bool done = [] {
    OpRegistry::instance().add("counted_test_op",
                               [](const Attrs&) { return std::make_shared<CountedOp>(); });
    return true;
  }();
  (void)done;
}

// y = x + counted(w), with w a parameter (folded: counted(w) is prepared from the weights).
Graph counted_graph(const Tensor& w) {
  register_counted();
  Graph g("counted");
  Var x = input(g, "x", DType::kFloat32, {4});
  Var p = parameter(g, w, "w");
  g.set_outputs({x + apply("counted_test_op", {p})});
  return g;
}

Tensor vec4(double a, double b, double c, double d) {
  return Tensor::from_doubles(DType::kFloat32, {4}, {a, b, c, d});
}

class WarmPath : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_compile_memo();
    opts_.cache_dir =
        fs::path(temp_dir(std::string("warm-") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) /
        "cache";
  }
  void TearDown() override { clear_compile_memo(); }
  CompileOptions opts_;
};

TEST_F(WarmPath, WeightsArePreparedOncePerWeightSetAndHitsRunNoPass) {
  const Tensor x = vec4(1, 2, 3, 4);
  const Tensor wa = vec4(1, -1, 0.5, 0);
  const Tensor wb = vec4(10, 20, 30, -40);
  g_performs = 0;
  Graph ga = counted_graph(wa);
  Function miss = compile(ga, opts_);
  EXPECT_EQ(miss.info().cache, CacheStatus::kMiss);
  EXPECT_EQ(g_performs, 1);  // the fold, whose result seeds the weight set
  EXPECT_TRUE(tensors_close(miss({x})[0], vec4(4, -1, 4.5, 4)));

  Function again = compile(ga, opts_);  // the same Graph: no pass, no preparation
  EXPECT_EQ(again.info().cache, CacheStatus::kMemo);
  Graph ga2 = counted_graph(wa);  // built anew around the same weight tensor
  Function rebuilt = compile(ga2, opts_);
  EXPECT_EQ(rebuilt.info().cache, CacheStatus::kMemo);
  EXPECT_EQ(rebuilt.info().key, miss.info().key);
  EXPECT_EQ(g_performs, 1);
  EXPECT_TRUE(tensors_close(rebuilt({x})[0], vec4(4, -1, 4.5, 4)));

  Graph gb = counted_graph(wb);  // new weights, same shapes: one module, prepared once more
  Function b = compile(gb, opts_);
  EXPECT_EQ(b.info().cache, CacheStatus::kMemo);
  EXPECT_EQ(g_performs, 2);
  EXPECT_TRUE(tensors_close(b({x})[0], vec4(31, 62, 93, -116)));
  compile(gb, opts_);
  compile(ga, opts_);  // both sets stay prepared
  EXPECT_EQ(g_performs, 2);
  EXPECT_TRUE(tensors_close(miss({x})[0], vec4(4, -1, 4.5, 4)));  // A's function kept A's

  clear_compile_memo();
  // From the disk cache: no pass runs, and B's weights, prepared above, come from their own
  // prepared-weights entry instead of being prepared again.
  Function hit = compile(gb, opts_);
  EXPECT_EQ(hit.info().cache, CacheStatus::kHit);
  EXPECT_EQ(hit.info().times.rewrite_ms, 0.0);
  EXPECT_EQ(hit.info().weights, "cache");
  EXPECT_EQ(g_performs, 2);
  EXPECT_TRUE(tensors_close(hit({x})[0], vec4(31, 62, 93, -116)));
}

// The prepared-weights entry of a module and weight set (family "prepared"), found by the
// folder of the one file it holds.
fs::path prepared_entry(const fs::path& cache, const std::string& avoid = "") {
  wait_for_background_stores();  // prepared sets are written behind the compile
  for (const auto& shard : fs::directory_iterator(cache / "objects"))
    for (const auto& e : fs::directory_iterator(shard.path()))
      if (fs::exists(e.path() / "prepared.safetensors") && e.path().filename() != avoid)
        return e.path();
  return {};
}

// Rewrites an entry's meta.json with `edit` applied (sizes and SHA-256s recomputed when
// `rehash`), as someone who can write the cache folder could.
void edit_meta(const fs::path& entry, const std::function<void(EntryMeta&)>& edit, bool rehash) {
  EntryMeta meta = EntryMeta::parse(read_file(entry / "meta.json"), "test");
  edit(meta);
  if (rehash) {
    for (auto& f : meta.files) {
      const std::string bytes = read_file(entry / f.name);
      f.size = bytes.size();
      f.sha256 = sha256_hex(bytes);
    }
  }
  fs::permissions(entry / "meta.json", fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomic(entry / "meta.json", meta.to_json(), 0600, true);
}

size_t quarantined(const fs::path& cache) {
  std::error_code ec;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(cache / "quarantine", ec)) n += e.is_directory();
  return n;
}

// A prepared-weights entry that is damaged, foreign (the wrong tensors under right hashes),
// made for other weights, or unsigned where signatures are required is never used: it is
// quarantined and the weights are prepared again, and the results stay right.
TEST_F(WarmPath, BadPreparedWeightEntriesAreRefusedAndTheWeightsPreparedAgain) {
  const Tensor x = vec4(1, 2, 3, 4);
  const Tensor wa = vec4(1, -1, 0.5, 0), wb = vec4(10, 20, 30, -40);
  const Tensor ya = vec4(4, -1, 4.5, 4), yb = vec4(31, 62, 93, -116);
  const fs::path cache = opts_.cache_dir;
  g_performs = 0;
  Graph ga = counted_graph(wa);
  ASSERT_EQ(compile(ga, opts_).info().cache, CacheStatus::kMiss);
  const fs::path entry_a = prepared_entry(cache);
  ASSERT_FALSE(entry_a.empty()) << "the miss stored no prepared weights";
  auto fresh_hit = [&](const Graph& g, const Tensor& want, const char* weights) {
    clear_compile_memo();
    Function f = compile(g, opts_);
    EXPECT_EQ(f.info().cache, CacheStatus::kHit);
    EXPECT_EQ(f.info().weights, weights);
    EXPECT_TRUE(tensors_close(f({x})[0], want));
  };
  fresh_hit(ga, ya, "cache");
  EXPECT_EQ(g_performs, 1) << "a hit prepared weights its cache holds";

  // Damaged: a flipped byte fails the entry's SHA-256.
  {
    const fs::path file = entry_a / "prepared.safetensors";
    std::string bytes = read_file(file);
    bytes[bytes.size() - 1] ^= 0x40;
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
    write_file_atomic(file, bytes, 0600, true);
  }
  ::testing::internal::CaptureStderr();
  fresh_hit(ga, ya, "prepared");
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(g_performs, 2);
  EXPECT_EQ(quarantined(cache), 1u);
  fresh_hit(ga, ya, "cache");  // stored again, and good
  EXPECT_EQ(g_performs, 2);

  // Foreign: a tensor of another shape under hashes that match it.
  {
    const fs::path entry = prepared_entry(cache);
    write_safetensors(entry / "prepared.safetensors.new",
                      {{"step0", Tensor::from_doubles(DType::kFloat32, {3}, {7, 7, 7})}});
    fs::rename(entry / "prepared.safetensors.new", entry / "prepared.safetensors");
    edit_meta(
        entry, [](EntryMeta&) {}, true);
  }
  ::testing::internal::CaptureStderr();
  fresh_hit(ga, ya, "prepared");
  const std::string foreign = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(foreign.find("prepared weights"), std::string::npos) << foreign;
  EXPECT_EQ(g_performs, 3);
  EXPECT_EQ(quarantined(cache), 2u);

  // Made for other weights: B's entry moved under A's key.
  Graph gb = counted_graph(wb);
  clear_compile_memo();
  compile(gb, opts_);  // a hit of the module: B's weights prepared and stored
  EXPECT_EQ(g_performs, 4);
  {
    const fs::path a = prepared_entry(cache), b = prepared_entry(cache, a.filename().string());
    ASSERT_FALSE(b.empty());
    // Which is A's: the one whose removal makes A's hit prepare again.
    const fs::path aside = cache / "aside";
    fs::rename(a, aside);
    fs::rename(b, a);  // B's files under one of the two keys, the other key empty
    fs::rename(aside, b);
  }
  ::testing::internal::CaptureStderr();
  clear_compile_memo();
  Function swapped_a = compile(ga, opts_);
  Function swapped_b = compile(gb, opts_);
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(tensors_close(swapped_a({x})[0], ya)) << "A ran on B's prepared weights";
  EXPECT_TRUE(tensors_close(swapped_b({x})[0], yb)) << "B ran on A's prepared weights";
  EXPECT_EQ(swapped_a.info().weights, "prepared");
  EXPECT_EQ(swapped_b.info().weights, "prepared");
  EXPECT_EQ(g_performs, 6);
}

TEST_F(WarmPath, WithSignaturesRequiredAnUnsignedPreparedEntryIsNeverUsed) {
  const Tensor x = vec4(1, 2, 3, 4);
  const Tensor wa = vec4(1, -1, 0.5, 0), ya = vec4(4, -1, 4.5, 4);
  const fs::path dir = opts_.cache_dir.parent_path();
  const auto [secret, pub] = generate_key_pair("builders");
  write_file_atomic(dir / "builders.secret", secret + "\n", 0600, true);
  ::setenv("KILN_CACHE_SIGNING_KEY", (dir / "builders.secret").c_str(), 1);
  ::setenv("KILN_CACHE_TRUSTED_KEYS", pub.c_str(), 1);
  ::setenv("KILN_CACHE_REQUIRE_SIGNATURES", "1", 1);
  struct Unset {
    ~Unset() {
      for (const char* v :
           {"KILN_CACHE_SIGNING_KEY", "KILN_CACHE_TRUSTED_KEYS", "KILN_CACHE_REQUIRE_SIGNATURES"})
        ::unsetenv(v);
    }
  } unset;
  g_performs = 0;
  Graph ga = counted_graph(wa);
  compile(ga, opts_);
  const fs::path entry = prepared_entry(opts_.cache_dir);
  ASSERT_FALSE(entry.empty());
  EXPECT_NE(read_file(entry / "meta.json").find("\"signatures\""), std::string::npos)
      << "the writer did not sign its prepared weights";
  edit_meta(
      entry, [](EntryMeta& m) { m.signatures.clear(); }, false);
  ::testing::internal::CaptureStderr();
  clear_compile_memo();
  Function f = compile(ga, opts_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.info().weights, "prepared") << err;
  EXPECT_NE(err.find("not signed by a trusted key"), std::string::npos) << err;
  EXPECT_TRUE(tensors_close(f({x})[0], ya));
  EXPECT_EQ(g_performs, 2);
}

TEST_F(WarmPath, ThreadsCompilingOneModuleWithTwoWeightSetsGetTheirOwnResults) {
  const Tensor x = vec4(1, 2, 3, 4);
  const Tensor weights[2] = {vec4(1, -1, 0.5, 0), vec4(10, 20, 30, -40)};
  const Tensor expected[2] = {vec4(4, -1, 4.5, 4), vec4(31, 62, 93, -116)};
  Graph shared = counted_graph(weights[0]);
  compile(shared, opts_);  // the module exists; the threads hit the memo
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const int k = (t + i) % 2;
        Graph g = counted_graph(weights[k]);
        Function f = compile(i % 3 == 0 && k == 0 ? shared : g, opts_);
        if (!tensors_close(f({x})[0], expected[k])) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
}

// A convolution's weight is packed into blocks by the plan's recorded transform: a module
// from the disk cache given other weights packs those, and its results are theirs.
TEST_F(WarmPath, ConvolutionWeightBlocksAreRepackedForANewWeightSet) {
  std::mt19937 rng(71);
  auto conv_graph = [](const Tensor& w) {
    Graph g("conv_blocks");
    Var x = input(g, "x", DType::kFloat32, {1, 8, 6, 5});
    g.set_outputs(
        {apply("conv", {x, parameter(g, w, "w")}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})});
    return g;
  };
  const Tensor x = testing::random_tensor(DType::kFloat32, {1, 8, 6, 5}, rng);
  Graph ga = conv_graph(testing::random_tensor(DType::kFloat32, {18, 8, 3, 3}, rng));
  Function a = compile(ga, opts_);
  EXPECT_EQ(a.info().cache, CacheStatus::kMiss);
  EXPECT_NE(read_file(a.info().module_path.parent_path() / "plan").find("pack_conv_blocks"),
            std::string::npos);
  clear_compile_memo();
  Graph gb = conv_graph(testing::random_tensor(DType::kFloat32, {18, 8, 3, 3}, rng));
  Function b = compile(gb, opts_);
  EXPECT_EQ(b.info().cache, CacheStatus::kHit);
  EXPECT_TRUE(tensors_close(b({x})[0], evaluate_reference(gb, {x})[0], 1e-4, 1e-5));
  EXPECT_FALSE(tensors_close(b({x})[0], evaluate_reference(ga, {x})[0], 1e-4, 1e-5));
}

// A blocked 3x3 chain's weights are transformed for Winograd's F(2x2, 3x3) by the plan's
// recorded transform: a module from the disk cache given other weights transforms those.
TEST_F(WarmPath, WinogradWeightsAreTransformedAgainForANewWeightSet) {
  std::mt19937 rng(76);
  auto chain = [](const Tensor& w1, const Tensor& w2) {
    Graph g("winograd_chain");
    Var x = input(g, "x", DType::kFloat32, {1, 8, 14, 13});
    const Attrs same{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    Var y = relu(apply("conv", {x, parameter(g, w1, "w1")}, same));
    g.set_outputs({apply("conv", {y, parameter(g, w2, "w2")}, same)});
    return g;
  };
  auto weight = [&] { return testing::random_tensor(DType::kFloat32, {8, 8, 3, 3}, rng); };
  const Tensor x = testing::random_tensor(DType::kFloat32, {1, 8, 14, 13}, rng);
  Graph ga = chain(weight(), weight());
  Function a = compile(ga, opts_);
  EXPECT_EQ(a.info().cache, CacheStatus::kMiss);
  EXPECT_NE(read_file(a.info().module_path.parent_path() / "plan").find("winograd_weights"),
            std::string::npos);
  EXPECT_TRUE(tensors_close(a({x})[0], evaluate_reference(ga, {x})[0], 1e-4, 1e-5));
  clear_compile_memo();
  Graph gb = chain(weight(), weight());
  Function b = compile(gb, opts_);
  EXPECT_EQ(b.info().cache, CacheStatus::kHit);
  EXPECT_TRUE(tensors_close(b({x})[0], evaluate_reference(gb, {x})[0], 1e-4, 1e-5));
  EXPECT_FALSE(tensors_close(b({x})[0], evaluate_reference(ga, {x})[0], 1e-4, 1e-5));
}

// f rounded to bfloat16 (to nearest, ties to even: the 16 dropped bits against half of the
// kept last bit).
double bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t low = u & 0xffffu, keep = u >> 16;
  const uint32_t r = (low > 0x8000u || (low == 0x8000u && (keep & 1u))) ? keep + 1 : keep;
  const uint32_t bits = r << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return static_cast<double>(out);
}

Tensor bf16_rounded(const Tensor& t) {
  Tensor out = t.clone();
  for (int64_t i = 0; i < t.numel(); ++i) out.store(i, bf16_round(static_cast<float>(t.load(i))));
  return out;
}

// x @ w with A and w rounded to bfloat16, summed in double.
Tensor bf16_product(const Tensor& x, const Tensor& w) {
  auto round = bf16_round;
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  Tensor y = Tensor::zeros(DType::kFloat32, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < k; ++t) {
        acc += round(static_cast<float>(x.load(i * k + t))) *
               round(static_cast<float>(w.load(t * n + j)));
      }
      y.store(i * n + j, acc);
    }
  return y;
}

// At precision bf16 a weight's packed panels are rounded to bfloat16 by the plan's recorded
// transform: a module from the disk cache given other weights rounds those, and its results
// are theirs in bfloat16 (not the float32 product, which differs in the third digit).
TEST_F(WarmPath, BfloatPanelsAreRoundedAgainForANewWeightSet) {
  std::mt19937 rng(77);
  auto product = [](const Tensor& w) {
    Graph g("bf16_product");
    Var x = input(g, "x", DType::kFloat32, {5, 40});
    g.set_outputs({matmul(x, parameter(g, w, "w"))});
    return g;
  };
  CompileOptions opts = opts_;
  opts.precision = "bf16";
  const Tensor x = testing::random_tensor(DType::kFloat32, {5, 40}, rng);
  const Tensor wa = testing::random_tensor(DType::kFloat32, {40, 48}, rng);
  const Tensor wb = testing::random_tensor(DType::kFloat32, {40, 48}, rng);
  Function a = compile(product(wa), opts);
  EXPECT_EQ(a.info().cache, CacheStatus::kMiss);
  EXPECT_NE(read_file(a.info().module_path.parent_path() / "plan").find("gemm_panels_bf16"),
            std::string::npos);
  EXPECT_TRUE(tensors_close(a({x})[0], bf16_product(x, wa), 1e-5, 1e-5));
  clear_compile_memo();
  Graph gb = product(wb);
  Function b = compile(gb, opts);
  EXPECT_EQ(b.info().cache, CacheStatus::kHit);
  EXPECT_TRUE(tensors_close(b({x})[0], bf16_product(x, wb), 1e-5, 1e-5));
  EXPECT_FALSE(tensors_close(b({x})[0], evaluate_reference(gb, {x})[0], 1e-5, 1e-5))
      << "the float32 product: bf16 did not apply";
  // The float32 module is another entry.
  clear_compile_memo();
  Function f = compile(gb, opts_);
  EXPECT_EQ(f.info().cache, CacheStatus::kMiss);
  EXPECT_TRUE(tensors_close(f({x})[0], evaluate_reference(gb, {x})[0], 1e-5, 1e-5));
}

// The same for a convolution at bf16 (a GEMM of its windows): its weight's reorder into a
// (C*kh*kw, M) matrix and the panels' rounding both replay on a new weight set.
TEST_F(WarmPath, BfloatConvolutionWeightsAreReorderedAgainForANewWeightSet) {
  std::mt19937 rng(78);
  auto conv = [](const Tensor& w) {
    Graph g("bf16_conv");
    Var x = input(g, "x", DType::kFloat32, {2, 5, 9, 7});
    g.set_outputs({kiln::apply("conv", {x, parameter(g, w, "w")},
                               {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                {"pads", std::vector<int64_t>{1, 0, 1, 0}},
                                {"strides", std::vector<int64_t>{2, 1}}})});
    return g;
  };
  CompileOptions opts = opts_;
  opts.precision = "bf16";
  const Tensor x = testing::random_tensor(DType::kFloat32, {2, 5, 9, 7}, rng);
  const Tensor wa = testing::random_tensor(DType::kFloat32, {20, 5, 3, 3}, rng);
  const Tensor wb = testing::random_tensor(DType::kFloat32, {20, 5, 3, 3}, rng);
  // The convolution of the bfloat16-rounded operands, in double.
  auto want = [&](const Tensor& w) {
    return evaluate_reference(conv(bf16_rounded(w)), {bf16_rounded(x)})[0];
  };
  Function a = compile(conv(wa), opts);
  EXPECT_EQ(a.info().cache, CacheStatus::kMiss);
  EXPECT_TRUE(tensors_close(a({x})[0], want(wa), 1e-5, 1e-5));
  clear_compile_memo();
  Graph gb = conv(wb);
  Function b = compile(gb, opts);
  EXPECT_EQ(b.info().cache, CacheStatus::kHit);
  EXPECT_TRUE(tensors_close(b({x})[0], want(wb), 1e-5, 1e-5));
  EXPECT_FALSE(tensors_close(b({x})[0], evaluate_reference(gb, {x})[0], 1e-5, 1e-5))
      << "the float32 convolution: bf16 did not apply";
}

TEST_F(WarmPath, AnEditedGraphIsKeyedAgain) {
  Graph g("edited");
  Var x = input(g, "x", DType::kFloat32, {4});
  Var c = constant(g, vec4(1, 2, 3, 4), "c");
  g.set_outputs({x * c});
  const std::string k1 = compile(g, opts_).info().key;
  EXPECT_EQ(compile(g, opts_).info().key, k1);
  // A plain constant is part of the program: a new value through the pointer is a new key.
  g.find_variable("c")->value = vec4(1, 2, 3, 5);
  Function changed = compile(g, opts_);
  EXPECT_NE(changed.info().key, k1);
  EXPECT_TRUE(tensors_close(changed({vec4(1, 1, 1, 1)})[0], vec4(1, 2, 3, 5)));
  // So is an edit through the graph's methods.
  g.set_outputs({exp(x * c)});
  Function edited = compile(g, opts_);
  EXPECT_NE(edited.info().key, changed.info().key);
  EXPECT_EQ(edited.info().cache, CacheStatus::kMiss);
  EXPECT_TRUE(tensors_close(edited({vec4(0, 0, 0, 0)})[0], vec4(1, 1, 1, 1)));
}

TEST_F(WarmPath, PassesAreAKeyComponentThatExplainNames) {
  Graph g = counted_graph(vec4(1, 2, 3, 4));
  compile(g, opts_);
  CompileOptions other = opts_;
  other.passes = "-fusion";
  other.explain = true;
  Function f = compile(g, other);
  EXPECT_EQ(f.info().cache, CacheStatus::kMiss);
  const std::string& note = f.info().cache_note;
  // The note shortens the lists' common start to "...".
  EXPECT_NE(note.find("passes: '"), std::string::npos) << note;
  EXPECT_NE(note.find("tention@1,extrema@1,fusion@3,reduction@1,epilogue@5,dce@2' in the entry"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("tention@1,extrema@1,reduction@1,epilogue@5,dce@2' now"), std::string::npos)
      << note;
  EXPECT_EQ(note.find("graph:"), std::string::npos) << note;
}

// A plan survives its text exactly, and any damage to the text is a CacheEntryError (or a
// UserError from the ops it names), never a crash.
TEST_F(WarmPath, PlansRoundTripAndDamagedPlansAreErrors) {
  Graph g("plan");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 40});
  Var w = parameter(
      g, Tensor::from_doubles(DType::kFloat32, {40, 32}, std::vector<double>(1280, 0.25)), "w");
  Var s = apply("slice", {x},
                {{"axes", std::vector<int64_t>{1}},
                 {"starts", std::vector<int64_t>{std::numeric_limits<int64_t>::max()}},
                 {"ends", std::vector<int64_t>{std::numeric_limits<int64_t>::min()}},
                 {"steps", std::vector<int64_t>{-1}}});
  Var y = apply("gemm", {s, w * scalar(g, DType::kFloat32, 2)}, {{"alpha", 0.1}});
  g.set_outputs({apply("leaky_relu", {y}, {{"alpha", -std::numeric_limits<double>::infinity()}})});
  Function f = compile(g, opts_);
  const fs::path file = f.info().module_path.parent_path() / "plan";
  const std::string text = read_file(file);
  auto plan = ModulePlan::parse(text, "plan");
  EXPECT_EQ(plan->serialize(), text);
  EXPECT_EQ(plan->prep_steps(), 2u) << text;  // w * 2 folded, then packed
  EXPECT_NE(text.find("pack_gemm_panels"), std::string::npos) << text;

  const size_t last = text.find_last_not_of(" \n") + 1;  // trailing blanks are optional
  for (size_t n = 0; n < last; ++n) {
    EXPECT_THROW(ModulePlan::parse(text.substr(0, n), "plan"), CacheEntryError) << n;
  }
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = text;
    bad[rng() % bad.size()] = static_cast<char>(rng() % 256);
    try {
      ModulePlan::parse(bad, "plan");
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  try {
    ModulePlan::parse(text.substr(0, text.find("steps")) + "steps 1 0 ", "plan");
    ADD_FAILURE() << "no error";
  } catch (const CacheEntryError& e) {
    EXPECT_NE(std::string(e.what()).find("plan: byte "), std::string::npos) << e.what();
  }
}

// Options the key is made of are checked before anything is keyed or built.
TEST_F(WarmPath, AnUnknownDeviceOrPassIsNamed) {
  Graph g = counted_graph(vec4(1, 2, 3, 4));
  opts_.device = "tpu";
  std::string msg = testing::error_of([&] { compile(g, opts_); });
  EXPECT_NE(msg.find("device 'tpu' is not one kiln has (cpu, cuda)"), std::string::npos) << msg;
  opts_.device = "cpu";
  opts_.passes = "-fusoin";
  msg = testing::error_of([&] { compile(g, opts_); });
  EXPECT_NE(msg.find("passes: unknown pass 'fusoin'"), std::string::npos) << msg;
}

// Weights of the given graph that do not fit its key's types are refused by name.
TEST_F(WarmPath, ConstantsThatNoLongerFitTheModuleAreNamed) {
  Graph g = counted_graph(vec4(1, 2, 3, 4));
  compile(g, opts_);
  g.find_variable("w")->value = Tensor::from_doubles(DType::kFloat32, {5}, {1, 2, 3, 4, 5});
  const std::string msg = testing::error_of([&] { compile(g, opts_); });
  EXPECT_NE(msg.find("constant 'w' of graph 'counted' holds float32 (5,)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("built for float32 (4,)"), std::string::npos) << msg;
}

// The weights as a new process sees them: compile with weights A and run; a new process with
// weights B (same shapes) hits the cache, prepares B from the plan (a weight folded with a
// constant, then packed for the GEMM kernel; another packed transposed) and gives exactly
// what a cold compile with B gives, and what a plain reference computes.
void write_model(const fs::path& dir, uint32_t seed) {
  std::mt19937 rng(seed);
  write_npy(dir / "w1.npy", testing::random_tensor(DType::kFloat32, {32, 24}, rng));
  write_npy(dir / "b1.npy", testing::random_tensor(DType::kFloat32, {32}, rng));
  write_npy(dir / "w2.npy", testing::random_tensor(DType::kFloat32, {32, 20}, rng));
  std::ofstream(dir / "model.json") << R"({
  "format": "kiln-graph", "version": 1, "name": "prepared",
  "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 24]}],
  "parameters": [{"name": "w1", "file": "w1.npy"}, {"name": "b1", "file": "b1.npy"},
                 {"name": "w2", "file": "w2.npy"}, {"name": "half", "value": 0.5}],
  "nodes": [
    {"op": "gemm", "inputs": ["x", "w1", "b1"], "outputs": ["h"], "attrs": {"transB": 1}},
    {"op": "relu", "inputs": ["h"], "outputs": ["r"]},
    {"op": "mul", "inputs": ["w2", "half"], "outputs": ["w2h"]},
    {"op": "gemm", "inputs": ["r", "w2h"], "outputs": ["y"]}
  ],
  "outputs": ["y"]
})";
}

Tensor reference(const fs::path& dir, const Tensor& x) {
  Tensor w1 = read_npy(dir / "w1.npy"), b1 = read_npy(dir / "b1.npy"),
         w2 = read_npy(dir / "w2.npy");
  const int64_t m = x.shape()[0];
  Tensor y = Tensor::zeros(DType::kFloat32, {m, 20});
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> r(32);
    for (int64_t j = 0; j < 32; ++j) {
      double acc = b1.load(j);
      for (int64_t k = 0; k < 24; ++k) acc += x.load(i * 24 + k) * w1.load(j * 24 + k);
      r[static_cast<size_t>(j)] = std::max(acc, 0.0);
    }
    for (int64_t n = 0; n < 20; ++n) {
      double acc = 0;
      for (int64_t j = 0; j < 32; ++j) acc += r[static_cast<size_t>(j)] * 0.5 * w2.load(j * 20 + n);
      y.store(i * 20 + n, acc);
    }
  }
  return y;
}

TEST(WarmPathCli, NewWeightsInANewProcessArePreparedLikeAColdCompile) {
  const fs::path dir = temp_dir("warm-cli");
  const fs::path cache = dir / "cache", cold = dir / "cold";
  std::mt19937 rng(3);
  const Tensor x = testing::random_tensor(DType::kFloat32, {5, 24}, rng);  // 5 rows: a tail
  write_npy(dir / "x.npy", x);
  // --no-generic-start: a miss answers through the module it compiles, whose results the
  // hit must repeat bit for bit (the generic tier agrees only within rounding).
  auto run = [&](const fs::path& cache_dir, const std::string& out) {
    return kiln_env({"KILN_CACHE_DIR=" + cache_dir.string()},
                    {"-v", "run", (dir / "model.json").string(), "--input",
                     "x=" + (dir / "x.npy").string(), "--output-dir", (dir / out).string(),
                     "--no-generic-start"});
  };
  write_model(dir, 1);
  auto a = run(cache, "a");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("cache miss"), std::string::npos) << a.err;
  Tensor ya = read_npy(dir / "a" / "y.npy");
  EXPECT_TRUE(tensors_close(ya, reference(dir, x), 1e-4, 1e-5));

  write_model(dir, 2);  // weights B
  auto b = run(cache, "b");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("cache hit"), std::string::npos) << b.err;
  auto c = run(cold, "c");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("cache miss"), std::string::npos) << c.err;
  Tensor yb = read_npy(dir / "b" / "y.npy"), yc = read_npy(dir / "c" / "y.npy");
  EXPECT_TRUE(tensors_close(yb, reference(dir, x), 1e-4, 1e-5));
  ASSERT_EQ(yb.nbytes(), yc.nbytes());
  EXPECT_EQ(std::memcmp(yb.data(), yc.data(), yb.nbytes()), 0) << "hit and cold compile differ";
  EXPECT_FALSE(tensors_close(yb, ya)) << "weights B gave A's result";
}

}  // namespace
}  // namespace kiln
