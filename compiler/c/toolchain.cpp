#include "compiler/c/toolchain.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "cache/cache_store.h"
#include "compiler/c/clang_server.h"
#include "compiler/subprocess.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

// What one `cc -march=native -###` run tells: the CPU name, and (clang) the compiler's
// version and the host's target features. One process: a cold start pays for each.
struct Probe {
  std::string version, cpu, features;
  std::vector<std::string> link;  // the driver's linker command, with @OBJ@ and @OUT@
};

constexpr const char* kProbeOut = "/kiln-probe-out.so";

// The quoted arguments of one `-###` line: "a" "b\"c" -> {a, b"c}.
std::vector<std::string> unquote_args(const std::string& line) {
  std::vector<std::string> args;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '"') continue;
    std::string a;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      a.push_back(line[i]);
    }
    args.push_back(a);
  }
  return args;
}

// The link step the driver would run for a shared object, read from the last `-###` line:
// running the linker directly saves a second compiler-driver start (~35 ms per module).
std::vector<std::string> link_template(const std::string& err) {
  std::istringstream lines(err);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == ' ') last = line;
  }
  std::vector<std::string> args = unquote_args(last);
  int out = -1, obj = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == kProbeOut) out = static_cast<int>(i);
    if (args[i].size() > 2 && args[i].compare(args[i].size() - 2, 2, ".o") == 0 &&
        args[i].find("/null-") != std::string::npos) {
      obj = static_cast<int>(i);
    }
  }
  if (out < 0 || obj < 0 || args.empty() || args[0].find("ld") == std::string::npos) return {};
  args[static_cast<size_t>(out)] = "@OUT@";
  args[static_cast<size_t>(obj)] = "@OBJ@";
  return args;
}

Probe probe_native(const std::string& cc) {
  Probe p;
  ProcessResult r = run_process(
      {cc, "-march=native", "-###", "-x", "c", "/dev/null", "-fPIC", "-shared", "-o", kProbeOut});
  std::smatch m;
  static const std::regex clang_cpu("\"-target-cpu\" \"([^\"]+)\"");
  if (std::regex_search(r.err, m, clang_cpu)) {
    p.cpu = m[1];
    std::string first = r.err.substr(0, r.err.find('\n'));
    if (first.find("clang version") != std::string::npos) p.version = first;
    // A compiler may not know this CPU by name and fall back to an older one (clang 14 calls
    // a Zen 4 "znver3"), dropping vector extensions the host has: the host's AVX-512
    // features are passed as -m flags too (redundant, and harmless, where the name has them).
    static const std::regex feature("\"-target-feature\" \"\\+(avx512[a-z0-9]*)\"");
    std::vector<std::string> extra;
    for (std::sregex_iterator it(r.err.begin(), r.err.end(), feature), end; it != end; ++it) {
      extra.push_back("-m" + (*it)[1].str());
    }
    p.features = join(extra, " ");
    p.link = link_template(r.err);
    return p;
  }
  // gcc reports the resolved value through --help=target.
  r = run_process({cc, "-march=native", "-Q", "--help=target"});
  static const std::regex gcc_cpu("-march=\\s+([A-Za-z0-9_.-]+)");
  if (std::regex_search(r.out, m, gcc_cpu)) {
    p.cpu = m[1];
    return p;
  }
  warn("cannot resolve -march=native for '" + cc + "'; using x86-64-v2");
  p.cpu = "x86-64-v2";
  return p;
}

// Identity of the compiler binary on this host: the probe's result is valid while it holds.
// Host name and CPU model are included so a cache directory shared between machines never
// hands one host's -march to another.
std::string probe_identity(const std::string& cc) {
  std::string resolved = find_program(cc);
  std::error_code ec;
  auto canonical = std::filesystem::canonical(resolved, ec);
  struct stat st {};
  std::string id = cc + "\n" + (ec ? resolved : canonical.string());
  if (::stat(id.substr(id.find('\n') + 1).c_str(), &st) == 0) {
    id += "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
          std::to_string(st.st_mtim.tv_nsec);
  } else {
    return "";  // unknown binary: always probe
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  id += "\n" + std::string(host);
  // The linker's search path (part of the probed link command) follows LIBRARY_PATH.
  const char* library_path = std::getenv("LIBRARY_PATH");
  id += "\nLIBRARY_PATH=" + std::string(library_path ? library_path : "");
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      id += "\n" + line;
      break;
    }
  }
  return id;
}

}  // namespace

