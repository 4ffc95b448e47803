/* test_sgemm.c: the two float32 GEMM paths (oneDNN's matmul and OpenBLAS).
   The choice is made once per process, so the test runs itself again as a
   child under ZORCH_SGEMM=blas, ZORCH_SGEMM=dnnl and ZORCH_DNNL=0; each child
   checks matmul and linear (transposed, strided and odd shapes, bias, relu,
   more shapes than the primitive cache holds, 1 and 2 threads) against a
   double reference and prints its results; the parent turns them into TAP
   lines and checks that every path computes the same linear. */
#include <stdint.h>
#include <unistd.h>

#include "tap.h"

/* ---- the child --------------------------------------------------------------------- */

static int child_fails;
static void report(int cond, const char *what) {
  printf("R %d %s\n", cond, what);
  if (!cond) child_fails++;
}

static double lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

static zorch_tensor *rnd(int64_t r, int64_t c, uint64_t *s, double *keep) {
  double *v = malloc((size_t)(r * c > 0 ? r * c : 1) * sizeof(double));
  for (int64_t i = 0; i < r * c; i++) v[i] = lcg(s);
  if (keep) memcpy(keep, v, (size_t)(r * c) * sizeof(double));
  zorch_tensor *t = from_doubles(v, 2, (const int64_t[]){r, c}, ZORCH_F32);
  free(v);
  return t;
}

/* got (m, n) against op(A) op(B) (+ bias, relu) in double, each element within
   2^-20 of the sum of |products| (float32 rounding of k terms, any order). */
static int close_to(const zorch_tensor *got, const double *a, const double *b, const double *bias,
                    bool relu, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  if (!got || zorch_tensor_numel(got) != m * n) return 0;
  double *g = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
  int good = zorch_tensor_to_doubles(got, g, m * n) == ZORCH_OK;
  for (int64_t i = 0; i < m && good; i++)
    for (int64_t j = 0; j < n && good; j++) {
      double s = bias ? bias[j] : 0, mag = bias ? fabs(bias[j]) : 0;
      for (int64_t l = 0; l < k; l++) {
        double p = (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
        s += p, mag += fabs(p);
      }
      if (relu && !(s > 0)) s = 0;
      good = fabs(g[i * n + j] - s) <= 0x1p-20 * (mag + 1e-30) + 1e-30;
    }
  free(g);
  return good;
}

/* matmul of (m, k) and (k, n), each operand given transposed or not. */
static int check_mm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, uint64_t *s) {
  double *a = malloc((size_t)(m * k + 1) * sizeof(double)), *b = malloc((size_t)(k * n + 1) * sizeof(double));
  zorch_tensor *A = rnd(ta ? k : m, ta ? m : k, s, a), *B = rnd(tb ? n : k, tb ? k : n, s, b);
  zorch_tensor *At = ta ? zorch_transpose(A, 0, 1) : zorch_tensor_retain(A);
  zorch_tensor *Bt = tb ? zorch_transpose(B, 0, 1) : zorch_tensor_retain(B);
  zorch_tensor *C = zorch_matmul(At, Bt);
  int r = close_to(C, a, b, NULL, false, m, n, k, ta, tb);
  zorch_tensor_free(A), zorch_tensor_free(B), zorch_tensor_free(At), zorch_tensor_free(Bt);
  zorch_tensor_free(C), free(a), free(b);
  return r;
}

/* linear (rows, in) -> (rows, out) with bias, relu or none, forward. */
static int check_linear(int64_t rows, int64_t in, int64_t out, bool relu, uint64_t *s) {
  double *x = malloc((size_t)(rows * in + 1) * sizeof(double)), *w = malloc((size_t)(out * in + 1) * sizeof(double));
  double *bias = malloc((size_t)(out + 1) * sizeof(double));
  zorch_tensor *X = rnd(rows, in, s, x), *W = rnd(out, in, s, w), *B2 = rnd(1, out, s, bias);
  zorch_tensor *Bv = zorch_reshape(B2, 1, (const int64_t[]){out});
  zorch_tensor *Y = zorch_linear_act(X, W, Bv, relu ? ZORCH_ACT_RELU : ZORCH_ACT_NONE);
  int r = close_to(Y, x, w, bias, relu, rows, out, in, false, true);
  zorch_tensor_free(X), zorch_tensor_free(W), zorch_tensor_free(B2), zorch_tensor_free(Bv);
  zorch_tensor_free(Y), free(x), free(w), free(bias);
  return r;
}

