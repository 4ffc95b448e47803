/* compose.c: elementwise ops built from the registry's ops (ops/def/pointwise.c),
   so their gradients are those of the ops they are made of: lerp, addcmul,
   addcdiv, the open-ended clamps, and the closeness tests isclose, allclose
   and equal. */
#include <math.h>
#include <string.h>

#include "ops.h"

/* The broadcast of n shapes, for an error that names the op and the shapes
   before any work is done. */
static zorch_status check_broadcast(const char *op, int n, zorch_tensor *const *ts) {
  int nd = ts[0]->ndim, nout;
  int64_t shape[ZORCH_MAX_DIMS], out[ZORCH_MAX_DIMS];
  memcpy(shape, ts[0]->shape, sizeof(int64_t) * (size_t)nd);
  for (int i = 1; i < n; i++) {
    if (shape_broadcast(op, nd, shape, ts[i]->ndim, ts[i]->shape, &nout, out)) return zorch_last_status();
    nd = nout;
    memcpy(shape, out, sizeof(int64_t) * (size_t)nd);
  }
  return ZORCH_OK;
}

static zorch_status check_args(const char *op, int n, zorch_tensor *const *ts, const char *const *names) {
  for (int i = 0; i < n; i++)
    if (check_arg(op, names[i], ts[i]) || (i > 0 && check_same_device(op, ts[0], ts[i])))
      return zorch_last_status();
  return check_broadcast(op, n, ts);
}

/* ---- lerp --------------------------------------------------------------------------------- */
/* start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 - w):
   PyTorch's two forms, exact at both ends. Floats of one dtype only, as PyTorch. */
static zorch_status lerp_check(zorch_tensor *a, zorch_tensor *b, zorch_tensor *w) {
  zorch_tensor *ts[3] = {a, b, w};
  static const char *const names[3] = {"start", "end", "weight"};
  int n = w ? 3 : 2;
  if (check_args("lerp", n, ts, names)) return zorch_last_status();
  if (!zorch_dtype_is_float(a->dtype))
    return err_set(ZORCH_ERR_DTYPE, "lerp: start must be a float tensor, got %s", zorch_dtype_name(a->dtype));
  for (int i = 1; i < n; i++)
    if (ts[i]->dtype != a->dtype)
      return err_set(ZORCH_ERR_DTYPE, "lerp: %s is %s, start is %s (one dtype expected)", names[i],
                     zorch_dtype_name(ts[i]->dtype), zorch_dtype_name(a->dtype));
  return ZORCH_OK;
}

zorch_tensor *zorch_lerp_scalar(zorch_tensor *a, zorch_tensor *b, double w) {
  if (lerp_check(a, b, NULL)) return NULL;
  zorch_tensor *d = zorch_sub(b, a), *t = NULL, *out = NULL;
  if (d && (t = zorch_mul_scalar(d, fabs(w) < 0.5 ? w : 1 - w)))
    out = fabs(w) < 0.5 ? zorch_add(a, t) : zorch_sub(b, t);
  OP_FREE(d, t);
  return out;
}

zorch_tensor *zorch_lerp(zorch_tensor *a, zorch_tensor *b, zorch_tensor *w) {
  if (lerp_check(a, b, w)) return NULL;
  zorch_tensor *d = NULL, *t = NULL, *lo = NULL, *w1 = NULL, *t1 = NULL, *hi = NULL, *aw = NULL;
  zorch_tensor *half = NULL, *small = NULL, *out = NULL;
  if (!(d = zorch_sub(b, a)) || !(t = zorch_mul(w, d)) || !(lo = zorch_add(a, t))) goto cleanup;
  if (!(w1 = zorch_rsub_scalar(w, 1)) || !(t1 = zorch_mul(d, w1)) || !(hi = zorch_sub(b, t1))) goto cleanup;
  if (!(aw = zorch_abs(w)) || !(half = zorch_full(0, NULL, 0.5, w->dtype, w->st->device)) ||
      !(small = zorch_lt(aw, half)))
    goto cleanup;
  out = zorch_where(small, lo, hi);
cleanup:
  OP_FREE(d, t, lo, w1, t1, hi, aw, half, small);
  return out;
}

/* ---- addcmul and addcdiv ------------------------------------------------------------------- */
/* t + value * a * b (addcmul) or t + value * a / b (addcdiv) */
static zorch_tensor *addc(const char *op, zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value,
                          bool divide) {
  zorch_tensor *ts[3] = {t, a, b};
  static const char *const names[3] = {"input", "tensor1", "tensor2"};
  if (check_args(op, 3, ts, names)) return NULL;
  if (divide && !zorch_dtype_is_float(a->dtype) && !zorch_dtype_is_float(b->dtype))
    return err_null(ZORCH_ERR_DTYPE,
                    "addcdiv: integer division is not supported (tensor1 %s, tensor2 %s), as in PyTorch; "
                    "convert them to a float dtype",
                    zorch_dtype_name(a->dtype), zorch_dtype_name(b->dtype));
  zorch_tensor *p = divide ? zorch_div(a, b) : zorch_mul(a, b), *s = NULL, *out = NULL;
  if (p && (s = value == 1 ? zorch_tensor_retain(p) : zorch_mul_scalar(p, value))) out = zorch_add(t, s);
  OP_FREE(p, s);
  return out;
}
zorch_tensor *zorch_addcmul(zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value) {
  return addc("addcmul", t, a, b, value, false);
}
zorch_tensor *zorch_addcdiv(zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value) {
  return addc("addcdiv", t, a, b, value, true);
}

