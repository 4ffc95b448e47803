/* pointwise.c: elementwise ops with NumPy broadcasting and PyTorch's type
   promotion, and their gradients. 16-bit floats compute in float32 and round
   back; integer inputs of float math compute in float32. */
#include <math.h>
#include <string.h>

#include "ops.h"

static const char *const bop_names[BOP_COUNT] = {
    "add", "sub", "mul", "div", "pow", "eq", "lt", "gt", "relu", "gelu", "gelu", "tanh",
    "sigmoid", "sqrt", "abs", "pow", "clamp"};
static const char *const uop_names[UOP_COUNT] = {
    "neg", "exp", "log", "sqrt", "abs", "relu", "gelu", "gelu", "tanh", "sigmoid",
    "add", "mul", "sub", "div", "pow", "clamp"};

static bool bop_is_cmp(bop k) { return k == BOP_EQ || k == BOP_LT || k == BOP_GT; }
static bool bop_needs_float(bop k) { return k == BOP_DIV || k >= BOP_POW; }

/* Raw elementwise binary op (no autograd): broadcast, promote, run the kernel. */
zorch_tensor *op_binary(bop k, zorch_tensor *a, zorch_tensor *b, double p0, double p1) {
  const char *op = bop_names[k];
  if (check_arg(op, "a", a) || check_arg(op, "b", b) || check_same_device(op, a, b)) return NULL;
  bool cmp = bop_is_cmp(k);
  zorch_dtype dt = dtype_promote(a->dtype, b->dtype);
  if (bop_needs_float(k) && !zorch_dtype_is_float(dt)) dt = ZORCH_F32;
  if (!cmp && dt == ZORCH_BOOL) dt = ZORCH_I64;
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype_on(a, dt) : dt;
  int nd;
  int64_t shape[ZORCH_MAX_DIMS];
  if (shape_broadcast(op, a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) return NULL;
  zorch_tensor *ca = op_cast(a, cd), *cb = ca ? op_cast(b, cd) : NULL;
  zorch_tensor *va = cb ? op_broadcast_view(ca, nd, shape) : NULL;
  zorch_tensor *vb = va ? op_broadcast_view(cb, nd, shape) : NULL;
  zorch_tensor *out = vb ? op_empty(a, nd, shape, cmp ? ZORCH_BOOL : cd) : NULL;
  if (out && backend_of(out)->binary(k, out, va, vb, p0, p1)) {
    zorch_tensor_free(out);
    out = NULL;
  }
  op_free(ca, cb, va, vb);
  if (!cmp && cd != dt) out = op_recast(out, dt);
  if (!out) err_prefix(op);
  return out;
}

static bool uop_keeps_int(uop k, double p0) {
  switch (k) {
    case UOP_NEG: case UOP_ABS: case UOP_RELU: case UOP_CLAMP: return true;
    case UOP_ADD_S: case UOP_MUL_S: case UOP_RSUB_S: return p0 == floor(p0);
    default: return false;
  }
}

/* Raw elementwise unary op (no autograd). */
static zorch_tensor *ew_unary(uop k, zorch_tensor *a, double p0, double p1) {
  const char *op = uop_names[k];
  if (check_arg(op, "input", a)) return NULL;
  zorch_dtype dt = a->dtype;
  if (!zorch_dtype_is_float(dt) && !(uop_keeps_int(k, p0) && dt != ZORCH_BOOL)) dt = ZORCH_F32;
  if (k == UOP_CLAMP && !zorch_dtype_is_float(dt) && (p0 != floor(p0) || p1 != floor(p1)))
    dt = ZORCH_F32;
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype_on(a, dt) : dt;
  zorch_tensor *ca = op_cast(a, cd);
  zorch_tensor *out = ca ? op_empty(a, a->ndim, a->shape, cd) : NULL;
  if (out && backend_of(out)->unary(k, out, ca, p0, p1)) {
    zorch_tensor_free(out);
    out = NULL;
  }
  zorch_tensor_free(ca);
  if (cd != dt) out = op_recast(out, dt);
  if (!out) err_prefix(op);
  return out;
}

#define RET(x) return (*gin_slot = (x)) ? ZORCH_OK : zorch_last_status()

/* ---- binary ops ------------------------------------------------------------------ */
static zorch_status add_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  gin[0] = zorch_tensor_retain(g);
  gin[1] = zorch_tensor_retain(g);
  return ZORCH_OK;
}

