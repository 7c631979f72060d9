#pragma once
// A node placed on the CUDA device: the op it wraps supplies types, shapes, reference
// semantics and its CUDA code; the C linker emits a host thunk that launches that code's
// kernels, and the kernels into the module's kernels.cu. Its name ("cuda:add") and props
// (the wrapped op's) make placement part of the graph signature and so of the cache key.
#include <memory>

#include "ops/cop.h"

namespace kiln {

class CudaPlaced : public COp {
 public:
  explicit CudaPlaced(std::shared_ptr<const COp> inner);
  const COp& inner() const { return *inner_; }

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
  // The launch fragment of the wrapped op's CUDA code (the linker takes its kernels).
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override {
    return {"kiln_index.h", "kiln_cuda_types.h", "kiln_cuda_host.h"};
  }
  int view_of(const Node& node) const override { return inner_->view_of(node); }
  bool output_on_device() const override { return true; }
  const COp* placed_on_cuda() const override { return inner_.get(); }
  bool enqueues_device_work() const override { return true; }

 private:
  std::shared_ptr<const COp> inner_;
};

}  // namespace kiln
