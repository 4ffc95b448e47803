/* End to end: a 10-20-2 MLP learns with Adam, and a long training loop runs in
   constant memory. */
#include "tap.h"

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * 4;
}

typedef struct {
  zorch_tensor *p[4], *m[4], *v[4];
  int64_t step;
} net;

static zorch_tensor *param(int nd, const int64_t *shape, zorch_generator *g) {
  zorch_tensor *r = zorch_randn(nd, shape, ZORCH_F32, CPU, g), *p = zorch_mul_scalar(r, 0.3);
  zorch_tensor_free(r);
  zorch_set_requires_grad(p, true);
  return p;
}

static double train_step(net *n, zorch_tensor *x, zorch_tensor *y) {
  zorch_tensor *h = zorch_linear(x, n->p[0], n->p[1]), *r = zorch_relu(h);
  zorch_tensor *o = zorch_linear(r, n->p[2], n->p[3]);
  zorch_tensor *loss = zorch_mse_loss(o, y, ZORCH_REDUCE_MEAN);
  double l = NAN;
  zorch_tensor_item(loss, &l);
  for (int i = 0; i < 4; i++) zorch_set_grad(n->p[i], NULL);
  if (zorch_backward(loss, NULL, false)) l = NAN;
  zorch_adam_opts o2 = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  n->step++;
  for (int i = 0; i < 4; i++)
    if (zorch_adam_step(n->p[i], zorch_grad(n->p[i]), n->m[i], n->v[i], NULL, n->step, &o2)) l = NAN;
  zorch_tensor *t[] = {h, r, o, loss};
  for (int i = 0; i < 4; i++) zorch_tensor_free(t[i]);
  return l;
}

int main(void) {
  zorch_generator *g = zorch_generator_new(3);
  zorch_tensor *X = zorch_randn(SHAPE(1024, 10), ZORCH_F32, CPU, g);
  zorch_tensor *W = zorch_randn(SHAPE(10, 2), ZORCH_F32, CPU, g);
  zorch_tensor *Y = zorch_matmul(X, W);
  net n = {{param(SHAPE(20, 10), g), param(SHAPE(20), g), param(SHAPE(2, 20), g), param(SHAPE(2), g)}, {0}, {0}, 0};
  for (int i = 0; i < 4; i++) {
    n.m[i] = zorch_zeros(zorch_tensor_ndim(n.p[i]), zorch_tensor_shape(n.p[i]), ZORCH_F32, CPU);
    n.v[i] = zorch_zeros(zorch_tensor_ndim(n.p[i]), zorch_tensor_shape(n.p[i]), ZORCH_F32, CPU);
  }
  double first = NAN, last = NAN;
  long rss_start = 0;
  const int steps = 20000;
  for (int s = 0; s < steps; s++) {
    int64_t off = (s * 64) % 1024;
    zorch_tensor *x = zorch_narrow(X, 0, off, 64), *y = zorch_narrow(Y, 0, off, 64);
    double l = train_step(&n, x, y);
    zorch_tensor_free(x);
    zorch_tensor_free(y);
    if (s == 0) first = l;
    if (s == 1000) rss_start = rss_kb();
    last = l;
    if (isnan(l)) break;
  }
  long rss_end = rss_kb();
  ok(!isnan(last) && last < first / 20, "the loss falls (%.4f -> %.6f)", first, last);
  /* sanitizers hold freed blocks in quarantine; they check leaks themselves */
  if (getenv("ZORCH_TEST_SANITIZED"))
    ok(1, "# SKIP resident memory is not meaningful under a sanitizer");
  else
    ok(rss_end - rss_start < 1024, "%d steps run in constant memory (RSS %ld kB -> %ld kB)", steps,
       rss_start, rss_end);
  for (int i = 0; i < 4; i++) {
    zorch_tensor_free(n.p[i]);
    zorch_tensor_free(n.m[i]);
    zorch_tensor_free(n.v[i]);
  }
  zorch_tensor_free(X);
  zorch_tensor_free(W);
  zorch_tensor_free(Y);
  zorch_generator_free(g);
  return done_testing();
}
