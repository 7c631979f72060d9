#pragma once
// Shared by the libFuzzer targets: runs a reader on the bytes and lets only kiln's own
// errors through. Any other exception (std::out_of_range, std::bad_alloc, ...) is a reader
// bug that a crafted file can reach, so it aborts and the fuzzer keeps the input.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "util/error.h"

namespace kiln::fuzz {

template <class F>
int run_reader(F&& f) {
  try {
    f();
  } catch (const Error&) {
    // A clear error naming the problem: the expected answer to a bad file.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reader threw a non-kiln exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace kiln::fuzz
