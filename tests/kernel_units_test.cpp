// Kernels as units: a module is linked from distinct kernels, each generic over the sizes it
// reads from its argument array, compiled once and cached on its own, and shared by every
// node and every model with the same code.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "cache/cache_store.h"
#include "compiler/c/linker.h"
#include "compiler/compile.h"
#include "compiler/compile_error.h"
#include "compiler/c/kernel_build.h"
#include "helpers.h"
#include "ops/builders.h"
#include "ops/reference.h"
#include "runtime/io/npy.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln_env;
using testing::random_tensor;
using testing::temp_dir;
using testing::tensors_close;

const std::string kMlp = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";

// conv (3x3, pad 1) + relu twice at two sizes, then a max pool: the two convs differ only in
// their sizes, so they are one kernel.
Graph conv_net(const std::string& name, int64_t channels, int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  Graph g(name);
  Var x = input(g, "x", DType::kFloat32, {1, 3, size, size});
  Var w1 = parameter(g, random_tensor(DType::kFloat32, {channels, 3, 3, 3}, rng, -0.5, 0.5), "w1");
  Var w2 = parameter(g, random_tensor(DType::kFloat32, {channels, channels, 3, 3}, rng, -0.5, 0.5),
                     "w2");
  Attrs conv{{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  Var h = relu(apply("conv", {x, w1}, conv));
  h = relu(apply("conv", {h, w2}, conv));
  Var y = apply("max_pool", {h}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                  {"strides", std::vector<int64_t>{2, 2}}});
  g.set_outputs({y});
  return g;
}

// The nets here are NCHW convolutions: without the layout pass, which would put the stem
// (3 channels, read in NCHW) and the 8-channel convolution in different blocked kernels.
CompileOptions in_cache(const std::string& dir, bool kernels = true) {
  CompileOptions o;
  o.cache_dir = dir;
  o.kernel_units = kernels;
  o.passes = "-layout";
  return o;
}

Tensor image(int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  return random_tensor(DType::kFloat32, {1, 3, size, size}, rng);
}

TEST(KernelUnits, NodesThatDifferOnlyInSizesShareOneKernel) {
  Graph g = conv_net("shared_sizes", 8, 12, 1);
  Graph optimized = optimized_graph(g, in_cache(temp_dir("ku_link")));
  LinkedModule m = link_c_module(optimized, "test", LinkMode::kKernels);
  int conv_nodes = 0;
  for (const auto& n : optimized.nodes()) conv_nodes += n->op->describe().find("conv") != std::string::npos;
  ASSERT_EQ(conv_nodes, 2);
  // The two convs (3 and 8 input channels) are one kernel with two nodes.
  int shared = 0;
  for (const auto& k : m.c_kernels) {
    if (k.nodes.size() == 2) ++shared;
    // A kernel's unit names no node: any model may share it.
    EXPECT_FALSE(std::regex_search(k.code.str(), std::regex(R"(/\* node \d+: )"))) << k.code.str();
    EXPECT_EQ(k.code.str().find("kiln_node_"), std::string::npos) << k.code.str();
    EXPECT_NE(k.code.str().find("const int64_t *kp"), std::string::npos);
  }
  EXPECT_EQ(shared, 1);
  EXPECT_LT(m.c_kernels.size(), optimized.nodes().size());
  // The displayed source: kernels first (each once), then the binding with node banners.
  const std::string src = m.code.str();
  const size_t kernels_at = src.find("---- kernels");
  const size_t binding_at = src.find("---- the module");
  ASSERT_NE(kernels_at, std::string::npos);
  ASSERT_NE(binding_at, std::string::npos);
  EXPECT_LT(kernels_at, binding_at);
  for (const auto& k : m.c_kernels) {
    const std::regex def("int " + k.symbol + "\\(void \\*state_");
    EXPECT_EQ(std::distance(std::sregex_iterator(src.begin(), src.end(), def), std::sregex_iterator()), 1)
        << k.symbol;
  }
  EXPECT_NE(src.find("/* node 0: "), std::string::npos);
  // The binding unit declares the kernels and defines none.
  const std::string binding = m.binding.str();
  for (const auto& k : m.c_kernels) {
    EXPECT_NE(binding.find(k.symbol + "(void *state_"), std::string::npos);
    EXPECT_EQ(binding.find("kiln_cleanup: __attribute__((unused));\n  return kiln_status;\n}\n\n/* kernel"),
              std::string::npos);
  }
}

// Slices that differ only in where they cut (starts, ends, steps; negative steps and the
// exporters' INT64_MIN / INT64_MAX ends among them) are one kernel: the bounds are its
// arguments. Each output is checked against indices worked out by hand.
TEST(KernelUnits, SlicesThatDifferOnlyInWhereTheyCutShareOneKernel) {
  Graph g("slices");
  Var x = input(g, "x", DType::kFloat32, {2, 9, 3});
  const auto cut = [&](int64_t start, int64_t end, int64_t step) {
    return apply("slice", {x},
                 {{"starts", std::vector<int64_t>{start}}, {"ends", std::vector<int64_t>{end}},
                  {"axes", std::vector<int64_t>{1}}, {"steps", std::vector<int64_t>{step}}});
  };
  g.set_outputs({cut(1, 7, 2), cut(8, INT64_MIN, -3), cut(-4, INT64_MAX, 1), cut(7, 2, -1)});
  const std::vector<std::vector<int64_t>> rows{{1, 3, 5}, {8, 5, 2}, {5, 6, 7, 8}, {7, 6, 5, 4, 3}};
  CompileOptions o;
  o.cache_dir = temp_dir("ku_slices");
  o.passes = "none";
  Graph optimized = optimized_graph(g, o);
  LinkedModule m = link_c_module(optimized, "test", LinkMode::kKernels);
  ASSERT_EQ(m.c_kernels.size(), 1u) << m.code.str();
  EXPECT_EQ(m.c_kernels[0].nodes.size(), 4u);
  Tensor in = Tensor::empty(DType::kFloat32, {2, 9, 3});
  for (int64_t i = 0; i < in.numel(); ++i) in.store(i, static_cast<double>(i));
  const std::vector<Tensor> out = compile(g, o)({in});
  ASSERT_EQ(out.size(), rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto n = static_cast<int64_t>(rows[k].size());
    ASSERT_EQ(out[k].shape(), (Shape{2, n, 3})) << k;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < 3; ++c)
          EXPECT_EQ(out[k].load((b * n + r) * 3 + c),
                    static_cast<double>((b * 9 + rows[k][static_cast<size_t>(r)]) * 3 + c))
              << "slice " << k << " at " << b << "," << r << "," << c;
  }
}

// Transposes of one rank that differ only in their permutation are one kernel (the
// permutation is its argument); each output is checked element by element by hand.
TEST(KernelUnits, TransposesThatDifferOnlyInTheirPermutationShareOneKernel) {
  Graph g("transposes");
  const Shape dims{2, 3, 5};
  Var x = input(g, "x", DType::kFloat32, dims);
  const std::vector<std::vector<int64_t>> perms{{0, 2, 1}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
  std::vector<Variable*> outs;
  for (const auto& p : perms) outs.push_back(apply("transpose", {x}, {{"perm", p}}).var());
  g.set_outputs(outs);
  CompileOptions o;
  o.cache_dir = temp_dir("ku_transposes");
  o.passes = "none";
  LinkedModule m = link_c_module(optimized_graph(g, o), "test", LinkMode::kKernels);
  ASSERT_EQ(m.c_kernels.size(), 1u) << m.code.str();
  EXPECT_EQ(m.c_kernels[0].nodes.size(), perms.size());
  Tensor in = Tensor::empty(DType::kFloat32, dims);
  for (int64_t i = 0; i < in.numel(); ++i) in.store(i, static_cast<double>(i));
  const std::vector<Tensor> out = compile(g, o)({in});
  ASSERT_EQ(out.size(), perms.size());
  for (size_t k = 0; k < perms.size(); ++k) {
    const auto& p = perms[k];
    const Shape want{dims[p[0]], dims[p[1]], dims[p[2]]};
    ASSERT_EQ(out[k].shape(), want) << k;
    for (int64_t a = 0; a < want[0]; ++a)
      for (int64_t b = 0; b < want[1]; ++b)
        for (int64_t c = 0; c < want[2]; ++c) {
          int64_t at[3];
          at[p[0]] = a, at[p[1]] = b, at[p[2]] = c;  // the input index this element comes from
          EXPECT_EQ(out[k].load((a * want[1] + b) * want[2] + c),
                    static_cast<double>((at[0] * dims[1] + at[1]) * dims[2] + at[2]))
              << "perm " << k << " at " << a << "," << b << "," << c;
        }
  }
}

TEST(KernelUnits, TheBindingIsAssembledAndTheCBindingIsTheFallback) {
#if defined(__x86_64__)
  Graph g = conv_net("assembled", 4, 6, 12);
  LinkedModule m = link_c_module(optimized_graph(g, in_cache(temp_dir("ku_asm"))), "k", LinkMode::kKernels);
  ASSERT_FALSE(m.binding_asm.empty());
  for (const auto& k : m.c_kernels) EXPECT_NE(m.binding_asm.find("jmp " + k.symbol), std::string::npos);
  EXPECT_NE(m.binding_asm.find(".note.GNU-stack"), std::string::npos);
  // A module on one unit, or with a node that must stay inline, has no assembler binding.
  EXPECT_TRUE(link_c_module(optimized_graph(g), "k", LinkMode::kModule).binding_asm.empty());
#endif
  // With no `as` on the PATH the C binding is compiled instead, and the module is the same.
  const fs::path empty = temp_dir("ku_no_as_path");
  const std::string out = temp_dir("ku_no_as_out");
  ProcessResult r = kiln_env({"PATH=" + empty.string(), "KILN_CC=/usr/bin/clang", "KILN_DEBUG=1",
                              "KILN_CACHE_DIR=" + temp_dir("ku_no_as")},
                             {"run", kMlp, "--input", "x=" + std::string(KILN_EXAMPLES_DIR) + "/mlp/input.npy",
                              "--output-dir", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
#if defined(__x86_64__)
  EXPECT_NE(r.err.find("binding.s not assembled"), std::string::npos) << r.err;
#endif
  EXPECT_TRUE(tensors_close(read_npy(out + "/y.npy"),
                            read_npy(std::string(KILN_EXAMPLES_DIR) + "/mlp/expected.npy"), 1e-4, 1e-5));
}

TEST(KernelUnits, KernelModulesMatchOneUnitModulesAndTheReference) {
  const std::string dir = temp_dir("ku_match");
  for (int64_t size : {5, 12, 17}) {  // odd sizes: tails past the vector width
    Graph g = conv_net("match_" + std::to_string(size), 6, size, 2);
    Tensor x = image(size, 3);
    auto expected = evaluate_reference(g, {x});
    auto with_kernels = compile(g, in_cache(dir, true))({x});
    auto one_unit = compile(g, in_cache(dir, false))({x});
    EXPECT_TRUE(tensors_close(with_kernels[0], expected[0], 1e-4, 1e-4)) << size;
    EXPECT_TRUE(tensors_close(with_kernels[0], one_unit[0], 0, 0)) << size;  // the same code
    // With the layout pass: 8 channels put the net in blocks (a stem read in NCHW, a blocked
    // convolution and max pool), whose kernels take their sizes from kp the same way.
    Graph b = conv_net("match_blocked_" + std::to_string(size), 8, size, 2);
    CompileOptions blocked = in_cache(dir, true), blocked_one = in_cache(dir, false);
    blocked.passes = blocked_one.passes = "";
    auto want = evaluate_reference(b, {x});
    auto split = compile(b, blocked)({x});
    EXPECT_TRUE(tensors_close(split[0], want[0], 1e-4, 1e-4)) << size;
    EXPECT_TRUE(tensors_close(split[0], compile(b, blocked_one)({x})[0], 0, 0)) << size;
    EXPECT_NE(optimized_graph(b, blocked).to_string().find("conv_nchwc"), std::string::npos);
  }
}

TEST(KernelUnits, ASecondModelWithTheSameKernelsCompilesOnlyItsBinding) {
  const std::string dir = temp_dir("ku_second");
  clear_compile_memo();
  Function a = compile(conv_net("first", 8, 16, 4), in_cache(dir));
  EXPECT_EQ(a.info().cache, CacheStatus::kMiss);
  EXPECT_GT(a.info().kernels.compiled, 0);
  EXPECT_EQ(a.info().kernels.reused, 0);
  // Other sizes, other weights, another graph: a module miss, every kernel a hit.
  Graph second = conv_net("second", 4, 9, 5);
  Function b = compile(second, in_cache(dir));
  EXPECT_EQ(b.info().cache, CacheStatus::kMiss);
  EXPECT_EQ(b.info().kernels.compiled, 0);
  EXPECT_EQ(b.info().kernels.reused, b.info().kernels.kernels);
  Tensor x = image(9, 6);
  EXPECT_TRUE(tensors_close(b({x})[0], evaluate_reference(second, {x})[0], 1e-4, 1e-4));

  auto store = CacheStore::open(dir);
  IndexTotals t = store->stats();
  EXPECT_EQ(t.kernels, a.info().kernels.kernels);
  EXPECT_EQ(t.kernel_compiles, a.info().kernels.compiled);
  EXPECT_EQ(t.kernel_hits, b.info().kernels.reused);
  EXPECT_EQ(t.compiles, 2);  // modules only
  // `kiln cache stats` says so.
  ProcessResult stats = kiln_env({"KILN_CACHE_DIR=" + dir}, {"cache", "stats"});
  EXPECT_NE(stats.out.find("kernels    " + std::to_string(t.kernels) + " objects"), std::string::npos)
      << stats.out;
}

TEST(KernelUnits, ADamagedKernelObjectIsQuarantinedAndRebuilt) {
  const std::string dir = temp_dir("ku_damaged");
  clear_compile_memo();
  compile(conv_net("damaged_a", 8, 10, 7), in_cache(dir));
  // Flip a byte of every kernel object in the cache.
  int damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(dir) / "objects")) {
    if (e.path().filename() != "kernel.o") continue;
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
    std::string bytes = read_file(e.path());
    bytes[bytes.size() / 2] ^= 0x5a;
    write_file_atomic(e.path(), bytes);
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  Graph other = conv_net("damaged_b", 5, 7, 8);
  ::testing::internal::CaptureStderr();
  Function f = compile(other, in_cache(dir));
  const std::string err = ::testing::internal::GetCapturedStderr();
  // Every damaged kernel was refused (never linked) and compiled again.
  EXPECT_EQ(f.info().kernels.reused, 0);
  EXPECT_EQ(f.info().kernels.compiled, f.info().kernels.kernels);
  EXPECT_NE(err.find("quarantine"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "quarantine"));
  Tensor x = image(7, 9);
  EXPECT_TRUE(tensors_close(f({x})[0], evaluate_reference(other, {x})[0], 1e-4, 1e-4));
  // And `kiln cache verify` finds nothing bad now.
  ProcessResult verify = kiln_env({"KILN_CACHE_DIR=" + dir}, {"cache", "verify"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

TEST(KernelUnits, EvictedKernelsLeaveLinkedModulesWorking) {
  const std::string dir = temp_dir("ku_gc");
  clear_compile_memo();
  Graph g = conv_net("evicted", 6, 11, 10);
  compile(g, in_cache(dir));
  // Remove every kernel entry: a module holds its kernels' code, linked in.
  auto store = CacheStore::open(dir);
  int removed = 0;
  for (const auto& row : store->with_family(kKernelFamily)) {
    fs::remove_all(store->entry_dir(row.key));
    ++removed;
  }
  ASSERT_GT(removed, 0);
  clear_compile_memo();
  Function f = compile(g, in_cache(dir));
  EXPECT_EQ(f.info().cache, CacheStatus::kHit);
  Tensor x = image(11, 11);
  EXPECT_TRUE(tensors_close(f({x})[0], evaluate_reference(g, {x})[0], 1e-4, 1e-4));
}

TEST(KernelUnits, ConcurrentCompilesOfModelsSharingKernelsAgree) {
  const std::string dir = temp_dir("ku_threads");
  clear_compile_memo();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      try {
        Graph g = conv_net("racer_" + std::to_string(i), 4 + i, 8 + i, 20 + i);
        Tensor x = image(8 + i, 30 + i);
        auto y = compile(g, in_cache(dir))({x});
        if (!tensors_close(y[0], evaluate_reference(g, {x})[0], 1e-4, 1e-4)) errors[i] = "wrong result";
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  // One entry per distinct kernel, however many compiled it at once.
  auto store = CacheStore::open(dir);
  std::set<std::string> labels;
  for (const auto& row : store->with_family(kKernelFamily)) {
    EXPECT_TRUE(labels.insert(row.label).second) << row.label;
  }
}

TEST(KernelUnits, ABadJobCountIsNamed) {
  setenv("KILN_JOBS", "zero", 1);
  EXPECT_NE(testing::error_of([] { compile_jobs(); }).find("KILN_JOBS: 'zero'"), std::string::npos);
  setenv("KILN_JOBS", "0", 1);
  EXPECT_NE(testing::error_of([] { compile_jobs(); }).find("KILN_JOBS"), std::string::npos);
  setenv("KILN_JOBS", "3", 1);
  EXPECT_EQ(compile_jobs(), 3);
  unsetenv("KILN_JOBS");
  EXPECT_GE(compile_jobs(), 1);
  // The CLI says it too, and KILN_KERNELS takes 0 or 1 only.
  ProcessResult r = kiln_env({"KILN_JOBS=-2", "KILN_CACHE_DIR=" + temp_dir("ku_jobs_cli")},
                             {"compile", kMlp});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("KILN_JOBS: '-2'"), std::string::npos) << r.err;
  r = kiln_env({"KILN_KERNELS=yes", "KILN_CACHE_DIR=" + temp_dir("ku_jobs_cli2")},
               {"compile", kMlp});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("KILN_KERNELS: 'yes'"), std::string::npos) << r.err;
}

TEST(KernelUnits, VerboseCompileReportsKernelsReusedAndCompiled) {
  const std::string dir = temp_dir("ku_verbose");
  ProcessResult first = kiln_env({"KILN_CACHE_DIR=" + dir}, {"compile", "-v", kMlp});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.err, m, std::regex(R"(kernels (\d+) \(0 reused, (\d+) compiled)")))
      << first.err;
  EXPECT_EQ(m[1], m[2]);
  EXPECT_NE(first.err.find("link "), std::string::npos);
  // The same model under other pass options is another module with the same kernels.
  ProcessResult second = kiln_env({"KILN_CACHE_DIR=" + dir},
                                  {"compile", "-v", "--passes", "-cse", kMlp});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("cache miss"), std::string::npos) << second.err;
  EXPECT_TRUE(std::regex_search(second.err, m, std::regex(R"(kernels (\d+) \((\d+) reused, 0 compiled)")))
      << second.err;
  EXPECT_EQ(m[1], m[2]);
}

}  // namespace
}  // namespace kiln
