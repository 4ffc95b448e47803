/* module.h: the contract between the core and the CUDA module
   (libzorch_cuda.so). The module holds everything that needs the CUDA
   libraries: the kernels of ops/cuda, the runtime (devices, streams, the
   caching allocator), cuBLASLt, cuDNN and the NCCL collectives of zero/nccl.c.
   The core opens it with dlopen the first time a cuda device is asked for
   (ops/backend/cudamod.c), so a CPU run never maps cudart, cuBLAS or NCCL.

   The two sides talk through two tables of function pointers and nothing else:
   the core lends the module the few core functions its code calls (the error
   helpers, shape arithmetic; `cuda_host`), and the module answers with its
   backend table, its allocator and its entry points (`cuda_module`). The module
   exports one symbol, ZORCH_CUDA_MODULE_ENTRY, and the NCCL collectives' entry
   (ZORCH_CUDA_NCCL_ENTRY, zero/nccl.h, which zero/comm.c looks up itself, so the
   ops layer never names a zero function); its other symbols are local, so it
   never binds to (or shadows) the symbols of the library that opened it, and a
   host that linked libzorch.a statically loads it the same way.

   Both sides are compiled from the same headers in one build; the ABI number and
   the struct sizes are checked on open, so a module from another build is
   refused with a message instead of crashing. Plain C: included by ops/backend/cudamod.c
   and by the module (ops/cuda/host.c, runtime.cu). */
#ifndef ZORCH_OPS_CUDA_MODULE_H
#define ZORCH_OPS_CUDA_MODULE_H
#include <stdarg.h>

#include "../backend/backend.h"

/* Bumped whenever cuda_host, cuda_module, backend or the NCCL table change. */
#define ZORCH_CUDA_MODULE_ABI 2
#define ZORCH_CUDA_MODULE_ENTRY "zorch_cuda_module_open"
#define ZORCH_CUDA_MODULE_FILE "libzorch_cuda.so"
#define ZORCH_CUDA_NCCL_ENTRY "zorch_cuda_nccl_open"

/* What the core lends the module. */
typedef struct cuda_host {
  int abi;
  size_t size, backend_size, device_mem_size; /* sizeof each, as the core sees them */
  zorch_status (*err_setv)(zorch_status code, const char *fmt, va_list ap);
  void (*err_prefix)(const char *op);
  zorch_status (*last_status)(void);
  int64_t (*shape_numel)(int ndim, const int64_t *shape);
  int64_t (*tensor_numel)(const zorch_tensor *t);
  bool (*tensor_is_contiguous)(const zorch_tensor *t);
  bool (*tf32)(void); /* zorch_cuda_tf32(): the switch lives in the core */
} cuda_host;

/* What the module gives back. Every function sets the error and returns its
   status as the core's own functions do. */
typedef struct cuda_module {
  int abi;
  size_t size, backend_size, device_mem_size;
  const backend *backend;
  const device_mem *mem;
  /* devices present (0 without a GPU); why there are none, for messages */
  int (*device_count)(void);
  const char *(*no_device_reason)(void);
  zorch_status (*memory_stats)(int dev, zorch_cuda_memory *out);
  zorch_status (*empty_cache)(int dev);
  zorch_status (*synchronize)(int dev);
  /* "CUDA runtime 13.0, driver 13.0, cuBLASLt 13.0, cuDNN 9.x (conv2d, batch_norm), NCCL 2.x" */
  void (*describe)(char *buf, size_t n);
  /* Offload on GPU ranks (zero/buckets.c, lua/zorch/engine/offload.lua): page-locked host
     memory (cudaMallocHost) for the offloaded shard, and copies to it on the
     device's side stream: copy_to_host_async queues n bytes after the work
     queued on the device's stream so far (an event between the two) and
     returns at once; copy_wait waits for every side copy queued. */
  zorch_status (*host_alloc)(size_t n, void **out);
  void (*host_free)(void *p);
  zorch_status (*copy_to_host_async)(void *dst, const void *src, size_t n, int dev);
  zorch_status (*copy_wait)(int dev);
} cuda_module;

/* The module's one exported function: checks `host` (ABI, sizes), keeps it, and
   returns the module's table; NULL with a reason in why (n bytes) when the two
   sides do not fit. */
typedef const cuda_module *(*cuda_module_entry)(const cuda_host *host, char *why, size_t n);
/* The module's side (ops/cuda/host.c): keeps host after checking it. */
bool cu_host_attach(const cuda_host *host, char *why, size_t n);
#endif
