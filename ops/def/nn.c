/* nn.c: losses (mse, cross entropy, nll), embedding, layer norm and dropout. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* One node for the whole loss: its gradient is norm * (input - target) * g in
   one pass (norm = 2/N for the mean, else 2; PyTorch's order of the products),
   where the composed ops took a pass for each product and one to add them. */
typedef struct {
  double norm;
} mse_args;

static zorch_status mse_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  double norm = AG_ARGS(n, mse_args)->norm;
  zorch_tensor *d = n->saved[0];
  for (int i = 0; i < 2; i++)
    if (ag_wants(n, i) && !(gin[i] = op_binary(BOP_MUL_SCALED, g, d, i ? -norm : norm, 0)))
      return zorch_last_status();
  return ZORCH_OK;
}

zorch_tensor *zorch_mse_loss(zorch_tensor *input, zorch_tensor *target, zorch_reduction r) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("mse_loss", "input", input) || check_arg("mse_loss", "target", target)) return NULL;
  if (!tensor_same_shape(input, target))
    return err_null(ZORCH_ERR_SHAPE, "mse_loss: input %s and target %s must have the same shape",
                    SHAPE(input, s1), SHAPE(target, s2));
  if ((unsigned)r > ZORCH_REDUCE_NONE) return err_null(ZORCH_ERR_ARG, "mse_loss: bad reduction %d", (int)r);
  zorch_tensor *d = NULL, *sq = NULL, *out = NULL;
  bool prev = zorch_set_grad_enabled(false);
  if ((d = zorch_sub(input, target)) && (sq = zorch_mul(d, d)))
    out = r == ZORCH_REDUCE_NONE ? zorch_tensor_retain(sq)
          : r == ZORCH_REDUCE_SUM ? zorch_sum(sq, 0, NULL, false)
                                  : zorch_mean(sq, 0, NULL, false);
  zorch_set_grad_enabled(prev);
  if (out) {
    mse_args args = {r == ZORCH_REDUCE_MEAN ? 2.0 / (double)zorch_tensor_numel(input) : 2.0};
    zorch_tensor *in[2] = {input, target};
    out = ag_record(out, "MseLossBackward", mse_bwd, 2, in, 1, &d, &args, sizeof args);
  }
  OP_FREE(d, sq);
  if (!out) err_prefix("mse_loss");
  return out;
}

/* ---- cross entropy = nll(log_softmax) -------------------------------------------------- */
typedef struct {
  int64_t n, c;         /* targets, classes */
  int64_t ignore_index; /* targets equal to it add no loss */
} nll_args;

static zorch_status nll_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const nll_args *a = AG_ARGS(n, nll_args);
  ag_edge *e = &n->in[0];
  zorch_tensor *gc = NULL, *z = NULL;
  zorch_status st;
  /* a 16-bit logp gets its gradient in 16 bits straight away */
  bool to16 = (e->dtype == ZORCH_BF16 || e->dtype == ZORCH_F16) && g->dtype == ZORCH_F32 &&
              backend_of(g)->rows16;
  if (!(gc = op_contig(g)) || !(z = op_zeros(g, e->ndim, e->shape, to16 ? e->dtype : g->dtype)))
    st = zorch_last_status();
  else
    st = backend_of(z)->nll_bwd(z, gc, n->saved[0], a->n, a->c, a->ignore_index);
  zorch_tensor_free(gc);
  if (st) {
    zorch_tensor_free(z);
    return st;
  }
  gin[0] = z;
  return ZORCH_OK;
}

/* op is "cross_entropy" or "nll_loss": the checks and messages are the same. */
static zorch_status cross_entropy_check(const char *op, const zorch_tensor *logits,
                                        const zorch_tensor *target, zorch_reduction r) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg(op, "input", logits) || check_arg(op, "target", target) ||
      check_same_device(op, logits, target))
    return zorch_last_status();
  if (target->dtype != ZORCH_I64)
    return err_set(ZORCH_ERR_DTYPE, "%s: target must be int64 class indices, got %s", op,
                   zorch_dtype_name(target->dtype));
  bool batched = logits->ndim == 2;
  if (!(batched || logits->ndim == 1) || target->ndim != (batched ? 1 : 0) ||
      (batched && target->shape[0] != logits->shape[0]))
    return err_set(ZORCH_ERR_SHAPE, "%s: input %s and target %s do not fit (expected "
                   "(N, C) with (N,), or (C,) with ())", op, SHAPE(logits, s1), SHAPE(target, s2));
  if ((unsigned)r > ZORCH_REDUCE_NONE)
    return err_set(ZORCH_ERR_ARG, "%s: bad reduction %d", op, (int)r);
  return ZORCH_OK;
}

