// The table's entries: one function per command, each defined in its own file.
#pragma once

#include "cli/command.h"

namespace kiln::cli {

const Command& compile_command();
const Command& run_command();
const Command& source_command();
const Command& export_command();
const Command& report_command();
const Command& grad_command();
const Command& cache_command();
const Command& ops_command();

}  // namespace kiln::cli
