/* The example op library's entry point: reports the ABI it was built against and registers
 * its three ops. */
#include "example_ops.h"

const char *example_c_type(int32_t dtype) {
  if (dtype == KILN_DTYPE_FLOAT32) return "float";
  if (dtype == KILN_DTYPE_FLOAT64) return "double";
  return 0;
}

static int init(const kiln_op_registry *r) {
  const kiln_op_def *defs[] = {example_rms_norm_def(), example_matmul_def(), example_rotary_def()};
  for (unsigned i = 0; i < sizeof defs / sizeof defs[0]; ++i) {
    if (r->register_op(r->call, defs[i]) != KILN_OP_OK) return KILN_OP_ERROR;
  }
  return KILN_OP_OK;
}

KILN_OP_EXPORT const kiln_op_library_info *kiln_op_library(void) {
  static const kiln_op_library_info info = {sizeof(kiln_op_library_info), KILN_OP_ABI_MAJOR,
                                            KILN_OP_ABI_MINOR, "example", "1.0", init};
  return &info;
}
