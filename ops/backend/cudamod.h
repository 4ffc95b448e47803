/* cudamod.h: the CUDA module as the core sees it (ops/backend/cudamod.c): opened on
   first use of a cuda device, never in a CPU run. */
#ifndef ZORCH_OPS_CUDAMOD_H
#define ZORCH_OPS_CUDAMOD_H
#include "../core/tensor.h"

/* Opens the module once (later calls return at once) and registers its backend
   and allocator. True when it is loaded; false with the reason kept for
   cuda_module_why() (no error is set: the callers decide what to say). */
bool cuda_module_load(void);
/* Why the module is not loaded ("" once it is). */
const char *cuda_module_why(void);
/* A symbol the module exports (after cuda_module_load), or NULL. */
void *cuda_module_symbol(const char *name);
/* Offload on GPU ranks. Page-locked host memory (cudaMallocHost) of n bytes,
   or NULL (no error set) where there is no module or GPU or the driver
   refuses: the caller then uses ordinary memory. */
void *cuda_host_alloc(size_t n);
void cuda_host_free(void *p);
/* n bytes from device memory src (device dev) to host dst on the device's
   side stream, after the work queued so far; cuda_copy_wait waits for every
   one queued. Errors without the module. */
zorch_status cuda_copy_to_host_async(void *dst, const void *src, size_t n, int dev);
zorch_status cuda_copy_wait(int dev);
#endif
