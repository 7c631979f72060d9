#include "graph/attrs.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::string kind_of(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "an integer";
    case 1: return "a float";
    case 2: return "a string";
    case 3: return "a list of integers";
    default: return "a list of floats";
  }
}

const AttrValue* find(const Attrs& attrs, const std::string& name, bool has_fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) {
    if (has_fallback) return nullptr;
    throw AttrError(name, "missing");
  }
  return &it->second;
}

[[noreturn]] void wrong(const std::string& name, const std::string& want, const AttrValue& v) {
  throw AttrError(name, "expected " + want + ", got " + kind_of(v));
}

}  // namespace

std::string attr_to_string(const AttrValue& value) {
  switch (value.index()) {
    case 0: return std::to_string(std::get<int64_t>(value));
    case 1: return format_double(std::get<double>(value));
    case 2: return "\"" + std::get<std::string>(value) + "\"";
    case 3: {
      std::vector<std::string> parts;
      for (int64_t x : std::get<3>(value)) parts.push_back(std::to_string(x));
      return "[" + join(parts, ",") + "]";
    }
    default: {
      std::vector<std::string> parts;
      for (double x : std::get<4>(value)) parts.push_back(format_double(x));
      return "[" + join(parts, ",") + "]";
    }
  }
}

std::string attrs_to_string(const Attrs& attrs) {
  if (attrs.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [k, v] : attrs) parts.push_back(k + "=" + attr_to_string(v));
  return "{" + join(parts, ", ") + "}";
}

int64_t attr_int(const Attrs& attrs, const std::string& name, std::optional<int64_t> fallback) {
  const AttrValue* v = find(attrs, name, fallback.has_value());
  if (!v) return *fallback;
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  wrong(name, "an integer", *v);
}

double attr_float(const Attrs& attrs, const std::string& name, std::optional<double> fallback) {
  const AttrValue* v = find(attrs, name, fallback.has_value());
  if (!v) return *fallback;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  wrong(name, "a number", *v);
}

std::string attr_string(const Attrs& attrs, const std::string& name,
                        std::optional<std::string> fallback) {
  const AttrValue* v = find(attrs, name, fallback.has_value());
  if (!v) return *fallback;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  wrong(name, "a string", *v);
}

std::vector<int64_t> attr_ints(const Attrs& attrs, const std::string& name,
                               std::optional<std::vector<int64_t>> fallback) {
  const AttrValue* v = find(attrs, name, fallback.has_value());
  if (!v) return *fallback;
  if (auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  if (auto* i = std::get_if<int64_t>(v)) return {*i};
  // An empty list parsed from JSON has no element type; accept it.
  if (auto* f = std::get_if<std::vector<double>>(v); f && f->empty()) return {};
  wrong(name, "a list of integers", *v);
}

void check_known_attrs(const Attrs& attrs, const std::vector<std::string>& known) {
  for (const auto& [k, v] : attrs) {
    bool ok = false;
    for (const auto& name : known) ok = ok || name == k;
    if (!ok) {
      throw AttrError(k, "unknown attribute (this op takes " +
                             (known.empty() ? std::string("no attributes") : join(known, ", ")) + ")");
    }
  }
}

}  // namespace kiln
