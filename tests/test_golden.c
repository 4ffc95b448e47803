/* Forward values and input gradients against PyTorch (tests/golden/ops.txt,
   written by tests/golden/gen_golden.py), in float32. Every elementwise op of the
   registry (ops/backend/pointwise_ops.h) runs from its case by name; a registered op
   without a case fails. */
#include "../ops/backend/pointwise_ops.h"
#include "tap.h"

#define MAXT 12
typedef struct {
  char name[64];
  double p[2]; /* the op's scalar parameters, from the case line */
  zorch_tensor *in[MAXT], *out, *gout, *grad[MAXT];
  int nin;
} gcase;

/* The registered elementwise op named `name`, or NULL. */
static const zorch_pointwise_op *registered(const char *name) {
  int n;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(ops[i].name, name) == 0) return &ops[i];
  return NULL;
}

static zorch_tensor *parse_tensor(char *line, char *role) {
  char *save = NULL;
  strtok_r(line, " \n", &save); /* "tensor" */
  snprintf(role, 16, "%s", strtok_r(NULL, " \n", &save));
  zorch_dtype dt;
  if (zorch_dtype_parse(strtok_r(NULL, " \n", &save), &dt)) return NULL;
  int nd = atoi(strtok_r(NULL, " \n", &save));
  int64_t shape[8], n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i] = atoll(strtok_r(NULL, " \n", &save));
  double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; i++) {
    char *tok = strtok_r(NULL, " \n", &save);
    v[i] = tok ? strtod(tok, NULL) : NAN;
  }
  zorch_tensor *t;
  if (dt == ZORCH_I64) {
    int64_t *iv = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) iv[i] = (int64_t)v[i];
    t = zorch_from_buffer(iv, nd, shape, ZORCH_I64);
    free(iv);
  } else {
    t = from_doubles(v, nd, shape, dt);
  }
  free(v);
  return t;
}

/* the indices of sort, topk and min, for the cases that compare them */
static zorch_tensor *sort_indices(zorch_tensor *x, int dim, bool descending) {
  zorch_tensor *i = NULL, *v = zorch_sort(x, dim, descending, &i);
  zorch_tensor_free(v);
  return i;
}
static zorch_tensor *topk_indices(zorch_tensor *x, int64_t k, int dim) {
  zorch_tensor *i = NULL, *v = zorch_topk(x, k, dim, true, true, &i);
  zorch_tensor_free(v);
  return i;
}
/* contiguous of a transposed (strided) view */
static zorch_tensor *transposed_contiguous(zorch_tensor *x) {
  zorch_tensor *t = zorch_transpose(x, 0, 1), *r = zorch_contiguous(t);
  zorch_tensor_free(t);
  return r;
}
static zorch_tensor *min_indices(zorch_tensor *x, int dim, bool keepdim) {
  zorch_tensor *i = NULL, *v = zorch_min(x, 1, &dim, keepdim, &i);
  zorch_tensor_free(v);
  return i;
}

/* the shape of t (taken over) as an int64 tensor: empty's values are unset */
static zorch_tensor *shape_of(zorch_tensor *t) {
  zorch_tensor *s = t ? zorch_from_buffer(zorch_tensor_shape(t), 1, (int64_t[]){zorch_tensor_ndim(t)}, ZORCH_I64) : NULL;
  zorch_tensor_free(t);
  return s;
}
/* a round trip through a 16-bit dtype */
static zorch_tensor *to_and_back(zorch_tensor *x, zorch_dtype dt) {
  zorch_tensor *h = zorch_to_dtype(x, dt), *f = h ? zorch_to_dtype(h, ZORCH_F32) : NULL;
  zorch_tensor_free(h);
  return f;
}
/* quantize's q (the stored integers, as float32: the packed bytes for 4 bits)
   or dequantize's weights, of x quantised with bits and group */
