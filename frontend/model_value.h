#pragma once
// What an ONNX graph input or output holds: a tensor, a sequence of tensors, or an optional
// (empty, or holding a tensor or a sequence). Inside kiln a sequence is its elements: the
// importer follows each sequence op at load time, so a model is built per sequence length
// (and per optional's presence), and element i of a sequence `x` is the graph input or output
// `x[i]` (element_name).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

enum class ValueKind { kTensor, kSequence, kOptionalTensor, kOptionalSequence };

const char* value_kind_name(ValueKind k);  // "tensor", "sequence", "optional tensor", ...
bool holds_sequence(ValueKind k);          // a sequence, or an optional of one
bool is_optional(ValueKind k);

// The graph input or output that element i of sequence `name` becomes.
std::string element_name(const std::string& name, size_t i);

// A value's structure, which the graph built for it depends on: whether it is present (an
// optional may be empty) and how many tensors it is (a sequence's length, 1 for a tensor).
struct ValueStructure {
  bool present = true;
  bool sequence = false;
  int64_t length = 1;
  // Each element's rank, for a model that declares its elements without a shape.
  std::vector<int64_t> ranks;
  std::string str() const;  // "tensor", "sequence of 3", "none", "sequence of 2 (ranks 1, 0)"
};

struct ModelValue {
  bool present = true;  // false: an empty optional
  bool sequence = false;
  std::vector<Tensor> tensors;  // one for a tensor, the elements for a sequence

  static ModelValue of(Tensor t) { return {true, false, {std::move(t)}}; }
  static ModelValue sequence_of(std::vector<Tensor> elems) {
    return {true, true, std::move(elems)};
  }
  static ModelValue none() { return {false, false, {}}; }
  ValueStructure structure() const;
  std::string describe() const;  // "sequence of 2: float32 (3,), float32 (2,)"
};

}  // namespace kiln
