#pragma once
// Runs a program (no shell) and captures its exit status, stdout and stderr.
#include <string>
#include <vector>

namespace kiln {

struct ProcessResult {
  int exit_code = -1;  // -1 when it could not be started; 128+N when killed by signal N
  std::string out;
  std::string err;
};

ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace kiln