static zorch_status sub_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = zorch_tensor_retain(g);
  if (ag_wants(n, 1) && !(gin[1] = zorch_neg(g))) return zorch_last_status();
  return ZORCH_OK;
}

static zorch_status mul_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  if (ag_wants(n, 0) && !(gin[0] = zorch_mul(g, n->saved[1]))) return zorch_last_status();
  if (ag_wants(n, 1) && !(gin[1] = zorch_mul(g, n->saved[0]))) return zorch_last_status();
  return ZORCH_OK;
}

/* d(a/b) = g/b, -g*a/b^2 */
static zorch_status div_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1];
  if (ag_wants(n, 0) && !(gin[0] = zorch_div(g, b))) return zorch_last_status();
  if (ag_wants(n, 1)) {
    zorch_tensor *ga = zorch_mul(g, a), *bb = ga ? zorch_mul(b, b) : NULL;
    zorch_tensor *q = bb ? zorch_div(ga, bb) : NULL;
    gin[1] = q ? zorch_neg(q) : NULL;
    op_free(ga, bb, q, NULL);
    if (!gin[1]) return zorch_last_status();
  }
  return ZORCH_OK;
}

/* d(a^b) = g*b*a^(b-1), g*a^b*log(a) */
static zorch_status pow_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *y = n->saved[2];
  if (ag_wants(n, 0)) {
    zorch_tensor *bm1 = zorch_add_scalar(b, -1), *p = bm1 ? zorch_pow(a, bm1) : NULL;
    zorch_tensor *bp = p ? zorch_mul(b, p) : NULL;
    gin[0] = bp ? zorch_mul(g, bp) : NULL;
    op_free(bm1, p, bp, NULL);
    if (!gin[0]) return zorch_last_status();
  }
  if (ag_wants(n, 1)) {
    zorch_tensor *la = zorch_log(a), *yl = la ? zorch_mul(y, la) : NULL;
    gin[1] = yl ? zorch_mul(g, yl) : NULL;
    op_free(la, yl, NULL, NULL);
    if (!gin[1]) return zorch_last_status();
  }
  return ZORCH_OK;
}

static zorch_tensor *binary_op(bop k, const char *name, ag_backward_fn fn, zorch_tensor *a,
                               zorch_tensor *b, int nsave) {
  zorch_tensor *out = op_binary(k, a, b, 0, 0);
  zorch_tensor *in[2] = {a, b};
  zorch_tensor *save[3] = {a, b, out};
  return ag_record(out, name, fn, 2, in, nsave, save, NULL);
}

