// kiln run MODEL --input ... --output-dir DIR: compile, run once, write the outputs.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compile_flags.h"
#include "cli/model_inputs.h"
#include "compiler/backend.h"
#include "compiler/entries/background_stores.h"
#include "frontend/model_function.h"

#include "runtime/exec/profile_table.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "util/escape.h"
#include "util/fs.h"

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;

void write_outputs(const std::string& dir, const std::string& format,
                   const std::vector<std::string>& names, const std::vector<Tensor>& outputs) {
  create_output_dir(dir);
  if (format == "safetensors") {
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t i = 0; i < outputs.size(); ++i) named.emplace_back(names[i], outputs[i]);
    const auto path = std::filesystem::path(dir) / "outputs.safetensors";
    write_safetensors(path, named);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("%s#%s  %s\n", terminal_line(path.string()).c_str(),
                  terminal_line(names[i]).c_str(), outputs[i].describe().c_str());
    }
    return;
  }
  const auto paths = value_files(dir, names, "");
  for (size_t i = 0; i < outputs.size(); ++i) {
    write_npy(paths[i], outputs[i]);
    std::printf("%s  %s\n", terminal_line(paths[i].string()).c_str(),
                outputs[i].describe().c_str());
  }
}

void print_stages(ModelFunction& model_fn) {
  // NonZero inputs computed before the model, each by a module of its own.
  for (const auto& [value, prefix] : model_fn.stages()) {
    if (!prefix) {
      std::fprintf(stderr, "stage: NonZero of input '%s' on the host\n", value.c_str());
      continue;
    }
    const CompileInfo& info = prefix->function().info();
    std::fprintf(stderr,
                 "stage: '%s' computed first by its own module (cache %s, compile %.2f ms)\n",
                 value.c_str(), to_string(info.cache), info.times.compile_ms);
  }
}

int run(const CommandLine& line) {
  const std::string model = line.one_model();
  const std::string output_dir = line.value("--output-dir");
  if (output_dir.empty()) throw UsageError{"kiln run: --output-dir DIR is required"};
  const bool profile = line.has("--profile");
  if (line.has("--trace") && !profile) throw UsageError{"kiln run: --trace FILE needs --profile"};
  if (line.has("--repeat") && !profile) throw UsageError{"kiln run: --repeat N needs --profile"};
  const std::string format = line.value("--output-format", "npy");
  if (format != "npy" && format != "safetensors") {
    throw UsageError{"--output-format expects npy or safetensors, got '" + format + "'"};
  }
  const int repeat = repeat_count(line);
  const InputSpecs specs = parse_input_specs(line);
  CompileOptions options = compile_options(line);
  if (line.has("--generic-start") && line.has("--no-generic-start")) {
    throw UsageError{"kiln run: --generic-start and --no-generic-start contradict each other"};
  }
  if (line.has("--generic-start")) options.generic_start = true;
  if (line.has("--no-generic-start")) options.generic_start = false;
  // A model whose graph depends on an input's value (Reshape's shape given as an input) is
  // built once that value is read.
  ModelFunction model_fn(model, options);
  std::map<std::string, Tensor> inputs = read_inputs(specs, model_fn.inputs(), "run", false);
  const Backend& backend = backend_named(options.device);
  if (options.device_io) {
    for (auto& [name, tensor] : inputs) {
      bool value_input = false;
      for (const auto& v : model_fn.value_inputs()) value_input = value_input || v == name;
      if (!value_input) tensor = backend.to_device(tensor);
    }
  }
  const auto start = Clock::now();
  auto outputs = model_fn.run(inputs);
  const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  TieredFunction& tiered = model_fn.tiered();
  if (options.device_io) {
    for (auto& o : outputs) o = backend.to_host(o);
  }
  // The outputs are written before waiting for a module compiling in the background.
  write_outputs(output_dir, format, model_fn.output_names(), outputs);
  const Tier tier = tiered.last_tier();
  Function& f = model_fn.function();  // the compiled module: stored in the cache by now
  if (line.verbose()) {
    // Parsing only: the compile phases print on their own.
    if (tier == Tier::kGeneric) {
      std::fprintf(stderr,
                   "tier: the run took the generic tier (%.2f ms); the module compiled in the "
                   "background in %.2f ms and runs every later call\n",
                   run_ms, tiered.background_ms());
    } else {
      std::fprintf(stderr, "tier: the run took the compiled module\n");
    }
    print_times(f.info(), model_fn.load_ms(), run_ms);
    print_stages(model_fn);
  }
  if (profile) {
    // A cold compile writes its cache entries (the prepared weights among them) behind it; the
    // profiled runs would share the cores with that (EdgeNeXt-S: 32.8 ms per run, 22.5 after).
    wait_for_background_stores();
    f.set_profiling(true);
    // Through the model function: a staged model's module takes the stages' results too.
    for (int r = 0; r < repeat; ++r) model_fn.run(inputs);
    std::fputs(format_profile(f.profile(), f.run_profile()).c_str(), stdout);
    if (line.has("--trace")) {
      write_file_atomic(line.value("--trace"), f.trace_json());
      std::printf("trace: %s\n", line.value("--trace").c_str());
    }
    f.set_profiling(false);
  }
  return 0;
}

}  // namespace

const Command& run_command() {
  static const Command c{
      "run",
      "[-v] MODEL --input NAME=FILE [--input ...] --output-dir DIR",
      "compile and run MODEL; write DIR/<output name>.npy",
      "Compiles MODEL, reads every graph input from a .npy or .safetensors file, runs the\n"
      "module once and writes each graph output to DIR/<output name>.npy (DIR is created if\n"
      "needed), where bytes of <output name> other than letters, digits, '_', '-' and '.'\n"
      "become '_' (and a leading '.' too), so no output is written outside DIR; two outputs\n"
      "that would share a file are an error. A missing, unknown or mis-shaped input is an\n"
      "error naming it and the expected dtype and shape.\n",
      {input_flag(),
       {"--output-dir", "-o", "DIR", "where outputs are written (required)"},
       {"--output-format", "", "FORMAT",
        "npy (default), or safetensors: every output in DIR/outputs.safetensors\n"
        "under its name"},
       {"--profile", "", "",
        "after the run, time --repeat more runs and print each step's time, share,\n"
        "parts, bytes moved and GFLOP/s, slowest first, and how busy each thread was"},
       {"--repeat", "", "N", "runs to profile (default 10)"},
       {"--trace", "", "FILE.json",
        "with --profile: every thunk call and split part of those runs, per\n"
        "thread, for chrome://tracing or Perfetto"},
       {"--generic-start", "", "",
        "on a cache miss, run through the generic tier (precompiled kernels and\n"
        "reference code) while the module compiles in the background, then store\n"
        "the module (the default, unless $KILN_GENERIC_START=0)"},
       {"--no-generic-start", "", "",
        "on a cache miss, wait for the module and run it: first results bit for bit\n"
        "those of every later run"},
       passes_flag(),
       precision_flag(),
       device_flag(),
       {"--device-io", "", "",
        "with --device cuda: the module takes its inputs and gives its outputs in\n"
        "device memory (copied there and back outside the timed run)"}},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
