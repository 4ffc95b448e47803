/* The CPU's fast kernels against double-precision references: the 16-bit GEMM
   (oneDNN's bf16 matmul where loaded, the float32 fallback otherwise, both
   checked), and the vectorised transformer kernels. */
#include "tap.h"
#include "../ops/cpu/vec.h"
#include "../ops/cpu/vec512.h"

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

/* A float32 tensor of n values from f(i). */
static zorch_tensor *floats(int64_t n, float (*f)(int64_t)) {
  zorch_tensor *t = zorch_zeros(SHAPE(n), ZORCH_F32, CPU);
  float *p = zorch_tensor_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = f(i);
  return t;
}

/* -12 .. 12 in steps that hit many mantissas, and the special values */
#define SWEEP 400000
static float sweep_at(int64_t i) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 88.0f, -88.0f};
  if (i < 9) return special[i];
  return (float)(-12.0 + 24.0 * (double)(i - 9) / (double)(SWEEP - 10));
}

/* The references in double, in forms that do not cancel for x << 0:
   1 + erf(x/sqrt 2) = erfc(-x/sqrt 2), 1 + tanh u = 2 / (1 + e^{-2u}). */
static double gelu_ref(double x, bool tanh_form) {
  if (!tanh_form) return 0.5 * x * erfc(-x / sqrt(2.0));
  double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return x / (1 + exp(-2 * u));
}
static double gelu_grad_ref(double x, bool tanh_form) {
  if (!tanh_form) return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
  double k = 0.79788456080286535588, u = k * (x + 0.044715 * x * x * x);
  double e = exp(-2 * u), s = 1 / (1 + e), one_s = isinf(e) ? 1 : e * s;
  return s + 2 * x * s * one_s * k * (1 + 3 * 0.044715 * x * x);
}

/* Same NaN-ness, same infinity, or within rel * |ref| + abs. */
static bool near(double got, double ref, double rel, double abs_) {
  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
  if (isinf(ref) || isinf(got)) return got == ref;
  return fabs(got - ref) <= rel * fabs(ref) + abs_;
}

/* GELU, forward and backward, against double-precision libm over the sweep:
   within a few float32 roundings of the value, also for x << 0 where 1 + erf
   cancels (float32 libm code loses its relative accuracy there). */
static void gelu_sweep(bool tanh_form) {
  const char *name = tanh_form ? "gelu (tanh)" : "gelu";
  zorch_tensor *x = floats(SWEEP, sweep_at);
  zorch_set_requires_grad(x, true);
  zorch_tensor *y = zorch_gelu(x, tanh_form), *s = y ? zorch_sum(y, 0, NULL, false) : NULL;
  ok(s && !zorch_backward(s, NULL, false), "%s forward and backward over the sweep", name);
  zorch_tensor *g = zorch_grad(x);
  const float *yp = y ? zorch_tensor_data(y) : NULL, *gp = g ? zorch_tensor_data(g) : NULL;
  int64_t bad = 0, bad_g = 0;
  double worst = 0;
  for (int64_t i = 0; yp && gp && i < SWEEP; i++) {
    double xv = sweep_at(i), r = gelu_ref(xv, tanh_form), rg = gelu_grad_ref(xv, tanh_form);
    /* the (-inf) corner is 0 * inf, NaN in every form */
    if (isinf(xv) && xv < 0) r = NAN;
    /* the tanh form's u takes a few float32 roundings (relative 6e-8 each),
       which move e^{-2u} by 2|u| times that */
    double u = 0.79788456080286535588 * (xv + 0.044715 * xv * xv * xv);
    if (!near(yp[i], r, tanh_form ? 5e-7 + 5e-7 * fabs(u) : 5e-7, 1e-37) && bad++ < 3)
      printf("#   at %.9g: %.9g, double %.9g\n", xv, yp[i], r);
    if (isfinite(xv) && !near(gp[i], rg, 5e-7, 1e-7) && bad_g++ < 3)
      printf("#   gradient at %.9g: %.9g, double %.9g\n", xv, gp[i], rg);
    if (isfinite(r) && fabs(r) > 1e-3) {
      double e = fabs(yp[i] - r) / fabs(r);
      if (e > worst) worst = e;
    }
  }
  printf("# %s: worst relative error %.3g where |gelu| > 1e-3\n", name, worst);
  ok(yp && bad == 0, "%s matches double-precision libm (%lld off)", name, (long long)bad);
  ok(gp && bad_g == 0, "%s gradient matches double-precision libm (%lld off)", name, (long long)bad_g);
  zorch_tensor_free(x), zorch_tensor_free(y), zorch_tensor_free(s);
}

static float randish(int64_t i) { return (float)(sin((double)i * 12.9898) * 8.0); }

/* softmax and log_softmax over rows against double, with a NaN row and an
   all -inf row, which come out NaN as before. */
static void softmax_rows(void) {
  int64_t rows = 70, c = 1000;
  zorch_tensor *x = floats(rows * c, randish), *x2 = zorch_reshape(x, 2, (const int64_t[]){rows, c});
  float *xp = zorch_tensor_data(x2);
  xp[3 * c + 17] = NAN;
  for (int64_t j = 0; j < c; j++) xp[5 * c + j] = -INFINITY;
  xp[7 * c + 3] = INFINITY;
  for (int lg = 0; lg < 2; lg++) {
    zorch_tensor *y = lg ? zorch_log_softmax(x2, -1) : zorch_softmax(x2, -1);
    const float *yp = y ? zorch_tensor_data(y) : NULL;
    int64_t bad = 0;
    for (int64_t r = 0; yp && r < rows; r++) {
      double mx = -INFINITY, sum = 0;
      bool nan = false;
      for (int64_t j = 0; j < c; j++) {
        nan |= isnan(xp[r * c + j]);
        if (xp[r * c + j] > mx) mx = xp[r * c + j];
      }
      for (int64_t j = 0; j < c; j++) sum += exp(xp[r * c + j] - mx);
      for (int64_t j = 0; j < c; j++) {
        double ref = nan ? NAN : lg ? xp[r * c + j] - mx - log(sum) : exp(xp[r * c + j] - mx) / sum;
        if (!near(yp[r * c + j], ref, 1e-6, lg ? 2e-6 : 1e-12)) bad++;
      }
    }
    ok(yp && bad == 0, "%s over rows of %lld matches double (%lld off)", lg ? "log_softmax" : "softmax",
       (long long)c, (long long)bad);
    zorch_tensor_free(y);
  }
  zorch_tensor_free(x), zorch_tensor_free(x2);
}

static float offset_noise(int64_t i) { return 1000.0f + (float)sin((double)i * 0.001) + 1e-3f * (float)(i % 7); }

/* The float32 sum of 1e7 values (a large offset, where a single float running
   sum would be off by percents) against double, and the same on 1 and 2 threads. */
