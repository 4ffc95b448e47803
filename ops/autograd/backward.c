/* backward.c: the backward pass. It collects the graph under a tensor, runs the
   nodes in dependency order with grad mode off, fits each gradient to its
   input's shape and dtype, and accumulates into leaves. It sits above the ops,
   whose functions it calls to sum, convert and add gradients. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../def/ops.h"

/* Sums g over broadcast dims down to shape (ndim, shape). */
static zorch_tensor *ag_sum_to(zorch_tensor *g, int ndim, const int64_t *shape) {
  int lead = g->ndim - ndim;
  int dims[ZORCH_MAX_DIMS], nd = 0;
  if (lead < 0) goto bad;
  for (int i = 0; i < g->ndim; i++) {
    if (i < lead) {
      dims[nd++] = i;
    } else if (shape[i - lead] != g->shape[i]) {
      if (shape[i - lead] != 1) goto bad;
      dims[nd++] = i;
    }
  }
  if (nd == 0) return zorch_tensor_retain(g);
  zorch_tensor *s = zorch_sum(g, nd, dims, true);
  if (!s) return NULL;
  zorch_tensor *r = zorch_reshape(s, ndim, shape);
  zorch_tensor_free(s);
  return r;
bad : {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  return err_null(ZORCH_ERR_INTERNAL, "backward: gradient of shape %s does not reduce to %s",
                  SHAPE(g, a), err_shape_str(ndim, shape, b, sizeof b));
}
}

/* Brings a gradient to its input's shape and dtype. Takes g. */
static zorch_tensor *grad_fit(zorch_tensor *g, const ag_edge *e) {
  bool same = g->ndim == e->ndim && memcmp(g->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim) == 0;
  if (!same) {
    zorch_tensor *s = ag_sum_to(g, e->ndim, e->shape);
    zorch_tensor_free(g);
    if (!s) return NULL;
    g = s;
  }
  if (g->dtype != e->dtype) {
    zorch_tensor *c = zorch_to_dtype(g, e->dtype);
    zorch_tensor_free(g);
    g = c;
  }
  return g;
}

/* Adds g into leaf->grad (taking g), then runs the hook once all of the pass's
   contributions have arrived. */
static zorch_status leaf_accumulate(zorch_tensor *leaf, zorch_tensor *g) {
  if (g) {
    if (!leaf->grad) {
      bool own = tensor_owns_storage(g) && zorch_tensor_is_contiguous(g);
      leaf->grad = own ? g : zorch_clone(g);
      if (!own) zorch_tensor_free(g);
      if (!leaf->grad) return zorch_last_status();
    } else {
      zorch_status s = op_add_(leaf->grad, g);
      zorch_tensor_free(g);
      if (s) return s;
    }
  }
  if (--leaf->ag_pending == 0 && leaf->hook.fn) return leaf->hook.fn(leaf, leaf->hook.ud);
  return ZORCH_OK;
}

typedef struct {
  ag_node **v;
  size_t n, cap;
} node_list;

static bool list_push(node_list *l, ag_node *n) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    ag_node **v = realloc(l->v, cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = n;
  return true;
}

/* A pass that completed has brought every leaf's pending count back to where
   it began (a pass may run inside another one's node: checkpoint's recompute),
   so only a failed pass resets them. */
static void pass_cleanup(node_list *all, bool failed) {
  for (size_t i = 0; i < all->n; i++) {
    ag_node *n = all->v[i];
    zorch_tensor_free(n->gacc);
    n->gacc = NULL;
    n->deps = 0;
    n->visited = false;
    for (int j = 0; failed && j < n->nin; j++)
      if (n->in[j].leaf) n->in[j].leaf->ag_pending = 0;
  }
}

/* Collects the graph under root into `all` (root first), counting each node's
   incoming edges (deps) and each leaf's contributions to come (ag_pending). */
