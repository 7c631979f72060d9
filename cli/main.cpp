// The `kiln` command: compile, run and inspect models.
//
// Exit codes: 0 success; 1 the model, the compile or the run failed (the error is printed);
// 2 wrong usage (a one-line reason is printed).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "frontend/model_loader.h"
#include "runtime/npy.h"
#include "util/error.h"
#include "util/log.h"
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
  source MODEL             print the stitched C source of MODEL's module
  help [COMMAND]           show help for a command

options:
  -v, --verbose            print the time of each phase (load, key, codegen, compile,
                           module load, run) to stderr
  -h, --help               show help

MODEL is a kiln JSON graph (.json; see docs/json-format.md).

environment:
  KILN_CACHE_DIR   where modules are built (default $XDG_CACHE_HOME/kiln or ~/.cache/kiln)
  KILN_CC          C compiler (default clang)
  KILN_CFLAGS      extra flags appended to kiln's own
  KILN_DEBUG       1: phase timings, 2: compiler command lines, 3: generated source

exit codes: 0 success, 1 failure (bad model, compile or run error), 2 wrong usage
)";

const char* kCompileHelp = R"(usage: kiln compile [-v] MODEL

Compiles MODEL into one native module and prints its key, the module's path and the
path of its generated C source. Exits 1 with the error (naming the node and the line of
its code) when the model is invalid or the module does not compile.
)";

const char* kRunHelp = R"(usage: kiln run [-v] MODEL --input NAME=FILE.npy [--input ...] --output-dir DIR

Compiles MODEL, reads every graph input from a .npy file, runs the module once and
writes each graph output to DIR/<output name>.npy (DIR is created if needed).
A missing, unknown or mis-shaped input is an error naming it and the expected
dtype and shape.

options:
  -i, --input NAME=FILE.npy   one per graph input
  -o, --output-dir DIR        where outputs are written (required)
)";

const char* kSourceHelp = R"(usage: kiln source MODEL

Prints the stitched C source of MODEL's module: one thunk per node, each under a banner
naming the node, its op, inputs, outputs and their types.
)";

const char* help_for(const std::string& cmd) {
  if (cmd == "compile") return kCompileHelp;
  if (cmd == "run") return kRunHelp;
  if (cmd == "source") return kSourceHelp;
  return nullptr;
}

struct Args {
  std::string command;
  bool verbose = false;
  bool help = false;
  std::vector<std::string> positional;
  std::vector<std::string> inputs;
  std::string output_dir;
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
    } else if (s == "-o" || s == "--output-dir") {
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

double ms(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void print_times(const kiln::CompileInfo& info, double load_ms, double run_ms) {
  std::fprintf(stderr, "load %.2f ms | key %.2f ms | codegen %.2f ms | compile %.2f ms | module load %.2f ms",
               load_ms, info.times.key_ms, info.times.codegen_ms, info.times.compile_ms, info.times.load_ms);
  if (run_ms >= 0) std::fprintf(stderr, " | run %.2f ms", run_ms);
  std::fprintf(stderr, "\n");
}

std::string one_model(const Args& a) {
  if (a.positional.empty()) throw UsageError{"kiln " + a.command + ": missing MODEL"};
  if (a.positional.size() > 1) throw UsageError{"kiln " + a.command + ": unexpected argument '" + a.positional[1] + "'"};
  return a.positional[0];
}

int cmd_compile(const Args& a) {
  if (!a.inputs.empty() || !a.output_dir.empty()) throw UsageError{"kiln compile takes no --input/--output-dir"};
  std::string model = one_model(a);
  auto t = Clock::now();
  kiln::Graph g = kiln::load_model(model);
  double load_ms = ms(t);
  kiln::Function f = kiln::compile(g);
  std::printf("key     %s\nmodule  %s\nsource  %s\n", f.info().key.c_str(), f.info().module_path.c_str(),
              f.info().source_path.c_str());
  if (a.verbose) print_times(f.info(), load_ms, -1);
  return 0;
}

int cmd_source(const Args& a) {
  if (!a.inputs.empty() || !a.output_dir.empty()) throw UsageError{"kiln source takes no --input/--output-dir"};
  kiln::Graph g = kiln::load_model(one_model(a));
  std::fputs(kiln::generate_source(g).c_str(), stdout);
  return 0;
}

int cmd_run(const Args& a) {
  std::string model = one_model(a);
  if (a.output_dir.empty()) throw UsageError{"kiln run: --output-dir DIR is required"};
  std::map<std::string, std::string> files;
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError{"kiln run: --input expects NAME=FILE.npy, got '" + spec + "'"};
    }
    if (!files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second) {
      throw UsageError{"kiln run: input '" + spec.substr(0, eq) + "' given twice"};
    }
  }
  auto t = Clock::now();
  kiln::Graph g = kiln::load_model(model);
  double load_ms = ms(t);
  // Check names before compiling: a typo should not cost a compile.
  for (const auto& [name, file] : files) {
    bool known = false;
    for (const auto* v : g.inputs()) known = known || v->name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const auto* v : g.inputs()) names.push_back(v->name + " (" + v->type.to_string() + ")");
      throw kiln::UserError("unknown input '" + name + "'; the model takes " + kiln::join(names, ", "));
    }
  }
  for (const auto* v : g.inputs()) {
    if (!files.count(v->name)) {
      throw kiln::UserError("missing input '" + v->name + "': expected " + v->type.to_string() +
                            "; pass --input " + v->name + "=FILE.npy");
    }
  }
  std::map<std::string, kiln::Tensor> inputs;
  for (const auto& [name, file] : files) inputs[name] = kiln::read_npy(file);
  kiln::Function f = kiln::compile(g);
  t = Clock::now();
  auto outputs = f.run(inputs);
  double run_ms = ms(t);
  std::error_code ec;
  std::filesystem::create_directories(a.output_dir, ec);
  if (ec) throw kiln::UserError("cannot create output directory '" + a.output_dir + "': " + ec.message());
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto path = std::filesystem::path(a.output_dir) / (f.output_names()[i] + ".npy");
    kiln::write_npy(path, outputs[i]);
    std::printf("%s  %s\n", path.c_str(), outputs[i].describe().c_str());
  }
  if (a.verbose) print_times(f.info(), load_ms, run_ms);
  return 0;
}

}  // namespace

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
    if (a.command == "compile") return cmd_compile(a);
    if (a.command == "run") return cmd_run(a);
    return cmd_source(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kiln: %s\n", e.message.c_str());
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", e.what());
    return 1;
  }
}
