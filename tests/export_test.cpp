// kiln export: the exported libraries run the examples as kiln does (through the C and C++
// consumers of examples/export, built from the exported files alone), and every misuse of
// one is an error string, not a crash.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "compiler/compile.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "runtime/module/bundle_abi.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
const std::string kExamples = KILN_EXAMPLES_DIR;

ProcessResult kiln(std::vector<std::string> args) {
  args.insert(args.begin(), KILN_BINARY);
  return run_process(args);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_IF_SANITIZED()                                                                  \
  GTEST_SKIP() << "kiln export refuses sanitizer builds (their archives need the sanitizer " \
                  "runtime)"
#else
#define SKIP_IF_SANITIZED() (void)0
#endif

struct Case {
  std::string name, model, input;
  bool embed;
  std::string precision = "f32";
};

// The model run by kiln itself on `input`: what the exported library must reproduce.
Tensor kiln_output(const std::string& model, const Tensor& input,
                   const std::string& precision = "f32") {
  CompileOptions options;
  options.precision = precision;
  Function f = compile(load_model(model), options);
  return f({input})[0];
}

class ExportMatchesKiln : public ::testing::TestWithParam<Case> {};

TEST_P(ExportMatchesKiln, CAndCppConsumers) {
  SKIP_IF_SANITIZED();
  const Case& c = GetParam();
  const fs::path dir = testing::temp_dir("export_" + c.name + (c.embed ? "_embed" : "_file"));
  const fs::path out = dir / "lib";
  auto r = kiln({"export", c.model, "-o", out.string(), "--name", c.name, "--weights",
                 c.embed ? "embed" : "file", "--precision", c.precision});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / ("lib" + c.name + ".so")));
  EXPECT_TRUE(fs::exists(out / (c.name + ".h")));
  EXPECT_EQ(fs::exists(out / (c.name + ".safetensors")), !c.embed);
  std::string readme = read_file(out / "README.txt");
  EXPECT_NE(readme.find("Inputs:\n  x: float32 (?, "), std::string::npos) << readme;

  // Inputs at two batch sizes (the batch is dynamic), and kiln's own outputs for them.
  std::mt19937 rng(7);
  Tensor given = read_npy(c.input);
  std::vector<std::pair<fs::path, fs::path>> runs;
  for (int64_t batch : {given.shape()[0], int64_t{3}}) {
    Shape shape = given.shape();
    shape[0] = batch;
    Tensor x = testing::random_tensor(DType::kFloat32, shape, rng);
    const std::string tag = std::to_string(batch);
    write_npy(dir / ("x" + tag + ".npy"), x);
    const Tensor want = kiln_output(c.model, x, c.precision);
    write_npy(dir / ("want" + tag + ".npy"), want);
    runs.emplace_back(dir / ("x" + tag + ".npy"), dir / ("want" + tag + ".npy"));
    if (c.precision == "bf16") {  // the library must hold the bfloat16 products, not float32's
      EXPECT_FALSE(testing::tensors_close(want, kiln_output(c.model, x), 1e-5, 1e-6));
    }
  }
  const std::string examples = kExamples + "/export";
  const std::vector<std::string> flags{"-DMODEL=" + c.name,
                                       "-DMODEL_H=\"" + c.name + ".h\"",
                                       "-I" + out.string(),
                                       "-I" + examples,
                                       "-L" + out.string(),
                                       "-l" + c.name,
                                       "-Wl,-rpath," + out.string(),
                                       "-Wall",
                                       "-Wextra",
                                       "-Werror"};
  for (const std::string lang : {"c", "cpp"}) {
    std::vector<std::string> cmd{
        lang == "c" ? "cc" : "c++", lang == "c" ? "-std=c11" : "-std=c++17",
        examples + "/consumer." + lang, "-o", (dir / ("consumer_" + lang)).string()};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    if (lang == "c") cmd.push_back("-lm");
    ProcessResult b = run_process(cmd);
    ASSERT_EQ(b.exit_code, 0) << b.err;
    for (const auto& [x, want] : runs) {
      ProcessResult p =
          run_process({(dir / ("consumer_" + lang)).string(), x.string(), "--", want.string()});
      EXPECT_EQ(p.exit_code, 0) << lang << ": " << p.out << p.err;
      EXPECT_NE(p.out.find("\nOK\n"), std::string::npos) << lang << ": " << p.out;
    }
  }
  // A planted difference is caught: the consumer is a real check.
  Tensor wrong = read_npy(runs[0].second);
  wrong.store(wrong.numel() - 1, wrong.load(wrong.numel() - 1) + 0.01);
  write_npy(dir / "wrong.npy", wrong);
  ProcessResult p = run_process(
      {(dir / "consumer_c").string(), runs[0].first.string(), "--", (dir / "wrong.npy").string()});
  EXPECT_EQ(p.exit_code, 1) << p.out;
  EXPECT_NE(p.out.find("MISMATCH"), std::string::npos) << p.out;
}

