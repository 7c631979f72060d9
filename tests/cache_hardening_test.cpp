// Regression tests for defects found by attacking the cache and the readers: keys that leave
// the cache, folders and files others can write, planted modules and link commands, shared
// group caches, live work removed by cleanup, an index that is busy or read-only, full disks,
// unbounded growth, wrapping shapes, and names that hold trigraphs. Each test fails on the
// code before its fix.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "cache/cache_index.h"
#include "cache/cache_store.h"
#include "compiler/compile.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "runtime/module/module.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::kiln_env;
using testing::temp_dir;

const std::string kMlpDir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
const std::string kMlp = kMlpDir + "/mlp.json";

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

fs::path entry_of(const Function& f) { return f.info().module_path.parent_path(); }

Graph tiny_graph(const std::string& name, double scale) {
  Graph g(name);
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({exp(x) * scale});
  return g;
}

CompileOptions in(const fs::path& cache) {
  CompileOptions o;
  o.cache_dir = cache;
  return o;
}

bool is_root() { return ::geteuid() == 0; }

// The kiln binary and the examples, copied once into a folder every user can enter: the
// checkout may sit in a folder other users cannot (a 0700 home), and the other user of these
// tests must still reach what it runs.
const fs::path& reachable_copy() {
  static const fs::path dir = [] {
    // temp_dir removes it when the tests pass: a copy of the kiln binary per run adds up.
    const fs::path d = temp_dir("as");
    fs::create_directories(d / "examples");
    fs::copy_file(testing::kiln_binary(), d / "kiln");
    fs::copy(KILN_EXAMPLES_DIR, d / "examples", fs::copy_options::recursive);
    for (const auto& e : fs::recursive_directory_iterator(d))
      ::chmod(e.path().c_str(), e.is_directory() || e.path() == d / "kiln" ? 0755 : 0644);
    ::chmod(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

// Runs the kiln binary as another user (needs root): setpriv changes uid and gid. Arguments
// naming the examples are pointed at the reachable copy.
ProcessResult kiln_as(uid_t uid, gid_t gid, const std::vector<std::string>& env,
                      const std::vector<std::string>& args) {
  std::vector<std::string> e{"HOME=/nonexistent", "TMPDIR=/tmp"};
  e.insert(e.end(), env.begin(), env.end());
  std::vector<std::string> argv{"setpriv", "--reuid=" + std::to_string(uid),
                                "--regid=" + std::to_string(gid), "--clear-groups", "/usr/bin/env"};
  argv.insert(argv.end(), e.begin(), e.end());
  argv.push_back((reachable_copy() / "kiln").string());
  const std::string examples = KILN_EXAMPLES_DIR;
  for (std::string a : args) {
    if (auto at = a.find(examples); at != std::string::npos)
      a.replace(at, examples.size(), (reachable_copy() / "examples").string());
    argv.push_back(a);
  }
  return run_process(argv);
}

void chown_tree(const fs::path& root, uid_t uid, gid_t gid) {
  ASSERT_EQ(::lchown(root.c_str(), uid, gid), 0);
  for (const auto& e : fs::recursive_directory_iterator(root))
    ASSERT_EQ(::lchown(e.path().c_str(), uid, gid), 0) << e.path();
}

// --- 1. keys ------------------------------------------------------------------------------

TEST(CacheHardening, KeysFromTheIndexNeverBecomePathsOutsideTheCache) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-keys");
  const fs::path cache = base / "cache", victim = base / "victim";
  fs::create_directories(victim);
  write_file_atomic(victim / "precious.txt", "keep me");
  auto store = CacheStore::open(cache);
  auto plant = [&] {
    CacheIndex index(cache / "index.sqlite", 10000);
    IndexRow row;
    row.key = "../../victim";  // objects/../../victim is the victim folder
    row.label = "planted";
    row.size = uint64_t{1} << 40;  // far over any cap, so the next eviction picks it
    index.put(row);
  };
  plant();
  ::testing::internal::CaptureStderr();
  GcReport r = store->gc(uint64_t{1} << 20, std::nullopt, true);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(fs::exists(victim / "precious.txt"));
  EXPECT_EQ(r.removed, 0);
  EXPECT_NE(err.find("not a cache key"), std::string::npos) << err;
  EXPECT_FALSE(store->row("../../victim"));

  // The next miss enforces the size cap after publishing: the planted row must not steer it.
  plant();
  ::testing::internal::CaptureStderr();
  Function f = compile(tiny_graph("keys", 2.0), in(cache));
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(fs::exists(victim / "precious.txt"));

  plant();
  auto gc = kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"cache", "gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(fs::exists(victim / "precious.txt"));
  plant();
  auto show = kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"cache", "show", "../../victim"});
  EXPECT_EQ(show.exit_code, 1);
  EXPECT_NE(show.err.find("is not a cache key"), std::string::npos) << show.err;
  EXPECT_EQ(
      error_of([&] { store->entry_dir("../x"); }).find("is not a cache key") != std::string::npos,
      true);
}

// --- 2. who may write the cache -----------------------------------------------------------

