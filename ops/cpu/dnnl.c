/* dnnl.c: the oneDNN loader and its bf16 matmul. oneDNN's matmul primitive reads
   and writes bf16 itself and runs its brgemm kernels on AVX512-BF16 (and AMX
   where present); it is about twice OpenBLAS's float32 GEMM at zorch's shapes
   (docs/performance.md). Primitives are built once per problem and kept. */
#include "dnnl.h"

#include "../backend.h"

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

static char info[128] = "none (built without oneDNN's headers)";

#if defined(DNNL_VERSION_MAJOR) && DNNL_VERSION_MAJOR == 2

/* The entry points, typed from the header they were built against. */
#define DNNL_FNS(X)                                                                    \
  X(dnnl_version) X(dnnl_engine_create) X(dnnl_stream_create)                           \
  X(dnnl_memory_desc_init_by_strides) X(dnnl_matmul_desc_init)                          \
  X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy)                          \
  X(dnnl_primitive_desc_query) X(dnnl_primitive_create) X(dnnl_primitive_execute)       \
  X(dnnl_primitive_destroy) X(dnnl_memory_create) X(dnnl_memory_destroy)            \
  X(dnnl_stream_wait) X(dnnl_memory_desc_init_by_tag)                                  \
  X(dnnl_dilated_convolution_forward_desc_init)                                        \
  X(dnnl_dilated_convolution_backward_data_desc_init)                                  \
  X(dnnl_dilated_convolution_backward_weights_desc_init)
#define DECL(f) static __typeof__(&f) p_##f;
DNNL_FNS(DECL)

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static bool ready, loaded; /* the bf16 matmul; oneDNN itself (the convolution) */
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* One problem at a time: the cache, and oneDNN's shared scratchpad. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A primitive splits its work for the thread count it was built under, so the
   count is part of the key: ta, tb, m, n, k, lda, ldb, ldc, bias, threads. */
#define KEY_N 10
typedef struct {
  int64_t key[KEY_N];
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[4]; /* a, b, c, bias */
} cached;
#define CACHE_N 64
static cached cache[CACHE_N];
static int cache_used, cache_next;

/* The primitive for one problem (its key) and its operands' descriptors in e;
   false when oneDNN has none. Under `lock`. */
static bool build(const int64_t *key, cached *e, char *impl, size_t impl_n) {
  bool ta = key[0], tb = key[1], bias = key[8];
  int64_t m = key[2], n = key[3], k = key[4], lda = key[5], ldb = key[6], ldc = key[7];
  dnnl_memory_desc_t *ma = &e->md[0], *mb = &e->md[1], *mc = &e->md[2], *mbias = &e->md[3];
  dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n}, dbias = {1, n};
  dnnl_dims_t sa = {ta ? 1 : lda, ta ? lda : 1}, sb = {tb ? 1 : ldb, tb ? ldb : 1},
              sc = {ldc, 1}, sbias = {n, 1};
  if (p_dnnl_memory_desc_init_by_strides(ma, 2, da, dnnl_bf16, sa) ||
      p_dnnl_memory_desc_init_by_strides(mb, 2, db, dnnl_bf16, sb) ||
      p_dnnl_memory_desc_init_by_strides(mc, 2, dc, dnnl_bf16, sc) ||
      p_dnnl_memory_desc_init_by_strides(mbias, 2, dbias, dnnl_bf16, sbias))
    return false;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  if (p_dnnl_matmul_desc_init(&md, ma, mb, bias ? mbias : NULL, mc) ||
      p_dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL))
    return false;
  const char *name = NULL;
  if (p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) || !name) name = "?";
  if (impl) snprintf(impl, impl_n, "%s", name);
  /* the reference kernel is slower than converting to float32 */
  if (strncmp(name, "ref", 3) != 0 && p_dnnl_primitive_create(&prim, pd)) prim = NULL;
  p_dnnl_primitive_desc_destroy(pd);
  memcpy(e->key, key, sizeof e->key);
  e->prim = prim;
  return prim != NULL;
}

