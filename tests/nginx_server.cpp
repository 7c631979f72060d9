#include "tests/nginx_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "compiler/subprocess.h"
#include "tests/helpers.h"
#include "tests/redis_server.h"
#include "util/fs.h"

namespace kiln::testing {

namespace fs = std::filesystem;

NginxServer::NginxServer()
    : dir_(temp_dir("nginx")), port_(redis::free_port()), tls_port_(redis::free_port()) {
  while (tls_port_ == port_) tls_port_ = redis::free_port();
  fs::create_directories(root());
  const std::string d = dir_.string();
  auto cert = run_process({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                           d + "/key.pem", "-out", d + "/cert.pem", "-days", "2", "-subj",
                           "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"});
  if (cert.exit_code != 0) return;
  // One process (master_process off): it runs as whoever runs the test and writes the files
  // itself; every path nginx would otherwise take from its build defaults is set here.
  std::string conf = "daemon off;\nmaster_process off;\n";
  conf += "pid " + d + "/nginx.pid;\nerror_log " + d + "/error.log warn;\n";
  conf += "events { worker_connections 256; }\nhttp {\n  access_log off;\n";
  for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
    conf += std::string("  ") + temp + "_temp_path " + d + "/" + temp + ";\n";
  conf += "  client_max_body_size 512m;\n  server {\n";
  conf += "    listen 127.0.0.1:" + std::to_string(port_) + ";\n";
  conf += "    listen 127.0.0.1:" + std::to_string(tls_port_) + " ssl;\n";
  conf += "    ssl_certificate " + d + "/cert.pem;\n    ssl_certificate_key " + d + "/key.pem;\n";
  conf += "    location /cache/ {\n      root " + d + "/www;\n";
  conf += "      dav_methods PUT DELETE;\n      create_full_put_path on;\n";
  conf += "      dav_access user:rw;\n    }\n";
  conf += "    location /broken/ { return 500; }\n  }\n}\n";
  write_file_atomic(dir_ / "nginx.conf", conf);
  pid_ = ::fork();
  if (pid_ == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    const std::string conf = d + "/nginx.conf", err = d + "/error.log";
    ::execlp("nginx", "nginx", "-p", d.c_str(), "-c", conf.c_str(), "-e", err.c_str(), nullptr);
    ::execl("/usr/sbin/nginx", "nginx", "-p", d.c_str(), "-c", conf.c_str(), "-e", err.c_str(),
            nullptr);
    ::_exit(127);
  }
  // Bounded wait until it accepts connections.
  for (int i = 0; i < 100 && !up_; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    up_ = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (!up_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

NginxServer::~NginxServer() { kill_now(); }

void NginxServer::kill_now() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string NginxServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

std::string NginxServer::https_url(const std::string& path) const {
  return "https://127.0.0.1:" + std::to_string(tls_port_) + path;
}

}  // namespace kiln::testing