static void sum_precision(void) {
  int64_t n = 10000000;
  zorch_tensor *x = floats(n, offset_noise);
  const float *xp = zorch_tensor_data(x);
  double ref = 0;
  for (int64_t i = 0; i < n; i++) ref += xp[i];
  double got[2];
  for (int th = 1; th <= 2; th++) {
    zorch_set_num_threads(th);
    zorch_tensor *s = zorch_sum(x, 0, NULL, false);
    double v = NAN;
    if (s) zorch_tensor_to_doubles(s, &v, 1);
    got[th - 1] = v;
    zorch_tensor_free(s);
  }
  zorch_set_num_threads(0);
  printf("# sum of 1e7: %.10g, double %.10g, relative error %.3g\n", got[0], ref, fabs(got[0] - ref) / ref);
  ok(fabs(got[0] - ref) <= 1e-7 * fabs(ref), "float32 sum of 1e7 within 1e-7 of double");
  ok(got[0] == got[1], "the sum is the same on 1 and 2 threads");
  zorch_tensor *m = zorch_mean(x, 0, NULL, false);
  double mv = NAN;
  if (m) zorch_tensor_to_doubles(m, &mv, 1);
  ok(fabs(mv - ref / (double)n) <= 1e-6 * fabs(ref / (double)n), "float32 mean of 1e7 near double");
  zorch_tensor_free(m), zorch_tensor_free(x);
}

/* layer norm over rows of 1024 (with an offset, against cancellation) vs double. */
static void layer_norm_rows(void) {
  int64_t rows = 50, c = 1024;
  zorch_tensor *x = floats(rows * c, offset_noise), *x2 = zorch_reshape(x, 2, (const int64_t[]){rows, c});
  zorch_tensor *w = floats(c, randish), *b = floats(c, randish);
  const float *xp = zorch_tensor_data(x2), *wp = zorch_tensor_data(w), *bp = zorch_tensor_data(b);
  for (int aff = 0; aff < 2; aff++) {
    zorch_tensor *y = zorch_layer_norm(x2, 1, aff ? w : NULL, aff ? b : NULL, 1e-5);
    const float *yp = y ? zorch_tensor_data(y) : NULL;
    int64_t bad = 0;
    for (int64_t r = 0; yp && r < rows; r++) {
      double s = 0, ss = 0;
      for (int64_t j = 0; j < c; j++) s += xp[r * c + j];
      double mu = s / (double)c;
      for (int64_t j = 0; j < c; j++) ss += (xp[r * c + j] - mu) * (xp[r * c + j] - mu);
      double rs = 1 / sqrt(ss / (double)c + 1e-5);
      for (int64_t j = 0; j < c; j++) {
        double ref = (xp[r * c + j] - mu) * rs;
        if (aff) ref = ref * wp[j] + bp[j];
        if (!near(yp[r * c + j], ref, 1e-5, 1e-4) && bad++ < 3)
          printf("#   row %lld col %lld: %.9g, double %.9g\n", (long long)r, (long long)j,
                 yp[r * c + j], ref);
      }
    }
    ok(yp && bad == 0, "layer_norm%s over rows of 1024 matches double (%lld off)",
       aff ? " with weight and bias" : "", (long long)bad);
    zorch_tensor_free(y);
  }
  zorch_tensor_free(x), zorch_tensor_free(x2), zorch_tensor_free(w), zorch_tensor_free(b);
}

/* Bitwise equality of two tensors' values (as doubles; NaN equal to NaN). */
static bool same_values(zorch_tensor *a, zorch_tensor *b) {
  if (!a || !b || zorch_tensor_numel(a) != zorch_tensor_numel(b)) return false;
  double *va = values(a), *vb = values(b);
  bool same = va && vb;
  for (int64_t i = 0; same && i < zorch_tensor_numel(a); i++)
    same = va[i] == vb[i] || (isnan(va[i]) && isnan(vb[i]));
  free(va), free(vb);
  return same;
}

/* 16-bit elementwise ops run a block at a time in float32 registers: the same
   values as converting the whole tensors to float32 and rounding the result
   once, for contiguous, transposed and broadcast operands, and comparisons. */
