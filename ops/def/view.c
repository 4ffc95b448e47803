/* view.c: views that share storage (view, reshape, transpose, permute, narrow,
   select, expand, squeeze, unsqueeze), each with its backward. */
#include <stdio.h>
#include <string.h>

#include "ops.h"

/* ---- backward formulas -------------------------------------------------------- */
/* Reshape the gradient to the input's shape (view, reshape, squeeze, unsqueeze). */
static zorch_status reshape_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = zorch_reshape(g, n->in[0].ndim, n->in[0].shape);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

typedef struct {
  int perm[ZORCH_MAX_DIMS]; /* output dim i is input dim perm[i] */
} permute_args;

/* The gradient goes through the inverse of the forward permutation. */
static zorch_status permute_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const int *perm = AG_ARGS(n, permute_args)->perm;
  int inv[ZORCH_MAX_DIMS];
  for (int i = 0; i < g->ndim; i++) inv[perm[i]] = i;
  gin[0] = zorch_permute(g, inv);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

/* narrow keeps [start, start + length) of dim; select keeps index start and
   drops the dim. */
typedef struct {
  int dim;
  int64_t start;
  bool select;
} narrow_args;

/* The input's gradient gathered so far, when this pass may add into it in
   place: a node's accumulated gradient that nothing else holds (no other
   reference, no view of its storage), in g's dtype and the input's shape. */
static zorch_tensor *narrow_sink(const ag_edge *e, const zorch_tensor *g) {
  zorch_tensor *t = e->node ? e->node->gacc : NULL;
  if (!t || !tensor_owns_storage(t) || t->dtype != g->dtype ||
      t->ndim != e->ndim || memcmp(t->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim) != 0 ||
      !zorch_tensor_is_contiguous(t))
    return NULL;
  return t;
}

/* The gradient lands in its slice of zeros of the input's shape. When several
   slices of one tensor are used (the q, k and v of a fused projection), the
   first one's full-size gradient is the input's accumulated gradient by the
   time the next arrives: the next adds its slice there in place and gives the
   engine no tensor (zero), instead of a full-size tensor of zeros to add. */
static zorch_status narrow_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const narrow_args *a = AG_ARGS(n, narrow_args);
  ag_edge *e = &n->in[0];
  int64_t len = a->select ? 1 : g->shape[a->dim];
  zorch_tensor *z = NULL, *part = NULL, *gv = NULL, *sink = narrow_sink(e, g);
  zorch_status st;
  if (sink) {
    if (!(part = zorch_narrow(sink, a->dim, a->start, len)) ||
        !(gv = a->select ? zorch_unsqueeze(g, a->dim) : zorch_tensor_retain(g)))
      st = zorch_last_status();
    else
      st = op_add_(part, gv);
    OP_FREE(part, gv);
    return st;
  }
  if (!(z = op_zeros(g, e->ndim, e->shape, g->dtype)) ||
      !(part = zorch_narrow(z, a->dim, a->start, len)) ||
      !(gv = a->select ? zorch_unsqueeze(g, a->dim) : zorch_tensor_retain(g)))
    st = zorch_last_status();
  else
    st = op_copy_(part, gv);
  if (!st) {
    gin[0] = z;
    z = NULL;
  }
  OP_FREE(z, part, gv);
  return st;
}

/* The engine sums a gradient over broadcast dims, which is expand's backward. */
static zorch_status expand_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  gin[0] = zorch_tensor_retain(g);
  return ZORCH_OK;
}

/* A view of t recorded as a node `name` whose backward fn reads `nargs` bytes
   of args (none when args is NULL). */
static zorch_tensor *view_of(zorch_tensor *t, int ndim, const int64_t *shape, const int64_t *st,
                             int64_t off, const char *name, ag_backward_fn fn, const void *args,
                             size_t nargs) {
  zorch_tensor *v = tensor_alias(t, ndim, shape, st, off);
  if (v) tensor_set_view_of(v, t);
  return ag_record(v, name, fn, 1, &t, 0, NULL, args, nargs);
}

