/* attention.c: fused scaled dot-product attention, softmax(scale q k^T + mask) v
   with grouped key/value heads, causal, window, mask and segment rules, and its
   gradient. The kernels (ops/backend/backend.h) never hold
   the (Tq, Tk) scores: the forward saves the output and each row's log-sum-exp,
   and the backward recomputes the scores from them a block at a time. */
#include <math.h>
#include <string.h>

#include "ops.h"

/* the kernels' geometry; its tensors are NULL here, the saved ones in the backward */
typedef struct {
  att_geom g;
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

/* saved: q, k, v, out (compute dtype; strided where the backend takes it), lse
   (bh * tq), then the mask view and the key and query segments (or NULL) */
static zorch_status attention_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  att_geom geo = AG_ARGS(n, attention_args)->g;
  geo.mask = n->saved[5], geo.kseg = n->saved[6], geo.qseg = n->saved[7];
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
  st = be->attention_bwd(dq, dk, dv, gc, q, k, v, n->saved[3], n->saved[4], &geo);
  if (st) goto done;
  gin[0] = dq, gin[1] = dk, gin[2] = dv;
  dq = dk = dv = NULL;
done:
  OP_FREE(gc, dq, dk, dv);
  return st;
}

/* q (B, H, Tq, D) or (BH, Tq, D); k and v (B, Hkv, Tk, D) or (BHkv, Tk, D) with
   Hkv dividing H; one float dtype, one device. */
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
  int nd = q->ndim;
  bool fit = (nd == 3 || nd == 4) && k->ndim == nd && v->ndim == nd && tensor_same_shape(k, v) &&
             q->shape[nd - 1] == k->shape[nd - 1];
  if (fit && nd == 4) fit = q->shape[0] == k->shape[0];
  int64_t hq = fit ? q->shape[nd - 3] : 0, hk = fit ? k->shape[nd - 3] : 0;
  if (fit) fit = hq == hk || (hk > 0 && hq % hk == 0);
  if (!fit)
    return err_set(ZORCH_ERR_SHAPE, "attention: q %s, k %s and v %s do not fit (expected q "
                   "(B, H, Tq, D) with k and v (B, Hkv, Tk, D), or (BH, Tq, D) with (BHkv, Tk, D), "
                   "Hkv dividing H)", SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3));
  return ZORCH_OK;
}

/* The mask as the kernels read it: bool, or float in the compute dtype cd, as a
   view of (B, H, Tq, Tk) (shape4; a 3-d q's heads are (1, BH)). */
static zorch_tensor *att_mask_view(zorch_tensor *m, const zorch_tensor *q, const int64_t *shape4,
                                   zorch_dtype cd) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("attention", "mask", m) || check_same_device("attention", q, m)) return NULL;
  if (m->dtype != ZORCH_BOOL && !zorch_dtype_is_float(m->dtype))
    return err_null(ZORCH_ERR_DTYPE, "attention: mask must be bool (true: attend) or floating point "
                    "(added to the scores), got %s", zorch_dtype_name(m->dtype));
  int nd = q->ndim, lead = 4 - nd;
  bool fit = m->ndim <= nd;
  for (int i = 0; fit && i < m->ndim; i++) {
    int64_t want = shape4[4 - m->ndim + i];
    fit = m->shape[i] == want || m->shape[i] == 1;
  }
  if (!fit)
    return err_null(ZORCH_ERR_SHAPE, "attention: mask %s does not broadcast to %s = %s",
                    SHAPE(m, s1), nd == 4 ? "(B, H, Tq, Tk)" : "(BH, Tq, Tk)",
                    err_shape_str(nd, shape4 + lead, s2, sizeof s2));
  zorch_tensor *c = m->dtype == ZORCH_BOOL ? zorch_tensor_retain(m) : op_cast(m, cd);
  zorch_tensor *r = c ? op_broadcast_view(c, 4, shape4) : NULL;
  zorch_tensor_free(c);
  return r;
}

/* One segment-id tensor: int64 (B, n), its rows with a unit stride. */
static zorch_tensor *att_segments(zorch_tensor *s, const char *name, const zorch_tensor *q, int64_t b,
                                  int64_t n, const char *what) {
  char s1[ERR_SHAPE_BUF];
  if (check_arg("attention", name, s) || check_same_device("attention", q, s)) return NULL;
  if (s->dtype != ZORCH_I64)
    return err_null(ZORCH_ERR_DTYPE, "attention: %s must be int64, got %s", name, zorch_dtype_name(s->dtype));
  if (s->ndim != 2 || s->shape[0] != b || s->shape[1] != n)
    return err_null(ZORCH_ERR_SHAPE, "attention: %s %s must be %s = (%lld, %lld)", name, SHAPE(s, s1), what,
                    (long long)b, (long long)n);
  return s->strides[1] == 1 || n == 1 ? zorch_tensor_retain(s) : op_contig(s);
}

