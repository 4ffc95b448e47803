/* reduce.c: sum, mean, max and min over dims (argmax, argmin), var and std,
   cumsum, softmax and log_softmax, with their gradients. Every reduction runs on
   an (outer, r, inner) layout: the input itself when the reduced dims are one
   contiguous block, else a permuted copy. */
#include <math.h>
#include <string.h>

#include "ops.h"

zorch_status red_plan_make(const char *op, const zorch_tensor *a, int ndims, const int *dims,
                           bool keepdim, red_plan *p) {
  memset(p, 0, sizeof *p);
  if (ndims < 0 || ndims > ZORCH_MAX_DIMS || (ndims > 0 && !dims))
    return err_set(ZORCH_ERR_ARG, "%s: bad dims list (%d dims)", op, ndims);
  for (int i = 0; i < ndims; i++) {
    int d;
    if (dim_wrap(op, dims[i], a->ndim, 0, &d)) return zorch_last_status();
    if (a->ndim == 0) continue;
    if (p->red[d]) return err_set(ZORCH_ERR_ARG, "%s: dim " ERR_IX("%d") " repeated", op, dims[i]);
    p->red[d] = true;
  }
  if (ndims == 0)
    for (int i = 0; i < a->ndim; i++) p->red[i] = true;
  int first = -1, last = -1, k = 0;
  for (int i = 0; i < a->ndim; i++)
    if (p->red[i]) {
      p->nred++;
      if (first < 0) first = i;
      last = i;
    }
  bool block = zorch_tensor_is_contiguous(a) && (p->nred == 0 || last - first + 1 == p->nred);
  p->outer = p->r = p->inner = 1;
  if (block) {
    for (int i = 0; i < a->ndim; i++) {
      p->perm[i] = i;
      if (p->red[i]) p->r *= a->shape[i];
      else if (first >= 0 && i > last) p->inner *= a->shape[i];
      else p->outer *= a->shape[i];
    }
  } else {
    for (int i = 0; i < a->ndim; i++)
      if (!p->red[i]) {
        p->perm[k++] = i;
        p->outer *= a->shape[i];
      }
    for (int i = 0; i < a->ndim; i++)
      if (p->red[i]) {
        p->perm[k++] = i;
        p->r *= a->shape[i];
      }
  }
  p->out_ndim = 0;
  for (int i = 0; i < a->ndim; i++) {
    p->keep_shape[i] = p->red[i] ? 1 : a->shape[i];
    if (!p->red[i] || keepdim) p->out_shape[p->out_ndim++] = p->keep_shape[i];
  }
  return ZORCH_OK;
}

static bool plan_identity(const red_plan *p, int ndim) {
  for (int i = 0; i < ndim; i++)
    if (p->perm[i] != i) return false;
  return true;
}

zorch_tensor *red_plan_layout(zorch_tensor *a, const red_plan *p) {
  if (plan_identity(p, a->ndim)) return op_contig(a);
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *v = NULL, *c = NULL;
  if ((v = zorch_permute(a, p->perm))) c = op_contig(v);
  zorch_set_grad_enabled(prev);
  zorch_tensor_free(v);
  return c;
}

zorch_tensor *red_plan_unlayout(zorch_tensor *c, const zorch_tensor *like, const red_plan *p) {
  int nd = like->ndim;
  if (plan_identity(p, nd)) return zorch_reshape(c, nd, like->shape);
  int64_t psh[ZORCH_MAX_DIMS];
  int inv[ZORCH_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    psh[i] = like->shape[p->perm[i]];
    inv[p->perm[i]] = i;
  }
  zorch_tensor *v = NULL, *b = NULL, *out = NULL;
  if ((v = zorch_reshape(c, nd, psh)) && (b = zorch_permute(v, inv))) out = op_contig(b);
  OP_FREE(v, b);
  return out;
}

/* A 16-bit float that a's backend reads itself in sums, softmax, layer norm and
   nll (backend.h's rows16). */
