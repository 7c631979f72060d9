// The remote tier against a real redis-server, started by each test on a free loopback port:
// a remote hit in a fresh process with an empty local cache, forged entries rejected, faults
// (down, stopped, garbage, out of memory) costing a warning and a local compile, and a
// read-only client that never writes (a Redis ACL user that may only read).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <regex>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "cache/redis_client.h"
#include "cache/remote_tier.h"
#include "compiler/subprocess.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "tests/redis_server.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln_env;
using testing::temp_dir;
using namespace testing::redis;

const std::string kMlpDir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
const std::string kMlp = kMlpDir + "/mlp.json";

std::vector<std::string> run_mlp(const fs::path& out) {
  return {"run",          "-v",        kMlp, "--input", "x=" + kMlpDir + "/input.npy",
          "--output-dir", out.string()};
}

void expect_mlp_output(const fs::path& out) {
  EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                     1e-4, 1e-5));
}

// The one module entry the server holds (beside it, writers upload the module's kernel
// objects, prepared weights, and imported models: those are other families).
std::string only_entry_key(const RedisServer& s) {
  RedisReply keys = s.admin({"KEYS", "kiln:e:*"});
  std::vector<std::string> modules;
  const std::regex beside(R"re("family"\s*:\s*"(prepared|model|kernel)")re");
  for (const auto& k : keys.elements) {
    const std::string blob = plain(s.admin({"GET", k.str}).str);
    if (!std::regex_search(blob.substr(0, 4096), beside)) modules.push_back(k.str);
  }
  EXPECT_EQ(modules.size(), 1u);
  return modules.empty() ? "" : modules[0];
}

TEST(RemoteCache, AFreshProcessWithAnEmptyLocalCacheHitsTheRemote) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-hit");
  Keys k = make_keys(base, "builders");
  auto w = kiln_env(writer_env(redis, base / "writer", k, "builders"), {"compile", "-v", kMlp});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.err.find("cache miss"), std::string::npos) << w.err;
  ASSERT_FALSE(only_entry_key(redis).empty());
  auto r = kiln_env(reader_env(redis, base / "reader", k), run_mlp(base / "out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cache hit (remote)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weights prepared: from cache"), std::string::npos) << r.err;
  expect_mlp_output(base / "out");
  // Materialised locally: the next process hits the local store.
  auto again = kiln_env(reader_env(redis, base / "reader", k), {"compile", "-v", kMlp});
  EXPECT_NE(again.err.find("cache hit\n"), std::string::npos) << again.err;
  auto stats = kiln_env(reader_env(redis, base / "reader", k), {"cache", "stats"});
  // Two remote hits: the module and its prepared weights.
  EXPECT_NE(stats.out.find("remote     2 hits, 0 misses, 0 rejected, 0 errors, 0 uploads"),
            std::string::npos)
      << stats.out;
}

