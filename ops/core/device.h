/* device.h: devices as the core sees them: their names and their memory. Host
   memory is built in (hostmem.c); a device backend registers its allocator
   when it starts (ops/cuda does so on first use). Kernels belong to the ops
   layer (ops/backend/backend.h). */
#ifndef ZORCH_VM_CORE_DEVICE_H
#define ZORCH_VM_CORE_DEVICE_H
#include <stddef.h>

#include "zorch.h"

typedef struct device_mem {
  /* NULL on failure; a device allocator sets the error itself (what was asked,
     what it holds), the host's leaves it to the caller */
  void *(*alloc)(int index, size_t nbytes);
  void (*free)(int index, void *p);
  int (*count)(void); /* devices of this type present */
} device_mem;

/* The allocator of a device type, or NULL when none is registered. */
const device_mem *device_mem_get(zorch_device_type type);
void device_mem_register(zorch_device_type type, const device_mem *m);
/* Why a device type has no device (the CUDA module could not be opened, or the
   CUDA runtime's reason for finding no GPU), for the messages that refuse its
   tensors; set by the backend's loader (ops/backend/cudamod.c), a string that stays
   valid. "" when none was given. */
void device_set_why(zorch_device_type type, const char *why);
const char *device_why(zorch_device_type type);
/* Host memory: 64-byte aligned blocks, small ones cached per thread. */
extern const device_mem host_mem;
#endif
