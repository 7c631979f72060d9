#pragma once
// Compiles C inside the kiln process through kiln's clang plugin (libkiln_clang.so, built
// against the installed clang's libraries), sparing each kernel a compiler start (~35 ms on
// clang 14). Used only when the plugin was built against the very clang the toolchain names;
// KILN_INPROCESS_CC=0 turns it off, and any compile it cannot take runs as a process.
#include <optional>
#include <string>
#include <vector>

#include "compiler/subprocess.h"

namespace kiln {

class InProcessCc {
 public:
  // The plugin, loaded on first use, when `executable` (the compiler as found on PATH) is a
  // clang whose `--version` first line is `version` and the plugin was built for that version;
  // null otherwise (no plugin, another compiler, or KILN_INPROCESS_CC=0).
  static const InProcessCc* find(const std::string& executable, const std::string& version);

  // Runs the driver command line `argv` (argv[0]: the compiler) as `executable` would;
  // nullopt when the plugin did not take it (the caller runs the process instead).
  std::optional<ProcessResult> compile(const std::vector<std::string>& argv) const;

  const std::string& path() const { return path_; }  // the plugin file

 private:
  using CompileFn = int (*)(int, const char* const*, const char*,
                            void (*)(void*, const char*, size_t), void*);
  std::string path_, real_compiler_, installed_dir_;
  CompileFn compile_ = nullptr;
};

}  // namespace kiln
