#pragma once
// What the executor needs to run a module, with no knowledge of graphs: buffer slots, the
// thunk steps that read and write them, and each step's run-time shape rule.
#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

enum class SlotKind { kInput, kParam, kTemp };

struct SlotSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;  // -1: dynamic
  SlotKind kind = SlotKind::kTemp;
  bool on_device = false;  // written by a device thunk: its buffer is CUDA device memory
  int view_of = -1;        // >= 0: a view of that slot's bytes under this slot's shape
};

// Maps the input shapes of a step to its output shapes; throws UserError on a mismatch
// that only shows at run time (e.g. broadcasting 3 against 4).
using ShapeRule = std::function<std::vector<Shape>(const std::vector<Shape>&)>;
// Floating-point operations of one step call from its input and output shapes (0: not
// counted).
using FlopRule =
    std::function<double(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs)>;

struct StepSpec {
  int thunk = 0;  // index into the module's thunk table
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::string label;  // "node 3: softmax(t2) -> t3"
  ShapeRule infer_shape;
  FlopRule flops;  // may be empty
  // The thunk runs threads of its own (a BLAS call): a parallel run gives it the cores alone.
  bool exclusive = false;
  // >= 0: the step concatenates its inputs along this axis. Where an input's band of the
  // output is one contiguous run, the executor may bind the input to those bytes, so its
  // producer writes it in place; the thunk must then skip that copy (it compares pointers).
  int concat_axis = -1;
  // The step's output shapes are known only once it has run (control flow whose sizes come
  // from run-time values): its thunk hands its results to the thread's SizedOutputs
  // (runtime/exec/sized_outputs.h) rather than writing planned buffers, and the executor
  // plans the steps after it from their shapes. infer_shape is not called for it.
  bool sized_by_run = false;
};

// A state update: after a run, user input `input` holds the value of output `output` (a
// position in output_slots; the caller does not get it back as an output). In place: the
// step writing that output writes the input's buffer directly, ordered after every other
// step reading the old value (the program's step order puts it there; the engine sees the
// write). Otherwise the value is copied into the input after the last step. Runs of a
// program with updates must not overlap.
struct ProgramUpdate {
  int output = 0;
  int input = 0;
  bool in_place = false;
};

struct Program {
  std::vector<SlotSpec> slots;
  std::vector<int> input_slots;                // user inputs, in call order
  std::vector<std::pair<int, Tensor>> params;  // bound weights and tensor constants
  std::vector<int> output_slots;
  std::vector<StepSpec> steps;
  std::vector<ProgramUpdate> updates;
};

}  // namespace kiln
