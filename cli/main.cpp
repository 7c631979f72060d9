// The `kiln` command: compile, run and inspect models.
//
// Exit codes: 0 success; 1 the model, the compile or the run failed (the error is printed);
// 2 wrong usage (a one-line reason is printed).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_store.h"
#include "cache/entry_signature.h"
#include "cache/remote_tier.h"
#include "compiler/background_stores.h"
#include "compiler/compile.h"
#include "compiler/entry_layout.h"
#include "compiler/export.h"
#include "compiler/report.h"
#include "frontend/model_function.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "ops/op_library.h"
#include "ops/registry.h"
#include "rewrite/grad.h"
#include "rewrite/pipeline.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/npy.h"
#include "runtime/profile_table.h"
#include "runtime/safetensors.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/quantity.h"
#include "util/strings.h"

namespace {

using Clock = std::chrono::steady_clock;

struct UsageError {
  std::string message;
};

const char* kMainHelp = R"(kiln — a tensor compiler: models become cached native modules.

usage: kiln [-v] <command> [options]

commands:
  compile MODEL            compile MODEL to a native module; print its key and paths
  run MODEL --input NAME=FILE.npy ... --output-dir DIR
                           compile and run MODEL; write DIR/<output name>.npy
  source [--graph] MODEL   print the stitched C source of MODEL's module (--graph: the
                           graph after the rewrite passes instead)
  export MODEL -o DIR      write MODEL as a standalone C library: DIR/libNAME.so, NAME.h,
                           README.txt (kiln help export)
  report MODEL -o FILE.html
                           one self-contained page: the optimized graph, each node's
                           code, the passes, the cache story, a profile (kiln help report)
  cache SUBCOMMAND         inspect and maintain the kernel cache (kiln help cache)
  grad MODEL --input NAME=FILE.npy ... --output-dir DIR [--wrt NAME ...]
                           the gradient of the sum of MODEL's first output with respect
                           to its weights (or the named values): DIR/grad_<name>.npy
  ops                      list the ops kiln knows: built-in, and those of loaded op
                           libraries with their ONNX names and forms
  help [COMMAND]           show help for a command

options:
  -v, --verbose            print the time of each phase (load, key, lookup, rewrite,
                           codegen, compile, module load, prepare weights, run) to stderr,
                           and on a compile the kernels reused and compiled
  --device cpu|cuda        where nodes run (compile/run/source): cuda places every node
                           with CUDA code on the GPU (KILN_CUDA_DEVICE=emulator: the CPU
                           emulator), with transfers where values cross; default cpu
  --device-io              with --device cuda: the module takes its inputs and gives its
                           outputs in device memory (kiln run copies them there and back
                           outside the timed run)
  --passes SPEC            rewrite passes for compile/run/source: "-fusion,-cse" disables
                           those, "none" all (default: $KILN_PASSES, else all of fold,
                           simplify, cse, norm, layout, winograd, pack, views,
                           attention, fusion, reduction, epilogue, dce);
                           the passes are part of the cache key
  --op-library PATH        load a custom-op library (repeatable; every command; see
                           docs/op-libraries.md); with -v, print what it registered
  -h, --help               show help

MODEL is a kiln JSON graph (.json; see docs/json-format.md).

environment:
  KILN_CACHE_DIR   the kernel cache (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)
  KILN_CACHE       0: bypass the cache (build in <cache>/scratch, never reuse)
  KILN_CACHE_MAX_SIZE  size cap enforced after each publish (default 2G)
  KILN_CC          C compiler (default clang)
  KILN_CFLAGS      extra flags appended to kiln's own
  KILN_JOBS        kernels compiled at once on a miss (default: the core count)
  KILN_PROGRESS    0: no "compiling kernels i/N" line on a terminal (never
                   drawn when stderr is not a terminal)
  KILN_KERNELS     0: build each module as one translation unit with no shared
                   kernels (the layout before kernels; slower cold compiles)
  KILN_DEBUG       1: phase timings, 2: cache decisions and the graph after each
                   rewrite pass, 3: generated source
  KILN_PASSES      default for --passes
  KILN_OP_LIBRARIES  custom-op libraries to load, colon-separated (as --op-library)

exit codes: 0 success, 1 failure (bad model, compile or run error), 2 wrong usage
)";

const char* kCompileHelp = R"(usage: kiln compile [-v] [--explain] MODEL

Compiles MODEL into one native module, through the kernel cache, and prints its key,
the module's path and the path of its generated C source. On a miss the module is linked
from kernels: each distinct kernel is looked up in the cache by its own key and only the
missing ones are compiled, KILN_JOBS at a time; -v says how many were reused. Exits 1 with the error
(naming the node and the line of its code) when the model is invalid or the module does
not compile.

options:
  -v, --verbose   also print whether the cache hit or missed, and the phase times
  --explain       on a miss, name the nearest cached entry for the same graph and
                  which key component differs (toolchain, flags, an op's version, ...)
)";

const char* kCacheHelp = R"(usage: kiln cache SUBCOMMAND

  ls                 every entry: key, model, size, age, hits (most recently used first)
  show KEY           an entry's meta, key components and source path (KEY may be a prefix)
  stats              entries, bytes, hits, misses, hit rate, compile time saved
  verify             check every entry's files (size, SHA-256); bad ones go to quarantine/
                     (exit 1 if any was bad)
  gc [--max-size SIZE] [--max-age AGE]
                     remove least-recently-used entries until the cache fits SIZE (default
                     KILN_CACHE_MAX_SIZE or 2G) and none is unused for longer than AGE
                     (e.g. 7d, 12h); entries loaded by a live process are kept
  clear              remove every entry not in use, quarantine/, failed/ and abandoned
                     scratch folders (folders a live process works in stay)
  reindex            rebuild index.sqlite from objects/
  remote status      the remote tier (KILN_REMOTE_CACHE): reachable? namespace, entries,
                     trusted keys, whether this process may write (exit 1 if unreachable)
  push [KEY...]      upload local entries (all when no KEY), signed with
                     KILN_CACHE_SIGNING_KEY
  pull KEY...        fetch entries from the remote tier, verify and store them locally
  keygen NAME [--out DIR]
                     make an Ed25519 key pair for signing entries: DIR/NAME.secret (mode
                     0600; for KILN_CACHE_SIGNING_KEY) and DIR/NAME.public (one line
                     NAME:base64; for KILN_CACHE_TRUSTED_KEYS)

