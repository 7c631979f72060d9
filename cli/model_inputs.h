// --input NAME=FILE: the tensors a command feeds a model, read from .npy and .safetensors
// files and checked against the model's inputs; and the files its results go to.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/command.h"
#include "frontend/model_function.h"
#include "graph/graph.h"
#include "runtime/tensor.h"

namespace kiln::cli {

Flag input_flag();

// The --input flags, read before the model loads (a malformed flag is a usage error).
struct InputSpecs {
  std::map<std::string, std::string> files;  // NAME=FILE
  std::vector<std::string> bundles;  // FILE.safetensors without NAME=: inputs by tensor name
  bool any = false;
};

InputSpecs parse_input_specs(const CommandLine& line);

// Every input the specs name, checked against the model's inputs before anything compiles (a
// typo should not cost a compile). With `optional`, giving no input at all is allowed.
std::map<std::string, Tensor> read_inputs(const InputSpecs& specs,
                                          const std::vector<ModelInput>& model_inputs,
                                          const std::string& command, bool optional);
std::map<std::string, Tensor> read_inputs(const InputSpecs& specs, const Graph& g,
                                          const std::string& command, bool optional);

// DIR/<prefix><file name>.npy for each named value; never outside DIR, never two values to
// one file.
std::vector<std::filesystem::path> value_files(const std::string& dir,
                                               const std::vector<std::string>& names,
                                               const std::string& prefix);

void create_output_dir(const std::string& dir);

}  // namespace kiln::cli
