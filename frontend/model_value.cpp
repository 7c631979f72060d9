#include "frontend/model_value.h"

namespace kiln {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kSequence:
      return "sequence";
    case ValueKind::kOptionalTensor:
      return "optional tensor";
    case ValueKind::kOptionalSequence:
      return "optional sequence";
  }
  return "?";
}

bool holds_sequence(ValueKind k) {
  return k == ValueKind::kSequence || k == ValueKind::kOptionalSequence;
}

bool is_optional(ValueKind k) {
  return k == ValueKind::kOptionalTensor || k == ValueKind::kOptionalSequence;
}

std::string element_name(const std::string& name, size_t i) {
  return name + "[" + std::to_string(i) + "]";
}

std::string ValueStructure::str() const {
  if (!present) return "none";
  std::string s = sequence ? "sequence of " + std::to_string(length) : "tensor";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : " (ranks ") + std::to_string(ranks[i]) + (i + 1 == ranks.size() ? ")" : "");
  return s;
}

ValueStructure ModelValue::structure() const {
  ValueStructure st{present, sequence, static_cast<int64_t>(tensors.size()), {}};
  for (const Tensor& t : tensors) st.ranks.push_back(t.ndim());
  return st;
}

std::string ModelValue::describe() const {
  std::string s = structure().str();
  if (!present || !sequence) return present && !tensors.empty() ? tensors[0].describe() : s;
  for (size_t i = 0; i < tensors.size(); ++i) s += (i ? ", " : ": ") + tensors[i].describe();
  return s;
}

}  // namespace kiln