static void elementwise16(zorch_generator *g, zorch_dtype dt) {
  const char *dn = zorch_dtype_name(dt);
  zorch_tensor *a = zorch_randn(SHAPE(300, 701), dt, CPU, g), *b = zorch_randn(SHAPE(701, 300), dt, CPU, g);
  zorch_tensor *row = zorch_randn(SHAPE(701), dt, CPU, g);
  zorch_tensor *bt = zorch_transpose(b, 0, 1);
  zorch_tensor *af = zorch_to_dtype(a, ZORCH_F32), *btf = zorch_to_dtype(bt, ZORCH_F32);
  zorch_tensor *rowf = zorch_to_dtype(row, ZORCH_F32);
  zorch_tensor *sc = zorch_randn(0, NULL, dt, CPU, g), *scf = zorch_to_dtype(sc, ZORCH_F32);
  for (int k = 0; k < 8; k++) {
    static const char *const what[] = {"gelu", "gelu (tanh)", "exp", "a + b^T", "a * row", "a < b^T",
                                       "a * scalar", "scalar - a"};
    zorch_tensor *h = NULL, *f = NULL, *fr = NULL;
    switch (k) {
      case 0: h = zorch_gelu(a, false), f = zorch_gelu(af, false); break;
      case 1: h = zorch_gelu(a, true), f = zorch_gelu(af, true); break;
      case 2: h = zorch_exp(a), f = zorch_exp(af); break;
      case 3: h = zorch_add(a, bt), f = zorch_add(af, btf); break;
      case 4: h = zorch_mul(a, row), f = zorch_mul(af, rowf); break;
      case 5: h = zorch_lt(a, bt), f = zorch_lt(af, btf); break;
      case 6: h = zorch_mul(a, sc), f = zorch_mul(af, scf); break; /* a broadcast operand */
      case 7: h = zorch_sub(sc, a), f = zorch_sub(scf, af); break;
    }
    fr = k == 5 ? zorch_tensor_retain(f) : zorch_to_dtype(f, dt);
    ok(h && zorch_tensor_dtype(h) == zorch_tensor_dtype(fr) && same_values(h, fr),
       "%s %s equals the float32 result rounded once", dn, what[k]);
    zorch_tensor_free(h), zorch_tensor_free(f), zorch_tensor_free(fr);
  }
  /* the MSE loss's gradient, 2/N (a - b) in one pass: the float32 product of the
     16-bit difference, rounded once */
  zorch_tensor *bb = zorch_contiguous(bt), *d = zorch_sub(a, bb), *df = zorch_to_dtype(d, ZORCH_F32);
  zorch_tensor *want = NULL, *wf = zorch_mul_scalar(df, 2.0 / (300 * 701));
  want = zorch_to_dtype(wf, dt);
  zorch_set_requires_grad(a, true);
  zorch_tensor *loss = zorch_mse_loss(a, bb, ZORCH_REDUCE_MEAN);
  ok(loss && !zorch_backward(loss, NULL, false) && zorch_grad(a) && same_values(zorch_grad(a), want),
     "%s mse_loss gradient equals the float32 product rounded once", dn);
  zorch_set_requires_grad(a, false);
  zorch_set_grad(a, NULL);
  zorch_tensor *fr[] = {a, b, row, bt, af, btf, rowf, sc, scf, bb, d, df, want, wf, loss};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

/* The 16-bit sums, softmax, log_softmax, layer norm and nll read and write 16
   bits in place: the very values of converting to float32, computing there and
   rounding the result once. Their gradients (the fused softmax backward, layer
   norm's, cross entropy's) against double on the same 16-bit values. */
static void rows16(zorch_generator *g, zorch_dtype dt, int64_t rows, int64_t c) {
  const char *dn = zorch_dtype_name(dt);
  double one = dt == ZORCH_BF16 ? 1.0 / 128 : 1.0 / 1024; /* two roundings */
  zorch_tensor *x = zorch_randn(SHAPE(rows, c), dt, CPU, g), *xf = zorch_to_dtype(x, ZORCH_F32);
  zorch_tensor *w = zorch_randn(SHAPE(c), dt, CPU, g), *b = zorch_randn(SHAPE(c), dt, CPU, g);
  zorch_tensor *wf = zorch_to_dtype(w, ZORCH_F32), *bf = zorch_to_dtype(b, ZORCH_F32);
  int d0 = 0, d1 = 1;
  for (int k = 0; k < 8; k++) {
    static const char *const what[] = {"softmax", "log_softmax", "sum", "sum over dim 1",
                                       "sum over dim 0", "mean over dim 1", "layer_norm",
                                       "layer_norm without affine"};
    zorch_tensor *h = NULL, *f = NULL, *fr = NULL;
    switch (k) {
      case 0: h = zorch_softmax(x, -1), f = zorch_softmax(xf, -1); break;
      case 1: h = zorch_log_softmax(x, -1), f = zorch_log_softmax(xf, -1); break;
      case 2: h = zorch_sum(x, 0, NULL, false), f = zorch_sum(xf, 0, NULL, false); break;
      case 3: h = zorch_sum(x, 1, &d1, false), f = zorch_sum(xf, 1, &d1, false); break;
      case 4: h = zorch_sum(x, 1, &d0, true), f = zorch_sum(xf, 1, &d0, true); break;
      case 5: h = zorch_mean(x, 1, &d1, false), f = zorch_mean(xf, 1, &d1, false); break;
      case 6: h = zorch_layer_norm(x, 1, w, b, 1e-5), f = zorch_layer_norm(xf, 1, wf, bf, 1e-5); break;
      case 7: h = zorch_layer_norm(x, 1, NULL, NULL, 1e-5), f = zorch_layer_norm(xf, 1, NULL, NULL, 1e-5); break;
    }
    fr = f ? zorch_to_dtype(f, dt) : NULL;
    ok(h && zorch_tensor_dtype(h) == dt && same_values(h, fr), "%s %s equals the float32 result rounded once",
       dn, what[k]);
    zorch_tensor_free(h), zorch_tensor_free(f), zorch_tensor_free(fr);
  }
  /* the whole sum on 1 and 2 threads */
  zorch_tensor *s1 = NULL, *s2 = NULL;
  zorch_set_num_threads(1);
  s1 = zorch_sum(x, 0, NULL, false);
  zorch_set_num_threads(2);
  s2 = zorch_sum(x, 0, NULL, false);
  zorch_set_num_threads(0);
  ok(same_values(s1, s2), "%s sum is the same on 1 and 2 threads", dn);
  zorch_tensor_free(s1), zorch_tensor_free(s2);

  /* cross entropy: log_softmax in 16 bits, nll on its values in float32 */
  zorch_tensor *t = zorch_randint(0, c, SHAPE(rows), ZORCH_I64, CPU, g);
  zorch_tensor *lp = zorch_log_softmax(x, -1), *lpf = lp ? zorch_to_dtype(lp, ZORCH_F32) : NULL;
  zorch_tensor *ce = zorch_cross_entropy(x, t, ZORCH_REDUCE_MEAN, -100);
  zorch_tensor *cef = lpf ? zorch_nll_loss(lpf, t, ZORCH_REDUCE_MEAN, -100) : NULL;
  zorch_tensor *cer = cef ? zorch_to_dtype(cef, dt) : NULL;
  ok(ce && zorch_tensor_dtype(ce) == dt && same_values(ce, cer),
     "%s cross_entropy equals nll over its float32 log-probabilities, rounded once", dn);
  zorch_tensor *fr0[] = {lp, lpf, ce, cef, cer};
  for (size_t i = 0; i < 5; i++) zorch_tensor_free(fr0[i]);

  /* gradients: of sum(softmax(x) * r), sum(log_softmax(x) * r), cross entropy
     and sum(layer_norm(x) * r), against double on the 16-bit values */
  zorch_tensor *r = zorch_randn(SHAPE(rows, c), dt, CPU, g);
  double *rv = values(r), *xv = values(x), *wv = values(w);
  int64_t *tv = zorch_tensor_data(t);
  for (int k = 0; k < 4; k++) {
    static const char *const what[] = {"softmax", "log_softmax", "cross_entropy", "layer_norm"};
    zorch_tensor *xl = zorch_detach(x);
    zorch_set_requires_grad(xl, true);
    zorch_tensor *y = k == 0 ? zorch_softmax(xl, -1) : k == 1 ? zorch_log_softmax(xl, -1)
                    : k == 2 ? zorch_cross_entropy(xl, t, ZORCH_REDUCE_SUM, -100)
                             : zorch_layer_norm(xl, 1, w, NULL, 1e-5);
    zorch_tensor *yr = k == 2 ? zorch_tensor_retain(y) : zorch_mul(y, r);
    zorch_tensor *l = k == 2 ? zorch_tensor_retain(y) : zorch_sum(yr, 0, NULL, false);
    bool run = l && !zorch_backward(l, NULL, false);
    zorch_tensor *gx = zorch_grad(xl);
    double *gv = gx && zorch_tensor_dtype(gx) == dt ? values(gx) : NULL;
    /* the backward reads the 16-bit (log-)probabilities */
    zorch_tensor *lsm = k == 2 ? zorch_log_softmax(x, -1) : NULL;
    double *yv = k < 2 && y ? values(y) : k == 2 && lsm ? values(lsm) : NULL;
    zorch_tensor_free(lsm);
    int64_t bad = 0;
    for (int64_t i = 0; gv && i < rows; i++) {
      const double *xr = xv + i * c, *gr = rv + i * c, *gg = gv + i * c;
      double mx = -INFINITY, se = 0, s = 0, mu = 0, var = 0;
      for (int64_t j = 0; j < c; j++) mx = xr[j] > mx ? xr[j] : mx;
      for (int64_t j = 0; j < c; j++) se += exp(xr[j] - mx), mu += xr[j];
      mu /= (double)c;
      for (int64_t j = 0; j < c; j++) var += (xr[j] - mu) * (xr[j] - mu);
      double rs = 1 / sqrt(var / (double)c + 1e-5), s1 = 0, s2 = 0, scale = 0;
      if (k == 0)
        for (int64_t j = 0; j < c; j++) s += gr[j] * yv[i * c + j];
      if (k == 1)
        for (int64_t j = 0; j < c; j++) s += gr[j];
      if (k == 3)
        for (int64_t j = 0; j < c; j++) {
          double gh = gr[j] * wv[j];
          s1 += gh, s2 += gh * (xr[j] - mu) * rs;
        }
      for (int64_t j = 0; j < c; j++) {
        double ref;
        if (k == 0) ref = yv[i * c + j] * (gr[j] - s);
        else if (k == 1) ref = gr[j] - exp(yv[i * c + j]) * s;
        else if (k == 2) ref = exp(yv[i * c + j]) - (j == tv[i] ? 1.0 : 0.0);
        else ref = rs * (gr[j] * wv[j] - s1 / (double)c - (xr[j] - mu) * rs * s2 / (double)c);
        scale = fabs(ref) > scale ? fabs(ref) : scale;
        if (!near(gg[j], ref, one, one * (k == 3 ? 0.05 : 0.01)) && bad++ < 3)
          printf("#   %s row %lld col %lld: %.6g, double %.6g\n", what[k], (long long)i, (long long)j,
                 gg[j], ref);
      }
    }
    ok(run && gv && bad == 0, "%s %s gradient in 16 bits matches double (%lld off)", dn, what[k],
       (long long)bad);
    free(gv), free(yv);
    zorch_tensor *fr1[] = {xl, y, yr, l}; /* gx is borrowed */
    for (size_t i = 0; i < 4; i++) zorch_tensor_free(fr1[i]);
  }
  free(rv), free(xv), free(wv);
  zorch_tensor *fr[] = {x, xf, w, b, wf, bf, t, r};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

/* The float32 layer norm backward (lanes per row, columns in blocks) against
   double, and its weight gradient the same on 1 and 2 threads. */
static void layer_norm_bwd_rows(zorch_generator *g) {
  int64_t rows = 300, c = 700; /* not a multiple of 16 or 64 */
  zorch_tensor *x0 = zorch_randn(SHAPE(rows, c), ZORCH_F32, CPU, g), *x = zorch_add_scalar(x0, 5);
  zorch_tensor *w = zorch_randn(SHAPE(c), ZORCH_F32, CPU, g), *b = zorch_randn(SHAPE(c), ZORCH_F32, CPU, g);
  zorch_tensor *r = zorch_randn(SHAPE(rows, c), ZORCH_F32, CPU, g);
  zorch_set_requires_grad(x, true), zorch_set_requires_grad(w, true), zorch_set_requires_grad(b, true);
  double *gw1 = NULL;
  for (int th = 1; th <= 2; th++) {
    zorch_set_num_threads(th);
    zorch_tensor *y = zorch_layer_norm(x, 1, w, b, 1e-5), *yr = zorch_mul(y, r);
    zorch_tensor *l = zorch_sum(yr, 0, NULL, false);
    bool run = l && !zorch_backward(l, NULL, false);
    double *gx = run ? values(zorch_grad(x)) : NULL, *gw = run ? values(zorch_grad(w)) : NULL;
    double *gb = run ? values(zorch_grad(b)) : NULL;
    const float *xp = zorch_tensor_data(x), *wp = zorch_tensor_data(w), *rp = zorch_tensor_data(r);
    double *aw = calloc((size_t)c, sizeof(double)), *ab = calloc((size_t)c, sizeof(double));
    int64_t bad = 0;
    for (int64_t i = 0; gx && i < rows; i++) {
      const float *xr = xp + i * c, *gr = rp + i * c;
      double mu = 0, var = 0, s1 = 0, s2 = 0;
      for (int64_t j = 0; j < c; j++) mu += xr[j];
      mu /= (double)c;
      for (int64_t j = 0; j < c; j++) var += (xr[j] - mu) * (xr[j] - mu);
      double rs = 1 / sqrt(var / (double)c + 1e-5);
      for (int64_t j = 0; j < c; j++) {
        double gh = (double)gr[j] * wp[j];
        s1 += gh, s2 += gh * (xr[j] - mu) * rs;
        aw[j] += (double)gr[j] * (xr[j] - mu) * rs, ab[j] += gr[j];
      }
      for (int64_t j = 0; j < c; j++) {
        double ref = rs * ((double)gr[j] * wp[j] - s1 / (double)c - (xr[j] - mu) * rs * s2 / (double)c);
        if (!near(gx[i * c + j], ref, 1e-5, 1e-5)) bad++;
      }
    }
    for (int64_t j = 0; gw && j < c; j++)
      if (!near(gw[j], aw[j], 1e-5, 1e-4) || !near(gb[j], ab[j], 1e-6, 1e-5)) bad++;
    ok(run && gx && bad == 0, "float32 layer_norm backward matches double on %d thread%s (%lld off)", th,
       th > 1 ? "s" : "", (long long)bad);
    if (th == 1) {
      gw1 = gw;
      gw = NULL;
    } else {
      bool same = gw1 && gw;
      for (int64_t j = 0; same && j < c; j++) same = gw1[j] == gw[j];
      ok(same, "its weight gradient is the same on 1 and 2 threads");
    }
    free(gx), free(gw), free(gb), free(aw), free(ab);
    zorch_set_grad(x, NULL), zorch_set_grad(w, NULL), zorch_set_grad(b, NULL);
    zorch_tensor_free(y), zorch_tensor_free(yr), zorch_tensor_free(l);
  }
  zorch_set_num_threads(0);
  free(gw1);
  zorch_tensor *fr[] = {x0, x, w, b, r};
  for (size_t i = 0; i < 5; i++) zorch_tensor_free(fr[i]);
}

/* linear with a GELU (one node) against linear then gelu (two): the same
   values and gradients, bit for bit, in float32 and bf16, both forms. */
static void linear_gelu(zorch_generator *g) {
  for (int d = 0; d < 2; d++) {
    zorch_dtype dt = d ? ZORCH_BF16 : ZORCH_F32;
    zorch_tensor *x = zorch_randn(SHAPE(4, 33, 40), dt, CPU, g), *w = zorch_randn(SHAPE(70, 40), dt, CPU, g);
    zorch_tensor *b = zorch_randn(SHAPE(70), dt, CPU, g), *r = zorch_randn(SHAPE(4, 33, 70), dt, CPU, g);
    zorch_tensor *ps[3] = {x, w, b};
    for (int i = 0; i < 3; i++) zorch_set_requires_grad(ps[i], true);
    for (int t = 0; t < 2; t++) {
      zorch_tensor *y[2] = {NULL, NULL}, *gr[2][3];
      for (int fused = 0; fused < 2; fused++) {
        zorch_tensor *lin = fused ? NULL : zorch_linear(x, w, b);
        y[fused] = fused ? zorch_linear_act(x, w, b, t ? ZORCH_ACT_GELU_TANH : ZORCH_ACT_GELU)
                         : zorch_gelu(lin, t);
        zorch_tensor *yr = y[fused] ? zorch_mul(y[fused], r) : NULL, *l = yr ? zorch_sum(yr, 0, NULL, false) : NULL;
        if (!l || zorch_backward(l, NULL, false)) gr[fused][0] = gr[fused][1] = gr[fused][2] = NULL;
        for (int i = 0; i < 3 && l; i++) {
          gr[fused][i] = zorch_tensor_retain(zorch_grad(ps[i]));
          zorch_set_grad(ps[i], NULL);
        }
        zorch_tensor_free(lin), zorch_tensor_free(yr), zorch_tensor_free(l);
      }
      bool same = same_values(y[0], y[1]) && !strcmp(zorch_grad_fn_name(y[1]), "LinearGeluBackward");
      for (int i = 0; i < 3; i++) same = same && same_values(gr[0][i], gr[1][i]);
      ok(same, "%s linear with gelu%s equals linear then gelu (values and gradients)",
         zorch_dtype_name(dt), t ? " (tanh)" : "");
      for (int f = 0; f < 2; f++) {
        zorch_tensor_free(y[f]);
        for (int i = 0; i < 3; i++) zorch_tensor_free(gr[f][i]);
      }
    }
    zorch_tensor *fr[] = {x, w, b, r};
    for (int i = 0; i < 4; i++) zorch_tensor_free(fr[i]);
  }
}

/* The fused float32 softmax backward against double. */
static void softmax_bwd_f32(zorch_generator *g) {
  int64_t rows = 64, c = 1000;
  zorch_tensor *x = zorch_randn(SHAPE(rows, c), ZORCH_F32, CPU, g), *r = zorch_randn(SHAPE(rows, c), ZORCH_F32, CPU, g);
  zorch_set_requires_grad(x, true);
  for (int lg = 0; lg < 2; lg++) {
    zorch_tensor *y = lg ? zorch_log_softmax(x, -1) : zorch_softmax(x, -1), *yr = zorch_mul(y, r);
    zorch_tensor *l = zorch_sum(yr, 0, NULL, false);
    bool run = l && !zorch_backward(l, NULL, false);
    zorch_tensor *gx = zorch_grad(x);
    const float *gp = gx ? zorch_tensor_data(gx) : NULL, *yp = zorch_tensor_data(y), *rp = zorch_tensor_data(r);
    int64_t bad = 0;
    for (int64_t i = 0; gp && i < rows; i++) {
      double s = 0;
      for (int64_t j = 0; j < c; j++) s += lg ? rp[i * c + j] : (double)rp[i * c + j] * yp[i * c + j];
      for (int64_t j = 0; j < c; j++) {
        double ref = lg ? rp[i * c + j] - exp(yp[i * c + j]) * s : yp[i * c + j] * (rp[i * c + j] - s);
        if (!near(gp[i * c + j], ref, 1e-5, 1e-6)) bad++;
      }
    }
    ok(run && bad == 0, "float32 %s backward (fused rows) matches double (%lld off)",
       lg ? "log_softmax" : "softmax", (long long)bad);
    zorch_set_grad(x, NULL);
    zorch_tensor_free(y), zorch_tensor_free(yr), zorch_tensor_free(l);
  }
  zorch_tensor_free(x), zorch_tensor_free(r);
}

/* AdamW on float32 (the vectorised path) against the update written out element
   by element in the same arithmetic: equal to the bit, across chunk edges and
   a ragged tail, on 1 and 2 threads, for no decay, L2 decay and decoupled decay. */
static float adam_g(int64_t i) { return (float)sin((double)i * 0.37) * 0.01f; }
static void adam_f32_exact(void) {
  const int64_t n = 3 * 4096 + 77;
  for (int form = 0; form < 3; form++) {
    for (int th = 1; th <= 2; th++) {
      zorch_set_num_threads(th);
      zorch_adam_opts o = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = form ? 0.1 : 0, .decoupled = form == 2};
      zorch_tensor *p = floats(n, randish), *g = floats(n, adam_g), *m = floats(n, adam_g), *v = floats(n, adam_g);
      float *P = zorch_tensor_data(p), *G = zorch_tensor_data(g), *M = zorch_tensor_data(m), *V = zorch_tensor_data(v);
      float *ep = malloc(sizeof(float) * (size_t)n), *em = malloc(sizeof(float) * (size_t)n),
            *ev = malloc(sizeof(float) * (size_t)n);
      for (int64_t i = 0; i < n; i++) V[i] = V[i] * V[i]; /* (a second moment is not negative) */
      const int64_t step = 3;
      double bc1 = 1 - pow(o.beta1, step), bc2 = 1 - pow(o.beta2, step);
      const float b1w = (float)(1 - o.beta1), b2 = (float)o.beta2, b2w = (float)(1 - o.beta2);
      const float wd = (float)o.weight_decay, decay = (float)(1 - o.lr * o.weight_decay);
      const float step_size = (float)(o.lr / bc1), rbc2s = 1.0f / (float)sqrt(bc2), eps = (float)o.eps;
      for (int64_t i = 0; i < n; i++) {
        float gi = G[i], pi = P[i];
        if (form == 1) gi = gi + wd * pi;
        if (form == 2) pi = pi * decay;
        float mi = M[i] + b1w * (gi - M[i]), vi = V[i] * b2 + b2w * gi * gi;
        float denom = sqrtf(vi) * rbc2s + eps;
        ep[i] = pi - step_size * (mi / denom), em[i] = mi, ev[i] = vi;
      }
      zorch_status st = zorch_adam_step(p, g, m, v, NULL, step, &o);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; i++) bad += P[i] != ep[i] || M[i] != em[i] || V[i] != ev[i];
      ok(!st && bad == 0, "float32 AdamW (%s), %d thread%s: equal to the elementwise update (%lld off)",
         form == 0 ? "no decay" : form == 1 ? "L2 decay" : "decoupled decay", th, th > 1 ? "s" : "", (long long)bad);
      free(ep), free(em), free(ev);
      zorch_tensor_free(p), zorch_tensor_free(g), zorch_tensor_free(m), zorch_tensor_free(v);
    }
  }
  zorch_set_num_threads(0);
}

