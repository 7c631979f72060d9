/* The loop-nest helpers every module calls, compiled once into kiln (support.c) and handed
 * to each module as it is loaded. */
#ifndef KILN_SUPPORT_H
#define KILN_SUPPORT_H
#include "runtime/module_abi.h"

#ifdef __cplusplus
extern "C" {
#endif
const kiln_support* kiln_host_support(void);
#ifdef __cplusplus
}
#endif

#endif /* KILN_SUPPORT_H */
