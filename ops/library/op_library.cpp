#include "ops/library/op_library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "ops/library/op_library_host.h"
#include "ops/registry.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

// The smallest structs a library may hand over: those of ABI 1.0.
constexpr size_t kMinDefSize = offsetof(kiln_op_def, cuda_kernel);
constexpr size_t kMinInfoSize = offsetof(kiln_op_library_info, init) + sizeof(void*);

struct Loaded {
  std::shared_ptr<OpLibrary> library;
  std::string canonical;
};

struct State {
  std::recursive_mutex load_mutex;  // one load at a time
  std::mutex mutex;                 // the tables below
  std::vector<Loaded> libraries;
  std::map<std::string, std::shared_ptr<const LibraryOpDef>> ops;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const LibraryOpDef>> onnx;
};

State& state() {
  static State s;
  return s;
}

std::string norm_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string onnx_name(const std::string& domain, const std::string& type) {
  return (domain.empty() ? std::string("") : domain + ":") + type;
}

// What a library's init registers, checked op by op; committed only if all is well.
struct Registration {
  std::string where;  // "op library 'PATH'"
  std::vector<std::shared_ptr<LibraryOpDef>> defs;
  std::vector<std::string> refusals;

  void add(const kiln_op_def* given) {
    if (!given) throw UserError("register_op(NULL)");
    if (given->size < kMinDefSize) {
      throw UserError("register_op: a kiln_op_def of " + std::to_string(given->size) +
                      " bytes (ABI 1.0's has " + std::to_string(kMinDefSize) +
                      "; set .size = sizeof(kiln_op_def))");
    }
    auto d = std::make_shared<LibraryOpDef>();
    // Fields past the library's own struct (an older minor) stay zero.
    std::memcpy(&d->def, given, std::min<size_t>(given->size, sizeof(kiln_op_def)));
    d->def.size = sizeof(kiln_op_def);
    const kiln_op_def& f = d->def;
    const std::string raw = f.name ? f.name : "";
    const std::string op = "op '" + raw + "'";
    if (!valid_name(raw)) {
      throw UserError("register_op: op name '" + raw +
                      "' is not valid (letters, digits, '_' and '.', starting with a letter or "
                      "'_', at most 128 characters)");
    }
    d->name = raw;
    std::vector<std::string> missing;
    if (!f.infer_types) missing.push_back("infer_types");
    if (!f.infer_shapes) missing.push_back("infer_shapes");
    if (!f.c_code && !f.forward) missing.push_back("c_code or forward");
    if (!missing.empty()) {
      throw UserError(op + " does not define " + join(missing, ", ") + " (required)");
    }
    if (f.cache_version < 0) {
      throw UserError(op + " has cache_version " + std::to_string(f.cache_version) +
                      " (must be >= 0)");
    }
    if (f.destroy_state && !f.create_state)
      throw UserError(op + " defines destroy_state without create_state");
    if (f.create_state && !f.forward)
      throw UserError(op + " defines create_state, which only a compute function (forward) uses");
    if (!f.c_code && (f.c_support_code || f.c_support_code_apply || f.c_headers ||
                      f.c_state_fields || f.c_init_code || f.c_cleanup_code)) {
      throw UserError(op + " defines C fragment hooks without c_code");
    }
    const int cuda =
        (f.cuda_kernel != nullptr) + (f.cuda_kernel_params != nullptr) + (f.cuda_launch != nullptr);
    if (cuda != 0 && cuda != 3) {
      throw UserError(op +
                      " defines only some of cuda_kernel, cuda_kernel_params and "
                      "cuda_launch (all three or none)");
    }
    if ((f.onnx_domain == nullptr) != (f.onnx_op_type == nullptr) ||
        (f.onnx_op_type && !*f.onnx_op_type)) {
      throw UserError(op + ": give onnx_domain and a non-empty onnx_op_type together, or neither");
    }
    if (f.onnx_op_type) {
      d->has_onnx = true;
      d->onnx_domain = norm_domain(f.onnx_domain);
      d->onnx_op_type = f.onnx_op_type;
    }
    if (f.grad_op) d->grad_op = f.grad_op;
    // Pointers into the library's memory are replaced by kiln's copies.
    d->def.name = nullptr;
    d->def.onnx_domain = nullptr;
    d->def.onnx_op_type = nullptr;
    d->def.grad_op = nullptr;
    for (const auto& other : defs) {
      if (other->name == d->name) throw UserError(op + " is registered twice");
      if (d->has_onnx && other->has_onnx && other->onnx_domain == d->onnx_domain &&
          other->onnx_op_type == d->onnx_op_type) {
        throw UserError(op + " and op '" + other->name + "' both claim ONNX " +
                        onnx_name(d->onnx_domain, d->onnx_op_type));
      }
    }
    defs.push_back(std::move(d));
  }
};