The cache lives in $KILN_CACHE_DIR (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln). It is
private to its owner unless KILN_CACHE_UMASK (e.g. 002) shares it with a group; see
docs/cache.md, "Security model".
)";

const char* kRunHelp =
    R"(usage: kiln run [-v] MODEL --input NAME=FILE [--input ...] --output-dir DIR

Compiles MODEL, reads every graph input from a .npy or .safetensors file, runs the
module once and writes each graph output to DIR/<output name>.npy (DIR is created if
needed), where bytes of <output name> other than letters, digits, '_', '-' and '.' become
'_' (and a leading '.' too), so no output is written outside DIR; two outputs that would
share a file are an error. A missing, unknown or mis-shaped input is an error naming it and
the expected dtype and shape.

options:
  -i, --input NAME=FILE.npy   one per graph input
  -i, --input NAME=FILE.safetensors
                              the file's tensor NAME, else its only tensor
  -i, --input FILE.safetensors
                              every tensor of the file named like a graph input
  -o, --output-dir DIR        where outputs are written (required)
  --output-format FORMAT      npy (default), or safetensors: every output in
                              DIR/outputs.safetensors under its name
  --profile                   after the run, time --repeat more runs (default 10) and
                              print each step's time, share, parts, bytes moved and
                              GFLOP/s, slowest first, and how busy each thread was
  --repeat N                  runs to profile
  --trace FILE.json           with --profile: every thunk call and split part of those
                              runs, per thread, for chrome://tracing or Perfetto
)";

const char* kGradHelp =
    R"(usage: kiln grad [-v] MODEL --input NAME=FILE [--input ...] --output-dir DIR [--wrt NAME ...]

Builds the gradient of sum(first output of MODEL) with respect to each --wrt value (a graph
input or an initializer / parameter; default: every floating-point initializer) by
reverse-mode autodiff, compiles forward and backward into one module, runs it on the inputs
and writes each gradient to DIR/grad_<name>.npy, where bytes of <name> other than letters,
digits, '_', '-' and '.' become '_' (as for kiln run). The cost's value goes to stdout. A value the cost
reaches only through integers, comparisons or ops without a gradient is an error naming
the node, the op and the input.

options:
  -i, --input NAME=FILE.npy   one per graph input (as for kiln run)
  -o, --output-dir DIR        where the gradients are written (required)
  --wrt NAME                  a value to differentiate with respect to (repeatable)
)";

const char* kExportHelp =
    R"(usage: kiln export [-v] MODEL -o DIR [--name NAME] [--weights embed|file] [--passes SPEC]

Writes MODEL as a standalone shared library a C or C++ program links without kiln:
  DIR/libNAME.so       the compiled model and the parts of kiln's runtime it needs
                       (executor, memory plan, support kernels), statically linked;
                       OpenBLAS only when the model calls it
  DIR/NAME.h           its C API (C11 and C++): NAME_create / NAME_run / NAME_destroy,
                       the inputs' and outputs' names, dtypes and shapes, error strings
  DIR/NAME.safetensors the weights, with --weights file (default: embedded in the .so)
  DIR/README.txt       the model's signature and how to build against it
The code is compiled for this machine's CPU. Dynamic dimensions stay dynamic when each
op's output shape follows them (batch and sequence axes do).

options:
  -o, --output-dir DIR    where the files go (created if needed)
  --name NAME             a C identifier (default: the model's name made into one)
  --weights embed|file    the weights inside libNAME.so, or NAME.safetensors beside it
)";

const char* kSourceHelp = R"(usage: kiln source [--graph] [--passes SPEC] MODEL

Prints the stitched C source of MODEL's module: one thunk per node (a fused group is one
node), each under a banner naming the node, its op, inputs, outputs and their types.

options:
  --graph         print the optimized graph (after the rewrite passes) instead
  --passes SPEC   "-fusion,-cse" disables those passes, "none" all
)";

const char* kOpsHelp = R"(usage: kiln ops [--op-library PATH ...]

Lists the ops kiln can build: the built-in ones, then for every loaded op library
(--op-library, KILN_OP_LIBRARIES) its name, version, ABI, file and SHA-256, and each of
its ops with the ONNX domain and type it loads from, its cache_version and its forms:
c (C fragments stitched into the module), compute (a precompiled function the module
calls), state (set up once per module), perform (a reference), cuda, grad.
)";

const char* kReportHelp =
    R"(usage: kiln report [-v] MODEL -o FILE.html [--input NAME=FILE ...] [--repeat N]
                   [--passes SPEC] [--device cpu|cuda]

Compiles MODEL and writes one self-contained HTML page (no network, no external file;
open it from disk in any browser):
  - the optimized graph as a picture: nodes coloured by kind (GEMM/conv, fused
    elementwise, elementwise, reduction, data movement), edges labelled with dtype and
    shape (? marks a dynamic dimension); click a node for its op, inputs and outputs,
    and its generated code with the source-map origin of every fragment;
  - the rewrite passes, each with its node counts and the ops it removed and added;
  - the cache: key, hit or miss, key components, compile time per phase and per kernel;
  - with every input given: a profile of --repeat runs (default 10) per node, sorted,
    with the five slowest marked on the graph.
#node=N at the end of the page's address selects node N.

options:
  -o, --output FILE.html      where the page goes (required)
  -i, --input NAME=FILE       as for kiln run; all inputs or none
  --repeat N                  profiled runs
)";

const char* help_for(const std::string& cmd) {
  if (cmd == "report") return kReportHelp;
  if (cmd == "compile") return kCompileHelp;
  if (cmd == "run") return kRunHelp;
  if (cmd == "grad") return kGradHelp;
  if (cmd == "source") return kSourceHelp;
  if (cmd == "export") return kExportHelp;
  if (cmd == "cache") return kCacheHelp;
  if (cmd == "ops") return kOpsHelp;
  return nullptr;
}

struct Args {
  std::string command;
  bool verbose = false;
  bool help = false;
  std::vector<std::string> positional;
  std::vector<std::string> inputs;
  std::vector<std::string> wrt;  // kiln grad
  std::string output_dir;
  std::string output_format;  // kiln run: npy or safetensors
  std::string name, weights;  // kiln export
  std::string out_dir;        // kiln cache keygen --out
  bool explain = false;
  bool graph = false;
  std::optional<std::string> passes;
  std::string device;
  bool device_io = false;
  std::string max_size, max_age;
  std::vector<std::string> op_libraries;
  bool profile = false;
  std::string trace;  // kiln run --trace FILE
  int repeat = 10;    // kiln run --profile
};

