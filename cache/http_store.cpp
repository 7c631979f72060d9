#include "cache/http_store.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <cctype>
#include <chrono>
#include <mutex>
#include <type_traits>

#include "util/error.h"
#include "util/escape.h"

namespace kiln {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Sink {
  std::string* out;
  uint64_t max;
  bool over = false;
};

// The same deadline rule as Redis commands: the timeout, plus a second per
// kMinBytesPerSecond moved either way.
struct Pace {
  double start;
  int timeout_ms;
  bool late = false;
};

int check_pace(void* user, curl_off_t, curl_off_t down, curl_off_t, curl_off_t up) {
  auto* p = static_cast<Pace*>(user);
  const double allowed = p->timeout_ms / 1000.0 +
                         static_cast<double>(down + up) / static_cast<double>(kMinBytesPerSecond);
  if (now_s() - p->start > allowed) {
    p->late = true;
    return 1;  // aborts the transfer
  }
  return 0;
}

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->out->size() + n > sink->max) {
    sink->over = true;
    return 0;  // aborts the transfer: the rest is never read
  }
  sink->out->append(data, n);
  return n;
}

// libcurl, opened on first use: linked, it would load ~30 libraries (TLS, Kerberos, LDAP, SSH)
// into every kiln process and every program that links kiln, and cost each one's start, for
// a store most never configure.
struct CurlApi {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

const CurlApi& curl_api() {
  static CurlApi api{};
  static std::string missing;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      missing = std::string("libcurl is not installed (Debian: libcurl4): ") + ::dlerror();
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (!fn && missing.empty()) missing = std::string("libcurl lacks ") + name;
    };
    sym(api.global_init, "curl_global_init");
    sym(api.easy_init, "curl_easy_init");
    sym(api.easy_cleanup, "curl_easy_cleanup");
    sym(api.easy_reset, "curl_easy_reset");
    sym(api.easy_setopt, "curl_easy_setopt");
    sym(api.easy_perform, "curl_easy_perform");
    sym(api.easy_getinfo, "curl_easy_getinfo");
    sym(api.easy_strerror, "curl_easy_strerror");
    sym(api.slist_append, "curl_slist_append");
    sym(api.slist_free_all, "curl_slist_free_all");
    if (missing.empty()) api.global_init(CURL_GLOBAL_DEFAULT);
  });
  if (!missing.empty()) throw RemoteError(missing);
  return api;
}

}  // namespace

HttpUrl HttpUrl::parse(const std::string& text, const std::string& where) {
  HttpUrl u;
  const auto scheme_end = text.find("://");
  u.scheme = scheme_end == std::string::npos ? "" : text.substr(0, scheme_end);
  auto bad = [&](const std::string& why) {
    HttpUrl shown = u;
    return UserError(where + ": " + in_quotes(shown.scheme + "://" + shown.host) +
                     "… is not an HTTP URL (" + why +
                     "; expected http[s]://[user:password@]host[:port][/path])");
  };
  if (u.scheme != "http" && u.scheme != "https") throw bad("no http:// or https:// scheme");
  std::string rest = text.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.path.empty() && u.path.back() == '/') u.path.pop_back();
  if (auto at = authority.rfind('@'); at != std::string::npos) {
    const std::string cred = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = cred.find(':');
    u.user = cred.substr(0, colon);
    if (colon != std::string::npos) u.password = cred.substr(colon + 1);
  }
  const auto colon = authority.rfind(':');
  u.host = authority.substr(0, colon);
  if (u.host.empty()) throw bad("no host");
  for (char c : u.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
      throw bad("bad host name");
  }
  if (colon != std::string::npos) {
    const std::string port = authority.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535) throw bad("bad port");
    u.port = static_cast<int>(p);
  }
  for (char c : u.path) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '-' ||
          c == '_' || c == '~'))
      throw bad("the path may hold only letters, digits and / . - _ ~");
  }
  return u;
}

std::string HttpUrl::base() const {
  return scheme + "://" + host + (port ? ":" + std::to_string(port) : "") + path;
}

std::string HttpUrl::describe() const { return base(); }

HttpStore::HttpStore(HttpUrl url, StoreOptions options)
    : url_(std::move(url)), options_(std::move(options)) {}

HttpStore::~HttpStore() {
  if (curl_) curl_api().easy_cleanup(static_cast<CURL*>(curl_));
}

std::string HttpStore::entry_url(const std::string& key) const {
  return url_.base() + "/" + options_.ns + "/" + key;
}