zorch_tensor *zorch_add(zorch_tensor *a, zorch_tensor *b) {
  return binary_op(BOP_ADD, "AddBackward", add_bwd, a, b, 0);
}
zorch_tensor *zorch_sub(zorch_tensor *a, zorch_tensor *b) {
  return binary_op(BOP_SUB, "SubBackward", sub_bwd, a, b, 0);
}
zorch_tensor *zorch_mul(zorch_tensor *a, zorch_tensor *b) {
  return binary_op(BOP_MUL, "MulBackward", mul_bwd, a, b, 2);
}
zorch_tensor *zorch_div(zorch_tensor *a, zorch_tensor *b) {
  return binary_op(BOP_DIV, "DivBackward", div_bwd, a, b, 2);
}
zorch_tensor *zorch_pow(zorch_tensor *a, zorch_tensor *b) {
  return binary_op(BOP_POW, "PowBackward", pow_bwd, a, b, 3);
}
zorch_status op_add_(zorch_tensor *dst, zorch_tensor *src) {
  bool prev = zorch_set_grad_enabled(false);
  zorch_status st;
  if (dst->dtype == src->dtype && dst->dtype != ZORCH_BF16 && dst->dtype != ZORCH_F16 && tensor_same_shape(dst, src)) {
    st = check_same_device("add_", dst, src) ? zorch_last_status()
                                              : backend_of(dst)->binary(BOP_ADD, dst, dst, src, 0, 0);
  } else {
    zorch_tensor *sum = zorch_add(dst, src);
    st = sum ? zorch_copy_(dst, sum) : zorch_last_status();
    zorch_tensor_free(sum);
  }
  zorch_set_grad_enabled(prev);
  return st;
}

zorch_tensor *zorch_eq(zorch_tensor *a, zorch_tensor *b) { return op_binary(BOP_EQ, a, b, 0, 0); }
zorch_tensor *zorch_lt(zorch_tensor *a, zorch_tensor *b) { return op_binary(BOP_LT, a, b, 0, 0); }
zorch_tensor *zorch_gt(zorch_tensor *a, zorch_tensor *b) { return op_binary(BOP_GT, a, b, 0, 0); }

/* ---- unary ops --------------------------------------------------------------------- */
/* Gradients of the form g * f'(x) run as one fused kernel: node->iv[0] names it,
   saved[0] is x (or y for the _Y kernels), p[0..1] its parameters. */
static zorch_status fused_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = op_binary((bop)n->iv[0], g, n->saved[0], n->p[0], n->p[1]);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

static zorch_status neg_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  zorch_tensor **gin_slot = &gin[0];
  RET(zorch_neg(g));
}
static zorch_status exp_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor **gin_slot = &gin[0];
  RET(zorch_mul(g, n->saved[0]));
}
static zorch_status log_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor **gin_slot = &gin[0];
  RET(zorch_div(g, n->saved[0]));
}
static zorch_status scale_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor **gin_slot = &gin[0];
  RET(n->p[0] == 1 ? zorch_tensor_retain(g) : zorch_mul_scalar(g, n->p[0]));
}
/* d(s/x) = -g*y/x with y = s/x */
static zorch_status rdiv_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *gy = zorch_mul(g, n->saved[1]), *q = gy ? zorch_div(gy, n->saved[0]) : NULL;
  gin[0] = q ? zorch_neg(q) : NULL;
  op_free(gy, q, NULL, NULL);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

typedef struct {
  const char *name;
  ag_backward_fn fn;
  int fused; /* bop for fused_bwd, or -1 */
  int save;  /* 0: input, 1: output, 2: both */
} unary_def;

static const unary_def unary_defs[UOP_COUNT] = {
    [UOP_NEG] = {"NegBackward", neg_bwd, -1, -1},
    [UOP_EXP] = {"ExpBackward", exp_bwd, -1, 1},
    [UOP_LOG] = {"LogBackward", log_bwd, -1, 0},
    [UOP_SQRT] = {"SqrtBackward", fused_bwd, BOP_SQRT_BWD_Y, 1},
    [UOP_ABS] = {"AbsBackward", fused_bwd, BOP_ABS_BWD, 0},
    [UOP_RELU] = {"ReluBackward", fused_bwd, BOP_RELU_BWD, 0},
    [UOP_GELU] = {"GeluBackward", fused_bwd, BOP_GELU_BWD, 0},
    [UOP_GELU_TANH] = {"GeluBackward", fused_bwd, BOP_GELU_TANH_BWD, 0},
    [UOP_TANH] = {"TanhBackward", fused_bwd, BOP_TANH_BWD_Y, 1},
    [UOP_SIGMOID] = {"SigmoidBackward", fused_bwd, BOP_SIGMOID_BWD_Y, 1},
    [UOP_ADD_S] = {"AddBackward", scale_bwd, -1, -1},
    [UOP_MUL_S] = {"MulBackward", scale_bwd, -1, -1},
    [UOP_RSUB_S] = {"RsubBackward", scale_bwd, -1, -1},
    [UOP_RDIV_S] = {"DivBackward", rdiv_bwd, -1, 2},
    [UOP_POW_S] = {"PowBackward", fused_bwd, BOP_POW_S_BWD, 0},
    [UOP_CLAMP] = {"ClampBackward", fused_bwd, BOP_CLAMP_BWD, 0},
};