/* The 16-bit layer norm's weight and bias gradients (column sums over the
   rows, in double) against double on the 16-bit values: within one 16-bit
   rounding, plus 1e-4 of the sum of the terms' magnitudes. */
static void layer_norm16_wb(zorch_generator *g, zorch_dtype dt, int64_t rows, int64_t c) {
  double one = dt == ZORCH_BF16 ? 1.0 / 128 : 1.0 / 1024;
  zorch_tensor *x = zorch_randn(SHAPE(rows, c), dt, CPU, g), *r = zorch_randn(SHAPE(rows, c), dt, CPU, g);
  zorch_tensor *w = zorch_randn(SHAPE(c), dt, CPU, g), *b = zorch_randn(SHAPE(c), dt, CPU, g);
  zorch_set_requires_grad(w, true), zorch_set_requires_grad(b, true);
  zorch_tensor *y = zorch_layer_norm(x, 1, w, b, 1e-5), *yr = y ? zorch_mul(y, r) : NULL;
  zorch_tensor *l = yr ? zorch_sum(yr, 0, NULL, false) : NULL;
  bool run = l && !zorch_backward(l, NULL, false);
  zorch_tensor *gw = run ? zorch_grad(w) : NULL, *gb = run ? zorch_grad(b) : NULL;
  double *xv = values(x), *rv = values(r), *gwv = gw ? values(gw) : NULL, *gbv = gb ? values(gb) : NULL;
  double *mu = calloc((size_t)rows, sizeof *mu), *rs = calloc((size_t)rows, sizeof *rs);
  int64_t bad = 0;
  for (int64_t i = 0; gwv && gbv && mu && rs && i < rows; i++) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < c; j++) m += xv[i * c + j];
    m /= (double)c;
    for (int64_t j = 0; j < c; j++) v += (xv[i * c + j] - m) * (xv[i * c + j] - m);
    mu[i] = m, rs[i] = 1 / sqrt(v / (double)c + 1e-5);
  }
  for (int64_t j = 0; gwv && gbv && mu && rs && j < c; j++) {
    double sw = 0, sb = 0, mw = 0, mb = 0;
    for (int64_t i = 0; i < rows; i++) {
      double gr = rv[i * c + j], xh = (xv[i * c + j] - mu[i]) * rs[i];
      sw += gr * xh, sb += gr, mw += fabs(gr * xh), mb += fabs(gr);
    }
    if (!near(gwv[j], sw, one, 1e-4 * mw) && bad++ < 3) printf("#   weight gradient %lld: %.6g, double %.6g\n", (long long)j, gwv[j], sw);
    if (!near(gbv[j], sb, one, 1e-4 * mb) && bad++ < 3) printf("#   bias gradient %lld: %.6g, double %.6g\n", (long long)j, gbv[j], sb);
  }
  ok(run && gwv && gbv && bad == 0, "%s layer_norm weight and bias gradients (%lld x %lld) match double (%lld off)",
     zorch_dtype_name(dt), (long long)rows, (long long)c, (long long)bad);
  free(xv), free(rv), free(gwv), free(gbv), free(mu), free(rs);
  zorch_tensor *fr[] = {x, r, w, b, y, yr, l};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

