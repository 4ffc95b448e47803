/* node.c: grad mode, node recording and release, leaf properties. The
   backward pass that runs the nodes is ops/autograd/backward.c, above the ops. */
#include "node.h"

#include "state.h"

#include <stdlib.h>
#include <string.h>


bool zorch_set_grad_enabled(bool on) {
  zstate *s = zstate_get();
  bool prev = s->grad_enabled;
  s->grad_enabled = on;
  return prev;
}
bool zorch_is_grad_enabled(void) { return zstate_get()->grad_enabled; }

/* ag_needed, and whether an input is a stale view to sync. */
static inline bool needed(int n, zorch_tensor *const *in, bool *stale) {
  if (!zstate_get()->grad_enabled) return false;
  bool need = false;
  for (int i = 0; i < n; i++) {
    if (!in[i]) continue;
    bool s = tensor_view_stale(in[i]);
    *stale = *stale || s;
    need = need || s || in[i]->requires_grad;
  }
  return need;
}

bool ag_needed(int n, zorch_tensor *const *in) {
  bool stale = false;
  return needed(n, in, &stale);
}

/* The node and its typed arguments are one allocation. */
#define AG_ARGS_AT ((sizeof(ag_node) + 15) & ~(size_t)15)

zorch_tensor *ag_record(zorch_tensor *out, const char *name, ag_backward_fn fn, int nin,
                             zorch_tensor *const *in, int nsave, zorch_tensor *const *save,
                             const void *args, size_t nargs) {
  bool stale = false;
  if (!out || !needed(nin, in, &stale)) return out;
  for (int i = 0; stale && i < nin; i++)
    if (in[i] && ag_view_sync(in[i])) {
      zorch_tensor_free(out);
      return NULL;
    }
  size_t bytes = AG_ARGS_AT + nargs + (size_t)(nin > 0 ? nin : 1) * sizeof(ag_edge);
  zmem_account *mem;
  if (!zmem_charge_current(bytes, &mem)) {
    zorch_tensor_free(out);
    return NULL;
  }
  ag_node *n = calloc(1, AG_ARGS_AT + nargs);
  ag_edge *edges = calloc((size_t)(nin > 0 ? nin : 1), sizeof *edges);
  if (!n || !edges) {
    free(n);
    free(edges);
    zmem_uncharge(mem, bytes);
    zorch_tensor_free(out);
    return err_null(ZORCH_ERR_OOM, "%s: out of memory recording the graph", name);
  }
  n->mem = mem;
  n->mem_bytes = bytes;
  n->refcount = 1;
  n->name = name;
  n->backward = fn;
  n->nin = nin;
  n->in = edges;
  if (nargs) {
    n->args = (char *)n + AG_ARGS_AT;
    memcpy(n->args, args, nargs);
  }
  bool view = false; /* the output shares an input's storage */
  for (int i = 0; i < nin; i++) {
    zorch_tensor *t = in[i];
    if (!t) continue;
    view |= t->st == out->st;
    edges[i].ndim = t->ndim;
    memcpy(edges[i].shape, t->shape, sizeof t->shape);
    edges[i].dtype = t->dtype;
    if (!t->requires_grad) continue;
    if (t->grad_fn) {
      edges[i].node = t->grad_fn;
      t->grad_fn->refcount++;
      if (t->grad_fn->watch) edges[i].read_at = t->grad_fn->watch->writes;
    } else {
      edges[i].leaf = zorch_tensor_retain(t);
    }
  }
  for (int i = 0; i < nsave && i < AG_MAX_SAVED; i++) {
    if (!save[i]) continue;
    n->saved[i] = tensor_detached(save[i]);
    n->saved_version[i] = save[i]->st->version;
    if (!n->saved[i]) {
      ag_node_release(n);
      zorch_tensor_free(out);
      return NULL;
    }
  }
  n->nsaved = nsave;
  /* a fresh storage is watched from now on; a view follows its base's watch */
  n->watch = storage_watch(out->st, !view);
  if (!n->watch && !view) {
    ag_node_release(n);
    zorch_tensor_free(out);
    return NULL;
  }
  if (n->watch) n->made_at = n->watch->writes;
  out->grad_fn = n;
  out->requires_grad = true;
  return out;
}

/* The node ag_record makes for values with `like`'s geometry and storage,
   taken off the alias it was recorded on; the storage is watched. */
