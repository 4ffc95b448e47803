/* pointwise.c: elementwise ops with NumPy broadcasting and PyTorch's type
   promotion, and their gradients. 16-bit floats compute in float32 and round
   back; integer inputs of float math compute in float32. The ops, their names,
   gradients and public functions come from the registry, ops/backend/pointwise_ops.h. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops.h"

/* What a node of the op saves (the registry's `save`). */
enum { SAVE_NONE, SAVE_IN, SAVE_OUT, SAVE_BOTH };
/* The registry's `ints`: no integer kernels, signed ones (int32, int64), all. */
enum { INTS_NONE, INTS_SIGNED, INTS_ALL };

/* An elementwise op as the op layer sees it. */
typedef struct {
  const char *name;  /* in messages: the registry's user-facing name */
  const char *node;  /* the autograd node's name (NULL: no gradient) */
  ag_backward_fn fn; /* its backward (NULL: no gradient) */
  int fused;         /* for fused_bwd: the bop of the gradient kernel; else -1 */
  int save;          /* SAVE_* */
  int nparams;       /* scalar parameters (unary ops) */
  int ints;          /* INTS_*: which integer dtypes have kernels (they stay integer) */
  bool float_only;   /* integer and bool inputs are an error */
  bool cmp;          /* writes bool (comparisons) */
} pw_def;

/* A unary node's arguments. */
typedef struct {
  int fused;
  double p0, p1;
} unary_args;

/* A 0-d tensor of t's dtype and device holding v. */
static zorch_tensor *scalar_like(const zorch_tensor *t, double v) {
  return op_full(0, NULL, v, t->dtype, t->st->device);
}

/* Stores a backward's one result: OK, or the error that left it NULL. */
static zorch_status grad_result(zorch_tensor **gin, zorch_tensor *t) {
  *gin = t;
  return t ? ZORCH_OK : zorch_last_status();
}

/* ---- the backward functions the registry names ------------------------------------- */
/* Gradients of the form g * f'(x) run as one fused kernel of (g, saved[0]), where
   saved[0] is x (or y for the _Y kernels). */
static zorch_status fused_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const unary_args *a = AG_ARGS(n, unary_args);
  return grad_result(&gin[0], op_binary((bop)a->fused, g, n->saved[0], a->p0, a->p1));
}

static zorch_status add_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  gin[0] = zorch_tensor_retain(g);
  gin[1] = zorch_tensor_retain(g);
  return ZORCH_OK;
}

static zorch_status sub_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = zorch_tensor_retain(g);
  return ag_wants(n, 1) ? grad_result(&gin[1], zorch_neg(g)) : ZORCH_OK;
}

static zorch_status mul_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  if (ag_wants(n, 0) && grad_result(&gin[0], zorch_mul(g, n->saved[1]))) return zorch_last_status();
  return ag_wants(n, 1) ? grad_result(&gin[1], zorch_mul(g, n->saved[0])) : ZORCH_OK;
}

/* d(a/b) = g/b, -g*((a/b)/b): b^2 would overflow or underflow where the
   gradient does not (b = 1e-30 in float32, b = 300 in float16); the product
   and its sign in one pass */
static zorch_status div_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *ab = NULL, *abb = NULL;
  bool ok = false;
  if (ag_wants(n, 0) && !(gin[0] = zorch_div(g, b))) goto cleanup;
  if (ag_wants(n, 1)) {
    if (!(ab = zorch_div(a, b))) goto cleanup;
    if (!(abb = zorch_div(ab, b))) goto cleanup;
    if (!(gin[1] = op_binary(BOP_MUL_SCALED, g, abb, -1, 0))) goto cleanup;
  }
  ok = true;
cleanup:
  OP_FREE(ab, abb);
  return ok ? ZORCH_OK : zorch_last_status();
}

/* d(a^b) = g*b*a^(b-1), g*a^b*log(a) */
static zorch_status pow_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *y = n->saved[2];
  zorch_tensor *bm1 = NULL, *p = NULL, *bp = NULL, *la = NULL, *yl = NULL;
  bool ok = false;
  zorch_tensor *zero = NULL, *mask = NULL, *t = NULL, *pos = NULL;
  /* PyTorch's masks: no gradient to a where b is 0 (0 * 0^-1), none to b where
     a is 0 and b >= 0 (0^b * log 0) */
  if (!(zero = op_zeros(g, 0, NULL, g->dtype))) goto cleanup;
  if (ag_wants(n, 0)) {
    if (!(bm1 = zorch_add_scalar(b, -1))) goto cleanup;
    if (!(p = zorch_pow(a, bm1))) goto cleanup;
    if (!(bp = zorch_mul(b, p))) goto cleanup;
    if (!(t = zorch_mul(g, bp)) || !(mask = zorch_eq(b, zero))) goto cleanup;
    if (!(gin[0] = zorch_where(mask, zero, t))) goto cleanup;
    OP_FREE(t, mask);
    t = mask = NULL;
  }
  if (ag_wants(n, 1)) {
    if (!(la = zorch_log(a))) goto cleanup;
    if (!(yl = zorch_mul(y, la))) goto cleanup;
    if (!(t = zorch_mul(g, yl)) || !(mask = zorch_eq(a, zero)) || !(pos = zorch_lt(b, zero))) goto cleanup;
    zorch_tensor *both = zorch_gt(mask, pos); /* a == 0 and not b < 0 */
    if (!both) goto cleanup;
    gin[1] = zorch_where(both, zero, t);
    zorch_tensor_free(both);
    if (!gin[1]) goto cleanup;
  }
  ok = true;