/* Resolves one -1 and checks the element count. */
static zorch_status infer_shape(const char *op, const zorch_tensor *t, int ndim,
                                const int64_t *shape, int64_t *out) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (ndim < 0 || ndim > ZORCH_MAX_DIMS || (ndim && !shape))
    return err_set(ZORCH_ERR_ARG, "%s: bad shape (%d dims)", op, ndim);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) return err_set(ZORCH_ERR_SHAPE, "%s: only one dimension can be -1", op);
      infer = i;
    } else if (shape[i] < 0) {
      return err_set(ZORCH_ERR_SHAPE, "%s: invalid size %lld", op, (long long)shape[i]);
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      return err_set(ZORCH_ERR_SHAPE, "%s: shape %s has more elements than fit in 64 bits", op,
                     err_shape_str(ndim, shape, a, sizeof a));
    }
    out[i] = shape[i];
  }
  int64_t numel = zorch_tensor_numel(t);
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return err_set(ZORCH_ERR_SHAPE, "%s: shape %s is invalid for input of shape %s", op,
                     err_shape_str(ndim, shape, a, sizeof a), SHAPE(t, b));
    out[infer] = numel / known;
  } else if (known != numel) {
    return err_set(ZORCH_ERR_SHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)",
                   op, err_shape_str(ndim, shape, a, sizeof a), SHAPE(t, b), (long long)numel);
  }
  return ZORCH_OK;
}

/* Strides for viewing t as `shape` without a copy, if the layout allows it.
   Old dims are grouped into chunks that are contiguous among themselves; each
   chunk must map onto a run of new dims with the same element count. */
static bool view_strides(const zorch_tensor *t, int ndim, const int64_t *shape, int64_t *st) {
  if (t->ndim == 0 || zorch_tensor_numel(t) == 0) {
    shape_contig_strides(ndim, shape, st);
    return true;
  }
  int vd = ndim - 1;
  int64_t base = t->strides[t->ndim - 1], old_n = 1, new_n = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    old_n *= t->shape[d];
    bool chunk_ends = d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != old_n * base);
    if (!chunk_ends) continue;
    while (vd >= 0 && (new_n < old_n || shape[vd] == 1)) {
      st[vd] = new_n * base;
      new_n *= shape[vd];
      vd--;
    }
    if (new_n != old_n) return false;
    if (d > 0) {
      base = t->strides[d - 1];
      old_n = new_n = 1;
    }
  }
  return vd == -1;
}

zorch_tensor *zorch_view(zorch_tensor *t, int ndim, const int64_t *shape) {
  char a[ERR_SHAPE_BUF];
  if (check_arg("view", "input", t)) return NULL;
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  if (infer_shape("view", t, ndim, shape, sh)) return NULL;
  if (!view_strides(t, ndim, sh, st))
    return err_null(ZORCH_ERR_SHAPE,
                    "view: the strides of input %s do not allow this view; use reshape",
                    SHAPE(t, a));
  return view_of(t, ndim, sh, st, t->offset, "ViewBackward", reshape_bwd, NULL, 0);
}

zorch_tensor *zorch_reshape(zorch_tensor *t, int ndim, const int64_t *shape) {
  if (check_arg("reshape", "input", t)) return NULL;
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  if (infer_shape("reshape", t, ndim, shape, sh)) return NULL;
  if (view_strides(t, ndim, sh, st))
    return view_of(t, ndim, sh, st, t->offset, "ViewBackward", reshape_bwd, NULL, 0);
  zorch_tensor *c = op_contig(t);
  if (!c) return NULL;
  shape_contig_strides(ndim, sh, st);
  zorch_tensor *v = tensor_alias(c, ndim, sh, st, c->offset);
  zorch_tensor_free(c);
  return ag_record(v, "ReshapeBackward", reshape_bwd, 1, &t, 0, NULL, NULL, 0);
}

zorch_tensor *zorch_flatten(zorch_tensor *t) {
  int64_t n = -1;
  return zorch_reshape(t, 1, &n);
}

