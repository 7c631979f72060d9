#pragma once
// Code for a device beside the host: a node's kernels, compiled as a device unit of their own,
// and the host fragment that launches them. A backend's folder (ops/cuda/) fills a
// DeviceCodeTable with one entry per op class it has code for, as TVM attaches per-target
// attributes to ops; placement and the linker ask the table, so an op itself holds the C code
// of the host and nothing of any device.
#include <memory>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "ops/cop.h"

namespace kiln {

// One kernel: a `__global__ void NAME(PARAMS)` (or the device's equivalent) with its helpers.
// The device linker puts it in the module's device unit, under its own name as the symbol.
struct DeviceKernel {
  std::string name;                 // starts with the node's prefix
  std::vector<std::string> params;  // C types of its parameters, in order
  std::string code;
};

// A node's device code: its kernels, and the C fragment of the host thunk that computes the
// launch from the run-time shapes and starts it. Inputs and outputs are device tensors: their
// data pointers are device addresses the host passes on and never dereferences.
struct DeviceCode {
  std::vector<DeviceKernel> kernels;
  std::string launch;
  std::vector<std::string> preludes;  // device preludes ("kiln_math.h")
};

// One op class's code for one device.
class OpDeviceCode {
 public:
  virtual ~OpDeviceCode() = default;
  // True when this node (its dtypes and props) has code: placement asks this, never a list.
  virtual bool has_code(const COp& op, const Node& node) const = 0;
  virtual DeviceCode code(const COp& op, const Node& node, const CodeNames& names,
                          const Sub& sub) const = 0;
  // File-scope C (and its headers) the host thunk's launch code calls: a check that reads
  // the inputs on the host first, with the op's own rules.
  virtual std::string host_support(const COp&) const { return ""; }
  virtual std::vector<std::string> host_headers(const COp&) const { return {}; }
};

// A device's per-op code, keyed by op class.
class DeviceCodeTable {
 public:
  // `host_preludes`: what a host thunk that launches this device's kernels includes.
  DeviceCodeTable(std::string device, std::vector<std::string> host_preludes);
  const std::string& device() const { return device_; }
  const std::vector<std::string>& host_preludes() const { return host_preludes_; }

  void add(std::type_index op, std::unique_ptr<OpDeviceCode> code);
  // The entry of `op`'s own class (not a base class's), or nullptr.
  const OpDeviceCode* find(const COp& op) const;
  // True when `node`'s op is a COp whose entry has code for the node.
  bool has_code(const Node& node) const;

 private:
  std::string device_;
  std::vector<std::string> host_preludes_;
  std::unordered_map<std::type_index, std::unique_ptr<OpDeviceCode>> entries_;
};

}  // namespace kiln
