// The remote tier for a fleet, against real servers the tests start on loopback ports: a Redis
// Cluster (three masters, replicas where failover is tested) with shards killed and stopped
// mid-run, an nginx with WebDAV as the HTTP store (and scripted servers that fail as HTTP
// servers do), several remotes in order, compressed entries and decompression bombs.
#include <gtest/gtest.h>
#include <signal.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "cache/blob_codec.h"
#include "cache/entry_meta.h"
#include "cache/redis_cluster.h"
#include "cache/remote_tier.h"
#include "compiler/subprocess.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "tests/nginx_server.h"
#include "tests/redis_server.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::has;
using testing::kiln_env;
using testing::NginxServer;
using testing::temp_dir;
using namespace testing::redis;

const std::string kMlpDir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
const std::string kMlp = kMlpDir + "/mlp.json";

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The cache key a compile printed ("key     <64 hex>").
std::string printed_key(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex(R"(key\s+([0-9a-f]{64}))"))) << out;
  return m.size() > 1 ? m[1].str() : "";
}

// Small models with distinct keys, so entries land on every shard.
std::vector<fs::path> tiny_models(const fs::path& dir) {
  std::vector<fs::path> out;
  const char* ops[] = {"relu", "tanh", "sigmoid", "exp", "abs", "neg"};
  for (int i = 0; i < 6; ++i) {
    const fs::path p = dir / ("tiny" + std::to_string(i) + ".json");
    write_file_atomic(p, std::string(R"({"format": "kiln-graph", "version": 1, "name": "tiny)") +
                             std::to_string(i) + R"(",
      "inputs": [{"name": "x", "dtype": "float32", "shape": [null, )" +
                             std::to_string(40 + i) + R"(]}],
      "nodes": [{"op": ")" + ops[i] +
                             R"(", "inputs": ["x"], "outputs": ["y"]}],
      "outputs": ["y"]})");
    out.push_back(p);
  }
  return out;
}

ProcessResult run_mlp(const std::vector<std::string>& env, const fs::path& out) {
  auto r = kiln_env(env, {"run", "-v", kMlp, "--input", "x=" + kMlpDir + "/input.npy",
                          "--output-dir", out.string()});
  if (r.exit_code == 0) {
    EXPECT_TRUE(testing::tensors_close(read_npy(out / "y.npy"), read_npy(kMlpDir + "/expected.npy"),
                                       1e-4, 1e-5));
  }
  return r;
}

// --- Redis Cluster --------------------------------------------------------------------------

TEST(FleetCache, ClusterSlotsAreRedisOwn) {
  RedisCluster cluster(3, 0);
  ASSERT_TRUE(cluster.up());
  for (const std::string& key :
       std::vector<std::string>{"123456789", "kiln:e:{abc}", "kiln:l:{abc}", "{user1000}.following",
                                "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{", "",
                                std::string(64, 'f'), "kiln:e:{" + std::string(64, '0') + "}"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(cluster_slot(key), cluster.node(0).admin({"CLUSTER", "KEYSLOT", key}).integer);
  }
  // An entry, its lease and its failure marker share one slot.
  const std::string k(64, 'a');
  EXPECT_EQ(cluster_slot(redis_entry_key("kiln", k)), cluster_slot(redis_lease_key("kiln", k)));
  EXPECT_EQ(cluster_slot(redis_entry_key("kiln", k)), cluster_slot(redis_failed_key("kiln", k)));
}

TEST(FleetCache, TheClusterClientFollowsAskAndMovedWhileASlotMigrates) {
  RedisCluster cluster(3, 0);
  ASSERT_TRUE(cluster.up());
  RedisClusterClient c(ClusterUrl::parse(cluster.url_text(), "test"), 500, 2000, 30);
  const std::string key = "kiln:e:{migrating}";
  ASSERT_EQ(c.command({"SET", key, "value"}).kind, RedisReply::Kind::kStatus);
  const size_t from = cluster.owner_of(key), to = (from + 1) % 3;
  ASSERT_LT(from, 3u);
  const std::string slot = std::to_string(cluster_slot(key));
  const std::string from_id = cluster.node_id(from), to_id = cluster.node_id(to);
  // Mid-migration: the key has moved, the slot has not: the old owner answers ASK.
  cluster.node(to).admin({"CLUSTER", "SETSLOT", slot, "IMPORTING", from_id});
  cluster.node(from).admin({"CLUSTER", "SETSLOT", slot, "MIGRATING", to_id});
  RedisReply moved =
      cluster.node(from).admin({"MIGRATE", "127.0.0.1", std::to_string(cluster.node(to).port()), "",
                                "0", "5000", "KEYS", key});
  ASSERT_FALSE(moved.is_error()) << moved.str;
  RedisReply asked = cluster.node(from).admin({"GET", key});
  ASSERT_TRUE(asked.is_error() && asked.str.rfind("ASK ", 0) == 0) << asked.str;
  RedisReply r = c.command({"GET", key});
  EXPECT_EQ(r.kind, RedisReply::Kind::kString) << r.str;
  EXPECT_EQ(r.str, "value");
  // Migrated: every node says the new owner; the client's map is stale and MOVED corrects it.
  for (size_t i = 0; i < 3; ++i) cluster.node(i).admin({"CLUSTER", "SETSLOT", slot, "NODE", to_id});
  RedisReply redirected = cluster.node(from).admin({"GET", key});
  ASSERT_TRUE(redirected.is_error() && redirected.str.rfind("MOVED ", 0) == 0) << redirected.str;
  r = c.command({"GET", key});
  EXPECT_EQ(r.str, "value");
  EXPECT_EQ(c.command({"SET", key, "again"}).kind, RedisReply::Kind::kStatus);
  EXPECT_EQ(cluster.node(to).admin({"GET", key}).str, "again");
}

// A server that plays a one-node cluster and then redirects to whatever a test says: bad
// addresses are refused (a ShardError), never parsed loosely or followed.
TEST(FleetCache, ALyingClusterRedirectionIsRefused) {
  for (const std::string to :
       {"127.0.0.1:notaport", "127.0.0.1:99999", "evil$host:7000", "127.0.0.1:", ":0", "nocolon"}) {
    SCOPED_TRACE(to);
    auto self = std::make_shared<std::atomic<int>>(0);
    ScriptedServer liar(
        [self, to](const std::string& request) -> std::string {
          if (has(request, "CLUSTER")) {
            const std::string host = "127.0.0.1", port = std::to_string(self->load());
            return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$" + std::to_string(host.size()) + "\r\n" +
                   host + "\r\n:" + port + "\r\n";
          }
          return "-MOVED 1 " + to + "\r\n";
        },
        0);
    self->store(liar.port());
    RedisClusterClient c(
        ClusterUrl::parse("redis+cluster://127.0.0.1:" + std::to_string(liar.port()), "test"), 200,
        500, 30);
    EXPECT_THROW(c.command({"GET", "kiln:e:{x}"}), ShardError);
    // Through the tier: a warning and a miss, nothing thrown.
    RemoteConfig config;
    config.urls = {"redis+cluster://127.0.0.1:" + std::to_string(liar.port())};
    config.trust_unsigned = true;
    RemoteTier tier(config, SignaturePolicy{});
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(tier.fetch(std::string(64, 'c')));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(has(err, "not an address")) << err;
  }
}

TEST(FleetCache, EntriesOnEveryShardHitAndAKilledMasterCostsOnlyItsKeys) {
  RedisCluster cluster(3, 0);
  ASSERT_TRUE(cluster.up());
  const fs::path base = temp_dir("fleet-kill");
  Keys k = make_keys(base, "builders");
  const std::string url = cluster.url_text();
  const auto models = tiny_models(base);
  std::vector<std::string> keys;
  auto w = kiln_env(writer_env(url, base / "writer", k, "builders"), {"compile", kMlp});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  keys.push_back(printed_key(w.out));
  for (const auto& m : models) {
    auto r = kiln_env(writer_env(url, base / "writer", k, "builders"), {"compile", m.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    keys.push_back(printed_key(r.out));
  }
  // Entries are spread over the shards.
  int shards_used = 0;
  for (size_t i = 0; i < 3; ++i)
    shards_used += !cluster.node(i).admin({"KEYS", "kiln:e:*"}).elements.empty();
  EXPECT_EQ(shards_used, 3);
  // A fresh machine hits every module, whichever shard holds it.
  for (size_t i = 0; i < models.size(); ++i) {
    auto r = kiln_env(reader_env(url, base / "reader", k), {"compile", "-v", models[i].string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;
  }
  // A forged entry on a live shard is rejected, never loaded.
  const size_t dead = cluster.owner_of(redis_entry_key("kiln", keys[0]));
  ASSERT_LT(dead, 3u);
  size_t forged = 1;
  while (forged < keys.size() && cluster.owner_of(redis_entry_key("kiln", keys[forged])) == dead)
    ++forged;
  ASSERT_LT(forged, keys.size()) << "every module on one shard";
  const std::string fkey = redis_entry_key("kiln", keys[forged]);
  std::string tampered = plain(cluster.node(cluster.owner_of(fkey)).admin({"GET", fkey}).str);
  tampered.back() ^= 0x20;
  cluster.node(cluster.owner_of(fkey)).admin({"SET", fkey, tampered});

  // The master holding the MLP's module dies.
  cluster.node(dead).kill_now();
  const std::string dead_name = "127.0.0.1:" + std::to_string(cluster.node(dead).port());
  auto r = run_mlp(reader_env(url, base / "reader2", k), base / "out-r2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.err, "cache hit (remote)")) << "its shard is dead: " << r.err;
  EXPECT_LE(count(r.err, "shard " + dead_name), 1) << "warned once per process: " << r.err;
  for (size_t i = 0; i < models.size(); ++i) {
    SCOPED_TRACE(models[i].string());
    auto m = kiln_env(reader_env(url, base / "reader2", k), {"compile", "-v", models[i].string()});
    EXPECT_EQ(m.exit_code, 0) << m.err;
    const std::string rkey = redis_entry_key("kiln", keys[i + 1]);
    if (i + 1 == forged) {
      EXPECT_TRUE(has(m.err, "does not match its SHA-256")) << m.err;
      EXPECT_TRUE(has(m.err, "cache miss")) << m.err;
    } else if (cluster.owner_of(rkey) != dead) {
      EXPECT_TRUE(has(m.err, "cache hit (remote)")) << "a live shard's entry: " << m.err;
    } else {
      EXPECT_TRUE(has(m.err, "cache miss")) << m.err;
    }
  }
}

TEST(FleetCache, AStoppedShardCostsOneTimeoutPerProcess) {
  RedisCluster cluster(3, 0);
  ASSERT_TRUE(cluster.up());
  RemoteConfig c;
  c.urls = {cluster.url_text()};
  c.trust_unsigned = true;
  c.timeout_ms = 300;
  RemoteTier tier(c, SignaturePolicy{});
  // Keys on the shard that stops, and one elsewhere.
  const size_t stopped = cluster.owner_of(redis_entry_key("kiln", std::string(64, '0')));
  std::vector<std::string> on_it;
  std::string elsewhere;
  for (int i = 0; on_it.size() < 6 || elsewhere.empty(); ++i) {
    const std::string key = sha256_hex(std::to_string(i));
    if (cluster.owner_of(redis_entry_key("kiln", key)) == stopped) {
      if (on_it.size() < 6) on_it.push_back(key);
    } else {
      elsewhere = key;
    }
  }
  EXPECT_FALSE(tier.fetch(elsewhere));  // the slot map is read while all are up
  ::kill(cluster.node(stopped).pid(), SIGSTOP);
  ::testing::internal::CaptureStderr();
  for (const auto& key : on_it) EXPECT_FALSE(tier.fetch(key));
  EXPECT_FALSE(tier.fetch(elsewhere));
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::kill(cluster.node(stopped).pid(), SIGCONT);
  EXPECT_EQ(count(err, "no complete reply"), 1)
      << "one timeout, then the shard is skipped: " << err;
  const RemoteCounters n = tier.counters();
  EXPECT_EQ(n.errors, static_cast<int64_t>(on_it.size()));
  EXPECT_EQ(n.misses, 2) << "the other shards still answer";
}

TEST(FleetCache, AReplicaTakesOverAKilledMasterAndItsEntriesStillHit) {
  RedisCluster cluster(3, 1);
  ASSERT_TRUE(cluster.up());
  const fs::path base = temp_dir("fleet-failover");
  Keys k = make_keys(base, "builders");
  const std::string url = cluster.url_text();
  auto w = kiln_env(writer_env(url, base / "writer", k, "builders"), {"compile", kMlp});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string rkey = redis_entry_key("kiln", printed_key(w.out));
  const size_t master = cluster.owner_of(rkey);
  ASSERT_LT(master, 3u);
  RedisServer& replica = cluster.node(master + 3);
  for (int i = 0; i < 100 && replica.admin({"DBSIZE"}).integer <
                                 cluster.node(master).admin({"DBSIZE"}).integer;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A tier that read the map before the failover.
  RemoteConfig c;
  c.urls = {url};
  c.trust_unsigned = true;
  RemoteTier tier(c, SignaturePolicy{});
  const std::string key = cache_key_of(rkey);
  ASSERT_TRUE(tier.fetch(key));
  cluster.node(master).kill_now();
  ASSERT_TRUE(cluster.wait_ok(30)) << "the replica was not promoted";
  EXPECT_EQ(cluster.owner_of(rkey), master + 3);
  ::testing::internal::CaptureStderr();
  bool hit = false;
  for (int i = 0; i < 40 && !hit; ++i) {
    hit = tier.fetch(key).has_value();
    if (!hit) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(hit) << "the map was not read again after the failover";
  auto r = run_mlp(reader_env(url, base / "reader", k), base / "out-r");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;
}

TEST(FleetCache, SixteenHostsMeetingANewModelOnTheClusterCompileItOnce) {
  RedisCluster cluster(3, 0);
  ASSERT_TRUE(cluster.up());
  const fs::path base = temp_dir("fleet-sixteen");
  Keys k = make_keys(base, "builders");
  HostsRun run = run_hosts_at_once(16, cluster.url_text(), base, k, KILN_TEST_CC_WRAPPER, [](int) {
    return std::vector<std::string>{"compile", "-v", kMlp};
  });
  EXPECT_TRUE(run.failed.empty()) << run.failed;
  int hits = 0, compiled = 0;
  for (const auto& err : run.errs) {
    hits += has(err, "cache hit (remote)");
    compiled += has(err, "cache miss");
  }
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(hits, 15);
  // One compile of each unit, on one host: the kernels, and the binding where it is not
  // assembled.
  EXPECT_GT(run.kernels_compiled, 0);
  EXPECT_GE(run.compiler_runs, run.kernels_compiled) << read_file(base / "cc.log");
  EXPECT_LE(run.compiler_runs, run.kernels_compiled + 1) << read_file(base / "cc.log");
}

// --- kernel objects -----------------------------------------------------------------------------

// The MLP without its softmax: another module, most of whose kernels are the MLP's.
fs::path mlp_variant(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(kMlpDir)) {
    if (f.path().extension() == ".npy") fs::copy_file(f.path(), dir / f.path().filename());
  }
  std::string json = read_file(kMlp);
  const auto probs = json.find(",\n    {\"name\": \"probs\"");
  EXPECT_NE(probs, std::string::npos);
  json.erase(probs, json.find("\n", probs + 2) - probs);
  json.replace(json.find("\"outputs\": [\"y\"]"), 16, "\"outputs\": [\"logits\"]");
  write_file_atomic(dir / "mlp2.json", json);
  return dir / "mlp2.json";
}

TEST(FleetCache, ANewModelOnASecondHostLinksKernelsAnotherHostCompiled) {
  RedisCluster cluster(3, 0);
  NginxServer nginx;
  ASSERT_TRUE(cluster.up() && nginx.up());
  const fs::path base = temp_dir("fleet-kernels");
  Keys k = make_keys(base, "builders");
  const fs::path variant = mlp_variant(base / "variant");
  for (const std::string& remote : {cluster.url_text(), nginx.url()}) {
    SCOPED_TRACE(remote);
    const std::string tag = std::to_string(remote.size());
    // Host A compiles the MLP; host B, with an empty cache, meets a model A never saw.
    auto a = kiln_env(writer_env(remote, base / ("a" + tag), k, "builders"), {"compile", kMlp});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    auto b = kiln_env(writer_env(remote, base / ("b" + tag), k, "builders"),
                      {"compile", "-v", variant.string()});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_TRUE(has(b.err, "cache miss")) << b.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        b.err, m,
        std::regex(
            R"(kernels (\d+) \((\d+) reused, (\d+) compiled.*?(\d+) of the reused from the remote)")))
        << b.err;
    EXPECT_GE(std::stoi(m[4]), 1) << "no kernel came from the remote: " << b.err;
    EXPECT_EQ(std::stoi(m[4]), std::stoi(m[2])) << "its local cache was empty";
    EXPECT_LT(std::stoi(m[3]), std::stoi(m[1])) << "it compiled every kernel: " << b.err;
    // Its output is right: the softmax of the variant's logits is the MLP's output.
    auto run = kiln_env(reader_env(remote, base / ("c" + tag), k),
                        {"run", variant.string(), "--input", "x=" + kMlpDir + "/input.npy",
                         "--output-dir", (base / ("out" + tag)).string()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    Tensor logits = read_npy(base / ("out" + tag) / "logits.npy");
    ASSERT_EQ(logits.ndim(), 2);
    const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
    std::vector<double> probs(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      double top = -1e300, sum = 0;
      for (int64_t j = 0; j < cols; ++j) top = std::max(top, logits.load(i * cols + j));
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(logits.load(i * cols + j) - top);
      for (int64_t j = 0; j < cols; ++j)
        probs[static_cast<size_t>(i * cols + j)] = std::exp(logits.load(i * cols + j) - top) / sum;
    }
    EXPECT_TRUE(testing::tensors_close(Tensor::from_doubles(DType::kFloat32, logits.shape(), probs),
                                       read_npy(kMlpDir + "/expected.npy"), 1e-4, 1e-5));
  }
}

// --- HTTP -----------------------------------------------------------------------------------

TEST(FleetCache, AnHttpStoreServesSignedCompressedEntries) {
  NginxServer nginx;
  ASSERT_TRUE(nginx.up());
  const fs::path base = temp_dir("fleet-http");
  Keys k = make_keys(base, "builders");
  auto w = kiln_env(writer_env(nginx.url(), base / "writer", k, "builders"), {"compile", kMlp});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string key = printed_key(w.out);
  const fs::path file = nginx.root() / "kiln" / key;
  ASSERT_TRUE(fs::exists(file)) << "PUT " << file;
  const std::string blob = read_file(file);
  EXPECT_TRUE(is_compressed_blob(blob));
  EXPECT_LT(blob.size(), plain(blob).size()) << "compression saved nothing";
  auto r = run_mlp(reader_env(nginx.url(), base / "reader", k), base / "out-r");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;

  // Tampered on the server: rejected, compiled locally.
  std::string tampered = plain(blob);
  tampered.back() ^= 0x20;
  write_file_atomic(file, tampered);
  r = run_mlp(reader_env(nginx.url(), base / "reader-t", k), base / "out-t");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "does not match its SHA-256")) << r.err;
  EXPECT_FALSE(has(r.err, "cache hit (remote)")) << r.err;

  // Uncompressed writers (KILN_REMOTE_COMPRESS=off) store plain entries any reader reads.
  fs::remove_all(nginx.root());
  auto off = writer_env(nginx.url(), base / "writer-off", k, "builders");
  off.push_back("KILN_REMOTE_COMPRESS=off");
  ASSERT_EQ(run_mlp(off, base / "out-off").exit_code, 0);
  EXPECT_FALSE(is_compressed_blob(read_file(file)));
  r = run_mlp(reader_env(nginx.url(), base / "reader-off", k), base / "out-r-off");
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;

  // A body past KILN_REMOTE_MAX_ENTRY is cut off unread.
  auto small = reader_env(nginx.url(), base / "reader-small", k);
  small.push_back("KILN_REMOTE_MAX_ENTRY=4k");
  r = run_mlp(small, base / "out-small");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "bytes")) << r.err;
  EXPECT_FALSE(has(r.err, "cache hit (remote)")) << r.err;
}

TEST(FleetCache, HttpsIsVerifiedAgainstTheConfiguredCa) {
  NginxServer nginx;
  ASSERT_TRUE(nginx.up());
  const fs::path base = temp_dir("fleet-https");
  Keys k = make_keys(base, "builders");
  const std::string ca = "KILN_REMOTE_CA=" + nginx.certificate().string();
  auto w = writer_env(nginx.https_url(), base / "writer", k, "builders");
  w.push_back(ca);
  auto a = kiln_env(w, {"compile", kMlp});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_FALSE(has(a.err, "warning")) << a.err;
  EXPECT_TRUE(fs::exists(nginx.root() / "kiln" / printed_key(a.out)));
  auto r = reader_env(nginx.https_url(), base / "reader", k);
  r.push_back(ca);
  auto hit = run_mlp(r, base / "out-r");
  EXPECT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_TRUE(has(hit.err, "cache hit (remote)")) << hit.err;
  // Without the CA the self-signed server is not trusted: a warning, a local compile.
  auto untrusted = run_mlp(reader_env(nginx.https_url(), base / "reader-2", k), base / "out-2");
  EXPECT_EQ(untrusted.exit_code, 0) << untrusted.err;
  EXPECT_TRUE(has(untrusted.err, "certificate")) << untrusted.err;
  EXPECT_FALSE(has(untrusted.err, "cache hit (remote)")) << untrusted.err;
  // A CA that is not a file is refused before any compile, naming the variable.
  auto bad = kiln_env({"KILN_REMOTE_CACHE=" + nginx.https_url(), "KILN_REMOTE_CA=/nonexistent"},
                      {"compile", kMlp});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(has(bad.err, "KILN_REMOTE_CA: '/nonexistent' is not a file")) << bad.err;
}

TEST(FleetCache, AnHttpServerThatFailsTruncatesOrHangsCostsALocalCompile) {
  NginxServer nginx;
  ASSERT_TRUE(nginx.up());
  // Promises 100000 bytes, sends 100, closes.
  ScriptedServer truncating(
      [](const std::string&) {
        return "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + std::string(100, 'k');
      },
      0, true);
  // Sends its headers and then one byte a second.
  ScriptedServer hanging(
      [](const std::string&) {
        return "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + std::string(1000, 'k');
      },
      1000);
  const fs::path base = temp_dir("fleet-http-faults");
  struct Case {
    std::string name, url, message;
  };
  for (const Case& c : std::vector<Case>{
           {"500", nginx.url("/broken"), "GET answered HTTP 500"},
           {"truncated", "http://127.0.0.1:" + std::to_string(truncating.port()),
            "the body was cut short"},
           {"hanging", "http://127.0.0.1:" + std::to_string(hanging.port()), "GET failed"},
           {"refused", "http://127.0.0.1:" + std::to_string(free_port()), "GET failed"}}) {
    SCOPED_TRACE(c.name);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_mlp({"KILN_CACHE_DIR=" + (base / c.name).string(), "KILN_REMOTE_CACHE=" + c.url,
                      "KILN_REMOTE_TIMEOUT=0.5", "KILN_REMOTE_CACHE_TRUST=unsigned"},
                     base / ("out-" + c.name));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(r.err, c.message)) << r.err;
    EXPECT_TRUE(has(r.err, "compiling locally")) << r.err;
    EXPECT_EQ(count(r.err, "remote cache http"), 1) << "one fault, then skipped: " << r.err;
    EXPECT_LT(s, 60) << "bounded";
  }
}

// --- several remotes --------------------------------------------------------------------------

TEST(FleetCache, RemotesAreReadInOrderAndANearOneFillsFromAFarOne) {
  RedisServer redis;
  NginxServer nginx;
  ASSERT_TRUE(redis.up() && nginx.up());
  const fs::path base = temp_dir("fleet-list");
  Keys k = make_keys(base, "builders");
  const std::string both = redis.url_text() + " " + nginx.url();
  auto w = kiln_env(writer_env(both, base / "writer", k, "builders"), {"compile", kMlp});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string key = printed_key(w.out);
  EXPECT_FALSE(redis.admin({"GET", redis_entry_key("kiln", key)}).str.empty());
  EXPECT_TRUE(fs::exists(nginx.root() / "kiln" / key)) << "written to every remote";

  // The near store lost everything: a reader finds the far one's entry.
  redis.admin({"FLUSHALL"});
  auto r = run_mlp(reader_env(both, base / "reader", k), base / "out-r");
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;
  EXPECT_EQ(redis.admin({"DBSIZE"}).integer, 0) << "a reader never writes";
  // A writer that finds it far away copies it near, unchanged.
  r = run_mlp(writer_env(both, base / "writer2", k, "builders"), base / "out-w2");
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;
  EXPECT_EQ(redis.admin({"GET", redis_entry_key("kiln", key)}).str,
            read_file(nginx.root() / "kiln" / key));

  // The near store is down: the far one serves, with one warning.
  redis.kill_now();
  r = run_mlp(reader_env(both, base / "reader3", k), base / "out-r3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "cache hit (remote)")) << r.err;
  EXPECT_TRUE(has(r.err, "going on without it")) << r.err;
  // Statistics per remote: the dead one's error, the far one's hits.
  auto stats = kiln_env(reader_env(both, base / "reader3", k), {"cache", "stats"});
  std::smatch m;
  EXPECT_TRUE(std::regex_search(stats.out, m,
                                std::regex("  redis://127\\.0\\.0\\.1:\\d+/0 +0 hits, 0 misses, "
                                           "0 rejected, 1 errors")))
      << stats.out;
  EXPECT_TRUE(std::regex_search(
      stats.out, m, std::regex("  http://127\\.0\\.0\\.1:\\d+/cache +([1-9]\\d*) hits")))
      << stats.out;
  auto status = kiln_env(reader_env(both, base / "reader3", k), {"cache", "remote", "status"});
  EXPECT_EQ(status.exit_code, 1) << "one remote is down";
  EXPECT_TRUE(has(status.out, "remote     " + nginx.url())) << status.out;
  EXPECT_TRUE(has(status.out, "down")) << status.out;
}

// --- compression ------------------------------------------------------------------------------

TEST(FleetCache, ADecompressionBombIsRefusedBeforeItExpands) {
  // 128 MiB of zeros: a few kilobytes compressed.
  const std::string zeros(size_t{128} << 20, '\0');
  std::string frame(ZSTD_compressBound(zeros.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), zeros.data(), zeros.size(), 1));
  ASSERT_LT(frame.size(), 64u << 10);
  const uint64_t max = uint64_t{64} << 20;
  // Declared honestly: past the bound, refused on the header alone.
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob("kiln-zstd 1\n134217728\n" + frame, max); }),
                  "would expand to 134217728 bytes, more than 67108864"));
  // Declared small: the frame's own size disagrees.
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob("kiln-zstd 1\n100\n" + frame, max); }),
                  "expands to 134217728 bytes, its header says 100"));
  // A frame without its size in the header: the output buffer is the bound.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::string unsized(ZSTD_compressBound(zeros.size()), '\0');
  unsized.resize(ZSTD_compress2(cctx, unsized.data(), unsized.size(), zeros.data(), zeros.size()));
  ZSTD_freeCCtx(cctx);
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob("kiln-zstd 1\n1000\n" + unsized, max); }),
                  "corrupt zstd frame"));
  // Truncated, trailing bytes, not zstd at all.
  const std::string good = encode_blob(std::string(5000, 'x'), 3);
  EXPECT_EQ(decode_blob(good, max), std::string(5000, 'x'));
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob(good.substr(0, good.size() - 3), max); }),
                  "truncated zstd frame"));
  EXPECT_TRUE(
      has(testing::error_of([&] { decode_blob(good + "junk", max); }), "after the zstd frame"));
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob("kiln-zstd 1\n5000\nnot a frame", max); }),
                  "not a zstd frame"));
  EXPECT_TRUE(has(testing::error_of([&] { decode_blob("kiln-zstd 1\n-5\n" + frame, max); }),
                  "bad expanded size"));

  // Through the tier: the bomb under a real key is rejected with a warning, never expanded.
  RedisServer redis;
  ASSERT_TRUE(redis.up());
  const std::string key(64, 'b');
  redis.admin({"SET", redis_entry_key("kiln", key), "kiln-zstd 1\n134217728\n" + frame});
  RemoteConfig c;
  c.urls = {redis.url_text()};
  c.trust_unsigned = true;
  RemoteTier tier(c, SignaturePolicy{});
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(tier.fetch(key));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(err, "would expand to 134217728 bytes")) << err;
  EXPECT_EQ(tier.counters().rejects, 1);
}

}  // namespace
}  // namespace kiln
