/* shape.c: cat and stack. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
  int dim; /* the dim the inputs are joined along (wrapped) */
} cat_args;

/* Each input gets its slice of g along the joined dim. */
static zorch_status cat_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  int d = AG_ARGS(n, cat_args)->dim;
  int64_t start = 0;
  for (int i = 0; i < n->nin; i++) {
    int64_t len = n->in[i].shape[d];
    if (ag_wants(n, i) && !(gin[i] = zorch_narrow(g, d, start, len))) return zorch_last_status();
    start += len;
  }
  return ZORCH_OK;
}

zorch_tensor *zorch_cat(int n, zorch_tensor *const *ts, int dim) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (n < 1 || !ts) return err_null(ZORCH_ERR_ARG, "cat: expected a non-empty list of tensors");
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return err_null(ZORCH_ERR_ARG, "cat: tensor %d is NULL", i);
    if (check_same_device("cat", ts[0], ts[i])) return NULL;
  }
  zorch_tensor *t0 = ts[0];
  if (t0->ndim == 0) return err_null(ZORCH_ERR_SHAPE, "cat: zero-dimensional tensors cannot be concatenated");
  int d;
  if (dim_wrap("cat", dim, t0->ndim, 0, &d)) return NULL;
  int64_t shape[ZORCH_MAX_DIMS];
  memcpy(shape, t0->shape, sizeof shape);
  shape[d] = 0;
  zorch_dtype dt = t0->dtype;
  for (int i = 0; i < n; i++) {
    zorch_tensor *t = ts[i];
    bool ok = t->ndim == t0->ndim;
    for (int k = 0; ok && k < t->ndim; k++) ok = k == d || t->shape[k] == t0->shape[k];
    if (!ok)
      return err_null(ZORCH_ERR_SHAPE, "cat: tensor " ERR_IX("%d") " has shape %s, which does not fit %s "
                      "outside dim " ERR_IX("%d"), i, SHAPE(t, s1), SHAPE(t0, s2), dim);
    shape[d] += t->shape[d];
    dt = dtype_promote(dt, t->dtype);
  }
  zorch_tensor *out = op_empty(t0, t0->ndim, shape, dt);
  if (!out) return NULL;
  int64_t start = 0;
  bool prev = zorch_set_grad_enabled(false);
  zorch_status st = ZORCH_OK;
  for (int i = 0; i < n && !st; i++) {
    zorch_tensor *part = zorch_narrow(out, d, start, ts[i]->shape[d]);
    st = part ? backend_of(out)->copy(part, ts[i]) : zorch_last_status();
    zorch_tensor_free(part);
    start += ts[i]->shape[d];
  }
  zorch_set_grad_enabled(prev);
  if (st) {
    zorch_tensor_free(out);
    return NULL;
  }
  cat_args args = {.dim = d};
  return ag_record(out, "CatBackward", cat_bwd, n, ts, 0, NULL, &args, sizeof args);
}

zorch_tensor *zorch_stack(int n, zorch_tensor *const *ts, int dim) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (n < 1 || !ts) return err_null(ZORCH_ERR_ARG, "stack: expected a non-empty list of tensors");
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return err_null(ZORCH_ERR_ARG, "stack: tensor %d is NULL", i);
    if (!tensor_same_shape(ts[i], ts[0]))
      return err_null(ZORCH_ERR_SHAPE, "stack: tensor " ERR_IX("%d") " has shape %s but tensor "
                      ERR_IX("0") " has %s", i,
                      SHAPE(ts[i], s1), SHAPE(ts[0], s2));
  }
  int d;
  if (dim_wrap("stack", dim, ts[0]->ndim, 1, &d)) return NULL;
  zorch_tensor **u = calloc((size_t)n, sizeof *u);
  if (!u) return err_null(ZORCH_ERR_OOM, "stack: out of memory");
  zorch_tensor *out = NULL;
  int i = 0;
  for (; i < n; i++)
    if (!(u[i] = zorch_unsqueeze(ts[i], d))) break;
  if (i == n) out = zorch_cat(n, u, d);
  for (int k = 0; k < i; k++) zorch_tensor_free(u[k]);
  free(u);
  return out;
}

/* ---- tril and triu: x where the last two dims' column - row is <= k (>= k for triu), else 0 */
static zorch_tensor *tri(const char *op, zorch_tensor *x, int64_t k, bool upper) {
  char a[ERR_SHAPE_BUF];
  if (check_arg(op, "input", x)) return NULL;
  if (x->ndim < 2) return err_null(ZORCH_ERR_SHAPE, "%s: needs at least 2 dims, got shape %s", op, SHAPE(x, a));
  int64_t r = x->shape[x->ndim - 2], c = x->shape[x->ndim - 1];
  zorch_device dev = x->st->device;
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *rows = zorch_arange_i64(0, r, 1, ZORCH_I64, dev), *cols = zorch_arange_i64(0, c, 1, ZORCH_I64, dev);
  zorch_tensor *rv = rows ? zorch_reshape(rows, 2, (int64_t[]){r, 1}) : NULL, *d = rv && cols ? zorch_sub(cols, rv) : NULL;
  zorch_tensor *kk = zorch_full_i64(0, NULL, k, ZORCH_I64, dev), *mask = d && kk ? (upper ? zorch_ge(d, kk) : zorch_le(d, kk)) : NULL;
  zorch_tensor *zero = mask ? op_zeros(x, 0, NULL, x->dtype) : NULL;
  zorch_set_grad_enabled(prev);
  zorch_tensor *out = zero ? zorch_where(mask, x, zero) : NULL;
  OP_FREE(rows, cols, rv, d, kk, mask, zero);
  if (!out) err_prefix(op);
  return out;
}
zorch_tensor *zorch_tril(zorch_tensor *x, int64_t k) { return tri("tril", x, k, false); }
zorch_tensor *zorch_triu(zorch_tensor *x, int64_t k) { return tri("triu", x, k, true); }
