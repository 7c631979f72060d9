// kiln compile MODEL: a native module through the kernel cache.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "cli/model_graph.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  CompileOptions options = compile_options(line);  // a bad flag before any work
  options.explain = line.has("--explain");
  const auto start = std::chrono::steady_clock::now();
  ModelGraph loaded(model, options);
  const Graph& g = loaded.graph();
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Function f = compile(g, options);
  if (!f.info().cache_note.empty()) std::fprintf(stderr, "%s\n", f.info().cache_note.c_str());
  std::printf("key     %s\nmodule  %s\nsource  %s\n", f.info().key.c_str(),
              f.info().module_path.c_str(), f.info().source_path.c_str());
  if (line.verbose()) print_times(f.info(), load_ms, -1);
  return 0;
}

}  // namespace

const Command& compile_command() {
  static const Command c{
      "compile",
      "[-v] [--explain] MODEL",
      "compile MODEL to a native module; print its key and paths",
      "Compiles MODEL into one native module, through the kernel cache, and prints its key,\n"
      "the module's path and the path of its generated C source. On a miss the module is\n"
      "linked from kernels: each distinct kernel is looked up in the cache by its own key and\n"
      "only the missing ones are compiled, KILN_JOBS at a time; -v says how many were reused.\n"
      "Exits 1 with the error (naming the node and the line of its code) when the model is\n"
      "invalid or the module does not compile.\n",
      {{"--explain", "", "",
        "on a miss, name the nearest cached entry for the same graph and which key\n"
        "component differs (toolchain, flags, an op's version, ...)"},
       passes_flag(),
       precision_flag(),
       device_flag(),
       device_io_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