TEST(CacheHardening, APrivateCacheIsOwnerOnly) {
  clear_compile_memo();
  const fs::path cache = fs::path(temp_dir("hk-modes")) / "cache";
  Function f = compile(tiny_graph("modes", 3.0), in(cache));
  const fs::path entry = entry_of(f);
  for (const fs::path& d : {cache, cache / "objects", entry.parent_path(), entry, cache / "locks"})
    EXPECT_EQ(mode_of(d), 0700u) << d;
  for (const char* name : {"module.so", "module.c", "meta.json"})
    EXPECT_EQ(mode_of(entry / name), 0600u) << name;
  EXPECT_EQ(mode_of(cache / "index.sqlite"), 0600u);
  int memos = 0;
  for (const auto& e : fs::directory_iterator(cache / "toolchains")) {
    EXPECT_EQ(mode_of(e.path()), 0600u) << e.path();
    ++memos;
  }
  // The toolchain memo is kept in the folder this compile uses, not the default cache.
  EXPECT_EQ(memos, 1);
}

TEST(CacheHardening, ACacheRootOthersControlIsRefusedWithWhyAndWhatToDo) {
  const fs::path cache = fs::path(temp_dir("hk-open")) / "cache";
  fs::create_directories(cache);
  fs::permissions(cache, fs::perms::all);  // 0777: anyone may plant entries
  std::string err = error_of([&] { CacheStore::open(cache); });
  EXPECT_NE(err.find("refusing cache folder '" + cache.string() + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("lets other users write it"), std::string::npos) << err;
  EXPECT_NE(err.find("KILN_CACHE_UMASK"), std::string::npos) << err;
  auto r = kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"compile", kMlp});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("lets other users write it"), std::string::npos) << r.err;
  // A subfolder others can write is as bad as the root.
  fs::permissions(cache, fs::perms::owner_all);
  fs::create_directories(cache / "objects");
  fs::permissions(cache / "objects", fs::perms::all);
  EXPECT_NE(error_of([&] { CacheStore::open(cache); }).find("lets other users write it"),
            std::string::npos);
  if (is_root()) {
    fs::permissions(cache / "objects", fs::perms::owner_all);
    ASSERT_EQ(::chown(cache.c_str(), 65534, 65534), 0);  // made by someone else first
    err = error_of([&] { CacheStore::open(cache); });
    EXPECT_NE(err.find("owned by uid 65534, not by this user"), std::string::npos) << err;
  }
}

TEST(CacheHardening, NoFixedFallbackFolderWhenHomeIsUnset) {
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    if (const char* s = std::getenv(v)) saved.emplace_back(v, s);
    ::unsetenv(v);
  }
  fs::path root = cache_root();
  for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
  EXPECT_NE(root, fs::temp_directory_path() / "kiln-cache");
  if (root.parent_path() == fs::temp_directory_path()) {
    EXPECT_NE(root.filename().string().find(std::to_string(::geteuid())), std::string::npos);
  }
}

// Replaces an entry's module with one whose constructor leaves `marker`, fixes meta.json's
// SHA-256 so the entry is consistent with itself, and hands the files to another owner (or,
// without root, makes them writable by others): what a second user of a shared /tmp could do.
// The one module entry in `cache` (kernel objects are entries too).
fs::path module_entry(const fs::path& cache) {
  fs::path entry;
  for (const auto& shard : fs::directory_iterator(cache / "objects"))
    for (const auto& e : fs::directory_iterator(shard))
      if (fs::exists(e.path() / "module.so")) entry = e.path();
  return entry;
}

void plant_module(const fs::path& entry, const fs::path& marker, bool hand_over = true) {
  const fs::path src = entry.parent_path() / "planted.c";
  write_file_atomic(src,
                    "#include <fcntl.h>\n__attribute__((constructor)) static void planted(void)"
                    " { creat(\"" +
                        marker.string() + "\", 0600); }\n");
  ProcessResult cc = run_process(
      {"clang", "-shared", "-fPIC", "-o", (entry / "module.so").string(), src.string()});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  fs::remove(src);
  EntryMeta m = EntryMeta::parse(read_file(entry / "meta.json"), "meta.json");
  const std::string bytes = read_file(entry / "module.so");
  for (auto& f : m.files) {
    if (f.name != "module.so") continue;
    f.size = bytes.size();
    f.sha256 = sha256_hex(bytes);
  }
  write_file_atomic(entry / "meta.json", m.to_json(), 0600, true);
  ::chmod((entry / "module.so").c_str(), 0600);
  if (!hand_over) return;
  for (const char* name : {"module.so", "meta.json"}) {
    if (is_root()) {
      ASSERT_EQ(::chown((entry / name).c_str(), 65534, 65534), 0);
      ::chmod((entry / name).c_str(), 0644);
    } else {
      ::chmod((entry / name).c_str(), 0666);
    }
  }
}

TEST(CacheHardening, AModuleSomeoneElsePlantedIsNeverLoaded) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-plant");
  const fs::path cache = base / "cache", marker = base / "planted-code-ran", out = base / "out";
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + cache.string()};
  const std::vector<std::string> run{
      "run", kMlp, "--input", "x=" + kMlpDir + "/input.npy", "--output-dir", out.string()};
  auto first = kiln_env(env, run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  fs::path entry = module_entry(cache);
  plant_module(entry, marker);
  auto second = kiln_env(env, run);
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_FALSE(fs::exists(marker)) << "the planted constructor ran";
  EXPECT_NE(second.err.find("is not trusted"), std::string::npos) << second.err;
  EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                     1e-4, 1e-5));
}

