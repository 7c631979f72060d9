// A library written in C++ whose hooks throw through the C ABI (which they must not): kiln
// must report the exception as the op's error, not crash. infer_types throws for a 2-D
// input; forward throws on every run.
#include <kiln/op_library.h>

#include <cstring>
#include <stdexcept>

namespace {

int infer_types(const kiln_op_node* node, int32_t* n_outputs, kiln_op_type* outputs) {
  if (node->n_inputs == 1 && node->inputs[0].ndim == 2)
    throw std::runtime_error("boom in infer_types");
  *n_outputs = 1;
  outputs[0] = node->inputs[0];
  return KILN_OP_OK;
}

int infer_shapes(const kiln_op_node* node, kiln_op_type* outputs) {
  for (int32_t i = 0; i < node->inputs[0].ndim; ++i) outputs[0].dims[i] = node->inputs[0].dims[i];
  return KILN_OP_OK;
}

int forward(const kiln_op_run*) { throw std::runtime_error("boom in forward"); }

int init(const kiln_op_registry* r) {
  kiln_op_def d;
  std::memset(&d, 0, sizeof d);
  d.size = sizeof d;
  d.name = "throwing.op";
  d.infer_types = infer_types;
  d.infer_shapes = infer_shapes;
  d.forward = forward;
  return r->register_op(r->call, &d);
}

}  // namespace

extern "C" KILN_OP_EXPORT const kiln_op_library_info* kiln_op_library(void) {
  static const kiln_op_library_info info = {
      sizeof info, KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR, "throwing", "1", init};
  return &info;
}