/* A 16-bit float that the backend reads itself in nll and layer norm
   (backend.h's rows16). */
static bool rows16(const zorch_tensor *a) {
  return (a->dtype == ZORCH_BF16 || a->dtype == ZORCH_F16) && backend_of(a)->rows16;
}

/* The loss of each target, -logp[target] ((N,) or ()), in the compute dtype,
   recorded as one node on logp, which stays the caller's. */
static zorch_tensor *nll_of(const char *op, zorch_tensor *logp, zorch_tensor *target,
                            int64_t ignore_index) {
  bool batched = logp->ndim == 2;
  nll_args args = {.n = batched ? logp->shape[0] : 1, .c = logp->shape[logp->ndim - 1],
                   .ignore_index = ignore_index};
  zorch_tensor *lp = NULL, *tg = NULL, *loss = NULL;
  zorch_status st;
  /* 16-bit log-probabilities are read in float32 (the kernels' dtypes), in
     place where the backend can */
  zorch_dtype cd = op_compute_dtype(logp->dtype);
  if (!(lp = rows16(logp) ? op_contig(logp) : op_cast_contig(logp, cd)) ||
      !(tg = op_contig(target)) || !(loss = op_empty(logp, batched ? 1 : 0, &args.n, cd)))
    st = zorch_last_status();
  else
    st = backend_of(loss)->nll(loss, lp, tg, args.n, args.c, ignore_index);
  if (st) {
    zorch_tensor_free(loss);
    loss = NULL;
    err_prefix(op);
  } else {
    loss = ag_record(loss, "NllLossBackward", nll_bwd, 1, &logp, 1, &tg, &args, sizeof args);
  }
  OP_FREE(lp, tg);
  return loss;
}

/* The loss of each target, -log_softmax(logits)[target], recorded on log_softmax(logits). */
static zorch_tensor *cross_entropy_nll(zorch_tensor *logits, zorch_tensor *target,
                                       int64_t ignore_index) {
  zorch_tensor *logp = zorch_log_softmax(logits, -1);
  if (!logp) return NULL;
  zorch_tensor *loss = nll_of("cross_entropy", logp, target, ignore_index);
  zorch_tensor_free(logp);
  return loss;
}

/* How many targets are not ignore_index, as a 0-d tensor of dtype dt on the
   targets' device: the mean divides by it without reading it back, so nothing
   waits for a GPU. */
static zorch_tensor *cross_entropy_count(zorch_tensor *target, int64_t ignore_index,
                                         zorch_dtype dt) {
  int64_t n = zorch_tensor_numel(target);
  zorch_tensor *ig = NULL, *eq = NULL, *eqf = NULL, *nig = NULL, *count = NULL;
  if ((ig = zorch_full(0, NULL, (double)ignore_index, ZORCH_I64, target->st->device)) &&
      (eq = zorch_eq(target, ig)) && (eqf = zorch_to_dtype(eq, dt)) &&
      (nig = zorch_sum(eqf, 0, NULL, false)))
    count = zorch_rsub_scalar(nig, (double)n);
  OP_FREE(ig, eq, eqf, nig);
  return count;
}

/* The per-target losses as asked: as they are, summed, or averaged over the
   targets that count. */
static zorch_tensor *cross_entropy_reduce(zorch_tensor *loss, zorch_tensor *target,
                                          zorch_reduction r, int64_t ignore_index) {
  if (r == ZORCH_REDUCE_NONE) return zorch_tensor_retain(loss);
  zorch_tensor *s = NULL, *count = NULL, *out = NULL;
  if (!(s = zorch_sum(loss, 0, NULL, false))) goto done;
  if (r == ZORCH_REDUCE_SUM) {
    out = zorch_tensor_retain(s);
    goto done;
  }
  if ((count = cross_entropy_count(target, ignore_index, loss->dtype))) out = zorch_div(s, count);
done:
  OP_FREE(s, count);
  return out;
}

/* The reduced loss, back in the input's dtype where that is a float. */
static zorch_tensor *nll_finish(zorch_tensor *loss, zorch_tensor *input, zorch_tensor *target,
                                zorch_reduction r, int64_t ignore_index) {
  if (!loss) return NULL;
  zorch_tensor *out = cross_entropy_reduce(loss, target, r, ignore_index);
  zorch_tensor_free(loss);
  if (out && out->dtype != input->dtype && zorch_dtype_is_float(input->dtype)) {
    zorch_tensor *o2 = zorch_to_dtype(out, input->dtype);
    zorch_tensor_free(out);
    out = o2;
  }
  return out;
}

