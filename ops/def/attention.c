/* attention.c: fused scaled dot-product attention, softmax(scale q k^T) v with an
   optional causal mask, and its gradient. The kernels (ops/backend/backend.h) never hold
   the (Tq, Tk) scores: the forward saves the output and each row's log-sum-exp,
   and the backward recomputes the scores from them a block at a time. */
#include <math.h>
#include <string.h>

#include "ops.h"

typedef struct {
  int64_t bh, tq, tk, d; /* heads (B * H), queries, keys, head dim */
  bool causal;
  double scale;
} attention_args;

/* t in dtype dt as the kernels of be take it: itself when it already is in dt
   and be's kernels read strided rows (last dim contiguous), else a contiguous
   copy. */
static zorch_tensor *att_operand(const backend *be, zorch_tensor *t, zorch_dtype dt) {
  if (be->attention_strided && t->dtype == dt &&
      (t->strides[t->ndim - 1] == 1 || t->shape[t->ndim - 1] == 1))
    return zorch_tensor_retain(t);
  return op_cast_contig(t, dt);
}

/* A new (B, H, T, D) tensor shaped like t, laid out as (B, T, H, D) where the
   kernels take strided rows: the heads side by side in each row, so that
   transpose(1, 2) and a reshape to (B, T, H * D), the usual next steps, are
   views (PyTorch's CPU attention lays its output out the same way). Only
   when `bthd`: 16-bit inputs, computed on float32 copies, keep the contiguous
   layout, as the conversions around the kernel copy anyway. */
static zorch_tensor *att_empty(bool bthd, const zorch_tensor *t, zorch_dtype dt) {
  if (!bthd || t->ndim != 4) return op_empty(t, t->ndim, t->shape, dt);
  const int64_t *s = t->shape;
  zorch_tensor *m = op_empty(t, 4, (const int64_t[]){s[0], s[2], s[1], s[3]}, dt);
  zorch_tensor *r = m ? zorch_transpose(m, 1, 2) : NULL;
  zorch_tensor_free(m);
  return r;
}

/* saved: q, k, v, out (compute dtype; strided where the backend takes it) and
   lse (bh * tq) */
static zorch_status attention_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const attention_args *a = AG_ARGS(n, attention_args);
  zorch_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2];
  zorch_tensor *gc = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
  const backend *be = backend_of(q);
  bool bthd = be->attention_strided && n->in[0].dtype == q->dtype;
  zorch_status st;
  if (!(gc = att_operand(be, g, q->dtype)) || !(dq = att_empty(bthd, q, q->dtype)) ||
      !(dk = att_empty(bthd, k, k->dtype)) || !(dv = att_empty(bthd, v, v->dtype))) {
    st = zorch_last_status();
    goto done;
  }
  st = be->attention_bwd(dq, dk, dv, gc, q, k, v, n->saved[3], n->saved[4], a->bh, a->tq, a->tk,
                         a->d, a->causal, a->scale);
  if (st) goto done;
  gin[0] = dq, gin[1] = dk, gin[2] = dv;
  dq = dk = dv = NULL;
done:
  OP_FREE(gc, dq, dk, dv);
  return st;
}

/* q (B, H, Tq, D) or (BH, Tq, D); k and v (B, H, Tk, D) or (BH, Tk, D); one
   float dtype, one device. */