static bool rows16(const zorch_tensor *a) {
  return (a->dtype == ZORCH_BF16 || a->dtype == ZORCH_F16) && backend_of(a)->rows16;
}

/* Sum or max in the plan's layout; out has the plan's output shape. A sum is
   scaled (mean) in the compute dtype, so 16-bit results round once; a 16-bit
   input is summed as it is where the backend reads it (no float32 copy). */
static zorch_tensor *reduce_raw(const char *op, red_op k, zorch_tensor *a, const red_plan *p,
                                zorch_tensor **idx, double scale) {
  zorch_dtype dt = a->dtype;
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype(dt) : ZORCH_I64;
  if (k != RED_SUM && p->r == 0)
    return err_null(ZORCH_ERR_SHAPE, "%s: cannot take the %s over an empty dimension", op,
                    k == RED_MAX ? "max" : "min");
  zorch_tensor *ca = NULL, *c = NULL, *out = NULL, *ix = NULL;
  bool keep16 = k == RED_SUM && rows16(a);
  if (!(ca = keep16 ? zorch_tensor_retain(a) : op_cast(a, cd)) || !(c = red_plan_layout(ca, p)) ||
      !(out = op_empty(a, p->out_ndim, p->out_shape, cd)) ||
      (idx && !(ix = op_empty(a, p->out_ndim, p->out_shape, ZORCH_I64))) ||
      backend_of(out)->reduce(k, out, ix, c, p->outer, p->r, p->inner) ||
      (scale != 1 && backend_of(out)->unary(UOP_MUL_S, out, out, scale, 0))) {
    OP_FREE(out, ix);
    out = ix = NULL;
  }
  OP_FREE(ca, c);
  if (idx) *idx = ix;
  zorch_dtype want = (k == RED_SUM && !zorch_dtype_is_float(dt)) ? ZORCH_I64 : dt;
  out = op_recast(out, want);
  if (!out) err_prefix(op);
  return out;
}

typedef struct {
  double scale;                       /* 1, or 1/count for a mean */
  int64_t keep_shape[ZORCH_MAX_DIMS]; /* the input's shape with the reduced dims as 1 */
} sum_args;

/* sum and mean: the gradient is g (times 1/count) viewed in the keepdim shape
   and broadcast back. */
static zorch_status sum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const sum_args *a = AG_ARGS(n, sum_args);
  ag_edge *e = &n->in[0];
  zorch_tensor *gk = NULL, *gs = NULL;
  if ((gk = zorch_reshape(g, e->ndim, a->keep_shape)) &&
      (gs = a->scale != 1 ? zorch_mul_scalar(gk, a->scale) : zorch_tensor_retain(gk)))
    gin[0] = zorch_expand(gs, e->ndim, e->shape);
  OP_FREE(gk, gs);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

static zorch_tensor *sum_mean(const char *op, const char *name, zorch_tensor *a, int ndims,
                              const int *dims, bool keepdim, bool mean) {
  if (check_arg(op, "input", a)) return NULL;
  red_plan p;
  if (red_plan_make(op, a, ndims, dims, keepdim, &p)) return NULL;
  if (mean && !zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "mean: needs a floating-point input, got %s",
                    zorch_dtype_name(a->dtype));
  sum_args args = {.scale = mean ? 1.0 / (double)p.r : 1.0};
  memcpy(args.keep_shape, p.keep_shape, sizeof(int64_t) * (size_t)a->ndim);
  zorch_tensor *out = reduce_raw(op, RED_SUM, a, &p, NULL, args.scale);
  return ag_record(out, name, sum_bwd, 1, &a, 0, NULL, &args, sizeof args);
}

zorch_tensor *zorch_sum(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return sum_mean("sum", "SumBackward", a, ndims, dims, keepdim, false);
}

zorch_tensor *zorch_mean(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return sum_mean("mean", "MeanBackward", a, ndims, dims, keepdim, true);
}

