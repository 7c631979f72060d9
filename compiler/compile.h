#pragma once
// compile(): graph -> key -> stitched C -> clang -> loaded module -> Function.
#include <filesystem>
#include <string>

#include "compiler/function.h"
#include "compiler/toolchain.h"
#include "graph/graph.h"

namespace kiln {

struct CompileOptions {
  ToolchainConfig toolchain;
  // Where modules are built; default <cache root>/builds. Failed sources go to <root>/failed.
  std::filesystem::path work_dir;
};

Function compile(const Graph& graph, const CompileOptions& options = {});

// The stitched C source of a graph, exactly as compile() would build it.
std::string generate_source(const Graph& graph, const CompileOptions& options = {});

}  // namespace kiln
