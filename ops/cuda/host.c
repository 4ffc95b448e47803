/* host.c: the CUDA module's side of ops/cuda/module.h. The module's code calls
   a few core functions by name (err_set, shape_numel, ...); they are defined
   here and forward to the core's through the table it lent at open, so the
   module has no undefined zorch symbols and binds to nothing in the process.
   (ops/core/dtype.c, which holds only constant tables, is linked in as it is.)
   The module's entry point (runtime.cu) attaches the core's table first. */
#include <stdio.h>

#include "module.h"

static const cuda_host *H;

zorch_status err_set(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->err_setv(code, fmt, ap);
  va_end(ap);
  return code;
}

void *err_null(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->err_setv(code, fmt, ap);
  va_end(ap);
  return NULL;
}

void err_prefix(const char *op) { H->err_prefix(op); }
zorch_status zorch_last_status(void) { return H->last_status(); }
int64_t shape_numel(int ndim, const int64_t *shape) { return H->shape_numel(ndim, shape); }
int64_t zorch_tensor_numel(const zorch_tensor *t) { return H->tensor_numel(t); }
bool zorch_tensor_is_contiguous(const zorch_tensor *t) { return H->tensor_is_contiguous(t); }
bool cu_tf32(void) { return H->tf32(); }

bool cu_host_attach(const cuda_host *host, char *why, size_t n) {
  if (!host || host->abi != ZORCH_CUDA_MODULE_ABI || host->size != sizeof(cuda_host) ||
      host->backend_size != sizeof(backend) || host->device_mem_size != sizeof(device_mem)) {
    snprintf(why, n, "it was built for another zorch (module ABI %d, the library's %d)", ZORCH_CUDA_MODULE_ABI,
             host ? host->abi : -1);
    return false;
  }
  H = host;
  return true;
}