static ag_node *node_for(const zorch_tensor *like, const char *name, ag_backward_fn fn, int nin,
                         zorch_tensor *const *in, const void *args, size_t nargs) {
  zorch_tensor *alias = tensor_detached(like);
  if (!alias) return NULL;
  if (!(alias = ag_record(alias, name, fn, nin, in, 0, NULL, args, nargs))) return NULL;
  ag_node *n = alias->grad_fn;
  alias->grad_fn = NULL;
  zorch_tensor_free(alias);
  if (!n) return err_null(ZORCH_ERR_STATE, "%s: nothing to record", name);
  if (!n->watch && !(n->watch = storage_watch(like->st, true))) {
    ag_node_release(n);
    return NULL;
  }
  return n;
}

ag_node *ag_write_node(zorch_tensor *t, zorch_tensor *src, const char *name, ag_backward_fn fn, const void *args,
                       size_t nargs) {
  zorch_tensor *in[2] = {t, src};
  return node_for(t, name, fn, src ? 2 : 1, in, args, nargs);
}

void ag_write_install(zorch_tensor *t, ag_node *n) {
  n->made_at = n->watch->writes;
  ag_node *old = t->grad_fn;
  t->grad_fn = n;
  t->requires_grad = true;
  t->hist_gen++;
  ag_node_release(old);
}