/* ---- every 16-bit value, the AVX-512 conversions, the erf ------------------------ */
/* Raw bits of two tensors of one dtype equal (NaN payloads included). */
static bool same_bits(zorch_tensor *a, zorch_tensor *b) {
  if (!a || !b || zorch_tensor_dtype(a) != zorch_tensor_dtype(b) || zorch_tensor_numel(a) != zorch_tensor_numel(b))
    return false;
  zorch_tensor *ca = zorch_contiguous(a), *cb = zorch_contiguous(b);
  bool same = ca && cb &&
              memcmp(zorch_tensor_data(ca), zorch_tensor_data(cb),
                     (size_t)zorch_tensor_numel(a) * (zorch_tensor_dtype(a) == ZORCH_F32 ? 4 : 2)) == 0;
  zorch_tensor_free(ca), zorch_tensor_free(cb);
  return same;
}

/* GELU (both forms) and its gradient on all 65536 16-bit values (NaNs,
   infinities and subnormals included): bit for bit the float32 op on the
   widened values, rounded once. 65536 values run the op's 16-bit loop; 4 x
   65536 the table it builds; a transposed view the strided loads. */
static void gelu16_all(zorch_dtype dt) {
  const char *dn = zorch_dtype_name(dt);
  for (int big = 0; big < 3; big++) {
    int64_t n = big == 1 ? 4 * 65536 : 65536;
    zorch_tensor *x = zorch_zeros(SHAPE(n), dt, CPU);
    uint16_t *xp = zorch_tensor_data(x);
    for (int64_t i = 0; i < n; i++) xp[i] = (uint16_t)(i * (big == 1 ? 40503 : 1));
    if (big == 2) { /* a (256, 256) transposed view */
      zorch_tensor *r = zorch_reshape(x, SHAPE(256, 256));
      zorch_tensor_free(x);
      x = r ? zorch_transpose(r, 0, 1) : NULL;
      zorch_tensor_free(r);
    }
    for (int t = 0; t < 2; t++) {
      bool grad = big != 2; /* (a view is no leaf) */
      zorch_tensor *xf = zorch_to_dtype(x, ZORCH_F32);
      if (grad) zorch_set_requires_grad(x, true), zorch_set_requires_grad(xf, true);
      zorch_tensor *h = zorch_gelu(x, t), *f = zorch_gelu(xf, t), *fr = zorch_to_dtype(f, dt);
      ok(same_bits(h, fr), "%s gelu%s of every %s value%s equals the float32 result rounded once", dn,
         t ? " (tanh)" : "", dn, big == 1 ? " (4 times, by table)" : big == 2 ? " (transposed)" : "");
      /* the gradient: g = 1 */
      zorch_tensor *sh = grad && h ? zorch_sum(h, 0, NULL, false) : NULL;
      zorch_tensor *sf = grad && f ? zorch_sum(f, 0, NULL, false) : NULL;
      if (grad) {
        bool done = sh && sf && !zorch_backward(sh, NULL, false) && !zorch_backward(sf, NULL, false);
        zorch_tensor *gh = done ? zorch_grad(x) : NULL, *gf = done ? zorch_grad(xf) : NULL;
        zorch_tensor *gfr = gf ? zorch_to_dtype(gf, dt) : NULL;
        ok(done && same_bits(gh, gfr), "%s gelu%s gradient of every %s value%s equals the float32 one rounded once",
           dn, t ? " (tanh)" : "", dn, big == 1 ? " (4 times)" : "");
        zorch_tensor_free(gfr);
        zorch_set_grad(x, NULL);
        zorch_set_requires_grad(x, false);
      }
      zorch_tensor_free(h), zorch_tensor_free(f), zorch_tensor_free(fr), zorch_tensor_free(sh);
      zorch_tensor_free(sf), zorch_tensor_free(xf);
    }
    zorch_tensor_free(x);
  }
}