HttpStore::Reply HttpStore::request(const std::string& method, const std::string& url,
                                    const std::string* body, uint64_t max_bytes) {
  const CurlApi& api = curl_api();
  if (!curl_) curl_ = api.easy_init();
  CURL* c = static_cast<CURL*>(curl_);
  if (!c) throw RemoteError("HTTP store " + describe() + ": cannot start libcurl");
  api.easy_reset(c);  // keeps the open connection
  Reply reply;
  Sink sink{&reply.body, max_bytes};
  char error[CURL_ERROR_SIZE] = "";
  api.easy_setopt(c, CURLOPT_URL, url.c_str());
  api.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  api.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_ms));
  // A hard cap for the whole request; the pace check fails a slow one long before it.
  const uint64_t most = max_bytes + (body ? body->size() : 0);
  api.easy_setopt(c, CURLOPT_TIMEOUT_MS,
                  static_cast<long>(options_.timeout_ms + most * 1000 / kMinBytesPerSecond));
  Pace pace{now_s(), options_.timeout_ms};
  api.easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  api.easy_setopt(c, CURLOPT_XFERINFOFUNCTION, check_pace);
  api.easy_setopt(c, CURLOPT_XFERINFODATA, &pace);
  api.easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  api.easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  api.easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  api.easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
  if (!options_.ca_file.empty()) api.easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
  if (!url_.user.empty()) {
    api.easy_setopt(c, CURLOPT_USERNAME, url_.user.c_str());
    api.easy_setopt(c, CURLOPT_PASSWORD, url_.password.c_str());
  }
  curl_slist* headers = api.slist_append(nullptr, "Expect:");  // no 100-continue round trip
  api.easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (method == "HEAD") {
    api.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    api.easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    api.easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    api.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode rc = api.easy_perform(c);
  api.slist_free_all(headers);
  if (rc != CURLE_OK) {
    std::string why =
        pace.late ? "no complete reply within " +
                        std::to_string(static_cast<int>((now_s() - pace.start) * 1000)) + " ms"
        : sink.over || rc == CURLE_FILESIZE_EXCEEDED
            ? "the reply is larger than " + std::to_string(max_bytes) + " bytes"
        : rc == CURLE_PARTIAL_FILE
            ? "the body was cut short (" + std::to_string(reply.body.size()) + " bytes arrived)"
        : *error ? std::string(error)
                 : std::string(api.easy_strerror(rc));
    throw RemoteError("HTTP store " + describe() + ": " + method +
                      " failed: " + terminal_text(why));
  }
  api.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.code);
  return reply;
}

std::optional<std::string> HttpStore::get(const std::string& key, uint64_t max_bytes) {
  Reply r = request("GET", entry_url(key), nullptr, max_bytes);
  if (r.code == 404) return std::nullopt;
  if (r.code != 200) {
    throw RemoteError("HTTP store " + describe() + ": GET answered HTTP " + std::to_string(r.code));
  }
  return std::move(r.body);
}

bool HttpStore::put_new(const std::string& key, const std::string& blob) {
  // Not atomic: two writers of one key may both PUT. Entries are content-checked and signed,
  // so the last of two good writes wins and a reader verifies whichever it gets.
  Reply head = request("HEAD", entry_url(key), nullptr, 0);
  if (head.code == 200) return false;
  if (head.code != 404) {
    throw RemoteError("HTTP store " + describe() + ": HEAD answered HTTP " +
                      std::to_string(head.code));
  }
  Reply put = request("PUT", entry_url(key), &blob, 1 << 16);
  if (put.code != 200 && put.code != 201 && put.code != 204) {
    throw RemoteError("HTTP store " + describe() + ": PUT answered HTTP " +
                      std::to_string(put.code) + (put.code == 405 ? " (is WebDAV's PUT on?)" : ""));
  }
  return true;
}

std::vector<ShardStatus> HttpStore::status(int64_t, double) {
  ShardStatus s;
  s.name = describe();
  try {
    const double t0 = now_s();
    // Any HTTP answer means the server is there; entries are not listed (plain HTTP cannot).
    Reply r = request("HEAD", url_.base() + "/" + options_.ns + "/", nullptr, 0);
    s.latency_ms = (now_s() - t0) * 1000;
    s.reachable = r.code < 500;
    if (!s.reachable) s.why = "HTTP " + std::to_string(r.code);
  } catch (const RemoteError& e) {
    s.why = e.what();
  }
  return {s};
}

}  // namespace kiln
