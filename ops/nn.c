/* nn.c: losses (mse, cross entropy), embedding, layer norm and dropout. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

zorch_tensor *zorch_mse_loss(zorch_tensor *input, zorch_tensor *target, zorch_reduction r) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("mse_loss", "input", input) || check_arg("mse_loss", "target", target)) return NULL;
  if (!tensor_same_shape(input, target))
    return err_null(ZORCH_ERR_SHAPE, "mse_loss: input %s and target %s must have the same shape",
                    SHAPE(input, s1), SHAPE(target, s2));
  if ((unsigned)r > ZORCH_REDUCE_NONE) return err_null(ZORCH_ERR_ARG, "mse_loss: bad reduction %d", (int)r);
  zorch_tensor *d = zorch_sub(input, target);
  zorch_tensor *sq = d ? zorch_mul(d, d) : NULL;
  zorch_tensor *out = NULL;
  if (sq)
    out = r == ZORCH_REDUCE_NONE ? zorch_tensor_retain(sq)
          : r == ZORCH_REDUCE_SUM ? zorch_sum(sq, 0, NULL, false)
                                  : zorch_mean(sq, 0, NULL, false);
  op_free(d, sq, NULL, NULL);
  if (!out) err_prefix("mse_loss");
  return out;
}

/* ---- cross entropy = nll(log_softmax) -------------------------------------------------- */
static zorch_status nll_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  ag_edge *e = &n->in[0];
  zorch_tensor *gc = op_contig(g);
  zorch_tensor *z = gc ? op_zeros(g, e->ndim, e->shape, g->dtype) : NULL;
  zorch_status st = z ? backend_of(z)->nll_bwd(z, gc, n->saved[0], n->iv[0], n->iv[1], n->iv[2])
                      : zorch_last_status();
  zorch_tensor_free(gc);
  if (st) {
    zorch_tensor_free(z);
    return st;
  }
  gin[0] = z;
  return ZORCH_OK;
}

zorch_tensor *zorch_cross_entropy(zorch_tensor *logits, zorch_tensor *target, zorch_reduction r,
                                  int64_t ignore_index) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "cross_entropy";
  if (check_arg(op, "input", logits) || check_arg(op, "target", target) ||
      check_same_device(op, logits, target))
    return NULL;
  if (target->dtype != ZORCH_I64)
    return err_null(ZORCH_ERR_DTYPE, "cross_entropy: target must be int64 class indices, got %s",
                    zorch_dtype_name(target->dtype));
  bool batched = logits->ndim == 2;
  if (!(batched || logits->ndim == 1) || target->ndim != (batched ? 1 : 0) ||
      (batched && target->shape[0] != logits->shape[0]))
    return err_null(ZORCH_ERR_SHAPE, "cross_entropy: input %s and target %s do not fit (expected "
                    "(N, C) with (N,), or (C,) with ())", SHAPE(logits, s1), SHAPE(target, s2));
  if ((unsigned)r > ZORCH_REDUCE_NONE) return err_null(ZORCH_ERR_ARG, "cross_entropy: bad reduction %d", (int)r);
  int64_t n = batched ? logits->shape[0] : 1, c = logits->shape[logits->ndim - 1];
  zorch_tensor *logp = zorch_log_softmax(logits, -1);
  if (!logp) return NULL;
  /* 16-bit log-probabilities are read in float32 (the kernels' dtypes) */
  zorch_tensor *lp0 = op_cast(logp, op_compute_dtype(logp->dtype));
  zorch_tensor *lp = lp0 ? op_contig(lp0) : NULL, *tg = lp ? op_contig(target) : NULL;
  int64_t nshape[1] = {n};
  zorch_tensor *loss = tg ? op_empty(logp, batched ? 1 : 0, nshape, lp->dtype) : NULL;
  zorch_status st = loss ? backend_of(loss)->nll(loss, lp, tg, n, c, ignore_index) : zorch_last_status();
  zorch_tensor_free(lp0);
  if (st) {
    op_free(logp, lp, tg, loss);
    err_prefix(op);
    return NULL;
  }
  ag_node *node;
  loss = ag_record(loss, "NllLossBackward", nll_bwd, 1, &logp, 1, &tg, &node);
  if (node) {
    node->iv[0] = n;
    node->iv[1] = c;
    node->iv[2] = ignore_index;
  }
  /* the mean is over the targets that count: counted on the host for CPU
     tensors, on the device otherwise (nothing waits for the GPU) */
  int64_t count = n;
  zorch_tensor *valid = NULL;
  if (loss && r == ZORCH_REDUCE_MEAN && tg->st->device.type == ZORCH_CPU) {
    const int64_t *t = (const int64_t *)tensor_ptr(tg);
    count = 0;
    for (int64_t i = 0; i < n; i++) count += t[i] != ignore_index;
  } else if (loss && r == ZORCH_REDUCE_MEAN) {
    zorch_tensor *ig = zorch_full(0, NULL, (double)ignore_index, ZORCH_I64, tg->st->device);
    zorch_tensor *eq = ig ? zorch_eq(tg, ig) : NULL, *eqf = eq ? zorch_to_dtype(eq, lp->dtype) : NULL;
    zorch_tensor *ni = eqf ? zorch_sum(eqf, 0, NULL, false) : NULL, *neg = ni ? zorch_mul_scalar(ni, -1) : NULL;
    valid = neg ? zorch_add_scalar(neg, (double)n) : NULL;
    op_free(ig, eq, eqf, ni);
    zorch_tensor_free(neg);
    if (!valid) {
      zorch_tensor_free(loss);
      loss = NULL;
    }
  }
  zorch_tensor *out = NULL;
  if (loss) {
    if (r == ZORCH_REDUCE_NONE) {
      out = zorch_tensor_retain(loss);
    } else {
      zorch_tensor *s = zorch_sum(loss, 0, NULL, false);
      if (s && valid)
        out = zorch_div(s, valid);
      else
        out = s && r == ZORCH_REDUCE_MEAN ? zorch_mul_scalar(s, 1.0 / (double)count) : zorch_tensor_retain(s);
      zorch_tensor_free(s);
    }
    if (out && out->dtype != logits->dtype && zorch_dtype_is_float(logits->dtype)) {
      zorch_tensor *o2 = zorch_to_dtype(out, logits->dtype);
      zorch_tensor_free(out);
      out = o2;
    }
  }
  op_free(logp, lp, tg, loss);
  zorch_tensor_free(valid);
  return out;
}