/* The segment ids of the keys and queries (both NULL without segments). */
static zorch_status att_segment_pair(const zorch_attention_opts *o, const zorch_tensor *q, int64_t tq,
                                     int64_t tk, zorch_tensor **ks, zorch_tensor **qs) {
  char s1[ERR_SHAPE_BUF];
  *ks = *qs = NULL;
  if (!o->segments) {
    if (o->q_segments) return err_set(ZORCH_ERR_ARG, "attention: q_segments needs segments");
    return ZORCH_OK;
  }
  if (q->ndim != 4)
    return err_set(ZORCH_ERR_SHAPE, "attention: segments need 4-d q (B, H, Tq, D), got q %s", SHAPE(q, s1));
  int64_t b = q->shape[0];
  if (!(*ks = att_segments(o->segments, "segments", q, b, tk, "(B, Tk)"))) return zorch_last_status();
  if (o->q_segments)
    *qs = att_segments(o->q_segments, "q_segments", q, b, tq, "(B, Tq)");
  else if (tq > tk)
    return err_set(ZORCH_ERR_SHAPE, "attention: segments %s give no ids to the %lld queries (Tq > Tk): pass "
                   "q_segments (B, Tq)", SHAPE(*ks, s1), (long long)tq);
  else
    *qs = zorch_narrow(*ks, 1, tk - tq, tq);
  return *qs ? ZORCH_OK : zorch_last_status();
}

zorch_tensor *zorch_attention(zorch_tensor *q, zorch_tensor *k, zorch_tensor *v,
                              const zorch_attention_opts *opts) {
  const zorch_attention_opts none = {0}, *o = opts ? opts : &none;
  if (attention_check(q, k, v)) return NULL;
  if (!isfinite(o->scale))
    return err_null(ZORCH_ERR_ARG, "attention: scale must be a finite number, got %g", o->scale);
  if (o->window < 0)
    return err_null(ZORCH_ERR_ARG, "attention: window must be at least 0 (0: none), got %lld",
                    (long long)o->window);
  const backend *be = backend_of(q);
  if (!be->attention || !be->attention_bwd)
    return err_null(ZORCH_ERR_DEVICE, "attention: no kernel on device %s", be->name);
  int nd = q->ndim;
  attention_args args = {.g = {.tq = q->shape[nd - 2], .tk = k->shape[nd - 2], .d = q->shape[nd - 1],
                               .heads = q->shape[nd - 3], .causal = o->causal, .scale = o->scale,
                               .window = o->window}};
  att_geom *g = &args.g;
  g->bh = shape_numel(nd - 2, q->shape);
  g->group = k->shape[nd - 3] > 0 ? q->shape[nd - 3] / k->shape[nd - 3] : 1;
  if (g->scale <= 0) g->scale = g->d > 0 ? 1 / sqrt((double)g->d) : 1;
  zorch_dtype cd = op_compute_dtype(q->dtype);
  int64_t nlse = g->bh * g->tq;
  int64_t shape4[4] = {nd == 4 ? q->shape[0] : 1, g->heads, g->tq, g->tk};
  zorch_tensor *in[3] = {q, k, v};
  zorch_tensor *cq = NULL, *ck = NULL, *cv = NULL, *o4 = NULL, *lse = NULL, *y = NULL;
  zorch_tensor *mask = NULL, *ks = NULL, *qs = NULL;
  if ((o->mask && !(mask = att_mask_view(o->mask, q, shape4, cd))) ||
      att_segment_pair(o, q, g->tq, g->tk, &ks, &qs))
    goto done; /* the messages name the option already */
  if (!(cq = att_operand(be, q, cd)) || !(ck = att_operand(be, k, cd)) ||
      !(cv = att_operand(be, v, cd)) || !(o4 = att_empty(be->attention_strided && cd == q->dtype, q, cd)) ||
      !(lse = op_empty(q, 1, &nlse, cd)))
    goto fail;
  g->mask = mask, g->kseg = ks, g->qseg = qs;
  if (be->attention(o4, lse, cq, ck, cv, g)) goto fail;
  g->mask = g->kseg = g->qseg = NULL; /* the backward reads the saved ones */
  /* the output in q's dtype; the backward reads the compute dtype's */
  if (!(y = op_cast(o4, q->dtype))) goto fail;
  y = ag_record(y, "AttentionBackward", attention_bwd, 3, in, 8,
                (zorch_tensor *[]){cq, ck, cv, o4, lse, mask, ks, qs}, &args, sizeof args);
  goto done;
fail:
  err_prefix("attention");
done:
  OP_FREE(cq, ck, cv, o4, lse, mask, ks, qs);
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
