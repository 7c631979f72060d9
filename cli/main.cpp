// The `kiln` command: compile, run and inspect models.
//
// This file holds the global flags, the command table and the exit codes; each command lives
// in its own file (cli/*_command.cpp) with its flags, help and run function.
//
// Exit codes: 0 success; 1 the model, the compile or the run failed (the error is printed);
// 2 wrong usage (a one-line reason is printed).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/commands.h"
#include "compiler/entries/background_stores.h"
#include "compiler/entries/entry_layout.h"
#include "ops/library/op_library.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/progress.h"
#include "util/strings.h"

namespace {

using kiln::cli::Command;
using kiln::cli::CommandLine;
using kiln::cli::UsageError;

int help_command(const CommandLine& line);

const Command& help_entry() {
  static const Command c{"help",
                         "[COMMAND]",
                         "show help for a command",
                         "Shows the help of COMMAND, or of kiln itself.\n",
                         {},
                         "",
                         help_command};
  return c;
}

const std::vector<const Command*>& table() {
  static const std::vector<const Command*> commands{
      &kiln::cli::compile_command(), &kiln::cli::run_command(),    &kiln::cli::source_command(),
      &kiln::cli::export_command(),  &kiln::cli::report_command(), &kiln::cli::cache_command(),
      &kiln::cli::grad_command(),    &kiln::cli::ops_command(),    &help_entry()};
  return commands;
}

const Command* find_command(std::string_view name) {
  for (const Command* c : table()) {
    if (c->name == name) return c;
  }
  return nullptr;
}

const char* kEnvironment = R"(
MODEL is an ONNX model (.onnx, weights inside or as external data beside it) or a kiln JSON
graph (.json, weights inline or in .npy / .safetensors files beside it; see
docs/json-format.md).
Inputs (--input) are .npy or .safetensors files.

environment:
  KILN_CACHE_DIR   the kernel cache (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)
  KILN_CACHE       0: bypass the cache (build in <cache>/scratch, never reuse)
  KILN_CACHE_MAX_SIZE  size cap enforced after each publish (default 2G)
  KILN_REMOTE_CACHE    shared remote stores, read in order: redis://host:port,
                       redis+cluster://host:port,..., http://host/path (docs/remote-cache.md)
  KILN_CC          C compiler (default clang)
  KILN_CLANG_SERVER  0: a clang process per kernel instead of kiln's compile
                   servers (the same objects; used only for that very clang)
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

std::string main_help() {
  std::string out =
      "kiln — a tensor compiler: models become cached native modules.\n\n"
      "usage: kiln [-v] <command> [options]\n\ncommands:\n";
  for (const Command* c : table()) out += kiln::cli::help_row("  " + c->name, c->summary, 13);
  out +=
      "\n'kiln COMMAND --help' lists the options of COMMAND; a command refuses options it\n"
      "does not take.\n\noptions of every command:\n";
  for (const auto& f : kiln::cli::global_flags()) {
    out += kiln::cli::help_row(
        "  " + (f.short_name.empty() ? std::string("    ") : f.short_name + ", ") + f.name +
            (f.value.empty() ? "" : " " + f.value),
        f.help, 27);
  }
  return out + kEnvironment;
}

int help_command(const CommandLine& line) {
  if (line.positional().size() > 1) {
    throw UsageError{"kiln help: unexpected argument '" + line.positional()[1] + "'"};
  }
  if (line.positional().empty()) {
    std::fputs(main_help().c_str(), stdout);
    return 0;
  }
  const Command* c = find_command(line.positional()[0]);
  if (!c) throw UsageError{"no such command '" + line.positional()[0] + "'"};
  std::fputs(kiln::cli::command_help(*c).c_str(), stdout);
  return 0;
}

void load_op_libraries(const CommandLine& line) {
  for (const auto& path : line.values("--op-library")) {
    auto lib = kiln::load_op_library(path);
    if (line.verbose()) {
      std::fprintf(stderr, "op library %s (%s, abi %s): %s\n", lib->name.c_str(), lib->path.c_str(),
                   lib->abi().c_str(), kiln::join(lib->ops, ", ").c_str());
    }
  }
  kiln::load_env_op_libraries();
}

int run(const std::vector<std::string>& args) {
  const CommandLine line = CommandLine::parse(args, find_command, table());
  if (line.command().empty()) {
    if (!line.help()) throw UsageError{"missing command (try 'kiln --help')"};
    std::fputs(main_help().c_str(), stdout);
    return 0;
  }
  const Command& command = *find_command(line.command());
  if (line.help()) {
    std::fputs(kiln::cli::command_help(command).c_str(), stdout);
    return 0;
  }
  load_op_libraries(line);
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
  return command.run(line);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
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
