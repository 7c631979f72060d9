#pragma once
// What turns a module's kernels.cu into the image its CUDA device runs, and what of that
// enters the cache key. For a GPU: NVRTC, a cubin for the GPU's sm_XX plus PTX (the key adds
// NVRTC's fingerprint and the arch). For the emulator: clang++ with kiln_cuda_emu.h, a
// shared object (the key says "emulator", so emulated and GPU entries never mix). With
// neither (no GPU, no KILN_CUDA_DEVICE): NVRTC for KILN_CUDA_ARCH (default sm_90), so
// modules can be built and cached ahead of time; loading one then says what is missing.
#include <filesystem>
#include <string>
#include <vector>

#include "cache/entry_meta.h"
#include "compiler/c/toolchain.h"
#include "compiler/diagnostics.h"
#include "ctemplate/code_writer.h"

namespace kiln {

class CudaToolchain {
 public:
  static const CudaToolchain& get();
  bool emulated() const { return emulated_; }
  const std::string& arch() const { return arch_; }
  KeyComponents key_components() const { return components_; }
  // The files build() writes beside kernels.cu (the image first).
  std::vector<std::string> outputs() const;
  // Compiles dir/kernels.cu into dir/<outputs>; the log holds NVRTC's or clang's messages.
  CompileOutcome build(const std::filesystem::path& dir) const;

 private:
  CudaToolchain() = default;
  bool emulated_ = false;
  std::string arch_;                  // "sm_90", or "emulator"
  std::vector<std::string> options_;  // NVRTC's (KILN_CUDA_OPT=fast adds -Ofc=max)
  std::string cxx_;                   // the emulator's compiler
  KeyComponents components_;
};

// The errors and warnings of an NVRTC or clang++ log about kernels.cu, each mapped through
// the source map to its node and fragment line.
std::vector<Diagnostic> cuda_diagnostics(const std::string& log, const CodeWriter& map);

}  // namespace kiln