// Kernel objects are linked into every module that uses them: a planted one must be refused
// like a planted module, or its code would run in the next model that shares the kernel.
TEST(CacheHardening, AKernelSomeoneElsePlantedIsNeverLinked) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-plant-kernel");
  const fs::path cache = base / "cache", marker = base / "planted-code-ran", out = base / "out";
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + cache.string()};
  const std::vector<std::string> run{
      "run", "-v", kMlp, "--input", "x=" + kMlpDir + "/input.npy", "--output-dir", out.string()};
  ASSERT_EQ(kiln_env(env, run).exit_code, 0);
  int planted = 0;
  for (const auto& shard : fs::directory_iterator(cache / "objects")) {
    for (const auto& e : fs::directory_iterator(shard)) {
      if (!fs::exists(e.path() / "kernel.o")) continue;
      // The kernel's own symbol, so the module links, plus a constructor.
      EntryMeta m = EntryMeta::parse(read_file(e.path() / "meta.json"), "meta.json");
      const fs::path src = base / "planted.c";
      write_file_atomic(src,
                        "#include <fcntl.h>\n__attribute__((constructor)) static void planted(void)"
                        " { creat(\"" +
                            marker.string() +
                            "\", 0600); }\n"
                            "__attribute__((visibility(\"hidden\"))) int " +
                            m.label +
                            "(void *s, void *c, void *const *i, void *const *o, const long *kp)"
                            " { return 0; }\n");
      fs::remove(e.path() / "kernel.o");
      ProcessResult cc = run_process(
          {"clang", "-c", "-fPIC", "-o", (e.path() / "kernel.o").string(), src.string()});
      ASSERT_EQ(cc.exit_code, 0) << cc.err;
      const std::string bytes = read_file(e.path() / "kernel.o");
      for (auto& f : m.files) {
        if (f.name != "kernel.o") continue;
        f.size = bytes.size();
        f.sha256 = sha256_hex(bytes);
      }
      write_file_atomic(e.path() / "meta.json", m.to_json(), 0600, true);
      for (const char* name : {"kernel.o", "meta.json"}) {
        if (is_root()) {
          ASSERT_EQ(::chown((e.path() / name).c_str(), 65534, 65534), 0);
          ::chmod((e.path() / name).c_str(), 0644);
        } else {
          ::chmod((e.path() / name).c_str(), 0666);
        }
      }
      ++planted;
    }
  }
  ASSERT_GT(planted, 0);
  fs::remove_all(module_entry(cache));  // the next run links the module anew
  auto second = kiln_env(env, run);
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_FALSE(fs::exists(marker)) << "the planted kernel was linked and ran";
  EXPECT_NE(second.err.find("is not trusted"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("(0 reused, "), std::string::npos) << second.err;
  EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                     1e-4, 1e-5));
}

TEST(CacheHardening, ALinkCommandSomeoneElsePlantedIsNeverRun) {
  const fs::path base = temp_dir("hk-memo");
  const fs::path cache = base / "cache", marker = base / "planted-link-ran";
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + cache.string()};
  ASSERT_EQ(kiln_env(env, {"compile", kMlp}).exit_code, 0);
  int planted = 0;
  for (const auto& e : fs::directory_iterator(cache / "toolchains")) {
    std::vector<std::string> lines = split_lines(read_file(e.path()));
    ASSERT_GE(lines.size(), 5u);
    lines[3] = "/bin/sh\x1f-c\x1ftouch " + marker.string() + "; exit 1";
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    write_file_atomic(e.path(), text);
    if (is_root()) {
      ASSERT_EQ(::chown(e.path().c_str(), 65534, 65534), 0);
    } else {
      ::chmod(e.path().c_str(), 0666);
    }
    ++planted;
  }
  ASSERT_EQ(planted, 1);
  fs::remove_all(cache / "objects");
  auto r = kiln_env(env, {"compile", kMlp});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "the planted link command ran";
  EXPECT_NE(r.err.find("ignoring"), std::string::npos) << r.err;
}

// The probe is a property of the host: a process with a new cache folder (one filled from the
// remote tier, say) reads it from this user's default cache instead of running clang again,
// under the same trust rules as the memo in the cache folder.
TEST(CacheHardening, TheToolchainProbeIsRememberedPerUserAndTrustedOnlyWhenPrivate) {
  const fs::path base = temp_dir("hk-host-memo");
  const fs::path host = base / "xdg", probes = base / "probes", marker = base / "planted-ran";
  auto env = [&](const std::string& cache) {
    return std::vector<std::string>{"KILN_CACHE_DIR=" + (base / cache).string(),
                                    "XDG_CACHE_HOME=" + host.string(),
                                    "KILN_CC=" + std::string(KILN_TEST_CC_WRAPPER),
                                    "KILN_TEST_CC_PROBE_LOG=" + probes.string()};
  };
  auto probe_count = [&] {
    return fs::exists(probes) ? split_lines(read_file(probes)).size() : size_t{0};
  };
  ASSERT_EQ(kiln_env(env("a"), {"compile", kMlp}).exit_code, 0);
  const size_t first = probe_count();
  EXPECT_GE(first, 1u);
  std::vector<fs::path> memos;
  for (const auto& e : fs::directory_iterator(host / "kiln" / "toolchains")) {
    EXPECT_EQ(mode_of(e.path()), 0600u);
    memos.push_back(e.path());
  }
  ASSERT_EQ(memos.size(), 1u);
  // A new cache folder: a compile (a miss, so the remembered link command runs) and no probe.
  auto b = kiln_env(env("b"), {"compile", "-v", kMlp});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("cache miss"), std::string::npos) << b.err;
  EXPECT_EQ(probe_count(), first);
  EXPECT_TRUE(fs::exists(base / "b" / "toolchains" / memos[0].filename()))
      << "copied into the cache folder, so its next process reads one folder";
  // A host memo others could have written is ignored: the compiler is probed, the planted
  // link command never runs.
  std::vector<std::string> lines = split_lines(read_file(memos[0]));
  ASSERT_GE(lines.size(), 5u);
  lines[3] = "/bin/sh\x1f-c\x1ftouch " + marker.string() + "; exit 1";
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_file_atomic(memos[0], text);
  ::chmod(memos[0].c_str(), 0666);
  auto c = kiln_env(env("c"), {"compile", kMlp});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_FALSE(fs::exists(marker)) << "the planted link command ran";
  EXPECT_NE(c.err.find("ignoring"), std::string::npos) << c.err;
  EXPECT_GT(probe_count(), first);
}

