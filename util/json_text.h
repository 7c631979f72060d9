#pragma once
// JSON that kiln reads from files and servers it does not own (safetensors headers, cache
// entries' meta.json, JSON models, bundle descriptions), and JSON it writes. Reading is
// bounded: nesting deeper than a limit and keys given twice in one object are refused before
// anything is built from the text, so a hostile file can neither exhaust the stack nor make
// two readers see different values. Writing never throws on bytes that are not UTF-8.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "util/error.h"

namespace kiln {

// Text that parse_untrusted_json refused: what() is "WHERE: byte N: REASON"; a reader that
// knows where the text sits in its file reports offset() from there.
class JsonError : public UserError {
 public:
  JsonError(const std::string& where, size_t offset, const std::string& reason)
      : UserError(where + ": byte " + std::to_string(offset) + ": " + reason),
        offset_(offset),
        reason_(reason) {}
  size_t offset() const { return offset_; }
  const std::string& reason() const { return reason_; }

 private:
  size_t offset_;
  std::string reason_;
};

// The document in `text`. Throws JsonError for text that is not JSON, nests deeper than
// `max_depth` arrays and objects, or repeats a key within one object.
nlohmann::json parse_untrusted_json(std::string_view text, const std::string& where,
                                    int max_depth = 32);

// j.dump(indent) with invalid UTF-8 replaced by U+FFFD instead of a type_error.
std::string json_text(const nlohmann::json& j, int indent = -1);
std::string json_text(const nlohmann::ordered_json& j, int indent = -1);

// A short description of a value for an error message: a scalar as JSON (cut to 40 bytes),
// a container by its kind and size. Never walks a nested value (no recursion on hostile input).
std::string json_excerpt(const nlohmann::json& j);

}  // namespace kiln
