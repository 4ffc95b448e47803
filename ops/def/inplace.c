/* inplace.c: the in-place writes autograd sees (copy_, fill_, index
   assignment, the in-place ops' write), through a tensor or any view of it,
   as PyTorch records them: the write's node goes on the root of the views
   (CopySlices: the written part's gradient to the value, the rest to the
   root's old history), and each view's node is made again from the root's
   new history when the view is next used (AsStridedBackward). */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
  bool whole;         /* all of the root was written */
  ag_geom base, part; /* the root's geometry and the written part's, over one storage */
} write_args;

void op_span(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset, int64_t *lo, int64_t *hi) {
  int64_t a = offset, b = offset;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) {
      *lo = *hi = 0;
      return;
    }
    int64_t d = (shape[i] - 1) * strides[i];
    if (d < 0) a += d;
    else b += d;
  }
  *lo = a;
  *hi = b + 1;
}

static int by_stride(const void *a, const void *b) {
  int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
  return (x > y) - (x < y);
}

/* Whether two elements of g may share memory: a stride-0 dim of size > 1, or
   strides (smallest first) that do not each pass the extent of the dims below
   them. Sufficient for distinct elements, and what every view zorch makes of
   a tensor with distinct elements passes. */
static bool geom_overlaps(const ag_geom *g) {
  int64_t dims[ZORCH_MAX_DIMS][2];
  int n = 0;
  for (int i = 0; i < g->ndim; i++) {
    if (g->shape[i] <= 1) continue;
    if (g->strides[i] == 0) return true;
    dims[n][0] = llabs(g->strides[i]);
    dims[n++][1] = g->shape[i];
  }
  qsort(dims, (size_t)n, sizeof dims[0], by_stride);
  int64_t extent = 1;
  for (int k = 0; k < n; k++) {
    if (dims[k][0] < extent) return true;
    extent += (dims[k][1] - 1) * dims[k][0];
  }
  return false;
}

/* A buffer of g's dtype and device over the storage span of geometry `b`
   (zeroed when `zero`), *lo the span's first element: aliases of it with b's
   geometry and a view's (geom_alias) sit as the root and the view sit in
   their storage. */
static zorch_tensor *span_buffer(const zorch_tensor *g, const ag_geom *b, bool zero, int64_t *lo) {
  int64_t hi;
  op_span(b->ndim, b->shape, b->strides, b->offset, lo, &hi);
  int64_t n = hi - *lo;
  return zero ? op_zeros(g, 1, &n, g->dtype) : op_empty(g, 1, &n, g->dtype);
}

static zorch_tensor *geom_alias(zorch_tensor *buf, const ag_geom *a, int64_t lo) {
  return tensor_alias(buf, a->ndim, a->shape, a->strides, a->offset - lo);
}

/* The root's old history gets the gradient outside the written part (zeros
   where all was written, as PyTorch gives), the value the gradient of that
   part (the engine sums it over what the value was broadcast along). */
static zorch_status write_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const write_args *a = AG_ARGS(n, write_args);
  bool old = ag_wants(n, 0), val = n->nin > 1 && ag_wants(n, 1);
  if (a->whole || zorch_tensor_numel(g) == 0) {
    if (old && !(gin[0] = a->whole ? op_zeros(g, g->ndim, g->shape, g->dtype) : zorch_tensor_retain(g)))
      return zorch_last_status();
    if (val && a->whole) gin[1] = zorch_tensor_retain(g);
    return ZORCH_OK;
  }
  int64_t lo;
  zorch_tensor *buf = span_buffer(g, &a->base, false, &lo), *gb = NULL, *part = NULL;
  zorch_status st = ZORCH_OK;
  if (!buf || !(gb = geom_alias(buf, &a->base, lo)) || !(part = geom_alias(buf, &a->part, lo)) ||
      (st = op_copy_(gb, g)) || (val && !(gin[1] = zorch_clone(part))) || (old && (st = op_fill_(part, 0)))) {
    if (!st) st = zorch_last_status();
  } else if (old) {
    gin[0] = gb;
    gb = NULL;
  }
  OP_FREE(buf, gb, part);
  return st;
}

/* A view's gradient laid into zeros of its root's geometry (as_strided's
   backward): summed first over its stride-0 dims (an expand), whose elements
   share one place. */