zorch_tensor *zorch_cross_entropy(zorch_tensor *logits, zorch_tensor *target, zorch_reduction r,
                                  int64_t ignore_index) {
  if (cross_entropy_check("cross_entropy", logits, target, r)) return NULL;
  return nll_finish(cross_entropy_nll(logits, target, ignore_index), logits, target, r, ignore_index);
}

zorch_tensor *zorch_nll_loss(zorch_tensor *logp, zorch_tensor *target, zorch_reduction r,
                             int64_t ignore_index) {
  if (cross_entropy_check("nll_loss", logp, target, r)) return NULL;
  return nll_finish(nll_of("nll_loss", logp, target, ignore_index), logp, target, r, ignore_index);
}

/* ---- index_select and embedding ----------------------------------------------------------- */
typedef struct {
  int dim;
} index_select_args;

static zorch_status index_select_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  ag_edge *e = &n->in[0];
  int d = AG_ARGS(n, index_select_args)->dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; i++) outer *= e->shape[i];
  for (int i = d + 1; i < e->ndim; i++) inner *= e->shape[i];
  zorch_tensor *gc = NULL, *z = NULL;
  zorch_status st;
  if (!(gc = op_contig(g)) || !(z = op_zeros(g, e->ndim, e->shape, g->dtype)))
    st = zorch_last_status();
  else
    st = backend_of(z)->index_add(z, gc, n->saved[0], outer, e->shape[d], inner);
  zorch_tensor_free(gc);
  if (st) {
    zorch_tensor_free(z);
    return st;
  }
  gin[0] = z;
  return ZORCH_OK;
}

zorch_tensor *zorch_index_select(zorch_tensor *a, int dim, zorch_tensor *idx) {
  char s1[ERR_SHAPE_BUF];
  const char *op = "index_select";
  if (check_arg(op, "input", a) || check_arg(op, "index", idx) || check_same_device(op, a, idx))
    return NULL;
  if (idx->dtype != ZORCH_I64 || idx->ndim > 1)
    return err_null(ZORCH_ERR_ARG, "index_select: index must be a 1-D int64 tensor, got %s %s",
                    zorch_dtype_name(idx->dtype), SHAPE(idx, s1));
  if (a->ndim == 0) return err_null(ZORCH_ERR_SHAPE, "index_select: input must have at least 1 dim");
  index_select_args args;
  if (dim_wrap(op, dim, a->ndim, 0, &args.dim)) return NULL;
  int d = args.dim;
  int64_t ni = zorch_tensor_numel(idx), outer = 1, inner = 1;
  for (int i = 0; i < d; i++) outer *= a->shape[i];
  for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
  int64_t shape[ZORCH_MAX_DIMS];
  memcpy(shape, a->shape, sizeof shape);
  shape[d] = ni;
  zorch_tensor *ac = NULL, *ic = NULL, *out = NULL;
  if (!(ac = op_contig(a)) || !(ic = op_contig(idx)) ||
      !(out = op_empty(a, a->ndim, shape, a->dtype)))
    goto done;
  if (backend_of(out)->index_select(out, ac, ic, outer, a->shape[d], inner)) {
    zorch_tensor_free(out);
    out = NULL;
    goto done;
  }
  out = ag_record(out, "IndexSelectBackward", index_select_bwd, 1, &a, 1, &ic, &args,
                       sizeof args);
done:
  OP_FREE(ac, ic);
  return out;
}

zorch_tensor *zorch_embedding(zorch_tensor *weight, zorch_tensor *idx) {
  char s1[ERR_SHAPE_BUF];
  if (check_arg("embedding", "weight", weight) || check_arg("embedding", "indices", idx)) return NULL;
  if (weight->ndim != 2)
    return err_null(ZORCH_ERR_SHAPE, "embedding: weight must be (num_embeddings, dim), got %s",
                    SHAPE(weight, s1));
  if (idx->dtype != ZORCH_I64)
    return err_null(ZORCH_ERR_DTYPE, "embedding: indices must be int64, got %s",
                    zorch_dtype_name(idx->dtype));
  if (idx->ndim >= ZORCH_MAX_DIMS)
    return err_null(ZORCH_ERR_SHAPE, "embedding: indices have too many dims");
  int64_t flat = -1, shape[ZORCH_MAX_DIMS];
  memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  shape[idx->ndim] = weight->shape[1];
  zorch_tensor *fi = NULL, *rows = NULL, *out = NULL;
  if ((fi = zorch_reshape(idx, 1, &flat)) && (rows = zorch_index_select(weight, 0, fi)))
    out = zorch_reshape(rows, idx->ndim + 1, shape);
  OP_FREE(fi, rows);
  if (!out) err_prefix("embedding");
  return out;
}