static void load(void) {
  const char *env = getenv("ZORCH_DNNL");
  if (env && strcmp(env, "0") == 0) {
    snprintf(info, sizeof info, "off (ZORCH_DNNL=0)");
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  /* LeakSanitizer's exit scan crashes on oneDNN's threads: sanitizer builds
     test the float32 path unless ZORCH_DNNL=1 asks for oneDNN */
  if (!env || strcmp(env, "1") != 0) {
    snprintf(info, sizeof info, "off (sanitizer build; ZORCH_DNNL=1 loads oneDNN)");
    return;
  }
#endif
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(info, sizeof info, "none (libdnnl.so.2 not found)");
    return;
  }
#define LOAD(f) p_##f = (__typeof__(&f))dlsym(h, #f); if (!p_##f) return;
  DNNL_FNS(LOAD)
#undef LOAD
  const dnnl_version_t *v = p_dnnl_version();
  if (v->major != DNNL_VERSION_MAJOR) {
    snprintf(info, sizeof info, "none (oneDNN %d.%d, built for %d.x)", v->major, v->minor,
             DNNL_VERSION_MAJOR);
    return;
  }
  if (p_dnnl_engine_create(&engine, dnnl_cpu, 0) ||
      p_dnnl_stream_create(&stream, engine, dnnl_stream_default_flags))
    return;
  loaded = true;
  /* a probe problem names the kernel oneDNN picks on this CPU */
  char impl[48] = "none";
  int64_t key[KEY_N] = {0, 0, 64, 64, 64, 64, 64, 64, 0, THREADS()};
  bool probe = build(key, &cache[0], impl, sizeof impl);
  snprintf(info, sizeof info, "oneDNN %d.%d.%d matmul, kernel %s%s", v->major, v->minor,
           v->patch, impl, probe ? "" : " (not used)");
  if (!probe) return;
  cache_used = cache_next = 1;
  ready = true;
}

bool dnnl_bf16_ready(void) {
  pthread_once(&once, load);
  return ready;
}

bool dnnl_bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                    int64_t lda, const uint16_t *b, int64_t ldb, const uint16_t *bias,
                    uint16_t *c, int64_t ldc) {
  if (!dnnl_bf16_ready()) return false;
  int64_t key[KEY_N] = {ta, tb, m, n, k, lda, ldb, ldc, bias != NULL, THREADS()};
  pthread_mutex_lock(&lock);
  cached *e = NULL;
  for (int i = 0; i < cache_used && !e; i++)
    if (memcmp(cache[i].key, key, sizeof key) == 0) e = &cache[i];
  if (!e) {
    /* round robin: zorch's models use a few dozen shapes at most */
    cached fresh;
    if (build(key, &fresh, NULL, 0)) {
      e = &cache[cache_next];
      if (cache_used == CACHE_N) p_dnnl_primitive_destroy(e->prim);
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
    for (int i = 0; i < nargs && ok; i++)
      ok = p_dnnl_memory_create(&mem[i], &e->md[i], engine, ptr[i]) == dnnl_success;
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

/* ---- float32 convolution, one group, NCHW / OIHW as zorch holds them ---- */

/* Key: direction (0 forward, 1 backward to the data, 2 to the weights), bias,
   threads, then n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw. */
#define CKEY_N 18
typedef struct {
  int64_t key[CKEY_N];
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[4]; /* x, w, bias, y */
} conv_cached;
#define CCACHE_N 32
static conv_cached ccache[CCACHE_N];
static int ccache_used, ccache_next;

static bool conv_build(const int64_t *key, conv_cached *e) {
  memcpy(e->key, key, sizeof e->key);
  e->prim = NULL;
  int dir = (int)key[0];
  const int64_t *k = key + 3; /* n c h w o oh ow kh kw sh sw ph pw dh dw */
  int64_t n = k[0], c = k[1], h = k[2], w = k[3], o = k[4], oh = k[5], ow = k[6], kh = k[7], kw = k[8];
  int64_t sh = k[9], sw = k[10], ph = k[11], pw = k[12], dh = k[13], dw = k[14];
  /* right/bottom padding that makes oneDNN's output size zorch's (floor) */
  int64_t prh = (oh - 1) * sh + (kh - 1) * dh + 1 - h - ph, prw = (ow - 1) * sw + (kw - 1) * dw + 1 - w - pw;
  if (prh < 0 || prw < 0) return false;
  dnnl_dims_t dx = {n, c, h, w}, dwt = {o, c, kh, kw}, db = {o}, dy = {n, o, oh, ow};
  dnnl_dims_t st = {sh, sw}, dil = {dh - 1, dw - 1}, pl = {ph, pw}, pr = {prh, prw};
  dnnl_memory_desc_t *mx = &e->md[0], *mw = &e->md[1], *mb = &e->md[2], *my = &e->md[3];
  if (p_dnnl_memory_desc_init_by_tag(mx, 4, dx, dnnl_f32, dnnl_nchw) ||
      p_dnnl_memory_desc_init_by_tag(mw, 4, dwt, dnnl_f32, dnnl_oihw) ||
      p_dnnl_memory_desc_init_by_tag(mb, 1, db, dnnl_f32, dnnl_x) ||
      p_dnnl_memory_desc_init_by_tag(my, 4, dy, dnnl_f32, dnnl_nchw))
    return false;
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  bool ok = p_dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, mx,
                                                         mw, key[1] ? mb : NULL, my, st, dil, pl, pr) == 0 &&
            p_dnnl_primitive_desc_create(&fpd, &fd, NULL, engine, NULL) == 0;
  if (ok && dir == 0) pd = fpd, fpd = NULL;
  else if (ok && dir == 1)
    ok = p_dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, mx, mw, my, st, dil, pl,
                                                            pr) == 0 &&
         p_dnnl_primitive_desc_create(&pd, &bd, NULL, engine, fpd) == 0;
  else if (ok)
    ok = p_dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, mx, mw, NULL, my, st,
                                                               dil, pl, pr) == 0 &&
         p_dnnl_primitive_desc_create(&pd, &bd, NULL, engine, fpd) == 0;
  if (fpd) p_dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_t prim = NULL;
  const char *name = NULL;
  if (ok && (p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) || !name)) name = "ref";
  /* the reference kernels are slower than im2col and OpenBLAS */
  if (ok && strncmp(name, "ref", 3) != 0 && p_dnnl_primitive_create(&prim, pd)) prim = NULL;
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  e->prim = prim;
  return prim != NULL;
}

