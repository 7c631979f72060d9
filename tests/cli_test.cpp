// The `kiln` command end to end: exit codes, help, compile, run and source.
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/subprocess.h"
#include "runtime/npy.h"
#include "runtime/safetensors.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

const std::string kKiln = KILN_BINARY;
const std::string kExamples = KILN_EXAMPLES_DIR;

ProcessResult kiln(std::vector<std::string> args) {
  args.insert(args.begin(), kKiln);
  return run_process(args);
}

TEST(Cli, HelpForEveryCommand) {
  auto r = kiln({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"compile", "run", "source", "cache", "exit codes", "KILN_CACHE_DIR",
                           "KILN_CACHE_MAX_SIZE", "-v"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  for (const char* cmd : {"compile", "run", "source", "cache", "export", "report"}) {
    auto h = kiln({cmd, "--help"});
    EXPECT_EQ(h.exit_code, 0) << cmd;
    EXPECT_NE(h.out.find(std::string("usage: kiln ") + cmd), std::string::npos) << h.out;
    EXPECT_EQ(kiln({"help", cmd}).out, h.out);
  }
}

TEST(Cli, WrongUsageExitsTwoWithOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"compile"},
           {"run", "m.json"},
           {"compile", "--bogus", "m.json"},
           {"run", "m.json", "--output-dir", "o", "--input", "novalue"},
           {"run", "m.json", "--input"}}) {
    auto r = kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args.size();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// kiln report: -o is required; inputs are all or none (a partial set names what is
// missing); a page is written either way.
TEST(Cli, ReportWritesOnePageAndChecksItsInputs) {
  const std::string model = kExamples + "/onnx/resblock/model.onnx";
  const std::string out = testing::temp_dir("cli-report") + "/r.html";
  auto none = kiln({"report", model});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("-o FILE.html is required"), std::string::npos) << none.err;
  auto bad = kiln({"report", model, "-o", out, "--input", "nope=x.npy"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown input 'nope'"), std::string::npos) << bad.err;
  auto plain = kiln({"report", model, "-o", out});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("no profile"), std::string::npos) << plain.out;
  const std::string page = read_file(out);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("\"profile\":null"), std::string::npos);
  auto full = kiln({"report", model, "-o", out, "--input",
                    "x=" + kExamples + "/onnx/resblock/x.npy", "--repeat", "2"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(read_file(out).find("\"runs\":2"), std::string::npos);
}

TEST(Cli, CompileRunAndSourceTheMlp) {
  std::string model = kExamples + "/mlp/mlp.json";
  auto c = kiln({"compile", "-v", model});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("key "), std::string::npos);
  for (const char* phase : {"load", "key", "codegen", "compile", "module load"}) {
    EXPECT_NE(c.err.find(phase), std::string::npos) << phase << " missing in " << c.err;
  }
  std::string out_dir = testing::temp_dir("cli_run");
  auto r = kiln({"run", "-v", model, "--input", "x=" + kExamples + "/mlp/input.npy", "--output-dir",
                 out_dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("run "), std::string::npos);
  Tensor y = read_npy(out_dir + "/y.npy");
  Tensor expected = read_npy(kExamples + "/mlp/expected.npy");
  EXPECT_TRUE(testing::tensors_close(y, expected, 1e-5, 1e-6));
  auto s = kiln({"source", model});
  ASSERT_EQ(s.exit_code, 0);
  // The rewrites pack each wide layer's weight for kiln's GEMM kernel, which adds its bias
  // (the gemm's C) and clamps for its relu as it stores; the 10-wide output layer stays a
  // matmul through OpenBLAS.
  EXPECT_NE(s.out.find("/* node 0: with_epilogue{base=\"gemm\", base.beta=1.0, base.packed_n=256, "
                       "base.transB=0, base_inputs=3, program=\"relu($0)\"}(x, w1.packed, b1) -> "
                       "h1  [float32 (?, 256)]  'fc1' */"),
            std::string::npos)
      << s.out;
  EXPECT_NE(s.out.find("/* epilogue, in the stores: relu($0) */"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("/* node 2: with_epilogue{base=\"matmul\""), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("kiln_gemm_f32(ctx"), std::string::npos)
      << "GEMM through kiln's OpenBLAS table";
}

TEST(Cli, BadPassesSpecNamesTheFlagAndThePasses) {
  auto r = kiln({"source", "--passes", "-fuson", kExamples + "/mlp/mlp.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--passes: unknown pass 'fuson'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fusion"), std::string::npos) << r.err;
  auto g = kiln({"source", "--graph", "--passes", "none", kExamples + "/mlp/mlp.json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find(": matmul(x, w1) -> z1"), std::string::npos) << g.out;
}

TEST(Cli, BadInputsAndModelsExitOneWithTheReason) {
  std::string model = kExamples + "/mlp/mlp.json";
  std::string dir = testing::temp_dir("cli_bad");
  write_npy(dir + "/wrong.npy", Tensor::zeros(DType::kFloat32, {2, 100}));
  auto r = kiln({"run", model, "--input", "x=" + dir + "/wrong.npy", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("input 'x': dimension 1 is 100: expected float32 (?, 784)"),
            std::string::npos)
      << r.err;
  r = kiln({"run", model, "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing input 'x': expected float32 (?, 784)"), std::string::npos) << r.err;
  r = kiln({"run", model, "--input", "q=" + dir + "/wrong.npy", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown input 'q'"), std::string::npos) << r.err;
  write_file_atomic(dir + "/broken.json", "{\"inputs\": [");
  r = kiln({"compile", dir + "/broken.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("invalid JSON"), std::string::npos) << r.err;
  r = kiln({"compile", dir + "/absent.json"});
  EXPECT_EQ(r.exit_code, 1);
}

// The MLP with its weights in one .safetensors file (a JSON model's parameters by name and
// by "tensor"), its input from one and its output written to one: the same numbers as .npy.
TEST(Cli, SafetensorsWeightsInputsAndOutputs) {
  std::string dir = testing::temp_dir("cli_safetensors");
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const char* n : {"w1", "b1", "w2", "b2", "w3"}) {
    weights.emplace_back(n, read_npy(kExamples + "/mlp/" + n + ".npy"));
  }
  weights.emplace_back("last_bias", read_npy(kExamples + "/mlp/b3.npy"));
  write_safetensors(dir + "/weights.safetensors", weights);
  std::string json = read_file(kExamples + "/mlp/mlp.json");
  for (const char* n : {"w1", "b1", "w2", "b2", "w3"}) {
    std::string from = std::string("\"") + n + ".npy\"";
    ASSERT_NE(json.find(from), std::string::npos) << n;
    json.replace(json.find(from), from.size(), "\"weights.safetensors\"");
  }
  json.replace(json.find("\"b3.npy\""), 8, "\"weights.safetensors\", \"tensor\": \"last_bias\"");
  write_file_atomic(dir + "/mlp.json", json);
  write_safetensors(dir + "/in.safetensors", {{"x", read_npy(kExamples + "/mlp/input.npy")}});
  Tensor expected = read_npy(kExamples + "/mlp/expected.npy");
  for (const std::string& input : {"x=" + dir + "/in.safetensors", dir + "/in.safetensors"}) {
    auto r = kiln({"run", dir + "/mlp.json", "--input", input, "--output-dir", dir + "/out",
                   "--output-format", "safetensors"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Safetensors out = read_safetensors(dir + "/out/outputs.safetensors");
    EXPECT_TRUE(testing::tensors_close(out.at("y", "out"), expected, 1e-5, 1e-6));
  }
  // A file that does not hold the tensor a parameter names, and a truncated one.
  json.replace(json.find("\"last_bias\""), 11, "\"b9\"");
  write_file_atomic(dir + "/bad.json", json);
  auto r = kiln({"compile", dir + "/bad.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("parameters[5].file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no tensor named 'b9'"), std::string::npos) << r.err;
  std::string bytes = read_file(dir + "/weights.safetensors");
  write_file_atomic(dir + "/weights.safetensors", bytes.substr(0, bytes.size() - 100));
  r = kiln({"compile", dir + "/mlp.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("weights.safetensors: byte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated?"), std::string::npos) << r.err;
  r = kiln({"run", kExamples + "/mlp/mlp.json", "--input", dir + "/in.safetensors", "--output-dir",
            dir, "--output-format", "csv"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output-format expects npy or safetensors"), std::string::npos) << r.err;
  // The same input from a file by name and from a whole .safetensors file.
  r = kiln({"run", kExamples + "/mlp/mlp.json", "--input", dir + "/in.safetensors", "--input",
            "x=" + dir + "/in.safetensors", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("input 'x' given twice"), std::string::npos) << r.err;
  // "tensor" names a tensor of a .safetensors file only.
  std::string npy_json = read_file(kExamples + "/mlp/mlp.json");
  // A model's files are inside its folder: the .npy files go beside the copy.
  for (const auto& e : std::filesystem::directory_iterator(kExamples + "/mlp")) {
    if (e.path().extension() == ".npy")
      std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  }
  npy_json.replace(npy_json.find("b3.npy\""), 7, "b3.npy\", \"tensor\": \"b3\"");
  write_file_atomic(dir + "/npy_tensor.json", npy_json);
  r = kiln({"compile", dir + "/npy_tensor.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("parameters[5].tensor: only a .safetensors file holds named tensors"),
            std::string::npos)
      << r.err;
  r = kiln({"export", kExamples + "/mlp/mlp.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kiln export: -o DIR is required"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln
