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
CHECK(linear, 3, return zorch_linear(in[0], in[1], in[2]);)
CHECK(linear_nobias, 2, return zorch_linear(in[0], in[1], NULL);)
CHECK(linear_relu, 3, return zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_RELU);)
CHECK(linear_relu_nobias, 2, return zorch_linear_act(in[0], in[1], NULL, ZORCH_ACT_RELU);)
CHECK(linear_gelu, 3, return zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_GELU);)
CHECK(linear_gelu_tanh, 3, return zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_GELU_TANH);)
CHECK(mse, 2, return zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_MEAN);)
CHECK(mse_sum, 2, return zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_SUM);)
CHECK(mse_none, 2, return zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_NONE);)
CHECK(cross_entropy, 2, return zorch_cross_entropy(in[0], in[1], ZORCH_REDUCE_MEAN, 1);)
CHECK(cross_entropy_none, 2, return zorch_cross_entropy(in[0], in[1], ZORCH_REDUCE_NONE, -100);)
CHECK(nll_loss, 2, return zorch_nll_loss(in[0], in[1], ZORCH_REDUCE_MEAN, 1);)
CHECK(nll_loss_sum, 2, return zorch_nll_loss(in[0], in[1], ZORCH_REDUCE_SUM, -100);)
CHECK(embedding, 2, return zorch_embedding(in[0], in[1]);)
CHECK(layer_norm, 3, return zorch_layer_norm(in[0], 1, in[1], in[2], 1e-5);)
CHECK(layer_norm2, 1, return zorch_layer_norm(in[0], 2, NULL, NULL, 1e-5);)
CHECK(dropout, 1, {
  zorch_generator_seed(gen, 99);
  return zorch_dropout(in[0], 0.3, true, gen);
})
CHECK(attention, 3, return zorch_attention(in[0], in[1], in[2], false, 0);)
CHECK(attention_causal, 3, return zorch_attention(in[0], in[1], in[2], true, 0);)
CHECK(attention_scaled, 3, return zorch_attention(in[0], in[1], in[2], true, 0.7);)
/* batch norm: training (batch statistics, no running stats; with them, the
   output is the same), and eval with fixed running stats in[2], in[3] */
CHECK(batch_norm_train, 3, return zorch_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5);)
CHECK(batch_norm_train_noaffine, 1, return zorch_batch_norm(in[0], NULL, NULL, NULL, NULL, true, 0.1, 1e-5);)
CHECK(batch_norm_eval, 4, return zorch_batch_norm(in[0], in[2], in[3], in[1], NULL, false, 0.1, 1e-5);)
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

/* convolution and pooling, with stride, padding, dilation, groups, ceil mode */
static const zorch_conv2d_opts conv_sp = {{2, 1}, {1, 2}, {1, 1}, 1};
static const zorch_conv2d_opts conv_dg = {{1, 2}, {2, 1}, {2, 1}, 2};
CHECK(conv2d, 3, return zorch_conv2d(in[0], in[1], in[2], NULL);)
CHECK(conv2d_stride_pad, 3, return zorch_conv2d(in[0], in[1], in[2], &conv_sp);)
CHECK(conv2d_dil_groups, 2, return zorch_conv2d(in[0], in[1], NULL, &conv_dg);)
static const zorch_pool2d_opts pool_k2 = {.kernel = {2, 2}};
static const zorch_pool2d_opts pool_pd = {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1},
                                          .dilation = {2, 1}, .ceil_mode = true};
static const zorch_pool2d_opts pool_avg = {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
static const zorch_pool2d_opts pool_excl = {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1},
                                            .ceil_mode = true, .exclude_pad = true};
CHECK(max_pool2d, 1, return zorch_max_pool2d(in[0], &pool_k2, NULL);)
CHECK(max_pool2d_pad_dil, 1, return zorch_max_pool2d(in[0], &pool_pd, NULL);)
CHECK(avg_pool2d, 1, return zorch_avg_pool2d(in[0], &pool_avg);)
CHECK(avg_pool2d_excl_ceil, 1, return zorch_avg_pool2d(in[0], &pool_excl);)
CHECK(adaptive_avg_pool2d, 1, return zorch_adaptive_avg_pool2d(in[0], 3, 2);)
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