/* ---- layer norm ---------------------------------------------------------------------- */
typedef struct {
  int64_t rows, cols; /* rows normalised, each of cols elements */
} layer_norm_args;

/* saved: x, w (in the compute dtype, or 16-bit as given where the backend reads
   them), mean, rstd (float32 for 16-bit x) */
static zorch_status layer_norm_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const layer_norm_args *a = AG_ARGS(n, layer_norm_args);
  zorch_tensor *x = n->saved[0], *w = n->saved[1];
  int64_t cols = a->cols;
  bool want_w = n->nin > 1 && ag_wants(n, 1), want_b = n->nin > 2 && ag_wants(n, 2);
  zorch_tensor *gc = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, x->dtype)) || !(gx = op_empty(x, x->ndim, x->shape, x->dtype)) ||
      (want_w && !(gw = op_empty(x, 1, &cols, x->dtype))) ||
      (want_b && !(gb = op_empty(x, 1, &cols, x->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  st = backend_of(x)->layer_norm_bwd(gx, gw, gb, gc, x, n->saved[2], n->saved[3], w, a->rows, cols);
  if (st) goto done;
  gin[0] = gx;
  gx = NULL;
  /* back to the weight's and the bias's own shapes */
  if ((gw && !(gin[1] = zorch_reshape(gw, n->in[1].ndim, n->in[1].shape))) ||
      (gb && !(gin[2] = zorch_reshape(gb, n->in[2].ndim, n->in[2].shape))))
    st = zorch_last_status();
done:
  OP_FREE(gc, gx, gw, gb);
  return st;
}

/* Checks that weight and bias, when given, have the normalised shape (the last
   nnorm dims of x). */
static zorch_status layer_norm_check(const zorch_tensor *x, int nnorm, const zorch_tensor *w,
                                     const zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "layer_norm";
  if (check_arg(op, "input", x)) return zorch_last_status();
  if (nnorm < 1 || nnorm > x->ndim)
    return err_set(ZORCH_ERR_ARG, "layer_norm: cannot normalise over the last %d dims of %s",
                   nnorm, SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_set(ZORCH_ERR_DTYPE, "layer_norm: needs a floating-point input, got %s",
                   zorch_dtype_name(x->dtype));
  const int64_t *ns = x->shape + x->ndim - nnorm;
  int64_t cols = shape_numel(nnorm, ns);
  const zorch_tensor *pw[2] = {w, b};
  for (int i = 0; i < 2; i++) {
    const zorch_tensor *p = pw[i];
    if (!p) continue;
    if (check_same_device(op, x, p)) return zorch_last_status();
    if (shape_numel(p->ndim, p->shape) != cols || p->ndim != nnorm ||
        memcmp(p->shape, ns, sizeof(int64_t) * (size_t)nnorm) != 0)
      return err_set(ZORCH_ERR_SHAPE, "layer_norm: %s %s does not match the normalised shape %s",
                     i ? "bias" : "weight", SHAPE(p, s1), err_shape_str(nnorm, ns, s2, sizeof s2));
  }
  return ZORCH_OK;
}

zorch_tensor *zorch_layer_norm(zorch_tensor *x, int nnorm, zorch_tensor *w, zorch_tensor *b,
                               double eps) {
  if (layer_norm_check(x, nnorm, w, b)) return NULL;
  layer_norm_args args;
  args.cols = shape_numel(nnorm, x->shape + x->ndim - nnorm);
  args.rows = args.cols ? zorch_tensor_numel(x) / args.cols : 0;
  zorch_dtype cd = op_compute_dtype(x->dtype);
  /* 16-bit rows read and written in place, with float32 statistics, where the
     backend can and weight and bias share x's dtype */
  bool keep16 = rows16(x) && (!w || w->dtype == x->dtype) && (!b || b->dtype == x->dtype);
  zorch_dtype td = keep16 ? x->dtype : cd;
  zorch_tensor *in[3] = {x, w, b};
  zorch_tensor *cx = NULL, *cw = NULL, *cb = NULL, *y = NULL, *mean = NULL, *rstd = NULL;
  if (!(cx = op_cast_contig(x, td)) || (w && !(cw = op_cast_contig(w, td))) ||
      (b && !(cb = op_cast_contig(b, td))))
    goto fail;
  if (!(y = op_empty(x, x->ndim, x->shape, td)) || !(mean = op_empty(x, 1, &args.rows, cd)) ||
      !(rstd = op_empty(x, 1, &args.rows, cd)))
    goto fail;
  if (backend_of(y)->layer_norm(y, mean, rstd, cx, cw, cb, args.rows, args.cols, eps) ||
      !(y = op_recast(y, x->dtype)))
    goto fail;
  y = ag_record(y, "LayerNormBackward", layer_norm_bwd, 3, in, 4,
                     (zorch_tensor *[]){cx, cw, mean, rstd}, &args, sizeof args);
  goto done;
fail:
  zorch_tensor_free(y);
  y = NULL;
  err_prefix("layer_norm");
done:
  OP_FREE(cx, cw, cb, mean, rstd);
  return y;
}

/* ---- dropout -------------------------------------------------------------------------------- */
zorch_tensor *zorch_dropout(zorch_tensor *x, double p, bool training, zorch_generator *gen) {
  if (check_arg("dropout", "input", x)) return NULL;
  if (!(p >= 0 && p <= 1))
    return err_null(ZORCH_ERR_ARG, "dropout: probability has to be between 0 and 1, got %g", p);
  if (!training || p == 0) return zorch_tensor_retain(x);
  if (p == 1) return zorch_mul_scalar(x, 0);
  zorch_dtype dt = zorch_dtype_is_float(x->dtype) ? x->dtype : ZORCH_F32;
  zorch_tensor *u = NULL, *q = NULL, *keep = NULL, *mask = NULL, *scaled = NULL, *y = NULL;
  if ((u = zorch_rand(x->ndim, x->shape, ZORCH_F32, x->st->device, gen)) &&
      (q = zorch_full(0, NULL, 1 - p, ZORCH_F32, x->st->device)) && (keep = zorch_lt(u, q)) &&
      (mask = op_cast(keep, dt)) && (scaled = zorch_mul_scalar(mask, 1.0 / (1.0 - p))))
    y = zorch_mul(x, scaled);
  OP_FREE(u, q, keep, mask, scaled);
  if (!y) err_prefix("dropout");
  return y;
}

/* ---- SwiGLU (include/zorch_ops.h) -------------------------------------------------------------- */
typedef struct {
  int64_t n;
} swiglu_args;

/* saved: a, b, contiguous in the compute dtype */
static zorch_status swiglu_bwd(ag_node *nd, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = nd->saved[0], *b = nd->saved[1];
  zorch_tensor *gc = NULL, *ga = NULL, *gb = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, a->dtype)) || (ag_wants(nd, 0) && !(ga = op_empty(a, a->ndim, a->shape, a->dtype))) ||
      (ag_wants(nd, 1) && !(gb = op_empty(a, a->ndim, a->shape, a->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  st = backend_of(a)->swiglu_bwd(ga, gb, gc, a, b, AG_ARGS(nd, swiglu_args)->n);
  if (st) goto done;
  gin[0] = ga, gin[1] = gb;
  ga = gb = NULL;
done:
  OP_FREE(gc, ga, gb);
  return st;
}

zorch_tensor *zorch_swiglu(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("swiglu", "a", a) || check_arg("swiglu", "b", b) || check_same_device("swiglu", a, b)) return NULL;
  if (!zorch_dtype_is_float(a->dtype))
    return err_null(ZORCH_ERR_DTYPE, "swiglu: a must be floating point, got %s", zorch_dtype_name(a->dtype));
  if (b->dtype != a->dtype)
    return err_null(ZORCH_ERR_DTYPE, "swiglu: b is %s, a %s: they must have one dtype", zorch_dtype_name(b->dtype),
                    zorch_dtype_name(a->dtype));
  if (!tensor_same_shape(a, b))
    return err_null(ZORCH_ERR_SHAPE, "swiglu: a %s and b %s must have one shape", SHAPE(a, s1), SHAPE(b, s2));
  swiglu_args args = {zorch_tensor_numel(a)};
  zorch_dtype cd = op_compute_dtype(a->dtype); /* 16-bit tensors in float32 */
  zorch_tensor *in[2] = {a, b};
  zorch_tensor *ca = NULL, *cb = NULL, *y = NULL;
  if (!(ca = op_cast_contig(a, cd)) || !(cb = op_cast_contig(b, cd)) || !(y = op_empty(a, a->ndim, a->shape, cd)))
    goto fail;
  if (backend_of(y)->swiglu(y, ca, cb, args.n) || !(y = op_recast(y, a->dtype))) goto fail;
  y = ag_record(y, "SwigluBackward", swiglu_bwd, 2, in, 2, (zorch_tensor *[]){ca, cb}, &args, sizeof args);
  goto done;
fail:
  zorch_tensor_free(y);
  y = NULL;
  err_prefix("swiglu");
done:
  OP_FREE(ca, cb);
  return y;
}