TEST(CacheHardening, AGroupSharedCacheServesASecondUser) {
  if (!is_root()) GTEST_SKIP() << "needs root to act as two users";
  const fs::path base = temp_dir("hk-group");
  const fs::path cache = base / "cache";
  fs::create_directories(cache);
  ASSERT_EQ(::chown(cache.c_str(), 61001, 61000), 0);
  ASSERT_EQ(::chmod(cache.c_str(), 02775), 0);
  const std::vector<std::string> shared{"KILN_CACHE_DIR=" + cache.string(), "KILN_CACHE_UMASK=002"};
  auto a = kiln_as(61001, 61000, shared, {"compile", "-v", kMlp});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("cache miss"), std::string::npos) << a.err;
  auto b = kiln_as(61002, 61000, shared, {"compile", "-v", kMlp});
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("cache hit"), std::string::npos) << b.err;
  for (const auto& shard : fs::directory_iterator(cache / "objects"))
    for (const auto& e : fs::directory_iterator(shard)) {
      EXPECT_EQ(mode_of(e.path()), 0775u);
      // A module's entry, a kernel's or prepared weights'.
      const char* file = fs::exists(e.path() / "kernel.o")               ? "kernel.o"
                         : fs::exists(e.path() / "prepared.safetensors") ? "prepared.safetensors"
                                                                         : "module.so";
      EXPECT_EQ(mode_of(e.path() / file), 0664u);
    }
  // Without the shared mode the second user refuses a folder another user owns.
  auto c = kiln_as(61002, 61000, {"KILN_CACHE_DIR=" + cache.string()}, {"compile", kMlp});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("owned by uid 61001"), std::string::npos) << c.err;
}

TEST(CacheHardening, WithSignaturesRequiredNoWriterWithoutTheKeyCanPlantCode) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-sign");
  const fs::path cache = base / "cache", marker = base / "planted-code-ran", out = base / "out";
  auto keygen = kiln_env({}, {"cache", "keygen", "builders-1", "--out", base.string()});
  ASSERT_EQ(keygen.exit_code, 0) << keygen.err;
  EXPECT_EQ(mode_of(base / "builders-1.secret"), 0600u);
  const std::string pub = split_lines(read_file(base / "builders-1.public")).at(0);
  ASSERT_EQ(pub.rfind("builders-1:", 0), 0u) << pub;
  EXPECT_NE(keygen.out.find(pub), std::string::npos) << keygen.out;
  auto other = kiln_env({}, {"cache", "keygen", "stranger", "--out", base.string()});
  ASSERT_EQ(other.exit_code, 0);
  EXPECT_EQ(kiln_env({}, {"cache", "keygen", "stranger", "--out", base.string()}).exit_code, 1)
      << "an existing key is never overwritten";

  const std::string dir = "KILN_CACHE_DIR=" + cache.string();
  const std::string trust = "KILN_CACHE_TRUSTED_KEYS=@" + (base / "builders-1.public").string();
  const std::string require = "KILN_CACHE_REQUIRE_SIGNATURES=1";
  const std::vector<std::string> writer{
      dir, trust, require, "KILN_CACHE_SIGNING_KEY=" + (base / "builders-1.secret").string()};
  const std::vector<std::string> reader{dir, trust, require};
  const std::vector<std::string> run{
      "run", kMlp, "--input", "x=" + kMlpDir + "/input.npy", "--output-dir", out.string()};
  auto miss = kiln_env(writer, {"compile", "-v", kMlp});
  ASSERT_EQ(miss.exit_code, 0) << miss.err;
  EXPECT_NE(miss.err.find("cache miss"), std::string::npos) << miss.err;
  auto hit = kiln_env(reader, {"compile", "-v", kMlp});
  EXPECT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_NE(hit.err.find("cache hit"), std::string::npos) << "a signed entry loads: " << hit.err;

  fs::path entry = module_entry(cache);
  EXPECT_NE(read_file(entry / "meta.json").find("\"builders-1\""), std::string::npos);
  // Files this user owns, consistent with meta.json, but not what the key holder signed.
  plant_module(entry, marker, /*hand_over=*/false);
  auto planted = kiln_env(reader, run);
  EXPECT_EQ(planted.exit_code, 0) << planted.err;
  EXPECT_FALSE(fs::exists(marker)) << "the planted constructor ran";
  EXPECT_NE(planted.err.find("does not verify"), std::string::npos) << planted.err;
  EXPECT_NE(planted.err.find("compiling without storing"), std::string::npos) << planted.err;
  EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                     1e-4, 1e-5));

  // Unsigned, or signed by a key nobody trusts: refused alike.
  fs::remove_all(cache);
  ASSERT_EQ(kiln_env({dir}, {"compile", kMlp}).exit_code, 0);
  auto unsigned_entry = kiln_env(reader, {"compile", "-v", kMlp});
  EXPECT_NE(unsigned_entry.err.find("carries no signature"), std::string::npos)
      << unsigned_entry.err;
  fs::remove_all(cache);
  ASSERT_EQ(kiln_env({dir, "KILN_CACHE_SIGNING_KEY=" + (base / "stranger.secret").string()},
                     {"compile", kMlp})
                .exit_code,
            0);
  auto stranger = kiln_env(reader, {"compile", "-v", kMlp});
  EXPECT_NE(stranger.err.find("'stranger', which KILN_CACHE_TRUSTED_KEYS does not list"),
            std::string::npos)
      << stranger.err;

  // Configuration mistakes name the variable.
  auto no_keys = kiln_env({dir, require}, {"compile", kMlp});
  EXPECT_EQ(no_keys.exit_code, 1);
  EXPECT_NE(no_keys.err.find("needs the keys to trust in KILN_CACHE_TRUSTED_KEYS"),
            std::string::npos)
      << no_keys.err;
  ::chmod((base / "builders-1.secret").c_str(), 0644);
  auto open_key = kiln_env(writer, {"compile", kMlp});
  EXPECT_EQ(open_key.exit_code, 1);
  EXPECT_NE(open_key.err.find("can be read by other users"), std::string::npos) << open_key.err;
  auto bad_pub = kiln_env({dir, "KILN_CACHE_TRUSTED_KEYS=builders-1:AAAA"}, {"compile", kMlp});
  EXPECT_EQ(bad_pub.exit_code, 1);
  EXPECT_NE(bad_pub.err.find("is not 32 bytes of base64"), std::string::npos) << bad_pub.err;
}