void ag_geom_of(ag_geom *g, const zorch_tensor *t) {
  memset(g, 0, sizeof *g);
  g->ndim = t->ndim;
  memcpy(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(g->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  g->offset = t->offset;
}

zorch_status ag_view_sync(zorch_tensor *v) {
  if (!tensor_view_stale(v)) return ZORCH_OK;
  zorch_tensor *root = v->base;
  char b[ERR_SHAPE_BUF];
  if (v->view_nograd)
    return err_set(ZORCH_ERR_STATE, "autograd: a view of shape %s made under no_grad is used after a write, with "
                   "grad mode on, into its base or another view of it, which PyTorch refuses too (whether the "
                   "write should be followed is ambiguous): make the view and write either both under no_grad or "
                   "both outside it", SHAPE(v, b));
  if (!root->grad_fn->view_bwd)
    return err_set(ZORCH_ERR_INTERNAL, "autograd: the history of a view's base is not a write's");
  ag_view_args a;
  ag_geom_of(&a.base, root);
  ag_geom_of(&a.view, v);
  ag_node *n = node_for(v, AG_VIEW_NODE, root->grad_fn->view_bwd, 1, &root, &a, sizeof a);
  if (!n) return zorch_last_status();
  ag_node_release(v->grad_fn);
  v->grad_fn = n;
  v->requires_grad = true;
  v->base_gen = root->hist_gen;
  return ZORCH_OK;
}

void ag_node_free_saved(ag_node *n) {
  for (int i = 0; i < AG_MAX_SAVED; i++) {
    zorch_tensor_free(n->saved[i]);
    n->saved[i] = NULL;
  }
  if (n->free_args) {
    void (*f)(void *) = n->free_args;
    n->free_args = NULL;
    f(n->args);
  }
}

/* Iterative, so a long chain of nodes does not recurse once per node. */
void ag_node_release(ag_node *root) {
  if (!root) return;
  ag_node *small[64], **stack = small;
  size_t top = 0, cap = 64;
  stack[top++] = root;
  while (top) {
    ag_node *n = stack[--top];
    if (--n->refcount > 0) continue;
    for (int i = 0; i < n->nin; i++) {
      zorch_tensor_free(n->in[i].leaf);
      ag_node *next = n->in[i].node;
      if (!next) continue;
      if (top == cap) {
        size_t ncap = cap * 2;
        ag_node **grown = malloc(ncap * sizeof *grown);
        if (!grown) { /* fall back to recursion rather than leak */
          ag_node_release(next);
          continue;
        }
        memcpy(grown, stack, top * sizeof *grown);
        if (stack != small) free(stack);
        stack = grown;
        cap = ncap;
      }
      stack[top++] = next;
    }
    ag_node_free_saved(n);
    zorch_tensor_free(n->gacc);
    ag_watch_release(n->watch);
    if (n->pre_release) n->pre_release(n->pre_ud);
    zmem_uncharge(n->mem, n->mem_bytes);
    free(n->in);
    free(n);
  }
  if (stack != small) free(stack);
}

void ag_set_pre_hook(zorch_tensor *t, zorch_status (*fn)(void *ud), void *ud, void (*retain)(void *ud),
                     void (*release)(void *ud)) {
  if (!t || !t->grad_fn) return;
  ag_node *n = t->grad_fn;
  if (n->pre_release) n->pre_release(n->pre_ud);
  if (retain) retain(ud);
  n->pre_hook = fn;
  n->pre_ud = ud;
  n->pre_release = release;
}

/* ---- leaf properties ---------------------------------------------------------- */
zorch_status zorch_set_requires_grad(zorch_tensor *t, bool on) {
  if (!t) return err_set(ZORCH_ERR_ARG, "requires_grad: tensor is NULL");
  if (!tensor_is_leaf(t))
    return err_set(ZORCH_ERR_STATE,
                   "requires_grad: only leaf tensors can change requires_grad; use detach()");
  if (on && !zorch_dtype_is_float(t->dtype))
    return err_set(ZORCH_ERR_DTYPE,
                   "requires_grad: only floating-point tensors can require grad, got %s",
                   zorch_dtype_name(t->dtype));
  t->requires_grad = on;
  if (on && t->base) { /* a leaf that requires grad is the root of its views' histories */
    zorch_tensor *b = t->base;
    t->base = NULL;
    zorch_tensor_free(b);
  }
  return ZORCH_OK;
}

bool zorch_requires_grad(const zorch_tensor *t) { return t && tensor_requires_grad(t); }
bool zorch_is_leaf(const zorch_tensor *t) { return t && tensor_is_leaf(t); }
zorch_tensor *zorch_grad(const zorch_tensor *t) { return t ? t->grad : NULL; }
const char *zorch_grad_fn_name(const zorch_tensor *t) {
  if (t && tensor_view_stale(t)) return AG_VIEW_NODE; /* the name its grad_fn gets when next used */
  return t && t->grad_fn ? t->grad_fn->name : NULL;
}

zorch_status zorch_set_grad(zorch_tensor *t, zorch_tensor *grad) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (!t) return err_set(ZORCH_ERR_ARG, "set_grad: tensor is NULL");
  if (grad && !tensor_same_shape(t, grad))
    return err_set(ZORCH_ERR_SHAPE, "set_grad: gradient shape %s does not match tensor shape %s",
                   SHAPE(grad, a), SHAPE(t, b));
  if (grad && grad->dtype != t->dtype)
    return err_set(ZORCH_ERR_DTYPE, "set_grad: gradient dtype %s does not match tensor dtype %s",
                   zorch_dtype_name(grad->dtype), zorch_dtype_name(t->dtype));
  if (grad && (grad->st->device.type != t->st->device.type || grad->st->device.index != t->st->device.index)) {
    char da[32], db[32];
    zorch_device_name(grad->st->device, da, sizeof da);
    zorch_device_name(t->st->device, db, sizeof db);
    return err_set(ZORCH_ERR_DEVICE, "set_grad: gradient device %s does not match tensor device %s", da, db);
  }
  /* kept as a fresh alias (same memory, no gradient or history of its own):
     holding grad itself, t.grad = t or a.grad = b, b.grad = a would be a
     reference cycle that nothing ever frees */
  zorch_tensor *keep = NULL;
  if (grad && !(keep = tensor_detached(grad))) return zorch_last_status();
  zorch_tensor_free(t->grad);
  t->grad = keep;
  return ZORCH_OK;
}

zorch_tensor *zorch_detach(zorch_tensor *t) {
  if (!t) return err_null(ZORCH_ERR_ARG, "detach: tensor is NULL");
  return tensor_detached(t);
}

zorch_grad_hook zorch_get_grad_hook(const zorch_tensor *leaf, void **ud) {
  if (ud) *ud = leaf ? leaf->hook.ud : NULL;
  return leaf ? leaf->hook.fn : NULL;
}

zorch_status zorch_set_grad_hook(zorch_tensor *leaf, zorch_grad_hook fn, void *ud) {
  if (!leaf) return err_set(ZORCH_ERR_ARG, "set_grad_hook: tensor is NULL");
  if (!tensor_is_leaf(leaf))
    return err_set(ZORCH_ERR_STATE, "set_grad_hook: hooks go on leaf tensors only");
  leaf->hook.fn = fn;
  leaf->hook.ud = ud;
  return ZORCH_OK;
}
