#include "compiler/generic/generic_runner.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "compiler/generic/generic_kernels.h"
#include "util/error.h"

namespace kiln {
namespace {

// While generic runs are in flight, OpenBLAS computes in the calling thread alone: the tier
// runs beside a compile that keeps the other cores busy, where BLAS threads waiting on each
// other lose a scheduler slice per product.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() {
    std::lock_guard lock(mutex_);
    if (depth_++ == 0) {
      saved_ = openblas_get_num_threads();
      openblas_set_num_threads(1);
    }
  }
  ~SingleThreadedBlas() {
    std::lock_guard lock(mutex_);
    if (--depth_ == 0) openblas_set_num_threads(saved_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  static inline std::mutex mutex_;
  static inline int depth_ = 0;
  static inline int saved_ = 1;
};

}  // namespace

GenericRunner::GenericRunner(std::shared_ptr<const Graph> graph) : graph_(std::move(graph)) {
  for (const auto& v : graph_->variables()) slot_.emplace(v.get(), slot_.size());
  last_use_.assign(slot_.size(), SIZE_MAX);
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Variable* v : nodes[i]->inputs) last_use_[slot_.at(v)] = i;
  // Graph inputs, constants and outputs outlive every node.
  for (const Variable* v : graph_->inputs()) last_use_[slot_.at(v)] = SIZE_MAX;
  for (const Variable* v : graph_->constants()) last_use_[slot_.at(v)] = SIZE_MAX;
  for (const Variable* v : graph_->outputs()) last_use_[slot_.at(v)] = SIZE_MAX;
}

void GenericRunner::validate(const std::vector<Tensor>& inputs) const {
  const auto& declared = graph_->inputs();
  if (inputs.size() != declared.size()) {
    std::string names;
    for (const Variable* v : declared) names += (names.empty() ? "" : ", ") + v->name;
    throw UserError("expected " + std::to_string(declared.size()) + " inputs (" + names +
                    "), got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const TensorType& type = declared[i]->type;
    auto mismatch = [&](const std::string& what) {
      throw UserError("input '" + declared[i]->name + "': " + what + ": expected " +
                      type.to_string() + ", got " +
                      (t.defined() ? t.describe() : std::string("no tensor")));
    };
    if (!t.defined()) mismatch("missing");
    if (t.storage()->on_device()) mismatch("a device tensor (the generic tier runs on the host)");
    if (t.dtype() != type.dtype) mismatch("wrong dtype");
    if (t.ndim() != type.rank()) mismatch("wrong rank");
    for (size_t d = 0; d < type.dims.size(); ++d) {
      if (type.dims[d] >= 0 && t.shape()[d] != type.dims[d])
        mismatch("dimension " + std::to_string(d) + " is " + std::to_string(t.shape()[d]));
    }
  }
}

std::vector<Tensor> GenericRunner::run(const std::vector<Tensor>& inputs) const {
  return *run_until(inputs, [] { return false; });
}

std::optional<std::vector<Tensor>> GenericRunner::run_until(
    const std::vector<Tensor>& inputs, const std::function<bool()>& give_up) const {
  validate(inputs);
  const SingleThreadedBlas blas;
  std::vector<Tensor> values(slot_.size());
  for (size_t i = 0; i < inputs.size(); ++i) values[slot_.at(graph_->inputs()[i])] = inputs[i];
  for (const Variable* c : graph_->constants()) values[slot_.at(c)] = *c->value;
  const auto& nodes = graph_->nodes();
  int kernels = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (give_up()) return std::nullopt;
    const Node& node = *nodes[i];
    std::vector<Tensor> ins;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (const Variable* v : node.inputs) {
      ins.push_back(values[slot_.at(v)].contiguous());
      shapes.push_back(ins.back().shape());
      dtypes.push_back(ins.back().dtype());
    }
    try {
      const std::vector<Shape> out_shapes = node.op->infer_run_shape(shapes, dtypes);
      std::vector<Tensor> outs;
      for (size_t k = 0; k < out_shapes.size(); ++k)
        outs.push_back(Tensor::empty(node.outputs[k]->type.dtype, out_shapes[k]));
      if (run_generic_kernel(node, ins, outs)) {
        ++kernels;
      } else {
        // perform may accumulate into its outputs: it gets them zeroed, as the reference does.
        for (Tensor& o : outs)
          if (o.nbytes() > 0) std::memset(o.data(), 0, o.nbytes());
        node.op->perform(ins, outs);
      }
      for (size_t k = 0; k < outs.size(); ++k) values[slot_.at(node.outputs[k])] = outs[k];
    } catch (const UserError& e) {
      throw UserError(node.label() + ": " + e.what());
    }
    for (const Variable* v : node.inputs) {
      const size_t s = slot_.at(v);
      if (last_use_[s] == i) values[s] = Tensor();
    }
  }
  kernel_nodes_ = kernels;
  // Every output is the caller's alone, as a module returns it: one that is an input or a
  // weight, or shares storage with one (a perform may pass its input through) or with an
  // output already returned (the same value listed twice), is returned as a copy.
  std::vector<const Storage*> taken;
  for (const Tensor& t : inputs) taken.push_back(t.storage().get());
  for (const Variable* c : graph_->constants()) taken.push_back(c->value->storage().get());
  std::vector<Tensor> result;
  for (const Variable* v : graph_->outputs()) {
    const Tensor& t = values[slot_.at(v)];
    const bool shared = v->kind != VarKind::kNodeOutput ||
                        std::find(taken.begin(), taken.end(), t.storage().get()) != taken.end();
    result.push_back(shared ? t.clone() : t);
    taken.push_back(result.back().storage().get());
  }
  return result;
}

}  // namespace kiln