Args parse(int argc, char** argv) {
  Args a;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= args.size()) throw UsageError{flag + " needs a value"};
      return args[++i];
    };
    if (s == "-v" || s == "--verbose") {
      a.verbose = true;
    } else if (s == "-h" || s == "--help") {
      a.help = true;
    } else if (s == "-i" || s == "--input") {
      a.inputs.push_back(value(s));
    } else if (s.rfind("--input=", 0) == 0) {
      a.inputs.push_back(s.substr(8));
    } else if (s == "--wrt") {
      a.wrt.push_back(value(s));
    } else if (s == "--explain") {
      a.explain = true;
    } else if (s == "--graph") {
      a.graph = true;
    } else if (s == "--passes") {
      a.passes = value(s);
    } else if (s.rfind("--passes=", 0) == 0) {
      a.passes = s.substr(9);
    } else if (s == "--device-io") {
      a.device_io = true;
    } else if (s == "--device") {
      a.device = value(s);
    } else if (s.rfind("--device=", 0) == 0) {
      a.device = s.substr(9);
    } else if (s == "--op-library") {
      a.op_libraries.push_back(value(s));
    } else if (s.rfind("--op-library=", 0) == 0) {
      a.op_libraries.push_back(s.substr(13));
    } else if (s == "--max-size") {
      a.max_size = value(s);
    } else if (s == "--max-age") {
      a.max_age = value(s);
    } else if (s == "--out") {
      a.out_dir = value(s);
    } else if (s == "--name") {
      a.name = value(s);
    } else if (s == "--weights") {
      a.weights = value(s);
    } else if (s == "--profile") {
      a.profile = true;
    } else if (s == "--trace") {
      a.trace = value(s);
    } else if (s == "--repeat") {
      const std::string v = value(s);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1000000) {
        throw UsageError{"--repeat expects a number of runs from 1 to 1000000, got '" + v + "'"};
      }
      a.repeat = static_cast<int>(n);
    } else if (s == "--output-format") {
      a.output_format = value(s);
    } else if (s == "-o" || s == "--output-dir" || s == "--output") {
      a.output_dir = value(s);
    } else if (s.rfind("--output-dir=", 0) == 0) {
      a.output_dir = s.substr(13);
    } else if (!s.empty() && s[0] == '-' && s != "-") {
      throw UsageError{"unknown option '" + s + "'"};
    } else if (a.command.empty()) {
      a.command = s;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

double ms(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void print_times(const kiln::CompileInfo& info, double load_ms, double run_ms) {
  std::fprintf(stderr, "cache %s%s\n", kiln::to_string(info.cache),
               info.cache == kiln::CacheStatus::kHit && info.times.wait_ms > 1
                   ? (" (waited " + kiln::format_double(std::round(info.times.wait_ms)) +
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
  if (!info.weights.empty() && info.weights != "none needed")
    std::fprintf(stderr, "weights prepared: %s\n",
                 info.weights == "prepared" ? "now" : ("from " + info.weights).c_str());
  const kiln::KernelReport& k = info.kernels;
  if (k.kernels > 0) {
    std::fprintf(stderr,
                 "kernels %d (%d reused, %d compiled, %d jobs) | kernel compiles %.2f ms | binding "
                 "%.2f ms | link %.2f ms\n",
                 k.kernels, k.reused, k.compiled, k.jobs, info.times.kernels_ms,
                 info.times.binding_ms, info.times.link_ms);
  }
  if (!info.device.empty()) std::fprintf(stderr, "device  cuda: %s\n", info.device.c_str());
}

std::string one_model(const Args& a) {
  if (a.positional.empty()) throw UsageError{"kiln " + a.command + ": missing MODEL"};
  if (a.positional.size() > 1)
    throw UsageError{"kiln " + a.command + ": unexpected argument '" + a.positional[1] + "'"};
  return a.positional[0];
}

void no_cache_flags(const Args& a) {
  if (!a.max_size.empty() || !a.max_age.empty()) {
    throw UsageError{"--max-size/--max-age belong to 'kiln cache gc'"};
  }
}

kiln::CompileOptions compile_options(const Args& a) {
  kiln::CompileOptions options;
  if (a.passes) {
    kiln::select_passes(*a.passes, "--passes");  // reject a bad spec naming the flag
    options.passes = a.passes;
  }
  if (!a.device.empty()) {
    if (a.device != "cpu" && a.device != "cuda") {
      throw UsageError{"--device expects cpu or cuda, got '" + a.device + "'"};
    }
    options.device = a.device;
  }
  if (a.device_io && options.device != "cuda") {
    throw UsageError{"--device-io needs --device cuda"};
  }
  options.device_io = a.device_io;
  return options;
}

int cmd_export(const Args& a) {
  if (!a.inputs.empty()) throw UsageError{"kiln export takes no --input"};
  no_cache_flags(a);
  std::string model = one_model(a);
  if (a.output_dir.empty()) throw UsageError{"kiln export: -o DIR is required"};
  if (!a.weights.empty() && a.weights != "embed" && a.weights != "file") {
    throw UsageError{"--weights expects embed or file, got '" + a.weights + "'"};
  }
  if (!a.device.empty() && a.device != "cpu")
    throw UsageError{"kiln export makes CPU libraries only"};
  kiln::ExportOptions options;
  options.out_dir = a.output_dir;
  options.name = a.name;
  options.embed_weights = a.weights != "file";
  options.compile = compile_options(a);
  auto t = Clock::now();
  kiln::ExportResult r = kiln::export_model(kiln::load_model(model), options);
  std::printf("%s  %.1f MB%s\n%s\n", r.library.c_str(), r.library_bytes / 1e6,
              r.links_blas ? "  (links libopenblas)" : "", r.header.c_str());
  if (!r.weights.empty()) std::printf("%s\n", r.weights.c_str());
  std::printf("%s\n", r.readme.c_str());
  if (a.verbose) std::fprintf(stderr, "export %.0f ms\n", ms(t));
  return 0;
}

int cmd_compile(const Args& a) {
  if (!a.inputs.empty() || !a.output_dir.empty())
    throw UsageError{"kiln compile takes no --input/--output-dir"};
  no_cache_flags(a);
  std::string model = one_model(a);
  auto t = Clock::now();
  kiln::Graph g = kiln::load_model(model);
  double load_ms = ms(t);
  kiln::CompileOptions options = compile_options(a);
  options.explain = a.explain;
  kiln::Function f = kiln::compile(g, options);
  if (!f.info().cache_note.empty()) std::fprintf(stderr, "%s\n", f.info().cache_note.c_str());
  std::printf("key     %s\nmodule  %s\nsource  %s\n", f.info().key.c_str(),
              f.info().module_path.c_str(), f.info().source_path.c_str());
  if (a.verbose) print_times(f.info(), load_ms, -1);
  return 0;
}

int cmd_source(const Args& a) {
  if (!a.inputs.empty() || !a.output_dir.empty())
    throw UsageError{"kiln source takes no --input/--output-dir"};
  no_cache_flags(a);
  kiln::Graph g = kiln::load_model(one_model(a));
  if (a.graph) {
    std::fputs(kiln::optimized_graph(g, compile_options(a)).to_string().c_str(), stdout);
  } else {
    std::fputs(kiln::generate_source(g, compile_options(a)).c_str(), stdout);
  }
  return 0;
}

// The --input flags, read before the model loads (a malformed flag is a usage error).
struct InputSpecs {
  std::map<std::string, std::string> files;  // NAME=FILE
  std::vector<std::string> bundles;  // FILE.safetensors without NAME=: inputs by tensor name
  bool any = false;
};

InputSpecs parse_input_specs(const Args& a, const std::string& command) {
  InputSpecs specs;
  auto& files = specs.files;
  auto& bundles = specs.bundles;
  specs.any = !a.inputs.empty();
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos && kiln::is_safetensors_path(spec)) {
      bundles.push_back(spec);
      continue;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError{"kiln " + command +
                       ": --input expects NAME=FILE.npy, NAME=FILE.safetensors or "
                       "FILE.safetensors, got '" +
                       spec + "'"};
    }
    if (!files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second) {
      throw UsageError{"kiln " + command + ": input '" + spec.substr(0, eq) + "' given twice"};
    }
  }
  return specs;
}

// Every input the specs name, from .npy or .safetensors files, checked against the graph's
// inputs before anything compiles (a typo should not cost a compile). `command` names the
// CLI command in messages; with `optional`, giving no input at all is allowed.
std::map<std::string, kiln::Tensor> read_inputs(const InputSpecs& specs,
                                                const std::vector<kiln::ModelInput>& model_inputs,
                                                const std::string& command, bool optional) {
  const auto& files = specs.files;
  std::map<std::string, kiln::Tensor> inputs;
  for (const auto& path : specs.bundles) {
    kiln::Safetensors st = kiln::read_safetensors(path);
    for (auto& [name, tensor] : st.tensors) {
      bool input = false;
      for (const auto& v : model_inputs) input = input || v.name == name;
      if (!input) continue;  // a weights file may hold more than the inputs
      if (files.count(name) || inputs.count(name)) {
        throw UsageError{"kiln " + command + ": input '" + name + "' given twice (again in " +
                         path + ")"};
      }
      inputs[name] = tensor;
    }
  }
  for (const auto& [name, file] : files) {
    bool known = false;
    for (const auto& v : model_inputs) known = known || v.name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const auto& v : model_inputs) names.push_back(v.name + " (" + v.type.to_string() + ")");
      throw kiln::UserError("unknown input '" + name + "'; the model takes " +
                            kiln::join(names, ", "));
    }
  }
  if (!(optional && !specs.any)) {
    for (const auto& v : model_inputs) {
      if (!files.count(v.name) && !inputs.count(v.name)) {
        throw kiln::UserError("missing input '" + v.name + "': expected " + v.type.to_string() +
                              "; pass --input " + v.name + "=FILE.npy");
      }
    }
  }
  for (const auto& [name, file] : files) inputs[name] = kiln::read_tensor_file(file, name);
  return inputs;
}