/* A fixed linear's forward and gradients, summed, for the parent to compare. */
static void linear_sums(void) {
  uint64_t s = 7;
  zorch_tensor *X = rnd(96, 80, &s, NULL), *W = rnd(112, 80, &s, NULL), *B2 = rnd(1, 112, &s, NULL);
  zorch_tensor *Bv = zorch_reshape(B2, 1, (const int64_t[]){112});
  zorch_set_requires_grad(X, true), zorch_set_requires_grad(W, true), zorch_set_requires_grad(Bv, true);
  zorch_tensor *Y = zorch_linear(X, W, Bv), *Y2 = zorch_mul(Y, Y), *L = zorch_sum(Y2, 0, NULL, false);
  int good = L && zorch_backward(L, NULL, false) == ZORCH_OK;
  zorch_tensor *gx = zorch_grad(X), *gw = zorch_grad(W);
  zorch_tensor *sx = gx ? zorch_sum(gx, 0, NULL, false) : NULL, *sw = gw ? zorch_sum(gw, 0, NULL, false) : NULL;
  report(good && sx && sw, "linear forward and backward run");
  printf("S %.9g %.9g %.9g\n", good ? at(L, 0) : NAN, sx ? at(sx, 0) : NAN, sw ? at(sw, 0) : NAN);
  zorch_tensor *fr[] = {X, W, B2, Bv, Y, Y2, L, sx, sw}; /* gx, gw are borrowed */
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

static int child(void) {
  printf("I %s\n", zorch_blas_info());
  uint64_t s = 1;
  static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {64, 33, 17}, {17, 130, 65},
                                      {200, 96, 300}, {256, 128, 64}};
  char what[160];
  for (int th = 1; th <= 2; th++) {
    zorch_set_num_threads(th);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int t = 0; t < 4; t++) {
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        snprintf(what, sizeof what, "matmul %lldx%lldx%lld%s%s, %d thread(s)", (long long)m,
                 (long long)n, (long long)k, t & 1 ? " A^T" : "", t & 2 ? " B^T" : "", th);
        report(check_mm(m, n, k, t & 1, t & 2, &s), what);
      }
    snprintf(what, sizeof what, "linear 37x50->70 with bias and relu, %d thread(s)", th);
    report(check_linear(37, 50, 70, true, &s), what);
    snprintf(what, sizeof what, "linear 128x256->768 with bias, %d thread(s)", th);
    report(check_linear(128, 256, 768, false, &s), what);
  }
  /* more problems than the 64 primitives kept, each twice: evicted entries are
     built again and give the same results */
  int good = 1;
  for (int round = 0; round < 2; round++)
    for (int64_t m = 1; m <= 80 && good; m++) good = check_mm(m, 24, 16, false, true, &s);
  report(good, "80 shapes twice (past the primitive cache)");
  /* k = 0: zeros (no GEMM library is called) */
  zorch_tensor *A = zorch_zeros(SHAPE(4, 0), ZORCH_F32, CPU), *B = zorch_zeros(SHAPE(0, 3), ZORCH_F32, CPU);
  zorch_tensor *C = zorch_matmul(A, B);
  report(C && zorch_tensor_numel(C) == 12 && at(C, 0) == 0 && at(C, 11) == 0, "matmul with k = 0");
  zorch_tensor_free(A), zorch_tensor_free(B), zorch_tensor_free(C);
  zorch_set_num_threads(2);
  linear_sums();
  return child_fails ? 1 : 0;
}

/* ---- the parent -------------------------------------------------------------------- */

typedef struct {
  const char *name, *var, *val;
  char info[1024];
  double sums[3];
  int ran;
} path;

/* Each child gets the parent's environment with p's variable set: a
   sanitizer build tests oneDNN when run with ZORCH_DNNL=1. */
static void run_child(const char *self, path *p) {
  const char *dnnl = getenv("ZORCH_DNNL");
  char keep[16];
  snprintf(keep, sizeof keep, "%s", dnnl ? dnnl : "");
  unsetenv("ZORCH_SGEMM");
  setenv(p->var, p->val, 1);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "'%s' child", self);
  FILE *f = popen(cmd, "r");
  if (!ok(f != NULL, "%s: child started", p->name)) return;
  char line[1024];
  int lines = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (line[0] == 'R' && line[1] == ' ') {
      ok(line[2] == '1', "%s: %s", p->name, line + 4);
      lines++;
    } else if (line[0] == 'I' && line[1] == ' ') {
      snprintf(p->info, sizeof p->info, "%s", line + 2);
    } else if (line[0] == 'S' && line[1] == ' ') {
      p->ran = sscanf(line + 2, "%lf %lf %lf", &p->sums[0], &p->sums[1], &p->sums[2]) == 3;
    }
  }
  int rc = pclose(f);
  if (dnnl) setenv("ZORCH_DNNL", keep, 1);
  else unsetenv("ZORCH_DNNL");
  ok(rc == 0 && lines > 0 && p->ran, "%s: child ran every check (exit %d, %d results)", p->name, rc, lines);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    ok(0, "read /proc/self/exe");
    return done_testing();
  }
  self[n] = 0;
  path paths[3] = {{.name = "ZORCH_SGEMM=blas", .var = "ZORCH_SGEMM", .val = "blas"},
                   {.name = "ZORCH_SGEMM=dnnl", .var = "ZORCH_SGEMM", .val = "dnnl"},
                   {.name = "ZORCH_DNNL=0", .var = "ZORCH_DNNL", .val = "0"}};
  for (int i = 0; i < 3; i++) run_child(self, &paths[i]);
  /* what zorch info says: the forced choice, or why oneDNN is not used */
  bool have_dnnl = strstr(paths[1].info, "bf16 GEMM: oneDNN") != NULL;
  ok(strstr(paths[0].info, have_dnnl ? "fp32 GEMM: OpenBLAS (ZORCH_SGEMM=blas)" : "fp32 GEMM: OpenBLAS (") != NULL,
     "blas path named: %s", paths[0].info);
  ok(strstr(paths[2].info, "fp32 GEMM: OpenBLAS (oneDNN off: ZORCH_DNNL=0)") != NULL,
     "ZORCH_DNNL=0 named: %s", paths[2].info);
  ok(have_dnnl ? strstr(paths[1].info, "fp32 GEMM: oneDNN") != NULL
               : strstr(paths[1].info, "fp32 GEMM: OpenBLAS (") != NULL,
     "dnnl path %s: %s", have_dnnl ? "runs oneDNN" : "falls back to OpenBLAS, saying why", paths[1].info);
  /* every path computes the same linear, forward and backward */
  for (int i = 1; i < 3; i++)
    for (int j = 0; j < 3; j++)
      ok(paths[0].ran && paths[i].ran &&
             fabs(paths[i].sums[j] - paths[0].sums[j]) <= 1e-4 * fabs(paths[0].sums[j]),
         "%s agrees with OpenBLAS on sum %d: %.9g vs %.9g", paths[i].name, j, paths[i].sums[j],
         paths[0].sums[j]);
  return done_testing();
}
