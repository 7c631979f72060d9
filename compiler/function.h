#pragma once
// A compiled graph: call it with input tensors, get output tensors.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor_type.h"
#include "runtime/executor.h"

namespace kiln {

struct PhaseTimes {
  double key_ms = 0, codegen_ms = 0, compile_ms = 0, load_ms = 0;
};

struct CompileInfo {
  std::string key;
  std::filesystem::path source_path;  // the stitched C source, kept beside the module
  std::filesystem::path module_path;
  std::string compiler_log;           // warnings, if any (empty for a clean compile)
  PhaseTimes times;
};

class Function {
 public:
  Function(std::shared_ptr<Executor> executor, std::vector<std::string> input_names,
           std::vector<TensorType> input_types, std::vector<std::string> output_names,
           CompileInfo info);

  // Inputs in graph-input order.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  // Inputs by name; a missing or unknown name is a UserError naming it.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;

  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<TensorType>& input_types() const { return input_types_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const CompileInfo& info() const { return info_; }

 private:
  std::shared_ptr<Executor> executor_;
  std::vector<std::string> input_names_;
  std::vector<TensorType> input_types_;
  std::vector<std::string> output_names_;
  CompileInfo info_;
};

}  // namespace kiln