std::map<std::string, kiln::Tensor> read_inputs(const InputSpecs& specs, const kiln::Graph& g,
                                                const std::string& command, bool optional) {
  std::vector<kiln::ModelInput> model_inputs;
  for (const auto* v : g.inputs()) model_inputs.push_back({v->name, v->type});
  return read_inputs(specs, model_inputs, command, optional);
}

// DIR/<prefix><file name>.npy for each named value: kiln::file_name_for keeps [A-Za-z0-9._-]
// (so output "y" is y.npy), makes every other byte '_' and never leaves DIR ("../x", "/abs",
// NUL); two values that would share a file are an error naming both, never an overwrite.
std::vector<std::filesystem::path> value_files(const std::string& dir,
                                               const std::vector<std::string>& names,
                                               const std::string& prefix) {
  std::vector<std::filesystem::path> paths;
  std::map<std::string, std::string> taken;
  for (const auto& name : names) {
    const std::string file = prefix + kiln::file_name_for(name) + ".npy";
    if (auto [it, fresh] = taken.emplace(file, name); !fresh) {
      throw kiln::UserError("outputs " + kiln::in_quotes(it->second) + " and " +
                            kiln::in_quotes(name) + " would both be written to " + file +
                            "; use --output-format safetensors, which keeps names as they are");
    }
    paths.push_back(std::filesystem::path(dir) / file);
  }
  return paths;
}

