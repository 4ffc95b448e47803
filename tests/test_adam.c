/* The CPU Adam over a flat fp32 shard (vectorised, threaded) gives the bits of
   the scalar formula, written out here as plain C: every option, odd sizes,
   several steps, one thread and two. */
#include <math.h>
#include <string.h>

#include "tap.h"

typedef struct {
  float *p, *g, *m, *v;
} arrays;

/* The update of ops/cpu/optim.c's ADAM(float), one element at a time. */
static void ref_step(arrays *a, int64_t n, int64_t step, const zorch_adam_opts *o) {
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  if (o->no_bias_correction) bc1 = bc2 = 1;
  const float b1w = (float)(1 - o->beta1), b2 = (float)o->beta2, b2w = (float)(1 - o->beta2);
  const float wd = (float)o->weight_decay, decay = (float)(1 - o->lr * o->weight_decay);
  const float step_size = (float)(o->lr / bc1), rbc2s = 1.0f / (float)sqrt(bc2), eps = (float)o->eps;
  for (int64_t i = 0; i < n; i++) {
    float gi = a->g[i], pi = a->p[i];
    if (o->weight_decay != 0 && !o->decoupled) gi = gi + wd * pi;
    if (o->weight_decay != 0 && o->decoupled) pi = pi * decay;
    float mi = a->m[i] + b1w * (gi - a->m[i]);
    float vi = a->v[i] * b2 + b2w * gi * gi;
    a->m[i] = mi;
    a->v[i] = vi;
    float denom = sqrtf(vi) * rbc2s + eps;
    a->p[i] = pi - step_size * (mi / denom);
  }
}

static bool same_bits(const float *x, const float *y, int64_t n) { return memcmp(x, y, (size_t)n * sizeof *x) == 0; }

static void check_case(const char *what, int64_t n, const zorch_adam_opts *o, int threads) {
  zorch_set_num_threads(threads);
  int64_t shape[1] = {n};
  zorch_generator *gen = zorch_generator_new(42);
  zorch_tensor *p = zorch_randn(1, shape, ZORCH_F32, (zorch_device){ZORCH_CPU, 0}, gen);
  zorch_tensor *g = zorch_randn(1, shape, ZORCH_F32, (zorch_device){ZORCH_CPU, 0}, gen);
  zorch_tensor *m = zorch_zeros(1, shape, ZORCH_F32, (zorch_device){ZORCH_CPU, 0});
  zorch_tensor *v = zorch_zeros(1, shape, ZORCH_F32, (zorch_device){ZORCH_CPU, 0});
  arrays r = {malloc((size_t)n * 4), malloc((size_t)n * 4), calloc((size_t)n, 4), calloc((size_t)n, 4)};
  memcpy(r.p, zorch_tensor_data(p), (size_t)n * 4);
  memcpy(r.g, zorch_tensor_data(g), (size_t)n * 4);
  bool good = true;
  for (int64_t step = 1; step <= 5 && good; step++) {
    good = zorch_adam_step(p, g, m, v, NULL, step, o) == ZORCH_OK;
    ref_step(&r, n, step, o);
    good = good && same_bits(zorch_tensor_data(p), r.p, n) && same_bits(zorch_tensor_data(m), r.m, n) &&
           same_bits(zorch_tensor_data(v), r.v, n);
  }
  ok(good, "%s, %lld elements, %d thread%s: parameters and moments are the scalar formula's bits over 5 steps",
     what, (long long)n, threads, threads > 1 ? "s" : "");
  free(r.p), free(r.g), free(r.m), free(r.v);
  zorch_tensor *fr[] = {p, g, m, v};
  for (int i = 0; i < 4; i++) zorch_tensor_free(fr[i]);
  zorch_generator_free(gen);
}

int main(void) {
  const zorch_adam_opts plain = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  zorch_adam_opts l2 = plain, adamw = plain, nobc = plain;
  l2.weight_decay = 0.1;
  adamw.weight_decay = 0.01, adamw.decoupled = true;
  nobc.no_bias_correction = true, nobc.eps = 1e-6;
  const int64_t sizes[] = {1, 17, 100003};
  for (int t = 1; t <= 2; t++) {
    for (int s = 0; s < 3; s++) {
      check_case("Adam", sizes[s], &plain, t);
      check_case("Adam with L2 weight decay", sizes[s], &l2, t);
      check_case("AdamW", sizes[s], &adamw, t);
      check_case("Adam without bias correction", sizes[s], &nobc, t);
    }
  }
  return done_testing();
}