/* Bit for bit, except that any NaN equals any NaN (two NaN operands may give
   either one's payload, by the order the compiler chose). */
static bool same_bits_nan(zorch_tensor *a, zorch_tensor *b, bool bf) {
  if (!a || !b || zorch_tensor_numel(a) != zorch_tensor_numel(b)) return false;
  zorch_tensor *ca = zorch_contiguous(a), *cb = zorch_contiguous(b);
  bool same = ca && cb;
  const uint16_t *x = same ? zorch_tensor_data(ca) : NULL, *y = same ? zorch_tensor_data(cb) : NULL;
  for (int64_t i = 0; same && i < zorch_tensor_numel(a); i++) {
    uint16_t mag = bf ? 0x7f80 : 0x7c00;
    bool nx = (x[i] & 0x7fff) > mag, ny = (y[i] & 0x7fff) > mag;
    same = x[i] == y[i] || (nx && ny);
  }
  zorch_tensor_free(ca), zorch_tensor_free(cb);
  return same;
}

/* The simple ops with one-pass 16-bit loops (neg, relu, the scalar ops, clamp,
   add, sub, mul, div, the gradients of relu and clamp) on every 16-bit value
   against a permutation of them, and with a broadcast scalar: the float32 op
   on the widened values, rounded once. */