cleanup:
  OP_FREE(bm1, p, bp, la, yl, zero, mask, t, pos);
  return ok ? ZORCH_OK : zorch_last_status();
}

/* maximum and minimum: the input that wins takes the gradient and a tie gives
   each half (PyTorch's); NaN equals nothing and loses to nothing, so both take it */
static zorch_status extremum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin, bool max) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1];
  zorch_tensor *zero = NULL, *tie = NULL, *half = NULL, *w = NULL, *la = NULL, *lb = NULL;
  bool ok = false;
  if (!(zero = scalar_like(g, 0)) || !(tie = zorch_eq(a, b)) || !(half = zorch_mul_scalar(g, 0.5)) ||
      !(w = zorch_where(tie, half, g)))
    goto cleanup;
  if (ag_wants(n, 0) &&
      (!(la = max ? zorch_lt(a, b) : zorch_gt(a, b)) || !(gin[0] = zorch_where(la, zero, w))))
    goto cleanup;
  if (ag_wants(n, 1) &&
      (!(lb = max ? zorch_gt(a, b) : zorch_lt(a, b)) || !(gin[1] = zorch_where(lb, zero, w))))
    goto cleanup;
  ok = true;
cleanup:
  OP_FREE(zero, tie, half, w, la, lb);
  return ok ? ZORCH_OK : zorch_last_status();
}
static zorch_status maximum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return extremum_bwd(n, g, gin, true);
}
static zorch_status minimum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return extremum_bwd(n, g, gin, false);
}

/* fmax and fmin: a takes the gradient where it wins, or where b is NaN (the one
   that was dropped), b elsewhere; a tie gives each half (PyTorch's) */
static zorch_status fextremum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin, bool max) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1];
  zorch_tensor *zero = NULL, *wins = NULL, *nan = NULL, *take = NULL, *tie = NULL, *half = NULL;
  zorch_tensor *ta = NULL, *tb = NULL;
  bool ok = false;
  if (!(zero = scalar_like(g, 0)) || !(wins = max ? zorch_gt(a, b) : zorch_lt(a, b)) ||
      !(nan = zorch_ne(b, b)) || !(take = zorch_maximum(wins, nan)) || /* or, on bools */
      !(tie = zorch_eq(a, b)) || !(half = zorch_mul_scalar(g, 0.5)))
    goto cleanup;
  if (ag_wants(n, 0) && (!(ta = zorch_where(take, g, zero)) || !(gin[0] = zorch_where(tie, half, ta))))
    goto cleanup;
  if (ag_wants(n, 1) && (!(tb = zorch_where(take, zero, g)) || !(gin[1] = zorch_where(tie, half, tb))))
    goto cleanup;
  ok = true;
cleanup:
  OP_FREE(zero, wins, nan, take, tie, half, ta, tb);
  return ok ? ZORCH_OK : zorch_last_status();
}
static zorch_status fmax_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return fextremum_bwd(n, g, gin, true);
}
static zorch_status fmin_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return fextremum_bwd(n, g, gin, false);
}

/* Gradients g * fa and g * fb for the factors fa, fb the caller made (either NULL
   where not wanted); takes the factors. */
static zorch_status scaled_pair(ag_node *n, zorch_tensor *g, zorch_tensor **gin, zorch_tensor *fa,
                                zorch_tensor *fb) {
  bool ok = false;
  if (ag_wants(n, 0) && (!fa || !(gin[0] = zorch_mul(g, fa)))) goto cleanup;
  if (ag_wants(n, 1) && (!fb || !(gin[1] = zorch_mul(g, fb)))) goto cleanup;
  ok = true;
cleanup:
  OP_FREE(fa, fb);
  return ok ? ZORCH_OK : zorch_last_status();
}

/* d atan2(a, b) = g*b/(a^2+b^2), -g*a/(a^2+b^2); 0 at the origin (and where
   a^2+b^2 underflows), where PyTorch zeroes the infinite reciprocal */
static zorch_status atan2_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *aa = NULL, *bb = NULL, *d = NULL, *na = NULL;
  zorch_tensor *r = NULL, *inf = NULL, *zero = NULL, *r0 = NULL, *fa = NULL, *fb = NULL;
  if ((aa = zorch_mul(a, a)) && (bb = zorch_mul(b, b)) && (d = zorch_add(aa, bb)) && (r = zorch_reciprocal(d)) &&
      (inf = zorch_isinf(r)) && (zero = scalar_like(r, 0)) && (r0 = zorch_where(inf, zero, r))) {
    if (ag_wants(n, 0)) fa = zorch_mul(b, r0);
    if (ag_wants(n, 1) && (na = zorch_neg(a))) fb = zorch_mul(na, r0);
  }
  OP_FREE(aa, bb, d, na, r, inf, zero, r0);
  return scaled_pair(n, g, gin, fa, fb);
}

/* d hypot(a, b) = g*a/out, g*b/out */
static zorch_status hypot_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *y = n->saved[2];
  zorch_tensor *fa = ag_wants(n, 0) ? zorch_div(n->saved[0], y) : NULL;
  zorch_tensor *fb = ag_wants(n, 1) ? zorch_div(n->saved[1], y) : NULL;
  return scaled_pair(n, g, gin, fa, fb);
}