int cmd_run(const Args& a) {
  no_cache_flags(a);
  std::string model = one_model(a);
  if (a.output_dir.empty()) throw UsageError{"kiln run: --output-dir DIR is required"};
  if (!a.trace.empty() && !a.profile) throw UsageError{"kiln run: --trace FILE needs --profile"};
  if (!a.output_format.empty() && a.output_format != "npy" && a.output_format != "safetensors") {
    throw UsageError{"--output-format expects npy or safetensors, got '" + a.output_format + "'"};
  }
  const InputSpecs specs = parse_input_specs(a, "run");
  auto t = Clock::now();
  // A model whose graph depends on an input's value (Reshape's shape given as an input) is
  // built once that value is read.
  kiln::ModelFunction model_fn(model, compile_options(a));
  std::map<std::string, kiln::Tensor> inputs = read_inputs(specs, model_fn.inputs(), "run", false);
  if (a.device_io) {
    for (auto& [name, tensor] : inputs) {
      bool value_input = false;
      for (const auto& v : model_fn.value_inputs()) value_input = value_input || v == name;
      if (!value_input) tensor = kiln::to_device(tensor);
    }
  }
  t = Clock::now();
  auto outputs = model_fn.run(inputs);
  double run_ms = ms(t);
  kiln::Function& f = model_fn.function();
  // Parsing only: the compile phases print on their own (a model built per input value
  // loads inside run()).
  const double load_ms = model_fn.load_ms();
  if (a.device_io) {
    for (auto& o : outputs) o = kiln::to_host(o);
  }
  std::error_code ec;
  std::filesystem::create_directories(a.output_dir, ec);
  if (ec)
    throw kiln::UserError("cannot create output directory '" + a.output_dir + "': " + ec.message());
  if (a.output_format == "safetensors") {
    std::vector<std::pair<std::string, kiln::Tensor>> named;
    for (size_t i = 0; i < outputs.size(); ++i) named.emplace_back(f.output_names()[i], outputs[i]);
    auto path = std::filesystem::path(a.output_dir) / "outputs.safetensors";
    kiln::write_safetensors(path, named);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("%s#%s  %s\n", kiln::terminal_line(path.string()).c_str(),
                  kiln::terminal_line(f.output_names()[i]).c_str(), outputs[i].describe().c_str());
    }
  } else {
    const auto paths = value_files(a.output_dir, f.output_names(), "");
    for (size_t i = 0; i < outputs.size(); ++i) {
      kiln::write_npy(paths[i], outputs[i]);
      std::printf("%s  %s\n", kiln::terminal_line(paths[i].string()).c_str(),
                  outputs[i].describe().c_str());
    }
  }
  if (a.verbose) {
    print_times(f.info(), load_ms, run_ms);
    // NonZero inputs computed before the model, each by a module of its own.
    for (const auto& [value, prefix] : model_fn.stages()) {
      if (!prefix) {
        std::fprintf(stderr, "stage: NonZero of input '%s' on the host\n", value.c_str());
        continue;
      }
      const kiln::CompileInfo& info = prefix->function().info();
      std::fprintf(stderr,
                   "stage: '%s' computed first by its own module (cache %s, compile %.2f ms)\n",
                   value.c_str(), kiln::to_string(info.cache), info.times.compile_ms);
    }
  }
  if (a.profile) {
    f.set_profiling(true);
    // Through the model function: a staged model's module takes the stages' results too.
    for (int r = 0; r < a.repeat; ++r) model_fn.run(inputs);
    std::fputs(kiln::format_profile(f.profile(), f.run_profile()).c_str(), stdout);
    if (!a.trace.empty()) {
      kiln::write_file_atomic(a.trace, f.trace_json());
      std::printf("trace: %s\n", a.trace.c_str());
    }
    f.set_profiling(false);
  }
  return 0;
}

int cmd_grad(const Args& a) {
  no_cache_flags(a);
  const std::string model = one_model(a);
  if (a.output_dir.empty()) throw UsageError{"kiln grad: --output-dir DIR is required"};
  const InputSpecs specs = parse_input_specs(a, "grad");
  auto t = Clock::now();
  kiln::Graph g = kiln::load_model(model);
  const double load_ms = ms(t);
  if (g.outputs().empty()) throw kiln::UserError(model + ": the model has no outputs");
  kiln::Variable* first = g.outputs()[0];
  if (!kiln::is_float(first->type.dtype)) {
    throw kiln::UserError(model + ": the first output '" + first->name + "' is " +
                          first->type.to_string() + "; its sum has no gradient");
  }
  std::vector<kiln::Variable*> wrt;
  if (a.wrt.empty()) {
    for (kiln::Variable* c : g.constants()) {
      if (c->parameter && kiln::is_float(c->type.dtype)) wrt.push_back(c);
    }
    if (wrt.empty()) {
      throw kiln::UserError(model +
                            ": the model has no floating-point initializers; name the "
                            "values to differentiate with --wrt NAME");
    }
  }
  for (const std::string& name : a.wrt) {
    kiln::Variable* v = g.find_variable(name);
    if (!v || v->kind == kiln::VarKind::kNodeOutput) {
      std::vector<std::string> names;
      for (const auto* i : g.inputs()) names.push_back(i->name);
      for (const auto* c : g.constants()) {
        if (c->parameter) names.push_back(c->name);
      }
      throw UsageError{"--wrt " + name + ": " + model +
                       " has no input or initializer named so (it has " + kiln::join(names, ", ") +
                       ")"};
    }
    wrt.push_back(v);
  }
  kiln::Var cost = kiln::sum(kiln::Var(&g, first));
  std::vector<kiln::Variable*> grads = kiln::grad(g, cost.var(), wrt);
  std::vector<kiln::Variable*> outs{cost.var()};
  outs.insert(outs.end(), grads.begin(), grads.end());
  g.set_outputs(outs);
  const kiln::CompileOptions options = compile_options(a);
  kiln::Function f = kiln::compile(g, options);
  std::map<std::string, kiln::Tensor> inputs = read_inputs(specs, g, "grad", false);
  t = Clock::now();
  const std::vector<kiln::Tensor> values = f.run(inputs);
  const double run_ms = ms(t);
  std::error_code ec;
  std::filesystem::create_directories(a.output_dir, ec);
  if (ec)
    throw kiln::UserError("cannot create output directory '" + a.output_dir + "': " + ec.message());
  std::printf("cost sum(%s) = %.9g\n", kiln::terminal_line(first->name).c_str(), values[0].load(0));
  std::vector<std::string> wrt_names;
  for (const auto* v : wrt) wrt_names.push_back(v->name);
  const auto paths = value_files(a.output_dir, wrt_names, "grad_");
  for (size_t i = 0; i < wrt.size(); ++i) {
    kiln::write_npy(paths[i], values[i + 1]);
    std::printf("%s  %s\n", kiln::terminal_line(paths[i].string()).c_str(),
                values[i + 1].describe().c_str());
  }
  if (a.verbose) print_times(f.info(), load_ms, run_ms);
  return 0;
}

int cmd_report(const Args& a) {
  no_cache_flags(a);
  std::string model = one_model(a);
  if (a.output_dir.empty()) throw UsageError{"kiln report: -o FILE.html is required"};
  const InputSpecs specs = parse_input_specs(a, "report");
  auto t = Clock::now();
  kiln::Graph g = kiln::load_model(model);
  kiln::ReportOptions options;
  options.inputs = read_inputs(specs, g, "report", true);
  options.compile = compile_options(a);
  options.repeat = a.repeat;
  const std::string page = kiln::report_html(g, options);
  kiln::write_file_atomic(a.output_dir, page);
  std::printf("%s  %.2f MB%s\n", a.output_dir.c_str(), static_cast<double>(page.size()) / 1e6,
              options.inputs.empty() ? "  (no profile: no inputs given)" : "");
  if (a.verbose) std::fprintf(stderr, "report %.0f ms\n", ms(t));
  return 0;
}

