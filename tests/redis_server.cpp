#include "tests/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>

#include "cache/blob_codec.h"
#include "cache/redis_cluster.h"
#include "compiler/subprocess.h"
#include "tests/helpers.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln::testing::redis {

namespace fs = std::filesystem;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int free_cluster_port() {
  for (;;) {
    const int p = free_port();
    if (p > 55535) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(p + 10000));
    const bool bus_free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (bus_free) return p;
  }
}

RedisServer::RedisServer(const std::vector<std::string>& extra, int port)
    : port_(port ? port : free_port()) {
  std::vector<std::string> args{
      "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
      "--appendonly", "no",     "--protected-mode",    "no"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = ::fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
  // Bounded wait for it to answer, failing loudly.
  RedisClient c(url(), 200, 500);
  for (int i = 0; i < 100 && !up_; ++i) {
    try {
      up_ = c.command({"PING"}).str == "PONG";
    } catch (const RemoteError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

std::string plain(const std::string& blob) { return decode_blob(blob, uint64_t{1} << 30); }

std::string cache_key_of(const std::string& redis_key) {
  const auto open = redis_key.find('{'), close = redis_key.rfind('}');
  EXPECT_TRUE(open != std::string::npos && close > open) << redis_key;
  return redis_key.substr(open + 1, close - open - 1);
}

RedisServer::~RedisServer() { kill_now(); }

void RedisServer::kill_now() {
  if (pid_ <= 0) return;  // never kill(-1): that is every process we may signal
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

RedisUrl RedisServer::url() const {
  return RedisUrl::parse("redis://127.0.0.1:" + std::to_string(port_), "test");
}

std::string RedisServer::url_text(const std::string& cred) const {
  return "redis://" + cred + "127.0.0.1:" + std::to_string(port_);
}

RedisReply RedisServer::admin(const std::vector<std::string>& args) const {
  RedisClient c(url(), 500, 5000);
  return c.command(args, uint64_t{1} << 30);
}

namespace {

int listen_on(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 16);
  return fd;
}

}  // namespace

GarbageServer::GarbageServer() : port_(free_port()) {
  fd_ = listen_on(port_);
  thread_ = std::thread([this] {
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      const char junk[] = "HTTP/1.1 418 I'm a teapot\r\n\r\n";
      char buf[4096];
      if (::read(c, buf, sizeof buf) > 0 && ::write(c, junk, sizeof junk - 1) < 0) {
      }
      ::close(c);
    }
  });
}

GarbageServer::~GarbageServer() {
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  thread_.join();
}

ScriptedServer::ScriptedServer(std::function<std::string(const std::string&)> reply, int gap_ms,
                               bool close_after)
    : port_(free_port()) {
  fd_ = listen_on(port_);
  thread_ = std::thread([this, reply = std::move(reply), gap_ms, close_after] {
    std::vector<std::thread> clients;
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      clients.emplace_back([this, c, reply, gap_ms, close_after] {
        char buf[65536];
        while (!stop_) {
          pollfd p{c, POLLIN, 0};
          if (::poll(&p, 1, 100) <= 0) continue;
          const ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) break;
          const std::string out = reply(std::string(buf, static_cast<size_t>(n)));
          if (gap_ms == 0) {
            if (::send(c, out.data(), out.size(), MSG_NOSIGNAL) < 0 || close_after) break;
            continue;
          }
          for (char ch : out) {
            if (stop_ || ::send(c, &ch, 1, MSG_NOSIGNAL) < 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
          }
        }
        ::close(c);
      });
    }
    for (auto& t : clients) t.join();
  });
}

ScriptedServer::~ScriptedServer() {
  stop_ = true;
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  thread_.join();
}

Keys make_keys(const fs::path& dir, const std::string& name) {
  auto r = kiln_env({}, {"cache", "keygen", name, "--out", dir.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return {dir, split_lines(read_file(dir / (name + ".public"))).at(0)};
}

std::vector<std::string> writer_env(const std::string& remote, const fs::path& cache, const Keys& k,
                                    const std::string& name) {
  return {"KILN_CACHE_DIR=" + cache.string(), "KILN_REMOTE_CACHE=" + remote,
          "KILN_CACHE_TRUSTED_KEYS=" + k.pub,
          "KILN_CACHE_SIGNING_KEY=" + (k.dir / (name + ".secret")).string()};
}

std::vector<std::string> reader_env(const std::string& remote, const fs::path& cache,
                                    const Keys& k) {
  return {"KILN_CACHE_DIR=" + cache.string(), "KILN_REMOTE_CACHE=" + remote,
          "KILN_CACHE_TRUSTED_KEYS=" + k.pub};
}

std::vector<std::string> writer_env(const RedisServer& s, const fs::path& cache, const Keys& k,
                                    const std::string& name) {
  return writer_env(s.url_text(), cache, k, name);
}

std::vector<std::string> reader_env(const RedisServer& s, const fs::path& cache, const Keys& k) {
  return reader_env(s.url_text(), cache, k);
}

HostsRun run_hosts_at_once(int n, const std::string& remote, const fs::path& base, const Keys& k,
                           const std::string& cc_wrapper,
                           const std::function<std::vector<std::string>(int)>& args_of) {
  const fs::path log = base / "cc.log";
  auto quoted = [](const std::string& s) { return "'" + s + "' "; };
  std::string script;
  for (int i = 0; i < n; ++i) {
    std::string line = "env ";
    for (const auto& e : writer_env(remote, base / ("m" + std::to_string(i)), k, "builders"))
      line += quoted(e);
    line += quoted("KILN_CC=" + cc_wrapper) + quoted("KILN_TEST_CC_LOG=" + log.string());
    line += quoted(kiln_binary());
    for (const auto& a : args_of(i)) line += quoted(a);
    script += line + "2> " + quoted((base / ("err" + std::to_string(i))).string()) + "|| echo " +
              std::to_string(i) + " >> " + quoted((base / "failed").string()) + "& ";
  }
  script += "wait";
  HostsRun out;
  auto r = run_process({"/bin/sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (fs::exists(base / "failed")) out.failed = read_file(base / "failed");
  const std::regex compiled(R"(kernels \d+ \(\d+ reused, (\d+) compiled)");
  for (int i = 0; i < n; ++i) {
    out.errs.push_back(read_file(base / ("err" + std::to_string(i))));
    std::smatch m;
    if (std::regex_search(out.errs.back(), m, compiled)) out.kernels_compiled += std::stoi(m[1]);
  }
  if (fs::exists(log)) {
    for (const auto& line : split_lines(read_file(log)))
      out.compiler_runs += line.rfind("start ", 0) == 0;
  }
  return out;
}

RedisCluster::RedisCluster(int masters, int replicas)
    : masters_(static_cast<size_t>(masters)), dir_(temp_dir("redis-cluster")) {
  const int total = masters * (1 + replicas);
  for (int i = 0; i < total; ++i) {
    nodes_.push_back(std::make_unique<RedisServer>(
        std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                 dir_ + "/nodes-" + std::to_string(i) + ".conf",
                                 "--cluster-node-timeout", "1000",
                                 "--cluster-require-full-coverage", "no",
                                 "--cluster-replica-validity-factor", "0", "--dir", dir_},
        free_cluster_port()));
    if (!nodes_.back()->up()) return;
  }
  // Every node meets the first; the masters take even slot ranges; replicas follow a master.
  for (int i = 1; i < total; ++i)
    node(0).admin(
        {"CLUSTER", "MEET", "127.0.0.1", std::to_string(node(static_cast<size_t>(i)).port())});
  for (int m = 0; m < masters; ++m) {
    const int lo = 16384 * m / masters, hi = 16384 * (m + 1) / masters - 1;
    node(static_cast<size_t>(m))
        .admin({"CLUSTER", "ADDSLOTSRANGE", std::to_string(lo), std::to_string(hi)});
  }
  // A replica can follow its master only once it knows it (gossip): bounded retries.
  for (int i = masters; i < total; ++i) {
    const std::string master = node_id(static_cast<size_t>(i % masters));
    for (int t = 0; t < 100; ++t) {
      if (!node(static_cast<size_t>(i)).admin({"CLUSTER", "REPLICATE", master}).is_error()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  up_ = wait_ok(20);
}

std::string RedisCluster::node_id(size_t i) const {
  return nodes_.at(i)->admin({"CLUSTER", "MYID"}).str;
}

std::string RedisCluster::url_text(const std::string& cred) const {
  std::string s = "redis+cluster://" + cred;
  for (size_t i = 0; i < masters_; ++i)
    s += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(nodes_[i]->port());
  return s;
}

bool RedisCluster::wait_ok(double seconds) const {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    for (const auto& n : nodes_) {
      if (!n->alive()) continue;  // killed by the test
      try {
        RedisReply info = n->admin({"CLUSTER", "INFO"});
        // state:ok alone does not mean converged (full coverage is not required): every
        // slot must be assigned and served in this node's view.
        if (info.str.find("cluster_state:ok") == std::string::npos ||
            info.str.find("cluster_slots_ok:16384") == std::string::npos ||
            info.str.find("cluster_slots_pfail:0") == std::string::npos ||
            info.str.find("cluster_slots_fail:0") == std::string::npos) {
          ok = false;
          break;
        }
        if (info.str.find("cluster_known_nodes:" + std::to_string(nodes_.size())) ==
            std::string::npos) {
          ok = false;
          break;
        }
        // No slot is served by a node the test killed (a failover has happened).
        for (const auto& range : n->admin({"CLUSTER", "SLOTS"}).elements) {
          if (range.elements.size() < 3) continue;
          const long long port = range.elements[2].elements.at(1).integer;
          for (const auto& m : nodes_) ok = ok && !(m->port() == port && !m->alive());
        }
        if (!ok) break;
      } catch (const RemoteError&) {
        ok = false;  // stopped, not killed: not ok
        break;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

size_t RedisCluster::owner_of(const std::string& key) const {
  const int slot = cluster_slot(key);
  for (const auto& n : nodes_) {
    if (!n->alive()) continue;
    RedisReply slots = n->admin({"CLUSTER", "SLOTS"});
    for (const auto& range : slots.elements) {
      if (range.elements.size() < 3 || slot < range.elements[0].integer ||
          slot > range.elements[1].integer)
        continue;
      const long long port = range.elements[2].elements.at(1).integer;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i]->port() == port) return i;
      }
    }
    break;
  }
  return nodes_.size();
}

}  // namespace kiln::testing::redis