// --- 3. shapes whose product wraps ----------------------------------------------------------

TEST(CacheHardening, ANpyShapeWhoseProductWrapsIsAClearErrorNotACrash) {
  const fs::path base = temp_dir("hk-npy");
  // 274177 * 67280421310721 = 2^64 + 1: each dimension is plausible, the product wraps to 1.
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (274177, 67280421310721), }";
  header.append(117 - 10 - header.size(), ' ');
  header += '\n';
  std::string npy("\x93NUMPY\x01\x00", 8);
  npy.push_back(static_cast<char>(header.size()));
  npy.push_back(0);
  npy += header + std::string(4, '\0');
  write_file_atomic(base / "x.npy", npy);
  std::string err = error_of([&] { read_npy(base / "x.npy"); });
  EXPECT_NE(err.find("x.npy: byte "), std::string::npos) << err;
  EXPECT_NE(err.find("more bytes than fit in 64 bits"), std::string::npos) << err;
  write_file_atomic(base / "m.json", R"({"format": "kiln-graph", "version": 1, "name": "r",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [null, null]}],
    "nodes": [{"op": "reduce_sum", "attrs": {"axes": [1]}, "inputs": ["x"], "outputs": ["y"]}],
    "outputs": ["y"]})");
  auto r = kiln_env({"KILN_CACHE_DIR=" + (base / "cache").string()},
                    {"run", (base / "m.json").string(), "--input", "x=" + (base / "x.npy").string(),
                     "--output-dir", (base / "out").string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("more bytes than fit in 64 bits"), std::string::npos) << r.err;
}

TEST(CacheHardening, AJsonParameterShapeWhoseProductWrapsIsRefused) {
  const fs::path base = temp_dir("hk-json");
  write_file_atomic(base / "m.json", R"({"format": "kiln-graph", "version": 1, "name": "p",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [1]}],
    "parameters": [{"name": "w", "value": [1.0], "shape": [274177, 67280421310721]}],
    "nodes": [{"op": "add", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]})");
  std::string err = error_of([&] { load_model((base / "m.json").string()); });
  EXPECT_NE(err.find("parameters[0].shape"), std::string::npos) << err;
  EXPECT_NE(err.find("more elements than fit in 64 bits"), std::string::npos) << err;
}

// --- 5. cleanup never removes live work -----------------------------------------------------

