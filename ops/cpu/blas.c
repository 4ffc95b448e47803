/* blas.c: loading OpenBLAS with the right kernel, and thread settings. */
#include "blas.h"
#include "dnnl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "zorch.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static blas_api api;
static char info[160] = "builtin (no BLAS library found)";
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* ISA tier of an OpenBLAS kernel name: 3 AVX-512, 2 AVX2, 1 anything older. */
static int core_tier(const char *name) {
  static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  static const char *const avx2[] = {"haswell", "zen", "skylake"};
  for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++)
    if (strcasecmp(name, avx512[i]) == 0) return 3;
  for (size_t i = 0; i < sizeof avx2 / sizeof avx2[0]; i++)
    if (strcasecmp(name, avx2[i]) == 0) return 2;
  return 1;
}

static char core_note[96] = "";

/* OpenBLAS reads OPENBLAS_CORETYPE when it loads. zorch names the best kernel the
   CPU runs, so an OpenBLAS too old to know the CPU does not fall back to its
   generic one, and raises a preset OPENBLAS_CORETYPE that is weaker than the CPU.
   ZORCH_BLAS_CORETYPE pins a kernel and wins over both. */
static void blas_choose_core(void) {
  const char *pin = getenv("ZORCH_BLAS_CORETYPE");
  if (pin && *pin) {
    setenv("OPENBLAS_CORETYPE", pin, 1);
    snprintf(core_note, sizeof core_note, " (pinned by ZORCH_BLAS_CORETYPE)");
    return;
  }
  const char *best = NULL;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    best = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    best = "Haswell";
#endif
  if (!best) return;
  const char *preset = getenv("OPENBLAS_CORETYPE");
  if (preset && *preset) {
    if (core_tier(preset) >= core_tier(best)) return;
    snprintf(core_note, sizeof core_note, " (raised from OPENBLAS_CORETYPE=%.32s)", preset);
  }
  setenv("OPENBLAS_CORETYPE", best, 1);
}

/* The OpenMP build of OpenBLAS comes first: it shares zorch's OpenMP thread
   pool, where the pthreads build keeps its own threads spinning after each call
   and fights the elementwise kernels for the cores. ZORCH_BLAS_LIB names a
   library to use instead. */
static void blas_load(void) {
  static const char *const names[] = {
      "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
      "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0",
      "libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  blas_choose_core();
  void *h = NULL;
  const char *which = getenv("ZORCH_BLAS_LIB");
  if (which && *which) h = dlopen(which, RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    which = names[i];
  }
  if (!h) return;
  api.sgemm = (blas_sgemm_fn)dlsym(h, "cblas_sgemm");
  api.dgemm = (blas_dgemm_fn)dlsym(h, "cblas_dgemm");
  api.set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  if (!api.sgemm || !api.dgemm) {
    api.sgemm = NULL;
    api.dgemm = NULL;
    return;
  }
  char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
  char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
  if (corename && config)
    snprintf(info, sizeof info, "%s, kernel %s%s", config(), corename(), core_note);
  else
    snprintf(info, sizeof info, "%s (CBLAS)", which);
  if (api.set_threads) api.set_threads(zorch_get_num_threads());
}

const blas_api *blas_get(void) {
  pthread_once(&once, blas_load);
  return &api;
}

/* OpenBLAS's line, then what runs the bf16 and float32 GEMMs (ops/cpu/dnnl.c). */
static char full_info[512];
static void blas_info_full(void) {
  blas_get();
  snprintf(full_info, sizeof full_info, "%s; bf16 GEMM: %s; fp32 GEMM: %s", info, dnnl_info(),
           dnnl_f32_info());
}

const char *zorch_blas_info(void) {
  static pthread_once_t full_once = PTHREAD_ONCE_INIT;
  pthread_once(&full_once, blas_info_full);
  return full_info;
}

static int num_threads = 0;

void zorch_set_num_threads(int n) {
  if (n > ZORCH_MAX_THREADS) n = ZORCH_MAX_THREADS;
  if (n <= 0) {
#ifdef _OPENMP
    n = omp_get_num_procs();
#else
    n = 1;
#endif
  }
  num_threads = n;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  const blas_api *b = blas_get();
  if (b->set_threads) b->set_threads(n);
}

int zorch_get_num_threads(void) {
  if (num_threads > 0) return num_threads;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