// Rewrites the stored entry with `change` and checks that a reader refuses it with `reason`,
// compiles locally and still gets the right answer.
void expect_rejected(const RedisServer& redis, const fs::path& base, const Keys& k,
                     const std::string& tag, const std::string& reason) {
  SCOPED_TRACE(tag);
  auto r = kiln_env(reader_env(redis, base / ("reader-" + tag), k), run_mlp(base / ("out-" + tag)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("rejected ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cache miss"), std::string::npos) << r.err;
  expect_mlp_output(base / ("out-" + tag));
}

// An ONNX model: a second machine gets the module, the prepared weights and the imported model
// from the remote, and prepares, imports and compiles nothing.
TEST(RemoteCache, ASecondMachineMapsTheImportedModelAndItsPreparedWeights) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-model");
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/onnx/resblock/model.onnx";
  const std::string x = std::string(KILN_EXAMPLES_DIR) + "/onnx/resblock/x.npy";
  Keys k = make_keys(base, "builders");
  auto w =
      kiln_env(writer_env(redis, base / "writer", k, "builders"),
               {"run", "-v", model, "--input", "x=" + x, "--output-dir", (base / "a").string()});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  std::map<std::string, int> families;
  for (const auto& key : redis.admin({"KEYS", "kiln:e:*"}).elements)
    ++families[unpack_entry(plain(redis.admin({"GET", key.str}).str), cache_key_of(key.str))
                   .meta.family];
  EXPECT_EQ(families["prepared"], 1);
  EXPECT_EQ(families["model"], 1);
  EXPECT_GE(families["kernel"], 1) << "kernel objects go to the remote too";
  EXPECT_EQ(families.size(), 4u) << "and one module";
  auto r = kiln_env(reader_env(redis, base / "reader", k), {"run", "-v", model, "--input", "x=" + x,
                                                            "--output-dir", (base / "b").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cache hit (remote)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weights prepared: from cache"), std::string::npos) << r.err;
  const std::string a = read_file(base / "a" / "y.npy"), b = read_file(base / "b" / "y.npy");
  EXPECT_EQ(a, b);
  auto stats = kiln_env(reader_env(redis, base / "reader", k), {"cache", "stats"});
  EXPECT_NE(stats.out.find("remote     3 hits, 0 misses"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("models     1 imported"), std::string::npos) << stats.out;
}

TEST(RemoteCache, ForgedEntriesAreRejectedNeverLoaded) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-forged");
  Keys k = make_keys(base, "builders"), stranger = make_keys(base / "s", "stranger");
  ASSERT_EQ(
      kiln_env(writer_env(redis, base / "writer", k, "builders"), {"compile", kMlp}).exit_code, 0);
  const std::string rkey = only_entry_key(redis);
  const std::string key = cache_key_of(rkey);
  const std::string good = plain(redis.admin({"GET", rkey}).str);

  // Tampered module bytes (the last byte of the last file).
  std::string tampered = good;
  tampered.back() ^= 0x20;
  redis.admin({"SET", rkey, tampered});
  expect_rejected(redis, base, k, "tampered", "does not match its SHA-256");

  // No signature at all.
  RemoteEntry e = unpack_entry(good, key);
  std::vector<std::string> bytes;
  for (auto& [name, b] : e.files) bytes.push_back(b);
  EntryMeta unsigned_meta = e.meta;
  unsigned_meta.signatures.clear();
  redis.admin({"SET", rkey, pack_entry(unsigned_meta, bytes)});
  expect_rejected(redis, base, k, "unsigned", "it carries no signature");

  // Valid bytes, signed by a key the reader does not trust.
  redis.admin({"FLUSHALL"});
  ASSERT_EQ(
      kiln_env(writer_env(redis, base / "stranger-cache", stranger, "stranger"), {"compile", kMlp})
          .exit_code,
      0);
  expect_rejected(redis, base, k, "untrusted",
                  "'stranger', which KILN_CACHE_TRUSTED_KEYS does not list");

  // A genuine signed entry of another key, stored under this one.
  redis.admin({"FLUSHALL"});
  const fs::path tiny = base / "tiny.json";
  write_file_atomic(tiny, R"({"format": "kiln-graph", "version": 1, "name": "tiny",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 784]}],
    "nodes": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  ASSERT_EQ(
      kiln_env(writer_env(redis, base / "tiny-cache", k, "builders"), {"compile", tiny.string()})
          .exit_code,
      0);
  const std::string other = redis.admin({"GET", only_entry_key(redis)}).str;
  redis.admin({"SET", rkey, other});
  expect_rejected(redis, base, k, "other-key", "it describes key");

  // Signed for another namespace.
  redis.admin({"FLUSHALL"});
  auto w = writer_env(redis, base / "ns-cache", k, "builders");
  w.push_back("KILN_REMOTE_CACHE_NAMESPACE=team-b");
  ASSERT_EQ(kiln_env(w, {"compile", kMlp}).exit_code, 0);
  redis.admin({"SET", rkey, redis.admin({"GET", "team-b:e:{" + key + "}"}).str});
  expect_rejected(redis, base, k, "namespace", "is for namespace 'team-b'");

  // No trusted key at all: remote reads are refused with the way out, and nothing breaks.
  auto none = kiln_env(
      {"KILN_CACHE_DIR=" + (base / "none").string(), "KILN_REMOTE_CACHE=" + redis.url_text()},
      {"compile", "-v", kMlp});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("no key is trusted"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("KILN_REMOTE_CACHE_TRUST=unsigned"), std::string::npos) << none.err;
}

double seconds_of(const std::function<void()>& f) {
  auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(RemoteCache, ADownStoppedLyingOrFullServerCostsAWarningAndALocalCompile) {
  const fs::path base = temp_dir("remote-faults");
  Keys k = make_keys(base, "builders");
  struct Fault {
    std::string name, url, expect;
  };
  RedisServer stopped;
  ASSERT_TRUE(stopped.up());
  ::kill(stopped.pid(), SIGSTOP);  // accepts connections, answers nothing
  GarbageServer garbage;
  RedisServer full({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});
  ASSERT_TRUE(full.up());
  for (int i = 0; i < 8; ++i)
    full.admin({"SET", "filler" + std::to_string(i), std::string(256 << 10, 'x')});
  const std::vector<Fault> faults{
      {"down", "redis://127.0.0.1:" + std::to_string(free_port()), "cannot connect"},
      {"stopped", stopped.url_text(), "GET failed"},
      {"garbage", garbage.url(), "GET failed"},
      {"full", full.url_text(), "SET refused: OOM"}};
  for (const auto& f : faults) {
    SCOPED_TRACE(f.name);
    const fs::path out = base / ("out-" + f.name);
    ProcessResult r;
    // A hang detector, not a speed test: a 0.3 s operation timeout, one try per process.
    double s = seconds_of([&] {
      r = kiln_env({"KILN_CACHE_DIR=" + (base / f.name).string(), "KILN_REMOTE_CACHE=" + f.url,
                    "KILN_REMOTE_TIMEOUT=0.3", "KILN_CACHE_TRUSTED_KEYS=" + k.pub,
                    "KILN_CACHE_SIGNING_KEY=" + (base / "builders.secret").string()},
                   run_mlp(out));
    });
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("compiling locally"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(f.expect), std::string::npos) << r.err;
    EXPECT_LT(s, 10.0);
    expect_mlp_output(out);
  }
  ::kill(stopped.pid(), SIGCONT);
}

TEST(RemoteCache, AFailedServerIsSkippedAfterTheFirstTimeout) {
  RemoteConfig c;
  c.urls = {"redis://127.0.0.1:" + std::to_string(free_port())};
  c.trust_unsigned = true;
  RemoteTier tier(c, SignaturePolicy{});
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(tier.fetch(std::string(64, 'a')));
  EXPECT_FALSE(tier.fetch(std::string(64, 'b')));
  EXPECT_FALSE(tier.fetch(std::string(64, 'c')));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.counters().errors, 1) << "a dead server was tried more than once: " << err;
  EXPECT_NE(err.find("skipped for 30 s"), std::string::npos) << err;
}

TEST(RemoteCache, AReaderWithoutAKeyNeverWrites) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  // A user that may read entries and nothing else.
  ASSERT_FALSE(
      redis.admin({"ACL", "SETUSER", "reader", "on", ">secret", "~*", "+get", "+ping"}).is_error());
  const fs::path base = temp_dir("remote-readonly");
  Keys k = make_keys(base, "builders");
  ASSERT_EQ(
      kiln_env(writer_env(redis, base / "writer", k, "builders"), {"compile", kMlp}).exit_code, 0);
  redis.admin({"ACL", "LOG", "RESET"});
  const std::string as_reader = "KILN_REMOTE_CACHE=" + redis.url_text("reader:secret@");
  // A hit, and a miss (a model nobody uploaded): neither may write.
  const fs::path tiny = base / "tiny.json";
  write_file_atomic(tiny, R"({"format": "kiln-graph", "version": 1, "name": "tiny",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 4]}],
    "nodes": [{"op": "exp", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  for (const std::string& model : {kMlp, tiny.string()}) {
    auto r = kiln_env({"KILN_CACHE_DIR=" + (base / "reader").string(), as_reader,
                       "KILN_CACHE_TRUSTED_KEYS=" + k.pub},
                      {"compile", "-v", model});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  }
  RedisReply log = redis.admin({"ACL", "LOG"});
  EXPECT_EQ(log.elements.size(), 0u) << "the reader attempted a command its ACL denies";
  // Control: a writer using the read-only account is denied, and the log shows it.
  auto w = kiln_env(
      {"KILN_CACHE_DIR=" + (base / "w2").string(), as_reader, "KILN_CACHE_TRUSTED_KEYS=" + k.pub,
       "KILN_CACHE_SIGNING_KEY=" + (base / "builders.secret").string()},
      {"compile", tiny.string()});
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.err.find("NOPERM"), std::string::npos) << w.err;
  EXPECT_GT(redis.admin({"ACL", "LOG"}).elements.size(), 0u);
}

TEST(RemoteCache, EightMachinesMeetingANewModelCompileItOnce) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-eight");
  Keys k = make_keys(base, "builders");
  // Eight "machines": each its own local cache, all writers, one Redis, started together.
  HostsRun run = run_hosts_at_once(8, redis.url_text(), base, k, KILN_TEST_CC_WRAPPER, [&](int i) {
    return std::vector<std::string>{"run",
                                    "-v",
                                    kMlp,
                                    "--input",
                                    "x=" + kMlpDir + "/input.npy",
                                    "--output-dir",
                                    (base / ("out" + std::to_string(i))).string()};
  });
  EXPECT_TRUE(run.failed.empty()) << run.failed;
  // One machine compiled: the compiler ran once per kernel, there only (and for the binding
  // where it is not assembled).
  EXPECT_GT(run.kernels_compiled, 0);
  EXPECT_GE(run.compiler_runs, run.kernels_compiled) << read_file(base / "cc.log");
  EXPECT_LE(run.compiler_runs, run.kernels_compiled + 1) << read_file(base / "cc.log");
  int remote_hits = 0;
  for (int i = 0; i < 8; ++i) {
    remote_hits += read_file(base / ("err" + std::to_string(i))).find("cache hit (remote)") !=
                   std::string::npos;
    expect_mlp_output(base / ("out" + std::to_string(i)));
  }
  EXPECT_EQ(remote_hits, 7);
}

TEST(RemoteCache, ALeaseWhoseHolderWasKilledExpiresAndAnotherMachineCompiles) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-killed");
  Keys k = make_keys(base, "builders");
  const fs::path started = base / "started", hold = base / "hold";
  ASSERT_EQ(::mkfifo(started.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(hold.c_str(), 0600), 0);
  int started_fd = ::open(started.c_str(), O_RDONLY | O_NONBLOCK);
  auto env = writer_env(redis, base / "holder", k, "builders");
  env.push_back("KILN_REMOTE_LEASE=3");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    std::vector<std::string> args{"/usr/bin/env"};
    args.insert(args.end(), env.begin(), env.end());
    for (const std::string& e :
         {"KILN_CC=" + std::string(KILN_TEST_CC_WRAPPER),
          "KILN_TEST_CC_STARTED=" + started.string(), "KILN_TEST_CC_HOLD=" + hold.string()})
      args.push_back(e);
    args.push_back(testing::kiln_binary());
    args.push_back("compile");
    args.push_back(kMlp);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/usr/bin/env", argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  pollfd pfd{started_fd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, 60000);
  ::close(started_fd);
  if (ready != 1) ::kill(-pid, SIGKILL);
  ASSERT_EQ(ready, 1) << "the holder's compile never started";
  EXPECT_EQ(redis.admin({"KEYS", "kiln:l:*"}).elements.size(), 1u) << "the holder took no lease";
  ::kill(-pid, SIGKILL);  // dies holding the lease
  ::waitpid(pid, nullptr, 0);
  auto other = writer_env(redis, base / "other", k, "builders");
  other.push_back("KILN_REMOTE_LEASE=3");
  other.push_back("KILN_CC=" + std::string(KILN_TEST_CC_WRAPPER));  // the compiler is in the key
  std::vector<std::string> cmd{"/usr/bin/timeout", "60", "/usr/bin/env"};
  cmd.insert(cmd.end(), other.begin(), other.end());
  cmd.insert(cmd.end(), {"KILN_DEBUG=2", testing::kiln_binary(), "compile", "-v", kMlp});
  ProcessResult r = run_process(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cache miss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("waiting for another compile"), std::string::npos)
      << "it should have found the dead holder's lease first: " << r.err;
  EXPECT_EQ(only_entry_key(redis).empty(), false) << "the second machine uploads its build";
}

TEST(RemoteCache, StatusPushAndPull) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-cli");
  Keys k = make_keys(base, "builders");
  // Compiled with no remote configured, then pushed.
  auto local = kiln_env({"KILN_CACHE_DIR=" + (base / "w").string()}, {"compile", kMlp});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::string key = local.out.substr(local.out.find("key") + 8, 64);
  auto push = kiln_env(writer_env(redis, base / "w", k, "builders"), {"cache", "push"});
  EXPECT_EQ(push.exit_code, 0) << push.err;
  // The module and its kernel objects (a machine missing the module links from them).
  std::smatch pushed;
  ASSERT_TRUE(std::regex_search(push.out, pushed, std::regex(R"(pushed (\d+) entries)")))
      << push.out;
  EXPECT_GE(std::stoi(pushed[1]), 2) << "the module and at least one kernel: " << push.out;
  auto status = kiln_env(reader_env(redis, base / "r", k), {"cache", "remote", "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  const std::string entries = "entries    " + pushed[1].str();
  for (const char* word : {"reachable  yes", entries.c_str(), "namespace  kiln",
                           "trusted    builders", "writes     no", "compress   zstd, level 3"})
    EXPECT_NE(status.out.find(word), std::string::npos) << word << " not in\n" << status.out;
  auto pull = kiln_env(reader_env(redis, base / "r", k), {"cache", "pull", key});
  EXPECT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_NE(pull.out.find("pulled 1 entries"), std::string::npos) << pull.out;
  auto hit = kiln_env({"KILN_CACHE_DIR=" + (base / "r").string()}, {"compile", "-v", kMlp});
  EXPECT_NE(hit.err.find("cache hit\n"), std::string::npos)
      << "pulled entries hit locally: " << hit.err;
  // A reader may not push; a server that is down makes status fail.
  EXPECT_EQ(kiln_env(reader_env(redis, base / "r", k), {"cache", "push"}).exit_code, 1);
  auto down = kiln_env({"KILN_CACHE_DIR=" + (base / "r").string(),
                        "KILN_REMOTE_CACHE=redis://127.0.0.1:" + std::to_string(free_port())},
                       {"cache", "remote", "status"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.out.find("reachable  no"), std::string::npos) << down.out;
}

TEST(RemoteCache, TheFirstWriterWinsAndADifferentBuildIsReportedAsNotReproducible) {
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const fs::path base = temp_dir("remote-repro");
  Keys k = make_keys(base, "builders");
  ASSERT_EQ(kiln_env(writer_env(redis, base / "a", k, "builders"), {"compile", kMlp}).exit_code, 0);
  const std::string rkey = only_entry_key(redis);
  const std::string key = cache_key_of(rkey);
  // Another machine's build of the same key with different bytes (consistent, unsigned).
  RemoteEntry e = unpack_entry(plain(redis.admin({"GET", rkey}).str), key);
  std::vector<std::string> bytes;
  for (auto& [name, b] : e.files)
    bytes.push_back(name == "module.c" ? b + "/* other build */\n" : b);
  for (size_t i = 0; i < e.meta.files.size(); ++i) {
    e.meta.files[i].size = bytes[i].size();
    e.meta.files[i].sha256 = sha256_hex(bytes[i]);
  }
  const std::string theirs = pack_entry(e.meta, bytes);
  redis.admin({"SET", rkey, theirs});
  auto b = kiln_env(writer_env(redis, base / "b", k, "builders"), {"compile", kMlp});
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("is not reproducible"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find(key), std::string::npos) << "names the key: " << b.err;
  EXPECT_EQ(redis.admin({"GET", rkey}).str, theirs) << "SET NX: the first writer's entry stays";
}

TEST(RemoteCache, BadRemoteSettingsNameTheVariableBeforeAnyCompile) {
  const fs::path base = temp_dir("remote-settings");
  const std::string dir = "KILN_CACHE_DIR=" + (base / "cache").string();
  const std::string url = "KILN_REMOTE_CACHE=redis://127.0.0.1:" + std::to_string(free_port());
  struct Bad {
    std::vector<std::string> settings;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"KILN_REMOTE_CACHE=redis://127.0.0.1:6379 htp://host:6379"},
            "KILN_REMOTE_CACHE: 'htp://host:6379' is not a Redis URL (no redis:// scheme"},
           {{"KILN_REMOTE_CACHE=redis+cluster://127.0.0.1:7000,127.0.0.1:7001/2"},
            "a Redis Cluster has only database 0"},
           {{"KILN_REMOTE_CACHE=http://127.0.0.1:8080/a b"}, "'b' is not a Redis URL"},
           {{"KILN_REMOTE_CACHE=http://127.0.0.1:8080/c%2e%2e"}, "the path may hold only"},
           {{url, "KILN_REMOTE_COMPRESS=brotli"}, "KILN_REMOTE_COMPRESS: 'brotli' is none of"},
           {{url, "KILN_REMOTE_COMPRESS=zstd:99"}, "KILN_REMOTE_COMPRESS: 'zstd:99' is none of"},
           {{"KILN_REMOTE_CACHE=redis://host:99999"}, "is not a Redis URL (bad port"},
           {{url, "KILN_REMOTE_TIMEOUT=soon"}, "KILN_REMOTE_TIMEOUT: 'soon' is not a duration"},
           {{url, "KILN_REMOTE_CACHE_NAMESPACE=a:b"},
            "KILN_REMOTE_CACHE_NAMESPACE: 'a:b' is not a name"},
           {{url, "KILN_REMOTE_CACHE_TRUST=maybe"}, "KILN_REMOTE_CACHE_TRUST: 'maybe' is neither"},
           {{url, "KILN_REMOTE_LEASE=-1"}, "KILN_REMOTE_LEASE: '-1' is not a duration"}}) {
    SCOPED_TRACE(b.message);
    std::vector<std::string> env{dir};
    env.insert(env.end(), b.settings.begin(), b.settings.end());
    auto r = kiln_env(env, {"compile", "-v", kMlp});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("cache miss"), std::string::npos) << "failed only after compiling";
  }
}

// Every command has a size bound as well as a deadline: a reply past it is cut off unread
// (the connection dropped), and the next command reconnects.
TEST(RemoteCache, AReplyPastItsSizeBoundIsCutOffUnread) {
  ScriptedServer huge(
      [](const std::string& request) {
        if (request.find("PING") != std::string::npos) return std::string("+PONG\r\n");
        // Announces 2 GB, sends 8 MB of it at once, then nothing.
        return "$2000000000\r\n" + std::string(8 << 20, 'x');
      },
      0);
  RedisClient c(RedisUrl::parse(huge.url(), "test"), 500, 5000);
  try {
    c.command({"GET", "k"}, 1 << 20);
    FAIL() << "a 2 GB reply was accepted";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than 1048576 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.command({"PING"}).str, "PONG") << "the next command reconnects";
}

}  // namespace
}  // namespace kiln