static zorch_tensor *quant_case(zorch_tensor *x, int bits, int64_t group, bool dequantized) {
  zorch_tensor *q = NULL, *s = NULL, *r = NULL;
  if (!zorch_quantize(x, bits, group, &q, &s)) r = dequantized ? zorch_dequantize(q, s) : zorch_to_dtype(q, ZORCH_F32);
  zorch_tensor_free(q);
  zorch_tensor_free(s);
  return r;
}
/* qlinear over w quantised with bits and group */
static zorch_tensor *qlinear_case(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b, int bits, int64_t group) {
  zorch_tensor *q = NULL, *s = NULL, *r = NULL;
  if (!zorch_quantize(w, bits, group, &q, &s)) r = zorch_qlinear(x, q, s, b);
  zorch_tensor_free(q);
  zorch_tensor_free(s);
  return r;
}
/* allclose and equal, their answer as a bool tensor */
static zorch_tensor *bool_scalar(zorch_status st, bool r) {
  return st ? NULL : zorch_full(0, NULL, r, ZORCH_BOOL, CPU);
}
static zorch_tensor *allclose_case(zorch_tensor *a, zorch_tensor *b, double rtol, double atol) {
  bool r = false;
  zorch_status st = zorch_allclose(a, b, rtol, atol, false, &r);
  return bool_scalar(st, r);
}
static zorch_tensor *equal_case(zorch_tensor *a, zorch_tensor *b) {
  bool r = false;
  zorch_status st = zorch_equal(a, b, &r);
  return bool_scalar(st, r);
}

/* batch norm from gen_golden.py's bn_stats running statistics (0.1 k - 0.2
   and 0.25 k + 0.5 over the channels k); `running`: the statistics after a
   training step with momentum 0.3, not the output */
static zorch_tensor *batch_norm_case(zorch_tensor **x, bool training, bool running) {
  int64_t ch = zorch_tensor_shape(x[0])[1];
  zorch_tensor *k = zorch_arange(0, (double)ch, 1, ZORCH_F32, CPU);
  zorch_tensor *k1 = zorch_mul_scalar(k, 0.1), *k2 = zorch_mul_scalar(k, 0.25);
  zorch_tensor *rm = zorch_add_scalar(k1, -0.2), *rv = zorch_add_scalar(k2, 0.5);
  zorch_tensor *o;
  if (running) {
    zorch_tensor *y = zorch_batch_norm(x[0], rm, rv, NULL, NULL, true, 0.3, 1e-5);
    zorch_tensor_free(y);
    o = zorch_cat(2, (zorch_tensor *[]){rm, rv}, 0);
  } else {
    o = zorch_batch_norm(x[0], rm, rv, x[1], x[2], training, 0.1, 1e-5);
  }
  zorch_tensor *tmp[] = {k, k1, k2, rm, rv};
  for (int i = 0; i < 5; i++) zorch_tensor_free(tmp[i]);
  return o;
}
/* linear, relu, linear */
static zorch_tensor *mlp_case(zorch_tensor **x) {
  zorch_tensor *h = zorch_linear(x[0], x[1], x[2]), *r = zorch_relu(h);
  zorch_tensor *o = zorch_linear(r, x[3], x[4]);
  zorch_tensor_free(h);
  zorch_tensor_free(r);
  return o;
}
/* the indices of max_pool2d */
static zorch_tensor *pool_indices(zorch_tensor *x, const zorch_pool2d_opts *o) {
  zorch_tensor *i = NULL, *v = zorch_max_pool2d(x, o, &i);
  zorch_tensor_free(v);
  return i;
}
/* The optimizer cases: the parameter x[0] after one step for each gradient
   x[1], x[2], ... (steps from 1; SGD's momentum buffer starts at the first). */