std::string find_program(const std::string& cc) {
  if (cc.find('/') != std::string::npos) return cc;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + cc;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return cc;
}

std::vector<std::string> split_flags(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

const Toolchain& Toolchain::get(const ToolchainConfig& config) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Toolchain>> probed;
  std::string cc = config.cc;
  if (cc.empty()) {
    const char* env = std::getenv("KILN_CC");
    cc = env && *env ? env : "clang";
  }
  std::string cflags = config.cflags;
  if (cflags.empty()) {
    const char* env = std::getenv("KILN_CFLAGS");
    cflags = env ? env : "";
  }
  const std::filesystem::path cache_dir =
      config.cache_dir.empty() ? cache_root() : config.cache_dir;
  std::lock_guard lock(mutex);
  auto& slot = probed[cc + "\n" + cflags + "\n" + cache_dir.string()];
  if (slot) return *slot;

  std::unique_ptr<Toolchain> t(new Toolchain());
  std::string features;
  t->cc_ = cc;
  // Probing costs a compiler run (~20 ms, most of it clang loading its libraries): remember
  // the answer per compiler binary, in the cache folder this compile uses and in this user's
  // default cache (the toolchain is a property of the host, so a process with a fresh cache
  // folder, such as one filled from the remote tier, skips the probe). A memo is read only
  // from a folder this user controls: the remembered link command is executed.
  std::string identity = probe_identity(cc);
  const std::filesystem::path memo_rel =
      std::filesystem::path("toolchains") / (sha256_hex(identity).substr(0, 32) + ".txt");
  std::vector<std::shared_ptr<CacheStore>> stores;
  auto open_store = [&](const std::filesystem::path& dir) {
    try {
      stores.push_back(CacheStore::open(dir));
      t->memo_.push_back(dir / memo_rel);
      return true;
    } catch (const UserError& e) {
      if (debug_level() >= 2) log_line(std::string("toolchain memo not used: ") + e.what());
      return false;
    }
  };
  // Layout: version, cpu, extra feature flags, the link command (arguments separated by
  // \x1f), then the identity it was probed for (checked, not trusted).
  auto read_memo = [&](CacheStore& store) {
    std::vector<std::string> lines;
    if (auto text = store.read_private(memo_rel)) lines = split_lines(*text);
    if (lines.size() < 5 ||
        join(std::vector<std::string>(lines.begin() + 4, lines.end()), "\n") != identity) {
      return false;
    }
    t->version_ = lines[0];
    t->cpu_ = lines[1];
    features = lines[2];
    std::istringstream parts(lines[3]);
    for (std::string a; std::getline(parts, a, '\x1f');) t->link_.push_back(a);
    return true;
  };
  size_t known_in = 0;  // the stores before this one lack the memo
  if (!identity.empty()) {
    if (open_store(cache_dir) && read_memo(*stores.back())) known_in = 1;
    const std::filesystem::path host_dir = default_cache_root();
    std::error_code ec;
    if (known_in == 0 && !std::filesystem::equivalent(host_dir, cache_dir, ec) &&
        open_store(host_dir) && read_memo(*stores.back())) {
      known_in = stores.size();
    }
  }
  const bool known = known_in > 0;
  if (known) stores.resize(known_in - 1);
  if (!known) {
    Probe p = probe_native(cc);
    if (p.version.empty()) {
      ProcessResult v = run_process({cc, "--version"});
      if (v.exit_code != 0) {
        throw UserError("C compiler '" + cc + "' does not run (" +
                        (v.err.empty() ? "exit " + std::to_string(v.exit_code) : v.err) +
                        "); install clang (scripts/setup) or set KILN_CC");
      }
      p.version = v.out.substr(0, v.out.find('\n'));
    }
    t->version_ = p.version;
    t->cpu_ = p.cpu;
    features = p.features;
    t->link_ = p.link;
  }
  for (const auto& store : stores) {
    try {
      store->write_private(memo_rel, t->version_ + "\n" + t->cpu_ + "\n" + features + "\n" +
                                         join(t->link_, "\x1f") + "\n" + identity + "\n");
    } catch (const std::exception& e) {
      if (debug_level() >= 2) log_line(std::string("toolchain memo not written: ") + e.what());
    }
  }
  // -fno-math-errno lets sqrt and friends vectorize (generated code never reads errno).
  // -fno-trapping-math lets gcc if-convert the selects in kiln_math.h's functions, as clang
  // does by default (no results change; kiln never reads the FP exception flags): without it
  // gcc 12 kept a silu loop scalar, 3.7 ns per element against 0.58.
  // -fno-unroll-loops halves clang's time on loop-heavy modules; the loops stay vectorized
  // and are memory-bound, so unrolling buys little at run time.
  t->flags_ = {"-std=gnu11",
               "-O3",
               "-fno-unroll-loops",
               "-fPIC",
               "-shared",
               "-march=" + t->cpu_,
               "-fno-math-errno",
               "-fno-trapping-math",
               "-Wall"};
#if defined(__x86_64__)
  // Generated loops at AVX-512's full width: kiln's own kernels (GEMM, convolution, the
  // integer products) run on 512-bit registers already, so the core is at that frequency
  // anyway and -march's preference for 256 bits only halves the loops' width (a quantized
  // EfficientNet-B0 ran 7-10% faster in onnx_bench, its float32 file the same).
  if (__builtin_cpu_supports("avx512f")) t->flags_.push_back("-mprefer-vector-width=512");
#endif
  // KILN_SAME_INDEX asks clang to vectorize loops it may not manage (integer division): the
  // request is a hint, its failure no defect worth a warning.
  if (t->version_.find("clang") != std::string::npos) t->flags_.push_back("-Wno-pass-failed");
  for (const auto& f : split_flags(features)) t->flags_.push_back(f);
  // Extra flags may change how the driver links (sanitizers, -L): then it links itself.
  if (!cflags.empty()) t->link_.clear();
  for (auto& f : split_flags(cflags)) {
    if (f == "-march=native") f = "-march=" + t->cpu_;
    t->flags_.push_back(f);
  }
  t->fingerprint_ = "cc=" + cc + "\nversion=" + t->version_ + "\ncpu=" + t->cpu_ +
                    "\nflags=" + join(t->flags_, " ");
  slot = std::move(t);
  return *slot;
}

