/* Every differentiable op against central finite differences in float64: each
   differentiable elementwise op of the registry (ops/backend/pointwise_ops.h), found by
   iterating it, and the other ops, listed below. */
#include "../ops/backend/pointwise_ops.h"
#include "tap.h"

#define MAXIN 4
typedef zorch_tensor *(*op_fn)(zorch_tensor **in);

static zorch_generator *gen;

/* A float64 leaf of normal numbers; `pos` (an ZORCH_DOM_* bit of input a, or 1)
   maps them into the op's domain: positive (|x| + 0.5), inside (-1, 1)
   (0.9 tanh x) or above 1 (|x| + 1.5). */
static zorch_tensor *leaf(int ndim, const int64_t *shape, int pos) {
  zorch_tensor *t = zorch_randn(ndim, shape, ZORCH_F64, CPU, gen);
  if (pos) {
    double *p = zorch_tensor_data(t);
    for (int64_t i = 0; i < zorch_tensor_numel(t); i++)
      p[i] = pos & ZORCH_DOM_UNIT_A ? 0.9 * tanh(p[i]) : fabs(p[i]) + (pos & ZORCH_DOM_GT1_A ? 1.5 : 0.5);
  }
  zorch_set_requires_grad(t, true);
  return t;
}

/* L = sum(f(in) * R) for fixed weights R. */
static double loss_of(op_fn f, zorch_tensor **in, zorch_tensor **R, zorch_tensor **out_L) {
  zorch_tensor *out = f(in);
  if (!out) return NAN;
  if (!*R) {
    zorch_generator *g = zorch_generator_new(7);
    *R = zorch_randn(zorch_tensor_ndim(out), zorch_tensor_shape(out), ZORCH_F64, CPU, g);
    zorch_generator_free(g);
  }
  zorch_tensor *o64 = zorch_to_dtype(out, ZORCH_F64);
  zorch_tensor *w = zorch_mul(o64, *R);
  zorch_tensor *L = zorch_sum(w, 0, NULL, false);
  double v = NAN;
  zorch_tensor_item(L, &v);
  zorch_tensor_free(out);
  zorch_tensor_free(o64);
  zorch_tensor_free(w);
  if (out_L)
    *out_L = L;
  else
    zorch_tensor_free(L);
  return v;
}

static void gradcheck(const char *name, op_fn f, int nin, zorch_tensor **in) {
  zorch_tensor *R = NULL, *L = NULL;
  double l0 = loss_of(f, in, &R, &L);
  if (!ok(!isnan(l0) && L && zorch_backward(L, NULL, false) == ZORCH_OK, "%s: forward and backward run", name)) {
    zorch_tensor_free(L);
    zorch_tensor_free(R);
    return;
  }
  zorch_tensor_free(L);
  const double h = 1e-6;
  double worst = 0;
  int64_t worst_i = -1;
  int worst_in = -1;
  bool prev = zorch_set_grad_enabled(false);
  for (int k = 0; k < nin; k++) {
    if (!in[k] || !zorch_requires_grad(in[k])) continue;
    zorch_tensor *g = zorch_grad(in[k]);
    double *x = zorch_tensor_data(in[k]);
    int64_t n = zorch_tensor_numel(in[k]);
    for (int64_t i = 0; i < n; i++) {
      double keep = x[i];
      x[i] = keep + h;
      double lp = loss_of(f, in, &R, NULL);
      x[i] = keep - h;
      double lm = loss_of(f, in, &R, NULL);
      x[i] = keep;
      double num = (lp - lm) / (2 * h);
      double ana = g ? at(g, i) : 0;
      double err = fabs(num - ana) / (1e-6 + 1e-4 * fabs(num));
      if (!(err <= worst)) {
        worst = err;
        worst_i = i;
        worst_in = k;
      }
    }
  }
  zorch_set_grad_enabled(prev);
  ok(worst <= 1, "%s: gradient matches finite differences (worst ratio %.3g at input %d elem %lld)",
     name, worst, worst_in, (long long)worst_i);
  zorch_tensor_free(R);
}

#define CHECK(name, nin, body, ...)                                 \
  static zorch_tensor *fn_##name(zorch_tensor **in) {               \
    (void)in;                                                       \
    body                                                            \
  }
/* ---- the ops ----------------------------------------------------------------------- */
/* the registry's ops: the op being checked, with parameters every op accepts
   (clamp needs p0 <= p1; pow_scalar and rdiv_scalar get positive inputs) */
static const zorch_pointwise_op *cur_op;
static const double op_params[2] = {-0.5, 0.7};
CHECK(registered, 0, return cur_op->call(in, op_params);)
CHECK(square, 1, return zorch_pow_scalar(in[0], 2);) /* the x * x path */
CHECK(chain, 2, {
  /* a small network: relu(x W^T) summed with a shared leaf used twice */
  zorch_tensor *h = zorch_linear(in[0], in[1], NULL);
  zorch_tensor *r = zorch_tanh(h);
  zorch_tensor *s = zorch_mul(r, r);
  zorch_tensor *o = zorch_add(s, h);
  zorch_tensor_free(h);
  zorch_tensor_free(r);
  zorch_tensor_free(s);
  return o;
})

