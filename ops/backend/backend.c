/* backend.c: the kernel backends by device type. The CPU's is built in; the
   CUDA backend is the CUDA module's, opened on first use (ops/backend/cudamod.c
   registers its kernels here and its allocator with the core). */
#include "backend.h"

#include <string.h>

#include "cudamod.h"

static const backend *backends[ZORCH_NDEVICE_TYPES] = {&cpu_backend, NULL};

const backend *backend_get(zorch_device_type type) {
  if (type == ZORCH_CUDA) cuda_module_load();
  return (unsigned)type < ZORCH_NDEVICE_TYPES ? backends[type] : NULL;
}

void backend_register(zorch_device_type type, const backend *b) {
  if ((unsigned)type < ZORCH_NDEVICE_TYPES) backends[type] = b;
}

bool zorch_device_available(zorch_device dev) {
  if (!backend_get(dev.type)) return false;
  const device_mem *m = device_mem_get(dev.type);
  return m && dev.index >= 0 && dev.index < m->count();
}

