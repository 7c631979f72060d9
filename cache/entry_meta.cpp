#include "cache/entry_meta.h"

#include <atomic>
#include <nlohmann/json.hpp>

#include "util/escape.h"
#include "util/json_text.h"
#include "util/sha256.h"

namespace kiln {

std::string artifact_key(const KeyComponents& components) {
  Sha256 h;
  h.update("kiln-artifact-key-v1");
  for (const auto& [name, value] : components) {
    std::string head = name + '\0' + std::to_string(value.size()) + '\0';
    h.update(head.data(), head.size());
    h.update(value);
  }
  return h.hex_digest();
}

const FileRecord* EntryMeta::file(const std::string& name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string EntryMeta::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = 1;
  j["key"] = key;
  j["label"] = label;
  j["family"] = family;
  j["summary"] = summary;
  j["created"] = created;
  j["compile_ms"] = compile_ms;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : files)
    j["files"].push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}});
  j["components"] = nlohmann::ordered_json::array();
  for (const auto& [name, value] : components) j["components"].push_back({name, value});
  if (!signatures.empty()) {
    j["signatures"] = nlohmann::ordered_json::array();
    for (const auto& s : signatures)
      j["signatures"].push_back({{"key", s.key_name}, {"ns", s.ns}, {"sig", s.sig}});
  }
  return json_text(j, 1) + "\n";
}

EntryMeta EntryMeta::parse(const std::string& text, const std::string& where) {
  if (text.size() > kMaxMetaBytes) {
    throw CacheEntryError(where + ": " + std::to_string(text.size()) +
                          " bytes, more than a meta.json may hold (" +
                          std::to_string(kMaxMetaBytes) + ")");
  }
  nlohmann::json j;
  try {
    j = parse_untrusted_json(text, where, 8);
  } catch (const JsonError& e) {
    throw CacheEntryError(where + ": not valid JSON" +
                          (e.offset() ? " at byte " + std::to_string(e.offset()) : std::string()) +
                          ": " + e.reason());
  }
  // Only the fields kiln writes: anything else is junk someone added, refused rather than
  // carried along unsigned.
  auto only = [&](const nlohmann::json& obj, std::initializer_list<const char*> fields,
                  const char* what) {
    if (!obj.is_object()) throw CacheEntryError(where + ": " + what + " is not an object");
    for (const auto& [name, value] : obj.items()) {
      bool known = false;
      for (const char* f : fields) known = known || name == f;
      if (!known)
        throw CacheEntryError(where + ": unknown field " + in_quotes(name) + " in " + what);
    }
  };
  EntryMeta m;
  try {
    only(j,
         {"format", "key", "label", "family", "summary", "created", "compile_ms", "files",
          "components", "signatures"},
         "meta.json");
    // Compared as JSON: converting an arbitrary number to int first would be undefined.
    if (j.at("format") != 1) throw CacheEntryError(where + ": unknown format");
    m.key = j.at("key").get<std::string>();
    m.label = j.at("label").get<std::string>();
    m.family = j.at("family").get<std::string>();
    m.summary = j.at("summary").get<std::string>();
    m.created = j.at("created").get<double>();
    m.compile_ms = j.at("compile_ms").get<double>();
    if (j.at("files").size() > kMaxFiles)
      throw CacheEntryError(where + ": more than " + std::to_string(kMaxFiles) + " files");
    for (const auto& f : j.at("files")) {
      only(f, {"name", "size", "sha256"}, "a file record");
      if (!f.at("size").is_number_unsigned())
        throw CacheEntryError(where + ": a file size is not a non-negative integer");
      m.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                         f.at("sha256").get<std::string>()});
    }
    for (const auto& c : j.at("components")) {
      if (!c.is_array() || c.size() != 2)
        throw CacheEntryError(where + ": a key component is not a [name, value] pair");
      m.components.emplace_back(c.at(0).get<std::string>(), c.at(1).get<std::string>());
    }
    if (j.contains("signatures")) {
      // One per trusted key is all a reader needs; thousands are an attack on its time.
      if (j.at("signatures").size() > kMaxSignatures) {
        throw CacheEntryError(where + ": " + std::to_string(j.at("signatures").size()) +
                              " signatures, more than " + std::to_string(kMaxSignatures));
      }
      for (const auto& sg : j.at("signatures")) {
        only(sg, {"key", "ns", "sig"}, "a signature");
        m.signatures.push_back({sg.at("key").get<std::string>(), sg.at("ns").get<std::string>(),
                                sg.at("sig").get<std::string>()});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw CacheEntryError(where + ": missing or mistyped field (" + std::string(e.what()) + ")");
  }
  for (size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    if (!is_entry_file_name(f.name) || !is_sha256_hex(f.sha256)) {
      throw CacheEntryError(where + ": bad file record " + in_quotes(f.name));
    }
    for (size_t k = 0; k < i; ++k) {
      if (m.files[k].name == f.name)
        throw CacheEntryError(where + ": the file " + in_quotes(f.name) + " is listed twice");
    }
  }
  if (artifact_key(m.components) != m.key) {
    throw CacheEntryError(where + ": key components do not hash to the entry's key");
  }
  return m;
}

bool is_entry_file_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string missing_or_extra_files(const EntryMeta& meta,
                                   const std::vector<std::string>& expected) {
  for (const auto& name : expected) {
    if (!meta.file(name)) return "it lacks " + name;
  }
  for (const auto& f : meta.files) {
    bool wanted = false;
    for (const auto& name : expected) wanted = wanted || name == f.name;
    if (!wanted) return "it holds " + in_quotes(f.name) + ", which such an entry never has";
  }
  return "";
}

namespace {
std::atomic<EntryLayoutRule> layout_rule{nullptr};
}  // namespace

void set_entry_layout_rule(EntryLayoutRule rule) { layout_rule = rule; }

std::string entry_layout_problem(const EntryMeta& meta) {
  const EntryLayoutRule rule = layout_rule;
  return rule ? rule(meta) : "";
}

}  // namespace kiln