TEST(CacheHardening, ClearAndGcKeepEveryFolderALiveProcessWorksIn) {
  auto store = CacheStore::open(temp_dir("hk-live"));
  WorkFolder scratch = store->new_scratch("live");
  WorkFolder staging = store->new_staging(std::string(64, 'a'));
  write_file_atomic(scratch.path() / "module.c", "int x;");
  GcReport r = store->clear();
  EXPECT_TRUE(fs::exists(scratch.path() / "module.c"));
  EXPECT_TRUE(fs::exists(staging.path()));

  // A folder whose name carries a PID this namespace does not know (another host or
  // container made it) but whose owner is alive and holds its lock.
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const fs::path foreign = store->root() / "staging" / "abcd.999999999.0";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FileLock held =
        FileLock::acquire(fs::path(foreign.string() + ".lock"), FileLock::Mode::kExclusive);
    fs::create_directories(foreign);
    char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    if (::read(done[0], &c, 1) != 1) ::_exit(1);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  store->gc(std::nullopt, std::nullopt, true);
  store->clear();
  EXPECT_TRUE(fs::exists(foreign)) << "a live owner's folder was removed";
  ASSERT_EQ(::write(done[1], &c, 1), 1);
  ::waitpid(pid, nullptr, 0);
  GcReport after = store->gc(std::nullopt, std::nullopt, true);
  EXPECT_FALSE(fs::exists(foreign)) << "its owner is gone, so it goes";
  EXPECT_GE(after.swept, 1);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
}

TEST(CacheHardening, BypassCompilesSurviveAClearLoop) {
  const fs::path cache = fs::path(temp_dir("hk-clearloop")) / "cache";
  ASSERT_EQ(kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"cache", "stats"}).exit_code, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> clears{0};
  std::thread clearer([&] {
    while (!stop) {
      kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"cache", "clear"});
      ++clears;
    }
  });
  std::vector<std::thread> compilers;
  std::atomic<int> failed{0};
  std::string last_error;
  std::mutex m;
  for (int i = 0; i < 6; ++i) {
    compilers.emplace_back([&] {
      auto r = kiln_env({"KILN_CACHE_DIR=" + cache.string(), "KILN_CACHE=0"}, {"compile", kMlp});
      if (r.exit_code != 0) {
        ++failed;
        std::lock_guard lock(m);
        last_error = r.err;
      }
    });
  }
  for (auto& t : compilers) t.join();
  stop = true;
  clearer.join();
  EXPECT_EQ(failed, 0) << last_error;
  EXPECT_GE(clears, 1);
}

// --- 6. the index is advisory ---------------------------------------------------------------

TEST(CacheHardening, HitsWorkFromAReadOnlyCache) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-readonly");
  const fs::path cache = base / "cache", out = base / "out";
  ASSERT_EQ(kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"compile", kMlp}).exit_code, 0);
  fs::create_directories(out);
  const uid_t user = is_root() ? 65534 : ::geteuid();
  if (is_root()) {
    chown_tree(cache, user, user);
    chown_tree(out, user, user);
  }
  std::vector<fs::path> all{cache};
  for (const auto& e : fs::recursive_directory_iterator(cache)) all.push_back(e.path());
  for (const auto& p : all) ::chmod(p.c_str(), fs::is_directory(p) ? 0555 : 0444);
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + cache.string()};
  const std::vector<std::string> run{
      "run", kMlp, "--input", "x=" + kMlpDir + "/input.npy", "--output-dir", out.string()};
  auto r = is_root() ? kiln_as(user, user, env, run) : kiln_env(env, run);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                     1e-4, 1e-5));
  // A miss compiles beside the read-only cache and says so.
  write_file_atomic(base / "relu.json", R"({"format": "kiln-graph", "version": 1, "name": "relu",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 784]}],
    "nodes": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  ::chmod(base.c_str(), 0755);
  std::vector<std::string> miss{"compile", (base / "relu.json").string()};
  auto m = is_root() ? kiln_as(user, user, env, miss) : kiln_env(env, miss);
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.err.find("read-only"), std::string::npos) << m.err;
  for (const auto& p : all) ::chmod(p.c_str(), fs::is_directory(p) ? 0700 : 0600);
}

// Holds index.sqlite the way another process might, until told to stop.
class IndexHolder {
 public:
  IndexHolder(const fs::path& db, const char* sql) {
    EXPECT_EQ(::pipe(ready_), 0);
    EXPECT_EQ(::pipe(done_), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      sqlite3* h = nullptr;
      if (sqlite3_open(db.c_str(), &h) != SQLITE_OK) ::_exit(2);
      sqlite3_busy_timeout(h, 5000);
      if (sqlite3_exec(h, sql, nullptr, nullptr, nullptr) != SQLITE_OK) ::_exit(3);
      char c = 'r';
      if (::write(ready_[1], &c, 1) != 1) ::_exit(1);
      if (::read(done_[0], &c, 1) != 1) ::_exit(1);
      ::_exit(0);
    }
    ::close(ready_[1]);  // a child that fails closes the pipe instead of hanging the test
    ready_[1] = -1;
    char c;
    ok_ = ::read(ready_[0], &c, 1) == 1;
  }
  ~IndexHolder() {
    char c = 'd';
    if (::write(done_[1], &c, 1) != 1) ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    for (int fd : {ready_[0], done_[0], done_[1]}) ::close(fd);
  }
  bool ok() const { return ok_; }

 private:
  int ready_[2], done_[2];
  pid_t pid_ = -1;
  bool ok_ = false;
};

