#pragma once
// Compile servers: kiln-clang-server processes (built against the installed clang's
// libraries) that stay and compile one C unit after another, so a kernel compile does not
// start clang (~35 ms of a 40-120 ms compile on clang 14). Used only where the toolchain's
// compiler is the very clang the server was built against (same version, same executable);
// KILN_CLANG_SERVER=0 turns them off. A unit a server cannot take, or a server that dies,
// is compiled by a clang process instead.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/subprocess.h"

namespace kiln {

class ClangServers {
 public:
  // The servers standing in for `executable` (the compiler as found on PATH) whose
  // `--version` first line is `version`; null when there is no server program, it was built
  // for another clang, `executable` is not that clang itself (a wrapper), or
  // KILN_CLANG_SERVER=0. The first call starts one server to ask.
  static ClangServers* find(const std::string& executable, const std::string& version);

  // Runs the driver command line `argv` (argv[0]: the compiler) on an idle server, starting
  // one when all are busy; nullopt when no server took it (the caller runs the process).
  std::optional<ProcessResult> compile(const std::vector<std::string>& argv);

  const std::string& program() const { return program_; }  // the server executable
  int started() const;  // servers started so far (the first, and one per busy moment)

  ~ClangServers();

 private:
  struct Server;
  std::unique_ptr<Server> start(std::string& version, std::string& bin_dir) const;
  std::string program_, real_compiler_, installed_dir_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Server>> idle_;
  int started_ = 0;
};

}  // namespace kiln