/* ---- clamp_min and clamp_max ---------------------------------------------------------------- */
zorch_tensor *zorch_clamp_min(zorch_tensor *a, double min) {
  if (isnan(min)) return err_null(ZORCH_ERR_ARG, "clamp_min: min is NaN");
  return zorch_clamp(a, min, INFINITY);
}
zorch_tensor *zorch_clamp_max(zorch_tensor *a, double max) {
  if (isnan(max)) return err_null(ZORCH_ERR_ARG, "clamp_max: max is NaN");
  return zorch_clamp(a, -INFINITY, max);
}

/* ---- isclose, allclose, equal ----------------------------------------------------------------- */
static zorch_tensor *scalar_on(const zorch_tensor *like, double v) {
  return op_full(0, NULL, v, like->dtype, like->st->device);
}

/* |a - b| <= atol + rtol * |b|, or a == b (equal infinities); with equal_nan two
   NaNs are close too. Integers compare in float64. No gradient. */
static zorch_tensor *isclose_raw(zorch_tensor *a, zorch_tensor *b, double rtol, double atol, bool equal_nan) {
  zorch_tensor *fa = NULL, *fb = NULL, *eq = NULL, *d = NULL, *ad = NULL, *bb = NULL, *tol0 = NULL;
  zorch_tensor *tol = NULL, *inf = NULL, *fin = NULL, *le = NULL, *near = NULL, *na = NULL, *nb = NULL;
  zorch_tensor *nn = NULL, *r = NULL, *out = NULL;
  zorch_dtype dt = zorch_dtype_is_float(a->dtype) ? a->dtype : ZORCH_F64;
  if (!(fa = zorch_to_dtype(a, dt)) || !(fb = zorch_to_dtype(b, dt)) || !(eq = zorch_eq(fa, fb))) goto cleanup;
  if (!(d = zorch_sub(fa, fb)) || !(ad = zorch_abs(d)) || !(bb = zorch_abs(fb))) goto cleanup;
  if (!(tol0 = zorch_mul_scalar(bb, rtol)) || !(tol = zorch_add_scalar(tol0, atol))) goto cleanup;
  /* a finite distance only: inf - inf is NaN, and inf is never within an infinite tolerance */
  if (!(inf = scalar_on(ad, INFINITY)) || !(fin = zorch_lt(ad, inf)) || !(le = zorch_le(ad, tol))) goto cleanup;
  if (!(near = zorch_minimum(fin, le)) || !(r = zorch_maximum(eq, near))) goto cleanup; /* and, or */
  if (equal_nan) {
    if (!(na = zorch_ne(fa, fa)) || !(nb = zorch_ne(fb, fb)) || !(nn = zorch_minimum(na, nb))) goto cleanup;
    out = zorch_maximum(r, nn);
  } else {
    out = zorch_tensor_retain(r);
  }
cleanup:
  OP_FREE(fa, fb, eq, d, ad, bb, tol0, tol, inf, fin, le, near, na, nb, nn, r);
  return out;
}

zorch_tensor *zorch_isclose(zorch_tensor *a, zorch_tensor *b, double rtol, double atol, bool equal_nan) {
  zorch_tensor *ts[2] = {a, b};
  static const char *const names[2] = {"a", "b"};
  if (check_args("isclose", 2, ts, names)) return NULL;
  if (a->dtype != b->dtype)
    return err_null(ZORCH_ERR_DTYPE, "isclose: a is %s and b is %s (one dtype expected, as in PyTorch)",
                    zorch_dtype_name(a->dtype), zorch_dtype_name(b->dtype));
  if (!(rtol >= 0) || !(atol >= 0))
    return err_null(ZORCH_ERR_ARG, "isclose: rtol (%g) and atol (%g) must be at least 0", rtol, atol);
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *out = isclose_raw(a, b, rtol, atol, equal_nan);
  zorch_set_grad_enabled(prev);
  if (!out) err_prefix("isclose");
  return out;
}

/* Whether every element of the bool tensor m is true. */
static zorch_status all_true(zorch_tensor *m, bool *out) {
  zorch_tensor *n = zorch_sum(m, 0, NULL, false);
  double count = 0;
  zorch_status st = n ? zorch_tensor_item(n, &count) : zorch_last_status();
  zorch_tensor_free(n);
  *out = st == ZORCH_OK && count == (double)zorch_tensor_numel(m);
  return st;
}

zorch_status zorch_allclose(zorch_tensor *a, zorch_tensor *b, double rtol, double atol, bool equal_nan,
                            bool *out) {
  *out = false;
  zorch_tensor *m = zorch_isclose(a, b, rtol, atol, equal_nan);
  if (!m) {
    err_prefix("allclose");
    return zorch_last_status();
  }
  zorch_status st = all_true(m, out);
  zorch_tensor_free(m);
  return st;
}

/* The same shape and the same values (of any dtypes, compared as eq does). */
zorch_status zorch_equal(zorch_tensor *a, zorch_tensor *b, bool *out) {
  *out = false;
  if (check_arg("equal", "a", a) || check_arg("equal", "b", b) || check_same_device("equal", a, b))
    return zorch_last_status();
  if (!tensor_same_shape(a, b)) return ZORCH_OK;
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *m = zorch_eq(a, b);
  zorch_set_grad_enabled(prev);
  zorch_status st = m ? all_true(m, out) : zorch_last_status();
  zorch_tensor_free(m);
  return st;
}
