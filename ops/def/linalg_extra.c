/* linalg_extra.c: mm, bmm, mv, dot, outer, addmm and baddbmm with PyTorch's
   strict shape rules (no broadcasting of the operands), on matmul; diagonal
   (a view), diag and trace. */
#include <string.h>

#include "ops.h"

/* a and b must have ranks ra and rb and one dtype; the contracted sizes
   (a's last, b's first matrix dim) must agree, and the batch too for bmm. */
static zorch_status check_mat(const char *op, const zorch_tensor *a, int ra, const zorch_tensor *b, int rb) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  static const char *const what[] = {"a scalar", "a vector", "a matrix", "a batch of matrices"};
  if (check_arg(op, "input", a) || check_arg(op, "other", b) || check_same_device(op, a, b)) return zorch_last_status();
  if (a->ndim != ra) return err_set(ZORCH_ERR_SHAPE, "%s: input must be %s (%d-D), got shape %s", op, what[ra], ra, SHAPE(a, s1));
  if (b->ndim != rb) return err_set(ZORCH_ERR_SHAPE, "%s: other must be %s (%d-D), got shape %s", op, what[rb], rb, SHAPE(b, s1));
  if (a->dtype != b->dtype)
    return err_set(ZORCH_ERR_DTYPE, "%s: input and other must have one dtype, got %s and %s", op,
                   zorch_dtype_name(a->dtype), zorch_dtype_name(b->dtype));
  int64_t k1 = a->shape[ra - 1], k2 = b->shape[rb == 3 ? 1 : 0];
  bool batch_ok = ra != 3 || a->shape[0] == b->shape[0];
  if (k1 != k2 || !batch_ok)
    return err_set(ZORCH_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%s)", op, SHAPE(a, s1), SHAPE(b, s2),
                   batch_ok ? "the inner sizes differ" : "the batch sizes differ");
  return ZORCH_OK;
}

/* matmul of integer operands, both at least 2-D with a's last size equal to
   b's next to last (batch dims broadcast): the sum over k of a (..., m, k, 1)
   times b (..., 1, k, n), k taken in blocks that keep a block's products near
   2^24 elements, accumulated in int64 and converted to the promoted dtype
   (wrapping around, as PyTorch's integer matmul does). */
zorch_tensor *op_int_matmul(zorch_tensor *a, zorch_tensor *b, zorch_dtype dt) {
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

static zorch_tensor *product(const char *op, zorch_tensor *a, int ra, zorch_tensor *b, int rb) {
  if (check_mat(op, a, ra, b, rb)) return NULL;
  if (a->dtype == ZORCH_BOOL) return err_null(ZORCH_ERR_DTYPE, "%s: bool matrices are not supported", op);
  zorch_tensor *out = zorch_matmul(a, b);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_mm(zorch_tensor *a, zorch_tensor *b) { return product("mm", a, 2, b, 2); }
zorch_tensor *zorch_bmm(zorch_tensor *a, zorch_tensor *b) { return product("bmm", a, 3, b, 3); }
zorch_tensor *zorch_mv(zorch_tensor *a, zorch_tensor *v) { return product("mv", a, 2, v, 1); }

zorch_tensor *zorch_dot(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("dot", "input", a) || check_arg("dot", "other", b)) return NULL;
  if (a->ndim != 1 || b->ndim != 1 || a->shape[0] != b->shape[0])
    return err_null(ZORCH_ERR_SHAPE, "dot: expects two vectors of one size, got shapes %s and %s", SHAPE(a, s1),
                    SHAPE(b, s2));
  if (check_mat("dot", a, 1, b, 1)) return NULL;
  if (a->dtype == ZORCH_BOOL) return err_null(ZORCH_ERR_DTYPE, "dot: bool vectors are not supported");
  zorch_tensor *out = zorch_matmul(a, b);
  if (!out) err_prefix("dot");
  return out;
}

zorch_tensor *zorch_outer(zorch_tensor *a, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("outer", "input", a) || check_arg("outer", "vec2", b)) return NULL;
  if (a->ndim != 1 || b->ndim != 1)
    return err_null(ZORCH_ERR_SHAPE, "outer: expects two vectors, got shapes %s and %s", SHAPE(a, s1), SHAPE(b, s2));
  zorch_tensor *u = NULL, *v = NULL, *out = NULL;
  if ((u = zorch_unsqueeze(a, 1)) && (v = zorch_unsqueeze(b, 0))) out = zorch_mul(u, v);
  OP_FREE(u, v);
  if (!out) err_prefix("outer");
  return out;
}

