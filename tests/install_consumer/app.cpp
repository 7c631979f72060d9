// Loads a model, compiles it through kiln's cache, runs it on an .npy input and compares
// with an expected .npy: usage kiln_app MODEL INPUT.npy EXPECTED.npy
#include <cmath>
#include <cstdio>

#include <kiln/kiln.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: kiln_app MODEL INPUT.npy EXPECTED.npy\n");
    return 2;
  }
  try {
    kiln::Function f = kiln::compile(kiln::load_model(argv[1]));
    kiln::Tensor y = f({kiln::read_npy(argv[2])})[0];
    kiln::Tensor want = kiln::read_npy(argv[3]);
    if (y.shape() != want.shape()) {
      std::printf("shape %s, expected %s\n", y.describe().c_str(), want.describe().c_str());
      return 1;
    }
    double worst = 0;
    for (int64_t i = 0; i < y.numel(); ++i)
      worst = std::fmax(worst, std::fabs(y.load(i) - want.load(i)));
    std::printf("cache %s, max |difference| %g\n%s\n", kiln::to_string(f.info().cache), worst,
                worst <= 1e-4 ? "OK" : "MISMATCH");
    return worst <= 1e-4 ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
}
