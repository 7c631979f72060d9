#include "runtime/exec/sized_outputs.h"

#include <string>

#include "util/error.h"

namespace kiln {
namespace {

thread_local SizedOutputs* g_current = nullptr;

}  // namespace

SizedOutputs::SizedOutputs(size_t n) : values_(n), outer_(g_current) { g_current = this; }

SizedOutputs::~SizedOutputs() { g_current = outer_; }

SizedOutputs* SizedOutputs::current() { return g_current; }

void SizedOutputs::set(size_t k, Tensor value) {
  if (k >= values_.size()) {
    throw InternalError("a step sized by its run gave output " + std::to_string(k) + " of " +
                        std::to_string(values_.size()));
  }
  values_[k] = std::move(value);
}

std::vector<Tensor> SizedOutputs::take(const std::string& what) {
  for (size_t k = 0; k < values_.size(); ++k) {
    if (!values_[k].defined()) {
      throw InternalError(what + ": sized by its run, it gave no output " + std::to_string(k));
    }
  }
  return std::move(values_);
}

}  // namespace kiln
