// kiln export MODEL -o DIR: a standalone C library.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "compiler/export/export.h"
#include "frontend/model_loader.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  const std::string out_dir = line.value("--output-dir");
  if (out_dir.empty()) throw UsageError{"kiln export: -o DIR is required"};
  const std::string weights = line.value("--weights", "embed");
  if (weights != "embed" && weights != "file") {
    throw UsageError{"--weights expects embed or file, got '" + weights + "'"};
  }
  ExportOptions options;
  options.out_dir = out_dir;
  options.name = line.value("--name");
  options.embed_weights = weights != "file";
  options.compile = compile_options(line);
  const auto start = std::chrono::steady_clock::now();
  ExportResult r = export_model(load_model(model), options);
  std::printf("%s  %.1f MB%s\n%s\n", r.library.c_str(), r.library_bytes / 1e6,
              r.links_blas ? "  (links libopenblas)" : "", r.header.c_str());
  if (!r.weights.empty()) std::printf("%s\n", r.weights.c_str());
  std::printf("%s\n", r.readme.c_str());
  if (line.verbose()) {
    std::fprintf(stderr, "export %.0f ms\n",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return 0;
}

}  // namespace

const Command& export_command() {
  static const Command c{
      "export",
      "[-v] MODEL -o DIR [--name NAME] [--weights embed|file] [--passes SPEC]",
      "write MODEL as a standalone C library: DIR/libNAME.so, NAME.h, README.txt",
      "Writes MODEL as a standalone shared library a C or C++ program links without kiln:\n"
      "  DIR/libNAME.so       the compiled model and the parts of kiln's runtime it needs\n"
      "                       (executor, memory plan, support kernels), statically linked;\n"
      "                       OpenBLAS only when the model calls it\n"
      "  DIR/NAME.h           its C API (C11 and C++): NAME_create / NAME_run / NAME_destroy,\n"
      "                       the inputs' and outputs' names, dtypes and shapes, error strings\n"
      "  DIR/NAME.safetensors the weights, with --weights file (default: embedded in the .so)\n"
      "  DIR/README.txt       the model's signature and how to build against it\n"
      "The code is compiled for this machine's CPU (export makes CPU libraries only). Dynamic\n"
      "dimensions stay dynamic when each op's output shape follows them (batch and sequence\n"
      "axes do).\n",
      {{"--output-dir", "-o", "DIR", "where the files go (created if needed; required)"},
       {"--name", "", "NAME", "a C identifier (default: the model's name made into one)"},
       {"--weights", "", "embed|file",
        "the weights inside libNAME.so, or NAME.safetensors beside it"},
       passes_flag(),
       precision_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
