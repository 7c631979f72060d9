#pragma once
// Shared test helpers: random tensors, non-contiguous views, tolerant comparison.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/subprocess.h"
#include "runtime/tensor.h"
#include "util/error.h"

namespace kiln::testing {

// Uniform values in [lo, hi); integers are rounded; bools are 0/1.
Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng, double lo = -2,
                     double hi = 2);
// The same values as a non-contiguous view (a transposed buffer viewed back).
Tensor non_contiguous(const Tensor& t);
// Equal within rtol/atol (NaN equals NaN, infinities must match); exact for integer types.
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected,
                                         double rtol = 1e-5, double atol = 1e-6);
// The message of the UserError `f` throws, or "no error" when it returns normally.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

// Whether `text` contains `part` (messages, logs).
inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A fresh directory under the test's temp root.
std::string temp_dir(const std::string& name);

// The `kiln` binary the tests run: this build's, or $KILN_TEST_BINARY (to run the CLI tests
// against another build, e.g. the commit before a fix).
std::string kiln_binary();
// Runs the `kiln` binary with extra environment entries ("NAME=value").
ProcessResult kiln_env(const std::vector<std::string>& env, const std::vector<std::string>& args);

}  // namespace kiln::testing
