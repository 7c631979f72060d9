#include "ops/device_placed.h"

#include "util/error.h"

namespace kiln {

DevicePlaced::DevicePlaced(const DeviceCodeTable& table, std::shared_ptr<const COp> inner)
    : COp(table.device() + ":" + inner->name(), inner->props()),
      table_(table),
      inner_(std::move(inner)) {}

DeviceCode DevicePlaced::device_code(const Node& node, const CodeNames& names,
                                     const Sub& sub) const {
  const OpDeviceCode* code = table_.find(*inner_);
  if (!code) throw UserError("op '" + inner_->name() + "' has no " + device() + " code");
  return code->code(*inner_, node, names, sub);
}

std::string DevicePlaced::c_support_code() const {
  const OpDeviceCode* code = table_.find(*inner_);
  return code ? code->host_support(*inner_) : "";
}

std::vector<std::string> DevicePlaced::c_headers() const {
  const OpDeviceCode* code = table_.find(*inner_);
  return code ? code->host_headers(*inner_) : std::vector<std::string>{};
}

std::string DevicePlaced::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return device_code(node, names, sub).launch;
}

}  // namespace kiln
