/* reduce_composed.c: prod, cumprod, norm, any, all and count_nonzero, composed of
   other ops: their gradients (a product holding zeros, the ties of a max norm)
   follow from the ops they are made of, as PyTorch's special cases do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* The dtype a product is taken in: floats as they are (16-bit ones through
   float32, rounded once at the end), integers and bool as int64. */
static zorch_dtype prod_dtype(zorch_dtype dt) {
  return zorch_dtype_is_float(dt) ? op_compute_dtype(dt) : ZORCH_I64;
}

/* a in dtype dt (a new reference), differentiable. */
static zorch_tensor *as_dtype(zorch_tensor *a, zorch_dtype dt) {
  return a->dtype == dt ? zorch_tensor_retain(a) : zorch_to_dtype(a, dt);
}

/* The product along dim d of a, the dim kept with size 1: its two halves
   multiplied together until one slice is left (an odd slice out joins the
   product), so n - 1 products in log2(n) steps, each recorded: a zero in the
   input gets the product of the others as its gradient. */
static zorch_tensor *prod_halves(zorch_tensor *a, int d) {
  zorch_tensor *cur = zorch_tensor_retain(a);
  while (cur && cur->shape[d] > 1) {
    int64_t n = cur->shape[d], h = n / 2;
    zorch_tensor *lo = NULL, *hi = NULL, *p = NULL, *odd = NULL, *next = NULL;
    if ((lo = zorch_narrow(cur, d, 0, h)) && (hi = zorch_narrow(cur, d, h, h)) && (p = zorch_mul(lo, hi))) {
      if (n % 2 == 0) next = zorch_tensor_retain(p);
      else if ((odd = zorch_narrow(cur, d, 2 * h, 1))) next = zorch_cat(2, (zorch_tensor *[]){p, odd}, d);
    }
    OP_FREE(lo, hi, p, odd, cur);
    cur = next;
  }
  return cur;
}

/* 1 in the shape of a's sum over d (kept), through a's graph: the product of
   an empty dim. */
static zorch_tensor *empty_prod(zorch_tensor *a, int d) {
  zorch_tensor *s = NULL, *z = NULL, *out = NULL;
  if ((s = zorch_sum(a, 1, &d, true)) && (z = zorch_mul_scalar(s, 0))) out = zorch_add_scalar(z, 1);
  OP_FREE(s, z);
  return out;
}

zorch_tensor *zorch_prod(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  if (check_arg("prod", "input", a)) return NULL;
  if (ndims < 0 || ndims > 1 || (ndims && !dims))
    return err_null(ZORCH_ERR_ARG, "prod: takes one dim or none, got %d dims", ndims);
  red_plan p;
  if (red_plan_make("prod", a, ndims, dims, keepdim, &p)) return NULL;
  int d = 0;
  if (ndims && a->ndim) dim_wrap("prod", dims[0], a->ndim, 0, &d);
  zorch_dtype out_dt = zorch_dtype_is_float(a->dtype) ? a->dtype : ZORCH_I64;
  zorch_tensor *c = NULL, *flat = NULL, *r = NULL, *shaped = NULL, *out = NULL;
  if (!(c = as_dtype(a, prod_dtype(a->dtype)))) goto done;
  /* all dims, or a 0-d input: the product of the flattened input */
  if (!(flat = ndims && a->ndim ? zorch_tensor_retain(c) : zorch_reshape(c, 1, (int64_t[]){-1}))) goto done;
  if (!(r = flat->shape[d] == 0 ? empty_prod(flat, d) : prod_halves(flat, d))) goto done;
  if ((shaped = zorch_reshape(r, p.out_ndim, p.out_shape))) out = as_dtype(shaped, out_dt);
done:
  OP_FREE(c, flat, r, shaped);
  if (!out) err_prefix("prod");
  return out;
}

/* The running product along dim d of a (contiguous copy), no autograd: by
   doubling strides, each step multiplying every element by the one s before
   it (log2(n) passes). */
static zorch_tensor *cumprod_raw(zorch_tensor *a, int d) {
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *cur = zorch_clone(a);
  int64_t n = a->ndim ? a->shape[d] : 1;
  for (int64_t s = 1; cur && s < n; s *= 2) {
    zorch_tensor *lo = NULL, *hi = NULL, *p = NULL;
    zorch_status st = ZORCH_OK;
    if (!(lo = zorch_narrow(cur, d, 0, n - s)) || !(hi = zorch_narrow(cur, d, s, n - s)) || !(p = zorch_mul(hi, lo)) ||
        (st = op_copy_(hi, p))) {
      zorch_tensor_free(cur);
      cur = NULL;
    }
    OP_FREE(lo, hi, p);
  }
  zorch_set_grad_enabled(prev);
  return cur;
}

