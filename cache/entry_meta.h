#pragma once
// meta.json of a cache entry: what the entry holds (files with sizes and SHA-256s) and what
// produced it (the named key components). The cache treats components as opaque strings;
// the key is the SHA-256 of their canonical encoding, so a meta.json whose components do
// not hash to its key is detected as garbled.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace kiln {

// A cache entry that is missing, truncated, modified or unreadable.
class CacheEntryError : public UserError {
 public:
  using UserError::UserError;
};

using KeyComponents = std::vector<std::pair<std::string, std::string>>;  // ordered

// SHA-256 over "name\0len\0value" of each component, in order: no two component lists
// collide by concatenation.
std::string artifact_key(const KeyComponents& components);

struct FileRecord {
  std::string name;  // relative to the entry folder
  uint64_t size = 0;
  std::string sha256;
};

// An Ed25519 signature over the entry's identity (see entry_signature.h) by a named key.
struct EntrySignature {
  std::string key_name;
  std::string ns;   // the namespace it was signed for (remote caches keep tenants apart)
  std::string sig;  // base64
};

struct EntryMeta {
  std::string key;
  std::string label;    // e.g. the model name, for `kiln cache ls`
  std::string family;   // groups entries of one graph across versions, for --explain
  std::string summary;  // human-readable description of what was compiled
  double created = 0;   // unix seconds
  double compile_ms = 0;
  KeyComponents components;
  std::vector<FileRecord> files;
  std::vector<EntrySignature> signatures;  // optional; not covered by the key

  const FileRecord* file(const std::string& name) const;
  std::string to_json() const;
  // Throws CacheEntryError naming `where` and what is wrong.
  static EntryMeta parse(const std::string& text, const std::string& where);
};

}  // namespace kiln
