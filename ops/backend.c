/* backend.c: the kernel backends by device type. The CPU's is built in; the
   CUDA backend starts on first use (it registers its kernels here and its
   allocator with the core). */
#include "backend.h"

#include <string.h>

static const backend *backends[ZORCH_NDEVICE_TYPES] = {&cpu_backend, NULL};

#ifdef ZORCH_WITH_CUDA
#include <pthread.h>
void cuda_backend_init(void); /* ops/cuda/runtime.cu */
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

bool zorch_device_available(zorch_device dev) {
  if (!backend_get(dev.type)) return false;
  const device_mem *m = device_mem_get(dev.type);
  return m && dev.index >= 0 && dev.index < m->count();
}

zorch_status backend_check_device(const char *op, zorch_device dev) {
  char name[32];
  if (zorch_device_available(dev)) return ZORCH_OK;
  zorch_device_name(dev, name, sizeof name);
  if (!backend_get(dev.type))
    return err_set(ZORCH_ERR_DEVICE, "%s: device %s: backend not built", op, name);
  const device_mem *m = device_mem_get(dev.type);
  int n = m ? m->count() : 0;
  return err_set(ZORCH_ERR_DEVICE, "%s: device %s: not available (%d CUDA device%s present)", op, name,
                 n, n == 1 ? "" : "s");
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
