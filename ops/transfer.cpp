#include "ops/transfer.h"

#include <cstring>

#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {

Transfer::Transfer(bool to_device)
    : COp(to_device ? "to_device" : "to_host", {}), to_device_(to_device) {}

std::vector<TensorType> Transfer::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes one input");
  return {inputs[0]};
}

std::vector<Shape> Transfer::infer_shape(const std::vector<Shape>& inputs) const {
  return {inputs.at(0)};
}

void Transfer::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor src = inputs.at(0).contiguous();
  std::memcpy(outputs.at(0).data(), src.data(), src.nbytes());
}

std::string Transfer::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const std::string& x = names.inputs[0];
  const std::string& y = names.outputs[0];
  const std::string esize = std::to_string(dtype_size(node.inputs[0]->type.dtype));
  std::string s;
  s += "{\n";
  s += "  int64_t kiln_n = 1;\n";
  s += "  int kiln_contiguous = 1;\n";
  s += "  for (int d = " + x + "->ndim - 1; d >= 0; --d) {\n";
  s += "    if (" + x + "->shape[d] != 1 && " + x + "->strides[d] != kiln_n) kiln_contiguous = 0;\n";
  s += "    kiln_n *= " + x + "->shape[d];\n  }\n";
  s += "  const size_t kiln_bytes = (size_t)kiln_n * " + esize + ";\n";
  if (to_device_) {
    s += "  const void *kiln_src = " + x + "->data;\n";
    s += "  if (!kiln_contiguous && kiln_n > 0) {\n";
    s += c_workspace("unsigned char", "kiln_staging", "kiln_bytes", "the staged copy to the device");
    s += "    KILN_SUPPORT->copy_strided(kiln_staging, " + x + "->data, " + x + "->ndim, " + x +
         "->shape, " + x + "->strides, " + esize + ");\n";
    s += "    kiln_src = kiln_staging;\n  }\n";
    s += "  if (kiln_n > 0 && " + sub.ctx + "->copy(" + sub.ctx + ", " + y +
         "->data, kiln_src, kiln_bytes, KILN_COPY_TO_DEVICE)) {\n";
  } else {
    // Device tensors are always contiguous.
    s += "  (void)kiln_contiguous;\n";
    s += "  if (kiln_n > 0 && " + sub.ctx + "->copy(" + sub.ctx + ", " + y + "->data, " + x +
         "->data, kiln_bytes, KILN_COPY_TO_HOST_ASYNC)) {\n";
  }
  s += "    kiln_status = 1;\n    goto kiln_cleanup;\n  }\n}\n";
  return s;
}

}  // namespace kiln