int register_op(kiln_op_call* call, const kiln_op_def* def) {
  auto* reg = call ? static_cast<Registration*>(call->host_data) : nullptr;
  if (!reg) return KILN_OP_ERROR;
  try {
    reg->add(def);
    return KILN_OP_OK;
  } catch (const std::exception& e) {
    reg->refusals.push_back(e.what());
    op_host()->error(call, "%s", e.what());
    return KILN_OP_ERROR;
  }
}

// True when the library `handle` is mapped from the file `st` describes (device and inode, as
// /proc/self/maps shows the mapping), i.e. the loader read the file kiln hashed.
bool maps_file(void* handle, const struct stat& st) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name) return false;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    // start-end perms offset major:minor inode   path
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    unsigned long long inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    std::getline(in >> std::ws, path);
    if (path != lm->l_name) continue;
    unsigned major = 0, minor = 0;
    if (std::sscanf(dev.c_str(), "%x:%x", &major, &minor) != 2) return false;
    return makedev(major, minor) == st.st_dev && inode == st.st_ino;
  }
  return false;
}

std::shared_ptr<OpLibrary> load_locked(const std::string& path) {
  State& st = state();
  const std::string where = "op library '" + path + "'";
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UserError(where + ": no such file");
  if (fs::is_directory(path, ec)) throw UserError(where + ": is a directory, not a library");
  const std::string canonical = fs::canonical(path, ec).string();
  if (ec) throw UserError(where + ": " + ec.message());
  // A library is code kiln runs: the rule for the cache's folders holds for it too.
  if (std::string why = path_distrust(canonical); !why.empty()) {
    throw UserError(where + ": refusing to load it: " + why +
                    "; an op library runs as kiln, so only its owner (or root) may be able to "
                    "change it or its folders (chmod go-w)");
  }
  // The bytes hashed (for the module key) are those of one open file; once loaded, the file
  // the loader mapped must be that same file, so a swap between hashing and dlopen is caught.
  const int fd = ::open(canonical.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(where + ": cannot open it: " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat hashed {};
  if (::fstat(fd, &hashed) != 0 || !S_ISREG(hashed.st_mode))
    throw UserError(where + ": not a regular file");
  std::string bytes;
  try {
    bytes = read_regular_file("/proc/self/fd/" + std::to_string(fd), uint64_t{1} << 32);
  } catch (const Error& e) {
    throw UserError(where + ": " + e.what());
  }
  const std::string sha = sha256_hex(bytes);
  {
    std::lock_guard lock(st.mutex);
    for (const auto& l : st.libraries) {
      if (l.canonical != canonical) continue;
      if (l.library->sha256 == sha) return l.library;
      throw UserError(where + " was already loaded by this process with other contents (sha256 " +
                      l.library->sha256.substr(0, 16) + ", now " + sha.substr(0, 16) +
                      "); a process keeps the library it loaded first: restart it to use the "
                      "rebuilt one");
    }
  }
  dlerror();
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw UserError(
        where + ": cannot be loaded as a shared library: " + (why ? why : "unknown dlopen error"));
  }
  if (!maps_file(handle, hashed)) {
    dlclose(handle);
    throw UserError(where +
                    ": the file was replaced while it was being loaded (the library "
                    "mapped is not the one hashed); load it again");
  }
  auto entry = reinterpret_cast<kiln_op_library_fn>(dlsym(handle, KILN_OP_LIBRARY_ENTRY));
  auto refuse = [&](const std::string& why) {
    dlclose(handle);
    throw UserError(where + ": " + why);
  };
  if (!entry) {
    refuse("exports no " + std::string(KILN_OP_LIBRARY_ENTRY) +
           "() entry point: not a kiln op library (define it with KILN_OP_EXPORT, see "
           "include/kiln/op_library.h)");
  }
  const kiln_op_library_info* info = nullptr;
  try {
    info = entry();
  } catch (...) {
    refuse(std::string(KILN_OP_LIBRARY_ENTRY) + "() threw an exception across the C ABI");
  }
  if (!info) refuse(std::string(KILN_OP_LIBRARY_ENTRY) + "() returned NULL");
  if (info->size < kMinInfoSize) {
    refuse(std::string(KILN_OP_LIBRARY_ENTRY) + "() returned a kiln_op_library_info of " +
           std::to_string(info->size) + " bytes (ABI 1.0's has " + std::to_string(kMinInfoSize) +
           ")");
  }
  const std::string host_abi =
      std::to_string(KILN_OP_ABI_MAJOR) + "." + std::to_string(KILN_OP_ABI_MINOR);
  if (info->abi_major != KILN_OP_ABI_MAJOR || info->abi_minor > KILN_OP_ABI_MINOR) {
    refuse("built for op-library ABI " + std::to_string(info->abi_major) + "." +
           std::to_string(info->abi_minor) + "; this kiln has ABI " + host_abi +
           " and loads libraries of ABI " + std::to_string(KILN_OP_ABI_MAJOR) + ".0 to " +
           host_abi + " (rebuild the library against this kiln's include/kiln/op_library.h)");
  }
  const std::string name = info->name ? info->name : "";
  if (!valid_name(name)) {
    refuse("library name '" + name +
           "' is not valid (letters, digits, '_' and '.', starting with a letter or '_')");
  }
  {
    std::lock_guard lock(st.mutex);
    for (const auto& l : st.libraries) {
      if (l.library->name == name) {
        refuse("its name '" + name + "' is already taken by op library '" + l.library->path + "'");
      }
    }
  }
  if (!info->init) refuse("kiln_op_library_info has no init function");

  Registration reg;
  reg.where = where;
  kiln_op_call call;
  call.host_data = &reg;
  kiln_op_registry registry{sizeof(kiln_op_registry), op_host(), &call, register_op};
  const std::string lib_where = "op library '" + name + "' (" + path + ")";
  // From here on the library's code has run: it stays loaded even if refused.
  check_status(lib_where, "init", call, [&] { return info->init(&registry); });
  if (!reg.refusals.empty()) {
    throw UserError(lib_where + ": init: " + reg.refusals.front() +
                    (reg.refusals.size() > 1
                         ? " (and " + std::to_string(reg.refusals.size() - 1) + " more)"
                         : ""));
  }
  if (reg.defs.empty()) throw UserError(lib_where + ": init registered no ops");

  auto lib = std::make_shared<OpLibrary>();
  lib->name = name;
  lib->version = info->version ? info->version : "";
  lib->path = path;
  lib->sha256 = sha;
  lib->abi_major = info->abi_major;
  lib->abi_minor = info->abi_minor;
  OpRegistry& registry_ops = OpRegistry::instance();
  std::lock_guard lock(st.mutex);
  for (const auto& d : reg.defs) {
    if (auto it = st.ops.find(d->name); it != st.ops.end()) {
      throw UserError(lib_where + ": op '" + d->name + "' is already registered by op library '" +
                      it->second->library->name + "' (" + it->second->library->path + ")");
    }
    if (registry_ops.contains(d->name)) {
      throw UserError(lib_where + ": op '" + d->name + "' is a kiln built-in op");
    }
    if (d->has_onnx) {
      auto key = std::make_pair(d->onnx_domain, d->onnx_op_type);
      if (auto it = st.onnx.find(key); it != st.onnx.end()) {
        throw UserError(lib_where + ": op '" + d->name + "' claims ONNX " +
                        onnx_name(d->onnx_domain, d->onnx_op_type) + ", which op '" +
                        it->second->name + "' of op library '" + it->second->library->name + "' (" +
                        it->second->library->path + ") already loads");
      }
    }
  }
  for (auto& d : reg.defs) {
    d->library = lib;
    lib->ops.push_back(d->name);
    std::shared_ptr<const LibraryOpDef> cd = d;
    st.ops[d->name] = cd;
    if (d->has_onnx) st.onnx[{d->onnx_domain, d->onnx_op_type}] = cd;
    registry_ops.add(d->name, [cd](const Attrs& a) { return std::make_shared<LibraryOp>(cd, a); });
  }
  st.libraries.push_back(Loaded{lib, canonical});
  return lib;
}

}  // namespace

