// The MLP example written with kiln's C++ builder API: 784 -> 256 -> 128 -> 10, softmax.
// Usage: mlp_example [DIR]   (DIR holds w1.npy ... b3.npy, input.npy, expected.npy)
#include <cmath>
#include <cstdio>
#include <string>

#include <kiln/kiln.h>

int main(int argc, char** argv) {
  using namespace kiln;
  const std::string dir = argc > 1 ? argv[1] : "examples/mlp";
  try {
    Graph g("mlp_cpp");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 784});
    auto param = [&](const char* name) {
      return parameter(g, read_npy(dir + "/" + name + ".npy"), name);
    };
    Var h1 = relu(matmul(x, param("w1")) + param("b1"));
    Var h2 = relu(matmul(h1, param("w2")) + param("b2"));
    Var y = softmax(matmul(h2, param("w3")) + param("b3"));
    g.set_outputs({y});

    Function f = compile(g);
    Tensor out = f({read_npy(dir + "/input.npy")})[0];
    Tensor expected = read_npy(dir + "/expected.npy");
    double max_err = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      max_err = std::fmax(max_err, std::fabs(out.load(i) - expected.load(i)));
    for (int64_t r = 0; r < out.shape()[0]; ++r) {
      std::printf("row %lld:", static_cast<long long>(r));
      for (int64_t c = 0; c < out.shape()[1]; ++c)
        std::printf(" %.4f", out.load(r * out.shape()[1] + c));
      std::printf("\n");
    }
    std::printf("source: %s\n", f.info().source_path.c_str());
    if (max_err > 1e-5) {
      std::printf("MISMATCH: max |kiln - numpy| = %g\n", max_err);
      return 1;
    }
    std::printf("matches NumPy (max abs error %.2g)\n", max_err);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mlp_example: %s\n", e.what());
    return 1;
  }
}