/* Runs one direction; args in md order (x, w, bias, y), NULL where unused. */
static bool conv_run(int dir, const conv_geom *g, int64_t o, bool bias, void *x, void *w, void *b, void *y) {
  pthread_once(&once, load);
  if (!loaded) return false;
  int64_t key[CKEY_N] = {dir, bias, THREADS(), g->n, g->c, g->h, g->w, o, g->oh, g->ow,
                         g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
  pthread_mutex_lock(&lock);
  conv_cached *e = NULL;
  for (int i = 0; i < ccache_used && !e; i++)
    if (memcmp(ccache[i].key, key, sizeof key) == 0) e = &ccache[i];
  if (!e) {
    /* a refusal is kept too (prim NULL): asking oneDNN again costs more than the convolution */
    conv_cached fresh;
    conv_build(key, &fresh);
    e = &ccache[ccache_next];
    if (ccache_used == CCACHE_N && e->prim) p_dnnl_primitive_destroy(e->prim);
    *e = fresh;
    ccache_next = (ccache_next + 1) % CCACHE_N;
    if (ccache_used < CCACHE_N) ccache_used++;
  }
  bool ok = e->prim != NULL;
  void *ptr[4] = {x, w, b, y};
  static const int fwd_args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  static const int bwd_data_args[4] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, 0, DNNL_ARG_DIFF_DST};
  static const int bwd_w_args[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, 0, DNNL_ARG_DIFF_DST};
  const int *names = dir == 0 ? fwd_args : dir == 1 ? bwd_data_args : bwd_w_args;
  dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
  dnnl_exec_arg_t args[4];
  int nargs = 0;
  for (int i = 0; i < 4 && ok; i++) {
    if (!ptr[i] || !names[i]) continue;
    ok = p_dnnl_memory_create(&mem[i], &e->md[i], engine, ptr[i]) == dnnl_success;
    args[nargs].arg = names[i], args[nargs].memory = mem[i], nargs++;
  }
  ok = ok && p_dnnl_primitive_execute(e->prim, stream, nargs, args) == dnnl_success &&
       p_dnnl_stream_wait(stream) == dnnl_success;
  for (int i = 0; i < 4; i++)
    if (mem[i]) p_dnnl_memory_destroy(mem[i]);
  pthread_mutex_unlock(&lock);
  return ok;
}

bool dnnl_conv2d_f32(float *out, const float *x, const float *w, const float *b, int64_t o, const conv_geom *g) {
  return conv_run(0, g, o, b != NULL, (void *)x, (void *)w, (void *)b, out);
}

bool dnnl_conv2d_bwd_f32(float *gx, float *gw, const float *gout, const float *x, const float *w, int64_t o,
                         const conv_geom *g) {
  if (gx && !conv_run(1, g, o, false, gx, (void *)w, NULL, (void *)gout)) return false;
  return !gw || conv_run(2, g, o, false, (void *)x, gw, NULL, (void *)gout);
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
bool dnnl_conv2d_f32(float *out, const float *x, const float *w, const float *b, int64_t o, const conv_geom *g) {
  (void)out, (void)x, (void)w, (void)b, (void)o, (void)g;
  return false;
}

bool dnnl_conv2d_bwd_f32(float *gx, float *gw, const float *gout, const float *x, const float *w, int64_t o,
                         const conv_geom *g) {
  (void)gx, (void)gw, (void)gout, (void)x, (void)w, (void)o, (void)g;
  return false;
}
#endif

const char *dnnl_info(void) {
  dnnl_bf16_ready();
  return info;
}
