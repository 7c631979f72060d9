#pragma once
// NVRTC, loaded with dlopen: KILN_NVRTC, else the CUDA toolkit's libnvrtc (CUDA_HOME,
// /usr/local/cuda), else the dynamic loader's search path, else the PyPI wheel
// nvidia-cuda-nvrtc that scripts/setup installs under ~/.local/share/kiln/nvrtc. A kiln built
// without CUDA still builds and runs; only a CUDA compile needs NVRTC.
#include <string>
#include <vector>

namespace kiln {

struct NvrtcResult {
  bool ok = false;
  std::string log;    // NVRTC's diagnostics and, with -Xptxas=-v, ptxas's report
  std::string cubin;  // for an sm_XX target
  std::string ptx;    // always (for compute_XX: the only output)
  double seconds = 0;
};

class Nvrtc {
 public:
  // The loaded library, or UserError saying where kiln looked and how to install it.
  static const Nvrtc& get();
  // Where it came from and its version ("13.0").
  const std::string& path() const { return path_; }
  const std::string& version() const { return version_; }
  // Identifies the compiler for cache keys: its version plus the PTX it writes for an empty
  // program (which names the exact build), hashed.
  const std::string& fingerprint() const { return fingerprint_; }
  // fingerprint() for cache keys without loading NVRTC when this user's default cache
  // remembers it for the exact library file kiln would load (its path, size, mtime and
  // inode): a warm hit then never touches NVRTC. Loads it (and remembers) otherwise.
  static std::string key_fingerprint();
  // Compiles one translation unit. `arch` is "sm_90" (cubin and PTX) or "compute_90" (PTX).
  NvrtcResult compile(const std::string& source, const std::string& name, const std::string& arch,
                      const std::vector<std::string>& options) const;

 private:
  Nvrtc() = default;
  void* handle_ = nullptr;
  std::string path_, version_, fingerprint_;
};

}  // namespace kiln
