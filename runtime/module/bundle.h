#pragma once
// An exported model at run time (kiln export): its description, its weights (embedded or a
// mapped .safetensors file that must carry the model's id) and its statically linked module
// on an executor. The C entry points of runtime/module/bundle_abi.h wrap it for the generated glue.
#include <memory>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"
#include "runtime/module/bundle_abi.h"
#include "runtime/module/bundle_description.h"

namespace kiln {

class Bundle {
 public:
  // UserError naming what is wrong: the weights file (missing, truncated, another model's),
  // a tensor, the description.
  Bundle(const kiln_bundle_image& image, const char* weights_path);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  const BundleDescription& description() const { return description_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  BundleDescription description_;
  std::shared_ptr<Executor> executor_;
};

}  // namespace kiln
