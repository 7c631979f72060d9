// kiln grad MODEL: the gradient of the sum of the first output by reverse-mode autodiff.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "cli/model_inputs.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "rewrite/autodiff/grad.h"
#include "runtime/io/npy.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/strings.h"

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// --wrt's values, or every floating-point parameter when none is named.
std::vector<Variable*> wrt_values(Graph& g, const std::vector<std::string>& names,
                                  const std::string& model) {
  std::vector<Variable*> wrt;
  if (names.empty()) {
    for (Variable* c : g.constants()) {
      if (c->parameter && is_float(c->type.dtype)) wrt.push_back(c);
    }
    if (wrt.empty()) {
      throw UserError(model +
                      ": the model has no floating-point initializers; name the values to "
                      "differentiate with --wrt NAME");
    }
  }
  for (const std::string& name : names) {
    Variable* v = g.find_variable(name);
    if (!v || v->kind == VarKind::kNodeOutput) {
      std::vector<std::string> known;
      for (const auto* i : g.inputs()) known.push_back(i->name);
      for (const auto* c : g.constants()) {
        if (c->parameter) known.push_back(c->name);
      }
      throw UsageError{"--wrt " + name + ": " + model +
                       " has no input or initializer named so (it has " + join(known, ", ") + ")"};
    }
    wrt.push_back(v);
  }
  return wrt;
}

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  const std::string output_dir = line.value("--output-dir");
  if (output_dir.empty()) throw UsageError{"kiln grad: --output-dir DIR is required"};
  const InputSpecs specs = parse_input_specs(line);
  const CompileOptions options = compile_options(line);  // a bad flag before any work
  auto t = Clock::now();
  Graph g = load_model(model);
  const double load_ms = ms_since(t);
  if (g.outputs().empty()) throw UserError(model + ": the model has no outputs");
  Variable* first = g.outputs()[0];
  if (!is_float(first->type.dtype)) {
    throw UserError(model + ": the first output '" + first->name + "' is " +
                    first->type.to_string() + "; its sum has no gradient");
  }
  const std::vector<Variable*> wrt = wrt_values(g, line.values("--wrt"), model);
  Var cost = sum(Var(&g, first));
  std::vector<Variable*> grads = grad(g, cost.var(), wrt);
  std::vector<Variable*> outs{cost.var()};
  outs.insert(outs.end(), grads.begin(), grads.end());
  g.set_outputs(outs);
  Function f = compile(g, options);
  std::map<std::string, Tensor> inputs = read_inputs(specs, g, "grad", false);
  t = Clock::now();
  const std::vector<Tensor> values = f.run(inputs);
  const double run_ms = ms_since(t);
  create_output_dir(output_dir);
  std::printf("cost sum(%s) = %.9g\n", terminal_line(first->name).c_str(), values[0].load(0));
  std::vector<std::string> wrt_names;
  for (const auto* v : wrt) wrt_names.push_back(v->name);
  const auto paths = value_files(output_dir, wrt_names, "grad_");
  for (size_t i = 0; i < wrt.size(); ++i) {
    write_npy(paths[i], values[i + 1]);
    std::printf("%s  %s\n", terminal_line(paths[i].string()).c_str(),
                values[i + 1].describe().c_str());
  }
  if (line.verbose()) print_times(f.info(), load_ms, run_ms);
  return 0;
}

}  // namespace

const Command& grad_command() {
  static const Command c{
      "grad",
      "[-v] MODEL --input NAME=FILE [--input ...] --output-dir DIR [--wrt NAME ...]",
      "the gradient of the sum of MODEL's first output with respect to its weights\n"
      "(or the named values): DIR/grad_<name>.npy",
      "Builds the gradient of sum(first output of MODEL) with respect to each --wrt value (a\n"
      "graph input or an initializer / parameter; default: every floating-point initializer)\n"
      "by reverse-mode autodiff, compiles forward and backward into one module, runs it on the\n"
      "inputs and writes each gradient to DIR/grad_<name>.npy, where bytes of <name> other\n"
      "than letters, digits, '_', '-' and '.' become '_' (as for kiln run). The cost's value\n"
      "goes to stdout. A value the cost reaches only through integers, comparisons or ops\n"
      "without a gradient is an error naming the node, the op and the input.\n",
      {input_flag(),
       {"--output-dir", "-o", "DIR", "where the gradients are written (required)"},
       {"--wrt", "", "NAME", "a value to differentiate with respect to (repeatable)", true},
       passes_flag(),
       device_flag(),
       device_io_flag()},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
