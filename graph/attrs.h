#pragma once
// Op parameters ("props"): a sorted map, so two ops built with attributes in any order
// compare, print and hash identically.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "util/error.h"

namespace kiln {

// A bad or missing attribute; loaders prefix the attribute's location in the model file.
class AttrError : public UserError {
 public:
  AttrError(std::string attr, std::string detail)
      : UserError("attribute '" + attr + "': " + detail), attr_(std::move(attr)), detail_(std::move(detail)) {}
  const std::string& attr() const { return attr_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string attr_, detail_;
};

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
using Attrs = std::map<std::string, AttrValue>;

std::string attr_to_string(const AttrValue& value);
std::string attrs_to_string(const Attrs& attrs);  // "{alpha=0.1, axis=1}" ("" when empty)

// Typed getters that throw UserError naming the attribute: "attribute 'axis': expected an
// integer, got a string". An int attribute is accepted where a float is expected.
int64_t attr_int(const Attrs& attrs, const std::string& name, std::optional<int64_t> fallback = {});
double attr_float(const Attrs& attrs, const std::string& name, std::optional<double> fallback = {});
std::string attr_string(const Attrs& attrs, const std::string& name,
                        std::optional<std::string> fallback = {});
std::vector<int64_t> attr_ints(const Attrs& attrs, const std::string& name,
                               std::optional<std::vector<int64_t>> fallback = {});
// Rejects attributes not in `known`, naming them.
void check_known_attrs(const Attrs& attrs, const std::vector<std::string>& known);

}  // namespace kiln
