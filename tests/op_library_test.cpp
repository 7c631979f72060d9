// Custom-op libraries (include/kiln/op_library.h): the example library's ops against
// references computed here, an older-minor library, and every way a library can be wrong
// — refused at load, failing at compile time or at run time — named by library, op and node.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

#include "compiler/compile.h"
#include "compiler/compile_error.h"
#include "ops/builders.h"
#include "ops/library/op_library.h"
#include "ops/registry.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

using testing::has;
#define EXPECT_HAS(text, part) \
  EXPECT_TRUE(has(text, part)) << "missing '" << (part) << "' in:\n" << (text)

// Rows of x (last axis d): x / sqrt(mean(x^2) + eps) * g, in double.
Tensor rms_norm_reference(const Tensor& x, const Tensor& g, double eps) {
  Tensor y = Tensor::zeros(DType::kFloat64, x.shape());
  const int64_t d = x.shape().back(), rows = d ? x.numel() / d : 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x.load(r * d + j) * x.load(r * d + j);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) y.store(r * d + j, x.load(r * d + j) * inv * g.load(j));
  }
  return y;
}

Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::kFloat32, t.shape());
  copy_into(t, out);
  return out;
}

void load_example() { load_op_library(KILN_OPLIB_EXAMPLE); }

TEST(OpLibrary, ExampleRmsNormIsStitchedIntoTheModuleAndMatchesAReference) {
  load_example();
  std::mt19937 rng(7);
  // 37 columns: tails past every vector width; rows with NaN, +-inf, -0.0 and all zeros.
  Graph g("rms");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 37});
  Var scale = input(g, "scale", DType::kFloat32, {37});
  g.set_outputs({apply("example.rms_norm", {x, scale}, {{"epsilon", 1e-3}})});
  EXPECT_HAS(generate_source(g), "example_rms_row_float(");  // its fragment, in kiln's source
  Function f = compile(g);
  Tensor xv = testing::random_tensor(DType::kFloat32, {6, 37}, rng);
  xv.store(1 * 37 + 5, std::numeric_limits<double>::quiet_NaN());
  xv.store(2 * 37 + 36, std::numeric_limits<double>::infinity());
  xv.store(3 * 37 + 0, -0.0);
  for (int j = 0; j < 37; ++j) xv.store(4 * 37 + j, 0.0);
  Tensor gv = testing::random_tensor(DType::kFloat32, {37}, rng);
  Tensor want = as_f32(rms_norm_reference(xv, gv, 1e-3));
  EXPECT_TRUE(testing::tensors_close(f({xv, gv})[0], want, 1e-5, 1e-6));
  // A strided view of x: the fragment walks x by its strides.
  EXPECT_TRUE(testing::tensors_close(f({testing::non_contiguous(xv), gv})[0], want, 1e-5, 1e-6));
  // float64 and a scale that does not fit, found when the graph is built.
  Graph g64("rms64");
  Var x64 = input(g64, "x", DType::kFloat64, {3, 4});
  Var s64 = input(g64, "s", DType::kFloat64, {4});
  g64.set_outputs({apply("example.rms_norm", {x64, s64})});
  Tensor xd = testing::random_tensor(DType::kFloat64, {3, 4}, rng);
  Tensor sd = testing::random_tensor(DType::kFloat64, {4}, rng);
  EXPECT_TRUE(testing::tensors_close(compile(g64)({xd, sd})[0], rms_norm_reference(xd, sd, 1e-6),
                                     1e-12, 1e-12));
  Graph bad("bad");
  Var bx = input(bad, "x", DType::kFloat32, {2, 5});
  Var bs = input(bad, "s", DType::kFloat32, {4});
  EXPECT_HAS(testing::error_of([&] {
               apply("example.rms_norm", {bx, bs});
             }),
             "op library 'example' op 'example.rms_norm': infer_types: scale has 4 elements, "
             "x's last axis 5");
  EXPECT_HAS(testing::error_of([&] {
               apply("example.rms_norm", {bx, bs}, {{"eps", 1.0}});
             }),
             "check_attrs: unknown attribute 'eps'");
}