typedef struct {
  int dim; /* wrapped */
} cumprod_args;

/* PyTorch's gradient: before the first zero of a row, revcumsum(g * y) / x;
   at the first zero, revcumsum(g * y') with y' the running product of x with
   that zero as 1; after it, 0. saved: x and y. */
static zorch_status cumprod_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  int d = AG_ARGS(n, cumprod_args)->dim;
  zorch_tensor *x = n->saved[0], *y = n->saved[1];
  zorch_tensor *gy = NULL, *rs = NULL, *a = NULL, *z = NULL, *one = NULL, *m = NULL, *zc = NULL, *mi = NULL;
  zorch_tensor *zm = NULL, *i1 = NULL, *i0 = NULL, *first = NULL, *before = NULL, *x1 = NULL, *y1 = NULL;
  zorch_tensor *gy1 = NULL, *b = NULL, *tail = NULL, *nz = NULL;
  zorch_status st = ZORCH_OK;
  int64_t zeros = 0;
  if (!(gy = zorch_mul(g, y)) || !(rs = op_cumsum(gy, d, true)) || !(a = zorch_div(rs, x)) ||
      !(z = op_zeros(x, 0, NULL, x->dtype)) || !(m = zorch_eq(x, z)) || !(nz = zorch_sum(m, 0, NULL, false)) ||
      zorch_tensor_to_i64s(nz, &zeros, 1))
    goto fail;
  if (zeros == 0) { /* the usual case */
    gin[0] = a;
    a = NULL;
    goto done;
  }
  if (!(zc = op_cumsum(m, d, false)) || !(mi = op_cast(m, ZORCH_I64)) || !(zm = zorch_mul(zc, mi)) ||
      !(i1 = zorch_full_i64(0, NULL, 1, ZORCH_I64, x->st->device)) || !(i0 = op_zeros(zc, 0, NULL, ZORCH_I64)) ||
      !(first = zorch_eq(zm, i1)) || !(before = zorch_eq(zc, i0)) ||
      !(one = zorch_full(0, NULL, 1, x->dtype, x->st->device)) || !(x1 = zorch_where(first, one, x)) ||
      !(y1 = cumprod_raw(x1, d)) || !(gy1 = zorch_mul(g, y1)) || !(b = op_cumsum(gy1, d, true)) ||
      !(tail = zorch_where(first, b, z)) || !(gin[0] = zorch_where(before, a, tail)))
    goto fail;
  goto done;
fail:
  st = zorch_last_status();
done:
  OP_FREE(gy, rs, a, z, one, m, zc, mi, zm, i1, i0, first, before, x1, y1, gy1, b, tail, nz);
  return st;
}

zorch_tensor *zorch_cumprod(zorch_tensor *a, int dim) {
  if (check_arg("cumprod", "input", a)) return NULL;
  cumprod_args args;
  if (dim_wrap("cumprod", dim, a->ndim, 0, &args.dim)) return NULL;
  zorch_dtype out_dt = zorch_dtype_is_float(a->dtype) ? a->dtype : ZORCH_I64;
  zorch_tensor *c = as_dtype(a, prod_dtype(a->dtype)), *r = NULL, *out = NULL;
  if (c && (r = cumprod_raw(c, args.dim)))
    r = ag_record(r, "CumprodBackward", cumprod_bwd, 1, &c, 2, (zorch_tensor *[]){c, r}, &args, sizeof args);
  if (r) out = as_dtype(r, out_dt);
  OP_FREE(c, r);
  if (!out) err_prefix("cumprod");
  return out;
}

/* ---- norm --------------------------------------------------------------------------------- */
typedef struct {
  double p;
} root_args;

/* y = s^(1/p): dy/ds = y / (p s), and 0 where s is 0 (PyTorch's gradient of a
   norm at the zero vector). saved: y and s. */
static zorch_status root_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *y = n->saved[0], *s = n->saved[1];
  zorch_tensor *z = NULL, *at0 = NULL, *q = NULL, *gq = NULL, *gs = NULL;
  zorch_status st = ZORCH_OK;
  if (!(z = op_zeros(s, 0, NULL, s->dtype)) || !(at0 = zorch_eq(s, z)) || !(q = zorch_div(y, s)) ||
      !(gq = zorch_mul(g, q)) || !(gs = zorch_mul_scalar(gq, 1.0 / AG_ARGS(n, root_args)->p)) ||
      !(gin[0] = zorch_where(at0, z, gs)))
    st = zorch_last_status();
  OP_FREE(z, at0, q, gq, gs);
  return st;
}

static zorch_tensor *norm_root(zorch_tensor *s, double p) {
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *y = p == 2 ? zorch_sqrt(s) : zorch_pow_scalar(s, 1.0 / p);
  zorch_set_grad_enabled(prev);
  root_args args = {.p = p};
  return ag_record(y, "NormBackward", root_bwd, 1, &s, 2, (zorch_tensor *[]){y, s}, &args, sizeof args);
}

