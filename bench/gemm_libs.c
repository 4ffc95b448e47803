/* gemm_libs.c: the GEMM libraries side by side on zorch's shapes (the
   1024-4096-1024 MLP at batch 256, forward and backward, the transformer
   block's at 2048 rows, and 1024^3), float32 and bf16: zorch_matmul through
   the library zorch picked (zorch_blas_info: oneDNN 2.x, or a 3.x named by
   ZORCH_DNNL_LIB), and MKL's cblas_sgemm and cblas_gemm_bf16bf16f32 (float32
   out) where libmkl_rt loads (MKL_LIB, else libmkl_rt.so.2 or .so.3 on the
   loader's path; PyPI's mkl puts it under Python's prefix). Prints each
   product's best of at least 3 calls and 0.3 s in GFLOP/s, as JSON lines.
   Usage: gemm_libs THREADS */
#define BENCH_NAME "gemm_libs"
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "timing.h"

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*bgemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int, const uint16_t *, int,
                         float, float *, int);

typedef struct {
  int64_t m, n, k;
  int ta, tb;
} prob;

static double best_of(void (*f)(void *), void *ctx) {
  double best = 1e30, t0 = clock_s(CLOCK_MONOTONIC);
  for (int it = 0; it < 3 || clock_s(CLOCK_MONOTONIC) - t0 < 0.3; it++) {
    double t1 = clock_s(CLOCK_MONOTONIC);
    f(ctx);
    double d = clock_s(CLOCK_MONOTONIC) - t1;
    if (d < best) best = d;
  }
  return best;
}

typedef struct {
  zorch_tensor *a, *b;
} zctx;
static void run_zorch(void *p) {
  zctx *c = p;
  zorch_tensor *r = zorch_matmul(c->a, c->b);
  check(r);
  zorch_tensor_free(r);
}

typedef struct {
  const prob *p;
  sgemm_fn s;
  bgemm_fn bf;
  const void *a, *b;
  float *c;
} mctx;
static void run_mkl(void *v) {
  mctx *c = v;
  const prob *p = c->p;
  int lda = (int)(p->ta ? p->m : p->k), ldb = (int)(p->tb ? p->k : p->n);
  int ta = p->ta ? 112 : 111, tb = p->tb ? 112 : 111; /* CblasTrans, CblasNoTrans */
  if (c->s)
    c->s(101, ta, tb, (int)p->m, (int)p->n, (int)p->k, 1.f, c->a, lda, c->b, ldb, 0.f, c->c, (int)p->n);
  else
    c->bf(101, ta, tb, (int)p->m, (int)p->n, (int)p->k, 1.f, c->a, lda, c->b, ldb, 0.f, c->c, (int)p->n);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  zorch_set_num_threads(threads);
  zorch_device cpu = {ZORCH_CPU, 0};
  zorch_generator *g = zorch_generator_new(5);
  static const prob probs[] = {
      {1024, 1024, 1024, 0, 0},                                                     /* 1024^3 */
      {256, 4096, 1024, 0, 1}, {256, 1024, 4096, 0, 1},                             /* MLP forward */
      {256, 4096, 1024, 0, 0}, {4096, 1024, 256, 1, 0}, {1024, 4096, 256, 1, 0},    /* MLP backward */
      {2048, 768, 256, 0, 1}, {2048, 256, 1024, 0, 1}, {256, 768, 2048, 1, 0}};     /* block */
  const char *lib = getenv("MKL_LIB");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib && !(h = dlopen("libmkl_rt.so.2", RTLD_NOW | RTLD_LOCAL))) h = dlopen("libmkl_rt.so.3", RTLD_NOW | RTLD_LOCAL);
  sgemm_fn msg = h ? (sgemm_fn)dlsym(h, "cblas_sgemm") : NULL;
  bgemm_fn mbg = h ? (bgemm_fn)dlsym(h, "cblas_gemm_bf16bf16f32") : NULL;
  void (*mkl_threads)(int) = h ? (void (*)(int))dlsym(h, "MKL_Set_Num_Threads") : NULL;
  if (mkl_threads) mkl_threads(threads);
  printf("{\"zorch\": \"%s\", \"mkl\": \"%s\"}\n", zorch_blas_info(), msg ? "loaded" : "not found");
  for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
    const prob *p = &probs[i];
    double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
    for (int bf = 0; bf < 2; bf++) {
      zorch_dtype dt = bf ? ZORCH_BF16 : ZORCH_F32;
      /* stored as the BLAS call reads them: A (m, k) or its transpose (k, m) */
      zorch_tensor *as = p->ta ? zorch_randn(SHAPE(p->k, p->m), dt, cpu, g) : zorch_randn(SHAPE(p->m, p->k), dt, cpu, g);
      zorch_tensor *bs = p->tb ? zorch_randn(SHAPE(p->n, p->k), dt, cpu, g) : zorch_randn(SHAPE(p->k, p->n), dt, cpu, g);
      check(as), check(bs);
      zctx z = {p->ta ? zorch_transpose(as, 0, 1) : zorch_tensor_retain(as),
                p->tb ? zorch_transpose(bs, 0, 1) : zorch_tensor_retain(bs)};
      double tz = best_of(run_zorch, &z), tm = 0;
      if (bf ? mbg != NULL : msg != NULL) {
        float *c = malloc(sizeof(float) * (size_t)(p->m * p->n));
        check(c);
        mctx m = {p, bf ? NULL : msg, bf ? mbg : NULL, zorch_tensor_data(as), zorch_tensor_data(bs), c};
        tm = best_of(run_mkl, &m);
        free(c);
      }
      printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"ta\": %d, \"tb\": %d, \"dtype\": \"%s\", \"threads\": %d, "
             "\"zorch_gflops\": %.1f, \"mkl_gflops\": %.1f}\n",
             (long long)p->m, (long long)p->n, (long long)p->k, p->ta, p->tb, bf ? "bf16" : "f32", threads,
             flops / tz / 1e9, tm > 0 ? flops / tm / 1e9 : 0.0);
      zorch_tensor_free(z.a), zorch_tensor_free(z.b), zorch_tensor_free(as), zorch_tensor_free(bs);
    }
  }
  zorch_generator_free(g);
  return 0;
}