/* the declared ops' GRAD cases (include/zorch_ops.h) */
#define GOLDEN(...)
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
#define INDEX(dims, values) ints(SHAPE(ZORCH_EXPAND_ dims), (int64_t[]){ZORCH_EXPAND_ values})
#define GRAD(cs, call, inputs)                                      \
  {                                                                 \
    zorch_tensor *in_[] = {ZORCH_EXPAND_ inputs};                   \
    run(#cs, grad_##cs, (int)(sizeof in_ / sizeof in_[0]), in_);    \
  }
static void run_declared(void) { ZORCH_OPS(DECL_ROW_) }
#undef GRAD
#undef GOLDEN
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
  RUN(linear, leaf(SHAPE(5, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear, leaf(SHAPE(2, 5, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear_nobias, leaf(SHAPE(5, 3), 0), leaf(SHAPE(2, 3), 0));
  RUN(linear_relu, leaf(SHAPE(6, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear_relu, leaf(SHAPE(2, 5, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear_gelu, leaf(SHAPE(2, 5, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear_gelu_tanh, leaf(SHAPE(6, 3), 0), leaf(SHAPE(4, 3), 0), leaf(SHAPE(4), 0));
  RUN(linear_relu_nobias, leaf(SHAPE(5, 3), 0), leaf(SHAPE(2, 3), 0));
  RUN(mse, leaf(SHAPE(4, 3), 0), leaf(SHAPE(4, 3), 0));
  RUN(mse_sum, leaf(SHAPE(4, 3), 0), leaf(SHAPE(4, 3), 0));
  RUN(mse_none, leaf(SHAPE(4, 3), 0), leaf(SHAPE(4, 3), 0));
  RUN(cross_entropy, leaf(SHAPE(4, 5), 0), ints(SHAPE(4), (int64_t[]){0, 1, 4, 2}));
  RUN(cross_entropy_none, leaf(SHAPE(3, 4), 0), ints(SHAPE(3), (int64_t[]){3, 0, 1}));
  RUN(cross_entropy, leaf(SHAPE(5), 0), ints(0, NULL, (int64_t[]){2}));
  RUN(nll_loss, leaf(SHAPE(4, 5), 0), ints(SHAPE(4), (int64_t[]){0, 1, 4, 2}));
  RUN(nll_loss_sum, leaf(SHAPE(3, 4), 0), ints(SHAPE(3), (int64_t[]){3, 0, 1}));
  RUN(embedding, leaf(SHAPE(5, 3), 0), ints(SHAPE(2, 3), (int64_t[]){0, 4, 4, 1, 0, 2}));
  RUN(layer_norm, leaf(SHAPE(3, 5), 0), leaf(SHAPE(5), 0), leaf(SHAPE(5), 0));
  RUN(layer_norm2, leaf(SHAPE(2, 3, 4), 0));
  RUN(dropout, leaf(SHAPE(4, 5), 0));
  /* attention: causal and not, Tq != Tk (both ways), odd head dims, (BH, T, D)
     inputs, and 70 keys and queries, which the 64-wide blocks do not divide */
  RUN(attention, leaf(SHAPE(2, 2, 4, 3), 0), leaf(SHAPE(2, 2, 6, 3), 0), leaf(SHAPE(2, 2, 6, 3), 0));
  RUN(attention_causal, leaf(SHAPE(1, 2, 5, 5), 0), leaf(SHAPE(1, 2, 5, 5), 0), leaf(SHAPE(1, 2, 5, 5), 0));
  RUN(attention_causal, leaf(SHAPE(3, 3, 7), 0), leaf(SHAPE(3, 8, 7), 0), leaf(SHAPE(3, 8, 7), 0));
  RUN(attention_causal, leaf(SHAPE(1, 1, 1, 4), 0), leaf(SHAPE(1, 1, 6, 4), 0), leaf(SHAPE(1, 1, 6, 4), 0));
  RUN(attention_scaled, leaf(SHAPE(2, 5, 2), 0), leaf(SHAPE(2, 5, 2), 0), leaf(SHAPE(2, 5, 2), 0));
  RUN(attention_causal, leaf(SHAPE(1, 70, 3), 0), leaf(SHAPE(1, 70, 3), 0), leaf(SHAPE(1, 70, 3), 0));
  RUN(attention, leaf(SHAPE(1, 1, 67, 3), 0), leaf(SHAPE(1, 1, 130, 3), 0), leaf(SHAPE(1, 1, 130, 3), 0));
  RUN(batch_norm_train, leaf(SHAPE(4, 3), 0), leaf(SHAPE(3), 0), leaf(SHAPE(3), 0));
  RUN(batch_norm_train, leaf(SHAPE(2, 3, 4), 0), leaf(SHAPE(3), 0), leaf(SHAPE(3), 0));
  RUN(batch_norm_train_noaffine, leaf(SHAPE(2, 2, 3, 2), 0));
  {
    zorch_tensor *rm = leaf(SHAPE(3), 0), *rv = leaf(SHAPE(3), 1);
    zorch_set_requires_grad(rm, false);
    zorch_set_requires_grad(rv, false);
    RUN(batch_norm_eval, leaf(SHAPE(2, 3, 2), 0), leaf(SHAPE(3), 0), rm, rv);
  }
  RUN(chain, leaf(SHAPE(4, 3), 0), leaf(SHAPE(5, 3), 0));
  RUN(conv2d, leaf(SHAPE(2, 3, 5, 4), 0), leaf(SHAPE(2, 3, 3, 2), 0), leaf(SHAPE(2), 0));
  RUN(conv2d, leaf(SHAPE(2, 4, 4), 0), leaf(SHAPE(3, 2, 2, 2), 0), leaf(SHAPE(3), 0));
  RUN(conv2d, leaf(SHAPE(10, 2, 4, 3), 0), leaf(SHAPE(3, 2, 2, 2), 0), leaf(SHAPE(3), 0)); /* 2 blocks */
  RUN(conv2d_stride_pad, leaf(SHAPE(2, 2, 5, 4), 0), leaf(SHAPE(3, 2, 3, 3), 0), leaf(SHAPE(3), 0));
  RUN(conv2d_dil_groups, leaf(SHAPE(1, 4, 6, 5), 0), leaf(SHAPE(4, 2, 2, 3), 0));
  RUN(max_pool2d, leaf(SHAPE(2, 2, 4, 5), 0));
  RUN(max_pool2d_pad_dil, leaf(SHAPE(1, 2, 7, 5), 0));
  RUN(avg_pool2d, leaf(SHAPE(2, 2, 5, 6), 0));
  RUN(avg_pool2d_excl_ceil, leaf(SHAPE(1, 2, 5, 6), 0));
  RUN(adaptive_avg_pool2d, leaf(SHAPE(2, 7, 5), 0));
  run_declared();
  zorch_generator_free(gen);
  return done_testing();
}