double seconds_of(const std::function<void()>& f) {
  auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(CacheHardening, ABusyOrLockedIndexNeverStallsACompile) {
  const char* holders[] = {
      "BEGIN IMMEDIATE; INSERT INTO counters(name, value) VALUES('x', 1);",
      "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; INSERT INTO counters(name, value) "
      "VALUES('x', 1);"};
  int round = 0;
  for (const char* sql : holders) {
    SCOPED_TRACE(sql);
    clear_compile_memo();
    const fs::path cache = fs::path(temp_dir("hk-busy" + std::to_string(round++))) / "cache";
    // Warmed by another process, so this one has no connection open when the holder starts
    // (an exclusive-mode holder needs the file to itself).
    ASSERT_EQ(kiln_env({"KILN_CACHE_DIR=" + cache.string()}, {"compile", kMlp}).exit_code, 0);
    std::string new_key;
    {
      IndexHolder holder(cache / "index.sqlite", sql);
      ASSERT_TRUE(holder.ok());
      // A hang detector, not a speed test: before the fix each statement waited 10 s (a hit
      // took 10 s, a miss 20 s); sanitizer builds need the slack.
      double hit_s = seconds_of([&] {
        Function f = compile(load_model(kMlp), in(cache));
        EXPECT_EQ(f.info().cache, CacheStatus::kHit);
      });
      EXPECT_LT(hit_s, 8.0);
      ::testing::internal::CaptureStderr();
      double miss_s = seconds_of([&] {
        Function f = compile(tiny_graph("busy-b", 3.0), in(cache));
        EXPECT_EQ(f.info().cache, CacheStatus::kMiss);
        new_key = f.info().key;
      });
      ::testing::internal::GetCapturedStderr();
      EXPECT_LT(miss_s, 8.0);
    }
    // The entry published while the index was busy gets its row back, so `ls`, stats and the
    // size cap see it.
    auto store = CacheStore::open(cache);
    store->set_patient(true);  // as `kiln cache ls` does
    bool listed = false;
    for (const auto& r : store->list()) listed = listed || r.key == new_key;
    EXPECT_TRUE(listed);
    const IndexTotals t = store->stats();
    EXPECT_EQ(t.entries - t.kernels - t.prepared - t.models, 2);  // modules
  }
}

// --- 7. a full disk -------------------------------------------------------------------------

TEST(CacheHardening, AFullDiskIsAnErrorNamingThePathAndLeavesNothingBehind) {
  const fs::path base = temp_dir("hk-enospc");
  const fs::path cache = base / "cache", out = base / "out";
  const std::string preload = std::string("LD_PRELOAD=") + KILN_ENOSPC_SHIM;
  // Under AddressSanitizer the shim is loaded ahead of the ASan runtime: allow that.
  const std::string asan = "ASAN_OPTIONS=verify_asan_link_order=0";
  auto run = kiln_env(
      {"KILN_CACHE_DIR=" + cache.string(), preload, asan, "KILN_TEST_ENOSPC=y.npy"},
      {"run", kMlp, "--input", "x=" + kMlpDir + "/input.npy", "--output-dir", out.string()});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.err.find((out / "y.npy").string()), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("No space left on device"), std::string::npos) << run.err;
  if (fs::exists(out)) {
    EXPECT_TRUE(fs::is_empty(out)) << "a partial output was left";
  }

  fs::remove_all(cache);  // the run above stored its module: start empty so this one publishes
  auto compile_run =
      kiln_env({"KILN_CACHE_DIR=" + cache.string(), preload, asan, "KILN_TEST_ENOSPC=meta.json"},
               {"compile", kMlp});
  EXPECT_EQ(compile_run.exit_code, 1);
  EXPECT_NE(compile_run.err.find("meta.json"), std::string::npos) << compile_run.err;
  EXPECT_NE(compile_run.err.find("No space left on device"), std::string::npos) << compile_run.err;
  EXPECT_TRUE(fs::is_empty(cache / "staging")) << "the staging folder was left behind";
  EXPECT_TRUE(fs::is_empty(cache / "objects"));
}

// --- 8. bounded growth ----------------------------------------------------------------------

TEST(CacheHardening, UnstoredBuildsGoWithTheirFunctionAndDebrisCountsAgainstTheCap) {
  clear_compile_memo();
  const fs::path cache = fs::path(temp_dir("hk-growth")) / "cache";
  CompileOptions o = in(cache);
  o.use_cache = false;
  {
    Function f = compile(tiny_graph("bypass", 2.0), o);
    EXPECT_TRUE(fs::exists(f.info().module_path));
    EXPECT_FALSE(fs::is_empty(cache / "scratch"));
  }
  EXPECT_TRUE(fs::is_empty(cache / "scratch")) << "a bypassed build outlived its function";

  auto store = CacheStore::open(cache);
  auto debris = [&](const char* sub, const std::string& name, double age_days) {
    fs::path d = cache / sub / name;
    fs::create_directories(d);
    write_file_atomic(d / "module.c", std::string(1 << 20, 'x'));
    const time_t then = std::time(nullptr) - static_cast<time_t>(age_days * 86400);
    struct utimbuf times {
      then, then
    };
    ::utime(d.c_str(), &times);
    return d;
  };
  fs::path old_failed = debris("failed", std::string(64, 'b'), 30);
  fs::path old_quarantined = debris("quarantine", std::string(64, 'c') + ".x", 30);
  fs::path fresh = debris("failed", std::string(64, 'd'), 0);
  EXPECT_GE(store->debris_bytes(), uint64_t{3} << 20);
  store->gc(std::nullopt, std::nullopt, true);
  EXPECT_FALSE(fs::exists(old_failed));
  EXPECT_FALSE(fs::exists(old_quarantined));
  EXPECT_TRUE(fs::exists(fresh));
  // Over the cap, debris goes before any entry.
  { Function keep = compile(tiny_graph("growth", 2.0), in(cache)); }
  clear_compile_memo();
  store->gc(uint64_t{512} << 10, std::nullopt);
  EXPECT_FALSE(fs::exists(fresh));
  const IndexTotals t = store->stats();
  EXPECT_EQ(t.entries - t.kernels - t.prepared - t.models, 1);  // modules
}