KeyComponents Toolchain::key_components() const {
  return {{"toolchain.cc", cc_},
          {"toolchain.version", version_},
          {"toolchain.cpu", cpu_},
          {"toolchain.flags", join(flags_, " ")}};
}

namespace {
// What one compiler, assembler or linker run gave, timed from `start`.
CompileOutcome outcome_of(const ProcessResult& r, std::chrono::steady_clock::time_point start) {
  CompileOutcome outcome;
  outcome.ok = r.exit_code == 0;
  outcome.log = r.err + r.out;
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}
}  // namespace

CompileOutcome Toolchain::compile_object(const std::filesystem::path& source,
                                         const std::filesystem::path& object,
                                         const std::vector<std::string>& extra_args) const {
  std::vector<std::string> argv{cc_};
  for (const auto& f : flags_) {
    if (f != "-shared") argv.push_back(f);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  argv.push_back("-c");
  argv.push_back(source.string());
  argv.push_back("-o");
  argv.push_back(object.string());
  auto start = std::chrono::steady_clock::now();
  if (ClangServers* s = servers()) {
    if (std::optional<ProcessResult> r = s->compile(argv)) {
      if (debug_level() >= 2) log_line("compile (clang server): " + join(argv, " "));
      CompileOutcome outcome = outcome_of(*r, start);
      outcome.served = true;
      return outcome;
    }
  }
  ProcessResult r = run_process(argv);
  if (debug_level() >= 2) log_line("compile: " + join(argv, " "));
  return outcome_of(r, start);
}

ClangServers* Toolchain::servers() const {
  std::call_once(servers_once_, [this] {
    if (version_.find("clang") != std::string::npos)
      servers_ = ClangServers::find(find_program(cc_), version_);
  });
  return servers_;
}

CompileOutcome Toolchain::assemble(const std::filesystem::path& source,
                                   const std::filesystem::path& object) const {
  auto start = std::chrono::steady_clock::now();
  ProcessResult r;
  try {
    r = run_process({"as", source.string(), "-o", object.string()});
    if (debug_level() >= 2) log_line("assemble: as " + source.string());
  } catch (const std::exception& e) {
    r.err = e.what();  // no `as` to start: the caller falls back to the C binding
  }
  return outcome_of(r, start);
}

CompileOutcome Toolchain::link(const std::vector<std::filesystem::path>& objects,
                               const std::filesystem::path& output,
                               const std::vector<std::string>& libraries) const {
  auto start = std::chrono::steady_clock::now();
  auto driver_link = [&] {
    std::vector<std::string> driver{cc_, "-shared", "-fPIC"};
    // Extra flags (sanitizers) must reach the link too.
    for (const auto& f : flags_) {
      if (f.rfind("-fsanitize", 0) == 0 || f.rfind("-L", 0) == 0 || f.rfind("-Wl,", 0) == 0 ||
          f.rfind("-l", 0) == 0 || f.rfind("-fuse-ld", 0) == 0 || f.rfind("--rtlib", 0) == 0)
        driver.push_back(f);
    }
    for (const auto& o : objects) driver.push_back(o.string());
    driver.push_back("-o");
    driver.push_back(output.string());
    for (const auto& lib : libraries) driver.push_back("-l" + lib);
    driver.push_back("-lm");
    if (debug_level() >= 2) log_line("link: " + join(driver, " "));
    return run_process(driver);
  };
  ProcessResult l;
  if (link_.empty()) {
    l = driver_link();
  } else {
    std::vector<std::string> argv;
    for (const auto& a : link_) {
      if (a == "@OUT@") {
        argv.push_back(output.string());
      } else if (a == "@OBJ@") {
        for (const auto& o : objects) argv.push_back(o.string());
        for (const auto& lib : libraries) argv.push_back("-l" + lib);
        argv.push_back("-lm");
      } else {
        argv.push_back(a);
      }
    }
    l = run_process(argv);
    if (debug_level() >= 2) log_line("link: " + join(argv, " "));
    if (l.exit_code != 0) {
      // A stale or damaged memo (a moved linker, an edited file) must not fail every
      // compile: the driver links the objects itself, and the reason is shown.
      warn("the remembered link command failed (" +
           (l.err.empty() ? "exit " + std::to_string(l.exit_code)
                          : l.err.substr(0, l.err.find('\n'))) +
           "); linking through " + cc_ + " instead, and probing again next time");
      std::error_code gone;
      for (const auto& m : memo_) std::filesystem::remove(m, gone);
      l = driver_link();
    }
  }
  return outcome_of(l, start);
}

CompileOutcome Toolchain::compile(const std::filesystem::path& source,
                                  const std::filesystem::path& output,
                                  const std::vector<std::string>& extra_args,
                                  const std::vector<std::string>& libraries) const {
  auto start = std::chrono::steady_clock::now();
  if (link_.empty()) {
    // The driver compiles and links in one run (extra flags may change how it links).
    std::vector<std::string> argv{cc_};
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    argv.push_back(source.string());
    argv.push_back("-o");
    argv.push_back(output.string());
    for (const auto& lib : libraries) argv.push_back("-l" + lib);
    argv.push_back("-lm");
    ProcessResult r = run_process(argv);
    if (debug_level() >= 2) log_line("compile: " + join(argv, " "));
    return outcome_of(r, start);
  }
  const std::filesystem::path object = output.string() + ".o";
  CompileOutcome outcome = compile_object(source, object, extra_args);
  if (outcome.ok) {
    CompileOutcome l = link({object}, output, libraries);
    outcome.ok = l.ok;
    outcome.log += l.log;
  }
  std::error_code ec;
  std::filesystem::remove(object, ec);
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

}  // namespace kiln
