// The CUDA emulator under ThreadSanitizer: compiles a module's kernels.cu with
// -fsanitize=thread, runs one softmax kernel of it on the emulator (this program is built
// with TSan too) and checks the result. The emulator orders fibers only at barriers, so a
// kernel missing a __syncthreads shows up as a TSan data race. Built with clang++ like the
// images it loads (one TSan runtime for both).
//
//   emulator_race SHIM_HEADER KERNELS_CU KERNEL OUT_DIR
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda/emulator_device.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: emulator_race SHIM_HEADER KERNELS_CU KERNEL OUT_DIR\n");
    return 2;
  }
  const std::string image = std::string(argv[4]) + "/kernels.emu.so";
  const std::string cmd = "clang++ -std=c++17 -O1 -g -fPIC -shared -w -fsanitize=thread "
                          "-DKILN_CUDA_EMULATOR=1 -include '" + std::string(argv[1]) +
                          "' -x c++ '" + std::string(argv[2]) + "' -o '" + image + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "emulator_race: compiling %s failed\n", argv[2]);
    return 2;
  }
  try {
    auto device = kiln::make_emulator_device();
    auto kernels = device->load(image, {argv[3]});
    int64_t slices = 3, n = 300, inner = 1;
    std::vector<float> x(static_cast<size_t>(slices * n)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 10.0f - 5.0f;
    void* dx = device->allocate(x.size() * sizeof(float));
    void* dy = device->allocate(y.size() * sizeof(float));
    device->copy_to_device(dx, x.data(), x.size() * sizeof(float));
    void* args[] = {&slices, &n, &inner, &dy, &dx};
    // TSan tracks at most 256 threads at once (the fibers, the main thread and its own):
    // blocks of 64 threads keep every fiber tracked. The kernel takes any blockDim.x that
    // is a multiple of 32.
    const uint32_t dims[6] = {3, 1, 1, 64, 1, 1};
    auto stream = device->create_stream();  // the kernel runs on the stream's thread
    kernels->launch(*stream, 0, dims, 0, args);
    stream->copy_to_host_async(y.data(), dy, y.size() * sizeof(float));
    stream->synchronize();
    device->release(dx);
    device->release(dy);
    double worst = 0;
    for (int64_t s = 0; s < slices; ++s) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) m = std::fmax(m, x[static_cast<size_t>(s * n + j)]);
      for (int64_t j = 0; j < n; ++j) sum += std::exp(x[static_cast<size_t>(s * n + j)] - m);
      for (int64_t j = 0; j < n; ++j) {
        const double want = std::exp(x[static_cast<size_t>(s * n + j)] - m) / sum;
        worst = std::fmax(worst, std::fabs(y[static_cast<size_t>(s * n + j)] - want));
      }
    }
    std::printf("max error %g\n", worst);
    return worst < 1e-5 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "emulator_race: %s\n", e.what());
    return 2;
  }
}
