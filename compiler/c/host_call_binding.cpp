#include "compiler/c/host_call_binding.h"

#include <mutex>

#include "ops/host_call.h"
#include "runtime/exec/foreign_op.h"
#include "runtime/exec/sized_outputs.h"
#include "util/error.h"

namespace kiln {
namespace {

// A module's kiln_tensor as a Tensor over the same bytes (which the run owns).
Tensor view_of(const kiln_tensor& t) {
  Shape shape(t.shape, t.shape + t.ndim), strides(t.strides, t.strides + t.ndim);
  const DType dtype = static_cast<DType>(t.dtype);
  int64_t extent = 1;  // elements from the first to one past the last
  for (int d = 0; d < t.ndim; ++d) {
    if (shape[d] == 0) extent = 0;
    if (extent > 0) extent += (shape[d] - 1) * strides[d];
  }
  auto storage = std::make_shared<Storage>(
      t.data, static_cast<size_t>(extent) * dtype_size(dtype), [](void*) {}, false);
  return Tensor(std::move(storage), 0, dtype, std::move(shape), std::move(strides));
}

// The module does not own the function: loaded modules outlive the models that made them (the
// process keeps them for later compiles), and a function holding compiled bodies must go
// with its model, not at exit. A module whose function is gone takes the one registered
// under the same key since (a model loaded again), or fails the run saying why.
class BoundHostCall : public ForeignOp {
 public:
  BoundHostCall(std::string key, const HostCallEntry& entry)
      : key_(std::move(key)),
        fn_(entry.fn),
        inputs_(entry.inputs.size()),
        outputs_(entry.outputs),
        where_(entry.where) {
    for (const TensorType& t : outputs_) sized_ = sized_ || !t.is_static();
  }
  int run(kiln_ctx* ctx, kiln_tensor* const* in, int n_in, kiln_tensor* const* out,
          int n_out) noexcept override {
    try {
      std::shared_ptr<HostFunction> fn = fn_.lock();
      if (!fn) fn = find_host_call(key_).fn;
      if (n_in != static_cast<int>(inputs_) || n_out != static_cast<int>(outputs_.size())) {
        throw InternalError(where_ + ": called with " + std::to_string(n_in) + " inputs and " +
                            std::to_string(n_out) + " outputs");
      }
      std::vector<Tensor> inputs, outputs;
      for (int i = 0; i < n_in; ++i) inputs.push_back(view_of(*in[i]));
      if (sized_) {  // the executor takes the results as they come (StepSpec::sized_by_run)
        SizedOutputs* sink = SizedOutputs::current();
        if (!sink || sink->size() != outputs_.size()) {
          throw InternalError(where_ + ": sized by its run, but not run as such a step");
        }
        std::vector<Tensor> got = checked_host_results((*fn)(inputs), outputs_, where_);
        for (size_t k = 0; k < got.size(); ++k) sink->set(k, std::move(got[k]));
        return 0;
      }
      for (int i = 0; i < n_out; ++i) outputs.push_back(view_of(*out[i]));
      store_host_results((*fn)(inputs), outputs_, outputs, where_);
      return 0;
    } catch (const std::exception& e) {
      ctx->fail(ctx, "%s", e.what());
    } catch (...) {
      ctx->fail(ctx, "%s failed with an unknown exception", where_.c_str());
    }
    return 1;
  }

 private:
  std::string key_;
  std::weak_ptr<HostFunction> fn_;
  size_t inputs_;
  std::vector<TensorType> outputs_;
  std::string where_;
  bool sized_ = false;
};

std::unique_ptr<ForeignOp> bind(const std::string& spec) {
  std::string key = spec.substr(host_call_spec_prefix().size());
  const HostCallEntry entry = find_host_call(key);
  return std::make_unique<BoundHostCall>(std::move(key), entry);
}

}  // namespace

void install_host_call_binder() {
  static std::once_flag once;
  std::call_once(once, [] { set_foreign_op_binder(host_call_spec_prefix(), bind); });
}

}  // namespace kiln
