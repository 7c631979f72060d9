#include "compiler/cuda/toolchain.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <regex>

#include "compiler/cuda/nvrtc.h"
#include "compiler/subprocess.h"
#include "ctemplate/prelude.h"
#include "runtime/cuda/cuda_device.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace {

// NVRTC options for every kiln kernel: helpers a module does not call must not warn (177),
// and ptxas reports registers and spills (the no-GPU tests read it).
const std::vector<std::string> kNvrtcOptions = {"--std=c++17", "-default-device",
                                                "--diag-suppress=177", "-Xptxas=-v"};

}  // namespace

const CudaToolchain& CudaToolchain::get() {
  static std::once_flag once;
  static CudaToolchain* tc = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    auto* t = new CudaToolchain();
    std::string why;
    const std::string kind = cuda_device_kind(&why);
    try {
      if (kind == "emulator") {
        t->emulated_ = true;
        t->arch_ = "emulator";
        const char* cxx = std::getenv("KILN_CXX");
        t->cxx_ = cxx && *cxx ? cxx : "clang++";
        ProcessResult v = run_process({t->cxx_, "--version"});
        if (v.exit_code != 0) {
          throw UserError("the CUDA emulator compiles kernels with '" + t->cxx_ +
                          "', which does not run; install clang (scripts/setup) or set KILN_CXX");
        }
        t->components_ = {{"cuda.device", "emulator"},
                          {"cuda.compiler", t->cxx_ + " " + v.out.substr(0, v.out.find('\n'))}};
      } else {
        if (kind == "gpu") {
          t->arch_ = cuda_device().arch();
        } else {
          const char* env = std::getenv("KILN_CUDA_ARCH");
          t->arch_ = env && *env ? env : "sm_90";
          static const std::regex arch("sm_[0-9]{2,3}a?");
          if (!std::regex_match(t->arch_, arch)) {
            throw UserError("KILN_CUDA_ARCH='" + t->arch_ + "' is not an sm_XX architecture");
          }
        }
        t->options_ = kNvrtcOptions;
        const char* opt = std::getenv("KILN_CUDA_OPT");
        const std::string level = opt && *opt ? opt : "full";
        if (level == "fast") {
          // NVRTC's fast-compile level: far less optimisation (and so slower kernels) for a
          // cold compile about 5x quicker. NVRTC older than 12.8 rejects it by name.
          t->options_.push_back("-Ofc=max");
        } else if (level != "full") {
          throw UserError("KILN_CUDA_OPT='" + level +
                          "' is not a CUDA optimisation level (full or fast)");
        }
        // The options change the code: part of every key.
        t->components_ = {{"cuda.device", t->arch_},
                          {"cuda.compiler", Nvrtc::key_fingerprint()},
                          {"cuda.options", join(t->options_, " ")}};
      }
      tc = t;
    } catch (const UserError& e) {
      failure = e.what();
      delete t;
    }
  });
  if (!tc) throw UserError(failure);
  return *tc;
}

std::vector<std::string> CudaToolchain::outputs() const {
  if (emulated_) return {"kernels.emu.so"};
  return {"kernels.cubin", "kernels.ptx"};
}

CompileOutcome CudaToolchain::build(const std::filesystem::path& dir) const {
  const auto start = std::chrono::steady_clock::now();
  CompileOutcome out;
  if (emulated_) {
    const auto shim = dir / "kiln_cuda_emu.h";
    write_file_atomic(shim, std::string(prelude("kiln_cuda_emu.h")));
    ProcessResult r =
        run_process({cxx_, "-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-DKILN_CUDA_EMULATOR=1",
                     "-include", shim.string(), "-x", "c++", (dir / "kernels.cu").string(), "-o",
                     (dir / "kernels.emu.so").string()});
    std::error_code ec;
    std::filesystem::remove(shim, ec);
    out.ok = r.exit_code == 0;
    out.log = r.err + r.out;
  } else {
    const std::string source = read_file(dir / "kernels.cu");
    NvrtcResult r = Nvrtc::get().compile(source, "kernels.cu", arch_, options_);
    out.ok = r.ok;
    out.log = r.log;
    if (r.ok) {
      write_file_atomic(dir / "kernels.cubin", r.cubin);
      write_file_atomic(dir / "kernels.ptx", r.ptx);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::vector<Diagnostic> cuda_diagnostics(const std::string& log, const CodeWriter& map) {
  // NVRTC: "kernels.cu(12): error: ..."; clang++: "kernels.cu:12:5: error: ...".
  static const std::regex nvrtc(
      R"(kernels\.cu\((\d+)\): (error|warning|catastrophic error): (.*))");
  static const std::regex clang(R"(kernels\.cu:(\d+):(\d+): (error|warning|fatal error): (.*))");
  std::vector<Diagnostic> out;
  std::vector<std::string> source_lines;
  {
    std::string line;
    for (char c : map.str()) {
      if (c == '\n') {
        source_lines.push_back(line);
        line.clear();
      } else {
        line.push_back(c);
      }
    }
  }
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    std::smatch m;
    Diagnostic d;
    if (std::regex_search(line, m, nvrtc)) {
      d.line = std::stoi(m[1]);
      d.severity = m[2] == "warning" ? "warning" : "error";
      d.message = m[3];
    } else if (std::regex_search(line, m, clang)) {
      d.line = std::stoi(m[1]);
      d.column = std::stoi(m[2]);
      d.severity = m[3] == "warning" ? "warning" : "error";
      d.message = m[4];
    } else {
      continue;
    }
    if (const SourceOrigin* o = map.origin(d.line)) d.origin = *o;
    if (d.line >= 1 && static_cast<size_t>(d.line) <= source_lines.size()) {
      d.source_line = source_lines[static_cast<size_t>(d.line) - 1];
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kiln