/* reductions, shape ops and matrix products composed of other ops */

static zorch_tensor *ints(int ndim, const int64_t *shape, const int64_t *v) {
  return zorch_from_buffer(v, ndim, shape, ZORCH_I64);
}

/* reshape and contiguous of a transposed (strided) view */
static zorch_tensor *transposed_reshape(zorch_tensor *x) {
  zorch_tensor *t = zorch_transpose(x, 0, 1), *r = zorch_reshape(t, SHAPE(-1));
  zorch_tensor_free(t);
  return r;
}
static zorch_tensor *transposed_contiguous(zorch_tensor *x) {
  zorch_tensor *t = zorch_transpose(x, 0, 1), *r = zorch_contiguous(t);
  zorch_tensor_free(t);
  return r;
}

/* a bool tensor of about half true (normal numbers > 0) */
static zorch_tensor *mask(int ndim, const int64_t *shape) {
  zorch_tensor *r = zorch_randn(ndim, shape, ZORCH_F64, CPU, gen);
  zorch_tensor *z = zorch_zeros(0, NULL, ZORCH_F64, CPU);
  zorch_tensor *m = zorch_gt(r, z);
  zorch_tensor_free(r);
  zorch_tensor_free(z);
  return m;
}

static void run(const char *name, op_fn f, int nin, zorch_tensor **in) {
  gradcheck(name, f, nin, in);
  for (int i = 0; i < nin; i++) zorch_tensor_free(in[i]);
}

/* helpers of the declared ops' GRAD cases */
/* t, held fixed (not requiring grad) */
static zorch_tensor *nograd(zorch_tensor *t) {
  zorch_set_requires_grad(t, false);
  return t;
}
/* dropout draws the same mask at every evaluation */
static zorch_tensor *dropout_seeded(zorch_tensor *x) {
  zorch_generator_seed(gen, 99);
  return zorch_dropout(x, 0.3, true, gen);
}

/* the declared ops' GRAD cases (include/zorch_ops.h) */
#define GOLDEN(...)
#define NO_GOLDEN(...)
#define BAD(...)
#define DEVICE(...)
#define GRAD(cs, call, inputs) \
  static zorch_tensor *grad_##cs(zorch_tensor **in) { return call; }
#define DECL_ROW_(name, ret, params, args, lua, kernels, cases) ZORCH_EXPAND_ cases
ZORCH_OPS(DECL_ROW_)
#undef GRAD
#define LEAF(...) leaf(SHAPE(__VA_ARGS__), 0)
#define LEAF_POS(...) leaf(SHAPE(__VA_ARGS__), 1)
#define MASK(...) mask(SHAPE(__VA_ARGS__))
#define NOGRAD(t) nograd(t)
#define INDEX(dims, values) ints(SHAPE(ZORCH_EXPAND_ dims), (int64_t[]){ZORCH_EXPAND_ values})
#define GRAD(cs, call, inputs)                                      \
  {                                                                 \
    zorch_tensor *in_[] = {ZORCH_EXPAND_ inputs};                   \
    run(#cs, grad_##cs, (int)(sizeof in_ / sizeof in_[0]), in_);    \
  }
static void run_declared(void) { ZORCH_OPS(DECL_ROW_) }
#undef GRAD
#undef GOLDEN
#undef NO_GOLDEN
#undef BAD
#undef DEVICE
#define RUN(name, ...)                                              \
  do {                                                              \
    zorch_tensor *in_[MAXIN] = {__VA_ARGS__};                       \
    run(#name, fn_##name, (int)(sizeof((zorch_tensor *[]){__VA_ARGS__}) / sizeof(zorch_tensor *)), in_); \
  } while (0)

int main(void) {
  gen = zorch_generator_new(1234);
  int nops;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&nops);
  for (int i = 0; i < nops; i++) {
    cur_op = &ops[i];
    if (!cur_op->differentiable) continue;
    int pa = cur_op->dom & (ZORCH_DOM_POS_A | ZORCH_DOM_UNIT_A | ZORCH_DOM_GT1_A), pb = cur_op->dom & ZORCH_DOM_POS_B;
    if (cur_op->nin == 1) {
      run(cur_op->name, fn_registered, 1, (zorch_tensor *[]){leaf(SHAPE(3, 4), pa)});
    } else { /* same shapes, then broadcasting both ways */
      run(cur_op->name, fn_registered, 2, (zorch_tensor *[]){leaf(SHAPE(3, 4), pa), leaf(SHAPE(3, 4), pb)});
      run(cur_op->name, fn_registered, 2,
          (zorch_tensor *[]){leaf(SHAPE(2, 3, 4), pa), leaf(SHAPE(3, 1), pb)});
      run(cur_op->name, fn_registered, 2, (zorch_tensor *[]){leaf(SHAPE(3, 1), pa), leaf(SHAPE(1, 4), pb)});
    }
  }
  RUN(square, leaf(SHAPE(5), 0));
  {
  }
  {
  }
  RUN(chain, leaf(SHAPE(4, 3), 0), leaf(SHAPE(5, 3), 0));
  run_declared();
  zorch_generator_free(gen);
  return done_testing();
}
