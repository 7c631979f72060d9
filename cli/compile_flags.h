// The flags shared by the commands that compile a model (--passes, --device, --device-io,
// --repeat), and the -v report of a compile's phases.
#pragma once

#include "cli/command.h"
#include "compiler/compile.h"

namespace kiln::cli {

Flag passes_flag();
Flag precision_flag();
Flag device_flag();
Flag device_io_flag();

// --repeat N: profiled runs, 1 to 1000000 (default 10).
int repeat_count(const CommandLine& line);

// The options the command line gives (a bad --passes spec or device is a usage error).
CompileOptions compile_options(const CommandLine& line);

// -v: cache status, phase times, kernels reused and compiled. `run_ms` < 0: no run.
void print_times(const CompileInfo& info, double load_ms, double run_ms);

}  // namespace kiln::cli