static zorch_status collect_graph(ag_node *root, node_list *all) {
  root->visited = true;
  if (!list_push(all, root)) return err_set(ZORCH_ERR_OOM, "backward: out of memory");
  for (size_t i = 0; i < all->n; i++) {
    ag_node *n = all->v[i];
    if (n->released)
      return err_set(ZORCH_ERR_STATE,
                     "backward: trying to backward through the graph a second time (%s's saved "
                     "tensors were freed); pass retain_graph to the first backward",
                     n->name);
    for (int j = 0; j < n->nin; j++) {
      ag_edge *e = &n->in[j];
      if (e->leaf) e->leaf->ag_pending++;
      if (!e->node) continue;
      e->node->deps++;
      if (!e->node->visited) {
        e->node->visited = true;
        if (!list_push(all, e->node)) return err_set(ZORCH_ERR_OOM, "backward: out of memory");
      }
    }
  }
  return ZORCH_OK;
}

/* Delivers gi (taken; NULL means zero), the gradient for edge e, to its leaf
   or adds it to its node's; a node whose last contribution arrived is ready. */
static zorch_status deliver_grad(ag_edge *e, zorch_tensor *gi, node_list *ready) {
  if (gi && !(gi = grad_fit(gi, e))) return zorch_last_status();
  if (e->leaf) return leaf_accumulate(e->leaf, gi);
  ag_node *next = e->node;
  if (gi && !next->gacc) {
    next->gacc = gi;
  } else if (gi) {
    zorch_tensor *sum = zorch_add(next->gacc, gi);
    zorch_tensor_free(gi);
    if (!sum) return zorch_last_status();
    zorch_tensor_free(next->gacc);
    next->gacc = sum;
  }
  if (--next->deps == 0 && !list_push(ready, next))
    return err_set(ZORCH_ERR_OOM, "backward: out of memory");
  return ZORCH_OK;
}

/* Fails when a tensor n saved was written in place after n was recorded (its
   storage's version moved on): the backward would use the new values. */
static zorch_status check_saved_versions(const ag_node *n) {
  for (int i = 0; i < n->nsaved && i < AG_MAX_SAVED; i++) {
    const zorch_tensor *s = n->saved[i];
    if (!s || s->st->version == n->saved_version[i]) continue;
    char b[ERR_SHAPE_BUF];
    return err_set(ZORCH_ERR_STATE, "backward: one of the variables needed for gradient computation has "
                   "been modified by an inplace operation: [%s] saved tensor " ERR_IX("%d") " of shape %s "
                   "is at version %u; expected version %u", n->name, i, SHAPE(s, b),
                   (unsigned)s->st->version, (unsigned)n->saved_version[i]);
  }
  return ZORCH_OK;
}

/* Fails when what e's node made was written in place, in grad mode and
   through another handle than the one whose history records the write,
   before the reading node read it: the history would not describe the
   values read, and the gradient would be wrong.
   `reader` is the reading node's name, NULL for the root of the pass. */
static zorch_status check_read(const char *reader, const ag_node *made, uint32_t read_at, int ndim,
                               const int64_t *shape) {
  if (!made->watch || read_at == made->made_at) return ZORCH_OK;
  char b[ERR_SHAPE_BUF], who[96] = "backward";
  if (reader) snprintf(who, sizeof who, "[%s]", reader);
  return err_set(ZORCH_ERR_STATE, "backward: a tensor of shape %s that [%s] made was written in place before %s "
                 "read it, through another handle to its storage (detach(), an optimizer), which autograd does "
                 "not follow, so its gradient would be wrong: write through the tensor itself or a view of it "
                 "(copy_, fill_, the in-place ops and index assignment are recorded there), or build the values "
                 "with zorch.where or zorch.cat", err_shape_str(ndim, shape, b, sizeof b), made->name, who);
}

/* Runs n's backward on the gradient it accumulated (none: its inputs get none
   either), delivers the inputs' gradients, and frees what n saved unless the
   graph is retained. */