static zorch_tensor *optim_case(zorch_tensor **x, const zorch_adam_opts *ao, const zorch_sgd_opts *so) {
  zorch_tensor *p = zorch_clone(x[0]);
  int64_t sz = zorch_tensor_numel(p);
  zorch_tensor *m = zorch_zeros(1, &sz, ZORCH_F32, CPU), *v = zorch_zeros(1, &sz, ZORCH_F32, CPU);
  zorch_tensor *vm = zorch_zeros(1, &sz, ZORCH_F32, CPU);
  zorch_status st = ZORCH_OK;
  for (int k = 1; k < MAXT && x[k] && !st; k++)
    st = ao ? zorch_adam_step(p, x[k], m, v, vm, k, ao) : zorch_sgd_step(p, x[k], m, k == 1, so);
  zorch_tensor_free(m);
  zorch_tensor_free(v);
  zorch_tensor_free(vm);
  if (st) {
    zorch_tensor_free(p);
    return NULL;
  }
  return p;
}
static zorch_tensor *adam_case(zorch_tensor **x, zorch_adam_opts o) { return optim_case(x, &o, NULL); }
static zorch_tensor *sgd_case(zorch_tensor **x, zorch_sgd_opts o) { return optim_case(x, NULL, &o); }

/* The declared ops' cases (include/zorch_ops.h): GOLDEN(case, call, rtol, atol). */
typedef struct {
  const char *name;
  zorch_tensor *(*call)(zorch_tensor **x, const double *p);
  double rtol, atol;
} declared_case;
#define NO_GOLDEN(...)
#define GRAD(...)
#define BAD(...)
#define DEVICE(...)
#define GOLDEN(cs, call, rtol, atol)                                 \
  static zorch_tensor *golden_##cs(zorch_tensor **x, const double *p) { \
    (void)x, (void)p;                                                   \
    return call;                                                     \
  }
