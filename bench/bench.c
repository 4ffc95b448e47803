/* bench.c: zorch's benchmarks, one JSON object per line ({"name", "value",
   "unit"}); bench/torch_bench.py prints the same figures for PyTorch. Each
   figure is the best of several timed rounds. The GPU cases (cuda_*) run when
   a CUDA device is present; `bench --gpu` runs only those, `bench --attention`
   only the CPU attention cases, `bench --conv` only the convolution cases,
   `bench --adam` only the optimizer cases, `bench --rope` only the rotary
   embedding cases, `bench --block [fp32|bf16] [threads]`
   only the transformer block, `bench --kernels` only the 1- and 2-thread kernel
   cases; `bench --serve` answers one case at a time (see serve() below). */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "zorch.h"

static const zorch_device CPU = {ZORCH_CPU, 0}, GPU = {ZORCH_CUDA, 0};
static bool on_gpu; /* time_it waits for the device around each round */
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* Wall time; process CPU time with BENCH_CPU_TIME=1 (on a shared machine the
   work done, which other jobs disturb less; it adds up every thread's time). */
static double now(void) {
  static int cpu = -1;
  if (cpu < 0) cpu = getenv("BENCH_CPU_TIME") && getenv("BENCH_CPU_TIME")[0] == '1';
  struct timespec t;
  clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
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

/* a transposed matrix made contiguous (ops/cpu/transpose.c) */
static void run_transpose(void *ctx) {
  pair *p = ctx;
  zorch_tensor *t = zorch_transpose(p->a, 0, 1), *c = t ? zorch_contiguous(t) : NULL;
  check(c);
  zorch_tensor_free(t), zorch_tensor_free(c);
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

/* Causal attention at (B, H, T, D): the fused op, or composed of matmul,
   scale, masked_fill, softmax and matmul; forward only or forward and backward
   (of the output's sum). */
typedef struct {
  zorch_tensor *q, *k, *v, *mask;
  bool fused, backward;
} attn;

static void run_attn(void *ctx) {
  attn *a = ctx;
  zorch_tensor *o;
  if (a->fused) {
    o = zorch_attention(a->q, a->k, a->v, &(zorch_attention_opts){.causal = true});
  } else {
    int64_t d = zorch_tensor_shape(a->q)[3];
    zorch_tensor *kt = zorch_transpose(a->k, 2, 3), *s = zorch_matmul(a->q, kt);
    zorch_tensor *ss = zorch_mul_scalar(s, 1 / sqrt((double)d)), *m = zorch_masked_fill(ss, a->mask, -INFINITY);
    zorch_tensor *p = zorch_softmax(m, -1);
    o = zorch_matmul(p, a->v);
    zorch_tensor_free(kt), zorch_tensor_free(s), zorch_tensor_free(ss), zorch_tensor_free(m), zorch_tensor_free(p);
  }
  check(o);
  if (a->backward) {
    zorch_tensor *l = zorch_sum(o, 0, NULL, false);
    check(l);
    if (zorch_backward(l, NULL, false)) check(NULL);
    zorch_tensor_free(l);
    zorch_set_grad(a->q, NULL), zorch_set_grad(a->k, NULL), zorch_set_grad(a->v, NULL);
  }
  zorch_tensor_free(o);
}

/* A Llama's attention at (B 4, H 8, Hkv 2, T 512, D 64), causal, forward and
   backward (of the output's sum): grouped heads read in place or repeated
   (expand and reshape, as a model without them does), and packed rows (4
   sequences each) by segment ids or by an explicit (B, 1, T, T) mask. */
enum { LA_NATIVE, LA_REPEAT, LA_SEGMENTS, LA_MASK };
typedef struct {
  zorch_tensor *q, *k, *v, *seg, *mask;
  int mode;
} llama_attn;

#define LA_B 4
#define LA_H 8
#define LA_HKV 2
#define LA_T 512
#define LA_D 64

static zorch_tensor *la_repeat(zorch_tensor *t) {
  zorch_tensor *u = zorch_unsqueeze(t, 2);
  zorch_tensor *e = zorch_expand(u, SHAPE(LA_B, LA_HKV, LA_H / LA_HKV, LA_T, LA_D));
  zorch_tensor *r = zorch_reshape(e, SHAPE(LA_B, LA_H, LA_T, LA_D));
  zorch_tensor_free(u), zorch_tensor_free(e);
  return r;
}

static void run_llama_attn(void *ctx) {
  llama_attn *a = ctx;
  zorch_attention_opts o = {.causal = true};
  zorch_tensor *k = zorch_tensor_retain(a->k), *v = zorch_tensor_retain(a->v);
  if (a->mode == LA_REPEAT) {
    zorch_tensor_free(k), zorch_tensor_free(v);
    check(k = la_repeat(a->k)), check(v = la_repeat(a->v));
  }
  if (a->mode == LA_SEGMENTS) o.segments = a->seg;
  if (a->mode == LA_MASK) o.mask = a->mask;
  zorch_tensor *y = zorch_attention(a->q, k, v, &o);
  check(y);
  zorch_tensor *l = zorch_sum(y, 0, NULL, false);
  check(l);
  if (zorch_backward(l, NULL, false)) check(NULL);
  zorch_tensor_free(l), zorch_tensor_free(y), zorch_tensor_free(k), zorch_tensor_free(v);
  zorch_set_grad(a->q, NULL), zorch_set_grad(a->k, NULL), zorch_set_grad(a->v, NULL);
}

/* The case's inputs; each row packs 4 sequences of uneven lengths. */
static llama_attn llama_attn_new(int mode, zorch_generator *g) {
  llama_attn a = {zorch_randn(SHAPE(LA_B, LA_H, LA_T, LA_D), ZORCH_F32, CPU, g),
                  zorch_randn(SHAPE(LA_B, LA_HKV, LA_T, LA_D), ZORCH_F32, CPU, g),
                  zorch_randn(SHAPE(LA_B, LA_HKV, LA_T, LA_D), ZORCH_F32, CPU, g), NULL, NULL, mode};
  check(a.q), check(a.k), check(a.v);
  zorch_set_requires_grad(a.q, true), zorch_set_requires_grad(a.k, true), zorch_set_requires_grad(a.v, true);
  static const int64_t lens[4] = {100, 156, 90, 166};
  int64_t ids[LA_B * LA_T];
  for (int b = 0; b < LA_B; b++)
    for (int64_t t = 0, s = 0, end = lens[b % 4]; t < LA_T; t++) {
      if (t == end) s++, end += lens[(b + s) % 4];
      ids[b * LA_T + t] = s;
    }
  check(a.seg = zorch_from_buffer(ids, SHAPE(LA_B, LA_T), ZORCH_I64));
  zorch_tensor *qs = zorch_view(a.seg, SHAPE(LA_B, 1, LA_T, 1)), *ks = zorch_view(a.seg, SHAPE(LA_B, 1, 1, LA_T));
  check(a.mask = zorch_eq(qs, ks));
  zorch_tensor_free(qs), zorch_tensor_free(ks);
  return a;
}

static void llama_attn_free(llama_attn *a) {
  zorch_tensor *all[] = {a->q, a->k, a->v, a->seg, a->mask};
  for (int i = 0; i < 5; i++) zorch_tensor_free(all[i]);
}

static const char *const LLAMA_ATTN_CASES[] = {
    "attention_gqa_b4h8kv2t512_d64_native_fwd_bwd", "attention_gqa_b4h8kv2t512_d64_repeat_fwd_bwd",
    "attention_packed_b4h8kv2t512_d64_segments_fwd_bwd", "attention_packed_b4h8kv2t512_d64_mask_fwd_bwd"};

static void attn_benches(zorch_device dev, const char *prefix, zorch_generator *g) {
  char name[96];
  for (int64_t t = 64; t <= 1024; t *= 16) {
    attn a = {zorch_randn(SHAPE(4, 12, t, 64), ZORCH_F32, dev, g), zorch_randn(SHAPE(4, 12, t, 64), ZORCH_F32, dev, g),
              zorch_randn(SHAPE(4, 12, t, 64), ZORCH_F32, dev, g), NULL, false, false};
    check(a.q), check(a.k), check(a.v);
    zorch_tensor *i = zorch_arange(0, (double)t, 1, ZORCH_I64, dev), *ic = zorch_view(i, SHAPE(t, 1));
    zorch_tensor *ir = zorch_view(i, SHAPE(1, t));
    check(a.mask = zorch_gt(ir, ic)); /* key j > query i */
    zorch_tensor_free(i), zorch_tensor_free(ic), zorch_tensor_free(ir);
    for (int bwd = 0; bwd < 2; bwd++) {
      for (int f = 1; f >= 0; f--) {
        a.fused = f, a.backward = bwd;
        zorch_set_requires_grad(a.q, bwd), zorch_set_requires_grad(a.k, bwd), zorch_set_requires_grad(a.v, bwd);
        snprintf(name, sizeof name, "%sattention_causal_b4h12t%lld_d64_%s_%s_ms", prefix, (long long)t,
                 f ? "fused" : "composed", bwd ? "fwd_bwd" : "fwd");
        emit(name, time_it(run_attn, &a, t > 64 ? 0.5 : 0.2) * 1e3, "ms");
      }
    }
    zorch_tensor_free(a.q), zorch_tensor_free(a.k), zorch_tensor_free(a.v), zorch_tensor_free(a.mask);
  }
}

/* Convolution: one conv2d forward and backward (grads of weight and bias, and
   of the input when it requires grad), and a small CNN's training step. */
typedef struct {
  zorch_tensor *x, *w, *b;
  zorch_conv2d_opts o;
} convb;

static void run_conv(void *ctx) {
  convb *c = ctx;
  zorch_set_grad(c->w, NULL), zorch_set_grad(c->b, NULL), zorch_set_grad(c->x, NULL);
  zorch_tensor *y = zorch_conv2d(c->x, c->w, c->b, &c->o);
  check(y);
  zorch_tensor *l = zorch_sum(y, 0, NULL, false);
  check(l);
  if (zorch_backward(l, NULL, false)) check(NULL);
  zorch_tensor_free(y), zorch_tensor_free(l);
}

static void conv_init(convb *c, int64_t n, int64_t ci, int64_t hw, int64_t co, int64_t k, bool input_grad) {
  zorch_generator *g = zorch_generator_new(2);
  check(c->x = zorch_randn(SHAPE(n, ci, hw, hw), ZORCH_F32, CPU, g));
  check(c->w = zorch_randn(SHAPE(co, ci, k, k), ZORCH_F32, CPU, g));
  check(c->b = zorch_randn(SHAPE(co), ZORCH_F32, CPU, g));
  zorch_set_requires_grad(c->w, true), zorch_set_requires_grad(c->b, true);
  if (input_grad) zorch_set_requires_grad(c->x, true);
  memset(&c->o, 0, sizeof c->o);
  c->o.padding[0] = c->o.padding[1] = k / 2;
  zorch_generator_free(g);
}

static void conv_free(convb *c) { zorch_tensor_free(c->x), zorch_tensor_free(c->w), zorch_tensor_free(c->b); }

/* conv(1->32, 3x3, pad 1) relu maxpool2 conv(32->64) relu maxpool2 linear(3136->10),
   cross entropy, forward and backward (no optimizer) */
typedef struct {
  zorch_tensor *x, *y, *p[6];
} cnn;

static void run_cnn(void *ctx) {
  cnn *m = ctx;
  for (int i = 0; i < 6; i++) zorch_set_grad(m->p[i], NULL);
  zorch_conv2d_opts o = {{1, 1}, {1, 1}, {1, 1}, 1};
  zorch_pool2d_opts po = {.kernel = {2, 2}};
  zorch_tensor *t[9];
  check(t[0] = zorch_conv2d(m->x, m->p[0], m->p[1], &o));
  check(t[1] = zorch_relu(t[0]));
  check(t[2] = zorch_max_pool2d(t[1], &po, NULL));
  check(t[3] = zorch_conv2d(t[2], m->p[2], m->p[3], &o));
  check(t[4] = zorch_relu(t[3]));
  check(t[5] = zorch_max_pool2d(t[4], &po, NULL));
  check(t[6] = zorch_reshape(t[5], SHAPE(zorch_tensor_shape(m->x)[0], -1)));
  check(t[7] = zorch_linear(t[6], m->p[4], m->p[5]));
  check(t[8] = zorch_cross_entropy(t[7], m->y, ZORCH_REDUCE_MEAN, -100));
  if (zorch_backward(t[8], NULL, false)) check(NULL);
  for (int i = 0; i < 9; i++) zorch_tensor_free(t[i]);
}

static void cnn_init(cnn *m, int64_t n) {
  zorch_generator *g = zorch_generator_new(3);
  check(m->x = zorch_randn(SHAPE(n, 1, 28, 28), ZORCH_F32, CPU, g));
  check(m->y = zorch_randint(0, 10, SHAPE(n), ZORCH_I64, CPU, g));
  const int64_t shapes[6][4] = {{32, 1, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {10, 3136}, {10}};
  const int nd[6] = {4, 1, 4, 1, 2, 1};
  const double scale[6] = {1.0 / 3, 1.0 / 3, 1 / sqrt(288.0), 1 / sqrt(288.0), 1 / sqrt(3136.0), 1 / sqrt(3136.0)};
  for (int i = 0; i < 6; i++) {
    zorch_tensor *r = zorch_randn(nd[i], shapes[i], ZORCH_F32, CPU, g);
    check(r);
    check(m->p[i] = zorch_mul_scalar(r, scale[i]));
    zorch_tensor_free(r);
    zorch_set_requires_grad(m->p[i], true);
  }
  zorch_generator_free(g);
}

static void cnn_free(cnn *m) {
  zorch_tensor_free(m->x), zorch_tensor_free(m->y);
  for (int i = 0; i < 6; i++) zorch_tensor_free(m->p[i]);
}

static void conv_benches(void) {
  convb c;
  conv_init(&c, 64, 1, 28, 32, 3, false);
  emit("conv2d_64x1x28x28_32c3_fwd_bwd", 64 / time_it(run_conv, &c, 0.5), "images/s");
  conv_free(&c);
  conv_init(&c, 64, 32, 14, 64, 3, true);
  emit("conv2d_64x32x14x14_64c3_fwd_bwd", 64 / time_it(run_conv, &c, 0.5), "images/s");
  conv_free(&c);
  conv_init(&c, 64, 1, 28, 32, 5, false);
  emit("conv2d_64x1x28x28_32c5_fwd_bwd", 64 / time_it(run_conv, &c, 0.5), "images/s");
  conv_free(&c);
  cnn m;
  cnn_init(&m, 64);
  emit("cnn_fashion_mnist_b64_fwd_bwd", 64 / time_it(run_cnn, &m, 1.0), "images/s");
  cnn_free(&m);
}

typedef struct {
  zorch_tensor *x, *w, *b;
  int kind;
} unary_case;
enum { K_GELU, K_GELU_TANH, K_SOFTMAX, K_LOG_SOFTMAX, K_SUM, K_LAYER_NORM };

static void run_unary(void *ctx) {
  unary_case *u = ctx;
  zorch_tensor *r = NULL;
  switch (u->kind) {
    case K_GELU: r = zorch_gelu(u->x, false); break;
    case K_GELU_TANH: r = zorch_gelu(u->x, true); break;
    case K_SOFTMAX: r = zorch_softmax(u->x, -1); break;
    case K_LOG_SOFTMAX: r = zorch_log_softmax(u->x, -1); break;
    case K_SUM: r = zorch_sum(u->x, 0, NULL, false); break;
    case K_LAYER_NORM: r = zorch_layer_norm(u->x, 1, u->w, u->b, 1e-5); break;
  }
  check(r);
  zorch_tensor_free(r);
}

/* The transformer kernels and bf16 GEMMs, on 1 and 2 threads (names end _t1, _t2). */
static void thread_benches(zorch_generator *g) {
  static const char *const kname[] = {"gelu", "gelu_tanh", "softmax", "log_softmax", "sum",
                                      "layer_norm"};
  char name[96];
  for (int th = 1; th <= 2; th++) {
    zorch_set_num_threads(th);
    zorch_dtype dts[2] = {ZORCH_F32, ZORCH_BF16};
    for (int d = 0; d < 2; d++) {
      /* 1e7 floats, as rows of 1024 for the row-wise ones */
      zorch_tensor *x = zorch_randn(SHAPE(10000, 1000), dts[d], CPU, g);
      zorch_tensor *xr = zorch_randn(SHAPE(9766, 1024), dts[d], CPU, g);
      zorch_tensor *w = zorch_ones(SHAPE(1024), dts[d], CPU), *b = zorch_zeros(SHAPE(1024), dts[d], CPU);
      check(x), check(xr), check(w), check(b);
      for (int k = 0; k < 6; k++) {
        bool rows = k == K_SOFTMAX || k == K_LOG_SOFTMAX || k == K_LAYER_NORM;
        unary_case u = {rows ? xr : x, w, b, k};
        snprintf(name, sizeof name, "%s_1e7%s_t%d", kname[k], d ? "_bf16" : "", th);
        emit(name, time_it(run_unary, &u, 0.3) * 1e3, "ms");
      }
      zorch_tensor_free(x), zorch_tensor_free(xr), zorch_tensor_free(w), zorch_tensor_free(b);
    }
    /* bf16 GEMMs: square, and the MLP's forward shape */
    int64_t shapes[2][3] = {{1024, 1024, 1024}, {256, 1024, 4096}};
    for (int s = 0; s < 2; s++) {
      int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
      pair mm = {zorch_randn(SHAPE(m, k), ZORCH_BF16, CPU, g), zorch_randn(SHAPE(k, n), ZORCH_BF16, CPU, g)};
      check(mm.a), check(mm.b);
      if (s == 0) snprintf(name, sizeof name, "bf16_gemm_1024_t%d", th);
      else snprintf(name, sizeof name, "bf16_gemm_%lldx%lldx%lld_t%d", (long long)m, (long long)k, (long long)n, th);
      emit(name, 2.0 * m * n * k / time_it(run_matmul, &mm, 0.5) / 1e9, "GFLOP/s");
      zorch_tensor_free(mm.a), zorch_tensor_free(mm.b);
    }
    for (int d = 0; d < 2; d++) {
      mlp m;
      mlp_init_on(&m, 256, 1024, 4096, 1024, false, dts[d], CPU);
      double t = time_it(run_mlp, &m, 1.0);
      snprintf(name, sizeof name, "mlp_1024_4096_1024_b256_fwd_bwd%s_t%d", d ? "_bf16" : "", th);
      emit(name, 5 * 2.0 * 256 * 1024 * 4096 / t / 1e9, "GFLOP/s");
      mlp_free(&m);
    }
  }
  zorch_set_num_threads(2);
}

/* One GPT-2 transformer block (pre-LayerNorm, 4 heads, MLP 4C with the tanh
   GELU) at C 256, T 128, B 16: forward, the output's sum, backward (the input
   and every parameter get gradients). */
typedef struct {
  zorch_tensor *x, *p[12]; /* ln1 w b, attn w b, proj w b, ln2 w b, fc w b, mproj w b */
  int64_t b, t, c, h;
} block;

static zorch_tensor *block_attn(block *k, zorch_tensor *h) {
  zorch_tensor *qkv = zorch_linear(h, k->p[2], k->p[3]), *hd[3];
  int64_t b = k->b, t = k->t, c = k->c, nh = k->h;
  check(qkv);
  for (int i = 0; i < 3; i++) {
    zorch_tensor *s = zorch_narrow(qkv, 2, i * c, c), *r = zorch_reshape(s, SHAPE(b, t, nh, c / nh));
    check(r);
    hd[i] = zorch_transpose(r, 1, 2);
    zorch_tensor_free(s), zorch_tensor_free(r);
  }
  zorch_tensor *y = zorch_attention(hd[0], hd[1], hd[2], &(zorch_attention_opts){.causal = true});
  check(y);
  zorch_tensor *yt = zorch_transpose(y, 1, 2), *yr = zorch_reshape(yt, SHAPE(b, t, c));
  zorch_tensor *o = zorch_linear(yr, k->p[4], k->p[5]);
  check(o);
  zorch_tensor *fr[] = {qkv, hd[0], hd[1], hd[2], y, yt, yr};
  for (int i = 0; i < 7; i++) zorch_tensor_free(fr[i]);
  return o;
}

static void run_block(void *ctx) {
  block *k = ctx;
  zorch_tensor *h1 = zorch_layer_norm(k->x, 1, k->p[0], k->p[1], 1e-5);
  check(h1);
  zorch_tensor *a = block_attn(k, h1), *x1 = zorch_add(k->x, a);
  zorch_tensor *h2 = zorch_layer_norm(x1, 1, k->p[6], k->p[7], 1e-5);
  check(h2);
  /* the MLP's first Linear with its GELU as one op (zorch_linear_act) */
  zorch_tensor *f = NULL, *gl = zorch_linear_act(h2, k->p[8], k->p[9], ZORCH_ACT_GELU_TANH);
  zorch_tensor *m = zorch_linear(gl, k->p[10], k->p[11]), *x2 = zorch_add(x1, m);
  zorch_tensor *l = zorch_sum(x2, 0, NULL, false);
  check(l);
  zorch_set_grad(k->x, NULL);
  for (int i = 0; i < 12; i++) zorch_set_grad(k->p[i], NULL);
  if (zorch_backward(l, NULL, false)) check(NULL);
  zorch_tensor *fr[] = {h1, a, x1, h2, f, gl, m, x2, l};
  for (int i = 0; i < 9; i++) zorch_tensor_free(fr[i]);
}

static void block_init(block *k, zorch_dtype dt, zorch_generator *g) {
  int64_t b = 16, t = 128, c = 256;
  *k = (block){.b = b, .t = t, .c = c, .h = 4};
  int64_t rows[6] = {0, 3 * c, c, 0, 4 * c, c}, cols[6] = {0, c, c, 0, c, 4 * c};
  check(k->x = zorch_randn(SHAPE(b, t, c), dt, CPU, g));
  for (int i = 0; i < 6; i++) {
    zorch_tensor *w, *bias;
    if (!rows[i]) {
      w = zorch_ones(SHAPE(c), dt, CPU), bias = zorch_zeros(SHAPE(c), dt, CPU);
    } else {
      zorch_tensor *r = zorch_randn(SHAPE(rows[i], cols[i]), dt, CPU, g);
      check(r);
      w = zorch_mul_scalar(r, 0.02), bias = zorch_zeros(SHAPE(rows[i]), dt, CPU);
      zorch_tensor_free(r);
    }
    check(w), check(bias);
    k->p[2 * i] = w, k->p[2 * i + 1] = bias;
  }
  zorch_set_requires_grad(k->x, true);
  for (int i = 0; i < 12; i++) zorch_set_requires_grad(k->p[i], true);
}

static void block_free(block *k) {
  zorch_tensor_free(k->x);
  for (int i = 0; i < 12; i++) zorch_tensor_free(k->p[i]);
}

/* The block in float32 and bf16 on 1 and 2 threads, in ms; only = "fp32" or
   "bf16" and threads > 0 pick one case (for a profiler). */
static void block_benches(zorch_generator *g, const char *only, int threads) {
  char name[96];
  for (int th = 1; th <= 2; th++) {
    if (threads > 0 && th != threads) continue;
    zorch_set_num_threads(th);
    for (int d = 0; d < 2; d++) {
      if (only && strcmp(only, d ? "bf16" : "fp32") != 0) continue;
      block k;
      block_init(&k, d ? ZORCH_BF16 : ZORCH_F32, g);
      snprintf(name, sizeof name, "transformer_block_c256_t128_b16_fwd_bwd%s_t%d", d ? "_bf16" : "", th);
      emit(name, time_it(run_block, &k, 1.0) * 1e3, "ms");
      block_free(&k);
    }
  }
  zorch_set_num_threads(2);
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

/* Rotary embedding on (4, 32, 512, 64) float32 with (512, 64) tables: zorch_rope
   against the composed ops x * cos + rotate_half(x) * sin (narrow, neg, cat,
   mul, add), forward and forward + backward (x requires grad). Each figure is
   the median of 9 timed rounds of a few calls (the milliseconds per call). */
typedef struct {
  zorch_tensor *x, *c, *s, *g;
  bool fused, backward;
} ropeb;

static zorch_tensor *rope_composed(zorch_tensor *x, zorch_tensor *c, zorch_tensor *s) {
  const int64_t h = 32; /* half the head dim */
  zorch_tensor *x1 = zorch_narrow(x, 3, 0, h), *x2 = zorch_narrow(x, 3, h, h), *n2 = zorch_neg(x2);
  zorch_tensor *rh = zorch_cat(2, (zorch_tensor *[]){n2, x1}, 3);
  zorch_tensor *a = zorch_mul(x, c), *b = zorch_mul(rh, s), *y = zorch_add(a, b);
  check(y);
  zorch_tensor *fr[] = {x1, x2, n2, rh, a, b};
  for (int i = 0; i < 6; i++) zorch_tensor_free(fr[i]);
  return y;
}

static void run_rope(void *ctx) {
  ropeb *r = ctx;
  zorch_tensor *y = r->fused ? zorch_rope(r->x, r->c, r->s) : rope_composed(r->x, r->c, r->s);
  check(y);
  if (r->backward) {
    zorch_set_grad(r->x, NULL);
    if (zorch_backward(y, r->g, false)) check(NULL);
  }
  zorch_tensor_free(y);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double time_median(bench_fn f, void *ctx, int reps) {
  double t[9];
  f(ctx);
  for (int k = 0; k < 9; k++) {
    double t0 = now();
    for (int i = 0; i < reps; i++) f(ctx);
    t[k] = (now() - t0) / reps;
  }
  qsort(t, 9, sizeof t[0], cmp_double);
  return t[4];
}

static void rope_benches(zorch_generator *g) {
  ropeb r = {zorch_randn(SHAPE(4, 32, 512, 64), ZORCH_F32, CPU, g), zorch_randn(SHAPE(512, 64), ZORCH_F32, CPU, g),
             zorch_randn(SHAPE(512, 64), ZORCH_F32, CPU, g), zorch_randn(SHAPE(4, 32, 512, 64), ZORCH_F32, CPU, g),
             false, false};
  check(r.x), check(r.c), check(r.s), check(r.g);
  zorch_set_requires_grad(r.x, true);
  const char *names[2][2] = {{"rope_composed_4x32x512x64_fwd", "rope_composed_4x32x512x64_fwd_bwd"},
                             {"rope_4x32x512x64_fwd", "rope_4x32x512x64_fwd_bwd"}};
  for (int bwd = 0; bwd < 2; bwd++)
    for (int fused = 0; fused < 2; fused++) {
      r.fused = fused, r.backward = bwd;
      emit(names[fused][bwd], time_median(run_rope, &r, 3) * 1e3, "ms");
    }
  zorch_tensor *fr[] = {r.x, r.c, r.s, r.g};
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
  attn_benches(GPU, "cuda_", g);
  zorch_generator_free(g);
  on_gpu = false;
}

/* ---- bench --serve: one case at a time, for scripts/bench-compare.py -------------
   Each input line "CASE THREADS" is answered by one JSON line {"case", "threads",
   "s"}: seconds per call, the best of 3 repetitions of at least 0.1 s each (the
   setup is not timed). bench/torch_bench.py --serve answers the same cases for
   PyTorch, and the driver alternates the two. The machine's limits are cases
   too: peak_fma_fp32 and peak_dot_bf16 (AVX-512 loops on every thread),
   peak_amx_bf16 (tile multiplies, where the CPU has AMX),
   stream_read, stream_copy and stream_triad (memory bandwidth); the driver knows each case's
   work. */
static double time_best3(bench_fn f, void *ctx) {
  f(ctx);
  long reps = 1;
  double best = 1e30;
  for (;;) { /* calibrate: one repetition at least 0.1 s */
    double t0 = now();
    for (long i = 0; i < reps; i++) f(ctx);
    double dt = now() - t0;
    if (dt >= 0.1) {
      best = dt / (double)reps;
      break;
    }
    reps = dt > 0 ? (long)(0.1 / dt * reps * 1.2) + 1 : reps * 10;
  }
  for (int r = 0; r < 2; r++) {
    double t0 = now();
    for (long i = 0; i < reps; i++) f(ctx);
    double per = (now() - t0) / (double)reps;
    if (per < best) best = per;
  }
  return best;
}

#if defined(__x86_64__)
/* FMA_ITERS iterations of 12 independent 16-wide FMA chains per thread:
   12 * 16 * 2 flops an iteration (12 chains hide the FMA latency). */
#define FMA_ITERS 4000000L
__attribute__((target("avx512f"))) static float fma_chains(void) {
  __m512 acc[12];
  for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_ps((float)k);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (long i = 0; i < FMA_ITERS; i++)
    for (int k = 0; k < 12; k++) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
  __m512 s = acc[0];
  for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, acc[k]);
  return _mm512_reduce_add_ps(s);
}

/* The same with vdpbf16ps: 32 bf16 products summed into 16 floats, 64 flops
   an instruction. */
__attribute__((target("avx512f,avx512bf16"))) static float dot_chains(void) {
  __m512 acc[12];
  for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_ps((float)k);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
  for (long i = 0; i < FMA_ITERS; i++)
    for (int k = 0; k < 12; k++) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  __m512 s = acc[0];
  for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, acc[k]);
  return _mm512_reduce_add_ps(s);
}

/* The AMX peak: AMX_ITERS iterations of 4 tdpbf16ps on 16 x 16 float tiles
   (two A and two B tiles already loaded), 16 * 16 * 32 * 2 flops each. The
   tile state is per thread, so each thread configures its own. */
#define AMX_ITERS 1000000L
__attribute__((target("amx-tile,amx-bf16"))) static float amx_chains(void) {
  struct {
    uint8_t palette, start, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } __attribute__((packed)) cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  uint16_t in[16 * 32] __attribute__((aligned(64)));
  float out[16 * 16] __attribute__((aligned(64)));
  for (int i = 0; i < 16 * 32; i++) in[i] = 0x3380; /* 2^-24: the sums stay finite */
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, in, 64);
  _tile_loadd(5, in, 64);
  _tile_loadd(6, in, 64);
  _tile_loadd(7, in, 64);
  for (long i = 0; i < AMX_ITERS; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

long syscall(long number, ...); /* (unistd.h's sync() would clash with ours) */

/* AMX-TILE and AMX-BF16 in CPUID, and the kernel's leave to use the tile data
   (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16 on). */
static bool amx_usable(void) {
  unsigned a = 7, b = 0, c = 0, d = 0;
  __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
  if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

#else /* no AVX-512 here: the peak cases answer "not supported" */
static float fma_chains(void) { return 0; }
static float dot_chains(void) { return 0; }
static float amx_chains(void) { return 0; }
static bool amx_usable(void) { return false; }
#endif

static volatile float peak_sink;
static void run_peak(void *ctx) {
  int kind = *(int *)ctx; /* 0 FMA, 1 bf16 dot, 2 AMX */
  float sum = 0;
#pragma omp parallel reduction(+ : sum)
  sum += kind == 2 ? amx_chains() : kind == 1 ? dot_chains() : fma_chains();
  peak_sink = sum;
}

/* STREAM-like kernels over arrays of 2^24 floats (64 MiB each): copy, triad,
   and a sum (read only) */
typedef struct {
  float *a, *b, *c;
  bool triad, read;
} stream;
#define STREAM_N (1L << 24)

/* a sum on 4 independent 16-wide chains, so that memory and not the add's
   latency bounds it */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float sum_floats_avx512(const float *a, long n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  long i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 4; k++) acc[k] = _mm512_add_ps(acc[k], _mm512_loadu_ps(a + i + 16 * k));
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  for (; i < n; i++) s += a[i];
  return s;
}
#endif
static float sum_floats(const float *a, long n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_floats_avx512(a, n);
#endif
  float s = 0;
  for (long i = 0; i < n; i++) s += a[i];
  return s;
}

static volatile float stream_sink;
static void run_stream(void *ctx) {
  stream *st = ctx;
  float *a = st->a, *b = st->b, *c = st->c;
  if (st->read) {
    float s = 0;
#pragma omp parallel reduction(+ : s)
    {
      long per = STREAM_N / omp_get_num_threads(), lo = per * omp_get_thread_num();
      s += sum_floats(a + lo, omp_get_thread_num() == omp_get_num_threads() - 1 ? STREAM_N - lo : per);
    }
    stream_sink = s;
  } else if (st->triad) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < STREAM_N; i++) a[i] = b[i] + 3.0f * c[i];
  } else {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < STREAM_N; i++) b[i] = a[i];
  }
}

static void run_adam_fused(void *ctx) { run_adam(ctx); }

/* Decode's GEMV: y (1, out) = x (1, 4096) w^T with w float32, or int8 / int4
   (groups of 32) through qlinear: memory-bound, so the weights' bytes per call
   over the time are read against stream_read */
typedef struct {
  zorch_tensor *x, *w, *q, *s;
} qgemv;
static void run_qgemv(void *ctx) {
  qgemv *c = ctx;
  zorch_tensor *y = c->q ? zorch_qlinear(c->x, c->q, c->s, NULL) : zorch_linear(c->x, c->w, NULL);
  check(y);
  zorch_tensor_free(y);
}

/* `c = a + b` on two 64-float tensors, n times, from a Lua loop in an embedded VM */
typedef struct {
  zorch_vm *vm;
  char chunk[64];
} script;
static void run_script(void *ctx) {
  script *sc = ctx;
  if (zorch_vm_dostring(sc->vm, sc->chunk, "=bench")) {
    fprintf(stderr, "bench: %s\n", zorch_vm_error(sc->vm));
    exit(1);
  }
}

/* Seconds per call of one case, or a negative number for an unknown one. */
static double serve_case(const char *name, zorch_generator *g) {
  double t = -1;
  if (strcmp(name, "peak_fma_fp32") == 0 || strcmp(name, "peak_dot_bf16") == 0) {
    int kind = name[5] == 'd';
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f") || (kind && !__builtin_cpu_supports("avx512bf16"))) return -2;
#else
    return -2;
#endif
    return time_best3(run_peak, &kind);
  }
  if (strcmp(name, "peak_amx_bf16") == 0) {
    int kind = 2;
    return amx_usable() ? time_best3(run_peak, &kind) : -2;
  }
  if (strncmp(name, "stream_", 7) == 0) {
    stream st = {aligned_alloc(64, STREAM_N * 4), aligned_alloc(64, STREAM_N * 4), aligned_alloc(64, STREAM_N * 4),
                 strcmp(name, "stream_triad") == 0, strcmp(name, "stream_read") == 0};
    check(st.a), check(st.b), check(st.c);
#pragma omp parallel for schedule(static) /* first touch by the thread that uses the page */
    for (long i = 0; i < STREAM_N; i++) st.a[i] = 1, st.b[i] = 2, st.c[i] = 3;
    if (st.triad || st.read || strcmp(name, "stream_copy") == 0) t = time_best3(run_stream, &st);
    free(st.a), free(st.b), free(st.c);
    return t;
  }
  if (strcmp(name, "sgemm_1024") == 0 || strcmp(name, "bf16_gemm_1024") == 0) {
    zorch_dtype dt = name[0] == 'b' ? ZORCH_BF16 : ZORCH_F32;
    pair p = {zorch_randn(SHAPE(1024, 1024), dt, CPU, g), zorch_randn(SHAPE(1024, 1024), dt, CPU, g)};
    check(p.a), check(p.b);
    t = time_best3(run_matmul, &p);
    zorch_tensor_free(p.a), zorch_tensor_free(p.b);
    return t;
  }
  if (strcmp(name, "add_64") == 0 || strcmp(name, "relu_64") == 0 || strcmp(name, "add_1m") == 0) {
    int64_t n = name[4] == '1' ? 1000000 : 64;
    pair p = {zorch_randn(SHAPE(n), ZORCH_F32, CPU, g), zorch_randn(SHAPE(n), ZORCH_F32, CPU, g)};
    check(p.a), check(p.b);
    t = time_best3(name[0] == 'r' ? run_relu : run_add, &p);
    zorch_tensor_free(p.a), zorch_tensor_free(p.b);
    return t;
  }
  if (strcmp(name, "transpose_4096x1024") == 0 || strcmp(name, "transpose_4096x1024_bf16") == 0) {
    pair p = {zorch_randn(SHAPE(4096, 1024), strstr(name, "bf16") ? ZORCH_BF16 : ZORCH_F32, CPU, g), NULL};
    check(p.a);
    t = time_best3(run_transpose, &p);
    zorch_tensor_free(p.a);
    return t;
  }
  if (strcmp(name, "script_add_64") == 0 || strcmp(name, "script_add_64_over_c") == 0) {
    script sc = {zorch_vm_new(NULL), "add_loop(100000)"};
    check(sc.vm);
    if (zorch_vm_dostring(sc.vm,
                          "local zorch = require 'zorch'\n"
                          "local a, b = zorch.randn(64), zorch.randn(64)\n"
                          "function add_loop(n) local c; for i = 1, n do c = a + b end end\n",
                          "=bench")) {
      fprintf(stderr, "bench: %s\n", zorch_vm_error(sc.vm));
      exit(1);
    }
    if (name[13] == '\0') {
      t = time_best3(run_script, &sc) / 100000;
    } else { /* the Lua loop over the C loop, each pair timed back to back, the median of 5 pairs
                (not seconds: a ratio; measured apart, a busy moment on one side skewed it, and
                with 3 pairs one busy second still moved the median by 10-20%) */
      pair p = {zorch_randn(SHAPE(64), ZORCH_F32, CPU, g), zorch_randn(SHAPE(64), ZORCH_F32, CPU, g)};
      check(p.a), check(p.b);
      enum { PAIRS = 5 };
      double q[PAIRS];
      for (int k = 0; k < PAIRS; k++) {
        double c = time_best3(run_add, &p), v = time_best3(run_script, &sc) / 100000 / c;
        int j = k;
        for (; j > 0 && q[j - 1] > v; j--) q[j] = q[j - 1]; /* kept in order */
        q[j] = v;
      }
      zorch_tensor_free(p.a), zorch_tensor_free(p.b);
      t = q[PAIRS / 2];
    }
    zorch_vm_free(sc.vm);
    return t;
  }
  if (strncmp(name, "transformer_block_c256_t128_b16_fwd_bwd", 39) == 0) {
    block k;
    block_init(&k, strstr(name, "bf16") ? ZORCH_BF16 : ZORCH_F32, g);
    t = time_best3(run_block, &k);
    block_free(&k);
    return t;
  }
  if (strncmp(name, "mlp_1024_4096_1024_b256_fwd_bwd", 31) == 0 || strcmp(name, "simplenet_step") == 0) {
    mlp m;
    if (name[0] == 's') mlp_init(&m, 64, 10, 20, 2, true);
    else mlp_init_on(&m, 256, 1024, 4096, 1024, false, strstr(name, "bf16") ? ZORCH_BF16 : ZORCH_F32, CPU);
    t = time_best3(run_mlp, &m);
    mlp_free(&m);
    return t;
  }
  static const char *const kname[] = {"gelu", "gelu_tanh", "softmax", "log_softmax", "sum", "layer_norm"};
  for (int k = 0; k < 6; k++) {
    char f32[32], bf16[32];
    snprintf(f32, sizeof f32, "%s_1e7", kname[k]);
    snprintf(bf16, sizeof bf16, "%s_1e7_bf16", kname[k]);
    if (strcmp(name, f32) != 0 && strcmp(name, bf16) != 0) continue;
    zorch_dtype dt = strcmp(name, bf16) == 0 ? ZORCH_BF16 : ZORCH_F32;
    bool rows = k == K_SOFTMAX || k == K_LOG_SOFTMAX || k == K_LAYER_NORM; /* rows of 1024 */
    unary_case u = {rows ? zorch_randn(SHAPE(9766, 1024), dt, CPU, g) : zorch_randn(SHAPE(10000, 1000), dt, CPU, g),
                    zorch_ones(SHAPE(1024), dt, CPU), zorch_zeros(SHAPE(1024), dt, CPU), k};
    check(u.x), check(u.w), check(u.b);
    t = time_best3(run_unary, &u);
    zorch_tensor_free(u.x), zorch_tensor_free(u.w), zorch_tensor_free(u.b);
    return t;
  }
  if (strcmp(name, "adamw_8m") == 0 || strcmp(name, "adamw_8m_foreach") == 0) { /* (PyTorch's two forms) */
    const int64_t n = 8 << 20;
    adam_shard a = {zorch_randn(SHAPE(n), ZORCH_F32, CPU, g), zorch_randn(SHAPE(n), ZORCH_F32, CPU, g),
                    zorch_zeros(SHAPE(n), ZORCH_F32, CPU), zorch_zeros(SHAPE(n), ZORCH_F32, CPU), 0};
    check(a.p), check(a.g), check(a.m), check(a.v);
    t = time_best3(run_adam_fused, &a);
    zorch_tensor *fr[] = {a.p, a.g, a.m, a.v};
    for (int i = 0; i < 4; i++) zorch_tensor_free(fr[i]);
    return t;
  }
  if (strcmp(name, "attention_causal_b4h12t1024_d64_fused_fwd") == 0 ||
      strcmp(name, "attention_causal_b4h12t64_d64_fused_fwd_bwd") == 0) {
    int64_t tt = strstr(name, "t1024") ? 1024 : 64;
    bool bwd = strstr(name, "bwd") != NULL;
    attn a = {zorch_randn(SHAPE(4, 12, tt, 64), ZORCH_F32, CPU, g), zorch_randn(SHAPE(4, 12, tt, 64), ZORCH_F32, CPU, g),
              zorch_randn(SHAPE(4, 12, tt, 64), ZORCH_F32, CPU, g), NULL, true, bwd};
    check(a.q), check(a.k), check(a.v);
    zorch_set_requires_grad(a.q, bwd), zorch_set_requires_grad(a.k, bwd), zorch_set_requires_grad(a.v, bwd);
    t = time_best3(run_attn, &a);
    zorch_tensor_free(a.q), zorch_tensor_free(a.k), zorch_tensor_free(a.v);
    return t;
  }
  for (int mode = 0; mode < 4; mode++)
    if (strcmp(name, LLAMA_ATTN_CASES[mode]) == 0) {
      llama_attn a = llama_attn_new(mode, g);
      t = time_best3(run_llama_attn, &a);
      llama_attn_free(&a);
      return t;
    }
  int64_t gout = 0;
  char gdt[8];
  if (sscanf(name, "gemv_4096x%" SCNd64 "_%7s", &gout, gdt) == 2 && gout > 0 &&
      (strcmp(gdt, "f32") == 0 || strcmp(gdt, "int8") == 0 || strcmp(gdt, "int4") == 0)) {
    qgemv c = {zorch_randn(SHAPE(1, 4096), ZORCH_F32, CPU, g), zorch_randn(SHAPE(gout, 4096), ZORCH_F32, CPU, g),
               NULL, NULL};
    check(c.x), check(c.w);
    if (gdt[0] == 'i' && zorch_quantize(c.w, gdt[3] == '8' ? 8 : 4, gdt[3] == '8' ? 0 : 32, &c.q, &c.s)) check(NULL);
    t = time_best3(run_qgemv, &c);
    zorch_tensor_free(c.x), zorch_tensor_free(c.w), zorch_tensor_free(c.q), zorch_tensor_free(c.s);
    return t;
  }
  if (strcmp(name, "cnn_fashion_mnist_b64_fwd_bwd") == 0) {
    cnn m;
    cnn_init(&m, 64);
    t = time_best3(run_cnn, &m);
    cnn_free(&m);
    return t;
  }
  return t;
}

static int serve(void) {
  zorch_generator *g = zorch_generator_new(0);
  char line[256], name[128];
  int threads;
  while (fgets(line, sizeof line, stdin)) {
    if (sscanf(line, "%127s %d", name, &threads) != 2 || threads < 1) continue;
    zorch_set_num_threads(threads);
    omp_set_num_threads(threads);
    double t = serve_case(name, g);
    if (t == -2) printf("{\"case\": \"%s\", \"threads\": %d, \"error\": \"not supported by this CPU\"}\n", name, threads);
    else if (t < 0) printf("{\"case\": \"%s\", \"threads\": %d, \"error\": \"unknown case\"}\n", name, threads);
    else printf("{\"case\": \"%s\", \"threads\": %d, \"s\": %.6g}\n", name, threads, t);
    fflush(stdout);
  }
  zorch_generator_free(g);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--serve") == 0) return serve();
  if (argc > 1 && strcmp(argv[1], "--blas") == 0) { /* what runs the GEMMs, for the table's header */
    printf("%s\n", zorch_blas_info());
    return 0;
  }
  bool gpu_only = argc > 1 && strcmp(argv[1], "--gpu") == 0;
  if (argc > 1 && strcmp(argv[1], "--attention") == 0) { /* only the CPU attention cases */
    zorch_set_num_threads(2);
    zorch_generator *g = zorch_generator_new(0);
    attn_benches(CPU, "", g);
    zorch_generator_free(g);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--block") == 0) { /* only the transformer block */
    zorch_generator *g = zorch_generator_new(0);
    block_benches(g, argc > 2 ? argv[2] : NULL, argc > 3 ? atoi(argv[3]) : 0);
    zorch_generator_free(g);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--kernels") == 0) { /* only the 1- and 2-thread kernel cases */
    zorch_generator *g = zorch_generator_new(0);
    thread_benches(g);
    zorch_generator_free(g);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--rope") == 0) { /* only the rotary embedding cases */
    zorch_set_num_threads(2);
    zorch_generator *g = zorch_generator_new(0);
    rope_benches(g);
    zorch_generator_free(g);
    return 0;
  }
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
  if (argc > 1 && strcmp(argv[1], "--conv") == 0) { /* the convolution cases alone */
    conv_benches();
    zorch_generator_free(g);
    return 0;
  }

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

  attn_benches(CPU, "", g);
  conv_benches();
  thread_benches(g);
  block_benches(g, NULL, 0);
  adam_benches(g);
  rope_benches(g);

  zorch_tensor *fr[] = {mm.a, mm.b, small.a, small.b, big.a, big.b};
  for (int i = 0; i < 6; i++) zorch_tensor_free(fr[i]);
  zorch_generator_free(g);
  return 0;
}
