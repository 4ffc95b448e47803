/* diagonal.c: diagonal (a view), diag and trace. */

#include "ops.h"

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
  if (v) tensor_set_view_of(v, t);
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
