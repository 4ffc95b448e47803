/* dnnl.c: the oneDNN loader and its matmul, for bf16 and float32. oneDNN's
   matmul primitive reads and writes bf16 itself and runs its brgemm kernels on
   AVX512-BF16 (and AMX where present); it is about twice OpenBLAS's float32
   GEMM at zorch's shapes. In float32 its brgemm kernel beats OpenBLAS's by a
   few per cent on the large GEMMs (docs/performance.md). Primitives are built
   once per problem and kept. */
#include "dnnl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<dnnl.h>)
#include <dnnl.h>
#endif
#endif

#ifdef _OPENMP
#include <omp.h>
#define THREADS() omp_get_max_threads() /* what oneDNN's OpenMP build reads */
#else
#define THREADS() 1
#endif

static char info[320] = "none (built without oneDNN's headers)";
static char f32_info[160] = "OpenBLAS (built without oneDNN's headers)";

#if defined(DNNL_VERSION_MAJOR) && DNNL_VERSION_MAJOR == 2

/* The entry points, typed from the header they were built against (2.x):
   those 2.x and 3.x share, and those of 2.x's descriptors. */
#define DNNL_FNS(X)                                                                    \
  X(dnnl_version) X(dnnl_engine_create) X(dnnl_stream_create)                           \
  X(dnnl_primitive_desc_destroy)                                                        \
  X(dnnl_primitive_desc_query) X(dnnl_primitive_create) X(dnnl_primitive_execute)       \
  X(dnnl_primitive_destroy) X(dnnl_memory_create) X(dnnl_memory_destroy)            \
  X(dnnl_stream_wait)
#define DNNL2_FNS(X) X(dnnl_memory_desc_init_by_strides) X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create)
#define DECL(f) static __typeof__(&f) p_##f;
DNNL_FNS(DECL)
DNNL2_FNS(DECL)

/* oneDNN 3.x (a newer build than Debian 12's 2.6, e.g. PyPI's
   onednn-cpu-gomp) keeps the rest of the C API and every enum value used here,
   but makes memory descriptors opaque handles and a matmul's primitive
   descriptor in one call. Those three entry points are declared by hand; a
   3.x handle goes where 2.x takes a pointer to its descriptor struct. */
typedef void *md3_t;
static dnnl_status_t (*p3_md_create)(md3_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                     const dnnl_dims_t strides);
static dnnl_status_t (*p3_md_destroy)(md3_t md);
static dnnl_status_t (*p3_matmul_pd)(dnnl_primitive_desc_t *pd, dnnl_engine_t engine, md3_t src, md3_t weights,
                                     md3_t bias, md3_t dst, const_dnnl_primitive_attr_t attr);
static int major; /* of the oneDNN loaded: 2 or 3 */

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static bool ready, f32_ready, f32_forced;
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* One problem at a time: the cache, and oneDNN's shared scratchpad. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A primitive splits its work for the thread count it was built under, so the
   count is part of the key: ta, tb, m, n, k, lda, ldb, ldc, bias, threads,
   float32 (else bf16). */
#define KEY_N 11
typedef struct {
  int64_t key[KEY_N];
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[4]; /* a, b, c, bias (2.x) */
  md3_t md3[4];             /* the same (3.x) */
} cached;
#define CACHE_N 64
static cached cache[CACHE_N];
static int cache_used, cache_next;

/* What a cache entry holds: its primitive and (3.x) its descriptors. */
static void entry_free(cached *e) {
  if (e->prim) p_dnnl_primitive_destroy(e->prim);
  for (int i = 0; i < 4; i++)
    if (e->md3[i]) p3_md_destroy(e->md3[i]);
  memset(e, 0, sizeof *e);
}

/* The operand descriptors (a, b, c, bias) and the matmul's primitive
   descriptor, through the API of the oneDNN loaded. */
