/* bench.c: zorch's benchmarks, one JSON object per line ({"name", "value",
   "unit"}); bench/torch_bench.py prints the same figures for PyTorch. Each
   figure is the best of several timed rounds. The GPU cases (cuda_*) run when
   a CUDA device is present; `bench --gpu` runs only those. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zorch.h"

static const zorch_device CPU = {ZORCH_CPU, 0}, GPU = {ZORCH_CUDA, 0};
static bool on_gpu; /* time_it waits for the device around each round */
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef void (*bench_fn)(void *ctx);

static void sync(void) {
  if (on_gpu && zorch_cuda_synchronize(0)) {
    fprintf(stderr, "bench: %s\n", zorch_last_error());
    exit(1);
  }
}

/* Seconds per call: best of 5 rounds, each at least `min_s` long. */
static double time_it(bench_fn f, void *ctx, double min_s) {
  f(ctx);
  sync();
  long reps = 1;
  for (;;) {
    double t0 = now();
    for (long i = 0; i < reps; i++) f(ctx);
    sync();
    double dt = now() - t0;
    if (dt >= min_s) break;
    reps *= dt > 0 ? (long)(min_s / dt * 1.2) + 1 : 10;
  }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    for (long i = 0; i < reps; i++) f(ctx);
    sync();
    double per = (now() - t0) / (double)reps;
    if (per < best) best = per;
  }
  return best;
}

static void emit(const char *name, double value, const char *unit) {
  printf("{\"name\": \"zorch/%s\", \"value\": %.4g, \"unit\": \"%s\"}\n", name, value, unit);
  fflush(stdout);
}

static void check(const void *p) {
  if (!p) {
    fprintf(stderr, "bench: %s\n", zorch_last_error());
    exit(1);
  }
}

typedef struct {
  zorch_tensor *a, *b;
} pair;

static void run_matmul(void *ctx) {
  pair *p = ctx;
  zorch_tensor *c = zorch_matmul(p->a, p->b);
  check(c);
  zorch_tensor_free(c);
}

static void run_add(void *ctx) {
  pair *p = ctx;
  zorch_tensor *c = zorch_add(p->a, p->b);
  check(c);
  zorch_tensor_free(c);
}

static void run_relu(void *ctx) {
  pair *p = ctx;
  zorch_tensor *c = zorch_relu(p->a);
  check(c);
  zorch_tensor_free(c);
}

/* A two-layer MLP step: forward, MSE loss, backward (no optimizer). */
typedef struct {
  zorch_tensor *x, *y, *w1, *b1, *w2, *b2;
  zorch_tensor *m[4], *v[4];
  int64_t step;
  bool adam;
} mlp;

