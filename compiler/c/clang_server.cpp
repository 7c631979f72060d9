#include "compiler/c/clang_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <dlfcn.h>

#include "util/log.h"

extern char** environ;

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

constexpr time_t kHelloSeconds = 5;

// KILN_CLANG_SERVER names the server program (a path rather than 0 or 1).
bool named_program() {
  const char* env = std::getenv("KILN_CLANG_SERVER");
  return env && *env && std::string(env) != "0" && std::string(env) != "1";
}

bool turned_off() {
  const char* env = std::getenv("KILN_CLANG_SERVER");
  return env && std::string(env) == "0";
}

// The server program: KILN_CLANG_SERVER (a path), else installed beside kiln (lib/kiln/ next
// to libkiln.so, ../lib/kiln/ from bin/), else the build tree's.
std::vector<fs::path> program_candidates() {
  if (named_program()) return {std::getenv("KILN_CLANG_SERVER")};
  std::vector<fs::path> c;
  if (fs::path dir = own_object_dir(); !dir.empty()) {
    c.push_back(dir / "kiln" / "kiln-clang-server");
    c.push_back(dir / KILN_LIBDIR_FROM_BIN / "kiln-clang-server");
  }
#ifdef KILN_BUILD_CLANG_SERVER
  c.emplace_back(KILN_BUILD_CLANG_SERVER);
#endif
  return c;
}

// Whole reads and writes on the server's socket; MSG_NOSIGNAL: a dead server is an error
// here, never a SIGPIPE that kills kiln.
bool send_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool send_str(int fd, const std::string& s) {
  const auto size = static_cast<uint32_t>(s.size());
  return send_all(fd, &size, sizeof size) && send_all(fd, s.data(), s.size());
}

bool recv_str(int fd, std::string& s) {
  uint32_t size = 0;
  if (!recv_all(fd, &size, sizeof size) || size > (64u << 20)) return false;
  s.resize(size);
  return recv_all(fd, s.data(), size);
}

}  // namespace

struct ClangServers::Server {
  pid_t pid = -1;
  int fd = -1;
  ~Server() {
    // End of input: the server exits; reap it so no zombie stays behind.
    if (fd >= 0) ::close(fd);
    if (pid > 0) {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

std::unique_ptr<ClangServers::Server> ClangServers::start(std::string& version,
                                                          std::string& bin_dir) const {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  // A server outlives compiles: it must not hold the embedding program's other descriptors
  // (a pipe whose end it kept open would never see EOF).
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  const char* argv[] = {program_.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program_.c_str(), &actions, nullptr,
                               const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return nullptr;
  }
  auto server = std::make_unique<Server>();
  server->pid = pid;
  server->fd = fds[0];
  // A server says hello within milliseconds (~40 ms to load clang's libraries); a program
  // that never does must not hang the compile. Compiles themselves take as long as they take.
  timeval hello_limit{kHelloSeconds, 0}, none{0, 0};
  ::setsockopt(server->fd, SOL_SOCKET, SO_RCVTIMEO, &hello_limit, sizeof hello_limit);
  const bool hello = recv_str(server->fd, version) && recv_str(server->fd, bin_dir);
  ::setsockopt(server->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  if (!hello) {
    // Not a server that speaks (another program, or one that failed to start): it may not
    // be reading its input, so end of input would not end it.
    ::kill(server->pid, SIGKILL);
    return nullptr;
  }
  return server;
}

ClangServers* ClangServers::find(const std::string& executable, const std::string& version) {
  if (turned_off() || version.empty()) return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ClangServers>> found;  // by executable, version
  const std::lock_guard lock(mutex);
  auto [it, fresh] = found.try_emplace(executable + "\n" + version);
  if (!fresh) return it->second.get();
  std::error_code ec;
  const fs::path real = fs::canonical(executable, ec);
  if (ec) return nullptr;
  // Why the last candidate was not used; said aloud when the user named the program.
  std::string refused;
  for (const fs::path& candidate : program_candidates()) {
    if (::access(candidate.c_str(), X_OK) != 0) {
      refused = "does not exist or is not executable";
      continue;
    }
    std::unique_ptr<ClangServers> servers(new ClangServers());
    servers->program_ = candidate.string();
    servers->real_compiler_ = real.string();
    servers->installed_dir_ = fs::path(executable).parent_path().string();
    std::string server_version, bin_dir;
    std::unique_ptr<Server> first = servers->start(server_version, bin_dir);
    if (!first) {
      refused = "did not answer as a kiln-clang-server (no hello within " +
                std::to_string(kHelloSeconds) + " s)";
      if (debug_level() >= 2) log_line("clang server: " + candidate.string() + " " + refused);
      continue;
    }
    // The objects must be that clang's: same version, and the executable itself (not a
    // wrapper, nor another copy that prints the same version).
    const fs::path own_bin = fs::weakly_canonical(bin_dir, ec);
    if (server_version != version || ec || real.parent_path() != own_bin) {
      refused = "is built for " + server_version + " in " + bin_dir + ", not " + version + " at " +
                real.string();
      if (debug_level() >= 2) log_line("clang server: " + candidate.string() + " " + refused);
      continue;
    }
    if (debug_level() >= 2) log_line("clang server: " + candidate.string());
    servers->started_ = 1;
    servers->idle_.push_back(std::move(first));
    it->second = std::move(servers);
    break;
  }
  if (!it->second && named_program())
    warn(std::string("KILN_CLANG_SERVER: '") + std::getenv("KILN_CLANG_SERVER") + "' " + refused +
         "; kernels compile in clang processes");
  return it->second.get();
}

std::optional<ProcessResult> ClangServers::compile(const std::vector<std::string>& argv) {
  std::unique_ptr<Server> server;
  {
    const std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      server = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!server) {
    std::string version, bin_dir;
    server = start(version, bin_dir);
    if (!server) return std::nullopt;
    const std::lock_guard lock(mutex_);
    ++started_;
  }
  // argv[0] becomes the real executable, followed by the folder it was found in.
  const auto argc = static_cast<uint32_t>(argv.size() + 1);
  bool ok = send_all(server->fd, &argc, sizeof argc) && send_str(server->fd, real_compiler_) &&
            send_str(server->fd, installed_dir_);
  for (size_t i = 1; ok && i < argv.size(); ++i) ok = send_str(server->fd, argv[i]);
  int32_t status = -1;
  ProcessResult r;
  ok = ok && recv_all(server->fd, &status, sizeof status) && recv_str(server->fd, r.err);
  if (!ok) {
    // The server died (or was killed): this unit goes to a clang process; the server is
    // reaped, and the next compile starts another.
    if (debug_level() >= 1) log_line("clang server " + std::to_string(server->pid) + " stopped");
    ::kill(server->pid, SIGKILL);
    return std::nullopt;
  }
  {
    const std::lock_guard lock(mutex_);
    idle_.push_back(std::move(server));
  }
  if (status == 2) return std::nullopt;
  r.exit_code = status;
  return r;
}

int ClangServers::started() const {
  const std::lock_guard lock(mutex_);
  return started_;
}

ClangServers::~ClangServers() = default;

}  // namespace kiln