static void simple16_all(zorch_generator *g, zorch_dtype dt) {
  const char *dn = zorch_dtype_name(dt);
  bool bf = dt == ZORCH_BF16;
  int64_t n = 65536;
  zorch_tensor *a = zorch_zeros(SHAPE(n), dt, CPU), *b = zorch_zeros(SHAPE(n), dt, CPU);
  uint16_t *ap = zorch_tensor_data(a), *bp = zorch_tensor_data(b);
  for (int64_t i = 0; i < n; i++) ap[i] = (uint16_t)i, bp[i] = (uint16_t)(i * 40503 + 12345);
  zorch_tensor *sc = zorch_randn(0, NULL, dt, CPU, g);
  zorch_tensor *af = zorch_to_dtype(a, ZORCH_F32), *bf32 = zorch_to_dtype(b, ZORCH_F32);
  zorch_tensor *scf = zorch_to_dtype(sc, ZORCH_F32);
  static const char *const what[] = {"neg", "relu", "add_scalar", "mul_scalar", "rsub_scalar", "clamp",
                                     "add", "sub", "mul", "div", "b * scalar", "scalar / b",
                                     "relu's gradient", "clamp's gradient"};
  for (int k = 0; k < 14; k++) {
    zorch_tensor *h = NULL, *f = NULL;
    zorch_tensor *x[2] = {a, af}, *y[2] = {b, bf32}, *s[2] = {sc, scf}, *r[2] = {NULL, NULL};
    for (int j = 0; j < 2; j++) {
      switch (k) {
        case 0: r[j] = zorch_neg(x[j]); break;
        case 1: r[j] = zorch_relu(x[j]); break;
        case 2: r[j] = zorch_add_scalar(x[j], 0.3); break;
        case 3: r[j] = zorch_mul_scalar(x[j], -1.7); break;
        case 4: r[j] = zorch_rsub_scalar(x[j], 2.5); break;
        case 5: r[j] = zorch_clamp(x[j], -0.5, 0.75); break;
        case 6: r[j] = zorch_add(x[j], y[j]); break;
        case 7: r[j] = zorch_sub(x[j], y[j]); break;
        case 8: r[j] = zorch_mul(x[j], y[j]); break;
        case 9: r[j] = zorch_div(x[j], y[j]); break;
        case 10: r[j] = zorch_mul(y[j], s[j]); break;
        case 11: r[j] = zorch_div(s[j], y[j]); break;
        default: { /* the gradient g = y of relu(x) or clamp(x) at every value x */
          zorch_set_requires_grad(x[j], true);
          zorch_tensor *o = k == 12 ? zorch_relu(x[j]) : zorch_clamp(x[j], -0.5, 0.75);
          if (o && !zorch_backward(o, y[j], false) && zorch_grad(x[j])) r[j] = zorch_tensor_retain(zorch_grad(x[j]));
          zorch_tensor_free(o);
          zorch_set_grad(x[j], NULL);
          zorch_set_requires_grad(x[j], false);
        }
      }
    }
    h = r[0], f = r[1] ? zorch_to_dtype(r[1], dt) : NULL;
    ok(same_bits_nan(h, f, bf), "%s %s of every %s value equals the float32 result rounded once", dn, what[k], dn);
    zorch_tensor_free(h), zorch_tensor_free(f), zorch_tensor_free(r[1]);
  }
  zorch_tensor *fr[] = {a, b, sc, af, bf32, scf};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

#ifdef ZV512
ZV512_TARGET static void st16(uint16_t *o, const float *f, int64_t n, bool bf) {
  for (int64_t i = 0; i < n; i += 16) zv16_st(o + i, _mm512_maskz_loadu_ps(zv512_mask(n - i), f + i), zv512_mask(n - i), bf);
}
ZV512_TARGET static void ld16(float *f, const uint16_t *h, int64_t n, bool bf) {
  for (int64_t i = 0; i < n; i += 16) _mm512_mask_storeu_ps(f + i, zv512_mask(n - i), zv16_ld(h + i, zv512_mask(n - i), bf));
}
ZV512_TARGET static void phi2_512(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
    _mm512_mask_storeu_ps(y + i, zv512_mask(n - i), zv16_phi2(_mm512_maskz_loadu_ps(zv512_mask(n - i), x + i)));
}
#endif

/* The AVX-512 16-bit conversions (vec512.h) against the library's scalar ones
   (ops/backend/math.h, which zorch_to_dtype runs): every 16-bit value widened; float32
   values narrowed: a sweep of bit patterns, the rounding ties and their
   neighbours, subnormal halves, overflow, NaNs. */
static void conversions512(void) {
#ifdef ZV512
  if (!zv512_ok()) {
    ok(true, "# SKIP no AVX-512 on this CPU");
    return;
  }
  int64_t n = 0, cap = 3 * 65536 + 3 * (1 << 19) + (1 << 22) + 16;
  zorch_tensor *f = zorch_zeros(SHAPE(cap), ZORCH_F32, CPU);
  uint32_t *fb = zorch_tensor_data(f);
  for (uint32_t h = 0; h < 65536; h++) /* bf16 ties: low halves 0x7fff, 0x8000, 0x8001 */
    for (uint32_t lo = 0x7fff; lo <= 0x8001; lo++) fb[n++] = h << 16 | lo;
  for (uint32_t k = 0; k < (1u << 19); k++) /* fp16 ties in the normal and subnormal ranges */
    for (uint32_t lo = 0xfff; lo <= 0x1001; lo++) fb[n++] = k << 13 | lo;
  for (uint32_t k = 0; k < (1u << 22); k++) fb[n++] = k * 1021u; /* a sweep of all patterns */
  static const uint32_t special[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x477fe000u, 0x477ff000u,
                                     0x477fefffu, 0x33000000u, 0x33000001u, 0x80000001u, 0x00000001u, 0x7f7fffffu};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) fb[n++] = special[i];
  for (int b = 0; b < 2; b++) {
    zorch_dtype dt = b ? ZORCH_BF16 : ZORCH_F16;
    zorch_tensor *ref = zorch_to_dtype(f, dt), *mine = zorch_zeros(SHAPE(cap), dt, CPU);
    st16(zorch_tensor_data(mine), (const float *)fb, n, b);
    ok(same_bits(ref, mine), "AVX-512 narrowing to %s equals the scalar one on %lld float32 values",
       zorch_dtype_name(dt), (long long)n);
    zorch_tensor *all = zorch_zeros(SHAPE(65536), dt, CPU), *w = zorch_zeros(SHAPE(65536), ZORCH_F32, CPU);
    uint16_t *ap = zorch_tensor_data(all);
    for (int i = 0; i < 65536; i++) ap[i] = (uint16_t)i;
    zorch_tensor *wref = zorch_to_dtype(all, ZORCH_F32);
    ld16(zorch_tensor_data(w), ap, 65536, b);
    ok(same_bits(wref, w), "AVX-512 widening of every %s value equals the scalar one", zorch_dtype_name(dt));
    zorch_tensor_free(ref), zorch_tensor_free(mine), zorch_tensor_free(all), zorch_tensor_free(w), zorch_tensor_free(wref);
  }
  zorch_tensor_free(f);
#else
  ok(true, "# SKIP no AVX-512 code in this build");
#endif
}

/* 2 Phi(x) = 1 + erf(x / sqrt 2), what GELU is made of, against double's
   erfc(-x / sqrt 2) over every 127th float32 of |x| < 15 (both signs): the
   portable code (vec.h) and the AVX-512 one (vec512.h); the worst relative
   error and the worst error in units of the float32 result's last place. */
