#pragma once
// Creates ops by name from props, so model loaders (and op libraries loaded at run time)
// need no compile-time knowledge of op classes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/op.h"

namespace kiln {

using OpFactory = std::function<std::shared_ptr<const Op>(const Attrs&)>;

class OpRegistry {
 public:
  static OpRegistry& instance();  // holds every built-in op
  void add(const std::string& name, OpFactory factory);  // replaces an existing name
  bool contains(const std::string& name) const;
  // Throws UserError for an unknown name (listing close names) or bad props.
  std::shared_ptr<const Op> create(const std::string& name, const Attrs& props) const;
  std::vector<std::string> names() const;

 private:
  OpRegistry();
  std::vector<std::pair<std::string, OpFactory>> factories_;
};

}  // namespace kiln
