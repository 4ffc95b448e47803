/* index.c: gather, scatter and scatter_add along a dim, sort and topk, with
   their gradients. Gathering and sorting move values; their gradients add the
   incoming gradient back where the values came from (a scatter_add). */
#include <string.h>

#include "ops.h"

typedef struct {
  int dim; /* wrapped */
} index_args;

/* The geometry of an index op: a 0-d tensor counts as shape (1). */
static void geom_make(index_geom *g, int ndim, const int64_t *ashape, const int64_t *ishape,
                      int dim) {
  g->ndim = ndim ? ndim : 1;
  g->dim = dim;
  for (int k = 0; k < g->ndim; k++) {
    g->ashape[k] = ndim ? ashape[k] : 1;
    g->ishape[k] = ndim ? ishape[k] : 1;
  }
}

/* Checks the input and index of gather or scatter and fills their geometry:
   the index is int64, has the input's dims and is no larger outside dim. */
static zorch_status index_check(const char *op, const zorch_tensor *a, int dim,
                                const zorch_tensor *idx, index_geom *g) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg(op, "input", a) || check_arg(op, "index", idx) || check_same_device(op, a, idx))
    return zorch_last_status();
  if (idx->dtype != ZORCH_I64)
    return err_set(ZORCH_ERR_DTYPE, "%s: index must be an int64 tensor, got %s", op,
                   zorch_dtype_name(idx->dtype));
  if (idx->ndim != a->ndim)
    return err_set(ZORCH_ERR_SHAPE, "%s: index %s must have as many dims as the input %s", op,
                   SHAPE(idx, s1), SHAPE(a, s2));
  int d;
  if (dim_wrap(op, dim, a->ndim, 0, &d)) return zorch_last_status();
  geom_make(g, a->ndim, a->shape, idx->shape, d);
  for (int k = 0; k < a->ndim; k++)
    if (k != d && idx->shape[k] > a->shape[k])
      return err_set(ZORCH_ERR_SHAPE, "%s: index %s is larger than the input %s outside the "
                     "indexed dim", op, SHAPE(idx, s1), SHAPE(a, s2));
  return ZORCH_OK;
}

/* a (contiguous) at idx (contiguous); no autograd. */
static zorch_tensor *gather_raw(zorch_tensor *a, zorch_tensor *idx, const index_geom *g) {
  zorch_tensor *out = op_empty(a, idx->ndim, idx->shape, a->dtype);
  if (out && backend_of(out)->gather(out, a, idx, g)) {
    zorch_tensor_free(out);
    return NULL;
  }
  return out;
}

/* A copy of a with src (the index's shape) written or added at idx along the
   geometry's dim; adds run in float32/float64 (int64 for integers) and the
   result has a's dtype. No autograd. */
static zorch_tensor *scatter_raw(zorch_tensor *a, zorch_tensor *idx, zorch_tensor *src,
                                 const index_geom *g, bool add) {
  zorch_dtype cd = !add ? a->dtype : zorch_dtype_is_float(a->dtype) ? op_compute_dtype(a->dtype)
                                                                    : ZORCH_I64;
  zorch_tensor *out = NULL, *sc = NULL, *ic = NULL;
  if (!(out = op_empty(a, a->ndim, a->shape, cd)) || backend_of(out)->copy(out, a) ||
      !(sc = op_cast_contig(src, cd)) || !(ic = op_contig(idx)) ||
      backend_of(out)->scatter(out, ic, sc, g, add)) {
    zorch_tensor_free(out);
    out = NULL;
  }
  OP_FREE(sc, ic);
  return op_recast(out, a->dtype);
}

/* Zeros of the input's shape (edge 0 of n) with g added at saved[0] along the
   dim: the gradient of gather, sort and topk. */
static zorch_status index_grad(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  ag_edge *e = &n->in[0];
  zorch_tensor *idx = n->saved[0], *z = NULL;
  index_geom geom;
  geom_make(&geom, e->ndim, e->shape, idx->shape, AG_ARGS(n, index_args)->dim);
  if ((z = op_zeros(g, e->ndim, e->shape, op_compute_dtype(g->dtype))))
    gin[0] = scatter_raw(z, idx, g, &geom, true);
  zorch_tensor_free(z);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

/* ---- gather --------------------------------------------------------------------------- */
zorch_tensor *zorch_gather(zorch_tensor *a, int dim, zorch_tensor *idx) {
  index_geom g;
  if (index_check("gather", a, dim, idx, &g)) return NULL;
  zorch_tensor *ac = NULL, *ic = NULL, *out = NULL;
  if ((ac = op_contig(a)) && (ic = op_contig(idx)) && (out = gather_raw(ac, ic, &g))) {
    index_args args = {.dim = g.dim};
    out = ag_record(out, "GatherBackward", index_grad, 1, &a, 1, &ic, &args, sizeof args);
  }
  OP_FREE(ac, ic);
  return out;
}

/* ---- scatter and scatter_add ---------------------------------------------------------- */
typedef struct {
  int dim;
  bool add;
} scatter_args;

/* Input a: g, with the overwritten places zeroed for scatter. src: g at idx. */
static zorch_status scatter_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const scatter_args *a = AG_ARGS(n, scatter_args);
  zorch_tensor *idx = n->saved[0], *gc = NULL, *z = NULL;
  index_geom geom;
  geom_make(&geom, g->ndim, g->shape, idx->shape, a->dim);
  zorch_status st = ZORCH_OK;
  if (!(gc = op_contig(g))) goto fail;
  if (ag_wants(n, 0)) {
    if (a->add) gin[0] = zorch_tensor_retain(g);
    else if (!(z = op_zeros(g, idx->ndim, idx->shape, g->dtype)) ||
             !(gin[0] = scatter_raw(gc, idx, z, &geom, false)))
      goto fail;
  }
  if (ag_wants(n, 1) && !(gin[1] = gather_raw(gc, idx, &geom))) goto fail;
  goto done;
fail:
  st = zorch_last_status();
done:
  OP_FREE(gc, z);
  return st;
}

