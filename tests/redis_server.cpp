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

#include "cache/blob_codec.h"
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

RedisServer::RedisServer(const std::vector<std::string>& extra) : port_(free_port()) {
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

RedisServer::~RedisServer() {
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
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

ScriptedServer::ScriptedServer(std::function<std::string(const std::string&)> reply, int gap_ms)
    : port_(free_port()) {
  fd_ = listen_on(port_);
  thread_ = std::thread([this, reply = std::move(reply), gap_ms] {
    std::vector<std::thread> clients;
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      clients.emplace_back([this, c, reply, gap_ms] {
        char buf[65536];
        while (!stop_) {
          pollfd p{c, POLLIN, 0};
          if (::poll(&p, 1, 100) <= 0) continue;
          const ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) break;
          const std::string out = reply(std::string(buf, static_cast<size_t>(n)));
          if (gap_ms == 0) {
            if (::send(c, out.data(), out.size(), MSG_NOSIGNAL) < 0) break;
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

std::vector<std::string> writer_env(const RedisServer& s, const fs::path& cache, const Keys& k,
                                    const std::string& name) {
  return {"KILN_CACHE_DIR=" + cache.string(), "KILN_REMOTE_CACHE=" + s.url_text(),
          "KILN_CACHE_TRUSTED_KEYS=" + k.pub,
          "KILN_CACHE_SIGNING_KEY=" + (k.dir / (name + ".secret")).string()};
}

std::vector<std::string> reader_env(const RedisServer& s, const fs::path& cache, const Keys& k) {
  return {"KILN_CACHE_DIR=" + cache.string(), "KILN_REMOTE_CACHE=" + s.url_text(),
          "KILN_CACHE_TRUSTED_KEYS=" + k.pub};
}

}  // namespace kiln::testing::redis
