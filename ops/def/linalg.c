/* linalg.c: matmul (batched, broadcast over batch dims) and the fused linear
   layer, on the backend's GEMM. Transposed views go to GEMM as transposes, not
   copies. */
#include <string.h>

#include "ops.h"

/* How a (rows, cols) matrix with strides (rs, cs) is passed to a row-major GEMM:
   as is (ld = row stride) or transposed (ld = column stride). */
static bool mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                       int64_t *ld) {
  int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= mc)) {
    *trans = false;
    *ld = rows == 1 ? mc : rs;
    return true;
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= mr)) {
    *trans = true;
    *ld = cols == 1 ? mr : cs;
    return true;
  }
  return false;
}

/* The dtype matmul and linear compute dt in: 16-bit stays 16-bit where the
   backend's GEMM takes it. */
static zorch_dtype gemm_dtype(const zorch_tensor *like, zorch_dtype dt) {
  if ((dt == ZORCH_BF16 || dt == ZORCH_F16) && backend_of(like)->gemm16) return dt;
  return op_compute_dtype_on(like, dt);
}

/* Ensures the last two dims of t suit GEMM; returns t retained or a copy. */
static zorch_tensor *gemm_ready(zorch_tensor *t) {
  bool tr;
  int64_t ld;
  int n = t->ndim;
  if (mat_layout(t->shape[n - 2], t->shape[n - 1], t->strides[n - 2], t->strides[n - 1], &tr, &ld))
    return zorch_tensor_retain(t);
  return op_contig(t);
}

/* out (batch..., m, n) = a (batch..., m, k) @ b (batch..., k, n); a and b
   already broadcast to out's batch dims, same dtype. */
static zorch_status bmm_into(zorch_tensor *out, zorch_tensor *a, zorch_tensor *b) {
  int nd = out->ndim;
  int64_t m = a->shape[nd - 2], k = a->shape[nd - 1], n = b->shape[nd - 1];
  int64_t batch = 1;
  for (int i = 0; i < nd - 2; i++) batch *= out->shape[i];
  const backend *be = backend_of(out);
  size_t es = dtype_sizes[out->dtype];
  bool ta, tb;
  int64_t lda, ldb;
  mat_layout(m, k, a->strides[nd - 2], a->strides[nd - 1], &ta, &lda);
  mat_layout(k, n, b->strides[nd - 2], b->strides[nd - 1], &tb, &ldb);
  if (k == 0) return be->fill(out, 0);
  /* b shared by every batch and a contiguous: one GEMM with batch * m rows */
  bool b_shared = true;
  for (int i = 0; i < nd - 2; i++) b_shared = b_shared && (b->strides[i] == 0 || b->shape[i] == 1);
  gemm_args ga = {.dt = out->dtype, .dev = out->st->device.index, .ta = ta, .tb = tb, .m = m,
                  .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = n, .alpha = 1.0};
  if (b_shared && zorch_tensor_is_contiguous(a) && batch > 1) {
    ga.ta = false, ga.m = batch * m, ga.lda = k;
    ga.a = tensor_ptr(a), ga.b = tensor_ptr(b), ga.c = tensor_ptr(out);
    return be->gemm(&ga);
  }
  int64_t idx[ZORCH_MAX_DIMS] = {0};
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t oa = 0, ob = 0;
    for (int i = 0; i < nd - 2; i++) {
      oa += idx[i] * a->strides[i];
      ob += idx[i] * b->strides[i];
    }
    ga.a = tensor_ptr(a) + oa * (int64_t)es;
    ga.b = tensor_ptr(b) + ob * (int64_t)es;
    ga.c = tensor_ptr(out) + bi * m * n * (int64_t)es;
    zorch_status st = be->gemm(&ga);
    if (st) return st;
    for (int i = nd - 3; i >= 0; i--) {
      if (++idx[i] < out->shape[i]) break;
      idx[i] = 0;
    }
  }
  return ZORCH_OK;
}