static void run_mlp(void *ctx) {
  mlp *m = ctx;
  zorch_tensor *h = zorch_linear(m->x, m->w1, m->b1), *r = zorch_relu(h);
  zorch_tensor *o = zorch_linear(r, m->w2, m->b2);
  zorch_tensor *l = zorch_mse_loss(o, m->y, ZORCH_REDUCE_MEAN);
  check(l);
  zorch_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
  for (int i = 0; i < 4; i++) zorch_set_grad(ps[i], NULL);
  if (zorch_backward(l, NULL, false)) check(NULL);
  if (m->adam) {
    zorch_adam_opts o = {.lr = 1.5e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    m->step++;
    for (int i = 0; i < 4; i++)
      if (zorch_adam_step(ps[i], zorch_grad(ps[i]), m->m[i], m->v[i], NULL, m->step, &o)) check(NULL);
  }
  zorch_tensor_free(h);
  zorch_tensor_free(r);
  zorch_tensor_free(o);
  zorch_tensor_free(l);
}

static void mlp_init_on(mlp *m, int64_t batch, int64_t in, int64_t hid, int64_t out, bool adam, zorch_dtype dt,
                        zorch_device dev) {
  memset(m, 0, sizeof *m);
  zorch_generator *g = zorch_generator_new(1);
  double s1 = 1 / sqrt((double)in), s2 = 1 / sqrt((double)hid); /* keeps 16-bit activations in range */
  check(m->x = zorch_randn(SHAPE(batch, in), dt, dev, g));
  check(m->y = zorch_randn(SHAPE(batch, out), dt, dev, g));
  zorch_tensor *w1 = zorch_randn(SHAPE(hid, in), dt, dev, g), *w2 = zorch_randn(SHAPE(out, hid), dt, dev, g);
  check(w1), check(w2);
  check(m->w1 = zorch_mul_scalar(w1, s1));
  check(m->w2 = zorch_mul_scalar(w2, s2));
  zorch_tensor_free(w1), zorch_tensor_free(w2);
  m->b1 = zorch_zeros(SHAPE(hid), dt, dev);
  m->b2 = zorch_zeros(SHAPE(out), dt, dev);
  zorch_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
  for (int i = 0; i < 4; i++) {
    zorch_set_requires_grad(ps[i], true);
    m->m[i] = zorch_zeros(zorch_tensor_ndim(ps[i]), zorch_tensor_shape(ps[i]), dt, dev);
    m->v[i] = zorch_zeros(zorch_tensor_ndim(ps[i]), zorch_tensor_shape(ps[i]), dt, dev);
  }
  m->adam = adam;
  zorch_generator_free(g);
}

static void mlp_init(mlp *m, int64_t batch, int64_t in, int64_t hid, int64_t out, bool adam) {
  mlp_init_on(m, batch, in, hid, out, adam, ZORCH_F32, CPU);
}

static void mlp_free(mlp *m) {
  zorch_tensor *all[] = {m->x, m->y, m->w1, m->b1, m->w2, m->b2};
  for (int i = 0; i < 6; i++) zorch_tensor_free(all[i]);
  for (int i = 0; i < 4; i++) {
    zorch_tensor_free(m->m[i]);
    zorch_tensor_free(m->v[i]);
  }
}

/* The GPU cases: GEMM throughput, the 4096-16384-4096 MLP step at batch 8192,
   and the reference job's step. */
/* Adam over a flat fp32 shard (the ZeRO engine's optimizer step on a CPU rank
   or an offloaded shard): params updated per second */
typedef struct {
  zorch_tensor *p, *g, *m, *v;
  int64_t step;
} adam_shard;

static void run_adam(void *ctx) {
  adam_shard *a = ctx;
  zorch_adam_opts o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = true};
  if (zorch_adam_step(a->p, a->g, a->m, a->v, NULL, ++a->step, &o)) check(NULL);
}

static void adam_benches(zorch_generator *g) {
  const int64_t n = 8 << 20;
  adam_shard a = {zorch_randn(SHAPE(n), ZORCH_F32, CPU, g), zorch_randn(SHAPE(n), ZORCH_F32, CPU, g),
                  zorch_zeros(SHAPE(n), ZORCH_F32, CPU), zorch_zeros(SHAPE(n), ZORCH_F32, CPU), 0};
  check(a.p), check(a.g), check(a.m), check(a.v);
  for (int threads = 1; threads <= 2; threads++) {
    char name[64];
    zorch_set_num_threads(threads);
    snprintf(name, sizeof name, "adamw_8m_t%d", threads);
    emit(name, (double)n / time_it(run_adam, &a, 0.5) / 1e6, "Mparams/s");
  }
  zorch_set_num_threads(2);
  zorch_tensor *fr[] = {a.p, a.g, a.m, a.v};
  for (int i = 0; i < 4; i++) zorch_tensor_free(fr[i]);
}