/* d logaddexp(a, b) = g*sigmoid(a-b), g*sigmoid(b-a) */
static zorch_status logaddexp_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *d = NULL, *e = NULL, *fa = NULL, *fb = NULL;
  if (ag_wants(n, 0) && (d = zorch_sub(a, b))) fa = zorch_sigmoid(d);
  if (ag_wants(n, 1) && (e = zorch_sub(b, a))) fb = zorch_sigmoid(e);
  OP_FREE(d, e);
  return scaled_pair(n, g, gin, fa, fb);
}

/* d copysign(a, b) = g*out/a (the sign a's magnitude took), 0 where a is 0; b
   gets zeros */
static zorch_status copysign_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *y = n->saved[2], *zero = NULL, *r = NULL, *az = NULL, *fa = NULL;
  zorch_tensor *fb = NULL;
  if ((zero = scalar_like(g, 0))) {
    if (ag_wants(n, 0) && (r = zorch_div(y, a)) && (az = zorch_eq(a, zero))) fa = zorch_where(az, zero, r);
    if (ag_wants(n, 1)) fb = zorch_tensor_retain(zero);
  }
  OP_FREE(zero, r, az);
  return scaled_pair(n, g, gin, fa, fb);
}

/* fmod and remainder: a - q*b with q = trunc(a/b) or floor(a/b), so a takes g
   and b takes -g*q (PyTorch's) */
static zorch_status quotient_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin, bop quotient) {
  zorch_tensor *q = NULL, *nq = NULL;
  if (ag_wants(n, 1) && (q = op_binary(quotient, n->saved[0], n->saved[1], 0, 0))) nq = zorch_neg(q);
  zorch_tensor_free(q);
  return scaled_pair(n, g, gin, ag_wants(n, 0) ? scalar_like(g, 1) : NULL, nq);
}
static zorch_status fmod_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return quotient_bwd(n, g, gin, BOP_TRUNC_DIV);
}
static zorch_status remainder_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return quotient_bwd(n, g, gin, BOP_FLOOR_DIVIDE);
}

static zorch_status neg_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  return grad_result(&gin[0], zorch_neg(g));
}
static zorch_status exp_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return grad_result(&gin[0], zorch_mul(g, n->saved[0]));
}
static zorch_status log_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  return grad_result(&gin[0], zorch_div(g, n->saved[0]));
}
/* the step functions (sign, floor, round, ...): a zero gradient, as PyTorch's */
static zorch_status zero_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  return grad_result(&gin[0], op_zeros(g, g->ndim, g->shape, g->dtype));
}
/* also frac's: the gradient passes unchanged */
static zorch_status add_scalar_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  gin[0] = zorch_tensor_retain(g);
  return ZORCH_OK;
}
static zorch_status mul_scalar_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  double s = AG_ARGS(n, unary_args)->p0;
  return grad_result(&gin[0], s == 1 ? zorch_tensor_retain(g) : zorch_mul_scalar(g, s));
}
/* d(s/x) = -g*y/x with y = s/x */
static zorch_status rdiv_scalar_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *gy = NULL, *q = NULL;
  bool ok = false;
  if (!(gy = zorch_mul(g, n->saved[1]))) goto cleanup;
  if (!(q = zorch_div(gy, n->saved[0]))) goto cleanup;
  if (!(gin[0] = zorch_neg(q))) goto cleanup;
  ok = true;
cleanup:
  OP_FREE(gy, q);
  return ok ? ZORCH_OK : zorch_last_status();
}

