// kiln source MODEL: the generated code, or the optimized graph.
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "frontend/model_loader.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  Graph g = load_model(line.one_model());
  const CompileOptions options = compile_options(line);
  if (line.has("--graph")) {
    std::fputs(optimized_graph(g, options).to_string().c_str(), stdout);
  } else {
    std::fputs(generate_source(g, options).c_str(), stdout);
  }
  return 0;
}

}  // namespace

const Command& source_command() {
  static const Command c{
      "source",
      "[--graph] [--passes SPEC] [--device cpu|cuda] MODEL",
      "print the stitched C source of MODEL's module (--graph: the graph after the\n"
      "rewrite passes instead)",
      "Prints the stitched C source of MODEL's module: one thunk per node (a fused group is\n"
      "one node), each under a banner naming the node, its op, inputs, outputs and their\n"
      "types. With --device cuda, the host C (whose thunks launch the kernels) and then\n"
      "kernels.cu, the CUDA kernels of the nodes placed on the device, under its own banner.\n",
      {{"--graph", "", "", "print the optimized graph (after the rewrite passes) instead"},
       passes_flag(),
       device_flag(),
       device_io_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