/* ---- index_select and embedding ----------------------------------------------------------- */
static zorch_status index_select_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  ag_edge *e = &n->in[0];
  int d = (int)n->iv[0];
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; i++) outer *= e->shape[i];
  for (int i = d + 1; i < e->ndim; i++) inner *= e->shape[i];
  zorch_tensor *gc = op_contig(g);
  zorch_tensor *z = gc ? op_zeros(g, e->ndim, e->shape, g->dtype) : NULL;
  zorch_status st = z ? backend_of(z)->index_add(z, gc, n->saved[0], outer, e->shape[d], inner)
                      : zorch_last_status();
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
  int d;
  if (dim_wrap(op, dim, a->ndim, 0, &d)) return NULL;
  int64_t ni = zorch_tensor_numel(idx), outer = 1, inner = 1;
  for (int i = 0; i < d; i++) outer *= a->shape[i];
  for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
  int64_t shape[ZORCH_MAX_DIMS];
  memcpy(shape, a->shape, sizeof shape);
  shape[d] = ni;
  zorch_tensor *ac = op_contig(a), *ic = ac ? op_contig(idx) : NULL;
  zorch_tensor *out = ic ? op_empty(a, a->ndim, shape, a->dtype) : NULL;
  if (out && backend_of(out)->index_select(out, ac, ic, outer, a->shape[d], inner)) {
    zorch_tensor_free(out);
    out = NULL;
  }
  zorch_tensor_free(ac);
  ag_node *node;
  out = ag_record(out, "IndexSelectBackward", index_select_bwd, 1, &a, 1, &ic, &node);
  if (node) node->iv[0] = d;
  zorch_tensor_free(ic);
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
  int64_t flat = -1;
  zorch_tensor *fi = zorch_reshape(idx, 1, &flat);
  zorch_tensor *rows = fi ? zorch_index_select(weight, 0, fi) : NULL;
  int64_t shape[ZORCH_MAX_DIMS];
  memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  shape[idx->ndim] = weight->shape[1];
  zorch_tensor *out = rows ? zorch_reshape(rows, idx->ndim + 1, shape) : NULL;
  op_free(fi, rows, NULL, NULL);
  if (!out) err_prefix("embedding");
  return out;
}

/* ---- layer norm ---------------------------------------------------------------------- */
/* saved: x, w, mean, rstd (in the compute dtype) */
static zorch_status layer_norm_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *x = n->saved[0], *w = n->saved[1];
  int64_t rows = n->iv[0], cols = n->iv[1];
  zorch_tensor *gc0 = op_cast(g, x->dtype), *gc = gc0 ? op_contig(gc0) : NULL;
  zorch_tensor *gx = gc ? op_empty(x, x->ndim, x->shape, x->dtype) : NULL;
  zorch_tensor *gw = gx && n->nin > 1 && ag_wants(n, 1) ? op_empty(x, 1, &cols, x->dtype) : NULL;
  zorch_tensor *gb = gx && n->nin > 2 && ag_wants(n, 2) ? op_empty(x, 1, &cols, x->dtype) : NULL;
  zorch_status st = gx ? backend_of(x)->layer_norm_bwd(gx, gw, gb, gc, x, n->saved[2], n->saved[3],
                                                       w, rows, cols)
                       : zorch_last_status();
  op_free(gc0, gc, NULL, NULL);
  if (st) {
    op_free(gx, gw, gb, NULL);
    return st;
  }
  gin[0] = gx;
  if (gw) { /* back to the weight's own shape */
    gin[1] = zorch_reshape(gw, n->in[1].ndim, n->in[1].shape);
    zorch_tensor_free(gw);
  }
  if (gb) {
    gin[2] = zorch_reshape(gb, n->in[2].ndim, n->in[2].shape);
    zorch_tensor_free(gb);
  }
  return ZORCH_OK;
}

