#pragma once
// Builds a module linked from kernels (LinkMode::kKernels): each kernel's object comes from the
// kernel cache (an entry of family "kernel", keyed by its unit's text and the toolchain) or is
// compiled — the missing ones concurrently, KILN_JOBS at a time, beside the binding unit — and
// everything is linked into module.so.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compiler/c/linker.h"
#include "compiler/c/toolchain.h"
#include "compiler/function.h"

namespace kiln {

class CacheStore;

// KILN_JOBS (a positive count; UserError naming it otherwise), else the core count.
int compile_jobs();

// The kernel cache key of `kernel`: its unit's text, its compile arguments and the toolchain.
std::string kernel_key(const Toolchain& toolchain, const CKernel& kernel);

// A unit that failed: a kernel, the binding, or the link (code null).
struct UnitFailure {
  std::string file;  // the name its source is kept under, e.g. "kiln_k_….c"
  const CodeWriter* code = nullptr;
  std::vector<std::string> compile_args;
  std::string log;
};

// Builds `dir`/module.so from `linked` (LinkMode::kKernels). Kernels are looked up in and
// published to `store` when it is given and writable (otherwise compiled under `dir`). Fills
// info.kernels and the compile phase times; returns the failed unit, if any (compiler
// warnings go to info.compiler_log).
std::optional<UnitFailure> build_from_kernels(const LinkedModule& linked,
                                              const Toolchain& toolchain, CacheStore* store,
                                              const std::filesystem::path& dir, CompileInfo& info);

}  // namespace kiln
