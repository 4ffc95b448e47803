/* device.c: the backend registry and device names. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const backend *backends[ZORCH_NDEVICE_TYPES] = {&cpu_backend, NULL};
int (*device_cuda_count)(void) = NULL;

#ifdef ZORCH_WITH_CUDA
#include <pthread.h>
void cuda_backend_init(void); /* ops/cuda/backend.cu */
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
#define CUDA_INIT() pthread_once(&cuda_once, cuda_backend_init)
#else
#define CUDA_INIT() ((void)0)
#endif

const backend *backend_get(zorch_device_type type) {
  if (type == ZORCH_CUDA) CUDA_INIT();
  return (unsigned)type < ZORCH_NDEVICE_TYPES ? backends[type] : NULL;
}

void backend_register(zorch_device_type type, const backend *b) {
  if ((unsigned)type < ZORCH_NDEVICE_TYPES) backends[type] = b;
}

zorch_status zorch_device_parse(const char *name, zorch_device *out) {
  if (!name) return err_set(ZORCH_ERR_ARG, "device: name is NULL");
  if (strcmp(name, "cpu") == 0) {
    *out = (zorch_device){ZORCH_CPU, 0};
    return ZORCH_OK;
  }
  if (strncmp(name, "cuda", 4) == 0) {
    int idx = 0;
    if (name[4] == ':') {
      char *end;
      long v = strtol(name + 5, &end, 10);
      if (end == name + 5 || *end || v < 0 || v > 1023)
        return err_set(ZORCH_ERR_ARG, "device: bad device name '%s' (expected cuda:N)", name);
      idx = (int)v;
    } else if (name[4]) {
      return err_set(ZORCH_ERR_ARG, "device: unknown device '%s' (expected cpu, cuda or cuda:N)",
                     name);
    }
    *out = (zorch_device){ZORCH_CUDA, idx};
    return ZORCH_OK;
  }
  return err_set(ZORCH_ERR_ARG, "device: unknown device '%s' (expected cpu, cuda or cuda:N)",
                 name);
}

void zorch_device_name(zorch_device dev, char *buf, size_t n) {
  if (dev.type == ZORCH_CPU)
    snprintf(buf, n, "cpu");
  else
    snprintf(buf, n, "cuda:%d", dev.index);
}

bool zorch_device_available(zorch_device dev) {
  if (dev.type == ZORCH_CPU) return dev.index == 0;
  CUDA_INIT();
  if (dev.type != ZORCH_CUDA || !backends[ZORCH_CUDA] || !device_cuda_count) return false;
  return dev.index >= 0 && dev.index < device_cuda_count();
}

#ifdef ZORCH_WITH_CUDA
bool zorch_cuda_built(void) { return true; }
#else
/* The CUDA entry points of a CPU-only build. */
static zorch_status no_cuda(void) {
  return err_set(ZORCH_ERR_DEVICE, "cuda: zorch was built without CUDA (build where nvcc is installed, or make CUDA=1)");
}
bool zorch_cuda_built(void) { return false; }
int zorch_cuda_device_count(void) { return 0; }
zorch_status zorch_cuda_memory_stats(int dev, zorch_cuda_memory *out) {
  (void)dev, (void)out;
  return no_cuda();
}
zorch_status zorch_cuda_empty_cache(int dev) {
  (void)dev;
  return no_cuda();
}
zorch_status zorch_cuda_synchronize(int dev) {
  (void)dev;
  return no_cuda();
}
void zorch_cuda_set_tf32(bool on) { (void)on; }
bool zorch_cuda_tf32(void) { return false; }
#endif