std::shared_ptr<const OpLibrary> load_op_library(const std::string& path) {
  std::lock_guard lock(state().load_mutex);
  return load_locked(path);
}

void load_env_op_libraries() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const char* v = std::getenv("KILN_OP_LIBRARIES");
    if (!v) return;
    std::string all = v;
    size_t start = 0;
    while (start <= all.size()) {
      size_t end = all.find(':', start);
      if (end == std::string::npos) end = all.size();
      const std::string path = all.substr(start, end - start);
      start = end + 1;
      if (path.empty()) continue;
      try {
        load_op_library(path);
      } catch (const Error& e) {
        error = std::string("KILN_OP_LIBRARIES: ") + e.what();
        return;
      }
    }
  });
  if (!error.empty()) throw UserError(error);
}

std::vector<std::shared_ptr<const OpLibrary>> loaded_op_libraries() {
  std::lock_guard lock(state().mutex);
  std::vector<std::shared_ptr<const OpLibrary>> out;
  for (const auto& l : state().libraries) out.push_back(l.library);
  return out;
}

std::shared_ptr<const LibraryOpDef> find_library_op(const std::string& name) {
  std::lock_guard lock(state().mutex);
  auto it = state().ops.find(name);
  return it == state().ops.end() ? nullptr : it->second;
}

std::shared_ptr<const LibraryOpDef> find_library_onnx_op(const std::string& domain,
                                                         const std::string& op_type) {
  load_env_op_libraries();
  std::lock_guard lock(state().mutex);
  auto it = state().onnx.find({norm_domain(domain), op_type});
  return it == state().onnx.end() ? nullptr : it->second;
}

}  // namespace kiln