/* The count of nonzeros (p = 0) has a zero gradient. */
static zorch_status zero_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = op_zeros(g, n->in[0].ndim, n->in[0].shape, g->dtype);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

static zorch_tensor *norm_float(zorch_tensor *x, double p, int ndims, const int *dims, bool keepdim) {
  zorch_tensor *ax = NULL, *t = NULL, *s = NULL, *out = NULL;
  if (p == 0) {
    bool prev = zorch_set_grad_enabled(false);
    zorch_tensor *z = op_zeros(x, 0, NULL, x->dtype), *m = z ? zorch_ne(x, z) : NULL;
    zorch_tensor *mf = m ? op_cast(m, x->dtype) : NULL;
    s = mf ? zorch_sum(mf, ndims, dims, keepdim) : NULL;
    zorch_set_grad_enabled(prev);
    OP_FREE(z, m, mf);
    return ag_record(s, "NormBackward", zero_bwd, 1, &x, 0, NULL, NULL, 0);
  }
  if (p == 2) {
    if ((t = zorch_mul(x, x)) && (s = zorch_sum(t, ndims, dims, keepdim))) out = norm_root(s, 2);
  } else if ((ax = zorch_abs(x))) {
    if (p == INFINITY) out = zorch_amax(ax, ndims, dims, keepdim);
    else if (p == -INFINITY) out = zorch_amin(ax, ndims, dims, keepdim);
    else if (p == 1) out = zorch_sum(ax, ndims, dims, keepdim);
    else if ((t = zorch_pow_scalar(ax, p)) && (s = zorch_sum(t, ndims, dims, keepdim))) out = norm_root(s, p);
  }
  OP_FREE(ax, t, s);
  return out;
}

zorch_tensor *zorch_norm(zorch_tensor *a, double p, int ndims, const int *dims, bool keepdim) {
  if (check_arg("norm", "input", a)) return NULL;
  if (!zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "norm: needs a floating-point input, got %s", zorch_dtype_name(a->dtype));
  if (isnan(p)) return err_null(ZORCH_ERR_ARG, "norm: p is nan");
  red_plan pl;
  if (red_plan_make("norm", a, ndims, dims, keepdim, &pl)) return NULL;
  if (isinf(p) && pl.r == 0)
    return err_null(ZORCH_ERR_SHAPE, "norm: the %s norm of an empty dimension is not defined", p > 0 ? "inf" : "-inf");
  zorch_tensor *c = NULL, *r = NULL, *out = NULL;
  if ((c = as_dtype(a, op_compute_dtype(a->dtype))) && (r = norm_float(c, p, ndims, dims, keepdim)))
    out = as_dtype(r, a->dtype);
  OP_FREE(c, r);
  if (!out) err_prefix("norm");
  return out;
}

/* ---- any, all, count_nonzero: sums of a nonzero (zero) mask --------------------------------- */
static zorch_tensor *count_where(const char *op, zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                                 bool zeros) {
  if (check_arg(op, "input", a)) return NULL;
  red_plan p;
  if (red_plan_make(op, a, ndims, dims, keepdim, &p)) return NULL;
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *z = op_zeros(a, 0, NULL, a->dtype), *m = z ? (zeros ? zorch_eq(a, z) : zorch_ne(a, z)) : NULL;
  zorch_tensor *s = m ? zorch_sum(m, ndims, dims, keepdim) : NULL;
  zorch_set_grad_enabled(prev);
  OP_FREE(z, m);
  if (!s) err_prefix(op);
  return s;
}

/* a bool result, or uint8 for a uint8 input (as PyTorch) */
static zorch_tensor *any_all(const char *op, zorch_tensor *a, int ndims, const int *dims, bool keepdim, bool all) {
  zorch_tensor *s = count_where(op, a, ndims, dims, keepdim, all), *z = NULL, *b = NULL, *out = NULL;
  if (!s) return NULL;
  if ((z = op_zeros(s, 0, NULL, s->dtype)) && (b = all ? zorch_eq(s, z) : zorch_gt(s, z)))
    out = a->dtype == ZORCH_U8 ? op_cast(b, ZORCH_U8) : zorch_tensor_retain(b);
  OP_FREE(s, z, b);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_any(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return any_all("any", a, ndims, dims, keepdim, false);
}

zorch_tensor *zorch_all(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return any_all("all", a, ndims, dims, keepdim, true);
}

zorch_tensor *zorch_count_nonzero(zorch_tensor *a, int ndims, const int *dims) {
  return count_where("count_nonzero", a, ndims, dims, false, false);
}