static bool describe(cached *e, const dnnl_dims_t *dims, const dnnl_dims_t *strides, dnnl_data_type_t dt,
                     bool bias, dnnl_primitive_desc_t *pd) {
  if (major == 3) {
    for (int i = 0; i < 4; i++)
      if (p3_md_create(&e->md3[i], 2, dims[i], dt, strides[i])) return false;
    return p3_matmul_pd(pd, engine, e->md3[0], e->md3[1], bias ? e->md3[3] : NULL, e->md3[2], NULL) == dnnl_success;
  }
  for (int i = 0; i < 4; i++)
    if (p_dnnl_memory_desc_init_by_strides(&e->md[i], 2, dims[i], dt, strides[i])) return false;
  dnnl_matmul_desc_t md;
  return !p_dnnl_matmul_desc_init(&md, &e->md[0], &e->md[1], bias ? &e->md[3] : NULL, &e->md[2]) &&
         !p_dnnl_primitive_desc_create(pd, &md, NULL, engine, NULL);
}

/* The primitive for one problem (its key) and its operands' descriptors in e;
   false (e empty) when oneDNN has none. Under `lock`. */
static bool build(const int64_t *key, cached *e, char *impl, size_t impl_n) {
  bool ta = key[0], tb = key[1], bias = key[8];
  dnnl_data_type_t dt = key[10] ? dnnl_f32 : dnnl_bf16;
  int64_t m = key[2], n = key[3], k = key[4], lda = key[5], ldb = key[6], ldc = key[7];
  const dnnl_dims_t dims[4] = {{m, k}, {k, n}, {m, n}, {1, n}};
  const dnnl_dims_t strides[4] = {{ta ? 1 : lda, ta ? lda : 1}, {tb ? 1 : ldb, tb ? ldb : 1}, {ldc, 1}, {n, 1}};
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  memset(e, 0, sizeof *e);
  if (!describe(e, dims, strides, dt, bias, &pd)) {
    if (pd) p_dnnl_primitive_desc_destroy(pd);
    entry_free(e);
    return false;
  }
  const char *name = NULL;
  if (p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) || !name) name = "?";
  if (impl) snprintf(impl, impl_n, "%s", name);
  /* the reference kernel is slower than converting to float32 (or OpenBLAS) */
  if (strncmp(name, "ref", 3) != 0 && p_dnnl_primitive_create(&prim, pd)) prim = NULL;
  p_dnnl_primitive_desc_destroy(pd);
  if (!prim) {
    entry_free(e);
    return false;
  }
  memcpy(e->key, key, sizeof e->key);
  e->prim = prim;
  return true;
}

/* Float32 GEMMs go to oneDNN where its kernel is a brgemm one (not the
   reference loop) and ZORCH_SGEMM does not say "blas"; "dnnl" asks for it,
   for every size. */
static void f32_load(const dnnl_version_t *v, int64_t *key) {
  const char *want = getenv("ZORCH_SGEMM");
  bool blas = want && strcmp(want, "blas") == 0, forced = want && strcmp(want, "dnnl") == 0;
  if (blas) {
    snprintf(f32_info, sizeof f32_info, "OpenBLAS (ZORCH_SGEMM=blas)");
    return;
  }
  char impl[48] = "none";
  key[10] = 1;
  bool probe = build(key, &cache[cache_used], impl, sizeof impl);
  f32_ready = probe && (forced || strncmp(impl, "brg", 3) == 0);
  f32_forced = forced;
  if (probe) cache_used++;
  snprintf(f32_info, sizeof f32_info, "%s (oneDNN %d.%d.%d matmul, kernel %s)%s",
           f32_ready ? "oneDNN" : "OpenBLAS", v->major, v->minor, v->patch, impl,
           f32_ready ? (forced ? " (ZORCH_SGEMM=dnnl)" : "") : " (not used)");
}

/* ZORCH_DNNL_LIB names the library to load; otherwise a 3.x found by the
   loader's search (LD_LIBRARY_PATH, ldconfig) goes before Debian's 2.x. */