INSTANTIATE_TEST_SUITE_P(
    Examples, ExportMatchesKiln,
    ::testing::Values(
        Case{"mlp", kExamples + "/mlp/mlp.json", kExamples + "/mlp/input.npy", true},
        Case{"mlp", kExamples + "/mlp/mlp.json", kExamples + "/mlp/input.npy", false},
        Case{"resblock", kExamples + "/onnx/resblock/model.onnx",
             kExamples + "/onnx/resblock/x.npy", true},
        Case{"lenet", kExamples + "/onnx/lenet/model.onnx", kExamples + "/onnx/lenet/x.npy", false},
        Case{"mlp_bf16", kExamples + "/mlp/mlp.json", kExamples + "/mlp/input.npy", false, "bf16"}),
    [](const auto& info) { return info.param.name + (info.param.embed ? "_embed" : "_file"); });

// The exported library's C API, loaded into this process.
struct Lib {
  void* handle = nullptr;
  void* (*create)(const char*) = nullptr;
  int (*run)(void*, const kiln_bundle_tensor*, size_t, kiln_bundle_tensor*, size_t) = nullptr;
  void (*free_output)(kiln_bundle_tensor*) = nullptr;
  void (*destroy)(void*) = nullptr;
  const char* (*error)() = nullptr;
  const char* (*input_name)(size_t) = nullptr;
  int32_t (*input_shape)(size_t, int64_t*) = nullptr;

  Lib(const fs::path& so, const std::string& n) {
    handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw std::runtime_error(::dlerror());
    auto sym = [&](const std::string& s) {
      void* p = ::dlsym(handle, (n + "_" + s).c_str());
      if (!p) throw std::runtime_error("no symbol " + n + "_" + s);
      return p;
    };
    create = reinterpret_cast<decltype(create)>(sym("create"));
    run = reinterpret_cast<decltype(run)>(sym("run"));
    free_output = reinterpret_cast<decltype(free_output)>(sym("free_output"));
    destroy = reinterpret_cast<decltype(destroy)>(sym("destroy"));
    error = reinterpret_cast<decltype(error)>(sym("last_error"));
    input_name = reinterpret_cast<decltype(input_name)>(sym("input_name"));
    input_shape = reinterpret_cast<decltype(input_shape)>(sym("input_shape"));
  }
};

kiln_bundle_tensor view_of(const Tensor& t) {
  kiln_bundle_tensor v{};
  v.data = t.data();
  v.ndim = t.ndim();
  v.dtype = static_cast<int32_t>(t.dtype());
  for (int i = 0; i < t.ndim(); ++i) v.shape[i] = t.shape()[i];
  return v;
}

