#include "ops/device_code.h"

#include <typeinfo>

namespace kiln {

DeviceCodeTable::DeviceCodeTable(std::string device, std::vector<std::string> host_preludes)
    : device_(std::move(device)), host_preludes_(std::move(host_preludes)) {}

void DeviceCodeTable::add(std::type_index op, std::unique_ptr<OpDeviceCode> code) {
  entries_[op] = std::move(code);
}

const OpDeviceCode* DeviceCodeTable::find(const COp& op) const {
  auto it = entries_.find(std::type_index(typeid(op)));
  return it == entries_.end() ? nullptr : it->second.get();
}

bool DeviceCodeTable::has_code(const Node& node) const {
  const auto* op = dynamic_cast<const COp*>(node.op.get());
  if (!op) return false;
  const OpDeviceCode* code = find(*op);
  return code && code->has_code(*op, node);
}

}  // namespace kiln
