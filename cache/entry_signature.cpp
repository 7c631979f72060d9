#include "cache/entry_signature.h"

#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/quantity.h"

namespace kiln {
namespace {

void init_sodium() {
  static const int ok = sodium_init();
  if (ok < 0) throw InternalError("libsodium failed to initialise");
}

std::string to_base64(const unsigned char* bytes, size_t n) {
  std::string out(sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes, n, sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

// Decodes exactly `n` bytes of base64; false on anything else.
bool from_base64(const std::string& text, unsigned char* out, size_t n) {
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out, n, text.data(), text.size(), nullptr, &len, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0)
    return false;
  return len == n && end == text.data() + text.size();
}

// "name:base64" -> (name, base64); the name follows check_name's rule.
std::pair<std::string, std::string> split_named(const std::string& text, const std::string& where,
                                                const char* kind) {
  auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0) {
    throw UserError(where + ": " + in_quotes(text, 40) + " is not a " + kind +
                    " of the form name:base64");
  }
  std::string name = text.substr(0, colon);
  check_name(name, where + ": the name of a " + kind);
  return {name, text.substr(colon + 1)};
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// "name:base64" with exactly N bytes behind the colon; returns the name.
template <size_t N>
std::string parse_named_key(const std::string& text, const std::string& where, const char* kind,
                            std::array<unsigned char, N>& bytes) {
  init_sodium();
  auto [name, b64] = split_named(trim(text), where, kind);
  if (!from_base64(b64, bytes.data(), N)) {
    throw UserError(where + ": the " + kind + " of '" + name + "' is not " + std::to_string(N) +
                    " bytes of base64");
  }
  return name;
}

}  // namespace

SigningKey parse_signing_key(const std::string& text, const std::string& where) {
  SigningKey k;
  k.name = parse_named_key(text, where, "secret key", k.secret);
  return k;
}

TrustedKey parse_trusted_key(const std::string& text, const std::string& where) {
  TrustedKey k;
  k.name = parse_named_key(text, where, "public key", k.public_key);
  return k;
}

std::pair<std::string, std::string> generate_key_pair(const std::string& name) {
  init_sodium();
  check_name(name, "key name");
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(pk, sk);
  std::string secret = name + ":" + to_base64(sk, sizeof sk);
  sodium_memzero(sk, sizeof sk);
  return {secret, name + ":" + to_base64(pk, sizeof pk)};
}

SignaturePolicy SignaturePolicy::from_env() {
  SignaturePolicy p;
  if (const char* file = std::getenv("KILN_CACHE_SIGNING_KEY"); file && *file) {
    const std::string named = "KILN_CACHE_SIGNING_KEY: " + in_quotes(file, 4096);
    struct stat st {};
    if (::stat(file, &st) != 0)
      throw UserError("KILN_CACHE_SIGNING_KEY: cannot read " + in_quotes(file, 4096) + ": " +
                      std::strerror(errno));
    if (!S_ISREG(st.st_mode)) {
      throw UserError(named +
                      " is not a file holding a secret key (kiln cache keygen NAME --out "
                      "DIR writes one)");
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
      throw UserError(named +
                      " can be read by other users; a secret key must be private (chmod 600)");
    }
    const std::string where = std::string("KILN_CACHE_SIGNING_KEY (") + file + ")";
    std::string text;
    try {
      text = read_regular_file(file, 4096);
    } catch (const UserError& e) {
      throw UserError(where + ": " + e.what());
    }
    p.signer = parse_signing_key(text, where);
  }
  if (const char* keys = std::getenv("KILN_CACHE_TRUSTED_KEYS"); keys && *keys) {
    std::istringstream in(keys);
    for (std::string k; in >> k;) {
      if (k[0] != '@') {
        p.trusted.push_back(parse_trusted_key(k, "KILN_CACHE_TRUSTED_KEYS"));
        continue;
      }
      // @FILE: one or more public keys, whitespace-separated (e.g. NAME.public files). It
      // decides whose code kiln runs, so it is held to the rule for code: ours or root's, and
      // writable by nobody else, nor is any folder above it.
      const std::string path = k.substr(1);
      const std::string where = "KILN_CACHE_TRUSTED_KEYS (" + path + ")";
      std::string text;
      try {
        text = read_regular_file(path, 1 << 16);
      } catch (const UserError& e) {
        throw UserError(where + ": " + e.what());
      }
      if (std::string why = path_distrust(path); !why.empty()) {
        throw UserError(where + ": refusing it: " + why +
                        "; a file of trusted keys decides whose code kiln runs (chmod go-w)");
      }
      std::istringstream file_keys(text);
      size_t found = 0;
      for (std::string fk; file_keys >> fk; ++found)
        p.trusted.push_back(parse_trusted_key(fk, where));
      if (found == 0) throw UserError(where + ": the file holds no key");
    }
  }
  if (const char* req = std::getenv("KILN_CACHE_REQUIRE_SIGNATURES"); req && *req) {
    std::string v = req;
    if (v != "0" && v != "1")
      throw UserError("KILN_CACHE_REQUIRE_SIGNATURES: '" + v + "' is neither 0 nor 1");
    p.required = v == "1";
    if (p.required && p.trusted.empty()) {
      throw UserError(
          "KILN_CACHE_REQUIRE_SIGNATURES=1 needs the keys to trust in KILN_CACHE_TRUSTED_KEYS");
    }
  }
  return p;
}

std::string signed_text(const EntryMeta& meta, const std::string& ns) {
  // The whole meta.json but its signatures, in kiln's canonical form (what to_json writes;
  // parsing and writing again gives the same bytes), after the namespace, each with its
  // length: JSON strings escape every byte of a name, and the lengths leave nothing to fold
  // from one field into the next.
  EntryMeta body = meta;
  body.signatures.clear();
  const std::string json = body.to_json();
  return "kiln-cache-entry 2\n" + std::to_string(ns.size()) + ":" + ns + "\n" +
         std::to_string(json.size()) + ":" + json;
}

EntrySignature sign_entry(const EntryMeta& meta, const SigningKey& key, const std::string& ns) {
  init_sodium();
  const std::string text = signed_text(meta, ns);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(text.data()),
                       text.size(), key.secret.data());
  return EntrySignature{key.name, ns, to_base64(sig, sizeof sig)};
}

std::string signature_problem(const EntryMeta& meta, const std::vector<TrustedKey>& trusted,
                              const std::optional<std::string>& ns) {
  init_sodium();
  if (meta.signatures.empty()) return "it carries no signature";
  std::string why;
  // At most one signature per trusted key name is checked (against every key of that name,
  // so a rotation that keeps the name still verifies old entries): an entry carrying
  // thousands of signatures costs a reader no more than one carrying one per key.
  std::vector<std::string> tried;
  for (const auto& s : meta.signatures) {
    if (ns && s.ns != *ns) {
      why = "its signature by " + in_quotes(s.key_name) + " is for namespace " + in_quotes(s.ns);
      continue;
    }
    bool listed = false;
    for (const auto& k : trusted) listed = listed || k.name == s.key_name;
    if (!listed) {
      why = "it is signed by " + in_quotes(s.key_name) +
            ", which KILN_CACHE_TRUSTED_KEYS does not list";
      continue;
    }
    if (std::find(tried.begin(), tried.end(), s.key_name) != tried.end()) continue;
    tried.push_back(s.key_name);
    unsigned char sig[crypto_sign_BYTES];
    if (!from_base64(s.sig, sig, sizeof sig)) {
      why = "its signature by " + in_quotes(s.key_name) + " is not 64 bytes of base64";
      continue;
    }
    const std::string text = signed_text(meta, s.ns);
    for (const auto& k : trusted) {
      if (k.name != s.key_name) continue;
      if (crypto_sign_verify_detached(sig, reinterpret_cast<const unsigned char*>(text.data()),
                                      text.size(), k.public_key.data()) == 0) {
        return "";
      }
    }
    why = "its signature by " + in_quotes(s.key_name) + " does not verify";
  }
  return why;
}

}  // namespace kiln
