/* The example op library's ops (examples/op_library): each file defines one op's hooks
 * and exports its kiln_op_def through a function the library's entry point registers. */
#ifndef EXAMPLE_OPS_H
#define EXAMPLE_OPS_H
#include <kiln/op_library.h>

const kiln_op_def *example_rms_norm_def(void);
const kiln_op_def *example_matmul_def(void);
const kiln_op_def *example_rotary_def(void);

/* "float" / "double" for the dtypes these ops take, NULL for others. */
const char *example_c_type(int32_t dtype);

#endif
