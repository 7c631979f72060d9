#pragma once
// `kiln export`: a model as a standalone shared library — libNAME.so (the module, kiln's
// runtime, and the weights when embedded), NAME.h (a C API), NAME.safetensors (weights kept
// beside it) and README.txt — that a C or C++ program links without kiln.
#include <filesystem>
#include <string>

#include "compiler/compile.h"

namespace kiln {

struct ExportOptions {
  std::filesystem::path out_dir;
  std::string name;           // a C identifier; empty: the graph's name made into one
  bool embed_weights = true;  // false: NAME.safetensors beside the library
  CompileOptions compile;     // toolchain and passes (device must be cpu)
};

struct ExportResult {
  std::string name;
  std::filesystem::path library, header, weights, readme;  // weights empty when embedded
  uintmax_t library_bytes = 0;
  bool links_blas = false;  // the model calls OpenBLAS, so the library needs libopenblas
  int dynamic_dims = 0;     // of the inputs
};

// Throws UserError for what cannot be exported, naming the node (device code, op-library
// compute functions, shapes that do not follow the inputs' dynamic dimensions) or the file.
ExportResult export_model(const Graph& graph, const ExportOptions& options);

// The archives an export links (kiln's runtime and util): $KILN_EXPORT_LIBDIR, else the
// installed copies beside kiln (../lib/kiln), else those of the build tree.
std::vector<std::filesystem::path> export_archives();

}  // namespace kiln