/* The dims list and keepdim of a max or min, to rebuild its plan. */
typedef struct {
  int ndims;
  int dims[ZORCH_MAX_DIMS];
  bool keepdim;
  bool min;
} max_args;

/* max and min: the gradient goes to the first maximum (minimum) of each group.
   saved[0] holds the indices. */
static zorch_status max_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const max_args *a = AG_ARGS(n, max_args);
  ag_edge *e = &n->in[0];
  zorch_tensor *like = NULL, *gc = NULL, *z = NULL;
  zorch_status st;
  red_plan p;
  if (!(like = op_empty(g, e->ndim, e->shape, g->dtype))) return zorch_last_status();
  if ((st = red_plan_make(a->min ? "min" : "max", like, a->ndims, a->dims, a->keepdim, &p)))
    goto done;
  int64_t lay[3] = {p.outer, p.r, p.inner};
  if (!(gc = op_contig(g)) || !(z = op_zeros(g, 3, lay, g->dtype))) {
    st = zorch_last_status();
    goto done;
  }
  if ((st = backend_of(z)->max_bwd(z, gc, n->saved[0], p.outer, p.r, p.inner))) goto done;
  if (!(gin[0] = red_plan_unlayout(z, like, &p))) st = zorch_last_status();
done:
  OP_FREE(like, gc, z);
  return st;
}

/* max and min over all dims or several: the gradient split evenly between
   the tied maxima (PyTorch's max() and amax). saved: the input and the output. */
static zorch_status max_even_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const max_args *a = AG_ARGS(n, max_args);
  zorch_tensor *x = n->saved[0], *y = n->saved[1];
  int64_t shape[ZORCH_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) shape[i] = a->ndims == 0 ? 1 : x->shape[i]; /* no dims: all of them */
  for (int i = 0; i < a->ndims; i++) {
    int d;
    if (dim_wrap(a->min ? "min" : "max", a->dims[i], x->ndim, 0, &d)) return zorch_last_status();
    shape[d] = 1;
  }
  zorch_tensor *yk = NULL, *gk = NULL, *m = NULL, *mf = NULL, *cnt = NULL, *share = NULL;
  zorch_status st = ZORCH_OK;
  if (!(yk = zorch_reshape(y, x->ndim, shape)) || !(gk = zorch_reshape(g, x->ndim, shape)) ||
      !(m = zorch_eq(x, yk)) || !(mf = op_cast(m, g->dtype)) || !(cnt = zorch_sum(mf, a->ndims, a->dims, true)) ||
      !(share = zorch_div(gk, cnt)) || !(gin[0] = zorch_mul(mf, share)))
    st = zorch_last_status();
  OP_FREE(yk, gk, m, mf, cnt, share);
  return st;
}

/* even: ties share the gradient even over one dim (amax and amin). */
static zorch_tensor *max_min(const char *op, red_op k, zorch_tensor *a, int ndims, const int *dims,
                             bool keepdim, zorch_tensor **indices, bool even) {
  if (indices) *indices = NULL;
  if (check_arg(op, "input", a)) return NULL;
  red_plan p;
  if (red_plan_make(op, a, ndims, dims, keepdim, &p)) return NULL;
  zorch_tensor *idx = NULL;
  max_args args = {.ndims = ndims, .keepdim = keepdim, .min = k == RED_MIN};
  if (ndims > 0) memcpy(args.dims, dims, sizeof(int) * (size_t)ndims);
  zorch_tensor *out = reduce_raw(op, k, a, &p, &idx, 1);
  const char *name = even ? (k == RED_MIN ? "AminBackward" : "AmaxBackward")
                          : (k == RED_MIN ? "MinBackward" : "MaxBackward");
  if (out && (ndims != 1 || even)) /* PyTorch's max() and amax: ties share the gradient */
    out = ag_record(out, name, max_even_bwd, 1, &a, 2,
                    (zorch_tensor *[]){a, out}, &args, sizeof args);
  else
    out = ag_record(out, name, max_bwd, 1, &a, 1, &idx,
                    &args, sizeof args);
  if (out && indices)
    *indices = idx;
  else
    zorch_tensor_free(idx);
  return out;
}