zorch_tensor *zorch_layer_norm(zorch_tensor *x, int nnorm, zorch_tensor *w, zorch_tensor *b,
                               double eps) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "layer_norm";
  if (check_arg(op, "input", x)) return NULL;
  if (nnorm < 1 || nnorm > x->ndim)
    return err_null(ZORCH_ERR_ARG, "layer_norm: cannot normalise over the last %d dims of %s",
                    nnorm, SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_null(ZORCH_ERR_DTYPE, "layer_norm: needs a floating-point input, got %s",
                    zorch_dtype_name(x->dtype));
  const int64_t *ns = x->shape + x->ndim - nnorm;
  int64_t cols = shape_numel(nnorm, ns), rows = cols ? zorch_tensor_numel(x) / cols : 0;
  zorch_tensor *pw[2] = {w, b};
  for (int i = 0; i < 2; i++) {
    zorch_tensor *p = pw[i];
    if (!p) continue;
    if (check_same_device(op, x, p)) return NULL;
    if (shape_numel(p->ndim, p->shape) != cols || p->ndim != nnorm ||
        memcmp(p->shape, ns, sizeof(int64_t) * (size_t)nnorm) != 0)
      return err_null(ZORCH_ERR_SHAPE, "layer_norm: %s %s does not match the normalised shape %s",
                      i ? "bias" : "weight", SHAPE(p, s1), err_shape_str(nnorm, ns, s2, sizeof s2));
  }
  zorch_dtype cd = op_compute_dtype(x->dtype);
  zorch_tensor *cx0 = op_cast(x, cd), *cx = cx0 ? op_contig(cx0) : NULL;
  zorch_tensor *cw = cx && w ? op_cast(w, cd) : NULL, *cb = cx && b ? op_cast(b, cd) : NULL;
  zorch_tensor *cw2 = cw ? op_contig(cw) : NULL, *cb2 = cb ? op_contig(cb) : NULL;
  zorch_tensor *y = cx ? op_empty(x, x->ndim, x->shape, cd) : NULL;
  zorch_tensor *mean = y ? op_empty(x, 1, &rows, cd) : NULL;
  zorch_tensor *rstd = mean ? op_empty(x, 1, &rows, cd) : NULL;
  zorch_status st = rstd && (!w || cw2) && (!b || cb2)
                        ? backend_of(y)->layer_norm(y, mean, rstd, cx, cw2, cb2, rows, cols, eps)
                        : zorch_last_status();
  if (!st && cd != x->dtype) {
    zorch_tensor *r = op_cast(y, x->dtype);
    zorch_tensor_free(y);
    y = r;
    if (!y) st = zorch_last_status();
  }
  if (!st) {
    zorch_tensor *in[3] = {x, w, b};
    zorch_tensor *save[4] = {cx, cw2, mean, rstd};
    ag_node *node;
    y = ag_record(y, "LayerNormBackward", layer_norm_bwd, 3, in, 4, save, &node);
    if (node) {
      node->iv[0] = rows;
      node->iv[1] = cols;
    }
  } else {
    zorch_tensor_free(y);
    y = NULL;
    err_prefix(op);
  }
  op_free(cx0, cx, cw, cb);
  op_free(cw2, cb2, mean, rstd);
  return y;
}

/* ---- dropout -------------------------------------------------------------------------------- */
zorch_tensor *zorch_dropout(zorch_tensor *x, double p, bool training, zorch_generator *gen) {
  if (check_arg("dropout", "input", x)) return NULL;
  if (!(p >= 0 && p <= 1))
    return err_null(ZORCH_ERR_ARG, "dropout: probability has to be between 0 and 1, got %g", p);
  if (!training || p == 0) return zorch_tensor_retain(x);
  if (p == 1) return zorch_mul_scalar(x, 0);
  zorch_tensor *u = zorch_rand(x->ndim, x->shape, ZORCH_F32, x->st->device, gen);
  zorch_tensor *q = u ? zorch_full(0, NULL, 1 - p, ZORCH_F32, x->st->device) : NULL;
  zorch_tensor *keep = q ? zorch_lt(u, q) : NULL;
  zorch_tensor *mask = keep ? op_cast(keep, zorch_dtype_is_float(x->dtype) ? x->dtype : ZORCH_F32) : NULL;
  zorch_tensor *scaled = mask ? zorch_mul_scalar(mask, 1.0 / (1.0 - p)) : NULL;
  zorch_tensor *y = scaled ? zorch_mul(x, scaled) : NULL;
  op_free(u, q, keep, mask);
  zorch_tensor_free(scaled);
  if (!y) err_prefix("dropout");
  return y;
}