zorch_tensor *zorch_permute(zorch_tensor *t, const int *dims) {
  if (check_arg("permute", "input", t)) return NULL;
  if (t->ndim && !dims) return err_null(ZORCH_ERR_ARG, "permute: dims is NULL");
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  bool seen[ZORCH_MAX_DIMS] = {0};
  permute_args args;
  int *d = args.perm;
  for (int i = 0; i < t->ndim; i++) {
    if (dim_wrap("permute", dims[i], t->ndim, 0, &d[i])) return NULL;
    if (seen[d[i]]) return err_null(ZORCH_ERR_ARG, "permute: dim " ERR_IX("%d") " repeated", dims[i]);
    seen[d[i]] = true;
    sh[i] = t->shape[d[i]];
    st[i] = t->strides[d[i]];
  }
  return view_of(t, t->ndim, sh, st, t->offset, "PermuteBackward", permute_bwd, &args,
                 sizeof args);
}

zorch_tensor *zorch_transpose(zorch_tensor *t, int d0, int d1) {
  if (check_arg("transpose", "input", t)) return NULL;
  int a, b;
  if (dim_wrap("transpose", d0, t->ndim, 0, &a) || dim_wrap("transpose", d1, t->ndim, 0, &b))
    return NULL;
  int perm[ZORCH_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) perm[i] = i;
  if (t->ndim) {
    perm[a] = b;
    perm[b] = a;
  }
  return zorch_permute(t, perm);
}

/* "(expected 0..n-1 or -n..-1)", the indices of a dim of size n, with the
   numbers marked for either numbering (error.h). */
static const char *index_range(int64_t n, char *buf, size_t len) {
  if (n == 0) snprintf(buf, len, "(the dim is empty)");
  else if (n == 1) snprintf(buf, len, "(expected " ERR_IX("0") " or -1)");
  else snprintf(buf, len, "(expected " ERR_IX("0") ".." ERR_IX("%lld") " or %lld..-1)", (long long)n - 1, (long long)-n);
  return buf;
}

zorch_tensor *zorch_narrow(zorch_tensor *t, int dim, int64_t start, int64_t length) {
  char a[ERR_SHAPE_BUF];
  if (check_arg("narrow", "input", t)) return NULL;
  int d;
  if (t->ndim == 0) return err_null(ZORCH_ERR_SHAPE, "narrow: cannot narrow a 0-dimensional tensor");
  if (dim_wrap("narrow", dim, t->ndim, 0, &d)) return NULL;
  int64_t size = t->shape[d], first = start < 0 ? start + size : start;
  char r[96];
  if (first < 0 || first > size)
    return err_null(ZORCH_ERR_ARG, "narrow: start " ERR_IX("%lld") " out of range for dim " ERR_IX("%d")
                    " of input %s %s", (long long)start, dim, SHAPE(t, a), index_range(size, r, sizeof r));
  if (length < 0) return err_null(ZORCH_ERR_ARG, "narrow: length %lld is negative", (long long)length);
  if (length > size - first)
    return err_null(ZORCH_ERR_ARG, "narrow: start " ERR_IX("%lld") " and length %lld run past the end "
                    "of dim " ERR_IX("%d") " of input %s (elements " ERR_IX("%lld") ".." ERR_IX("%lld")
                    " asked, the dim has " ERR_IX("0") ".." ERR_IX("%lld") ")", (long long)start,
                    (long long)length, dim, SHAPE(t, a), (long long)first,
                    (long long)(length > INT64_MAX - first ? INT64_MAX - 1 : first + length - 1),
                    (long long)size - 1);
  start = first;
  int64_t sh[ZORCH_MAX_DIMS];
  memcpy(sh, t->shape, sizeof sh);
  sh[d] = length;
  narrow_args args = {.dim = d, .start = start, .select = false};
  return view_of(t, t->ndim, sh, t->strides, t->offset + start * t->strides[d], "NarrowBackward",
                 narrow_bwd, &args, sizeof args);
}

