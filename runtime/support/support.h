/* The loop-nest helpers every module calls, compiled once into kiln (support.c) and handed
 * to each module as it is loaded. */
#ifndef KILN_SUPPORT_H
#define KILN_SUPPORT_H
#include "runtime/module/module_abi.h"

#ifdef __cplusplus
extern "C" {
#endif
const kiln_support* kiln_host_support(void);
/* runtime/exec/foreign_op.cpp */
void* kiln_foreign_op_bind(kiln_ctx* ctx, const char* spec);
int kiln_foreign_op_run(kiln_ctx* ctx, void* op, kiln_tensor* const* in, int32_t n_in,
                        kiln_tensor* const* out, int32_t n_out);
void kiln_foreign_op_release(void* op);
#ifdef __cplusplus
}
#endif

#endif /* KILN_SUPPORT_H */