static zorch_status mm_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *a = n->saved[0], *b = n->saved[1], *at = NULL, *bt = NULL;
  zorch_status st = ZORCH_OK;
  if ((ag_wants(n, 0) && (!(bt = zorch_transpose(b, -1, -2)) || !(gin[0] = zorch_matmul(g, bt)))) ||
      (ag_wants(n, 1) && (!(at = zorch_transpose(a, -1, -2)) || !(gin[1] = zorch_matmul(at, g)))))
    st = zorch_last_status();
  OP_FREE(at, bt);
  return st;
}

/* Both operands at least 2-D. */
/* matmul of integer operands, both at least 2-D with a's last size equal to
   b's next to last (batch dims broadcast): the sum over k of a (..., m, k, 1)
   times b (..., 1, k, n), k taken in blocks that keep a block's products near
   2^24 elements, accumulated in int64 and converted to the promoted dtype
   (wrapping around, as PyTorch's integer matmul does). */
static zorch_tensor *int_matmul(zorch_tensor *a, zorch_tensor *b, zorch_dtype dt) {
  if (a->dtype == ZORCH_BOOL || b->dtype == ZORCH_BOOL)
    return err_null(ZORCH_ERR_DTYPE, "matmul: bool matrices are not supported");
  int na = a->ndim, nb = b->ndim;
  int64_t m = a->shape[na - 2], k = a->shape[na - 1], n = b->shape[nb - 1];
  int64_t batch = 1; /* at most the product of both batches: enough to size the blocks */
  for (int i = 0; i < na - 2; i++) batch *= a->shape[i] ? a->shape[i] : 1;
  for (int i = 0; i < nb - 2; i++) batch *= b->shape[i] ? b->shape[i] : 1;
  double per_k = (double)batch * (double)(m ? m : 1) * (double)(n ? n : 1);
  int64_t kb = per_k >= (1 << 24) ? 1 : (int64_t)((1 << 24) / per_k);
  zorch_tensor *acc = NULL;
  bool prev = zorch_set_grad_enabled(false); /* integers carry no gradient */
  for (int64_t k0 = 0; k0 < k || (k == 0 && !acc); k0 += kb) {
    int64_t len = k - k0 < kb ? k - k0 : kb;
    zorch_tensor *ak = NULL, *bk = NULL, *u = NULL, *w = NULL, *p = NULL, *s = NULL, *sum = NULL;
    int kd = (na > nb ? na : nb); /* k's dim in the broadcast product (..., m, k, n) */
    kd -= 1;
    if ((ak = zorch_narrow(a, na - 1, k0, len)) && (bk = zorch_narrow(b, nb - 2, k0, len)) &&
        (u = zorch_unsqueeze(ak, na)) && (w = zorch_unsqueeze(bk, nb - 2)) && (p = zorch_mul(u, w)) &&
        (s = zorch_sum(p, 1, &kd, false)))
      sum = acc ? zorch_add(acc, s) : zorch_tensor_retain(s);
    OP_FREE(ak, bk, u, w, p, s, acc);
    acc = sum;
    if (!acc || k == 0) break;
  }
  zorch_set_grad_enabled(prev);
  return acc ? op_recast(acc, dt) : NULL;
}