zorch_tensor *zorch_select(zorch_tensor *t, int dim, int64_t index) {
  char a[ERR_SHAPE_BUF];
  if (check_arg("select", "input", t)) return NULL;
  if (t->ndim == 0) return err_null(ZORCH_ERR_SHAPE, "select: cannot select from a 0-dimensional tensor");
  int d;
  if (dim_wrap("select", dim, t->ndim, 0, &d)) return NULL;
  int64_t at = index < 0 ? index + t->shape[d] : index;
  char r[96];
  if (at < 0 || at >= t->shape[d])
    return err_null(ZORCH_ERR_ARG, "select: index " ERR_IX("%lld") " out of range for dim " ERR_IX("%d")
                    " of input %s %s", (long long)index, dim, SHAPE(t, a),
                    index_range(t->shape[d], r, sizeof r));
  index = at;
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; i++)
    if (i != d) {
      sh[k] = t->shape[i];
      st[k++] = t->strides[i];
    }
  narrow_args args = {.dim = d, .start = index, .select = true};
  return view_of(t, t->ndim - 1, sh, st, t->offset + index * t->strides[d], "SelectBackward",
                 narrow_bwd, &args, sizeof args);
}

zorch_tensor *zorch_expand(zorch_tensor *t, int ndim, const int64_t *shape) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (check_arg("expand", "input", t)) return NULL;
  if (ndim < t->ndim || ndim > ZORCH_MAX_DIMS || !shape)
    return err_null(ZORCH_ERR_SHAPE, "expand: cannot expand %s to %d dims", SHAPE(t, a), ndim);
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int64_t want = shape[i];
    if (i < lead) {
      if (want < 0) goto bad;
      sh[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = t->shape[i - lead];
    if (want == -1) want = have;
    if (want != have && have != 1) goto bad;
    sh[i] = want;
    st[i] = want == have ? t->strides[i - lead] : 0;
  }
  return view_of(t, ndim, sh, st, t->offset, "ExpandBackward", expand_bwd, NULL, 0);
bad:
  return err_null(ZORCH_ERR_SHAPE, "expand: cannot expand shape %s to %s", SHAPE(t, a),
                  err_shape_str(ndim, shape, b, sizeof b));
}

zorch_tensor *zorch_unsqueeze(zorch_tensor *t, int dim) {
  if (check_arg("unsqueeze", "input", t)) return NULL;
  int d;
  if (t->ndim >= ZORCH_MAX_DIMS)
    return err_null(ZORCH_ERR_SHAPE, "unsqueeze: at most %d dims", ZORCH_MAX_DIMS);
  if (dim_wrap("unsqueeze", dim, t->ndim, 1, &d)) return NULL;
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  for (int i = 0, k = 0; i <= t->ndim; i++) {
    if (i == d) {
      sh[i] = 1;
      st[i] = d < t->ndim ? t->strides[d] * t->shape[d] : 1;
    } else {
      sh[i] = t->shape[k];
      st[i] = t->strides[k++];
    }
  }
  return view_of(t, t->ndim + 1, sh, st, t->offset, "UnsqueezeBackward", reshape_bwd, NULL, 0);
}

zorch_tensor *zorch_squeeze(zorch_tensor *t, int dim) {
  if (check_arg("squeeze", "input", t)) return NULL;
  if (t->ndim == 0) return zorch_tensor_retain(t);
  int d;
  if (dim_wrap("squeeze", dim, t->ndim, 0, &d)) return NULL;
  if (t->shape[d] != 1) return zorch_tensor_retain(t);
  int64_t sh[ZORCH_MAX_DIMS], st[ZORCH_MAX_DIMS];
  for (int i = 0, k = 0; i < t->ndim; i++)
    if (i != d) {
      sh[k] = t->shape[i];
      st[k++] = t->strides[i];
    }
  return view_of(t, t->ndim - 1, sh, st, t->offset, "SqueezeBackward", reshape_bwd, NULL, 0);
}
