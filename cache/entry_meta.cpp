#include "cache/entry_meta.h"

#include <nlohmann/json.hpp>

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
  return j.dump(1) + "\n";
}

EntryMeta EntryMeta::parse(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw CacheEntryError(where + ": not valid JSON at byte " + std::to_string(e.byte));
  } catch (const nlohmann::json::exception& e) {
    // A number too large for any type is an out_of_range, not a parse_error.
    throw CacheEntryError(where + ": not valid JSON: " + e.what());
  }
  EntryMeta m;
  try {
    // Compared as JSON: converting an arbitrary number to int first would be undefined.
    if (j.at("format") != 1) throw CacheEntryError(where + ": unknown format");
    m.key = j.at("key").get<std::string>();
    m.label = j.at("label").get<std::string>();
    m.family = j.at("family").get<std::string>();
    m.summary = j.at("summary").get<std::string>();
    m.created = j.at("created").get<double>();
    m.compile_ms = j.at("compile_ms").get<double>();
    for (const auto& f : j.at("files")) {
      if (!f.at("size").is_number_unsigned())
        throw CacheEntryError(where + ": a file size is not a non-negative integer");
      m.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                         f.at("sha256").get<std::string>()});
    }
    for (const auto& c : j.at("components")) {
      m.components.emplace_back(c.at(0).get<std::string>(), c.at(1).get<std::string>());
    }
    if (j.contains("signatures")) {
      for (const auto& sg : j.at("signatures")) {
        m.signatures.push_back({sg.at("key").get<std::string>(), sg.at("ns").get<std::string>(),
                                sg.at("sig").get<std::string>()});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw CacheEntryError(where + ": missing or mistyped field (" + std::string(e.what()) + ")");
  }
  for (const auto& f : m.files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.' ||
        f.sha256.size() != 64) {
      throw CacheEntryError(where + ": bad file record '" + f.name + "'");
    }
  }
  if (artifact_key(m.components) != m.key) {
    throw CacheEntryError(where + ": key components do not hash to the entry's key");
  }
  return m;
}

}  // namespace kiln