static zorch_tensor *matmul_nd(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  int na = a->ndim, nb = b->ndim;
  int64_t m = a->shape[na - 2], k = a->shape[na - 1], n = b->shape[nb - 1];
  if (b->shape[nb - 2] != k)
    return err_null(ZORCH_ERR_SHAPE, "matmul: shapes %s and %s cannot be multiplied", SHAPE(a, s1),
                    SHAPE(b, s2));
  int nbatch;
  int64_t shape[ZORCH_MAX_DIMS];
  if (shape_broadcast("matmul", na - 2, a->shape, nb - 2, b->shape, &nbatch, shape)) {
    return err_null(ZORCH_ERR_SHAPE, "matmul: batch dims of %s and %s cannot be broadcast",
                    SHAPE(a, s1), SHAPE(b, s2));
  }
  int nd = nbatch + 2;
  zorch_dtype dt = dtype_promote(a->dtype, b->dtype);
  if (!zorch_dtype_is_float(dt)) {
    zorch_tensor *r = int_matmul(a, b, dt);
    if (!r) err_prefix("matmul");
    return r;
  }
  zorch_dtype cd = gemm_dtype(a, dt);
  int64_t sa[ZORCH_MAX_DIMS], sb[ZORCH_MAX_DIMS];
  memcpy(sa, shape, sizeof(int64_t) * (size_t)nbatch);
  memcpy(sb, shape, sizeof(int64_t) * (size_t)nbatch);
  sa[nd - 2] = m, sa[nd - 1] = k, sb[nd - 2] = k, sb[nd - 1] = n;
  shape[nd - 2] = m, shape[nd - 1] = n;
  zorch_tensor *ca = NULL, *cb = NULL, *ra = NULL, *rb = NULL, *va = NULL, *vb = NULL, *out = NULL;
  if (!(ca = op_cast(a, cd)) || !(cb = op_cast(b, cd)) || !(ra = gemm_ready(ca)) ||
      !(rb = gemm_ready(cb)) || !(va = op_broadcast_view(ra, nd, sa)) ||
      !(vb = op_broadcast_view(rb, nd, sb)) || !(out = op_empty(a, nd, shape, cd)))
    goto done;
  if (bmm_into(out, va, vb)) {
    zorch_tensor_free(out);
    out = NULL;
    goto done;
  }
  out = op_recast(out, dt);
done:
  OP_FREE(ca, cb, ra, rb, va, vb);
  if (!out) {
    err_prefix("matmul");
    return NULL;
  }
  zorch_tensor *in[2] = {a, b};
  return ag_record(out, "MmBackward", mm_bwd, 2, in, 2, in, NULL, 0);
}

zorch_tensor *zorch_matmul(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("matmul", "a", a) || check_arg("matmul", "b", b) ||
      check_same_device("matmul", a, b))
    return NULL;
  if (a->ndim == 0 || b->ndim == 0)
    return err_null(ZORCH_ERR_SHAPE, "matmul: both arguments need at least 1 dim, got %s and %s",
                    SHAPE(a, s1), SHAPE(b, s2));
  if (a->ndim >= 2 && b->ndim >= 2) return matmul_nd(a, b);
  /* 1-D operands become matrices, and the added dim is dropped after */
  zorch_tensor *a2 = a->ndim == 1 ? zorch_unsqueeze(a, 0) : zorch_tensor_retain(a);
  zorch_tensor *b2 = b->ndim == 1 ? zorch_unsqueeze(b, 1) : zorch_tensor_retain(b);
  zorch_tensor *m = NULL, *r = NULL;
  if (a2 && b2 && (m = matmul_nd(a2, b2)))
    r = a->ndim == 1 && b->ndim == 1 ? zorch_reshape(m, 0, NULL)
                                     : zorch_squeeze(m, a->ndim == 1 ? -2 : -1);
  OP_FREE(a2, b2, m);
  if (!r) {
    /* say it in terms of the caller's shapes */
    if (zorch_last_status() == ZORCH_ERR_SHAPE)
      err_set(ZORCH_ERR_SHAPE, "matmul: shapes %s and %s cannot be multiplied", SHAPE(a, s1),
              SHAPE(b, s2));
  }
  return r;
}

/* ---- linear ------------------------------------------------------------------------- */
typedef struct {
  zorch_activation act;
} linear_args;

/* The activation's backward op, reading what saved[2] holds. */
static bop act_bwd(zorch_activation act) {
  return act == ZORCH_ACT_RELU ? BOP_RELU_BWD : act == ZORCH_ACT_GELU ? BOP_GELU_BWD : BOP_GELU_TANH_BWD;
}

/* saved: x, w and, with relu, the output (whose sign is the input's), with
   gelu the GEMM's output before it */
