#pragma once
// Theano's scan and ifelse for graphs built in code, as builders: both unroll into the graph
// being built, so each step's ops fuse, fold and differentiate like any others (grad through
// a scan is backpropagation through time over the unrolled steps). A loop whose length is
// known only at run time is ONNX's Loop (frontend/control_flow.h), not this.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ops/builders.h"

namespace kiln {

// At most this many steps are unrolled.
constexpr int64_t kMaxScanSteps = 4096;

// One step: its index t, each sequence's slice t (axis 0 dropped) and the states before it;
// returns the states after it (as many as `init`, each of its state's type), then any
// per-step outputs.
using ScanStep = std::function<std::vector<Var>(int64_t t, const std::vector<Var>& slices,
                                                const std::vector<Var>& states)>;

struct ScanResult {
  std::vector<Var> states;   // after the last step
  std::vector<Var> outputs;  // each per-step output stacked on a new axis 0, in step order
};

// Runs `step` over axis 0 of `sequences` (each of the same static length) from the states
// `init`, for `n_steps` steps (the sequences' length when not given; required when there are
// no sequences). `reverse`: from the last slice to the first. Errors name the step and value.
ScanResult scan(const ScanStep& step, const std::vector<Var>& sequences,
                const std::vector<Var>& init, std::optional<int64_t> n_steps = std::nullopt,
                bool reverse = false);

// Theano's ifelse on a boolean scalar: a condition known when the graph is built picks one
// branch, whose ops alone join the graph; otherwise both branches are built and each output
// is where(pred, then, else) (both computed; the gradient flows to each where it was taken).
// The branches' outputs must agree in number, dtype and shape.
std::vector<Var> cond(Var pred, const std::function<std::vector<Var>()>& then_branch,
                      const std::function<std::vector<Var>()>& else_branch);

// x with a new axis of size 1 at 0 (static or dynamic dimensions).
Var unsqueeze0(Var x);

}  // namespace kiln