static void erf_ulps(void) {
  int64_t n = 0, cap = 2 * (0x41700000 / 127 + 1);
  float *x = malloc((size_t)cap * sizeof *x), *y = malloc((size_t)cap * sizeof *y);
  for (uint32_t b = 0; b < 0x41700000u && x; b += 127)
    for (int s = 0; s < 2; s++) {
      uint32_t u = b | (s ? 0x80000000u : 0);
      memcpy(&x[n++], &u, 4);
    }
  for (int v = 0; v < 2 && x && y; v++) {
#ifdef ZV512
    if (v == 1 && !zv512_ok()) break;
    if (v == 1) phi2_512(y, x, n);
#else
    if (v == 1) break;
#endif
    if (v == 0)
      for (int64_t i = 0; i < n; i++) y[i] = zv_phi2(x[i]);
    double worst = 0, worst_ulp = 0, at = 0;
    for (int64_t i = 0; i < n; i++) {
      double r = erfc(-(double)x[i] / sqrt(2.0));
      if (r < 1e-37) continue; /* (float32 subnormals) */
      double e = fabs(y[i] - r), ulp = nextafterf((float)r, INFINITY) - (float)r;
      if (e / r > worst) worst = e / r, at = x[i];
      if (e / ulp > worst_ulp) worst_ulp = e / ulp;
    }
    printf("# 1 + erf(x/sqrt 2), %s: worst relative error %.3g (at x = %.7g), %.2f ulp, over %lld values\n",
           v ? "AVX-512" : "portable", worst, at, worst_ulp, (long long)n);
    ok(worst < 5e-7, "%s 1 + erf(x/sqrt 2) within 5e-7 relative of double", v ? "AVX-512" : "portable");
  }
  free(x), free(y);
}

/* fill_ on a 16-bit tensor and on a strided view of one */
static void fill16(void) {
  zorch_tensor *t = zorch_zeros(SHAPE(1000, 2), ZORCH_BF16, CPU);
  zorch_status st = zorch_fill_(t, 1.5);
  double *v = values(t);
  int64_t bad = 0;
  for (int64_t i = 0; v && i < 2000; i++) bad += v[i] != 1.5;
  ok(!st && v && bad == 0, "fill_ sets every bf16 element (%lld off)", (long long)bad);
  free(v);
  zorch_tensor *col = zorch_select(t, 1, 0);
  st = col ? zorch_fill_(col, -2) : zorch_last_status();
  v = values(t);
  bad = 0;
  for (int64_t i = 0; v && i < 2000; i++) bad += v[i] != (i % 2 ? 1.5 : -2);
  ok(!st && v && bad == 0, "fill_ on a strided bf16 column sets that column only (%lld off)", (long long)bad);
  free(v);
  zorch_tensor_free(col), zorch_tensor_free(t);
}

/* Views whose source runs across the copy's rows (transposes, permutes, a
   transposed slice) made contiguous: every element where the index says,
   for each element size, on 1 and 2 threads, tiled or not. */
static void transposed_copies(void) {
  const zorch_dtype dts[] = {ZORCH_U8, ZORCH_BF16, ZORCH_F32, ZORCH_I64};
  const int64_t dims[][3] = {{1, 16, 16}, {1, 33, 70}, {1, 1000, 70}, {3, 45, 70}, {2, 7, 300}, {1, 5, 9},
                             {2, 64, 96}};
  int64_t bad = 0, cases = 0;
  for (int th = 1; th <= 2; th++) {
    zorch_set_num_threads(th);
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
      for (size_t s = 0; s < 2 * sizeof dims / sizeof *dims; s++) {
        size_t k = s / 2;
        int64_t nb = dims[k][0], r = dims[k][1], c = dims[k][2];
        /* values 0..250 repeat, exact in every dtype; the slice starts at
           column 3 of rows c + 5 long (odd offsets and strides), or at
           column 4 of rows c + 6 long (even ones: whole 2-byte pairs) */
        int64_t at = s % 2 ? 4 : 3, w = c + at + 2, nf = nb * r * w;
        double *src = malloc((size_t)nf * sizeof(double));
        for (int64_t i = 0; src && i < nf; i++) src[i] = (double)(i % 251);
        zorch_tensor *full = src ? zorch_from_buffer(src, SHAPE(nb, r, w), ZORCH_F64) : NULL;
        free(src);
        zorch_tensor *typed = full ? zorch_to_dtype(full, dts[d]) : NULL;
        zorch_tensor *sl = typed ? zorch_narrow(typed, 2, at, c) : NULL;
        zorch_tensor *tv = sl ? zorch_transpose(sl, 1, 2) : NULL, *ct = tv ? zorch_contiguous(tv) : NULL;
        double *v = ct ? values(ct) : NULL;
        if (!v) {
          bad++;
        } else {
          for (int64_t b = 0; b < nb; b++)
            for (int64_t j = 0; j < c; j++)
              for (int64_t i = 0; i < r; i++)
                bad += v[(b * c + j) * r + i] != (double)(((b * r + i) * w + j + at) % 251);
        }
        cases++;
        free(v);
        zorch_tensor *fr[] = {full, typed, sl, tv, ct};
        for (int k = 0; k < 5; k++) zorch_tensor_free(fr[k]);
      }
  }
  /* a permute that merges into one transposed matrix: (a, b, c) -> (c, a, b) */
  zorch_tensor *ar = zorch_arange(0, 40 * 30 * 50, 1, ZORCH_F32, CPU);
  zorch_tensor *x = ar ? zorch_reshape(ar, SHAPE(40, 30, 50)) : NULL;
  zorch_tensor *pv = x ? zorch_permute(x, (const int[]){2, 0, 1}) : NULL, *pc = pv ? zorch_contiguous(pv) : NULL;
  double *v = pc ? values(pc) : NULL;
  for (int64_t k = 0; k < 50 && v; k++)
    for (int64_t i = 0; i < 40 * 30; i++) bad += v[k * 1200 + i] != (double)(i * 50 + k);
  bad += !v;
  free(v);
  zorch_tensor_free(ar), zorch_tensor_free(x), zorch_tensor_free(pv), zorch_tensor_free(pc);
  zorch_set_num_threads(0);
  ok(bad == 0, "transposed views made contiguous: %lld cases and a permute, %lld elements off",
     (long long)cases, (long long)bad);
}

int main(void) {
  zorch_generator *g0 = zorch_generator_new(3);
  elementwise16(g0, ZORCH_BF16);
  elementwise16(g0, ZORCH_F16);
  simple16_all(g0, ZORCH_BF16);
  simple16_all(g0, ZORCH_F16);
  rows16(g0, ZORCH_BF16, 300, 701);
  rows16(g0, ZORCH_F16, 300, 701);
  rows16(g0, ZORCH_BF16, 40, 5000); /* (rows longer than softmax keeps on the stack) */
  softmax_bwd_f32(g0);
  layer_norm16_wb(g0, ZORCH_BF16, 200, 300);
  layer_norm16_wb(g0, ZORCH_F16, 200, 300);
  layer_norm16_wb(g0, ZORCH_BF16, 20, 5000); /* (rows longer than the kernel widens on the stack) */
  gelu16_all(ZORCH_BF16);
  gelu16_all(ZORCH_F16);
  conversions512();
  erf_ulps();
  layer_norm_bwd_rows(g0);
  linear_gelu(g0);
  zorch_generator_free(g0);
  gelu_sweep(false);
  gelu_sweep(true);
  softmax_rows();
  sum_precision();
  layer_norm_rows();
  adam_f32_exact();
  fill16();
  transposed_copies();
  zorch_generator *g = zorch_generator_new(7);
  printf("# BLAS: %s\n", zorch_blas_info());
  /* bf16 keeps 8 significant bits: one rounding of the output is 2^-9 */
  gemm16(g, ZORCH_BF16, 1.0 / 256);
  gemm16(g, ZORCH_F16, 1.0 / 2048);
  zorch_generator_free(g);
  return done_testing();
}