static zorch_status linear_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  zorch_tensor *x = n->saved[0], *w = n->saved[1];
  zorch_activation act = AG_ARGS(n, linear_args)->act;
  int64_t s2[2] = {-1, w->shape[0]}, x2s[2] = {-1, w->shape[1]};
  int d0 = 0;
  zorch_tensor *gr = NULL, *g2 = NULL, *gx = NULL, *x2 = NULL, *gt = NULL;
  zorch_status st = ZORCH_OK;
  /* through the activation first, then as (rows, out) */
  if (act != ZORCH_ACT_NONE && !(g = gr = op_binary(act_bwd(act), g, n->saved[2], 0, 0))) goto fail;
  /* a gradient that is a broadcast or strided view (a sum's backward gives
     one) made contiguous once here, not by each of the three products below */
  if (!gr && !zorch_tensor_is_contiguous(g) && !(g = gr = op_contig(g))) goto fail;
  if (!(g2 = zorch_reshape(g, 2, s2))) goto fail;
  if (ag_wants(n, 0) &&
      (!(gx = zorch_matmul(g2, w)) || !(gin[0] = zorch_reshape(gx, x->ndim, x->shape))))
    goto fail;
  if (ag_wants(n, 1) && (!(x2 = zorch_reshape(x, 2, x2s)) || !(gt = zorch_transpose(g2, 0, 1)) ||
                         !(gin[1] = zorch_matmul(gt, x2))))
    goto fail;
  if (n->nin > 2 && ag_wants(n, 2) && !(gin[2] = zorch_sum(g2, 1, &d0, false))) goto fail;
  goto done;
fail:
  st = zorch_last_status();
done:
  OP_FREE(gr, g2, gx, x2, gt);
  return st;
}

/* Checks the operands of linear and gives the result's dtype. */
static zorch_status linear_check(const zorch_tensor *x, const zorch_tensor *w,
                                 const zorch_tensor *b, zorch_activation act, zorch_dtype *dt) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF], s3[ERR_SHAPE_BUF];
  if (check_arg("linear", "input", x) || check_arg("linear", "weight", w) ||
      check_same_device("linear", x, w) || (b && check_same_device("linear", x, b)))
    return zorch_last_status();
  if (act != ZORCH_ACT_NONE && act != ZORCH_ACT_RELU && act != ZORCH_ACT_GELU &&
      act != ZORCH_ACT_GELU_TANH)
    return err_set(ZORCH_ERR_ARG, "linear: unknown activation %d (none, relu, gelu or gelu_tanh)",
                   (int)act);
  if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    return err_set(ZORCH_ERR_SHAPE, "linear: input %s and weight %s do not fit (weight is "
                   "(out_features, in_features) and the input's last dim is in_features)",
                   SHAPE(x, s1), SHAPE(w, s2));
  int64_t out_f = w->shape[0];
  if (b && (b->ndim != 1 || b->shape[0] != out_f))
    return err_set(ZORCH_ERR_SHAPE, "linear: bias %s does not fit weight %s (expected (%lld,))",
                   SHAPE(b, s3), SHAPE(w, s2), (long long)out_f);
  *dt = dtype_promote(x->dtype, w->dtype);
  if (b) *dt = dtype_promote(*dt, b->dtype);
  if (!zorch_dtype_is_float(*dt))
    return err_set(ZORCH_ERR_DTYPE, "linear: needs floating-point tensors, got %s",
                   zorch_dtype_name(*dt));
  return ZORCH_OK;
}

/* out (rows, out_f) of an empty sum (in_f == 0): the bias alone (or zeros),
   then relu when asked. */
static zorch_status linear_bias_only(zorch_tensor *out, zorch_tensor *bias, int64_t rows,
                                     int64_t out_f, bool relu) {
  const backend *be = backend_of(out);
  zorch_status st = be->fill(out, 0);
  if (!st && bias) {
    int64_t os2[2] = {rows, out_f};
    zorch_tensor *o2 = NULL, *bv = NULL;
    if (!(o2 = tensor_alias(out, 2, os2, (int64_t[]){out_f, 1}, 0)) ||
        !(bv = op_broadcast_view(bias, 2, os2)))
      st = zorch_last_status();
    else
      st = be->copy(o2, bv);
    OP_FREE(o2, bv);
  }
  if (!st && relu) st = be->unary(UOP_RELU, out, out, 0, 0);
  return st;
}

