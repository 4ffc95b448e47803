/* conv_time.c: CPU seconds (all threads together) and wall seconds per conv2d
   forward and backward step, the best of 5 rounds of 10 steps. CPU time is the
   work done, which a machine shared with other jobs disturbs less than wall
   time. bench/torch_conv_time.py measures PyTorch the same way.
   Usage: conv_time N C HW OUT K THREADS INPUT_GRAD (float32, padding K / 2). */
#define BENCH_NAME "conv_time"
#include "timing.h"

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: conv_time N C HW OUT K THREADS INPUT_GRAD\n");
    return 2;
  }
  int64_t n = atoll(argv[1]), c = atoll(argv[2]), hw = atoll(argv[3]), o = atoll(argv[4]),
          k = atoll(argv[5]);
  zorch_set_num_threads(atoi(argv[6]));
  zorch_device cpu = {ZORCH_CPU, 0};
  zorch_generator *g = zorch_generator_new(2);
  zorch_tensor *x, *w, *b;
  check(x = zorch_randn(SHAPE(n, c, hw, hw), ZORCH_F32, cpu, g));
  check(w = zorch_randn(SHAPE(o, c, k, k), ZORCH_F32, cpu, g));
  check(b = zorch_randn(SHAPE(o), ZORCH_F32, cpu, g));
  zorch_set_requires_grad(w, true), zorch_set_requires_grad(b, true);
  if (atoi(argv[7])) zorch_set_requires_grad(x, true);
  zorch_conv2d_opts op = {{1, 1}, {k / 2, k / 2}, {1, 1}, 1};
  double best_cpu = 1e30, best_wall = 1e30;
  for (int r = 0; r < 5; r++) {
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < 10; i++) {
      zorch_set_grad(x, NULL), zorch_set_grad(w, NULL), zorch_set_grad(b, NULL);
      zorch_tensor *y = zorch_conv2d(x, w, b, &op);
      check(y);
      zorch_tensor *l = zorch_sum(y, 0, NULL, false);
      check(l);
      if (zorch_backward(l, NULL, false)) check(NULL);
      zorch_tensor_free(y), zorch_tensor_free(l);
    }
    double dc = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 10, dw = (clock_s(CLOCK_MONOTONIC) - w0) / 10;
    if (dc < best_cpu) best_cpu = dc;
    if (dw < best_wall) best_wall = dw;
  }
  printf("zorch %s threads: n=%lld c=%lld hw=%lld o=%lld k=%lld: %.2f ms CPU, %.2f ms wall per step\n",
         argv[6], (long long)n, (long long)c, (long long)hw, (long long)o, (long long)k, best_cpu * 1e3,
         best_wall * 1e3);
  zorch_tensor_free(x), zorch_tensor_free(w), zorch_tensor_free(b);
  zorch_generator_free(g);
  return 0;
}