static zorch_status attention_check(const zorch_tensor *q, const zorch_tensor *k,
                                    const zorch_tensor *v) {
  const char *op = "attention";
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF], s3[ERR_SHAPE_BUF];
  if (check_arg(op, "q", q) || check_arg(op, "k", k) || check_arg(op, "v", v))
    return zorch_last_status();
  const zorch_tensor *kv[2] = {k, v};
  for (int i = 0; i < 2; i++) {
    zorch_device a = q->st->device, b = kv[i]->st->device;
    if (a.type != b.type || a.index != b.index) {
      char da[32], db[32];
      zorch_device_name(a, da, sizeof da);
      zorch_device_name(b, db, sizeof db);
      return err_set(ZORCH_ERR_DEVICE, "attention: q is on %s but %s is on %s (they must be on "
                     "one device)", da, i ? "v" : "k", db);
    }
  }
  if (!zorch_dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
    return err_set(ZORCH_ERR_DTYPE, "attention: q, k and v must have one floating-point dtype, "
                   "got %s, %s and %s", zorch_dtype_name(q->dtype), zorch_dtype_name(k->dtype),
                   zorch_dtype_name(v->dtype));
  bool fit = (q->ndim == 3 || q->ndim == 4) && k->ndim == q->ndim && v->ndim == q->ndim &&
             tensor_same_shape(k, v) && q->shape[q->ndim - 1] == k->shape[k->ndim - 1];
  for (int i = 0; fit && i < q->ndim - 2; i++) fit = q->shape[i] == k->shape[i];
  if (!fit)
    return err_set(ZORCH_ERR_SHAPE, "attention: q %s, k %s and v %s do not fit (expected q "
                   "(B, H, Tq, D) with k and v (B, H, Tk, D), or (BH, Tq, D) with (BH, Tk, D))",
                   SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3));
  return ZORCH_OK;
}

zorch_tensor *zorch_attention(zorch_tensor *q, zorch_tensor *k, zorch_tensor *v, bool causal,
                              double scale) {
  if (attention_check(q, k, v)) return NULL;
  if (!isfinite(scale))
    return err_null(ZORCH_ERR_ARG, "attention: scale must be a finite number, got %g", scale);
  const backend *be = backend_of(q);
  if (!be->attention || !be->attention_bwd)
    return err_null(ZORCH_ERR_DEVICE, "attention: no kernel on device %s", be->name);
  int nd = q->ndim;
  attention_args args = {.tq = q->shape[nd - 2], .tk = k->shape[nd - 2], .d = q->shape[nd - 1],
                         .causal = causal, .scale = scale};
  args.bh = shape_numel(nd - 2, q->shape);
  if (args.scale <= 0) args.scale = args.d > 0 ? 1 / sqrt((double)args.d) : 1;
  zorch_dtype cd = op_compute_dtype(q->dtype);
  int64_t nlse = args.bh * args.tq;
  zorch_tensor *in[3] = {q, k, v};
  zorch_tensor *cq = NULL, *ck = NULL, *cv = NULL, *o = NULL, *lse = NULL, *y = NULL;
  if (!(cq = att_operand(be, q, cd)) || !(ck = att_operand(be, k, cd)) ||
      !(cv = att_operand(be, v, cd)) || !(o = att_empty(be->attention_strided && cd == q->dtype, q, cd)) ||
      !(lse = op_empty(q, 1, &nlse, cd)))
    goto fail;
  if (be->attention(o, lse, cq, ck, cv, args.bh, args.tq, args.tk, args.d, causal, args.scale))
    goto fail;
  /* the output in q's dtype; the backward reads the compute dtype's */
  if (!(y = op_cast(o, q->dtype))) goto fail;
  y = ag_record(y, "AttentionBackward", attention_bwd, 3, in, 5,
                (zorch_tensor *[]){cq, ck, cv, o, lse}, &args, sizeof args);
  goto done;
fail:
  err_prefix("attention");
done:
  OP_FREE(cq, ck, cv, o, lse);
  return y;
}

/* ---- rotary position embedding (include/zorch_ops.h) ---------------------------------------- */
typedef struct {
  int64_t batch, heads, seq, dim;
  bool per_batch; /* tables (batch, seq, dim), else (seq, dim) */
} rope_args;