static void *open_dnnl(char *note, size_t note_n) {
  const char *want = getenv("ZORCH_DNNL_LIB");
  note[0] = 0;
  if (want && want[0]) {
    void *h = dlopen(want, RTLD_NOW | RTLD_LOCAL);
    if (h && dlsym(h, "dnnl_version")) return h;
    if (h) dlclose(h);
    snprintf(note, note_n, "; ZORCH_DNNL_LIB=%s %s", want, h ? "is not oneDNN" : "did not load");
  }
  void *h = dlopen("libdnnl.so.3", RTLD_NOW | RTLD_LOCAL);
  return h ? h : dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
}

static void load(void) {
  const char *env = getenv("ZORCH_DNNL");
  if (env && strcmp(env, "0") == 0) {
    snprintf(info, sizeof info, "off (ZORCH_DNNL=0)");
    snprintf(f32_info, sizeof f32_info, "OpenBLAS (oneDNN off: ZORCH_DNNL=0)");
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  /* LeakSanitizer's exit scan crashes on oneDNN's threads: sanitizer builds
     test the float32 path unless ZORCH_DNNL=1 asks for oneDNN */
  if (!env || strcmp(env, "1") != 0) {
    snprintf(info, sizeof info, "off (sanitizer build; ZORCH_DNNL=1 loads oneDNN)");
    snprintf(f32_info, sizeof f32_info, "OpenBLAS (oneDNN off in a sanitizer build)");
    return;
  }
#endif
  char note[200];
  void *h = open_dnnl(note, sizeof note);
  if (!h) {
    snprintf(info, sizeof info, "none (neither libdnnl.so.3 nor libdnnl.so.2 found%s)", note);
    snprintf(f32_info, sizeof f32_info, "OpenBLAS (no oneDNN found)");
    return;
  }
  snprintf(f32_info, sizeof f32_info, "OpenBLAS (oneDNN could not be set up)");
  snprintf(info, sizeof info, "none (the oneDNN found lacks entry points zorch uses%s)", note);
#define LOAD(f) p_##f = (__typeof__(&f))dlsym(h, #f); if (!p_##f) return;
  DNNL_FNS(LOAD)
  const dnnl_version_t *v = p_dnnl_version();
  major = v->major;
  snprintf(info, sizeof info, "none (oneDNN %d.%d could not be set up%s)", v->major, v->minor, note);
  if (major == 2) {
    DNNL2_FNS(LOAD)
  } else if (major == 3) {
    p3_md_create = (__typeof__(p3_md_create))dlsym(h, "dnnl_memory_desc_create_with_strides");
    p3_md_destroy = (__typeof__(p3_md_destroy))dlsym(h, "dnnl_memory_desc_destroy");
    p3_matmul_pd = (__typeof__(p3_matmul_pd))dlsym(h, "dnnl_matmul_primitive_desc_create");
    if (!p3_md_create || !p3_md_destroy || !p3_matmul_pd) return;
  } else {
    snprintf(info, sizeof info, "none (oneDNN %d.%d: zorch knows 2.x and 3.x)", v->major, v->minor);
    return;
  }
#undef LOAD
  if (p_dnnl_engine_create(&engine, dnnl_cpu, 0) ||
      p_dnnl_stream_create(&stream, engine, dnnl_stream_default_flags))
    return;
  /* probe problems name the kernels oneDNN picks on this CPU */
  char impl[48] = "none";
  int64_t key[KEY_N] = {0, 0, 64, 64, 64, 64, 64, 64, 0, THREADS(), 0};
  bool probe = build(key, &cache[cache_used], impl, sizeof impl);
  snprintf(info, sizeof info, "oneDNN %d.%d.%d matmul, kernel %s%s%s", v->major, v->minor,
           v->patch, impl, probe ? "" : " (not used)", note);
  if (probe) cache_used++, ready = true;
  f32_load(v, key);
  cache_next = cache_used;
}

bool dnnl_bf16_ready(void) {
  pthread_once(&once, load);
  return ready;
}

bool dnnl_f32_ready(void) {
  pthread_once(&once, load);
  return f32_ready;
}

/* One matmul of either dtype, through the cache. It runs under the cache's
   lock (an entry may be replaced by another thread's shape), so callers inside
   a parallel region (the convolution's images) take BLAS instead: through
   here the two threads of the Fashion-MNIST CNN's backward ran one at a time. */
static bool matmul(bool f32, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                   int64_t lda, const void *b, int64_t ldb, const void *bias, void *c,
                   int64_t ldc) {
  int64_t key[KEY_N] = {ta, tb, m, n, k, lda, ldb, ldc, bias != NULL, THREADS(), f32};
  pthread_mutex_lock(&lock);
  cached *e = NULL;
  for (int i = 0; i < cache_used && !e; i++)
    if (memcmp(cache[i].key, key, sizeof key) == 0) e = &cache[i];
  if (!e) {
    /* round robin: zorch's models use a few dozen shapes at most */
    cached fresh;
    if (build(key, &fresh, NULL, 0)) {
      e = &cache[cache_next];
      if (cache_used == CACHE_N) entry_free(e);
      *e = fresh;
      cache_next = (cache_next + 1) % CACHE_N;
      if (cache_used < CACHE_N) cache_used++;
    }
  }
  bool ok = false;
  dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
  void *ptr[4] = {(void *)a, (void *)b, c, (void *)bias};
  int nargs = bias ? 4 : 3;
  if (e) {
    ok = true;
    for (int i = 0; i < nargs && ok; i++) {
      const dnnl_memory_desc_t *md = major == 3 ? (const dnnl_memory_desc_t *)e->md3[i] : &e->md[i];
      ok = p_dnnl_memory_create(&mem[i], md, engine, ptr[i]) == dnnl_success;
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                               {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_BIAS, mem[3]}};
    ok = ok && p_dnnl_primitive_execute(e->prim, stream, nargs, args) == dnnl_success &&
         p_dnnl_stream_wait(stream) == dnnl_success;
    for (int i = 0; i < nargs; i++)
      if (mem[i]) p_dnnl_memory_destroy(mem[i]);
  }
  pthread_mutex_unlock(&lock);
  return ok;
}

bool dnnl_bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                    int64_t lda, const uint16_t *b, int64_t ldb, const uint16_t *bias,
                    uint16_t *c, int64_t ldc) {
  return dnnl_bf16_ready() && !omp_in_parallel() && matmul(false, ta, tb, m, n, k, a, lda, b, ldb, bias, c, ldc);
}