static zorch_tensor *unary_op(uop k, zorch_tensor *a, double p0, double p1) {
  zorch_tensor *out = ew_unary(k, a, p0, p1);
  if (!out) return NULL;
  const unary_def *d = &unary_defs[k];
  zorch_tensor *save[2] = {a, out};
  int nsave = d->save < 0 ? 0 : 2;
  if (d->save == 1) save[0] = out, save[1] = NULL;
  if (d->save == 0) save[1] = NULL;
  ag_node *node;
  out = ag_record(out, d->name, d->fn, 1, &a, nsave, save, &node);
  if (node) {
    node->iv[0] = d->fused;
    node->p[0] = k == UOP_ADD_S ? 1 : k == UOP_RSUB_S ? -1 : p0;
    node->p[1] = p1;
  }
  return out;
}

zorch_tensor *zorch_neg(zorch_tensor *a) { return unary_op(UOP_NEG, a, 0, 0); }
zorch_tensor *zorch_exp(zorch_tensor *a) { return unary_op(UOP_EXP, a, 0, 0); }
zorch_tensor *zorch_log(zorch_tensor *a) { return unary_op(UOP_LOG, a, 0, 0); }
zorch_tensor *zorch_sqrt(zorch_tensor *a) { return unary_op(UOP_SQRT, a, 0, 0); }
zorch_tensor *zorch_abs(zorch_tensor *a) { return unary_op(UOP_ABS, a, 0, 0); }
zorch_tensor *zorch_relu(zorch_tensor *a) { return unary_op(UOP_RELU, a, 0, 0); }
zorch_tensor *zorch_gelu(zorch_tensor *a, bool tanh_approx) {
  return unary_op(tanh_approx ? UOP_GELU_TANH : UOP_GELU, a, 0, 0);
}
zorch_tensor *zorch_tanh(zorch_tensor *a) { return unary_op(UOP_TANH, a, 0, 0); }
zorch_tensor *zorch_sigmoid(zorch_tensor *a) { return unary_op(UOP_SIGMOID, a, 0, 0); }
zorch_tensor *zorch_add_scalar(zorch_tensor *a, double s) { return unary_op(UOP_ADD_S, a, s, 0); }
zorch_tensor *zorch_mul_scalar(zorch_tensor *a, double s) { return unary_op(UOP_MUL_S, a, s, 0); }
zorch_tensor *zorch_rsub_scalar(zorch_tensor *a, double s) { return unary_op(UOP_RSUB_S, a, s, 0); }
zorch_tensor *zorch_rdiv_scalar(zorch_tensor *a, double s) { return unary_op(UOP_RDIV_S, a, s, 0); }
zorch_tensor *zorch_pow_scalar(zorch_tensor *a, double e) { return unary_op(UOP_POW_S, a, e, 0); }
zorch_tensor *zorch_clamp(zorch_tensor *a, double lo, double hi) {
  if (lo > hi) return err_null(ZORCH_ERR_ARG, "clamp: min %g is greater than max %g", lo, hi);
  return unary_op(UOP_CLAMP, a, lo, hi);
}

