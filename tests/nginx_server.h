#pragma once
// A real nginx with WebDAV on a free loopback port, for the HTTP remote store's tests: PUT and
// GET under /cache/ (files under its own temporary folder), and /broken/ answering 500; the
// same over TLS on a second port, with a self-signed certificate for 127.0.0.1 (openssl).
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
  std::string https_url(const std::string& path = "/cache") const;
  // The certificate https_url presents (its own CA).
  std::filesystem::path certificate() const { return dir_ / "cert.pem"; }
  // Where /cache/ keeps its files.
  std::filesystem::path root() const { return dir_ / "www" / "cache"; }
  void kill_now();

 private:
  std::filesystem::path dir_;
  int port_, tls_port_;
  pid_t pid_ = -1;
  bool up_ = false;
};

}  // namespace kiln::testing
