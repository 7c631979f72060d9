// kiln source MODEL: the generated code, or the optimized graph.
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "cli/model_graph.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  const CompileOptions options = compile_options(line);  // a bad flag before any work
  ModelGraph loaded(model, options);
  const Graph& g = loaded.graph();
  if (line.has("--graph")) {
    std::fputs(optimized_graph(g, options).to_string().c_str(), stdout);
  } else {
    const std::string text =
        line.has("--preludes") ? generate_source(g, options) : readable_source(g, options);
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

}  // namespace

const Command& source_command() {
  static const Command c{
      "source",
      "[--graph] [--preludes] [--passes SPEC] [--precision f32|bf16] [--device NAME] MODEL",
      "print the stitched C source of MODEL's module (--graph: the graph after the\n"
      "rewrite passes instead)",
      "Prints the stitched C source of MODEL's module: the kernels, each under the banners of\n"
      "the nodes that run it (op, inputs, outputs and their types), then one thunk per node\n"
      "(a fused group is one node). Each prelude is one line naming it (--preludes prints\n"
      "them). With --device cuda: the host C (whose thunks launch the kernels), then\n"
      "kernels.cu, the CUDA kernels of the nodes placed on the device, under its own banner.\n",
      {{"--graph", "", "", "print the optimized graph (after the rewrite passes) instead"},
       {"--preludes", "", "",
        "print the preludes and the module ABI header in full (by default each is one line\n"
        "naming it and its length): the exact text the compiler is given"},
       passes_flag(),
       precision_flag(),
       device_flag(),
       device_io_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