#define DECL_ROW_(name, ret, params, args, lua, kernels, cases) ZORCH_EXPAND_ cases
ZORCH_OPS(DECL_ROW_)
#undef GOLDEN
/* a declared op without a GOLDEN case (or NO_GOLDEN) does not build */
#define GOLDEN(...) +1
#undef NO_GOLDEN
#define NO_GOLDEN(...) +1
#define DECL_COUNT_(name, ret, params, args, lua, kernels, cases) \
  _Static_assert(0 ZORCH_EXPAND_ cases > 0, "the declared op " #name " has no GOLDEN case");
ZORCH_OPS(DECL_COUNT_)
#undef GOLDEN
#undef NO_GOLDEN
#define NO_GOLDEN(...)
#define GOLDEN(cs, call, rtol, atol) {#cs, golden_##cs, rtol, atol},
static const declared_case declared[] = {ZORCH_OPS(DECL_ROW_){NULL, NULL, 0, 0}};
#undef GOLDEN
#undef NO_GOLDEN
#undef GRAD
#undef BAD
#undef DEVICE

static const declared_case *declared_of(const char *name) {
  for (const declared_case *d = declared; d->name; d++)
    if (strcmp(d->name, name) == 0) return d;
  return NULL;
}

static zorch_tensor *run_op(const gcase *c, zorch_tensor **x) {
  const char *n = c->name;
  const declared_case *d = declared_of(n);
  if (d) return d->call(x, c->p);
  const zorch_pointwise_op *op = registered(n);
  if (op) return op->call(x, c->p);
  if (strncmp(n, "round_decimals", 14) == 0) return zorch_round(x[0], (int)c->p[0]);
  return NULL;
}

static void check_case(gcase *c) {
  zorch_tensor *x[MAXT] = {0};
  for (int i = 0; i < c->nin; i++) {
    x[i] = zorch_clone(c->in[i]);
    if (c->gout && zorch_dtype_is_float(zorch_tensor_dtype(x[i]))) zorch_set_requires_grad(x[i], true);
  }
  const zorch_pointwise_op *op = registered(c->name);
  if (op && op->differentiable)
    ok(c->gout && c->grad[0] && (op->nin < 2 || c->grad[1]), "%s: the golden case has gradients",
       c->name);
  zorch_tensor *out = run_op(c, x);
  int64_t n = zorch_tensor_numel(c->out);
  double *want = malloc((size_t)n * sizeof(double));
  zorch_tensor_to_doubles(c->out, want, n);
  const declared_case *d = declared_of(c->name);
  double rtol = d ? d->rtol : 2e-5, atol = d ? d->atol : 1e-6;
  double r = out ? close_ratio(out, want, n, rtol, atol) : INFINITY;
  ok(out && shape_is(out, zorch_tensor_ndim(c->out), zorch_tensor_shape(c->out)) && r <= 1,
     "%s: forward matches PyTorch (ratio %.3g)", c->name, r);
  free(want);
  if (out && c->gout) {
    ok(zorch_backward(out, c->gout, false) == ZORCH_OK, "%s: backward runs", c->name);
    for (int i = 0; i < c->nin; i++) {
      if (!c->grad[i]) continue;
      int64_t gn = zorch_tensor_numel(c->grad[i]);
      double *gw = malloc((size_t)gn * sizeof(double));
      zorch_tensor_to_doubles(c->grad[i], gw, gn);
      double gr = close_ratio(zorch_grad(x[i]), gw, gn, 2e-5, 1e-5);
      ok(gr <= 1, "%s: gradient of input %d matches PyTorch (ratio %.3g)", c->name, i, gr);
      free(gw);
    }
  }
  zorch_tensor_free(out);
  for (int i = 0; i < c->nin; i++) zorch_tensor_free(x[i]);
}

static void free_case(gcase *c) {
  for (int i = 0; i < MAXT; i++) {
    zorch_tensor_free(c->in[i]);
    zorch_tensor_free(c->grad[i]);
  }
  zorch_tensor_free(c->out);
  zorch_tensor_free(c->gout);
  memset(c, 0, sizeof *c);
}

int main(void) {
  FILE *f = fopen("golden/ops.txt", "r");
  if (!f) f = fopen("tests/golden/ops.txt", "r");
  if (!ok(f != NULL, "golden file opens")) return done_testing();
  static char line[1 << 16];
  int nops;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&nops);
  bool *seen = calloc((size_t)nops, sizeof *seen);
  bool dseen[sizeof declared / sizeof declared[0]] = {0};
  gcase c = {0};
  int ncases = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    if (strncmp(line, "case ", 5) == 0) {
      if (c.name[0]) check_case(&c), ncases++;
      free_case(&c);
      char *save = NULL, *tok = strtok_r(line + 5, " \n", &save);
      snprintf(c.name, sizeof c.name, "%.63s", tok ? tok : "");
      for (int i = 0; i < 2 && (tok = strtok_r(NULL, " \n", &save)); i++) c.p[i] = strtod(tok, NULL);
      const zorch_pointwise_op *op = registered(c.name);
      if (op) seen[op - ops] = true;
      const declared_case *d = declared_of(c.name);
      if (d) dseen[d - declared] = true;
      continue;
    }
    char role[16];
    zorch_tensor *t = parse_tensor(line, role);
    if (!t) continue;
    if (strncmp(role, "in", 2) == 0) {
      int i = atoi(role + 2);
      c.in[i] = t;
      if (i + 1 > c.nin) c.nin = i + 1;
    } else if (strcmp(role, "out") == 0) {
      c.out = t;
    } else if (strcmp(role, "gout") == 0) {
      c.gout = t;
    } else {
      c.grad[atoi(role + 4)] = t;
    }
  }
  if (c.name[0]) check_case(&c), ncases++;
  free_case(&c);
  fclose(f);
  ok(ncases >= 40, "read %d golden cases", ncases);
  for (int i = 0; i < nops; i++)
    ok(seen[i], "%s: the registered op has a golden case (tests/golden/gen_golden.py)", ops[i].name);
  free(seen);
  for (const declared_case *d = declared; d->name; d++)
    ok(dseen[d - declared], "%s: the declared case is in the golden file (tests/golden/gen_golden.py)", d->name);
  return done_testing();
}