std::string age_text(double then) {
  double s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      then;
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%.0fm", s / 60);
  else if (s < 172800)
    std::snprintf(buf, sizeof buf, "%.0fh", s / 3600);
  else
    std::snprintf(buf, sizeof buf, "%.0fd", s / 86400);
  return buf;
}

std::string resolve_key(kiln::CacheStore& store, const std::string& prefix) {
  if (prefix.size() < 4) throw UsageError{"kiln cache show: give at least 4 characters of the key"};
  for (char c : prefix) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      throw kiln::UserError("'" + prefix + "' is not a cache key or key prefix (lowercase hex)");
    }
  }
  auto keys = store.resolve_prefix(prefix);
  // Rows are only as trustworthy as the index file: a key that is not a key is never used.
  keys.erase(std::remove_if(keys.begin(), keys.end(),
                            [](const std::string& k) { return !kiln::is_cache_key(k); }),
             keys.end());
  if (keys.empty())
    throw kiln::UserError("no cache entry with key '" + prefix + "' in " + store.root().string());
  if (keys.size() > 1 && keys[0] != prefix) {
    throw kiln::UserError("key prefix '" + prefix + "' is ambiguous: " + kiln::join(keys, ", "));
  }
  return keys[0];
}

// kiln cache remote status | push [KEY...] | pull KEY...
int cmd_cache_remote(const Args& a) {
  const std::string sub = a.positional[0];
  kiln::RemoteTier* remote = kiln::RemoteTier::process_default();
  if (!remote) throw kiln::UserError("kiln cache " + sub + ": KILN_REMOTE_CACHE is not set");
  if (sub == "remote") {
    if (a.positional.size() != 2 || a.positional[1] != "status")
      throw UsageError{"kiln cache remote: expected 'status'"};
    std::string why;
    auto entries = remote->status(1000000, &why);
    const auto& c = remote->config();
    std::printf("remote     redis://%s\nnamespace  %s\nreachable  %s\n", c.url.describe().c_str(),
                c.ns.c_str(), entries ? "yes" : ("no (" + why + ")").c_str());
    if (entries) std::printf("entries    %lld\n", static_cast<long long>(*entries));
    auto policy = kiln::SignaturePolicy::from_env();
    std::string names;
    for (const auto& k : policy.trusted) names += (names.empty() ? "" : ", ") + k.name;
    const std::string trusted = !names.empty()     ? names
                                : c.trust_unsigned ? "unsigned entries (KILN_REMOTE_CACHE_TRUST)"
                                                   : "none: reads are refused";
    const std::string writes = remote->can_write() ? "yes, signed by " + policy.signer->name
                                                   : "no (no KILN_CACHE_SIGNING_KEY)";
    std::printf("trusted    %s\nwrites     %s\n", trusted.c_str(), writes.c_str());
    return entries ? 0 : 1;
  }
  auto store = kiln::CacheStore::open(kiln::cache_root());
  store->set_patient(true);
  std::vector<std::string> keys(a.positional.begin() + 1, a.positional.end());
  for (const auto& k : keys) {
    if (!kiln::is_cache_key(k))
      throw kiln::UserError("'" + k + "' is not a cache key (64 hex digits)");
  }
  int done = 0, missing = 0;
  if (sub == "push") {
    if (!remote->can_write())
      throw kiln::UserError(
          "kiln cache push: no KILN_CACHE_SIGNING_KEY: only key holders may upload");
    if (keys.empty()) {
      // Modules: the remote tier serves whole modules; kernel objects and prepared weights
      // stay local.
      for (const auto& r : store->list()) {
        if (r.family != kiln::kKernelFamily && r.family != kiln::kPreparedFamily)
          keys.push_back(r.key);
      }
    }
    for (const auto& k : keys) {
      kiln::LookupResult r = store->lookup(k, false);  // verified before it is uploaded
      if (!r.entry) {
        std::fprintf(stderr, "kiln: %s: not in the local cache%s\n", k.c_str(),
                     r.problem.empty() ? "" : (" (" + r.problem + ")").c_str());
        ++missing;
        continue;
      }
      auto before = remote->counters();
      remote->upload(r.entry->meta, r.entry->dir);
      if (remote->counters().errors > before.errors) return 1;
      ++done;
    }
    std::printf("pushed %d entries to %s\n", done, remote->config().url.describe().c_str());
    return missing ? 1 : 0;
  }
  if (keys.empty()) throw UsageError{"kiln cache pull: expected one or more KEYs"};
  for (const auto& k : keys) {
    auto fetched = remote->fetch(k);
    if (!fetched) {
      std::fprintf(stderr, "kiln: %s: not pulled (missing, rejected or unreachable)\n", k.c_str());
      ++missing;
      continue;
    }
    kiln::WorkFolder staging = store->new_staging(k);
    for (const auto& [name, bytes] : fetched->files)
      kiln::write_file_atomic(staging.path() / name, bytes, store->access().file_mode(), true);
    store->publish(std::move(staging), std::move(fetched->meta));
    ++done;
  }
  std::printf("pulled %d entries into %s\n", done, store->root().c_str());
  return missing ? 1 : 0;
}