/* c's gradient when beta is 0: zeros, as PyTorch gives. */
static zorch_status zero_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = op_zeros(g, n->in[0].ndim, n->in[0].shape, g->dtype);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

/* beta * c + alpha * (a @ b), c broadcast to the product's shape; c is not
   read when beta is 0 (its NaNs do not spread, as PyTorch), and gets a zero
   gradient through a node of its own. */
static zorch_tensor *add_product(const char *op, zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta,
                                 double alpha, int rank) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg(op, "input", c) || check_mat(op, a, rank, b, rank)) return NULL;
  int64_t sh[3];
  for (int i = 0; i < rank; i++) sh[i] = i == rank - 1 ? b->shape[rank - 1] : a->shape[i];
  int nd;
  int64_t bs[ZORCH_MAX_DIMS];
  if (c->ndim > rank || shape_broadcast(op, c->ndim, c->shape, rank, sh, &nd, bs) ||
      memcmp(bs, sh, sizeof(int64_t) * (size_t)rank) != 0) {
    zorch_clear_error();
    return err_null(ZORCH_ERR_SHAPE, "%s: input %s does not broadcast to the product's shape %s", op, SHAPE(c, s1),
                    err_shape_str(rank, sh, s2, sizeof s2));
  }
  zorch_tensor *p = NULL, *ps = NULL, *cs = NULL, *out = NULL;
  if ((p = zorch_matmul(a, b)) && (ps = alpha == 1 ? zorch_tensor_retain(p) : zorch_mul_scalar(p, alpha))) {
    if (beta == 0 && !(zorch_is_grad_enabled() && zorch_requires_grad(c))) out = zorch_tensor_retain(ps);
    else if (beta == 0) {
      bool prev = zorch_set_grad_enabled(false);
      zorch_tensor *z = op_zeros(c, c->ndim, c->shape, ps->dtype);
      zorch_set_grad_enabled(prev);
      if ((cs = ag_record(z, "AddmmBackward", zero_bwd, 1, &c, 0, NULL, NULL, 0))) out = zorch_add(ps, cs);
    }
    else if ((cs = beta == 1 ? zorch_tensor_retain(c) : zorch_mul_scalar(c, beta))) out = zorch_add(cs, ps);
  }
  OP_FREE(p, ps, cs);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_addmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha) {
  return add_product("addmm", c, a, b, beta, alpha, 2);
}

zorch_tensor *zorch_baddbmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha) {
  return add_product("baddbmm", c, a, b, beta, alpha, 3);
}

/* ---- diagonal, diag, trace -------------------------------------------------------------- */
typedef struct {
  int64_t offset;
  int d1, d2; /* wrapped */
} diag_args;

/* The view of t's diagonal `offset` over dims d1, d2 (wrapped, distinct):
   those dims dropped, the diagonal last. No autograd. */
static zorch_tensor *diag_view(zorch_tensor *t, int64_t offset, int d1, int d2) {
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS], off = t->offset;
  int k = 0;
  for (int i = 0; i < t->ndim; i++)
    if (i != d1 && i != d2) sh[k] = t->shape[i], st[k++] = t->strides[i];
  int64_t n1 = t->shape[d1], n2 = t->shape[d2], len;
  if (offset >= 0) {
    len = n2 - offset < n1 ? n2 - offset : n1;
    if (len > 0) off += offset * t->strides[d2];
  } else {
    len = n1 + offset < n2 ? n1 + offset : n2;
    if (len > 0) off -= offset * t->strides[d1];
  }
  sh[k] = len > 0 ? len : 0;
  st[k++] = t->strides[d1] + t->strides[d2];
  return tensor_alias(t, k, sh, st, off);
}