/* out (rows, out_f) = x (rows, in_f) w^T + bias, then relu when asked: one GEMM
   whose epilogue adds the bias (and applies relu) on backends that fuse them.
   x and bias are contiguous, w GEMM-ready, all in out's dtype. */
static zorch_status linear_gemm(zorch_tensor *out, zorch_tensor *x, zorch_tensor *w,
                                zorch_tensor *bias, int64_t rows, bool relu) {
  int64_t in_f = w->shape[1], out_f = w->shape[0];
  if (in_f == 0) return linear_bias_only(out, bias, rows, out_f, relu);
  gemm_args ga = {.dt = out->dtype, .dev = out->st->device.index, .tb = false, .relu = relu,
                  .m = rows, .n = out_f, .k = in_f, .lda = in_f, .ldc = out_f, .alpha = 1.0,
                  .a = tensor_ptr(x), .b = tensor_ptr(w), .bias = bias ? tensor_ptr(bias) : NULL,
                  .c = tensor_ptr(out)};
  /* weight (out, in) used as its transpose (in, out) */
  mat_layout(in_f, out_f, w->strides[1], w->strides[0], &ga.tb, &ga.ldb);
  return backend_of(out)->gemm(&ga);
}

/* y = x w^T + b, then relu or gelu when asked, computed in the backend's dtype
   for the result's and recorded as one node. relu runs in the GEMM's epilogue;
   gelu (erf or tanh form) right after it on the GEMM's output, which the node
   keeps for the backward in place of a separate GELU node's input. */
zorch_tensor *zorch_linear_act(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b, zorch_activation act) {
  zorch_dtype dt = ZORCH_F32;
  if (linear_check(x, w, b, act, &dt)) return NULL;
  zorch_dtype cd = gemm_dtype(x, dt);
  int64_t in_f = w->shape[1], out_f = w->shape[0];
  int64_t rows = in_f ? zorch_tensor_numel(x) / in_f : 0;
  for (int i = 0; i < x->ndim - 1 && !in_f; i++) rows = (i ? rows : 1) * x->shape[i];
  int64_t oshape[ZORCH_MAX_DIMS];
  memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  oshape[x->ndim - 1] = out_f;
  bool gelu = act == ZORCH_ACT_GELU || act == ZORCH_ACT_GELU_TANH;
  zorch_tensor *xc = NULL, *cw = NULL, *wr = NULL, *bc = NULL, *out = NULL, *pre = NULL;
  zorch_status st;
  if (!(xc = op_cast_contig(x, cd)) || !(cw = op_cast(w, cd)) || !(wr = gemm_ready(cw)) ||
      (b && !(bc = op_cast_contig(b, cd))) || !(out = op_empty(x, x->ndim, oshape, cd)))
    st = zorch_last_status();
  else
    st = linear_gemm(out, xc, wr, bc, rows, act == ZORCH_ACT_RELU);
  if (!st && gelu) {
    pre = out;
    if (!(out = op_empty(x, x->ndim, oshape, cd)))
      st = zorch_last_status();
    else
      st = backend_of(out)->unary(act == ZORCH_ACT_GELU ? UOP_GELU : UOP_GELU_TANH, out, pre, 0, 0);
  }
  OP_FREE(xc, cw, wr, bc);
  if (st || !(out = op_recast(out, dt)) || (pre && !(pre = op_recast(pre, dt)))) {
    OP_FREE(out, pre);
    err_prefix("linear");
    return NULL;
  }
  static const char *const names[] = {"LinearBackward", "LinearReluBackward", "LinearGeluBackward",
                                      "LinearGeluBackward"};
  linear_args args = {act};
  zorch_tensor *in[3] = {x, w, b}, *save[3] = {x, w, gelu ? pre : out};
  out = ag_record(out, names[act], linear_bwd, b ? 3 : 2, in, act == ZORCH_ACT_NONE ? 2 : 3, save,
                  &args, sizeof args);
  zorch_tensor_free(pre);
  return out;
}

zorch_tensor *zorch_linear(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b) {
  return zorch_linear_act(x, w, b, ZORCH_ACT_NONE);
}
