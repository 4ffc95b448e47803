/* node.h: the dynamic tape's nodes. Each op that sees an input requiring grad
   records a node on its output; the backward pass (ops/autograd/backward.c)
   walks the nodes once, in dependency order, and frees what they saved unless
   the graph is retained. */
#ifndef ZORCH_VM_CORE_NODE_H
#define ZORCH_VM_CORE_NODE_H
#include "tensor.h"

#define AG_MAX_SAVED 8

/* Where an input's gradient goes, and the input's shape and dtype so that the
   engine can sum broadcast gradients and convert dtypes for every op alike. */
typedef struct {
  ag_node *node;      /* the input's own node (non-leaf), or */
  zorch_tensor *leaf; /* the input itself (leaf requiring grad), or neither */
  int ndim;
  int64_t shape[ZORCH_MAX_DIMS];
  zorch_dtype dtype;
  uint32_t read_at; /* the input's watch count when this node read it (node->watch) */
} ag_edge;

/* Fills gin[i] (new references; NULL means zero) for each input from g. Runs with
   grad mode off. */
typedef zorch_status (*ag_backward_fn)(ag_node *n, zorch_tensor *g, zorch_tensor **gin);

struct ag_node {
  int refcount;
  const char *name;
  ag_backward_fn backward;
  int nin;
  ag_edge *in;
  int nsaved;
  zorch_tensor *saved[AG_MAX_SAVED];
  uint32_t saved_version[AG_MAX_SAVED]; /* each saved storage's version when recorded */
  void *args;                        /* the op's typed arguments (ag_record), or NULL */
  /* drops what args hold beyond their bytes (a Lua function of a custom node),
     once, with the saved tensors */
  void (*free_args)(void *args);
  bool released;                     /* saved tensors freed by a backward pass */
  /* the watch of the storage of the output (a view's: its base's), and its
     count when the output was made; NULL for a storage no recorded op filled */
  ag_watch *watch;
  uint32_t made_at;
  /* runs before the node's backward (ZeRO stage 3 gathers parameters here) */
  zorch_status (*pre_hook)(void *ud);
  void *pre_ud;
  void (*pre_release)(void *ud); /* drops the node's hold on pre_ud */
  /* a write's node on a root: the backward of its views' nodes made again
     from it (ag_view_sync), from ops/def */
  ag_backward_fn view_bwd;
  struct zmem_account *mem; /* charged mem_bytes for this node (a VM's tensor_limit), or NULL */
  size_t mem_bytes;
  /* scratch of a running backward pass */
  zorch_tensor *gacc;
  int deps;
  bool visited;
};

/* True when grad mode is on and some input requires grad. */
bool ag_needed(int n, zorch_tensor *const *in);
/* Records a node named `name` on `out` for inputs `in`, saving `save`
   (detached aliases, so saving an output makes no cycle) and copying `nargs`
   bytes of `args`, the op's arguments as a struct of its own (NULL, 0 for
   none), which the backward reads with AG_ARGS. Returns out, or frees out and
   returns NULL on failure. */
zorch_tensor *ag_record(zorch_tensor *out, const char *name, ag_backward_fn fn, int nin,
                        zorch_tensor *const *in, int nsave, zorch_tensor *const *save,
                        const void *args, size_t nargs);
#define AG_ARGS(n, type) ((const type *)(n)->args)
/* An in-place write recorded: ag_write_node makes, before the write, the node
   of t's values after it (inputs: t's history before it, and src when src is
   not NULL); ag_write_install then makes it t's history, once the write is
   done. Readers from before the write keep the old node. */
ag_node *ag_write_node(zorch_tensor *t, zorch_tensor *src, const char *name, ag_backward_fn fn, const void *args,
                       size_t nargs);
/* Also moves t's views on to the new history (t is the root written through
   itself or a view). */
void ag_write_install(zorch_tensor *t, ag_node *n);
/* A tensor's geometry over its storage, in elements. */
typedef struct {
  int ndim;
  int64_t shape[ZORCH_MAX_DIMS], strides[ZORCH_MAX_DIMS], offset;
} ag_geom;
void ag_geom_of(ag_geom *g, const zorch_tensor *t);
/* The arguments of a view's node made again from its root's history: the
   root's geometry and the view's, over the one storage. */
typedef struct {
  ag_geom base, view;
} ag_view_args;
#define AG_VIEW_NODE "AsStridedBackward"
/* Makes a stale view's grad_fn again (AG_VIEW_NODE, from its root's history,
   as PyTorch's as_strided view replay); nothing for any other tensor. */
zorch_status ag_view_sync(zorch_tensor *v);
/* True when input i of the node needs a gradient. */
static inline bool ag_wants(const ag_node *n, int i) {
  return n->in[i].node || n->in[i].leaf;
}
void ag_node_release(ag_node *n);
/* Frees the tensors a node saved (after its backward ran). */
void ag_node_free_saved(ag_node *n);
/* Sets the pre-backward hook of the node that made t (no-op for leaves). The node
   holds ud until it is freed, then calls release(ud) (which may be NULL);
   `retain(ud)` is called when the hook is set. */
void ag_set_pre_hook(zorch_tensor *t, zorch_status (*fn)(void *ud), void *ud, void (*retain)(void *ud),
                     void (*release)(void *ud));
#endif
