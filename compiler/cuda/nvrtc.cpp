#include "compiler/cuda/nvrtc.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "cache/cache_store.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

using nvrtcProgram = struct _nvrtcProgram*;
struct Api {
  int (*version)(int*, int*) = nullptr;
  int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                const char* const*) = nullptr;
  int (*destroy)(nvrtcProgram*) = nullptr;
  int (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  int (*log_size)(nvrtcProgram, size_t*) = nullptr;
  int (*log)(nvrtcProgram, char*) = nullptr;
  int (*ptx_size)(nvrtcProgram, size_t*) = nullptr;
  int (*ptx)(nvrtcProgram, char*) = nullptr;
  int (*cubin_size)(nvrtcProgram, size_t*) = nullptr;
  int (*cubin)(nvrtcProgram, char*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};
Api api;

std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* env = std::getenv("KILN_NVRTC"); env && *env) return {env};
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  for (const auto& r : roots) {
    for (const char* v : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}) {
      c.push_back(r + "/lib64/" + v);
    }
  }
  for (const char* v : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) c.emplace_back(v);
  // The PyPI wheel, as scripts/setup installs it.
  std::string wheel;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    wheel = std::string(xdg) + "/kiln/nvrtc";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    wheel = std::string(home) + "/.local/share/kiln/nvrtc";
  }
  if (!wheel.empty()) {
    for (const char* sub : {"/nvidia/cu13/lib/", "/nvidia/cuda_nvrtc/lib/"}) {
      for (const char* v : {"libnvrtc.so.13", "libnvrtc.so.12"}) c.push_back(wheel + sub + v);
    }
  }
  return c;
}

// The file dlopen would try first among the candidates given as paths, identified for the
// fingerprint memo; "" when the first candidate that exists is a bare name (found through
// the loader's search path, which only dlopen resolves).
std::string first_library_identity(std::string* canonical) {
  for (const auto& c : candidates()) {
    if (c.find('/') == std::string::npos) return "";
    std::error_code ec;
    const auto path = std::filesystem::canonical(c, ec);
    struct stat st {};
    if (ec || ::stat(path.c_str(), &st) != 0) continue;
    *canonical = path.string();
    return path.string() + "\n" + std::to_string(st.st_size) + "\n" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n" +
           std::to_string(st.st_ino);
  }
  return "";
}

template <class F>
bool bind(void* h, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(h, name));
  return fn != nullptr;
}

}  // namespace

const Nvrtc& Nvrtc::get() {
  static std::once_flag once;
  static Nvrtc* loaded = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> tried;
    for (const auto& path : candidates()) {
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried.push_back(path);
        continue;
      }
      if (!(bind(h, api.version, "nvrtcVersion") && bind(h, api.create, "nvrtcCreateProgram") &&
            bind(h, api.destroy, "nvrtcDestroyProgram") &&
            bind(h, api.compile, "nvrtcCompileProgram") &&
            bind(h, api.log_size, "nvrtcGetProgramLogSize") &&
            bind(h, api.log, "nvrtcGetProgramLog") && bind(h, api.ptx_size, "nvrtcGetPTXSize") &&
            bind(h, api.ptx, "nvrtcGetPTX") && bind(h, api.cubin_size, "nvrtcGetCUBINSize") &&
            bind(h, api.cubin, "nvrtcGetCUBIN") &&
            bind(h, api.error_string, "nvrtcGetErrorString"))) {
        tried.push_back(path + " (not NVRTC 11.1 or later)");
        ::dlclose(h);
        continue;
      }
      auto* n = new Nvrtc();
      n->handle_ = h;
      Dl_info info{};
      n->path_ = ::dladdr(reinterpret_cast<void*>(api.version), &info) && info.dli_fname
                     ? info.dli_fname
                     : path;
      int major = 0, minor = 0;
      api.version(&major, &minor);
      n->version_ = std::to_string(major) + "." + std::to_string(minor);
      // The PTX header of an empty program names the compiler build exactly.
      NvrtcResult empty = n->compile("", "kiln_probe.cu", "compute_80", {});
      n->fingerprint_ = "nvrtc " + n->version_ + " " + sha256_hex(empty.ptx).substr(0, 16);
      if (debug_level() >= 2) log_line("NVRTC " + n->version_ + " loaded from " + n->path_);
      loaded = n;
      return;
    }
    failure = "NVRTC not found (tried " + join(tried, ", ") +
              "); install the CUDA toolkit, or run scripts/setup (it installs the PyPI wheel "
              "nvidia-cuda-nvrtc), or set KILN_NVRTC=/path/to/libnvrtc.so";
  });
  if (!loaded) throw UserError(failure);
  return *loaded;
}

std::string Nvrtc::key_fingerprint() {
  std::string canonical;
  const std::string identity = first_library_identity(&canonical);
  if (identity.empty()) return get().fingerprint();
  const std::filesystem::path memo = std::filesystem::path("toolchains") /
                                     ("nvrtc-" + sha256_hex(identity).substr(0, 32) + ".txt");
  std::shared_ptr<CacheStore> store;
  try {
    store = CacheStore::open(default_cache_root());
  } catch (const UserError& e) {
    if (debug_level() >= 2) log_line(std::string("NVRTC memo not used: ") + e.what());
    return get().fingerprint();
  }
  // Layout: the fingerprint, then the identity it was taken for (checked, not trusted).
  if (auto text = store->read_private(memo)) {
    const size_t nl = text->find('\n');
    if (nl != std::string::npos && text->substr(nl + 1) == identity) return text->substr(0, nl);
  }
  const Nvrtc& n = get();
  std::error_code ec;
  // Remember only when the library loaded is that file (it may have been skipped as broken).
  if (std::filesystem::canonical(n.path(), ec).string() == canonical) {
    try {
      store->write_private(memo, n.fingerprint() + "\n" + identity);
    } catch (const std::exception& e) {
      if (debug_level() >= 2) log_line(std::string("NVRTC memo not written: ") + e.what());
    }
  }
  return n.fingerprint();
}

NvrtcResult Nvrtc::compile(const std::string& source, const std::string& name,
                           const std::string& arch, const std::vector<std::string>& options) const {
  const auto start = std::chrono::steady_clock::now();
  NvrtcResult r;
  nvrtcProgram prog = nullptr;
  if (int rc = api.create(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr); rc != 0) {
    r.log = std::string("nvrtcCreateProgram: ") + api.error_string(rc);
    return r;
  }
  std::vector<std::string> opts{"--gpu-architecture=" + arch};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const int rc = api.compile(prog, static_cast<int>(argv.size()), argv.data());
  size_t n = 0;
  api.log_size(prog, &n);
  r.log.assign(n, '\0');
  if (n) api.log(prog, r.log.data());
  while (!r.log.empty() && r.log.back() == '\0') r.log.pop_back();
  r.ok = rc == 0;
  if (!r.ok && r.log.empty()) r.log = api.error_string(rc);
  if (r.ok) {
    api.ptx_size(prog, &n);
    r.ptx.assign(n, '\0');
    if (n) api.ptx(prog, r.ptx.data());
    while (!r.ptx.empty() && r.ptx.back() == '\0') r.ptx.pop_back();
    if (arch.rfind("sm_", 0) == 0) {
      api.cubin_size(prog, &n);
      r.cubin.assign(n, '\0');
      if (n) api.cubin(prog, r.cubin.data());
    }
  }
  api.destroy(&prog);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kiln
