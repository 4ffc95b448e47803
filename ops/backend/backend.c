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

zorch_status backend_check_device(const char *op, zorch_device dev) {
  char name[32];
  if (zorch_device_available(dev)) return ZORCH_OK;
  zorch_device_name(dev, name, sizeof name);
  const char *why = device_why(dev.type);
  if (!backend_get(dev.type)) {
    if (*why) return err_set(ZORCH_ERR_DEVICE, "%s: device %s: not available: %s", op, name, why);
    return err_set(ZORCH_ERR_DEVICE, "%s: device %s: backend not built", op, name);
  }
  const device_mem *m = device_mem_get(dev.type);
  int n = m ? m->count() : 0;
  return err_set(ZORCH_ERR_DEVICE, "%s: device %s: not available (%d CUDA device%s present)%s%s", op, name, n,
                 n == 1 ? "" : "s", *why ? ": " : "", why);
}