TEST(OpLibrary, ExampleMatmulRunsTheLibrarysOwnCodeOnStridedInputs) {
  load_example();
  std::mt19937 rng(3);
  Graph g("libgemm");
  Var a = input(g, "a", DType::kFloat32, {kDynamic, 70});
  Var bt = input(g, "bt", DType::kFloat32, {33, 70});
  // B arrives transposed: the library reads it by its strides.
  g.set_outputs({apply("example.matmul",
                       {a, apply("transpose", {bt}, {{"perm", std::vector<int64_t>{1, 0}}})},
                       {{"alpha", -0.5}})});
  EXPECT_HAS(generate_source(g), "KILN_SUPPORT->op_bind(ctx, ");
  Function f = compile(g);
  for (int64_t m : {1, 5, 67}) {
    Tensor av = testing::random_tensor(DType::kFloat32, {m, 70}, rng);
    Tensor bv = testing::random_tensor(DType::kFloat32, {33, 70}, rng);
    av.store(0, std::numeric_limits<double>::quiet_NaN());  // row 0 of C is all NaN
    Tensor want = Tensor::zeros(DType::kFloat32, {m, 33});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < 33; ++j) {
        double s = 0;
        for (int64_t p = 0; p < 70; ++p) s += av.load(i * 70 + p) * bv.load(j * 70 + p);
        want.store(i * 33 + j, -0.5 * s);
      }
    }
    EXPECT_TRUE(testing::tensors_close(f({av, bv})[0], want, 1e-4, 1e-4)) << "m=" << m;
  }
}

TEST(OpLibrary, StatefulOpSetsUpOncePerModuleAndReportsRunErrorsByNode) {
  load_example();
  Graph g("rope");
  Var x = input(g, "x", DType::kFloat32, {2, kDynamic, 6});
  g.set_outputs({apply("example.rotary", {x}, {{"max_positions", int64_t{5}}, {"base", 100.0}})});
  Function f = compile(g);
  std::mt19937 rng(11);
  for (int64_t seq : {1, 5}) {
    Tensor xv = testing::random_tensor(DType::kFloat32, {2, seq, 6}, rng);
    Tensor want = Tensor::zeros(DType::kFloat32, {2, seq, 6});
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t s = 0; s < seq; ++s) {
        for (int64_t i = 0; i < 3; ++i) {
          const double angle = static_cast<double>(s) * std::pow(100.0, -2.0 * i / 6.0);
          const int64_t o = (b * seq + s) * 6 + 2 * i;
          const double u = xv.load(o), v = xv.load(o + 1);
          want.store(o, u * std::cos(angle) - v * std::sin(angle));
          want.store(o + 1, u * std::sin(angle) + v * std::cos(angle));
        }
      }
    }
    EXPECT_TRUE(testing::tensors_close(f({xv})[0], want, 1e-5, 1e-5)) << "seq=" << seq;
  }
  Tensor too_long = Tensor::zeros(DType::kFloat32, {2, 9, 6});
  const std::string msg = testing::error_of([&] { f({too_long}); });
  EXPECT_HAS(msg, "node 0 (example.rotary)");
  EXPECT_HAS(msg,
             "op library 'example' op 'example.rotary': forward: sequence length 9 exceeds "
             "max_positions 5");
  // The module stays usable after the failed run.
  EXPECT_TRUE(testing::tensors_close(f({Tensor::zeros(DType::kFloat32, {2, 3, 6})})[0],
                                     Tensor::zeros(DType::kFloat32, {2, 3, 6})));
  // The reference path (constant folding, perform) sets the state up for its one call.
  Graph folded("rope_const");
  Tensor c = Tensor::from_doubles(DType::kFloat32, {1, 2, 2}, {1, 0, 0, 1});
  folded.set_outputs(
      {apply("example.rotary", {constant(folded, c)}, {{"max_positions", int64_t{2}}})});
  Tensor want =
      Tensor::from_doubles(DType::kFloat32, {1, 2, 2}, {1, 0, -std::sin(1.0), std::cos(1.0)});
  EXPECT_TRUE(testing::tensors_close(compile(folded)({})[0], want, 1e-6, 1e-6));
}

