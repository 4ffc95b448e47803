/* cudamod.h: the CUDA module as the core sees it (ops/cudamod.c): opened on
   first use of a cuda device, never in a CPU run. */
#ifndef ZORCH_OPS_CUDAMOD_H
#define ZORCH_OPS_CUDAMOD_H
#include "../vm/core/tensor.h"

/* Opens the module once (later calls return at once) and registers its backend
   and allocator. True when it is loaded; false with the reason kept for
   cuda_module_why() (no error is set: the callers decide what to say). */
bool cuda_module_load(void);
/* Why the module is not loaded ("" once it is). */
const char *cuda_module_why(void);
/* A symbol the module exports (after cuda_module_load), or NULL. */
void *cuda_module_symbol(const char *name);
#endif
