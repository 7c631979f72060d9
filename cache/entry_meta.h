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
  // Bounds a reader checks before trusting anything else of an entry.
  static constexpr size_t kMaxMetaBytes = 1 << 20;
  static constexpr size_t kMaxFiles = 64;
  static constexpr size_t kMaxSignatures = 16;

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
  // Throws CacheEntryError naming `where` and what is wrong: text past kMaxMetaBytes, JSON
  // nested too deep or with a key twice, a field kiln never writes, a file name outside
  // [A-Za-z0-9._-] (or starting with '.'), a file listed twice, more than kMaxFiles files or
  // kMaxSignatures signatures, components that do not hash to the key.
  static EntryMeta parse(const std::string& text, const std::string& where);
};

// An entry's file name: 1 to 64 of [A-Za-z0-9._-], not starting with '.'.
bool is_entry_file_name(const std::string& name);
bool is_sha256_hex(const std::string& s);  // 64 lowercase hex digits
// "" when meta lists exactly the files in `expected` (any order); otherwise what differs.
std::string missing_or_extra_files(const EntryMeta& meta, const std::vector<std::string>& expected);

// Which files an entry of its kind must hold is its producer's knowledge (the compiler's), not
// the cache's: the producer registers a rule, and every verification — local lookups, remote
// fetches, `kiln cache verify` — applies it, so an entry without its plan or module is a bad
// entry (quarantined and rebuilt), never a hit that fails later. The rule returns "" or what
// is wrong; without a rule every file list passes.
using EntryLayoutRule = std::string (*)(const EntryMeta&);
void set_entry_layout_rule(EntryLayoutRule rule);
std::string entry_layout_problem(const EntryMeta& meta);

}  // namespace kiln