/* ---- the registry, as tables indexed by the enums ------------------------------------ */
#define GRAD_FUSED(k, s) .fn = fused_bwd, .fused = (k), .save = (s)
#define GRAD_CUSTOM(f, s) .fn = (f), .fused = -1, .save = (s)
#define GRAD_NO_GRAD .fn = NULL, .fused = -1, .save = SAVE_NONE
#define HAS_INT_INT INTS_ALL
#define HAS_INT_SIGNED INTS_SIGNED
#define HAS_INT_NO_INT INTS_NONE
#define HAS_INT_FLOAT INTS_NONE
#define FLOAT_ONLY_INT false
#define FLOAT_ONLY_SIGNED false
#define FLOAT_ONLY_NO_INT false
#define FLOAT_ONLY_FLOAT true
#define IS_BOOL_SAME false
#define IS_BOOL_BOOL true
#define U_DEF(ID, nm, nd, fmath, ik, imath, grad, np, ...) \
  [UOP_##ID] = {.name = #nm, .node = nd, GRAD_##grad, .nparams = np, .ints = HAS_INT_##ik, \
                .float_only = FLOAT_ONLY_##ik},
#define B_DEF(ID, nm, nd, out, fmath, ik, imath, grad, ...) \
  [BOP_##ID] = {.name = #nm, .node = nd, GRAD_##grad, .ints = HAS_INT_##ik, .cmp = IS_BOOL_##out},
static const pw_def unary_defs[] = {ZORCH_UNARY_OPS(U_DEF)};
static const pw_def binary_defs[] = {ZORCH_BINARY_OPS(B_DEF)};
_Static_assert(sizeof unary_defs / sizeof unary_defs[0] == UOP_COUNT, "an entry per unary op");
_Static_assert(sizeof binary_defs / sizeof binary_defs[0] == BOP_COUNT, "an entry per binary op");

/* ---- PyTorch's type promotion --------------------------------------------------------- */
/* The rules every elementwise op follows, beyond dtype_promote's: ops without
   integer kernels compute integers in float32; on two bools a sum is their or
   and a product their and (as maximum and minimum), while a difference, a
   power and the integer divisions are refused, as is a difference with any
   bool operand. *k gets the kernel to run (or's and and's on bools). */
static zorch_status binary_dtype(bop *k, const zorch_tensor *a, const zorch_tensor *b, zorch_dtype *dt) {
  const pw_def *d = &binary_defs[*k];
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  *dt = dtype_promote(a->dtype, b->dtype);
  if (*k == BOP_SUB && (a->dtype == ZORCH_BOOL || b->dtype == ZORCH_BOOL))
    return err_set(ZORCH_ERR_DTYPE,
                   "sub: subtraction with a bool tensor is not supported (a %s %s, b %s %s); "
                   "for the xor of two masks use ne",
                   zorch_dtype_name(a->dtype), SHAPE(a, s1), zorch_dtype_name(b->dtype), SHAPE(b, s2));
  if (!d->ints && !zorch_dtype_is_float(*dt)) *dt = ZORCH_F32;
  if (d->cmp || *dt != ZORCH_BOOL) return ZORCH_OK;
  if (*k == BOP_ADD || *k == BOP_MAXIMUM || *k == BOP_FMAX) *k = BOP_MAXIMUM;
  else if (*k == BOP_MUL || *k == BOP_MINIMUM || *k == BOP_FMIN) *k = BOP_MINIMUM;
  else
    return err_set(ZORCH_ERR_DTYPE, "%s: not supported for bool tensors (a %s, b %s)", d->name,
                   SHAPE(a, s1), SHAPE(b, s2));
  return ZORCH_OK;
}

/* Integer division by zero is an error (PyTorch's ZeroDivisionError), found
   before the kernel runs: the kernels give 0 there rather than trap. */
static zorch_status check_divisor(const char *op, zorch_tensor *b) {
  zorch_tensor *zero = scalar_like(b, 0), *hit = NULL, *n = NULL;
  double count = 0;
  zorch_status st = ZORCH_ERR_OOM;
  if (zero && (hit = op_binary(BOP_EQ, b, zero, 0, 0)) && (n = zorch_sum(hit, 0, NULL, false)))
    st = zorch_tensor_item(n, &count);
  OP_FREE(zero, hit, n);
  if (st) return zorch_last_status();
  char s[ERR_SHAPE_BUF];
  if (count > 0)
    return err_set(ZORCH_ERR_ARG, "%s: integer division by zero (divisor b, %s %s, holds a zero)", op,
                   zorch_dtype_name(b->dtype), SHAPE(b, s));
  return ZORCH_OK;
}

/* ---- the raw ops (no autograd) --------------------------------------------------------- */
/* Raw elementwise binary op (no autograd): broadcast, promote, run the kernel. */
zorch_tensor *op_binary(bop k, zorch_tensor *a, zorch_tensor *b, double p0, double p1) {
  const pw_def *d = &binary_defs[k];
  const char *op = d->name;
  if (check_arg(op, "a", a) || check_arg(op, "b", b) || check_same_device(op, a, b)) return NULL;
  zorch_dtype dt;
  if (binary_dtype(&k, a, b, &dt)) return NULL;
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype_on(a, dt) : dt;
  int nd;
  int64_t shape[ZORCH_MAX_DIMS];
  if (shape_broadcast(op, a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) return NULL;
  zorch_tensor *ca = NULL, *cb = NULL, *va = NULL, *vb = NULL, *out = NULL;
  if (!(ca = op_cast(a, cd))) goto cleanup;
  if (!(cb = op_cast(b, cd))) goto cleanup;
  if (!zorch_dtype_is_float(cd) && (k == BOP_FLOOR_DIVIDE || k == BOP_REMAINDER || k == BOP_FMOD) &&
      check_divisor(op, cb))
    goto cleanup;
  if (!(va = op_broadcast_view(ca, nd, shape))) goto cleanup;
  if (!(vb = op_broadcast_view(cb, nd, shape))) goto cleanup;
  if (!(out = op_empty(a, nd, shape, d->cmp ? ZORCH_BOOL : cd))) goto cleanup;
  if (backend_of(out)->binary(k, out, va, vb, p0, p1)) {
    zorch_tensor_free(out);
    out = NULL;
    goto cleanup;
  }
  if (!d->cmp && cd != dt) out = op_recast(out, dt);
cleanup:
  OP_FREE(ca, cb, va, vb);
  if (!out) err_prefix(op);
  return out;
}

/* Integer inputs stay integer when the op has integer kernels and its
   parameters are whole numbers; the rest compute in float32, and the
   float-only ops refuse them. Bool follows PyTorch where zorch can: the signed
   ops (neg, abs, relu, rsub) refuse it, the arithmetic with a scalar (add, mul,
   pow, clamp) and square give int64; the other integer ops compute it in
   float32, but the rounding ops and the clamps and shrinks built on signed
   arithmetic refuse it, as PyTorch does (sign keeps bool: ew_unary). */
static bool bool_refused(uop k) {
  return k == UOP_FLOOR || k == UOP_CEIL || k == UOP_ROUND || k == UOP_TRUNC || k == UOP_HARDTANH ||
         k == UOP_RELU6 || k == UOP_SOFTSIGN || k == UOP_TANHSHRINK;
}

static zorch_status unary_dtype(uop k, const pw_def *d, const zorch_tensor *a, double p0, double p1,
                                zorch_dtype *dt) {
  char s[ERR_SHAPE_BUF];
  *dt = a->dtype;
  if (zorch_dtype_is_float(*dt)) return ZORCH_OK;
  if (d->float_only)
    return err_set(ZORCH_ERR_DTYPE, "%s: input must be a floating-point tensor, got %s", d->name,
                   zorch_dtype_name(*dt));
  if (*dt == ZORCH_BOOL && (d->ints == INTS_SIGNED || bool_refused(k)))
    return err_set(ZORCH_ERR_DTYPE, "%s: not supported for a bool tensor (input %s)%s", d->name, SHAPE(a, s),
                   k == UOP_NEG || k == UOP_RSUB_S ? "; to invert a mask use eq(mask, 0)" : "");
  bool whole = (d->nparams < 1 || p0 == floor(p0)) && (d->nparams < 2 || p1 == floor(p1));
  bool bool_int = k == UOP_ADD_S || k == UOP_MUL_S || k == UOP_POW_S || k == UOP_CLAMP || k == UOP_SQUARE;
  if (!d->ints || !whole || (*dt == ZORCH_BOOL && !bool_int)) *dt = ZORCH_F32;
  else if (*dt == ZORCH_BOOL) *dt = ZORCH_I64;
  return ZORCH_OK;
}

/* Raw elementwise unary op (no autograd). */
static zorch_tensor *ew_unary(uop k, zorch_tensor *a, double p0, double p1) {
  const pw_def *d = &unary_defs[k];
  const char *op = d->name;
  zorch_dtype dt;
  if (check_arg(op, "input", a) || unary_dtype(k, d, a, p0, p1, &dt)) return NULL;
  if (k == UOP_SIGN && a->dtype == ZORCH_BOOL) return zorch_clone(a); /* sign of a bool is itself */
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype_on(a, dt) : dt;
  zorch_tensor *ca = NULL, *out = NULL;
  if (!(ca = op_cast(a, cd))) goto cleanup;
  if (!(out = op_empty(a, a->ndim, a->shape, cd))) goto cleanup;
  if (backend_of(out)->unary(k, out, ca, p0, p1)) {
    zorch_tensor_free(out);
    out = NULL;
    goto cleanup;
  }
  if (cd != dt) out = op_recast(out, dt);
cleanup:
  zorch_tensor_free(ca);
  if (!out) err_prefix(op);
  return out;
}

/* ---- the ops with autograd --------------------------------------------------------------- */
static zorch_tensor *binary_op(bop k, zorch_tensor *a, zorch_tensor *b) {
  const pw_def *d = &binary_defs[k];
  zorch_tensor *out = op_binary(k, a, b, 0, 0);
  if (!d->fn) return out;
  zorch_tensor *in[2] = {a, b};
  zorch_tensor *save[3] = {a, b, out};
  int nsave = d->save == SAVE_BOTH ? 3 : d->save == SAVE_IN ? 2 : 0;
  /* a product or quotient keeps only the operands its gradients read (as
     PyTorch: less memory, and writing the other one later is no error) */
  if ((k == BOP_MUL || k == BOP_DIV) && !tensor_requires_grad(b)) save[0] = NULL;
  if (k == BOP_MUL && !tensor_requires_grad(a)) save[1] = NULL;
  return ag_record(out, d->node, d->fn, 2, in, nsave, save, NULL, 0);
}

static zorch_tensor *unary_op(uop k, zorch_tensor *a, double p0, double p1) {
  const pw_def *d = &unary_defs[k];
  zorch_tensor *out = ew_unary(k, a, p0, p1);
  zorch_tensor *save[2];
  int nsave = 0;
  if (d->save == SAVE_IN || d->save == SAVE_BOTH) save[nsave++] = a;
  if (d->save == SAVE_OUT || d->save == SAVE_BOTH) save[nsave++] = out;
  unary_args args = {d->fused, p0, p1};
  return ag_record(out, d->node, d->fn, 1, &a, nsave, save, &args, sizeof args);
}

/* The public functions the registry asks for: zorch_<name>(a[, p0]) and
   zorch_<name>(a, b); HAND ops are written below, KERNEL ops have none. */
#define SKIP(...)
#define U_PUBLIC_P0(ID, name) \
  zorch_tensor *zorch_##name(zorch_tensor *a) { return unary_op(UOP_##ID, a, 0, 0); }
#define U_PUBLIC_P1(ID, name) \
  zorch_tensor *zorch_##name(zorch_tensor *a, double p0) { return unary_op(UOP_##ID, a, p0, 0); }
#define U_PUBLIC_P2(ID, name)                                             \
  zorch_tensor *zorch_##name(zorch_tensor *a, double p0, double p1) {    \
    return unary_op(UOP_##ID, a, p0, p1);                                 \
  }
#define U_PUBLIC_API(ID, name, nparams) U_PUBLIC_P##nparams(ID, name)
#define U_PUBLIC_HAND(call) SKIP
#define U_PUBLIC(ID, name, node, fmath, ints, imath, grad, nparams, api, ...) \
  U_PUBLIC_##api(ID, name, nparams)
ZORCH_UNARY_OPS(U_PUBLIC)

#define B_PUBLIC_API(ID, name) \
  zorch_tensor *zorch_##name(zorch_tensor *a, zorch_tensor *b) { return binary_op(BOP_##ID, a, b); }
#define B_PUBLIC_KERNEL(ID, name)
#define B_PUBLIC(ID, name, node, out, fmath, ints, imath, grad, api, ...) B_PUBLIC_##api(ID, name)
ZORCH_BINARY_OPS(B_PUBLIC)

zorch_tensor *zorch_gelu(zorch_tensor *a, bool tanh_approx) {
  return unary_op(tanh_approx ? UOP_GELU_TANH : UOP_GELU, a, 0, 0);
}
/* An integer tensor to a negative whole power is refused, as in PyTorch (only
   1 and -1 have integer results). A large exponent is brought into the range of
   the dtype's kernel: past the width w in bits an even base gives 0 and an odd
   one repeats with period 2^(w-2), so w + (e - w) mod 2^(w-2) gives the same. */
zorch_tensor *zorch_pow_scalar(zorch_tensor *a, double e) {
  if (check_arg("pow_scalar", "input", a)) return NULL;
  if (zorch_dtype_is_float(a->dtype) || e != floor(e)) return unary_op(UOP_POW_S, a, e, 0);
  char s[ERR_SHAPE_BUF];
  if (e < 0)
    return err_null(ZORCH_ERR_ARG,
                    "pow_scalar: integers to negative integer powers are not allowed (%s input %s, "
                    "exponent %g)",
                    zorch_dtype_name(a->dtype), SHAPE(a, s), e);
  double w = a->dtype == ZORCH_U8 || a->dtype == ZORCH_I8 ? 8 : a->dtype == ZORCH_I32 ? 32 : 64;
  if (e > w) e = w + fmod(e - w, ldexp(1, (int)w - 2));
  return unary_op(UOP_POW_S, a, e, 0);
}

/* An integer clamp open at one end: the integer kernel takes both bounds in the
   dtype, and an infinite one has no value there, so the finite bound goes
   through maximum or minimum instead (integers have no gradient to keep). */
static zorch_tensor *clamp_open_int(zorch_tensor *a, double lo, double hi) {
  if (lo == INFINITY || hi == -INFINITY)
    return err_null(ZORCH_ERR_ARG, "clamp: bound %g has no %s value", lo == INFINITY ? lo : hi,
                    zorch_dtype_name(a->dtype));
  if (isinf(lo) && isinf(hi)) return zorch_add_scalar(a, 0); /* a copy (int64 for bool) */
  zorch_dtype dt = a->dtype == ZORCH_BOOL ? ZORCH_I64 : a->dtype;
  zorch_tensor *bound = op_full(0, NULL, isinf(lo) ? hi : lo, dt, a->st->device);
  if (!bound) return NULL;
  zorch_tensor *out = isinf(lo) ? zorch_minimum(a, bound) : zorch_maximum(a, bound);
  zorch_tensor_free(bound);
  if (!out) err_prefix("clamp");
  return out;
}

/* Bounds of an integer clamp beyond the dtype's range: one that cannot bind
   (a min below the lowest value) is dropped, as PyTorch's; one that would
   bind every element to a value the dtype lacks is an error. The kernel
   converts the bounds to the dtype, which is only defined within its range. */
static zorch_status int_bounds(const char *op, zorch_dtype dt, double *lo, double *hi) {
  double min = dt == ZORCH_U8 ? 0 : dt == ZORCH_I8 ? -0x1p7 : dt == ZORCH_I32 ? -0x1p31 : -0x1p63;
  double top = dt == ZORCH_U8 ? 0x1p8 : dt == ZORCH_I8 ? 0x1p7 : dt == ZORCH_I32 ? 0x1p31 : 0x1p63; /* first value past the max */
  if (*lo >= top || *hi < min)
    return err_set(ZORCH_ERR_ARG, "%s: %s %g is outside the range of %s", op, *lo >= top ? "min" : "max",
                   *lo >= top ? *lo : *hi, zorch_dtype_name(dt));
  if (*lo < min) *lo = -INFINITY;
  if (*hi >= top) *hi = INFINITY;
  return ZORCH_OK;
}

zorch_tensor *zorch_clamp(zorch_tensor *a, double lo, double hi) {
  if (lo > hi) return err_null(ZORCH_ERR_ARG, "clamp: min %g is greater than max %g", lo, hi);
  if (check_arg("clamp", "input", a)) return NULL;
  if (!zorch_dtype_is_float(a->dtype) && a->dtype != ZORCH_BOOL && lo == floor(lo) &&
      hi == floor(hi) && int_bounds("clamp", a->dtype, &lo, &hi))
    return NULL;
  if (!zorch_dtype_is_float(a->dtype) && (isinf(lo) || isinf(hi)) && lo == floor(lo) && hi == floor(hi))
    return clamp_open_int(a, lo, hi);
  return unary_op(UOP_CLAMP, a, lo, hi);
}

zorch_tensor *zorch_round(zorch_tensor *a, int decimals) {
  if (decimals != 0 && a && !zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "round: decimals %d needs a floating-point input, got %s",
                    decimals, zorch_dtype_name(a->dtype));
  return unary_op(UOP_ROUND, a, decimals, 0);
}
zorch_tensor *zorch_celu(zorch_tensor *a, double alpha) {
  if (alpha == 0) return err_null(ZORCH_ERR_ARG, "celu: alpha must not be 0");
  return unary_op(UOP_CELU, a, alpha, 0);
}
zorch_tensor *zorch_hardtanh(zorch_tensor *a, double min_val, double max_val) {
  if (min_val > max_val)
    return err_null(ZORCH_ERR_ARG, "hardtanh: min_val %g is greater than max_val %g", min_val, max_val);
  if (a && !zorch_dtype_is_float(a->dtype) && a->dtype != ZORCH_BOOL && min_val == floor(min_val) &&
      max_val == floor(max_val)) { /* integers: clamp's (no gradient), with its bounds checked */
    if (int_bounds("hardtanh", a->dtype, &min_val, &max_val)) return NULL;
    return zorch_clamp(a, min_val, max_val);
  }
  return unary_op(UOP_HARDTANH, a, min_val, max_val);
}
zorch_tensor *zorch_relu6(zorch_tensor *a) { return unary_op(UOP_RELU6, a, 0, 6); }

zorch_status op_add_(zorch_tensor *dst, zorch_tensor *src) {
  if (tensor_mark_written("add_", dst)) return zorch_last_status();
  bool prev = zorch_set_grad_enabled(false);
  zorch_status st;
  if (dst->dtype == src->dtype && dst->dtype != ZORCH_BF16 && dst->dtype != ZORCH_F16 && tensor_same_shape(dst, src)) {
    st = check_same_device("add_", dst, src) ? zorch_last_status()
                                              : backend_of(dst)->binary(BOP_ADD, dst, dst, src, 0, 0);
  } else {
    zorch_tensor *sum = zorch_add(dst, src);
    st = sum ? op_copy_(dst, sum) : zorch_last_status();
    zorch_tensor_free(sum);
  }
  zorch_set_grad_enabled(prev);
  return st;
}

/* ---- the registry for the tests and the Lua bindings ---------------------------------- */
/* call_<name>: the op through its public function, from arrays */
#define U_CALL_P0(name) zorch_##name(a)
#define U_CALL_P1(name) zorch_##name(a, p[0])
#define U_CALL_P2(name) zorch_##name(a, p[0], p[1])
#define U_CALL_API(name, nparams) U_CALL_P##nparams(name)
#define U_CALL_HAND(call) call SKIP
#define U_CALL(ID, name, node, fmath, ints, imath, grad, nparams, api, ...)         \
  static zorch_tensor *call_##name(zorch_tensor *const *in, const double *p) {      \
    zorch_tensor *a = in[0];                                                        \
    double p0 = nparams > 0 ? p[0] : 0, p1 = nparams > 1 ? p[1] : 0;               \
    (void)p0;                                                                       \
    (void)p1;                                                                       \
    return U_CALL_##api(name, nparams);                                             \
  }
ZORCH_UNARY_OPS(U_CALL)
#define B_CALL_API(name)                                                       \
  static zorch_tensor *call_##name(zorch_tensor *const *in, const double *p) { \
    (void)p;                                                                   \
    return zorch_##name(in[0], in[1]);                                         \
  }
#define B_CALL_KERNEL(name)
#define B_CALL(ID, name, node, out, fmath, ints, imath, grad, api, ...) B_CALL_##api(name)
ZORCH_BINARY_OPS(B_CALL)

#define DIFF_FUSED(...) 1
#define DIFF_CUSTOM(...) 1
#define DIFF_NO_GRAD 0
#define U_INFO(ID, name, node, fmath, ints, imath, grad, nparams, api, dom) \
  {#name, 1, nparams, DIFF_##grad, ZORCH_DOM_##dom, call_##name},
#define B_INFO_API(name, grad, dom) {#name, 2, 0, DIFF_##grad, ZORCH_DOM_##dom, call_##name},
#define B_INFO_KERNEL(name, grad, dom)
#define B_INFO(ID, name, node, out, fmath, ints, imath, grad, api, dom) B_INFO_##api(name, grad, dom)
static const zorch_pointwise_op pointwise_infos[] = {ZORCH_UNARY_OPS(U_INFO) ZORCH_BINARY_OPS(B_INFO)};

const zorch_pointwise_op *zorch_pointwise_ops(int *n) {
  *n = (int)(sizeof pointwise_infos / sizeof pointwise_infos[0]);
  return pointwise_infos;
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
  zorch_tensor *ca = NULL, *cb = NULL, *va = NULL, *vb = NULL, *vc = NULL, *out = NULL;
  if (!(ca = op_cast(a, dt))) goto cleanup;
  if (!(cb = op_cast(b, dt))) goto cleanup;
  if (!(va = op_broadcast_view(ca, nd, shape))) goto cleanup;
  if (!(vb = op_broadcast_view(cb, nd, shape))) goto cleanup;
  if (!(vc = op_broadcast_view(c, nd, shape))) goto cleanup;
  if (!(out = op_empty(a, nd, shape, dt))) goto cleanup;
  if (backend_of(out)->where(out, vc, va, vb)) {
    zorch_tensor_free(out);
    out = NULL;
  }
cleanup:
  OP_FREE(ca, cb, va, vb);
  zorch_tensor_free(vc);
  return out;
}

/* Which inputs of a where node take the "true" and the "false" branch of the
   gradient (-1: none); saved[0] is the condition. */
typedef struct {
  int on_true, on_false;
} where_args;

static zorch_status where_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const where_args *w = AG_ARGS(n, where_args);
  zorch_tensor *z = scalar_like(g, 0);
  if (!z) return zorch_last_status();
  bool ok = false;
  int it = w->on_true, iff = w->on_false;
  if (it >= 0 && ag_wants(n, it) && !(gin[it] = where_raw(n->saved[0], g, z))) goto cleanup;
  if (iff >= 0 && ag_wants(n, iff) && !(gin[iff] = where_raw(n->saved[0], z, g))) goto cleanup;
  ok = true;
cleanup:
  zorch_tensor_free(z);
  return ok ? ZORCH_OK : zorch_last_status();
}

zorch_tensor *zorch_where(zorch_tensor *cond, zorch_tensor *a, zorch_tensor *b) {
  zorch_tensor *out = where_raw(cond, a, b);
  zorch_tensor *in[3] = {a, b, cond};
  where_args args = {0, 1};
  return ag_record(out, "WhereBackward", where_bwd, 3, in, 1, &cond, &args, sizeof args);
}

zorch_tensor *zorch_masked_fill(zorch_tensor *a, zorch_tensor *mask, double value) {
  if (check_arg("masked_fill", "input", a) || check_arg("masked_fill", "mask", mask) ||
      zorch_check_fill("masked_fill", a->dtype, &value))
    return NULL;
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
  where_args args = {-1, 0};
  return ag_record(out, "MaskedFillBackward", where_bwd, 2, in, 1, &mask, &args, sizeof args);
}

/* ---- predicates and nan_to_num ----------------------------------------------------------
   Built from the comparisons: bool results, no gradient. Integer and bool
   inputs hold no NaN and no infinity. */
static zorch_tensor *const_bool(const zorch_tensor *a, bool v) {
  return v ? zorch_full(a->ndim, a->shape, 1, ZORCH_BOOL, a->st->device)
           : op_zeros(a, a->ndim, a->shape, ZORCH_BOOL);
}

/* a compared with a value of its own dtype (k: BOP_EQ, BOP_LT, ...) */
static zorch_tensor *cmp_value(bop k, zorch_tensor *a, double v) {
  zorch_tensor *s = scalar_like(a, v);
  if (!s) return NULL;
  zorch_tensor *out = op_binary(k, a, s, 0, 0);
  zorch_tensor_free(s);
  return out;
}

/* op's result for an integer input is `ints`; for a float input, what cmp
   gives (NULL: the error, prefixed with op) */
static zorch_tensor *predicate(const char *op, zorch_tensor *a, bool ints,
                               zorch_tensor *(*cmp)(zorch_tensor *a)) {
  if (check_arg(op, "input", a)) return NULL;
  zorch_tensor *out = zorch_dtype_is_float(a->dtype) ? cmp(a) : const_bool(a, ints);
  if (!out) err_prefix(op);
  return out;
}

static zorch_tensor *nan_mask(zorch_tensor *a) { return op_binary(BOP_NE, a, a, 0, 0); }
static zorch_tensor *posinf_mask(zorch_tensor *a) { return cmp_value(BOP_EQ, a, INFINITY); }
static zorch_tensor *neginf_mask(zorch_tensor *a) { return cmp_value(BOP_EQ, a, -INFINITY); }
/* |a| == inf, and |a| < inf (false for NaN) */
static zorch_tensor *abs_cmp_inf(zorch_tensor *a, bop k) {
  zorch_tensor *m = ew_unary(UOP_ABS, a, 0, 0);
  if (!m) return NULL;
  zorch_tensor *out = cmp_value(k, m, INFINITY);
  zorch_tensor_free(m);
  return out;
}
static zorch_tensor *inf_mask(zorch_tensor *a) { return abs_cmp_inf(a, BOP_EQ); }
static zorch_tensor *finite_mask(zorch_tensor *a) { return abs_cmp_inf(a, BOP_LT); }

zorch_tensor *zorch_isnan(zorch_tensor *a) { return predicate("isnan", a, false, nan_mask); }
zorch_tensor *zorch_isinf(zorch_tensor *a) { return predicate("isinf", a, false, inf_mask); }
zorch_tensor *zorch_isposinf(zorch_tensor *a) { return predicate("isposinf", a, false, posinf_mask); }
zorch_tensor *zorch_isneginf(zorch_tensor *a) { return predicate("isneginf", a, false, neginf_mask); }
zorch_tensor *zorch_isfinite(zorch_tensor *a) { return predicate("isfinite", a, true, finite_mask); }

/* The largest finite value of a floating-point dtype. */
static double dtype_max(zorch_dtype dt) {
  switch (dt) {
    case ZORCH_F64: return DBL_MAX;
    case ZORCH_BF16: return 3.38953138925153547590e38; /* 0x7f7f */
    case ZORCH_F16: return 65504;
    default: return FLT_MAX;
  }
}

/* Three nested wheres: each passes the gradient where its mask is false, so
   it reaches a where a is finite (PyTorch's grad * isfinite(a)). */
zorch_tensor *zorch_nan_to_num(zorch_tensor *a, double nan, const double *posinf,
                               const double *neginf) {
  const char *op = "nan_to_num";
  if (check_arg(op, "input", a)) return NULL;
  if (!zorch_dtype_is_float(a->dtype)) return zorch_clone(a);
  double hi = posinf ? *posinf : dtype_max(a->dtype), lo = neginf ? *neginf : -dtype_max(a->dtype);
  zorch_tensor *mn = NULL, *mp = NULL, *ml = NULL, *vn = NULL, *vp = NULL, *vl = NULL;
  zorch_tensor *t1 = NULL, *t2 = NULL, *out = NULL;
  if (!(mn = nan_mask(a)) || !(mp = posinf_mask(a)) || !(ml = neginf_mask(a))) goto cleanup;
  if (!(vn = scalar_like(a, nan)) || !(vp = scalar_like(a, hi)) || !(vl = scalar_like(a, lo))) goto cleanup;
  if (!(t1 = zorch_where(ml, vl, a)) || !(t2 = zorch_where(mp, vp, t1))) goto cleanup;
  out = zorch_where(mn, vn, t2);
cleanup:
  OP_FREE(mn, mp, ml, vn, vp, vl, t1, t2);
  if (!out) err_prefix(op);
  return out;
}