/* ---- where and masked_fill ------------------------------------------------------------- */
static zorch_tensor *where_raw(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b) {
  const char *op = "where";
  if (check_arg(op, "condition", c) || check_arg(op, "a", a) || check_arg(op, "b", b) ||
      check_same_device(op, c, a) || check_same_device(op, a, b))
    return NULL;
  if (c->dtype != ZORCH_BOOL && c->dtype != ZORCH_U8)
    return err_null(ZORCH_ERR_DTYPE, "where: condition must be bool, got %s",
                    zorch_dtype_name(c->dtype));
  int n1, nd;
  int64_t s1[ZORCH_MAX_DIMS], shape[ZORCH_MAX_DIMS];
  if (shape_broadcast(op, a->ndim, a->shape, b->ndim, b->shape, &n1, s1) ||
      shape_broadcast(op, c->ndim, c->shape, n1, s1, &nd, shape))
    return NULL;
  zorch_dtype dt = dtype_promote(a->dtype, b->dtype);
  zorch_tensor *ca = op_cast(a, dt), *cb = ca ? op_cast(b, dt) : NULL;
  zorch_tensor *va = cb ? op_broadcast_view(ca, nd, shape) : NULL;
  zorch_tensor *vb = va ? op_broadcast_view(cb, nd, shape) : NULL;
  zorch_tensor *vc = vb ? op_broadcast_view(c, nd, shape) : NULL;
  zorch_tensor *out = vc ? op_empty(a, nd, shape, dt) : NULL;
  if (out && backend_of(out)->where(out, vc, va, vb)) {
    zorch_tensor_free(out);
    out = NULL;
  }
  op_free(ca, cb, va, vb);
  zorch_tensor_free(vc);
  return out;
}

static zorch_tensor *scalar_like(const zorch_tensor *t, double v) {
  return zorch_full(0, NULL, v, t->dtype, t->st->device);
}

/* saved[0] is the condition; iv[0] says whether input 0 is the "true" branch */
static zorch_status where_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *z = scalar_like(g, 0);
  if (!z) return zorch_last_status();
  zorch_status st = ZORCH_OK;
  int ia = (int)n->iv[0], ib = (int)n->iv[1];
  if (ia >= 0 && ag_wants(n, ia) && !(gin[ia] = where_raw(n->saved[0], g, z))) st = zorch_last_status();
  if (!st && ib >= 0 && ag_wants(n, ib) && !(gin[ib] = where_raw(n->saved[0], z, g)))
    st = zorch_last_status();
  zorch_tensor_free(z);
  return st;
}

zorch_tensor *zorch_where(zorch_tensor *cond, zorch_tensor *a, zorch_tensor *b) {
  zorch_tensor *out = where_raw(cond, a, b);
  zorch_tensor *in[3] = {a, b, cond};
  ag_node *node;
  out = ag_record(out, "WhereBackward", where_bwd, 3, in, 1, &cond, &node);
  if (node) {
    node->iv[0] = 0;
    node->iv[1] = 1;
  }
  return out;
}

zorch_tensor *zorch_masked_fill(zorch_tensor *a, zorch_tensor *mask, double value) {
  if (check_arg("masked_fill", "input", a) || check_arg("masked_fill", "mask", mask)) return NULL;
  zorch_tensor *v = scalar_like(a, value);
  if (!v) return NULL;
  zorch_tensor *out = where_raw(mask, v, a);
  zorch_tensor_free(v);
  if (!out) {
    err_prefix("masked_fill");
    return NULL;
  }
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (!tensor_same_shape(out, a)) {
    zorch_tensor_free(out);
    return err_null(ZORCH_ERR_SHAPE, "masked_fill: mask %s does not broadcast to input %s",
                    SHAPE(mask, s1), SHAPE(a, s2));
  }
  zorch_tensor *in[2] = {a, mask};
  ag_node *node;
  out = ag_record(out, "MaskedFillBackward", where_bwd, 2, in, 1, &mask, &node);
  if (node) {
    node->iv[0] = -1;
    node->iv[1] = 0;
  }
  return out;
}
