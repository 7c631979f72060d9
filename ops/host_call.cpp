#include "ops/host_call.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "ops/c/foreign_call.h"
#include "util/error.h"

namespace kiln {
namespace {

constexpr const char* kSpecPrefix = "kiln-host-call ";

struct Registered {
  std::weak_ptr<HostFunction> fn;
  std::vector<TensorType> inputs, outputs;
  std::string kind;
};

std::string where_of(const std::string& kind, const std::string& key) {
  return kind + " (host call " + key.substr(0, 12) + ")";
}

std::mutex g_mutex;

std::map<std::string, Registered>& registry() {
  static std::map<std::string, Registered> r;
  return r;
}

Attrs checked(Attrs props) {
  if (attr_string(props, "key", "").empty()) throw UserError("host_call needs a key");
  return props;
}

}  // namespace

HostCallEntry find_host_call(const std::string& key) {
  std::lock_guard lock(g_mutex);
  auto it = registry().find(key);
  std::shared_ptr<HostFunction> fn = it == registry().end() ? nullptr : it->second.fn.lock();
  if (!fn) {
    throw UserError("host call '" + key.substr(0, 16) +
                    "': no function of this process computes it (a control-flow node's body "
                    "runs in the process that loaded its model; load the model there)");
  }
  const Registered& r = it->second;
  return {fn, r.inputs, r.outputs, r.kind, where_of(r.kind, key)};
}

std::string host_call_spec_prefix() { return kSpecPrefix; }

void store_host_results(const std::vector<Tensor>& results, const std::vector<TensorType>& types,
                        std::vector<Tensor>& outputs, const std::string& where) {
  if (results.size() != outputs.size()) {
    throw InternalError(where + " gave " + std::to_string(results.size()) + " outputs for " +
                        std::to_string(outputs.size()));
  }
  for (size_t k = 0; k < results.size(); ++k) {
    if (results[k].dtype() != outputs[k].dtype() || results[k].shape() != outputs[k].shape()) {
      throw UserError(where + ": output " + std::to_string(k) + " came out " +
                      results[k].describe() + "; the node's type is " + types.at(k).to_string() +
                      " (shapes known when the model loaded)");
    }
    copy_into(results[k], outputs[k]);
  }
}

std::vector<Tensor> checked_host_results(std::vector<Tensor> results,
                                         const std::vector<TensorType>& types,
                                         const std::string& where) {
  if (results.size() != types.size()) {
    throw InternalError(where + " gave " + std::to_string(results.size()) + " outputs for " +
                        std::to_string(types.size()));
  }
  for (size_t k = 0; k < results.size(); ++k) {
    const TensorType& t = types[k];
    bool ok = results[k].dtype() == t.dtype && results[k].ndim() == t.rank();
    for (int d = 0; ok && d < t.rank(); ++d)
      ok = t.dims[static_cast<size_t>(d)] < 0 ||
           t.dims[static_cast<size_t>(d)] == results[k].shape()[static_cast<size_t>(d)];
    if (!ok) {
      throw UserError(where + ": output " + std::to_string(k) + " came out " +
                      results[k].describe() + "; the node's type is " + t.to_string());
    }
  }
  return results;
}

HostCallOp::HostCallOp(Attrs props, std::vector<TensorType> inputs, std::vector<TensorType> outputs,
                       std::shared_ptr<HostFunction> fn)
    : COp("host_call", checked(std::move(props))),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      fn_(fn) {
  for (const TensorType& t : outputs_) sized_ = sized_ || !t.is_static();
  std::lock_guard lock(g_mutex);
  for (auto it = registry().begin(); it != registry().end();)
    it = it->second.fn.expired() ? registry().erase(it) : std::next(it);
  registry()[attr_string(this->props(), "key")] =
      Registered{fn, inputs_, outputs_, attr_string(this->props(), "kind", "host call")};
}

HostCallOp::HostCallOp(const Attrs& props) : COp("host_call", checked(props)) {
  HostCallEntry e = find_host_call(attr_string(props, "key"));
  fn_ = e.fn;
  inputs_ = std::move(e.inputs);
  outputs_ = std::move(e.outputs);
  for (const TensorType& t : outputs_) sized_ = sized_ || !t.is_static();
}

std::string HostCallOp::where() const {
  return where_of(attr_string(props(), "kind", "host call"), attr_string(props(), "key"));
}

std::vector<TensorType> HostCallOp::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != inputs_.size())
    throw UserError(where() + " takes " + std::to_string(inputs_.size()) + " inputs, got " +
                    std::to_string(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype != inputs_[k].dtype || inputs[k].rank() != inputs_[k].rank())
      throw UserError(where() + ": input " + std::to_string(k) + " is " + inputs[k].to_string() +
                      "; it takes " + inputs_[k].to_string());
  }
  return outputs_;
}

std::vector<Shape> HostCallOp::infer_shape(const std::vector<Shape>& inputs) const {
  // Sized by its run, a dynamic dimension is 0 until then: perform replaces such outputs.
  std::vector<Shape> out;
  for (const TensorType& t : outputs_) {
    out.push_back(t.dims);
    for (int64_t& d : out.back()) d = std::max<int64_t>(d, 0);
  }
  return out;
}

void HostCallOp::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  std::shared_ptr<HostFunction> fn = fn_.lock();
  if (!fn) fn = find_host_call(attr_string(props(), "key")).fn;
  if (sized_) {
    outputs = checked_host_results((*fn)(inputs), outputs_, where());
    return;
  }
  store_host_results((*fn)(inputs), outputs_, outputs, where());
}

std::string HostCallOp::c_code(const Node&, const CodeNames& names, const Sub& sub) const {
  return foreign_call_code(names, sub);
}

std::string HostCallOp::c_state_fields(const Node&, const std::string& prefix) const {
  return foreign_state_field(prefix);
}

std::string HostCallOp::c_init_code_struct(const Node&, const Sub& sub) const {
  return foreign_bind_code(kSpecPrefix + attr_string(props(), "key"), sub);
}

std::string HostCallOp::c_cleanup_code_struct(const Node&, const Sub& sub) const {
  return foreign_release_code(sub);
}

}  // namespace kiln