static zorch_status run_node(ag_node *n, bool retain, node_list *ready) {
  zorch_tensor *g = n->gacc, *small[8] = {0}, **gin = small;
  n->gacc = NULL;
  if (n->nin > 8 && !(gin = calloc((size_t)n->nin, sizeof *gin))) {
    zorch_tensor_free(g);
    return err_set(ZORCH_ERR_OOM, "backward: out of memory");
  }
  zorch_status st = ZORCH_OK;
  if (g && n->pre_hook) st = n->pre_hook(n->pre_ud);
  if (g && !st) st = check_saved_versions(n);
  if (g && !st && (st = n->backward(n, g, gin))) err_prefix(n->name);
  zorch_tensor_free(g);
  for (int j = 0; j < n->nin; j++) {
    ag_edge *e = &n->in[j];
    if (!st && gin[j] && e->node) st = check_read(n->name, e->node, e->read_at, e->ndim, e->shape);
    if (st || (!e->node && !e->leaf))
      zorch_tensor_free(gin[j]);
    else
      st = deliver_grad(e, gin[j], ready);
  }
  if (gin != small) free(gin);
  if (!retain) { /* a node that kept nothing can run again, as in PyTorch */
    n->released = n->released || n->nsaved > 0 || n->free_args;
    ag_node_free_saved(n);
  }
  return st;
}

/* Runs the nodes under root in dependency order with grad mode off, starting
   from grad at root. */
static zorch_status run_pass(ag_node *root, zorch_tensor *grad, bool retain, node_list *all) {
  zorch_status st = collect_graph(root, all);
  if (st) return st;
  node_list ready = {0};
  root->gacc = zorch_tensor_retain(grad);
  if (!list_push(&ready, root)) return err_set(ZORCH_ERR_OOM, "backward: out of memory");
  bool prev = zorch_set_grad_enabled(false);
  while (ready.n && !st) st = run_node(ready.v[--ready.n], retain, &ready);
  zorch_set_grad_enabled(prev);
  free(ready.v);
  return st;
}

zorch_status zorch_backward(zorch_tensor *t, zorch_tensor *grad, bool retain_graph) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (!t) return err_set(ZORCH_ERR_ARG, "backward: tensor is NULL");
  if (!tensor_requires_grad(t))
    return err_set(ZORCH_ERR_STATE,
                   "backward: tensor of shape %s does not require grad and has no grad_fn",
                   SHAPE(t, a));
  if (ag_view_sync(t)) return zorch_last_status();
  zorch_tensor *g;
  if (grad) {
    if (!tensor_same_shape(grad, t))
      return err_set(ZORCH_ERR_SHAPE, "backward: gradient shape %s does not match tensor shape %s",
                     SHAPE(grad, a), SHAPE(t, b));
    g = zorch_tensor_retain(grad);
  } else {
    if (zorch_tensor_numel(t) != 1)
      return err_set(ZORCH_ERR_SHAPE,
                     "backward: grad can be implicitly created only for one-element tensors, "
                     "got shape %s",
                     SHAPE(t, a));
    g = zorch_ones(t->ndim, t->shape, t->dtype, t->st->device);
    if (!g) return zorch_last_status();
  }
  zorch_status st;
  zorch_tensor_retain(t); /* a hook may drop the caller's reference (a Lua <close>) */
  if (!t->grad_fn) { /* a leaf: its gradient is the given one */
    int pending = t->ag_pending; /* nonzero inside another pass */
    t->ag_pending = 1;
    zorch_tensor *c = zorch_clone(g);
    st = c ? leaf_accumulate(t, c) : zorch_last_status();
    t->ag_pending = pending;
  } else if (!(st = check_read(NULL, t->grad_fn, t->grad_fn->watch ? t->grad_fn->watch->writes : 0, t->ndim,
                                t->shape))) {
    node_list all = {0};
    st = run_pass(t->grad_fn, g, retain_graph, &all);
    pass_cleanup(&all, st != ZORCH_OK);
    free(all.v);
  }
  zorch_tensor_free(g);
  zorch_tensor_free(t);
  return st;
}

