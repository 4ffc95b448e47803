/* cudamod.c: opens the CUDA module (libzorch_cuda.so, ops/cuda/module.h) with
   dlopen the first time a cuda device is asked for, and answers the public
   zorch_cuda_* functions. A CPU run never gets here, so it never maps cudart,
   cuBLAS, cuDNN or NCCL (a process that loaded them started at ~218 MiB
   resident instead of ~5). Without the module, without its CUDA libraries or
   without a GPU, cuda tensors are refused with the reason; nothing aborts.

   Where the module is looked for, first found wins:
   1. $ZORCH_CUDA_MODULE (a path; only there when it is set);
   2. beside the library or program that holds this code (build/libzorch.so,
      build/zorch, zorch.so in a Lua interpreter), then in ../lib and
      ../lib/lua/5.4 from there (bin/zorch installed by make install, or by
      LuaRocks, which puts the module beside zorch.so);
   3. the LIBDIR zorch was built for (make install's);
   4. the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig). */
#include "cudamod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#ifdef ZORCH_WITH_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "../cuda/module.h"

static const cuda_module *mod;
static void *mod_handle;
static char mod_path[PATH_MAX];
static char mod_why[PATH_MAX + 512] = "not opened yet (no cuda device was asked for)";
static char dev_why[sizeof mod_why + 64];
static pthread_once_t mod_once = PTHREAD_ONCE_INIT;

/* TF32 is the core's switch (it can be set before the module is open): -1 until
   ZORCH_ALLOW_TF32 was read. */
static _Atomic int tf32_state = -1;

bool zorch_cuda_tf32(void) {
  int v = atomic_load(&tf32_state);
  if (v < 0) {
    const char *e = getenv("ZORCH_ALLOW_TF32");
    int want = e && *e && *e != '0';
    int expect = -1;
    atomic_compare_exchange_strong(&tf32_state, &expect, want);
    v = atomic_load(&tf32_state);
  }
  return v == 1;
}
void zorch_cuda_set_tf32(bool on) { atomic_store(&tf32_state, on ? 1 : 0); }

static const cuda_host host = {
    .abi = ZORCH_CUDA_MODULE_ABI,
    .size = sizeof(cuda_host),
    .backend_size = sizeof(backend),
    .device_mem_size = sizeof(device_mem),
    .err_setv = err_setv,
    .err_prefix = err_prefix,
    .last_status = zorch_last_status,
    .shape_numel = shape_numel,
    .tensor_numel = zorch_tensor_numel,
    .tensor_is_contiguous = zorch_tensor_is_contiguous,
    .tf32 = zorch_cuda_tf32,
};

/* The directory of the library or program holding this code, into dir. */
static bool own_dir(char *dir, size_t n) {
  Dl_info info;
  char path[PATH_MAX];
  path[0] = 0;
  if (dladdr((void *)cuda_module_load, &info) && info.dli_fname && strstr(info.dli_fname, ".so") &&
      realpath(info.dli_fname, path)) {
    /* a shared library: libzorch.so, or zorch.so in a Lua interpreter */
  } else {
    ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1); /* linked into the program */
    if (k <= 0) return false;
    path[k] = 0;
  }
  char *slash = strrchr(path, '/');
  if (!slash) return false;
  *slash = 0;
  return snprintf(dir, n, "%s", path) < (int)n;
}

/* Opens path; on failure keeps dlerror's reason. */
static bool try_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(mod_why, sizeof mod_why, "%s", e ? e : path);
    return false;
  }
  cuda_module_entry entry = (cuda_module_entry)dlsym(h, ZORCH_CUDA_MODULE_ENTRY);
  char why[256] = "";
  const cuda_module *m = entry ? entry(&host, why, sizeof why) : NULL;
  if (m && (m->abi != ZORCH_CUDA_MODULE_ABI || m->size != sizeof(cuda_module) ||
            m->backend_size != sizeof(backend) || m->device_mem_size != sizeof(device_mem))) {
    snprintf(why, sizeof why, "it was built for another zorch (module ABI %d, the library's %d)", m->abi,
             ZORCH_CUDA_MODULE_ABI);
    m = NULL;
  }
  if (!m) {
    snprintf(mod_why, sizeof mod_why, "%s: %s", path, entry ? why : "not a zorch CUDA module (no " ZORCH_CUDA_MODULE_ENTRY ")");
    dlclose(h);
    return false;
  }
  mod = m;
  mod_handle = h;
  Dl_info info;
  if (!(dladdr((void *)entry, &info) && info.dli_fname && realpath(info.dli_fname, mod_path)))
    snprintf(mod_path, sizeof mod_path, "%s", path);
  return true;
}

