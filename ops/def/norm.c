/* norm.c: batch normalisation over the channel dim (dim 1) of (N, C),
   (N, C, L) or (N, C, H, W) inputs, as torch.nn.functional.batch_norm. */
#include <math.h>
#include <string.h>

#include "ops.h"

typedef struct {
  int64_t n, c, inner; /* x as (n, c, inner) */
  bool training;       /* the batch's statistics were used (they depend on x) */
} batch_norm_args;

/* saved: x, w, mean, rstd (in the compute dtype) */
static zorch_status batch_norm_bwd(ag_node *nd, zorch_tensor *g, zorch_tensor **gin) {
  const batch_norm_args *a = AG_ARGS(nd, batch_norm_args);
  zorch_tensor *x = nd->saved[0], *w = nd->saved[1];
  int64_t c = a->c;
  bool want_x = ag_wants(nd, 0), want_w = ag_wants(nd, 1), want_b = ag_wants(nd, 2);
  zorch_tensor *gc = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, x->dtype)) ||
      (want_x && !(gx = op_empty(x, x->ndim, x->shape, x->dtype))) ||
      (want_w && !(gw = op_empty(x, 1, &c, x->dtype))) ||
      (want_b && !(gb = op_empty(x, 1, &c, x->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  st = backend_of(x)->batch_norm_bwd(gx, gw, gb, gc, x, nd->saved[2], nd->saved[3], w, a->n, c,
                                     a->inner, a->training);
  if (st) goto done;
  gin[0] = gx, gin[1] = gw, gin[2] = gb;
  gx = gw = gb = NULL;
done:
  OP_FREE(gc, gx, gw, gb);
  return st;
}

/* weight, bias, running_mean and running_var, when given: 1-D of C elements
   on x's device; the running stats floating point and without grad. */
static zorch_status batch_norm_check(const zorch_tensor *x, zorch_tensor *const p[4], bool training,
                                     double momentum, double eps) {
  static const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "batch_norm";
  if (check_arg(op, "input", x)) return zorch_last_status();
  if (x->ndim < 2 || x->ndim > 4)
    return err_set(ZORCH_ERR_SHAPE, "batch_norm: input must be (N, C), (N, C, L) or (N, C, H, W), got %s",
                   SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_set(ZORCH_ERR_DTYPE, "batch_norm: needs a floating-point input, got %s",
                   zorch_dtype_name(x->dtype));
  int64_t c = x->shape[1];
  for (int i = 0; i < 4; i++) {
    const zorch_tensor *t = p[i];
    if (!t) continue;
    if (check_arg(op, names[i], t) || check_same_device(op, x, t)) return zorch_last_status();
    if (t->ndim != 1 || t->shape[0] != c)
      return err_set(ZORCH_ERR_SHAPE, "batch_norm: %s %s must have one element per channel of the input %s",
                     names[i], SHAPE(t, s1), SHAPE(x, s2));
    if (i >= 2 && !zorch_dtype_is_float(t->dtype))
      return err_set(ZORCH_ERR_DTYPE, "batch_norm: %s must be floating point, got %s", names[i],
                     zorch_dtype_name(t->dtype));
    if (i >= 2 && training && tensor_requires_grad(t))
      return err_set(ZORCH_ERR_ARG, "batch_norm: %s is updated in place and must not require grad",
                     names[i]);
  }
  if ((p[2] == NULL) != (p[3] == NULL))
    return err_set(ZORCH_ERR_ARG, "batch_norm: give both running_mean and running_var, or neither");
  if (!training && !p[2])
    return err_set(ZORCH_ERR_ARG, "batch_norm: eval mode needs running_mean and running_var");
  if (!(eps > 0) || !isfinite(eps))
    return err_set(ZORCH_ERR_ARG, "batch_norm: eps must be a positive number, got %g", eps);
  if (!(momentum >= 0 && momentum <= 1))
    return err_set(ZORCH_ERR_ARG, "batch_norm: momentum must be in [0, 1], got %g", momentum);
  if (training && zorch_tensor_numel(x) / (c ? c : 1) <= 1 && c)
    return err_set(ZORCH_ERR_SHAPE, "batch_norm: expected more than 1 value per channel when "
                   "training, got input %s", SHAPE(x, s1));
  return ZORCH_OK;
}

zorch_tensor *zorch_batch_norm(zorch_tensor *x, zorch_tensor *running_mean,
                               zorch_tensor *running_var, zorch_tensor *w, zorch_tensor *b,
                               bool training, double momentum, double eps) {
  zorch_tensor *p[4] = {w, b, running_mean, running_var};
  if (batch_norm_check(x, p, training, momentum, eps)) return NULL;
  batch_norm_args args = {.n = x->shape[0], .c = x->shape[1], .inner = 1, .training = training};
  for (int i = 2; i < x->ndim; i++) args.inner *= x->shape[i];
  zorch_dtype cd = op_compute_dtype(x->dtype);
  zorch_tensor *in[3] = {x, w, b};
  zorch_tensor *cx = NULL, *cw = NULL, *cb = NULL, *rm = NULL, *rv = NULL, *y = NULL,
               *mean = NULL, *rstd = NULL;
  bool update = training && running_mean;
  if (update && (tensor_mark_written("batch_norm", running_mean) ||
                 tensor_mark_written("batch_norm", running_var)))
    goto fail;
  /* running stats of another dtype or layout are updated through a copy */
  if (!(cx = op_cast_contig(x, cd)) || (w && !(cw = op_cast_contig(w, cd))) ||
      (b && !(cb = op_cast_contig(b, cd))) ||
      (running_mean && (!(rm = op_cast_contig(running_mean, cd)) ||
                        !(rv = op_cast_contig(running_var, cd)))))
    goto fail;
  if (!(y = op_empty(x, x->ndim, x->shape, cd)) || !(mean = op_empty(x, 1, &args.c, cd)) ||
      !(rstd = op_empty(x, 1, &args.c, cd)))
    goto fail;
  if (backend_of(y)->batch_norm(y, mean, rstd, cx, cw, cb, rm, rv, args.n, args.c, args.inner,
                                training, momentum, eps))
    goto fail;
  if (update && ((rm != running_mean && op_copy_(running_mean, rm)) ||
                 (rv != running_var && op_copy_(running_var, rv))))
    goto fail;
  if (!(y = op_recast(y, x->dtype))) goto fail;
  y = ag_record(y, "BatchNormBackward", batch_norm_bwd, 3, in, 4,
                (zorch_tensor *[]){cx, cw, mean, rstd}, &args, sizeof args);
  goto done;
fail:
  zorch_tensor_free(y);
  y = NULL;
  err_prefix("batch_norm");
done:
  OP_FREE(cx, cw, cb, rm, rv, mean, rstd);
  return y;
}

/* ---- RMSNorm (include/zorch_ops.h) ---------------------------------------------------------- */
typedef struct {
  int64_t rows, cols; /* x as (rows, cols), cols its last dim */
} rms_norm_args;

/* saved: x, w (may be NULL), rstd, in the compute dtype */
static zorch_status rms_norm_bwd(ag_node *nd, zorch_tensor *g, zorch_tensor **gin) {
  const rms_norm_args *a = AG_ARGS(nd, rms_norm_args);
  zorch_tensor *x = nd->saved[0], *w = nd->saved[1];
  zorch_tensor *gc = NULL, *gx = NULL, *gw = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, x->dtype)) || !(gx = op_empty(x, x->ndim, x->shape, x->dtype)) ||
      (w && ag_wants(nd, 1) && !(gw = op_empty(x, 1, &a->cols, x->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  st = backend_of(x)->rms_norm_bwd(gx, gw, gc, x, w, nd->saved[2], a->rows, a->cols);
  if (st) goto done;
  gin[0] = gx, gin[1] = gw;
  gx = gw = NULL;
done:
  OP_FREE(gc, gx, gw);
  return st;
}

static zorch_status rms_norm_check(const zorch_tensor *x, const zorch_tensor *w, double eps) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "fused_rms_norm";
  if (check_arg(op, "x", x)) return zorch_last_status();
  if (x->ndim < 1)
    return err_set(ZORCH_ERR_SHAPE, "fused_rms_norm: x must have at least one dim, got %s", SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_set(ZORCH_ERR_DTYPE, "fused_rms_norm: x must be floating point, got %s", zorch_dtype_name(x->dtype));
  if (w) {
    if (check_arg(op, "weight", w) || check_same_device(op, x, w)) return zorch_last_status();
    if (w->ndim != 1 || w->shape[0] != x->shape[x->ndim - 1])
      return err_set(ZORCH_ERR_SHAPE, "fused_rms_norm: weight %s must be the last dim of x %s", SHAPE(w, s1),
                     SHAPE(x, s2));
    if (w->dtype != x->dtype)
      return err_set(ZORCH_ERR_DTYPE, "fused_rms_norm: weight is %s, x %s: they must have one dtype",
                     zorch_dtype_name(w->dtype), zorch_dtype_name(x->dtype));
  }
  if (!(eps >= 0) || !isfinite(eps))
    return err_set(ZORCH_ERR_ARG, "fused_rms_norm: eps must be a number >= 0, got %g", eps);
  return ZORCH_OK;
}

zorch_tensor *zorch_fused_rms_norm(zorch_tensor *x, zorch_tensor *w, double eps) {
  if (rms_norm_check(x, w, eps)) return NULL;
  rms_norm_args args = {.cols = x->shape[x->ndim - 1]};
  args.rows = args.cols ? zorch_tensor_numel(x) / args.cols : 0;
  zorch_dtype cd = op_compute_dtype(x->dtype); /* 16-bit rows in float32 */
  zorch_tensor *in[2] = {x, w};
  zorch_tensor *cx = NULL, *cw = NULL, *y = NULL, *rstd = NULL;
  if (!(cx = op_cast_contig(x, cd)) || (w && !(cw = op_cast_contig(w, cd))) ||
      !(y = op_empty(x, x->ndim, x->shape, cd)) || !(rstd = op_empty(x, 1, &args.rows, cd)))
    goto fail;
  if (backend_of(y)->rms_norm(y, rstd, cx, cw, args.rows, args.cols, eps) || !(y = op_recast(y, x->dtype)))
    goto fail;
  y = ag_record(y, "FusedRmsNormBackward", rms_norm_bwd, 2, in, 3, (zorch_tensor *[]){cx, cw, rstd}, &args,
                sizeof args);
  goto done;
fail:
  zorch_tensor_free(y);
  y = NULL;
  err_prefix("fused_rms_norm");
done:
  OP_FREE(cx, cw, rstd);
  return y;
}
