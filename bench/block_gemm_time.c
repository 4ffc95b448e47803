/* block_gemm_time.c: the transformer block's 12 float32 GEMMs (the forward and
   the two backward products of its QKV, projection, MLP-in and MLP-out
   Linears, at C 256, T 128, B 16: 2048 rows) through zorch_matmul, with the
   operand layouts linear's forward and backward use. Prints each GEMM's best
   time of 7 rounds and their sum, in wall and process CPU milliseconds, for
   the GEMM path zorch picked (zorch_blas_info; ZORCH_SGEMM=blas|dnnl forces
   one). Usage: block_gemm_time THREADS */
#define BENCH_NAME "block_gemm_time"
#include "timing.h"

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  zorch_set_num_threads(threads);
  zorch_device cpu = {ZORCH_CPU, 0};
  zorch_generator *g = zorch_generator_new(3);
  const int64_t rows = 2048, c = 256;
  /* each Linear (in, out): x (rows, in), w (out, in), dy (rows, out) */
  static const char *const names[4] = {"qkv", "proj", "fc", "mproj"};
  const int64_t in[4] = {c, c, c, 4 * c}, out[4] = {3 * c, c, 4 * c, c};
  double wall_sum = 0, cpu_sum = 0, flops = 0;
  printf("# %s, %d thread(s)\n", zorch_blas_info(), threads);
  for (int l = 0; l < 4; l++) {
    zorch_tensor *x, *w, *dy;
    check(x = zorch_randn(SHAPE(rows, in[l]), ZORCH_F32, cpu, g));
    check(w = zorch_randn(SHAPE(out[l], in[l]), ZORCH_F32, cpu, g));
    check(dy = zorch_randn(SHAPE(rows, out[l]), ZORCH_F32, cpu, g));
    zorch_tensor *wt = zorch_transpose(w, 0, 1), *dyt = zorch_transpose(dy, 0, 1);
    check(wt), check(dyt);
    /* y = x w^T, dx = dy w, dw = dy^T x */
    zorch_tensor *ops[3][2] = {{x, wt}, {dy, w}, {dyt, x}};
    static const char *const what[3] = {"y = x w^T", "dx = dy w", "dw = dy^T x"};
    for (int p = 0; p < 3; p++) {
      double best_w = 1e30, best_c = 1e30;
      for (int r = 0; r < 8; r++) {
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        zorch_tensor *y = zorch_matmul(ops[p][0], ops[p][1]);
        check(y);
        double dw = clock_s(CLOCK_MONOTONIC) - w0, dc = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        zorch_tensor_free(y);
        if (r == 0) continue; /* the first builds the primitive */
        if (dw < best_w) best_w = dw;
        if (dc < best_c) best_c = dc;
      }
      double f = 2.0 * rows * (double)in[l] * (double)out[l];
      printf("%-6s %-12s %7.3f ms wall %7.3f ms cpu %6.1f GFLOP/s\n", names[l], what[p],
             best_w * 1e3, best_c * 1e3, f / best_w / 1e9);
      wall_sum += best_w, cpu_sum += best_c, flops += f;
    }
    zorch_tensor_free(x), zorch_tensor_free(w), zorch_tensor_free(dy);
    zorch_tensor_free(wt), zorch_tensor_free(dyt);
  }
  printf("{\"name\": \"block_gemms_t%d\", \"wall_ms\": %.3f, \"cpu_ms\": %.3f, \"gflop\": %.3f}\n",
         threads, wall_sum * 1e3, cpu_sum * 1e3, flops / 1e9);
  zorch_generator_free(g);
  return 0;
}