static zorch_tensor *scatter_op(const char *op, zorch_tensor *a, int dim, zorch_tensor *idx,
                                zorch_tensor *src, bool add) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  index_geom g;
  if (index_check(op, a, dim, idx, &g) || check_arg(op, "src", src) ||
      check_same_device(op, a, src))
    return NULL;
  if (!tensor_same_shape(src, idx))
    return err_null(ZORCH_ERR_SHAPE, "%s: src %s must have the index's shape %s", op,
                    SHAPE(src, s1), SHAPE(idx, s2));
  if (src->dtype != a->dtype)
    return err_null(ZORCH_ERR_DTYPE, "%s: src is %s but the input is %s", op,
                    zorch_dtype_name(src->dtype), zorch_dtype_name(a->dtype));
  zorch_tensor *ic = op_contig(idx);
  if (!ic) return NULL;
  zorch_tensor *out = scatter_raw(a, ic, src, &g, add);
  if (out) {
    scatter_args args = {.dim = g.dim, .add = add};
    zorch_tensor *in[2] = {a, src};
    out = ag_record(out, add ? "ScatterAddBackward" : "ScatterBackward", scatter_bwd, 2, in, 1,
                    &ic, &args, sizeof args);
  }
  zorch_tensor_free(ic);
  return out;
}

zorch_tensor *zorch_scatter(zorch_tensor *a, int dim, zorch_tensor *idx, zorch_tensor *src) {
  return scatter_op("scatter", a, dim, idx, src, false);
}

zorch_tensor *zorch_scatter_add(zorch_tensor *a, int dim, zorch_tensor *idx, zorch_tensor *src) {
  return scatter_op("scatter_add", a, dim, idx, src, true);
}

/* ---- sort and topk -------------------------------------------------------------------- */
/* a sorted along dim d (wrapped), values in a's dtype and int64 indices; floats
   sort in float32/float64, integers in int64. No autograd. */
static zorch_tensor *sort_raw(const char *op, zorch_tensor *a, int d, bool descending,
                              zorch_tensor **idx) {
  zorch_dtype cd = zorch_dtype_is_float(a->dtype) ? op_compute_dtype(a->dtype) : ZORCH_I64;
  int64_t outer = 1, inner = 1, n = a->ndim ? a->shape[d] : 1;
  for (int i = 0; i < d; i++) outer *= a->shape[i];
  for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
  zorch_tensor *c = NULL, *v = NULL, *ix = NULL;
  if (!(c = op_cast_contig(a, cd)) || !(v = op_empty(a, a->ndim, a->shape, cd)) ||
      !(ix = op_empty(a, a->ndim, a->shape, ZORCH_I64)) ||
      backend_of(v)->sort(v, ix, c, outer, n, inner, descending) || !(v = op_recast(v, a->dtype))) {
    OP_FREE(v, ix);
    v = ix = NULL;
    err_prefix(op);
  }
  zorch_tensor_free(c);
  *idx = ix;
  return v;
}

/* Hands the indices to the caller (when asked) and records the values' node. */
static zorch_tensor *sorted_result(const char *name, zorch_tensor *a, zorch_tensor *v,
                                   zorch_tensor *ix, int d, zorch_tensor **indices) {
  index_args args = {.dim = d};
  if (v) v = ag_record(v, name, index_grad, 1, &a, 1, &ix, &args, sizeof args);
  if (v && indices)
    *indices = ix;
  else
    zorch_tensor_free(ix);
  return v;
}

zorch_tensor *zorch_sort(zorch_tensor *a, int dim, bool descending, zorch_tensor **indices) {
  if (indices) *indices = NULL;
  int d;
  if (check_arg("sort", "input", a) || dim_wrap("sort", dim, a->ndim, 0, &d)) return NULL;
  zorch_tensor *ix = NULL, *v = sort_raw("sort", a, d, descending, &ix);
  return sorted_result("SortBackward", a, v, ix, d, indices);
}

zorch_tensor *zorch_topk(zorch_tensor *a, int64_t k, int dim, bool largest, bool sorted,
                         zorch_tensor **indices) {
  (void)sorted; /* the k values always come sorted, which is a valid unsorted answer too */
  if (indices) *indices = NULL;
  char s1[ERR_SHAPE_BUF];
  int d;
  if (check_arg("topk", "input", a) || dim_wrap("topk", dim, a->ndim, 0, &d)) return NULL;
  int64_t n = a->ndim ? a->shape[d] : 1;
  if (k < 0 || k > n)
    return err_null(ZORCH_ERR_ARG, "topk: k = %lld is out of range for a dimension of size %lld "
                    "(input %s; valid: 0 to %lld)", (long long)k, (long long)n, SHAPE(a, s1),
                    (long long)n);
  zorch_tensor *ixf = NULL, *vf = sort_raw("topk", a, d, largest, &ixf);
  zorch_tensor *vn = NULL, *in = NULL, *v = NULL, *ix = NULL;
  if (vf && a->ndim == 0) {
    v = zorch_tensor_retain(vf);
    ix = zorch_tensor_retain(ixf);
  } else if (vf && (vn = zorch_narrow(vf, d, 0, k)) && (in = zorch_narrow(ixf, d, 0, k)) &&
             (v = op_contig(vn))) {
    ix = op_contig(in);
  }
  if (!ix) {
    zorch_tensor_free(v);
    v = NULL;
  }
  OP_FREE(vf, ixf, vn, in);
  return sorted_result("TopkBackward", a, v, ix, d, indices);
}