int cmd_cache(const Args& a) {
  if (a.positional.empty())
    throw UsageError{
        "kiln cache: missing subcommand (ls, show, stats, verify, gc, clear, reindex, keygen)"};
  const std::string sub = a.positional[0];
  if (sub == "remote" || sub == "push" || sub == "pull") return cmd_cache_remote(a);
  const size_t want_args = sub == "show" || sub == "keygen" ? 2 : 1;
  if (a.positional.size() != want_args) {
    throw UsageError{sub == "show"     ? "kiln cache show: expected one KEY"
                     : sub == "keygen" ? "kiln cache keygen: expected NAME (and --out DIR)"
                                       : "kiln cache " + sub + ": unexpected argument '" +
                                             a.positional.back() + "'"};
  }
  if (sub == "keygen") {
    // Needs no cache folder: a key pair is made once and handed to writers and readers.
    const std::string name = a.positional[1];
    auto [secret, pub] = kiln::generate_key_pair(name);
    const std::filesystem::path dir = a.out_dir.empty() ? "." : a.out_dir;
    const auto secret_file = dir / (name + ".secret"), public_file = dir / (name + ".public");
    std::error_code ec;
    for (const auto& f : {secret_file, public_file}) {
      if (std::filesystem::exists(f, ec))
        throw kiln::UserError("'" + f.string() + "' exists; not overwriting a key");
    }
    kiln::make_dirs(dir, 0700);
    kiln::write_file_atomic(secret_file, secret + "\n", 0600, true);
    kiln::write_file_atomic(public_file, pub + "\n", 0644, true);
    std::printf("secret key %s (KILN_CACHE_SIGNING_KEY)\npublic key %s: %s\n", secret_file.c_str(),
                public_file.c_str(), pub.c_str());
    return 0;
  }
  if (sub != "gc" && (!a.max_size.empty() || !a.max_age.empty())) {
    throw UsageError{"--max-size/--max-age belong to 'kiln cache gc'"};
  }
  static const std::vector<std::string> known{"ls", "show",  "stats",  "verify",
                                              "gc", "clear", "reindex"};
  if (std::find(known.begin(), known.end(), sub) == known.end()) {
    throw UsageError{"kiln cache: unknown subcommand '" + sub +
                     "' (ls, show, stats, verify, gc, clear, reindex, keygen)"};
  }
  auto store = kiln::CacheStore::open(kiln::cache_root());
  store->set_patient(true);  // maintenance may wait for a busy index; compiles never do
  if (sub == "ls") {
    auto rows = store->list();
    // Kernel objects, prepared weight sets and imported models are named by hash: summed up,
    // not listed.
    size_t kernels = 0, prepared = 0, models = 0;
    uint64_t kernel_bytes = 0, prepared_bytes = 0, model_bytes = 0;
    std::erase_if(rows, [&](const kiln::IndexRow& r) {
      if (r.family == kiln::kKernelFamily) {
        ++kernels;
        kernel_bytes += r.size;
        return true;
      }
      if (r.family == kiln::kPreparedFamily) {
        ++prepared;
        prepared_bytes += r.size;
        return true;
      }
      if (r.family == kiln::kModelFamily) {
        ++models;
        model_bytes += r.size;
        return true;
      }
      return false;
    });
    std::printf("%-16s  %-20s %10s %6s %6s %6s\n", "KEY", "MODEL", "SIZE", "AGE", "USED", "HITS");
    for (const auto& r : rows) {
      std::printf("%-16s  %-20s %10s %6s %6s %6lld\n", r.key.substr(0, 16).c_str(),
                  kiln::terminal_line(r.label.substr(0, 20)).c_str(),
                  kiln::format_size(r.size).c_str(), age_text(r.created).c_str(),
                  age_text(r.last_used).c_str(), static_cast<long long>(r.hits));
    }
    std::printf("%zu entries", rows.size());
    if (kernels)
      std::printf(" (and %zu kernel objects, %s)", kernels,
                  kiln::format_size(kernel_bytes).c_str());
    if (prepared)
      std::printf(" (and %zu prepared weight sets, %s)", prepared,
                  kiln::format_size(prepared_bytes).c_str());
    if (models)
      std::printf(" (and %zu imported models, %s)", models, kiln::format_size(model_bytes).c_str());
    std::printf("\n");
  } else if (sub == "show") {
    std::string key = resolve_key(*store, a.positional[1]);
    auto meta = store->read_meta(key);
    if (!meta)
      throw kiln::UserError("cache entry " + key +
                            " has no readable meta.json (run 'kiln cache verify')");
    std::printf(
        "key        %s\nmodel      %s\nsummary    %s\ncreated    %s ago\ncompile    %.1f ms\n",
        key.c_str(), kiln::terminal_line(meta->label).c_str(),
        kiln::terminal_line(meta->summary).c_str(), age_text(meta->created).c_str(),
        meta->compile_ms);
    if (auto r = store->row(key)) {
      std::printf("hits       %lld (last used %s ago)\n", static_cast<long long>(r->hits),
                  age_text(r->last_used).c_str());
    }
    std::printf(
        "folder     %s\nsource     %s\nfiles\n", store->entry_dir(key).c_str(),
        (store->entry_dir(key) / (meta->file("kernel.c") ? "kernel.c" : "module.c")).c_str());
    for (const auto& f : meta->files) {
      std::printf("  %-10s %10llu bytes  sha256 %s\n", f.name.c_str(),
                  static_cast<unsigned long long>(f.size), f.sha256.c_str());
    }
    std::printf("key components\n");
    for (const auto& [name, value] : meta->components) {
      if (value.find('\n') == std::string::npos) {
        std::printf("  %-18s %s\n", kiln::terminal_line(name).c_str(),
                    kiln::terminal_line(value).c_str());
      } else {
        std::printf("  %s:\n", kiln::terminal_line(name).c_str());
        for (const auto& line : kiln::split_lines(value))
          std::printf("    %s\n", kiln::terminal_line(line).c_str());
      }
    }
  } else if (sub == "stats") {
    auto t = store->stats();
    double lookups = static_cast<double>(t.hits + t.misses);
    std::printf(
        "cache      %s\nentries    %lld\nbytes      %llu (%s; cap %s)\nhits       %lld\nmisses     "
        "%lld\n"
        "hit rate   %.1f%%\ncompiles   %lld\nsaved      %.1f s of compile time\n",
        store->root().c_str(), static_cast<long long>(t.entries - t.kernels - t.prepared - t.models),
        static_cast<unsigned long long>(t.bytes), kiln::format_size(t.bytes).c_str(),
        kiln::format_size(kiln::CacheStore::default_max_size()).c_str(),
        static_cast<long long>(t.hits), static_cast<long long>(t.misses),
        lookups > 0 ? 100.0 * static_cast<double>(t.hits) / lookups : 0.0,
        static_cast<long long>(t.compiles), t.saved_ms / 1000.0);
    if (t.kernels || t.kernel_hits || t.kernel_compiles) {
      std::printf("kernels    %lld objects (%s), %lld reused, %lld compiled, %.1f s saved\n",
                  static_cast<long long>(t.kernels), kiln::format_size(t.kernel_bytes).c_str(),
                  static_cast<long long>(t.kernel_hits), static_cast<long long>(t.kernel_compiles),
                  t.kernel_saved_ms / 1000.0);
    }
    if (t.prepared || t.prepared_hits || t.prepared_stores) {
      std::printf("prepared   %lld weight sets (%s), %lld reused, %lld stored\n",
                  static_cast<long long>(t.prepared), kiln::format_size(t.prepared_bytes).c_str(),
                  static_cast<long long>(t.prepared_hits),
                  static_cast<long long>(t.prepared_stores));
    }
    if (t.models || t.model_hits || t.model_stores) {
      std::printf("models     %lld imported (%s), %lld reused, %lld stored\n",
                  static_cast<long long>(t.models), kiln::format_size(t.model_bytes).c_str(),
                  static_cast<long long>(t.model_hits), static_cast<long long>(t.model_stores));
    }
    if (std::getenv("KILN_REMOTE_CACHE") || t.remote_hits || t.remote_misses || t.remote_errors) {
      std::printf(
          "remote     %lld hits, %lld misses, %lld rejected, %lld errors, %lld uploads, %s moved\n",
          static_cast<long long>(t.remote_hits), static_cast<long long>(t.remote_misses),
          static_cast<long long>(t.remote_rejects), static_cast<long long>(t.remote_errors),
          static_cast<long long>(t.remote_uploads),
          kiln::format_size(static_cast<uint64_t>(t.remote_bytes)).c_str());
    }
  } else if (sub == "verify") {
    auto r = store->verify_all();
    for (const auto& b : r.bad) std::printf("bad  %s\n", b.c_str());
    std::printf("%d entries good, %zu bad (moved to %s)\n", r.good, r.bad.size(),
                (store->root() / "quarantine").c_str());
    return r.bad.empty() ? 0 : 1;
  } else if (sub == "gc" || sub == "clear") {
    kiln::GcReport r;
    if (sub == "gc") {
      std::optional<uint64_t> size = kiln::CacheStore::default_max_size();
      std::optional<double> age;
      if (!a.max_size.empty()) size = kiln::parse_size(a.max_size, "--max-size");
      // 0 is an age: "unused for any time at all".
      if (!a.max_age.empty())
        age = kiln::parse_duration(a.max_age, "--max-age", 0, 100 * 365 * 86400.0);
      r = store->gc(size, age, true);
    } else {
      r = store->clear();
    }
    std::printf("removed %d entries (%s)", r.removed, kiln::format_size(r.removed_bytes).c_str());
    if (!r.in_use.empty()) std::printf("; kept %zu in use by a live process", r.in_use.size());
    if (r.swept) std::printf("; cleaned %d leftovers", r.swept);
    std::printf("\n");
    for (const auto& k : r.in_use) std::printf("in use  %s\n", k.c_str());
  } else {
    std::printf("indexed %d entries from %s\n", store->reindex(),
                (store->root() / "objects").c_str());
  }
  return 0;
}

}  // namespace

