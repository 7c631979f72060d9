// The examples produce NumPy's results (examples/mlp/expected.npy).
#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "rewrite/pipeline.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"

namespace kiln {
namespace {

const std::string kExamples = KILN_EXAMPLES_DIR;

TEST(Examples, JsonMlpMatchesNumpy) {
  Function f = compile(load_model(kExamples + "/mlp/mlp.json"));
  auto y = f({read_npy(kExamples + "/mlp/input.npy")});
  EXPECT_TRUE(testing::tensors_close(y[0], read_npy(kExamples + "/mlp/expected.npy"), 1e-5, 1e-6));
  // Batch 1 and a larger batch through the same module.
  Tensor x = read_npy(kExamples + "/mlp/input.npy");
  EXPECT_EQ(f({x.slice(0, 0, 1)})[0].shape(), (Shape{1, 10}));
}

TEST(Examples, CppMlpProgramMatchesNumpy) {
  ProcessResult r = run_process({KILN_MLP_EXAMPLE, kExamples + "/mlp"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("matches NumPy"), std::string::npos) << r.out;
}

// examples/train: a CNN trained by one compiled step learns the generated strokes.
TEST(Examples, TrainingProgramLearnsTheStrokes) {
  ProcessResult r = run_process({KILN_TRAIN_EXAMPLE, "--epochs", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("epoch  1/5"), std::string::npos) << r.out;
  const size_t last = r.out.rfind("test accuracy");
  ASSERT_NE(last, std::string::npos) << r.out;
  EXPECT_GE(std::stod(r.out.substr(last + 14)), 90.0) << r.out;
}

// Models exported from PyTorch (examples/onnx/export_models.py) match PyTorch's outputs.
class OnnxExample : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExample, MatchesPyTorch) {
  const std::string dir = kExamples + "/onnx/" + GetParam();
  Graph g = load_model(dir + "/model.onnx");
  ASSERT_EQ(g.inputs().size(), 1u);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->name, "y");
  Function f = compile(g);
  auto y = f({read_npy(dir + "/x.npy")});
  EXPECT_TRUE(testing::tensors_close(y[0], read_npy(dir + "/expected/y.npy"), 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxExample,
                         ::testing::Values("mlp", "lenet", "resblock", "attention"));

// Every example gives the same results with every rewrite pass, without each one, and with
// none: a pass may change speed, never answers.
TEST(Examples, SameResultsWithAndWithoutEachPass) {
  struct Case {
    std::string model, input, expected;
  };
  std::vector<Case> cases{{kExamples + "/mlp/mlp.json", kExamples + "/mlp/input.npy",
                           kExamples + "/mlp/expected.npy"}};
  for (const char* m : {"mlp", "lenet", "resblock", "attention"}) {
    std::string dir = kExamples + "/onnx/" + m;
    cases.push_back({dir + "/model.onnx", dir + "/x.npy", dir + "/expected/y.npy"});
  }
  std::vector<std::string> specs{"", "none"};
  for (const auto& p : all_passes()) specs.push_back("-" + std::string(p.name));
  for (const auto& c : cases) {
    Graph g = load_model(c.model);
    Tensor x = read_npy(c.input), want = read_npy(c.expected);
    for (const auto& spec : specs) {
      CompileOptions options;
      options.passes = spec;
      auto y = compile(g, options)({x});
      EXPECT_TRUE(testing::tensors_close(y[0], want, 1e-4, 1e-5)) << c.model << " passes '" << spec << "'";
    }
  }
}

TEST(Examples, OnnxCliRunWritesOutputsByOnnxName) {
  const std::string dir = kExamples + "/onnx/lenet";
  const std::string out = testing::temp_dir("onnx_cli_run");
  ProcessResult r = run_process({KILN_BINARY, "run", dir + "/model.onnx", "--input",
                                 "x=" + dir + "/x.npy", "--output-dir", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::tensors_close(read_npy(out + "/y.npy"), read_npy(dir + "/expected/y.npy"),
                                     1e-4, 1e-5));
  // A batch of one through the same dynamic-batch module.
  Function f = compile(load_model(dir + "/model.onnx"));
  EXPECT_EQ(f({read_npy(dir + "/x.npy").slice(0, 0, 1)})[0].shape(), (Shape{1, 10}));
}

TEST(Examples, OnnxCliInputErrorsNameTheExpectedDtypeAndShape) {
  const std::string dir = kExamples + "/onnx/lenet";
  const std::string out = testing::temp_dir("onnx_cli_errors");
  ProcessResult wrong = run_process({KILN_BINARY, "run", dir + "/model.onnx", "--input",
                                     "x=" + kExamples + "/onnx/mlp/x.npy", "--output-dir", out});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find(
                "input 'x': wrong rank: expected float32 (?, 1, 28, 28), got float32 (4, 784)"),
            std::string::npos)
      << wrong.err;
  ProcessResult missing =
      run_process({KILN_BINARY, "run", dir + "/model.onnx", "--output-dir", out});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("missing input 'x': expected float32 (?, 1, 28, 28)"),
            std::string::npos)
      << missing.err;
  ProcessResult extra =
      run_process({KILN_BINARY, "run", dir + "/model.onnx", "--input", "x=" + dir + "/x.npy",
                   "--input", "z=" + dir + "/x.npy", "--output-dir", out});
  EXPECT_EQ(extra.exit_code, 1);
  EXPECT_NE(extra.err.find("unknown input 'z'; the model takes x (float32 (?, 1, 28, 28))"),
            std::string::npos)
      << extra.err;
}

}  // namespace
}  // namespace kiln