// One module, its bound compute ops and their state, called from several threads at once
// (the TSan preset runs this too).
TEST(OpLibrary, ComputeOpsRunFromSeveralThreadsAtOnce) {
  load_example();
  Graph g("rope_threads");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 3, 6});
  Var w = input(g, "w", DType::kFloat32, {6, 6});
  Var flat = apply("reshape", {x}, {{"shape", std::vector<int64_t>{-1, 6}}});
  Var mixed = apply("reshape", {apply("example.matmul", {flat, w})},
                    {{"shape", std::vector<int64_t>{-1, 3, 6}}});
  g.set_outputs({apply("example.rotary", {mixed}, {{"max_positions", int64_t{3}}})});
  Function f = compile(g);
  std::mt19937 rng(5);
  std::vector<Tensor> xs, wants;
  const Tensor wv = testing::random_tensor(DType::kFloat32, {6, 6}, rng);
  for (int t = 0; t < 4; ++t) {
    xs.push_back(testing::random_tensor(DType::kFloat32, {t + 1, 3, 6}, rng));
    wants.push_back(f({xs.back(), wv})[0]);
  }
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if (!testing::tensors_close(f({xs[t], wv})[0], wants[t], 0, 0)) ++bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(OpLibrary, LibraryBuiltAgainstTheOlderMinorLoadsAndRuns) {
  auto lib = load_op_library(KILN_OPLIB_OLD_MINOR);
  EXPECT_EQ(lib->abi(), "1.0");
  auto def = find_library_op("old_minor.add_one");
  ASSERT_TRUE(def);
  EXPECT_EQ(def->def.cuda_kernel, nullptr);  // past its struct: zero, not garbage
  EXPECT_EQ(def->forms(), std::vector<std::string>{"compute"});
  Graph g("old");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({apply("old_minor.add_one", {apply("old_minor.twice", {x})})});
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {4}, {1, -2.5, 0, 3});
  EXPECT_TRUE(testing::tensors_close(compile(g)({xv})[0],
                                     Tensor::from_doubles(DType::kFloat32, {4}, {3, -4, 1, 7})));
}

TEST(OpLibrary, HealthyLibraryUsesTheNewerHostServices) {
  load_op_library(KILN_OPLIB_HEALTHY);
  Graph g("healthy");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({apply("healthy.add_one", {apply("healthy.twice", {x})})});
  Function f = compile(g);
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {5}, {1, 2, 3, 4, 5});
  EXPECT_TRUE(testing::tensors_close(f({testing::non_contiguous(xv)})[0],
                                     Tensor::from_doubles(DType::kFloat32, {5}, {3, 5, 7, 9, 11})));
  // Loading the same file again is a no-op returning the same record.
  EXPECT_EQ(load_op_library(KILN_OPLIB_HEALTHY), load_op_library(KILN_OPLIB_HEALTHY));
}

TEST(OpLibrary, CudaFragmentsArePlacedOnTheDeviceAndRunOnTheEmulator) {
  ::setenv("KILN_CUDA_DEVICE", "emulator", 1);  // before any device is chosen
  load_op_library(KILN_OPLIB_HEALTHY);
  auto def = find_library_op("healthy.twice");
  ASSERT_TRUE(def);
  EXPECT_EQ(def->forms(), (std::vector<std::string>{"c", "cuda", "grad"}));
  Graph g("on_device");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  // twice has CUDA code, add_one (a compute function) does not: a mixed graph.
  g.set_outputs({apply("healthy.add_one", {apply("healthy.twice", {relu(x)})})});
  CompileOptions o;
  o.device = "cuda";
  const std::string placed = optimized_graph(g, o).to_string();
  EXPECT_HAS(placed, "cuda:healthy.twice");
  EXPECT_HAS(placed, "to_host");
  Function f = compile(g, o);
  EXPECT_HAS(f.info().device, "emulator");
  // 300 elements: past one block of 128 threads.
  std::vector<double> xs(300), want(300);
  for (int i = 0; i < 300; ++i) {
    xs[i] = (i % 7) - 3.0;
    want[i] = 2 * std::max(xs[i], 0.0) + 1;
  }
  EXPECT_TRUE(testing::tensors_close(f({Tensor::from_doubles(DType::kFloat32, {300}, xs)})[0],
                                     Tensor::from_doubles(DType::kFloat32, {300}, want)));
}

TEST(OpLibrary, VersionMismatchesNameBothVersions) {
  const std::string host =
      std::to_string(KILN_OP_ABI_MAJOR) + "." + std::to_string(KILN_OP_ABI_MINOR);
  std::string msg = testing::error_of([] { load_op_library(KILN_OPLIB_MAJOR2); });
  EXPECT_HAS(msg, "built for op-library ABI 2.0; this kiln has ABI " + host);
  msg = testing::error_of([] { load_op_library(KILN_OPLIB_MINOR_NEWER); });
  EXPECT_HAS(msg, "built for op-library ABI 1." + std::to_string(KILN_OP_ABI_MINOR + 1) +
                      "; this kiln has ABI " + host);
  EXPECT_FALSE(OpRegistry::instance().contains("major2.twice"));
  EXPECT_FALSE(OpRegistry::instance().contains("minor_newer.twice"));
}

TEST(OpLibrary, FilesThatAreNotLibrariesAreRefusedClearly) {
  const std::string dir = testing::temp_dir("oplib_files");
  EXPECT_HAS(testing::error_of([&] { load_op_library(dir + "/missing.so"); }),
             "op library '" + dir + "/missing.so': no such file");
  write_file_atomic(dir + "/text.so", "not an ELF file\n", 0644, false);
  EXPECT_HAS(testing::error_of([&] { load_op_library(dir + "/text.so"); }),
             "text.so': cannot be loaded as a shared library");
  EXPECT_HAS(testing::error_of([&] { load_op_library(dir); }), "is a directory");
  EXPECT_HAS(testing::error_of([] { load_op_library(KILN_OPLIB_NO_ENTRY); }),
             "exports no kiln_op_library() entry point");
}

TEST(OpLibrary, LoadChecksEveryOpAndRegistersAllOrNothing) {
  std::string msg = testing::error_of([] { load_op_library(KILN_OPLIB_MISSING_SHAPES); });
  EXPECT_HAS(msg, "op library 'missing_shapes'");
  EXPECT_HAS(msg, "op 'missing_shapes.twice' does not define infer_shapes (required)");
  EXPECT_FALSE(OpRegistry::instance().contains("missing_shapes.twice"));
  EXPECT_FALSE(OpRegistry::instance().contains("missing_shapes.add_one"));
  EXPECT_HAS(testing::error_of([] { load_op_library(KILN_OPLIB_INIT_ERROR); }),
             "op library 'init_error' (" KILN_OPLIB_INIT_ERROR "): init: license check failed");
  EXPECT_HAS(testing::error_of([] { load_op_library(KILN_OPLIB_DUP_BUILTIN); }),
             "op 'relu' is a kiln built-in op");
  load_example();
  msg = testing::error_of([] { load_op_library(KILN_OPLIB_DUP_EXAMPLE); });
  EXPECT_HAS(msg, "op library 'dup_example' (" KILN_OPLIB_DUP_EXAMPLE ")");
  EXPECT_HAS(
      msg,
      "op 'example.rms_norm' is already registered by op library 'example' (" KILN_OPLIB_EXAMPLE
      ")");
  EXPECT_FALSE(OpRegistry::instance().contains("dup_example.add_one"));
}

TEST(OpLibrary, CompileTimeFaultsNameTheLibraryOpAndNode) {
  for (const char* path : {KILN_OPLIB_NULL_CODE, KILN_OPLIB_BAD_STATUS, KILN_OPLIB_GARBAGE_TYPES,
                           KILN_OPLIB_BAD_C, KILN_OPLIB_THROWING}) {
    load_op_library(path);
  }
  auto graph_of = [](const std::string& op, std::vector<int64_t> dims) {
    Graph g("faulty");
    Var x = input(g, "x", DType::kFloat32, dims);
    g.set_outputs({apply(op, {relu(x)})});
    return g;
  };
  std::string msg = testing::error_of([&] { compile(graph_of("null_code.twice", {3})); });
  EXPECT_HAS(msg, "node 1 (null_code.twice)");
  EXPECT_HAS(msg,
             "op library 'null_code' op 'null_code.twice': c_code: returned NULL without an error");
  msg = testing::error_of([&] { graph_of("bad_status.twice", {3}); });
  EXPECT_HAS(msg, "node 1 (bad_status.twice)");
  EXPECT_HAS(msg, "infer_types: returned status 7 without a message");
  msg = testing::error_of([&] { graph_of("garbage_types.twice", {3}); });
  EXPECT_HAS(msg,
             "op library 'garbage_types' op 'garbage_types.twice': infer_types: output 0 has "
             "dtype 42, which is not a kiln dtype");
  msg = testing::error_of([&] { graph_of("throwing.op", {2, 2}); });
  EXPECT_HAS(msg, "node 1 (throwing.op)");
  EXPECT_HAS(msg, "infer_types: threw a C++ exception across the C ABI: boom in infer_types");
  // Text that is not C: clang's diagnostics mapped to the node and the fragment's line.
  try {
    compile(graph_of("bad_c.twice", {3}));
    ADD_FAILURE() << "compiled a fragment that is not C";
  } catch (const CompileError& e) {
    EXPECT_HAS(std::string(e.what()), "node 1 (bad_c.twice), c_code line 2");
  }
}

