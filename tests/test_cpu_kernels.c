/* The CPU's fast kernels against double-precision references: the 16-bit GEMM
   (oneDNN's bf16 matmul where loaded, the float32 fallback otherwise, both
   checked), and the vectorised transformer kernels. */
#include "tap.h"

static double *values(zorch_tensor *t) {
  int64_t n = zorch_tensor_numel(t);
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (zorch_tensor_to_doubles(t, v, n)) {
    free(v);
    return NULL;
  }
  return v;
}

/* c (m, n) against op(a) op(b) (+ bias, relu) in double on the very 16-bit
   inputs; a is (m, k) or (k, m) when ta. Tolerance: the output's rounding to
   16 bits plus float32 accumulation over k terms. */
static bool gemm_close(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, zorch_tensor *bias,
                       bool ta, bool tb, bool relu, double rel) {
  int64_t m = zorch_tensor_shape(c)[0], n = zorch_tensor_shape(c)[1];
  int64_t k = zorch_tensor_shape(a)[ta ? 0 : 1];
  double *va = values(a), *vb = values(b), *vc = values(c), *vbias = bias ? values(bias) : NULL;
  bool good = va && vb && vc && (!bias || vbias);
  double worst = 0;
  for (int64_t i = 0; i < m && good; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = vbias ? vbias[j] : 0, mag = fabs(s);
      for (int64_t l = 0; l < k; l++) {
        double x = ta ? va[l * m + i] : va[i * k + l], y = tb ? vb[j * k + l] : vb[l * n + j];
        s += x * y;
        mag += fabs(x * y);
      }
      if (relu && !(s > 0)) s = 0;
      double err = fabs(vc[i * n + j] - s), tol = rel * fabs(s) + 1e-5 * mag + 1e-30;
      if (err / tol > worst) worst = err / tol;
    }
  if (worst > 1) printf("#   worst error %.3g of the tolerance\n", worst);
  free(va), free(vb), free(vc), free(vbias);
  return good && worst <= 1;
}

static void gemm16(zorch_generator *g, zorch_dtype dt, double rel) {
  const char *dn = zorch_dtype_name(dt);
  /* odd sizes, and each of the four transpose cases through views */
  int64_t sz[][3] = {{37, 65, 19}, {64, 64, 64}, {256, 128, 96}, {1, 300, 7}};
  for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
    for (int t = 0; t < 4; t++) {
      bool ta = t & 1, tb = t & 2;
      int64_t m = sz[s][0], k = sz[s][1], n = sz[s][2];
      zorch_tensor *a = ta ? zorch_randn(SHAPE(k, m), dt, CPU, g) : zorch_randn(SHAPE(m, k), dt, CPU, g);
      zorch_tensor *b = tb ? zorch_randn(SHAPE(n, k), dt, CPU, g) : zorch_randn(SHAPE(k, n), dt, CPU, g);
      zorch_tensor *av = ta ? zorch_transpose(a, 0, 1) : zorch_tensor_retain(a);
      zorch_tensor *bv = tb ? zorch_transpose(b, 0, 1) : zorch_tensor_retain(b);
      zorch_tensor *c = zorch_matmul(av, bv);
      ok(c && zorch_tensor_dtype(c) == dt && gemm_close(c, a, b, NULL, ta, tb, false, rel),
         "%s matmul %lldx%lldx%lld%s%s matches double", dn, (long long)m, (long long)k,
         (long long)n, ta ? " A^T" : "", tb ? " B^T" : "");
      zorch_tensor_free(a), zorch_tensor_free(b), zorch_tensor_free(av), zorch_tensor_free(bv);
      zorch_tensor_free(c);
    }
  /* linear: the bias and relu epilogues (weight (out, in) is B transposed) */
  for (int relu = 0; relu < 2; relu++) {
    zorch_tensor *x = zorch_randn(SHAPE(50, 70), dt, CPU, g), *w = zorch_randn(SHAPE(30, 70), dt, CPU, g);
    zorch_tensor *bias = zorch_randn(SHAPE(30), dt, CPU, g);
    zorch_tensor *y = zorch_linear_act(x, w, bias, relu ? ZORCH_ACT_RELU : ZORCH_ACT_NONE);
    ok(y && zorch_tensor_dtype(y) == dt && gemm_close(y, x, w, bias, false, true, relu, rel),
       "%s linear with bias%s matches double", dn, relu ? " and relu" : "");
    zorch_tensor_free(x), zorch_tensor_free(w), zorch_tensor_free(bias), zorch_tensor_free(y);
  }
}

int main(void) {
  zorch_generator *g = zorch_generator_new(7);
  printf("# BLAS: %s\n", zorch_blas_info());
  /* bf16 keeps 8 significant bits: one rounding of the output is 2^-9 */
  gemm16(g, ZORCH_BF16, 1.0 / 256);
  gemm16(g, ZORCH_F16, 1.0 / 2048);
  zorch_generator_free(g);
  return done_testing();
}
