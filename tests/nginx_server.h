#pragma once
// A real nginx with WebDAV on a free loopback port, for the HTTP remote store's tests: PUT and
// GET under /cache/ (files under its own temporary folder), and /broken/ answering 500.
#include <sys/types.h>

#include <filesystem>
#include <string>

namespace kiln::testing {

class NginxServer {
 public:
  NginxServer();
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;
  bool up() const { return up_; }
  int port() const { return port_; }
  std::string url(const std::string& path = "/cache") const;
  // Where /cache/ keeps its files.
  std::filesystem::path root() const { return dir_ / "www" / "cache"; }
  void kill_now();

 private:
  std::filesystem::path dir_;
  int port_;
  pid_t pid_ = -1;
  bool up_ = false;
};

}  // namespace kiln::testing