TEST(OpLibrary, RunTimeFaultsNameTheLibraryOpAndNode) {
  for (const char* path : {KILN_OPLIB_RUN_ERROR, KILN_OPLIB_THROWING, KILN_OPLIB_STATE_ERROR}) {
    load_op_library(path);
  }
  auto function_of = [](const std::string& op) {
    Graph g("faulty_run");
    Var x = input(g, "x", DType::kFloat32, {kDynamic});
    g.set_outputs({apply(op, {x}), neg(x)});
    return compile(g);
  };
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3});
  Function f = function_of("run_error.add_one");
  std::string msg = testing::error_of([&] { f({xv}); });
  EXPECT_HAS(msg, "node 0 (run_error.add_one)");
  EXPECT_HAS(msg, "op library 'run_error' op 'run_error.add_one': forward: refusing 3 elements");
  msg = testing::error_of([&] { function_of("throwing.op")({xv}); });
  EXPECT_HAS(msg,
             "op library 'throwing' op 'throwing.op': forward: threw a C++ exception across "
             "the C ABI: boom in forward");
  msg = testing::error_of([&] { function_of("state_error.add_one")({xv}); });
  EXPECT_HAS(msg,
             "op library 'state_error' op 'state_error.add_one': create_state: cannot set up: "
             "no device here");
  // kiln stays usable.
  Graph ok("after_faults");
  Var y = input(ok, "y", DType::kFloat32, {3});
  ok.set_outputs({y * y});
  EXPECT_TRUE(testing::tensors_close(compile(ok)({xv})[0],
                                     Tensor::from_doubles(DType::kFloat32, {3}, {1, 4, 9})));
}

TEST(OpLibrary, BindSpecsRoundTripAndRefuseMalformedText) {
  BindSpec s{"lib.op",
             "lib",
             std::string(64, 'a'),
             {{"f", 0.1},
              {"i", int64_t{-3}},
              {"s", std::string("a b:c \"q\"\n")},
              {"I", std::vector<int64_t>{1, -2}},
              {"F", std::vector<double>{NAN, -INFINITY}}},
             {TensorType{DType::kFloat32, {kDynamic, 4}}},
             {TensorType{DType::kInt64, {}}}};
  BindSpec r = decode_bind_spec(encode_bind_spec(s));
  EXPECT_EQ(r.op, s.op);
  EXPECT_EQ(r.sha256, s.sha256);
  EXPECT_EQ(attrs_to_string(r.attrs), attrs_to_string(s.attrs));
  EXPECT_EQ(r.inputs[0].to_string(), s.inputs[0].to_string());
  EXPECT_EQ(r.outputs[0].to_string(), s.outputs[0].to_string());
  const std::string text = encode_bind_spec(s);
  for (size_t cut : {size_t{3}, size_t{20}, text.size() - 1}) {
    EXPECT_HAS(testing::error_of([&] { decode_bind_spec(text.substr(0, cut)); }), "malformed");
  }
}

// ---- through the CLI, each in its own process: keys, listing, the environment, ONNX ----

std::string model_with(const std::string& dir, const std::string& name, const std::string& op) {
  const std::string path = dir + "/" + name + ".json";
  write_file_atomic(path,
                    R"({"name": ")" + name +
                        R"(", "inputs": [{"name": "x", "dtype": "float32", "shape": [null]}],
  "nodes": [{"op": "relu", "inputs": ["x"], "outputs": ["r"]},
            {"op": ")" + op +
                        R"(", "inputs": ["r"], "outputs": ["y"]}],
  "outputs": ["y"]})",
                    0644, false);
  return path;
}

std::string key_of(const ProcessResult& r) {
  auto at = r.out.find("key     ");
  return at == std::string::npos ? "" : r.out.substr(at + 8, 64);
}