int cmd_ops(const Args& a) {
  if (!a.positional.empty())
    throw UsageError{"kiln ops: unexpected argument '" + a.positional[0] + "'"};
  std::vector<std::string> builtin;
  for (const auto& name : kiln::OpRegistry::instance().names()) {
    if (!kiln::find_library_op(name)) builtin.push_back(name);
  }
  std::printf("built-in ops (%zu): %s\n", builtin.size(), kiln::join(builtin, ", ").c_str());
  for (const auto& lib : kiln::loaded_op_libraries()) {
    std::printf("\nop library %s%s%s\n  file     %s\n  sha256   %s\n  abi      %s\n",
                lib->name.c_str(), lib->version.empty() ? "" : " ", lib->version.c_str(),
                lib->path.c_str(), lib->sha256.c_str(), lib->abi().c_str());
    std::printf("  %-28s %-28s %-8s %s\n", "OP", "ONNX", "VERSION", "FORMS");
    for (const auto& name : lib->ops) {
      auto d = kiln::find_library_op(name);
      if (!d) continue;
      const std::string onnx =
          d->has_onnx ? (d->onnx_domain.empty() ? "" : d->onnx_domain + ":") + d->onnx_op_type
                      : "-";
      std::printf("  %-28s %-28s %-8d %s\n", name.c_str(), onnx.c_str(), d->def.cache_version,
                  kiln::join(d->forms(), ", ").c_str());
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
    if (a.command.empty()) {
      if (a.help) {
        std::fputs(kMainHelp, stdout);
        return 0;
      }
      throw UsageError{"missing command (try 'kiln --help')"};
    }
    if (a.command == "help") {
      const char* h = a.positional.empty() ? kMainHelp : help_for(a.positional[0]);
      if (!h) throw UsageError{"no such command '" + a.positional[0] + "'"};
      std::fputs(h, stdout);
      return 0;
    }
    const char* h = help_for(a.command);
    if (!h) throw UsageError{"unknown command '" + a.command + "' (try 'kiln --help')"};
    if (a.help) {
      std::fputs(h, stdout);
      return 0;
    }
    for (const auto& path : a.op_libraries) {
      auto lib = kiln::load_op_library(path);
      if (a.verbose) {
        std::fprintf(stderr, "op library %s (%s, abi %s): %s\n", lib->name.c_str(),
                     lib->path.c_str(), lib->abi().c_str(), kiln::join(lib->ops, ", ").c_str());
      }
    }
    kiln::load_env_op_libraries();
    kiln::install_entry_layout();  // cache verify, pull and gc know what an entry must hold
    // Kernels compiling show i/N on a terminal; a pipe or a log gets nothing (KILN_PROGRESS=0
    // turns it off on a terminal too).
    const char* progress_env = std::getenv("KILN_PROGRESS");
    kiln::set_progress_display(::isatty(STDERR_FILENO) == 1 &&
                               !(progress_env && std::string(progress_env) == "0"));
    // Cache stores written behind the command are finished before it returns.
    struct StoresFinished {
      ~StoresFinished() { kiln::wait_for_background_stores(); }
    } stores_finished;
    if (a.command == "ops") return cmd_ops(a);
    if (a.command == "compile") return cmd_compile(a);
    if (a.command == "export") return cmd_export(a);
    if (a.command == "report") return cmd_report(a);
    if (a.command == "run") return cmd_run(a);
    if (a.command == "grad") return cmd_grad(a);
    if (a.command == "cache") return cmd_cache(a);
    return cmd_source(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kiln: %s\n", kiln::terminal_text(e.message).c_str());
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", kiln::terminal_text(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    // Where kiln knows the node, it says so (an OutOfMemoryError above); this one came from
    // elsewhere: a model, an input or a run too large for this machine's memory.
    std::fprintf(stderr,
                 "kiln: error: out of memory (the model, its inputs or its run need "
                 "more memory than this machine gives)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", kiln::terminal_text(e.what()).c_str());
    return 1;
  }
}
