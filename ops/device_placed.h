#pragma once
// A node placed on a device: the op it wraps supplies types, shapes and reference semantics,
// the device's code table its kernels and their launch. The C linker emits the host thunk
// that launches them, and the kernels into the module's device unit. Its name
// ("cuda:add") and props (the wrapped op's) make placement part of the graph signature and
// so of the cache key.
#include <memory>

#include "ops/device_code.h"

namespace kiln {

class DevicePlaced : public COp {
 public:
  // `table` outlives the op (a backend's table lives as long as the process).
  DevicePlaced(const DeviceCodeTable& table, std::shared_ptr<const COp> inner);
  const COp& inner() const { return *inner_; }
  const std::string& device() const { return table_.device(); }
  // The wrapped op's device code for this node.
  DeviceCode device_code(const Node& node, const CodeNames& names, const Sub& sub) const;

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override {
    return inner_->infer_type(inputs);
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override {
    return inner_->infer_shape(inputs);
  }
  std::vector<Shape> infer_run_shape(const std::vector<Shape>& inputs,
                                     const std::vector<DType>& dtypes) const override {
    return inner_->infer_run_shape(inputs, dtypes);
  }
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override {
    inner_->perform(inputs, outputs);
  }
  std::optional<int> cache_version() const override { return inner_->cache_version(); }
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override {
    return inner_->flops(inputs, outputs);
  }
  // The launch fragment of the wrapped op's device code (the linker takes its kernels).
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return table_.host_preludes(); }
  // What the device code's host part calls (OpDeviceCode::host_support).
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override;
  int view_of(const Node& node) const override { return inner_->view_of(node); }
  // The wrapped op's state (a random op's run counter) lives in the module as on the CPU.
  std::string c_state_fields(const Node& node, const std::string& prefix) const override {
    return inner_->c_state_fields(node, prefix);
  }
  bool output_on_device() const override { return true; }
  bool enqueues_device_work() const override { return true; }

 private:
  const DeviceCodeTable& table_;
  std::shared_ptr<const COp> inner_;
};

}  // namespace kiln