static zorch_status view_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const ag_view_args *a = AG_ARGS(n, ag_view_args);
  ag_geom v = a->view;
  int dims[ZORCH_MAX_DIMS], nd = 0;
  for (int i = 0; i < v.ndim; i++)
    if (v.strides[i] == 0 && v.shape[i] > 1) {
      dims[nd++] = i;
      v.shape[i] = 1;
    }
  if (geom_overlaps(&v))
    return err_set(ZORCH_ERR_INTERNAL, "backward: a view whose elements share memory cannot take its gradient");
  if (shape_numel(a->base.ndim, a->base.shape) == 0) {
    gin[0] = op_zeros(g, a->base.ndim, a->base.shape, g->dtype);
    return gin[0] ? ZORCH_OK : zorch_last_status();
  }
  int64_t lo;
  zorch_tensor *gs = nd ? zorch_sum(g, nd, dims, true) : zorch_tensor_retain(g), *buf = NULL, *gv = NULL;
  zorch_status st = ZORCH_OK;
  if (!gs || !(buf = span_buffer(g, &a->base, true, &lo)) || !(gv = geom_alias(buf, &v, lo)) ||
      (st = op_copy_(gv, gs)) || !(gin[0] = geom_alias(buf, &a->base, lo))) {
    if (!st) st = zorch_last_status();
  }
  OP_FREE(gs, buf, gv);
  return st;
}

zorch_status op_write_begin(const char *op, zorch_tensor *t, zorch_tensor *part, zorch_tensor *src, op_write *w) {
  char s[ERR_SHAPE_BUF];
  w->node = NULL;
  w->root = NULL;
  if (!zorch_is_grad_enabled()) return ZORCH_OK;
  zorch_tensor *root = t, *up;
  while ((up = tensor_view_root(root))) root = up;
  bool src_grad = src && tensor_requires_grad(src), view = root != t;
  if (!tensor_requires_grad(root) && !src_grad) return ZORCH_OK; /* no gradient to follow */
  bool leaf = tensor_is_leaf(root) && tensor_requires_grad(root);
  if (leaf && view)
    return err_set(ZORCH_ERR_STATE, "%s: a view of a leaf tensor that requires grad (the leaf's shape %s) is being "
                   "used in an in-place operation, which PyTorch refuses too (the leaf would stop being one): "
                   "write under zorch.no_grad for the values only, or into a clone", op, SHAPE(root, s));
  if (leaf) { /* t itself: constants are data, as the optimizers write parameters */
    if (!src_grad) return ZORCH_OK;
    return err_set(ZORCH_ERR_STATE, "%s: a leaf tensor of shape %s that requires grad cannot take a value that "
                   "requires grad in place (it would stop being a leaf): write under no_grad, or the value's "
                   "detach(), for the values only", op, SHAPE(t, s));
  }
  if (view && t->view_nograd)
    return err_set(ZORCH_ERR_STATE, "%s: a view of shape %s was made under no_grad and is being written in place "
                   "with grad mode on, which PyTorch refuses too (whether the write should be followed is "
                   "ambiguous): make the view and write either both under no_grad or both outside it",
                   op, SHAPE(t, s));
  write_args a = {.whole = false};
  ag_geom_of(&a.base, root);
  ag_geom_of(&a.part, part);
  a.whole = memcmp(&a.base, &a.part, sizeof a.base) == 0;
  if (!a.whole && geom_overlaps(&a.base))
    return err_set(ZORCH_ERR_ARG, "%s: the tensor of shape %s written through a view has elements that share "
                   "memory, so autograd cannot tell which were written: clone() it first", op, SHAPE(root, s));
  const char *name = !a.whole || view ? "CopySlices" : src ? "CopyBackwards" : "FillBackward";
  if (!(w->node = ag_write_node(root, src_grad ? src : NULL, name, write_bwd, &a, sizeof a)))
    return zorch_last_status();
  w->node->view_bwd = view_bwd;
  w->root = root;
  return ZORCH_OK;
}

zorch_status op_write_end(op_write *w, zorch_status st) {
  if (w->node && !st) ag_write_install(w->root, w->node);
  else if (w->node) ag_node_release(w->node);
  w->node = NULL;
  return st;
}
