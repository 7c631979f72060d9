#pragma once
// The program of an exported library (kiln export), as data: buffer slots, steps, which
// weights tensor each parameter slot binds, and each step's output shapes as rules over its
// input shapes — so the library runs without kiln's graph or ops.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/exec/program.h"

namespace kiln {

// One output dimension: `value`, or dimension `dim` of the step's input `input`
// times `mul` / `div` (the division must be exact at run time).
struct DimRule {
  int input = -1;  // -1: the constant `value`
  int dim = 0;
  int64_t value = 0;
  int64_t mul = 1, div = 1;
};

struct BundleStep {
  int thunk = 0;
  std::vector<int> inputs, outputs;
  std::string label;
  std::vector<std::vector<DimRule>> shapes;  // per output, per dimension
};

struct BundleDescription {
  std::string name;
  std::vector<SlotSpec> slots;
  std::vector<int> input_slots, output_slots;
  std::vector<std::pair<int, std::string>> params;  // slot -> weights tensor
  std::vector<BundleStep> steps;
  // Dynamic input dimensions (input index, dim) that must be equal: the rules were derived
  // with them tied.
  std::vector<std::vector<std::pair<int, int>>> ties;

  std::string to_json() const;
  // UserError naming the inputs when tied dimensions differ.
  void check_ties(const std::vector<Shape>& input_shapes) const;
  // Throws UserError naming `origin` and what is wrong (an index out of range, a bad field).
  static BundleDescription parse(std::string_view text, const std::string& origin);
  // The program, its parameters bound from `weights` by tensor name (UserError naming the
  // tensor when one is missing or has another dtype or shape).
  Program program(const std::map<std::string, Tensor>& weights) const;
};

// The step's shape rule: evaluates its DimRules (UserError when a division is not exact).
ShapeRule shape_rule_of(const BundleStep& step);

}  // namespace kiln