zorch_tensor *zorch_max(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                        zorch_tensor **indices) {
  return max_min("max", RED_MAX, a, ndims, dims, keepdim, indices, false);
}

zorch_tensor *zorch_min(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                        zorch_tensor **indices) {
  return max_min("min", RED_MIN, a, ndims, dims, keepdim, indices, false);
}

zorch_tensor *zorch_amax(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return max_min("amax", RED_MAX, a, ndims, dims, keepdim, NULL, true);
}

zorch_tensor *zorch_amin(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return max_min("amin", RED_MIN, a, ndims, dims, keepdim, NULL, true);
}

/* argmax and argmin: the indices of a max or min, computed without a graph. */
static zorch_tensor *arg_max_min(const char *op, red_op k, zorch_tensor *a, int ndims,
                                 const int *dims, bool keepdim) {
  if (check_arg(op, "input", a)) return NULL;
  red_plan p;
  if (red_plan_make(op, a, ndims, dims, keepdim, &p)) return NULL;
  zorch_tensor *idx = NULL;
  zorch_tensor_free(reduce_raw(op, k, a, &p, &idx, 1));
  return idx;
}

zorch_tensor *zorch_argmax(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return arg_max_min("argmax", RED_MAX, a, ndims, dims, keepdim);
}

zorch_tensor *zorch_argmin(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  return arg_max_min("argmin", RED_MIN, a, ndims, dims, keepdim);
}

/* ---- var and std: sum((x - mean)^2) / (count - correction), from other ops ---------- */
/* std's square root: its gradient g / (2 std), and 0 where std is 0 (PyTorch's
   mask: the gradient of a constant row is 0, not 0 * inf). saved: std. */
static zorch_status std_root_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *y = n->saved[0], *z = NULL, *at0 = NULL, *h = NULL, *q = NULL;
  zorch_status st = ZORCH_OK;
  if (!(z = op_zeros(y, y->ndim, y->shape, y->dtype)) || !(at0 = zorch_eq(y, z)) ||
      !(h = zorch_mul_scalar(g, 0.5)) || !(q = zorch_div(h, y)) || !(gin[0] = zorch_where(at0, z, q)))
    st = zorch_last_status();
  OP_FREE(z, at0, h, q);
  return st;
}

static zorch_tensor *std_root(zorch_tensor *v) {
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *y = zorch_sqrt(v);
  zorch_set_grad_enabled(prev);
  return ag_record(y, "StdBackward", std_root_bwd, 1, &v, 1, &y, NULL, 0);
}