static void gpu_benches(void) {
  on_gpu = true;
  zorch_generator *g = zorch_generator_new(0);
  char name[64];
  for (int64_t n = 4096; n <= 8192; n *= 2) {
    zorch_dtype dts[2] = {ZORCH_F32, ZORCH_BF16};
    for (int k = 0; k < 2; k++) {
      pair mm = {zorch_randn(SHAPE(n, n), dts[k], GPU, g), zorch_randn(SHAPE(n, n), dts[k], GPU, g)};
      check(mm.a), check(mm.b);
      snprintf(name, sizeof name, "cuda_%s_%lld", k ? "bf16_gemm" : "sgemm", (long long)n);
      emit(name, 2.0 * n * n * n / time_it(run_matmul, &mm, 0.5) / 1e12, "TFLOP/s");
      if (k == 0 && n == 8192) { /* the TF32 opt-in, for comparison */
        zorch_cuda_set_tf32(true);
        emit("cuda_sgemm_tf32_8192", 2.0 * n * n * n / time_it(run_matmul, &mm, 0.5) / 1e12, "TFLOP/s");
        zorch_cuda_set_tf32(false);
      }
      zorch_tensor_free(mm.a), zorch_tensor_free(mm.b);
    }
  }
  /* forward and backward: 2 + 3 GEMMs of 2 * 8192 * 4096 * 16384 flops */
  zorch_dtype dts[2] = {ZORCH_F32, ZORCH_BF16};
  for (int k = 0; k < 2; k++) {
    mlp m;
    mlp_init_on(&m, 8192, 4096, 16384, 4096, false, dts[k], GPU);
    double t = time_it(run_mlp, &m, 1.0);
    snprintf(name, sizeof name, "cuda_mlp_4096_16384_4096_b8192_%s_ms", k ? "bf16" : "fp32");
    emit(name, t * 1e3, "ms");
    snprintf(name, sizeof name, "cuda_mlp_4096_16384_4096_b8192_%s", k ? "bf16" : "fp32");
    emit(name, 5 * 2.0 * 8192 * 4096 * 16384 / t / 1e12, "TFLOP/s");
    mlp_free(&m);
  }
  mlp m;
  mlp_init_on(&m, 64, 10, 20, 2, true, ZORCH_F32, GPU);
  emit("cuda_simplenet_step", time_it(run_mlp, &m, 0.3) * 1e6, "us");
  mlp_free(&m);
  zorch_generator_free(g);
  on_gpu = false;
}

int main(int argc, char **argv) {
  bool gpu_only = argc > 1 && strcmp(argv[1], "--gpu") == 0;
  if (argc > 1 && strcmp(argv[1], "--adam") == 0) { /* only the optimizer cases */
    zorch_generator *g = zorch_generator_new(0);
    adam_benches(g);
    zorch_generator_free(g);
    return 0;
  }
  if (zorch_cuda_device_count() > 0) gpu_benches();
  else if (gpu_only) fprintf(stderr, "bench: no CUDA device\n");
  if (gpu_only) return 0;
  zorch_set_num_threads(2);
  zorch_generator *g = zorch_generator_new(0);
  fprintf(stderr, "bench: BLAS %s, %d threads\n", zorch_blas_info(), zorch_get_num_threads());

  pair mm = {zorch_randn(SHAPE(1024, 1024), ZORCH_F32, CPU, g),
             zorch_randn(SHAPE(1024, 1024), ZORCH_F32, CPU, g)};
  double t = time_it(run_matmul, &mm, 0.5);
  emit("sgemm_1024", 2.0 * 1024 * 1024 * 1024 / t / 1e9, "GFLOP/s");

  pair small = {zorch_randn(SHAPE(64), ZORCH_F32, CPU, g), zorch_randn(SHAPE(64), ZORCH_F32, CPU, g)};
  emit("add_64", time_it(run_add, &small, 0.2) * 1e9, "ns");
  emit("relu_64", time_it(run_relu, &small, 0.2) * 1e9, "ns");

  pair big = {zorch_randn(SHAPE(1000000), ZORCH_F32, CPU, g),
              zorch_randn(SHAPE(1000000), ZORCH_F32, CPU, g)};
  emit("add_1m", time_it(run_add, &big, 0.3) * 1e6, "us");

  /* 1024-4096-1024 at batch 256: 2 forward GEMMs and 3 backward ones (the
     input needs no gradient), 2*256*1024*4096 flops each */
  mlp m;
  mlp_init(&m, 256, 1024, 4096, 1024, false);
  t = time_it(run_mlp, &m, 1.0);
  emit("mlp_1024_4096_1024_b256_fwd_bwd", 5 * 2.0 * 256 * 1024 * 4096 / t / 1e9, "GFLOP/s");
  mlp_free(&m);

  /* the reference job's step: 10-20-2, batch 64, MSE, Adam */
  mlp_init(&m, 64, 10, 20, 2, true);
  emit("simplenet_step", time_it(run_mlp, &m, 0.3) * 1e6, "us");
  mlp_free(&m);

  adam_benches(g);

  zorch_tensor *fr[] = {mm.a, mm.b, small.a, small.b, big.a, big.b};
  for (int i = 0; i < 6; i++) zorch_tensor_free(fr[i]);
  zorch_generator_free(g);
  return 0;
}