static void load_once(void) {
  const char *env = getenv("ZORCH_CUDA_MODULE");
  if (env && *env) {
    try_open(env);
  } else {
    char dir[PATH_MAX], cand[4][PATH_MAX + 32];
    int nc = 0;
    if (own_dir(dir, sizeof dir)) {
      snprintf(cand[nc++], sizeof cand[0], "%s/" ZORCH_CUDA_MODULE_FILE, dir);
      snprintf(cand[nc++], sizeof cand[0], "%s/../lib/" ZORCH_CUDA_MODULE_FILE, dir);
      snprintf(cand[nc++], sizeof cand[0], "%s/../lib/lua/5.4/" ZORCH_CUDA_MODULE_FILE, dir);
    }
#ifdef ZORCH_LIBDIR
    snprintf(cand[nc++], sizeof cand[0], "%s/" ZORCH_CUDA_MODULE_FILE, ZORCH_LIBDIR);
#endif
    bool done = false;
    for (int i = 0; i < nc && !done; i++)
      if (access(cand[i], F_OK) == 0) {
        try_open(cand[i]); /* found: its failure (a missing CUDA library, say) is the reason */
        done = true;
      }
    /* by the loader's search; when that finds no file either, say where we looked
       (a file it found that fails keeps the loader's reason) */
    if (!done && !try_open(ZORCH_CUDA_MODULE_FILE) &&
        strncmp(mod_why, ZORCH_CUDA_MODULE_FILE ":", strlen(ZORCH_CUDA_MODULE_FILE ":")) == 0)
      snprintf(mod_why, sizeof mod_why,
               ZORCH_CUDA_MODULE_FILE " was not found beside %s, in its ../lib (or ../lib/lua/5.4), in the library path"
#ifdef ZORCH_LIBDIR
               " or in " ZORCH_LIBDIR
#endif
               " (ZORCH_CUDA_MODULE can name it)",
               nc ? dir : "the program");
  }
  if (!mod) {
    snprintf(dev_why, sizeof dev_why, "cuda: the CUDA module is not available: %s", mod_why);
    device_set_why(ZORCH_CUDA, dev_why);
    return;
  }
  mod_why[0] = 0;
  if (mod->device_count() == 0) device_set_why(ZORCH_CUDA, mod->no_device_reason());
  device_mem_register(ZORCH_CUDA, mod->mem);
  backend_register(ZORCH_CUDA, mod->backend);
}

bool cuda_module_load(void) {
  pthread_once(&mod_once, load_once);
  return mod != NULL;
}
const char *cuda_module_why(void) {
  return cuda_module_load() ? "" : mod_why;
}
void *cuda_module_symbol(const char *name) {
  return cuda_module_load() ? dlsym(mod_handle, name) : NULL;
}

void *cuda_host_alloc(size_t n) {
  void *p = NULL;
  if (!cuda_module_load() || mod->device_count() == 0) return NULL;
  if (mod->host_alloc(n, &p)) { /* (the caller falls back to ordinary memory) */
    zorch_clear_error();
    return NULL;
  }
  return p;
}
void cuda_host_free(void *p) {
  if (p && mod) mod->host_free(p);
}

static zorch_status not_loaded(void);
zorch_status cuda_copy_to_host_async(void *dst, const void *src, size_t n, int dev) {
  return cuda_module_load() ? mod->copy_to_host_async(dst, src, n, dev) : not_loaded();
}
zorch_status cuda_copy_wait(int dev) { return cuda_module_load() ? mod->copy_wait(dev) : not_loaded(); }

static zorch_status not_loaded(void) {
  return err_set(ZORCH_ERR_DEVICE, "cuda: the CUDA module is not available: %s", cuda_module_why());
}

bool zorch_cuda_built(void) { return true; }
int zorch_cuda_device_count(void) { return cuda_module_load() ? mod->device_count() : 0; }
zorch_status zorch_cuda_memory_stats(int dev, zorch_cuda_memory *out) {
  return cuda_module_load() ? mod->memory_stats(dev, out) : not_loaded();
}
zorch_status zorch_cuda_empty_cache(int dev) {
  return cuda_module_load() ? mod->empty_cache(dev) : not_loaded();
}
zorch_status zorch_cuda_synchronize(int dev) {
  return cuda_module_load() ? mod->synchronize(dev) : not_loaded();
}

const char *zorch_cuda_info(void) {
  static char text[PATH_MAX + 1024];
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  if (!mod) {
    snprintf(text, sizeof text, "module not loaded: %s", mod_why);
  } else {
    char what[512];
    int n = mod->device_count();
    mod->describe(what, sizeof what);
    snprintf(text, sizeof text, "module %s loaded (%s); %d device%s%s%s", mod_path, what, n, n == 1 ? "" : "s",
             n ? "" : ": ", n ? "" : mod->no_device_reason());
  }
  pthread_mutex_unlock(&lock);
  return text;
}
#else
/* The CUDA entry points of a CPU-only build; cuda tensors are refused with
   the same reason (registered once, on the first question about cuda). */
static const char no_cuda_why[] = "cuda: zorch was built without CUDA (build where nvcc is installed, or make CUDA=1)";
static zorch_status no_cuda(void) {
  return err_set(ZORCH_ERR_DEVICE, "%s", no_cuda_why);
}
bool cuda_module_load(void) {
  device_set_why(ZORCH_CUDA, no_cuda_why);
  return false;
}
const char *cuda_module_why(void) { return "zorch was built without CUDA"; }
void *cuda_module_symbol(const char *name) {
  (void)name;
  return NULL;
}
bool zorch_cuda_built(void) { return false; }
void *cuda_host_alloc(size_t n) {
  (void)n;
  return NULL;
}
void cuda_host_free(void *p) { (void)p; }
zorch_status cuda_copy_to_host_async(void *dst, const void *src, size_t n, int dev) {
  (void)dst, (void)src, (void)n, (void)dev;
  return no_cuda();
}
zorch_status cuda_copy_wait(int dev) {
  (void)dev;
  return no_cuda();
}
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
const char *zorch_cuda_info(void) { return "not built (no nvcc at build time, or make CUDA=0)"; }
#endif