static zorch_tensor *var_std(const char *op, zorch_tensor *a, int ndims, const int *dims,
                             bool keepdim, double correction, bool root) {
  if (check_arg(op, "input", a)) return NULL;
  if (!zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "%s: needs a floating-point input, got %s", op,
                    zorch_dtype_name(a->dtype));
  if (!isfinite(correction) || correction < 0)
    return err_null(ZORCH_ERR_ARG, "%s: correction must be a finite number >= 0, got %g", op,
                    correction);
  red_plan p;
  if (red_plan_make(op, a, ndims, dims, keepdim, &p)) return NULL;
  /* PyTorch's result for count <= correction: inf or nan, from the division */
  double denom = (double)p.r - correction;
  if (denom < 0) denom = 0;
  zorch_tensor *m = NULL, *d = NULL, *sq = NULL, *s = NULL, *v = NULL, *out = NULL;
  if ((m = zorch_mean(a, ndims, dims, true)) && (d = zorch_sub(a, m)) && (sq = zorch_mul(d, d)) &&
      (s = zorch_sum(sq, ndims, dims, keepdim)) &&
      (v = zorch_mul_scalar(s, denom > 0 ? 1.0 / denom : INFINITY)))
    out = root ? std_root(v) : zorch_tensor_retain(v);
  OP_FREE(m, d, sq, s, v);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_var(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                        double correction) {
  return var_std("var", a, ndims, dims, keepdim, correction, false);
}

zorch_tensor *zorch_std(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                        double correction) {
  return var_std("std", a, ndims, dims, keepdim, correction, true);
}

/* ---- logsumexp: log(sum(exp(x - m))) + m, m the max (0 where it is infinite), from other ops */
zorch_tensor *zorch_logsumexp(zorch_tensor *a, int ndims, const int *dims, bool keepdim) {
  if (check_arg("logsumexp", "input", a)) return NULL;
  if (!zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "logsumexp: needs a floating-point input, got %s", zorch_dtype_name(a->dtype));
  bool prev = zorch_set_grad_enabled(false); /* the shift carries no gradient */
  zorch_tensor *m = zorch_max(a, ndims, dims, true, NULL), *mm = m ? zorch_sub(m, m) : NULL;
  zorch_tensor *z = m ? op_zeros(m, 0, NULL, m->dtype) : NULL, *fin = mm ? zorch_eq(mm, z) : NULL;
  zorch_tensor *shift = fin ? zorch_where(fin, m, z) : NULL; /* inf - inf is nan: not finite */
  zorch_set_grad_enabled(prev);
  zorch_tensor *d = NULL, *e = NULL, *s = NULL, *l = NULL, *r = NULL, *out = NULL;
  if (shift && (d = zorch_sub(a, shift)) && (e = zorch_exp(d)) && (s = zorch_sum(e, ndims, dims, true)) &&
      (l = zorch_log(s)) && (r = zorch_add(l, shift)))
    out = keepdim ? zorch_tensor_retain(r) : zorch_sum(r, ndims, dims, false); /* (dims of size 1 dropped) */
  OP_FREE(m, mm, z, fin, shift, d, e, s, l, r);
  if (!out) err_prefix("logsumexp");
  return out;
}

/* ---- cumsum ----------------------------------------------------------------------------- */
typedef struct {
  int dim; /* wrapped */
} cumsum_args;

zorch_tensor *op_cumsum(zorch_tensor *a, int dim, bool reverse) {
  zorch_dtype dt = a->dtype;
  zorch_dtype cd = zorch_dtype_is_float(dt) ? op_compute_dtype(dt) : ZORCH_I64;
  int64_t outer = 1, inner = 1, n = a->ndim ? a->shape[dim] : 1;
  for (int i = 0; i < dim; i++) outer *= a->shape[i];
  for (int i = dim + 1; i < a->ndim; i++) inner *= a->shape[i];
  zorch_tensor *c = NULL, *out = NULL;
  if (!(c = op_cast_contig(a, cd)) || !(out = op_empty(a, a->ndim, a->shape, cd)) ||
      (outer * n * inner > 0 && backend_of(out)->cumsum(out, c, outer, n, inner, reverse))) {
    zorch_tensor_free(out);
    out = NULL;
  }
  zorch_tensor_free(c);
  out = op_recast(out, zorch_dtype_is_float(dt) ? dt : ZORCH_I64);
  if (!out) err_prefix("cumsum");
  return out;
}

/* The gradient of a running sum is the running sum of g from the end. */
static zorch_status cumsum_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = op_cumsum(g, AG_ARGS(n, cumsum_args)->dim, true);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

zorch_tensor *zorch_cumsum(zorch_tensor *a, int dim) {
  if (check_arg("cumsum", "input", a)) return NULL;
  cumsum_args args;
  if (dim_wrap("cumsum", dim, a->ndim, 0, &args.dim)) return NULL;
  zorch_tensor *out = op_cumsum(a, args.dim, false);
  return ag_record(out, "CumsumBackward", cumsum_bwd, 1, &a, 0, NULL, &args, sizeof args);
}

/* ---- softmax ------------------------------------------------------------------------ */
typedef struct {
  int dim;  /* the dim softmax runs along (wrapped) */
  bool log; /* log_softmax */
} softmax_args;

/* The fused kernel over rows of y (the backend's softmax_bwd), when it has one
   for y's dtype and the dim is the last; NULL with no error set otherwise. */
static zorch_tensor *softmax_bwd_rows(const softmax_args *a, zorch_tensor *g, zorch_tensor *y,
                                      bool *failed) {
  const backend *be = backend_of(y);
  *failed = false;
  if (!be->softmax_bwd || a->dim != y->ndim - 1 || y->ndim == 0 ||
      !(y->dtype == ZORCH_F32 || rows16(y)) || !zorch_tensor_is_contiguous(y))
    return NULL;
  int64_t c = y->shape[y->ndim - 1], outer = c ? zorch_tensor_numel(y) / c : 0;
  zorch_tensor *gc = NULL, *gx = NULL;
  if (!(gc = op_cast_contig(g, y->dtype)) || !(gx = op_empty(y, y->ndim, y->shape, y->dtype)) ||
      (outer * c > 0 && be->softmax_bwd(gx, gc, y, outer, c, a->log))) {
    zorch_tensor_free(gx);
    gx = NULL;
    *failed = true;
  }
  zorch_tensor_free(gc);
  return gx;
}

/* softmax: gx = y * (g - sum(g * y)); log_softmax: gx = g - exp(y) * sum(g); by
   rows where the backend can, else composed of other ops */
static zorch_status softmax_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const softmax_args *a = AG_ARGS(n, softmax_args);
  zorch_tensor *y = n->saved[0];
  bool failed;
  if ((gin[0] = softmax_bwd_rows(a, g, y, &failed))) return ZORCH_OK;
  if (failed) return zorch_last_status();
  zorch_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL;
  if (a->log) {
    if ((t1 = zorch_sum(g, 1, &a->dim, true)) && (t2 = zorch_exp(y)) && (t3 = zorch_mul(t2, t1)))
      gin[0] = zorch_sub(g, t3);
  } else {
    if ((t1 = zorch_mul(g, y)) && (t2 = zorch_sum(t1, 1, &a->dim, true)) && (t3 = zorch_sub(g, t2)))
      gin[0] = zorch_mul(y, t3);
  }
  OP_FREE(t1, t2, t3);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

static zorch_tensor *softmax_op(const char *op, zorch_tensor *a, int dim, bool log_) {
  if (check_arg(op, "input", a)) return NULL;
  softmax_args args = {.log = log_};
  if (dim_wrap(op, dim, a->ndim, 0, &args.dim)) return NULL;
  int d = args.dim;
  zorch_dtype dt = dtype_to_float(a->dtype), cd = op_compute_dtype(dt);
  int64_t outer = 1, inner = 1, cdim = a->ndim ? a->shape[d] : 1;
  for (int i = 0; i < d; i++) outer *= a->shape[i];
  for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
  if (inner == 1 && rows16(a)) cd = dt; /* rows read and written in 16 bits */
  zorch_tensor *c = NULL, *out = NULL;
  if (!(c = op_cast_contig(a, cd)) || !(out = op_empty(a, a->ndim, a->shape, cd)) ||
      backend_of(out)->softmax(out, c, outer, cdim, inner, log_) || !(out = op_recast(out, dt))) {
    zorch_tensor_free(out);
    out = NULL;
  }
  zorch_tensor_free(c);
  if (!out) {
    err_prefix(op);
    return NULL;
  }
  return ag_record(out, log_ ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_bwd, 1, &a,
                        1, &out, &args, sizeof args);
}

zorch_tensor *zorch_softmax(zorch_tensor *a, int dim) { return softmax_op("softmax", a, dim, false); }
zorch_tensor *zorch_log_softmax(zorch_tensor *a, int dim) {
  return softmax_op("log_softmax", a, dim, true);
}
