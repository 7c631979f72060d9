#pragma once
// Ed25519 signatures on cache entries (libsodium), with named keys in the form Nix binary
// caches use: "name:base64". A writer holds a secret key and signs each entry it publishes;
// readers hold only public keys, so no reader can forge an entry. What is signed is the
// entry's identity: its key, the namespace, and every file's name, size and SHA-256 — the
// same things verification checks — so a valid signature vouches for the bytes loaded.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/entry_meta.h"

namespace kiln {

struct SigningKey {
  std::string name;
  std::array<unsigned char, 64> secret{};
};

struct TrustedKey {
  std::string name;
  std::array<unsigned char, 32> public_key{};
};

// The signing configuration of this process, from the environment:
//   KILN_CACHE_SIGNING_KEY         a file holding "name:base64" (a secret key; not readable by
//                                  others); entries this process publishes are signed with it
//   KILN_CACHE_TRUSTED_KEYS        public keys, "name:base64", separated by spaces; "@FILE"
//                                  reads more from FILE
//   KILN_CACHE_REQUIRE_SIGNATURES  "1": a local entry is used only when a trusted key signed it
// Throws UserError naming the variable that is wrong.
struct SignaturePolicy {
  std::optional<SigningKey> signer;
  std::vector<TrustedKey> trusted;
  bool required = false;
  static SignaturePolicy from_env();
};

SigningKey parse_signing_key(const std::string& text, const std::string& where);
TrustedKey parse_trusted_key(const std::string& text, const std::string& where);
// A new key pair: ("name:secret-base64", "name:public-base64").
std::pair<std::string, std::string> generate_key_pair(const std::string& name);

// The canonical text a signature covers.
std::string signed_text(const EntryMeta& meta, const std::string& ns);
EntrySignature sign_entry(const EntryMeta& meta, const SigningKey& key, const std::string& ns);
// "" when a key in `trusted` signed the entry (for `ns`, or any namespace when `ns` is
// nullopt); otherwise why not, for an error message.
std::string signature_problem(const EntryMeta& meta, const std::vector<TrustedKey>& trusted,
                              const std::optional<std::string>& ns);

}  // namespace kiln
