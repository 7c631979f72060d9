#include "cli/compile_flags.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "compiler/backend.h"
#include "rewrite/pipeline.h"
#include "util/strings.h"

namespace kiln::cli {

Flag passes_flag() {
  return {"--passes", "", "SPEC",
          "rewrite passes: \"-fusion,-cse\" disables those, \"none\" all (default:\n"
          "$KILN_PASSES, else all of fold, simplify, cse, norm, layout, winograd,\n"
          "pack, views, attention, extrema, fusion, reduction, epilogue, dce); part\n"
          "of the cache key"};
}

Flag precision_flag() {
  return {"--precision", "", "f32|bf16",
          "bf16: products by the model's weights on kiln's packed GEMM (MatMul,\n"
          "Gemm) take bfloat16 operands and sum in float32 (AVX512-BF16; a float32\n"
          "fallback elsewhere); all else stays float32. CPU only (default:\n"
          "$KILN_PRECISION, else f32); part of the cache key"};
}

Flag device_flag() {
  // The devices are the registry's (compiler/backend_list.cpp).
  return {"--device", "", join(backend_names(), "|"),
          "where nodes run: a device places every node it has code for on itself, with\n"
          "transfers where values cross (cuda: the GPU; KILN_CUDA_DEVICE=emulator runs the\n"
          "CUDA code on the CPU); default cpu"};
}

Flag device_io_flag() {
  return {"--device-io", "", "",
          "with --device cuda: the module takes its inputs and gives its outputs in\n"
          "device memory"};
}

int repeat_count(const CommandLine& line) {
  const std::string v = line.value("--repeat", "10");
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > 1000000) {
    throw UsageError{"--repeat expects a number of runs from 1 to 1000000, got '" + v + "'"};
  }
  return static_cast<int>(n);
}

CompileOptions compile_options(const CommandLine& line) {
  CompileOptions options;
  if (line.has("--passes")) {
    const std::string spec = line.value("--passes");
    select_passes(spec, "--passes");  // reject a bad spec naming the flag
    options.passes = spec;
  }
  if (line.has("--precision")) {
    options.precision = line.value("--precision");
    if (options.precision != "f32" && options.precision != "bf16") {
      throw UsageError{"--precision expects f32|bf16, got '" + options.precision + "'"};
    }
  }
  if (line.has("--device")) {
    const std::string device = line.value("--device");
    if (!find_backend(device)) {
      throw UsageError{"--device expects " + join(backend_names(), "|") + ", got '" + device + "'"};
    }
    options.device = device;
  }
  options.device_io = line.has("--device-io");
  if (options.device_io && backend_named(options.device).is_host()) {
    std::vector<std::string> devices;
    for (const Backend* b : all_backends()) {
      if (!b->is_host()) devices.push_back(b->name());
    }
    throw UsageError{"--device-io needs --device " + join(devices, "|")};
  }
  return options;
}

void print_times(const CompileInfo& info, double load_ms, double run_ms) {
  std::fprintf(stderr, "cache %s%s\n", to_string(info.cache),
               info.cache == CacheStatus::kHit && info.times.wait_ms > 1
                   ? (" (waited " + format_double(std::round(info.times.wait_ms)) +
                      " ms for another compile)")
                         .c_str()
                   : "");
  std::fprintf(stderr,
               "load %.2f ms | key %.2f ms | lookup %.2f ms | rewrite %.2f ms | codegen %.2f ms | "
               "compile %.2f ms | module load %.2f ms | prepare %.2f ms",
               load_ms, info.times.key_ms, info.times.lookup_ms, info.times.rewrite_ms,
               info.times.codegen_ms, info.times.compile_ms, info.times.load_ms,
               info.times.prepare_ms);
  if (info.times.remote_ms > 0) std::fprintf(stderr, " | remote %.2f ms", info.times.remote_ms);
  if (run_ms >= 0) std::fprintf(stderr, " | run %.2f ms", run_ms);
  std::fprintf(stderr, "\n");
  // Where the prepared weights came from: a cache hit should say "cache" or "memory".
  if (!info.weights.empty() && info.weights != "none needed") {
    std::fprintf(stderr, "weights prepared: %s\n",
                 info.weights == "prepared" ? "now" : ("from " + info.weights).c_str());
  }
  const KernelReport& k = info.kernels;
  if (k.kernels > 0) {
    const std::string fetched =
        k.fetched ? ", " + std::to_string(k.fetched) + " of the reused from the remote" : "";
    std::fprintf(stderr,
                 "kernels %d (%d reused, %d compiled, %d jobs, %d on clang servers%s) | kernel "
                 "compiles %.2f ms | binding %.2f ms | link %.2f ms\n",
                 k.kernels, k.reused, k.compiled, k.jobs, k.served, fetched.c_str(),
                 info.times.kernels_ms, info.times.binding_ms, info.times.link_ms);
  }
  if (!info.device.empty()) {
    std::fprintf(stderr, "device  %s: %s\n", info.backend.c_str(), info.device.c_str());
  }
}

}  // namespace kiln::cli
