/* mlp_demo.c: trains a two-layer MLP (10-64-2, ReLU) with Adam on a learnable
   synthetic regression task through zorch's C API, printing the loss as it
   falls. Run: make demo */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "zorch.h"

#define CHECK(x)                                                                 \
  do {                                                                           \
    if (!(x)) {                                                                  \
      fprintf(stderr, "mlp_demo: %s (line %d)\n", zorch_last_error(), __LINE__); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

static const zorch_device CPU = {ZORCH_CPU, 0};

/* A Linear layer's parameters, initialised as PyTorch does: U(-1/sqrt(in), 1/sqrt(in)). */
static zorch_tensor *uniform(int64_t rows, int64_t cols, double bound, zorch_generator *g) {
  int64_t shape[2] = {rows, cols};
  zorch_tensor *u = zorch_rand(cols ? 2 : 1, shape, ZORCH_F32, CPU, g);
  zorch_tensor *s = u ? zorch_mul_scalar(u, 2 * bound) : NULL;
  zorch_tensor *p = s ? zorch_add_scalar(s, -bound) : NULL;
  zorch_tensor_free(u);
  zorch_tensor_free(s);
  if (p) zorch_set_requires_grad(p, true);
  return p;
}

int main(void) {
  const int64_t n = 4096, in = 10, hid = 64, out = 2, batch = 64, epochs = 15;
  zorch_generator *g = zorch_generator_new(0);
  /* data: Y = tanh(X A) B, a target the network can learn */
  zorch_tensor *X = zorch_randn(2, (int64_t[]){n, in}, ZORCH_F32, CPU, g);
  zorch_tensor *A = zorch_randn(2, (int64_t[]){in, 8}, ZORCH_F32, CPU, g);
  zorch_tensor *B = zorch_randn(2, (int64_t[]){8, out}, ZORCH_F32, CPU, g);
  CHECK(X && A && B);
  zorch_tensor *XA = zorch_matmul(X, A), *T = XA ? zorch_tanh(XA) : NULL;
  zorch_tensor *Y = T ? zorch_matmul(T, B) : NULL;
  CHECK(Y);
  zorch_tensor *params[4] = {uniform(hid, in, 1 / sqrt((double)in), g), uniform(hid, 0, 1 / sqrt((double)in), g),
                             uniform(out, hid, 1 / sqrt((double)hid), g), uniform(out, 0, 1 / sqrt((double)hid), g)};
  zorch_tensor *m[4], *v[4];
  for (int i = 0; i < 4; i++) {
    CHECK(params[i]);
    m[i] = zorch_zeros(zorch_tensor_ndim(params[i]), zorch_tensor_shape(params[i]), ZORCH_F32, CPU);
    v[i] = zorch_zeros(zorch_tensor_ndim(params[i]), zorch_tensor_shape(params[i]), ZORCH_F32, CPU);
    CHECK(m[i] && v[i]);
  }
  zorch_adam_opts opt = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  int64_t step = 0;
  printf("training a 10-64-2 MLP with Adam on %lld samples (BLAS: %s)\n", (long long)n, zorch_blas_info());
  for (int64_t e = 1; e <= epochs; e++) {
    double total = 0;
    for (int64_t s = 0; s < n; s += batch) {
      zorch_tensor *x = zorch_narrow(X, 0, s, batch), *y = zorch_narrow(Y, 0, s, batch);
      zorch_tensor *h = zorch_linear(x, params[0], params[1]), *r = zorch_relu(h);
      zorch_tensor *o = zorch_linear(r, params[2], params[3]);
      zorch_tensor *loss = zorch_mse_loss(o, y, ZORCH_REDUCE_MEAN);
      CHECK(loss);
      for (int i = 0; i < 4; i++) zorch_set_grad(params[i], NULL);
      CHECK(zorch_backward(loss, NULL, false) == ZORCH_OK);
      step++;
      for (int i = 0; i < 4; i++)
        CHECK(zorch_adam_step(params[i], zorch_grad(params[i]), m[i], v[i], NULL, step, &opt) == ZORCH_OK);
      double l;
      CHECK(zorch_tensor_item(loss, &l) == ZORCH_OK);
      total += l;
      zorch_tensor *tmp[] = {x, y, h, r, o, loss};
      for (int i = 0; i < 6; i++) zorch_tensor_free(tmp[i]);
    }
    printf("epoch %2lld  loss %.6f\n", (long long)e, total / (double)(n / batch));
  }
  for (int i = 0; i < 4; i++) {
    zorch_tensor_free(params[i]);
    zorch_tensor_free(m[i]);
    zorch_tensor_free(v[i]);
  }
  zorch_tensor *rest[] = {X, A, B, XA, T, Y};
  for (int i = 0; i < 6; i++) zorch_tensor_free(rest[i]);
  zorch_generator_free(g);
  return 0;
}