/* saved: x, cos, sin, contiguous in the compute dtype */
static zorch_status rope_bwd(ag_node *nd, zorch_tensor *g, zorch_tensor **gin) {
  const rope_args *a = AG_ARGS(nd, rope_args);
  zorch_tensor *x = nd->saved[0], *c = nd->saved[1], *s = nd->saved[2];
  zorch_tensor *gc = NULL, *gx = NULL, *gcos = NULL, *gsin = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, x->dtype)) || (ag_wants(nd, 0) && !(gx = op_empty(x, x->ndim, x->shape, x->dtype))) ||
      (ag_wants(nd, 1) && !(gcos = op_empty(x, c->ndim, c->shape, x->dtype))) ||
      (ag_wants(nd, 2) && !(gsin = op_empty(x, s->ndim, s->shape, x->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  st = backend_of(x)->rope_bwd(gx, gcos, gsin, gc, x, c, s, a->batch, a->heads, a->seq, a->dim, a->per_batch);
  if (st) goto done;
  gin[0] = gx, gin[1] = gcos, gin[2] = gsin;
  gx = gcos = gsin = NULL;
done:
  OP_FREE(gc, gx, gcos, gsin);
  return st;
}

static zorch_status rope_check(const zorch_tensor *x, const zorch_tensor *c, const zorch_tensor *s) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "rope";
  if (check_arg(op, "x", x) || check_arg(op, "cos", c) || check_arg(op, "sin", s) ||
      check_same_device(op, x, c) || check_same_device(op, x, s))
    return zorch_last_status();
  if (x->ndim != 4)
    return err_set(ZORCH_ERR_SHAPE, "rope: x must be (batch, heads, seq, head_dim), got %s", SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_set(ZORCH_ERR_DTYPE, "rope: x must be floating point, got %s", zorch_dtype_name(x->dtype));
  int64_t b = x->shape[0], n = x->shape[2], d = x->shape[3];
  if (d % 2)
    return err_set(ZORCH_ERR_SHAPE, "rope: head_dim %lld must be even (x %s)", (long long)d, SHAPE(x, s1));
  const zorch_tensor *tab[2] = {c, s};
  for (int i = 0; i < 2; i++) {
    const zorch_tensor *t = tab[i];
    const char *name = i ? "sin" : "cos";
    bool shared = t->ndim == 2 && t->shape[0] == n && t->shape[1] == d;
    bool own = t->ndim == 3 && t->shape[0] == b && t->shape[1] == n && t->shape[2] == d;
    if (!shared && !own)
      return err_set(ZORCH_ERR_SHAPE,
                     "rope: %s %s must be (seq, head_dim) or (batch, seq, head_dim) of x %s (batch, heads, seq, "
                     "head_dim)", name, SHAPE(t, s1), SHAPE(x, s2));
    if (t->dtype != x->dtype)
      return err_set(ZORCH_ERR_DTYPE, "rope: %s is %s, x %s: they must have one dtype", name,
                     zorch_dtype_name(t->dtype), zorch_dtype_name(x->dtype));
  }
  if (c->ndim != s->ndim)
    return err_set(ZORCH_ERR_SHAPE, "rope: cos %s and sin %s must have one shape", SHAPE(c, s1), SHAPE(s, s2));
  return ZORCH_OK;
}

zorch_tensor *zorch_rope(zorch_tensor *x, zorch_tensor *cosines, zorch_tensor *sines) {
  if (rope_check(x, cosines, sines)) return NULL;
  rope_args args = {.batch = x->shape[0], .heads = x->shape[1], .seq = x->shape[2], .dim = x->shape[3],
                    .per_batch = cosines->ndim == 3};
  zorch_dtype cd = op_compute_dtype(x->dtype); /* 16-bit tensors in float32 */
  zorch_tensor *in[3] = {x, cosines, sines};
  zorch_tensor *cx = NULL, *cc = NULL, *cs = NULL, *y = NULL;
  if (!(cx = op_cast_contig(x, cd)) || !(cc = op_cast_contig(cosines, cd)) || !(cs = op_cast_contig(sines, cd)) ||
      !(y = op_empty(x, x->ndim, x->shape, cd)))
    goto fail;
  if (backend_of(y)->rope(y, cx, cc, cs, args.batch, args.heads, args.seq, args.dim, args.per_batch) ||
      !(y = op_recast(y, x->dtype)))
    goto fail;
  y = ag_record(y, "RopeBackward", rope_bwd, 3, in, 3, (zorch_tensor *[]){cx, cc, cs}, &args, sizeof args);
  goto done;
fail:
  zorch_tensor_free(y);
  y = NULL;
  err_prefix("rope");
done:
  OP_FREE(cx, cc, cs);
  return y;
}
