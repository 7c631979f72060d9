#pragma once
// The C toolchain: clang (or $KILN_CC), as a subprocess or, for clang, through compile servers.
// `-march=native` is resolved to a concrete CPU name so modules built on different hosts never
// share a cache key.
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "cache/entry_meta.h"

namespace kiln {

struct ToolchainConfig {
  std::string cc;      // empty: $KILN_CC, else "clang"
  std::string cflags;  // empty: $KILN_CFLAGS; appended after kiln's own flags
  // The cache whose toolchains/ folder remembers the probe; empty: cache_root().
  std::filesystem::path cache_dir;
};

struct CompileOutcome {
  bool ok = false;
  std::string log;  // the compiler's stderr (warnings included)
  bool served = false;  // compiled by a compile server, not a compiler process
  double seconds = 0;
};

class ClangServers;

class Toolchain {
 public:
  // Probes the compiler once per (cc, cflags) per process; throws UserError if it cannot run.
  static const Toolchain& get(const ToolchainConfig& config = {});

  const std::string& cc() const { return cc_; }
  const std::string& version() const { return version_; }  // first line of `cc --version`
  const std::string& cpu() const { return cpu_; }          // resolved -march
  const std::vector<std::string>& flags() const { return flags_; }
  // Compiler identity and version, flags and target: part of every cache key.
  const std::string& fingerprint() const { return fingerprint_; }
  // The same, as named cache-key components: toolchain.cc, .version, .cpu, .flags.
  KeyComponents key_components() const;

  // Compiles one C source to a shared object, linking `libraries` (-l names).
  CompileOutcome compile(const std::filesystem::path& source, const std::filesystem::path& output,
                         const std::vector<std::string>& extra_args,
                         const std::vector<std::string>& libraries) const;
  // Compiles one C source to a position-independent object (kiln's flags, no link).
  CompileOutcome compile_object(const std::filesystem::path& source,
                                const std::filesystem::path& object,
                                const std::vector<std::string>& extra_args) const;
  // Assembles GNU assembler text with `as` (binutils, which the linker comes with).
  CompileOutcome assemble(const std::filesystem::path& source,
                          const std::filesystem::path& object) const;
  // The compile servers standing in for this clang (compiler/c/clang_server.h), asked for on
  // first use: compile_object goes through them when there are any; null when not.
  ClangServers* servers() const;
  // Links objects into a shared object with `libraries` (the probed link command when there
  // is one, the driver otherwise).
  CompileOutcome link(const std::vector<std::filesystem::path>& objects,
                      const std::filesystem::path& output,
                      const std::vector<std::string>& libraries) const;

 private:
  Toolchain() = default;
  std::string cc_, version_, cpu_, fingerprint_;
  std::vector<std::string> flags_;
  // The driver's own link command for a shared object (see the probe); empty: the driver
  // compiles and links in one run.
  std::vector<std::string> link_;
  // Where the probe is remembered (removed if link_ fails).
  std::vector<std::filesystem::path> memo_;
  mutable std::once_flag servers_once_;
  mutable ClangServers* servers_ = nullptr;
};

std::vector<std::string> split_flags(const std::string& text);
// `name` as found on PATH (unchanged when it holds a '/' or is not found).
std::string find_program(const std::string& name);

}  // namespace kiln
