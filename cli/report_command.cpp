// kiln report MODEL -o FILE.html: one self-contained page about a compile.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "cli/model_inputs.h"
#include "compiler/report/report.h"
#include "frontend/model_loader.h"
#include "util/fs.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  const std::string out = line.value("--output");
  if (out.empty()) throw UsageError{"kiln report: -o FILE.html is required"};
  const InputSpecs specs = parse_input_specs(line);
  ReportOptions options;
  options.compile = compile_options(line);  // a bad flag before any work
  options.repeat = repeat_count(line);
  const auto start = std::chrono::steady_clock::now();
  Graph g = load_model(model);
  options.inputs = read_inputs(specs, g, "report", true);
  const std::string page = report_html(g, options);
  write_file_atomic(out, page);
  std::printf("%s  %.2f MB%s\n", out.c_str(), static_cast<double>(page.size()) / 1e6,
              options.inputs.empty() ? "  (no profile: no inputs given)" : "");
  if (line.verbose()) {
    std::fprintf(stderr, "report %.0f ms\n",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return 0;
}

}  // namespace

const Command& report_command() {
  static const Command c{
      "report",
      "[-v] MODEL -o FILE.html [--input NAME=FILE ...] [--repeat N]\n"
      "                   [--passes SPEC] [--device NAME]",
      "one self-contained page: the optimized graph, each node's code, the passes,\n"
      "the cache story, a profile",
      "Compiles MODEL and writes one self-contained HTML page (no network, no external file;\n"
      "open it from disk in any browser):\n"
      "  - the optimized graph as a picture: nodes coloured by kind (GEMM/conv, fused\n"
      "    elementwise, elementwise, reduction, data movement), edges labelled with dtype and\n"
      "    shape (? marks a dynamic dimension); click a node for its op, inputs and outputs,\n"
      "    and its generated code with the source-map origin of every fragment;\n"
      "  - the rewrite passes, each with its node counts and the ops it removed and added;\n"
      "  - the cache: key, hit or miss, key components, compile time per phase and per kernel;\n"
      "  - with every input given: a profile of --repeat runs (default 10) per node, sorted,\n"
      "    with the five slowest marked on the graph.\n"
      "#node=N at the end of the page's address selects node N.\n",
      {{"--output", "-o", "FILE.html", "where the page goes (required)"},
       input_flag(),
       {"--repeat", "", "N", "profiled runs (default 10)"},
       passes_flag(),
       precision_flag(),
       device_flag(),
       device_io_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
