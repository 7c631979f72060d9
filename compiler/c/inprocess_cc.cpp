#include "compiler/c/inprocess_cc.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include <dlfcn.h>

#include "util/log.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Where kiln's own code lies: libkiln.so, the kiln executable, or the Python extension.
fs::path own_object_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&own_object_dir), &info) == 0 || !info.dli_fname)
    return {};
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : p.parent_path();
}

// The plugin: KILN_CLANG_PLUGIN, else installed beside kiln (lib/kiln/ next to libkiln.so,
// ../lib/kiln/ from bin/), else the build tree's.
std::vector<fs::path> plugin_candidates() {
  std::vector<fs::path> c;
  if (const char* env = std::getenv("KILN_CLANG_PLUGIN"); env && *env) return {env};
  if (fs::path dir = own_object_dir(); !dir.empty()) {
    c.push_back(dir / "kiln" / "libkiln_clang.so");
    c.push_back(dir / KILN_LIBDIR_FROM_BIN / "libkiln_clang.so");
  }
#ifdef KILN_BUILD_CLANG_PLUGIN
  c.emplace_back(KILN_BUILD_CLANG_PLUGIN);
#endif
  return c;
}

bool disabled() {
  const char* env = std::getenv("KILN_INPROCESS_CC");
  return env && std::string(env) == "0";
}

void append(void* context, const char* text, size_t size) {
  static_cast<std::string*>(context)->append(text, size);
}

}  // namespace

const InProcessCc* InProcessCc::find(const std::string& executable, const std::string& version) {
  if (disabled() || version.empty()) return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<InProcessCc>> found;  // by executable, version
  const std::lock_guard lock(mutex);
  auto [it, fresh] = found.try_emplace(executable + "\n" + version);
  if (!fresh) return it->second.get();
  std::error_code ec;
  const fs::path real = fs::canonical(executable, ec);
  if (ec) return nullptr;
  for (const fs::path& candidate : plugin_candidates()) {
    if (!fs::exists(candidate, ec)) continue;
    // Never unloaded: LLVM's static state lives as long as the process.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      if (debug_level() >= 2) log_line(std::string("in-process compiler: ") + dlerror());
      continue;
    }
    auto plugin_version = reinterpret_cast<const char* (*)()>(dlsym(handle, "kiln_clang_version"));
    auto compile = reinterpret_cast<CompileFn>(dlsym(handle, "kiln_clang_compile"));
    auto bin_dir = reinterpret_cast<const char* (*)()>(dlsym(handle, "kiln_clang_bin_dir"));
    if (!plugin_version || !compile || !bin_dir || version != plugin_version()) {
      if (debug_level() >= 2)
        log_line("in-process compiler: " + candidate.string() + " is for " +
                 (plugin_version ? plugin_version() : "another kiln") + ", not " + version);
      continue;
    }
    // The compiler must be that clang's executable itself, not a wrapper or another copy
    // that happens to print the same version.
    const fs::path own_bin = fs::weakly_canonical(bin_dir(), ec);
    if (ec || real.parent_path() != own_bin) {
      if (debug_level() >= 2)
        log_line("in-process compiler: " + real.string() + " is not the clang in " +
                 own_bin.string());
      continue;
    }
    auto cc = std::make_unique<InProcessCc>();
    cc->path_ = candidate.string();
    cc->real_compiler_ = real.string();
    cc->installed_dir_ = fs::path(executable).parent_path().string();
    cc->compile_ = compile;
    if (debug_level() >= 2) log_line("in-process compiler: " + cc->path_);
    it->second = std::move(cc);
    break;
  }
  return it->second.get();
}

std::optional<ProcessResult> InProcessCc::compile(const std::vector<std::string>& argv) const {
  std::vector<const char*> args;
  args.reserve(argv.size());
  args.push_back(real_compiler_.c_str());
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(argv[i].c_str());
  ProcessResult r;
  const int status =
      compile_(static_cast<int>(args.size()), args.data(), installed_dir_.c_str(), &append, &r.err);
  if (status == 2) return std::nullopt;
  r.exit_code = status;
  return r;
}

}  // namespace kiln