TEST(Export, MisuseIsAnErrorStringNeverACrash) {
  SKIP_IF_SANITIZED();
  const fs::path dir = testing::temp_dir("export_misuse");
  ASSERT_EQ(kiln({"export", kExamples + "/mlp/mlp.json", "-o", (dir / "mlp").string(), "--weights",
                  "file"})
                .exit_code,
            0);
  ASSERT_EQ(kiln({"export", kExamples + "/onnx/resblock/model.onnx", "-o", (dir / "rb").string(),
                  "--name", "rb", "--weights", "file"})
                .exit_code,
            0);
  Lib lib(dir / "mlp" / "libmlp.so", "mlp");
  EXPECT_STREQ(lib.input_name(0), "x");
  EXPECT_EQ(lib.input_name(1), nullptr);
  int64_t dims[16];
  ASSERT_EQ(lib.input_shape(0, dims), 2);
  EXPECT_EQ(dims[0], -1);
  EXPECT_EQ(dims[1], 784);

  void* m = lib.create(nullptr);
  ASSERT_NE(m, nullptr) << lib.error();
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 784});
  kiln_bundle_tensor in = view_of(x), out{};
  ASSERT_EQ(lib.run(m, &in, 1, &out, 1), 0) << lib.error();
  EXPECT_EQ(out.ndim, 2);
  EXPECT_EQ(out.shape[0], 2);
  EXPECT_EQ(out.shape[1], 10);
  lib.free_output(&out);
  EXPECT_EQ(out.data, nullptr);

  auto run_error = [&](std::vector<kiln_bundle_tensor> ins, size_t n_out = 1) {
    kiln_bundle_tensor o[2]{};
    EXPECT_NE(lib.run(m, ins.data(), ins.size(), o, n_out), 0);
    return std::string(lib.error());
  };
  auto expect_has = [](const std::string& m, const std::string& what) {
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  expect_has(run_error({}), "expected 1 inputs, got 0");
  expect_has(run_error({in, in}), "expected 1 inputs, got 2");
  expect_has(run_error({in}, 2), "expected room for 1 outputs, got 2");
  Tensor wide = Tensor::zeros(DType::kFloat32, {2, 100});
  expect_has(run_error({view_of(wide)}),
             "input 'x': dimension 1 is 100: expected float32 (?, 784)");
  Tensor f64 = Tensor::zeros(DType::kFloat64, {2, 784});
  expect_has(run_error({view_of(f64)}), "input 'x': wrong dtype");
  kiln_bundle_tensor bad = in;
  bad.ndim = 40;
  expect_has(run_error({bad}), "rank 40 is out of range");
  bad = in;
  bad.dtype = 99;
  expect_has(run_error({bad}), "unknown dtype code 99");
  bad = in;
  bad.data = nullptr;
  expect_has(run_error({bad}), "data is NULL");
  bad = in;
  bad.shape[0] = -4;
  expect_has(run_error({bad}), "negative dimension -4");
  EXPECT_NE(lib.run(nullptr, &in, 1, &out, 1), 0);
  expect_has(lib.error(), "no model");
  lib.destroy(m);

  // Weights: missing, truncated, another model's, not kiln's, forged shapes.
  auto create_error = [&](const fs::path& weights) {
    void* made = lib.create(weights.c_str());
    EXPECT_EQ(made, nullptr) << weights;
    if (made) lib.destroy(made);
    return std::string(lib.error());
  };
  const fs::path weights = dir / "mlp" / "mlp.safetensors";
  expect_has(create_error(dir / "absent.safetensors"), "absent.safetensors' does not exist");
  std::string bytes = read_file(weights);
  write_file_atomic(dir / "cut.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_has(create_error(dir / "cut.safetensors"), "truncated?");
  expect_has(create_error(dir / "rb" / "rb.safetensors"), "holds the weights of model 'rb'");
  write_safetensors(dir / "plain.safetensors", {{"w", x}});
  expect_has(create_error(dir / "plain.safetensors"), "not the weights of a model kiln exported");
  Safetensors st = read_safetensors(weights);
  std::vector<std::pair<std::string, Tensor>> forged;
  for (auto& [n, t] : st.tensors) forged.emplace_back(n, t.reshape({t.numel()}));
  write_safetensors(dir / "forged.safetensors", forged, st.metadata);
  std::string m2 = create_error(dir / "forged.safetensors");
  expect_has(m2, "the model needs float32 (");
  // The default file beside the library, gone.
  fs::create_directories(dir / "moved");
  fs::copy_file(dir / "mlp" / "libmlp.so", dir / "moved" / "libmlp2.so");
  {
    Lib moved(dir / "moved" / "libmlp2.so", "mlp");
    void* made = moved.create(nullptr);
    EXPECT_EQ(made, nullptr);
    expect_has(moved.error(), "moved/mlp.safetensors' does not exist");
  }
}

TEST(Export, TiedDynamicDimensionsAndBadNames) {
  SKIP_IF_SANITIZED();
  const fs::path dir = testing::temp_dir("export_ties");
  // x + y with a dynamic batch each: the add needs them equal, so the library checks that.
  write_file_atomic(dir / "add.json", R"({"name": "add2",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 4]},
               {"name": "y", "dtype": "float32", "shape": [null, 4]}],
    "nodes": [{"op": "add", "inputs": ["x", "y"], "outputs": ["z"]}], "outputs": ["z"]})");
  auto r = kiln({"export", (dir / "add.json").string(), "-o", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Lib lib(dir / "out" / "libadd2.so", "add2");
  void* m = lib.create(nullptr);
  ASSERT_NE(m, nullptr) << lib.error();
  Tensor a = Tensor::from_doubles(DType::kFloat32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor b = Tensor::from_doubles(DType::kFloat32, {3, 4}, std::vector<double>(12, 0.5));
  kiln_bundle_tensor ins[2] = {view_of(a), view_of(a)}, out{};
  ASSERT_EQ(lib.run(m, ins, 2, &out, 1), 0) << lib.error();
  EXPECT_EQ(static_cast<float*>(out.data)[7], 16.0f);
  lib.free_output(&out);
  ins[1] = view_of(b);
  EXPECT_NE(lib.run(m, ins, 2, &out, 1), 0);
  EXPECT_NE(
      std::string(lib.error()).find("input 'y' dimension 0 is 3 but input 'x' dimension 0 is 2"),
      std::string::npos)
      << lib.error();
  lib.destroy(m);

  r = kiln(
      {"export", (dir / "add.json").string(), "-o", (dir / "o2").string(), "--name", "9lives"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--name '9lives' is not a C identifier"), std::string::npos) << r.err;
  r = kiln(
      {"export", (dir / "add.json").string(), "-o", (dir / "o2").string(), "--weights", "zip"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--weights expects embed or file"), std::string::npos) << r.err;
}

// cmake --install into a prefix: a separate CMake project finds kiln, links kiln::kiln and
// runs a model; the installed kiln exports with the installed runtime archives.
TEST(Install, FindPackageKilnAndTheInstalledCli) {
  SKIP_IF_SANITIZED();
  const fs::path dir = testing::temp_dir("install");
  const fs::path prefix = dir / "prefix";
  ProcessResult r =
      run_process({"cmake", "--install", KILN_BUILD_DIR, "--prefix", prefix.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"bin/kiln", "include/kiln/kiln.h", "include/kiln/compiler/compile.h",
                        "include/kiln/op_library.h", "lib/cmake/kiln/kilnConfig.cmake"}) {
    EXPECT_TRUE(fs::exists(prefix / f)) << f;
  }
  // Public headers only: kiln.h and what it includes, never the linker, the cache or a
  // backend's emitters.
  for (const char* f : {"include/kiln/compiler/c/linker.h", "include/kiln/cache/cache_store.h",
                        "include/kiln/ops/cuda/op_code.h", "include/kiln/rewrite/passes.h",
                        "include/kiln/cli"}) {
    EXPECT_FALSE(fs::exists(prefix / f)) << f;
  }
  size_t installed = 0;
  for (const auto& e : fs::recursive_directory_iterator(prefix / "include")) {
    installed += e.is_regular_file();
  }
  EXPECT_LT(installed, 60u) << "headers installed";
  r = run_process({"cmake", "-S", KILN_INSTALL_CONSUMER_DIR, "-B", (dir / "build").string(),
                   "-DCMAKE_PREFIX_PATH=" + prefix.string(), "-DCMAKE_BUILD_TYPE=Release"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_process({"cmake", "--build", (dir / "build").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_process({(dir / "build" / "kiln_app").string(), kExamples + "/mlp/mlp.json",
                   kExamples + "/mlp/input.npy", kExamples + "/mlp/expected.npy"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\nOK\n"), std::string::npos) << r.out;
  // The installed CLI links the installed archives into what it exports.
  r = run_process({"env", "KILN_DEBUG=2", (prefix / "bin" / "kiln").string(), "export",
                   kExamples + "/mlp/mlp.json", "-o", (dir / "exported").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find((prefix / "bin" / "..").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kiln/libkiln_runtime.a"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir / "exported" / "libmlp.so"));
}

}  // namespace
}  // namespace kiln