// --- also suspected -------------------------------------------------------------------------

TEST(CacheHardening, ABadEntryAnotherProcessHasLoadedIsLeftInPlace) {
  clear_compile_memo();
  const fs::path cache = fs::path(temp_dir("hk-inuse")) / "cache";
  std::string key;
  fs::path entry;
  {
    Function f = compile(tiny_graph("inuse", 2.0), in(cache));
    key = f.info().key;
    entry = entry_of(f);
  }
  clear_compile_memo();
  auto store = CacheStore::open(cache);
  LookupResult loaded = store->lookup(key, false);  // another user of the entry holds its pin
  ASSERT_TRUE(loaded.entry);
  std::ofstream(entry / "module.c", std::ios::app) << "/* changed */";
  ::testing::internal::CaptureStderr();
  LookupResult r = store->lookup(key, true);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(r.entry);
  EXPECT_TRUE(fs::exists(entry / "module.so")) << "moved while another process had it loaded";
  EXPECT_NE(err.find("left in place"), std::string::npos) << err;
  loaded.entry.reset();
  ::testing::internal::CaptureStderr();
  r = store->lookup(key, true);
  ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(entry)) << "once unpinned, the bad entry is quarantined";
}

TEST(CacheHardening, TheInProcessMemoIsBoundedSoGcCanReachTheCap) {
  clear_compile_memo();
  const fs::path cache = fs::path(temp_dir("hk-memo-size")) / "cache";
  ::setenv("KILN_MEMO_SIZE", "1", 1);
  std::string first, second;
  {
    Function a = compile(tiny_graph("memo-a", 2.0), in(cache));
    first = a.info().key;
  }
  {
    Function b = compile(tiny_graph("memo-b", 3.0), in(cache));
    second = b.info().key;
  }
  ::unsetenv("KILN_MEMO_SIZE");
  GcReport r = CacheStore::open(cache)->gc(uint64_t{0}, std::nullopt);
  clear_compile_memo();
  // The first module went (with the kernels' objects, which no module pins).
  EXPECT_FALSE(fs::exists(CacheStore::open(cache)->entry_dir(first)))
      << "the memo pinned every module it ever held";
  EXPECT_GE(r.removed, 1);
  EXPECT_EQ(r.in_use, std::vector<std::string>{second});
}

TEST(CacheHardening, NamesWithTrigraphsReachTheModuleVerbatim) {
  clear_compile_memo();
  const fs::path base = temp_dir("hk-trigraph");
  write_file_atomic(base / "m.json", R"({"format": "kiln-graph", "version": 1, "name": "t??/",
    "inputs": [{"name": "x??/", "dtype": "float32", "shape": [null]}],
    "nodes": [{"name": "n??/", "op": "relu", "inputs": ["x??/"], "outputs": ["y??/"]}],
    "outputs": ["y??/"]})");
  for (const char* cflags : {"", "-std=c11"}) {  // kiln's standard, and one with trigraphs
    SCOPED_TRACE(cflags);
    CompileOptions o = in(base / "cache");
    o.toolchain.cflags = cflags;
    Function f = compile(load_model((base / "m.json").string()), o);
    auto module = Module::load(f.info().module_path);
    ASSERT_EQ(module->info().n_thunks, 1);
    EXPECT_NE(std::string(module->info().thunks[0].name).find("'n?\?/'"), std::string::npos)
        << module->info().thunks[0].name;
  }
}

TEST(CacheHardening, BadCacheSettingsNameTheVariableBeforeAnyCompile) {
  const fs::path base = temp_dir("hk-settings");
  const std::string dir = "KILN_CACHE_DIR=" + (base / "cache").string();
  struct Bad {
    std::string setting, message;
  };
  for (const Bad& b :
       std::vector<Bad>{{"KILN_CACHE_UMASK=9z", "KILN_CACHE_UMASK: '9z' is not an octal umask"},
                        {"KILN_MEMO_SIZE=lots", "KILN_MEMO_SIZE: 'lots' is not a count of modules"},
                        {"KILN_CACHE_REQUIRE_SIGNATURES=yes",
                         "KILN_CACHE_REQUIRE_SIGNATURES: 'yes' is neither 0 nor 1"},
                        {"KILN_CACHE_SIGNING_KEY=" + (base / "absent.secret").string(),
                         "KILN_CACHE_SIGNING_KEY: cannot read"},
                        {"KILN_CACHE_TRUSTED_KEYS=@" + (base / "absent.public").string(),
                         "KILN_CACHE_TRUSTED_KEYS (" + (base / "absent.public").string() + ")"}}) {
    SCOPED_TRACE(b.setting);
    auto r = kiln_env({dir, b.setting}, {"compile", "-v", kMlp});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("cache miss"), std::string::npos) << "failed only after compiling";
  }
}

}  // namespace
}  // namespace kiln
