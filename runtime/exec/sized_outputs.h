#pragma once
// Outputs whose sizes only their step knows (StepSpec::sized_by_run: a Loop whose trip count
// or condition comes at run time, an If whose branches differ in shape). While one lives on a
// thread, the step run there hands its results to it instead of writing planned buffers; the
// executor then plans the steps after it from the shapes they came out with.
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

class SizedOutputs {
 public:
  explicit SizedOutputs(size_t n);  // installs itself as this thread's, until destroyed
  ~SizedOutputs();
  SizedOutputs(const SizedOutputs&) = delete;
  SizedOutputs& operator=(const SizedOutputs&) = delete;

  static SizedOutputs* current();  // this thread's innermost, or null
  size_t size() const { return values_.size(); }
  void set(size_t k, Tensor value);
  // The values set, each once; throws InternalError naming `what` when one is missing.
  std::vector<Tensor> take(const std::string& what);

 private:
  std::vector<Tensor> values_;
  SizedOutputs* outer_;
};

}  // namespace kiln
