#include "compiler/function.h"

#include <algorithm>

#include "runtime/exec/trace_json.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

Function::Function(std::shared_ptr<Executor> executor, std::vector<std::string> input_names,
                   std::vector<TensorType> input_types, std::vector<std::string> output_names,
                   CompileInfo info, std::shared_ptr<const void> pin)
    : executor_(std::move(executor)),
      input_names_(std::move(input_names)),
      input_types_(std::move(input_types)),
      output_names_(std::move(output_names)),
      info_(std::move(info)),
      pin_(std::move(pin)) {}

const char* to_string(CacheStatus status) {
  switch (status) {
    case CacheStatus::kMemo:
      return "memo";
    case CacheStatus::kHit:
      return "hit";
    case CacheStatus::kRemoteHit:
      return "hit (remote)";
    case CacheStatus::kMiss:
      return "miss";
    case CacheStatus::kBypassed:
      return "bypassed";
    case CacheStatus::kUncacheable:
      return "uncacheable";
  }
  return "?";
}

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& inputs) const {
  return executor_->run(inputs);
}

std::string Function::trace_json() const {
  return chrome_trace_json(executor_->program(), executor_->trace());
}

PendingRun Function::run_async(const std::vector<Tensor>& inputs) const {
  return executor_->run_async(inputs);
}

PendingRun Function::run_async(const std::map<std::string, Tensor>& inputs) const {
  return executor_->run_async(ordered(inputs));
}

std::vector<Tensor> Function::run(const std::map<std::string, Tensor>& inputs) const {
  return executor_->run(ordered(inputs));
}

std::vector<Tensor> Function::ordered(const std::map<std::string, Tensor>& inputs) const {
  return inputs_in_order(input_names_, input_types_, inputs);
}

std::vector<Tensor> inputs_in_order(const std::vector<std::string>& names,
                                    const std::vector<TensorType>& types,
                                    const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> ordered;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = inputs.find(names[i]);
    if (it == inputs.end()) {
      throw UserError("missing input '" + names[i] + "' (expected " + types[i].to_string() + ")");
    }
    ordered.push_back(it->second);
  }
  for (const auto& [name, t] : inputs) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw UserError("unknown input '" + name + "' (the graph takes " + join(names, ", ") + ")");
    }
  }
  return ordered;
}

}  // namespace kiln
