// The examples produce NumPy's results (examples/mlp/expected.npy).
#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "runtime/npy.h"
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

}  // namespace
}  // namespace kiln