TEST(OpLibraryCli, RebuiltLibraryChangesTheKeysOfExactlyTheModulesUsingIt) {
  const std::string dir = testing::temp_dir("oplib_keys");
  const std::string cache = "KILN_CACHE_DIR=" + dir + "/cache";
  const std::string uses = model_with(dir, "uses", "keyed.twice");
  const std::string plain = model_with(dir, "plain", "neg");
  auto compile_with = [&](const char* lib, const std::string& model, bool explain = false) {
    std::vector<std::string> args{"--op-library", lib, "compile", model};
    if (explain) args.push_back("--explain");
    return testing::kiln_env({cache}, args);
  };
  ProcessResult v1 = compile_with(KILN_OPLIB_KEYED_V1, uses);
  ASSERT_EQ(v1.exit_code, 0) << v1.err;
  ProcessResult v2 = compile_with(KILN_OPLIB_KEYED_V2, uses, true);
  ASSERT_EQ(v2.exit_code, 0) << v2.err;
  EXPECT_NE(key_of(v1), key_of(v2));
  EXPECT_HAS(v2.err, "op_library keyed: the library file changed");
  // The same file again: the same key, a hit.
  EXPECT_EQ(key_of(compile_with(KILN_OPLIB_KEYED_V1, uses)), key_of(v1));
  // A model without the library's ops keeps its key whatever library is loaded.
  const std::string k1 = key_of(compile_with(KILN_OPLIB_KEYED_V1, plain));
  EXPECT_EQ(k1.size(), 64u);
  EXPECT_EQ(key_of(compile_with(KILN_OPLIB_KEYED_V2, plain)), k1);
  EXPECT_EQ(key_of(testing::kiln_env({cache}, {"compile", plain})), k1);
  // Without the library the model's op is unknown.
  ProcessResult none = testing::kiln_env({cache}, {"compile", uses});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_HAS(none.err, "unknown op 'keyed.twice'");
}

TEST(OpLibraryCli, OpsListsLibrariesAndEnvironmentLoadsThem) {
  ProcessResult r = testing::kiln_env({}, {"--op-library", KILN_OPLIB_EXAMPLE, "ops"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "op library example 1.0");
  EXPECT_HAS(r.out, "example.rms_norm");
  EXPECT_HAS(r.out, "com.example:RmsNorm");
  EXPECT_HAS(r.out, "compute, state");
  EXPECT_HAS(r.out, "built-in ops");
  r = testing::kiln_env(
      {std::string("KILN_OP_LIBRARIES=") + KILN_OPLIB_HEALTHY + ":" + KILN_OPLIB_EXAMPLE}, {"ops"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "op library healthy");
  EXPECT_HAS(r.out, "op library example");
  r = testing::kiln_env(
      {std::string("KILN_OP_LIBRARIES=") + KILN_OPLIB_EXAMPLE + ":/nonexistent/lib.so"}, {"ops"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "KILN_OP_LIBRARIES: op library '/nonexistent/lib.so': no such file");
  r = testing::kiln_env({}, {"--op-library", KILN_OPLIB_MAJOR2, "ops"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "built for op-library ABI 2.0");
}

// A library's own CMake project against an installed kiln: find_package(kiln), link
// kiln::op_library, load the result.
TEST(OpLibraryCli, ALibraryBuildsAgainstTheInstalledHeaderTarget) {
  const std::string dir = testing::temp_dir("oplib_install");
  ProcessResult r =
      run_process({"cmake", "--install", KILN_BUILD_DIR, "--prefix", dir + "/prefix"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(std::filesystem::exists(dir + "/prefix/include/kiln/op_library.h"));
  r = run_process({"cmake", "-S", KILN_OPLIB_CONSUMER_DIR, "-B", dir + "/build",
                   "-DCMAKE_PREFIX_PATH=" + dir + "/prefix", "-DCMAKE_BUILD_TYPE=Release"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_process({"cmake", "--build", dir + "/build"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = testing::kiln_env({}, {"--op-library", dir + "/build/libconsumer_ops.so", "ops"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "op library consumer 1");
  EXPECT_HAS(r.out, "consumer.twice");
}

TEST(OpLibraryCli, OnnxModelWithACustomDomainNodeRunsWithKilnRun) {
  const std::string ex = std::string(KILN_EXAMPLES_DIR) + "/op_library";
  const std::string dir = testing::temp_dir("oplib_onnx");
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + dir + "/cache"};
  const std::vector<std::string> args{"-v",
                                      "--op-library",
                                      KILN_OPLIB_EXAMPLE,
                                      "run",
                                      ex + "/rms_mlp.onnx",
                                      "--input",
                                      "x=" + ex + "/input.npy",
                                      "-o",
                                      dir + "/out"};
  for (const char* status : {"cache miss", "cache hit"}) {  // the second process loads the entry
    ProcessResult r = testing::kiln_env(env, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_HAS(r.err, status);
    EXPECT_TRUE(testing::tensors_close(read_npy(dir + "/out/y.npy"), read_npy(ex + "/expected.npy"),
                                       1e-4, 1e-5));
  }
  ProcessResult r = testing::kiln_env(
      env, {"run", ex + "/rms_mlp.onnx", "--input", "x=" + ex + "/input.npy", "-o", dir + "/out"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "com.example.RmsNorm");
  EXPECT_HAS(r.err, "is not supported");
}

}  // namespace
}  // namespace kiln
