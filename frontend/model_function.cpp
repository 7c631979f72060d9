#include "frontend/model_function.h"

#include <fstream>
#include <sstream>

#include "frontend/model_loader.h"
#include "util/error.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ModelFunction::ModelFunction(const fs::path& path, CompileOptions options)
    : origin_(path.string()), dir_(path.parent_path()), options_(std::move(options)) {
  const auto start = std::chrono::steady_clock::now();
  if (path.extension() != ".onnx") {
    Variant v{load_model(path), nullptr};
    load_ms_ = ms_since(start);
    for (const Variable* in : v.graph.inputs()) inputs_.push_back({in->name, in->type});
    v.function = std::make_unique<Function>(compile(v.graph, options_));
    last_ = &variants_.emplace("", std::move(v)).first->second;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(origin_ + ": cannot open the model file");
  std::stringstream buf;
  buf << in.rdbuf();
  bytes_ = buf.str();
  inputs_ = onnx_model_inputs(bytes_, origin_);
  try {
    Variant v{parse_onnx_model(bytes_, origin_, dir_), nullptr};
    load_ms_ = ms_since(start);
    v.function = std::make_unique<Function>(compile(v.graph, options_));
    last_ = &variants_.emplace("", std::move(v)).first->second;
  } catch (const InputValueNeeded& e) {
    value_inputs_.push_back(e.input());  // the rest are found on the first call
  }
}

ModelFunction::Variant& ModelFunction::variant_for(const std::map<std::string, Tensor>& inputs) {
  if (value_inputs_.empty() && last_) return *last_;
  auto value_of = [&](const std::string& name) -> const Tensor& {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw UserError(origin_ + ": missing input '" + name + "'");
    return it->second;
  };
  for (;;) {
    // The variant's key: each value input's dtype, shape and bytes.
    std::map<std::string, Tensor> bound;
    std::string key;
    for (const std::string& name : value_inputs_) {
      Tensor t = value_of(name).contiguous();
      bound[name] = t;
      key += name + "=" + t.describe() + ":";
      key.append(static_cast<const char*>(t.data()), t.nbytes());
      key += ";";
    }
    if (auto it = variants_.find(key); it != variants_.end()) return it->second;
    Variant v;
    const auto start = std::chrono::steady_clock::now();
    try {
      v.graph = parse_onnx_model(bytes_, origin_, dir_, bound);
      load_ms_ = ms_since(start);
    } catch (const InputValueNeeded& e) {
      if (bound.count(e.input())) throw;  // cannot happen: bound inputs are values
      value_inputs_.push_back(e.input());
      continue;
    }
    v.function = std::make_unique<Function>(compile(v.graph, options_));
    if (variants_.size() >= kMaxVariants && !order_.empty()) {
      if (last_ == &variants_.at(order_.front())) last_ = nullptr;
      variants_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(key);
    return variants_.emplace(key, std::move(v)).first->second;
  }
}

std::vector<Tensor> ModelFunction::run(const std::map<std::string, Tensor>& inputs) {
  Variant& v = variant_for(inputs);
  last_ = &v;
  std::map<std::string, Tensor> rest;
  for (const Variable* in : v.graph.inputs()) {
    auto it = inputs.find(in->name);
    if (it != inputs.end()) rest[in->name] = it->second;
  }
  return v.function->run(rest.size() == inputs.size() ? inputs : rest);
}

std::vector<Tensor> ModelFunction::operator()(const std::vector<Tensor>& inputs) {
  if (inputs.size() != inputs_.size()) {
    throw UserError(origin_ + ": " + std::to_string(inputs.size()) +
                    " inputs given, the model takes " + std::to_string(inputs_.size()));
  }
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < inputs.size(); ++i) named[inputs_[i].name] = inputs[i];
  return run(named);
}

Function& ModelFunction::function() {
  if (!last_) throw UserError(origin_ + ": the model is built when its input values arrive");
  return *last_->function;
}

const Graph& ModelFunction::graph() {
  if (!last_) throw UserError(origin_ + ": the model is built when its input values arrive");
  return last_->graph;
}

std::vector<std::string> ModelFunction::output_names() { return function().output_names(); }

}  // namespace kiln