/* Below this many multiply-adds a float32 GEMM stays on OpenBLAS: oneDNN's
   gain there is nil, and building a primitive for a new shape costs some
   250 us (docs/performance.md), which only larger GEMMs pay back. */
#define F32_MIN_MACS (1 << 21)

bool dnnl_f32_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                   int64_t lda, const float *b, int64_t ldb, const float *bias, float *c,
                   int64_t ldc) {
  if (!dnnl_f32_ready() || (!f32_forced && (double)m * (double)n * (double)k < F32_MIN_MACS) || omp_in_parallel())
    return false;
  return matmul(true, ta, tb, m, n, k, a, lda, b, ldb, bias, c, ldc);
}

#else /* no oneDNN 2.x headers at build time */

bool dnnl_bf16_ready(void) { return false; }

bool dnnl_bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                    int64_t lda, const uint16_t *b, int64_t ldb, const uint16_t *bias,
                    uint16_t *c, int64_t ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)bias, (void)c, (void)ldc;
  return false;
}

bool dnnl_f32_ready(void) { return false; }

bool dnnl_f32_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                   int64_t lda, const float *b, int64_t ldb, const float *bias, float *c,
                   int64_t ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)bias, (void)c, (void)ldc;
  return false;
}
#endif

const char *dnnl_info(void) {
  dnnl_bf16_ready();
  return info;
}

const char *dnnl_f32_info(void) {
  dnnl_bf16_ready();
  return f32_info;
}