/* The gradient lands on the diagonal of zeros of the input's shape. */
static zorch_status diagonal_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const diag_args *a = AG_ARGS(n, diag_args);
  ag_edge *e = &n->in[0];
  zorch_tensor *z = NULL, *v = NULL;
  zorch_status st = ZORCH_OK;
  if (!(z = op_zeros(g, e->ndim, e->shape, g->dtype)) || !(v = diag_view(z, a->offset, a->d1, a->d2)) ||
      (st = op_copy_(v, g))) {
    if (!st) st = zorch_last_status();
    zorch_tensor_free(z);
    z = NULL;
  }
  zorch_tensor_free(v);
  gin[0] = z;
  return st;
}

zorch_tensor *zorch_diagonal(zorch_tensor *t, int64_t offset, int dim1, int dim2) {
  char s[ERR_SHAPE_BUF];
  if (check_arg("diagonal", "input", t)) return NULL;
  if (t->ndim < 2) return err_null(ZORCH_ERR_SHAPE, "diagonal: needs at least 2 dims, got shape %s", SHAPE(t, s));
  diag_args args = {.offset = offset};
  if (dim_wrap("diagonal", dim1, t->ndim, 0, &args.d1) || dim_wrap("diagonal", dim2, t->ndim, 0, &args.d2)) return NULL;
  if (args.d1 == args.d2)
    return err_null(ZORCH_ERR_ARG, "diagonal: dim1 and dim2 are the same dim (" ERR_IX("%d") ")", dim1);
  zorch_tensor *v = diag_view(t, offset, args.d1, args.d2);
  return ag_record(v, "DiagonalBackward", diagonal_bwd, 1, &t, 0, NULL, &args, sizeof args);
}

typedef struct {
  int64_t offset;
} diag_embed_args;

/* A vector put on diagonal `offset` of a square matrix: its gradient is that
   diagonal of g. */
static zorch_status diag_embed_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = zorch_diagonal(g, AG_ARGS(n, diag_embed_args)->offset, 0, 1);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

zorch_tensor *zorch_diag(zorch_tensor *t, int64_t offset) {
  char s[ERR_SHAPE_BUF];
  if (check_arg("diag", "input", t)) return NULL;
  if (t->ndim == 2) { /* a copy of the diagonal */
    zorch_tensor *v = zorch_diagonal(t, offset, 0, 1), *out = v ? zorch_clone(v) : NULL;
    zorch_tensor_free(v);
    return out;
  }
  if (t->ndim != 1) return err_null(ZORCH_ERR_SHAPE, "diag: expects a vector or a matrix, got shape %s", SHAPE(t, s));
  int64_t n;
  if (offset == INT64_MIN || __builtin_add_overflow(t->shape[0], offset < 0 ? -offset : offset, &n))
    return err_null(ZORCH_ERR_SHAPE, "diag: diagonal %lld of input %s needs a matrix past 64 bits", (long long)offset,
                    SHAPE(t, s));
  zorch_tensor *z = op_zeros(t, 2, (int64_t[]){n, n}, t->dtype), *v = NULL;
  if (!z || !(v = diag_view(z, offset, 0, 1)) || op_copy_(v, t)) {
    OP_FREE(z, v);
    err_prefix("diag");
    return NULL;
  }
  zorch_tensor_free(v);
  diag_embed_args args = {.offset = offset};
  return ag_record(z, "DiagEmbedBackward", diag_embed_bwd, 1, &t, 0, NULL, &args, sizeof args);
}

zorch_tensor *zorch_trace(zorch_tensor *t) {
  char s[ERR_SHAPE_BUF];
  if (check_arg("trace", "input", t)) return NULL;
  if (t->ndim != 2) return err_null(ZORCH_ERR_SHAPE, "trace: expects a matrix, got shape %s", SHAPE(t, s));
  zorch_tensor *v = zorch_diagonal(t, 0, 0, 1), *out = v ? zorch_sum(v, 0, NULL, false) : NULL;
  zorch_tensor_free(v);
  return out;
}
