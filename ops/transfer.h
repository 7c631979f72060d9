#pragma once
// Copies between host and device memory, inserted by placement where a value crosses from
// a CPU node to a CUDA node or back. to_device accepts any strides (it gathers on the host
// first) and writes a contiguous device tensor; to_host copies a device tensor back.
#include "ops/cop.h"

namespace kiln {

class Transfer : public COp {
 public:
  explicit Transfer(bool to_device);
  bool to_device() const { return to_device_; }
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool output_on_device() const override { return to_device_; }
  bool enqueues_device_work() const override { return true; }

 private:
  bool to_device_;
};

}  // namespace kiln
