/* tensor.h: the tensor and storage structures shared by vm/ and ops/. */
#ifndef ZORCH_VM_TENSOR_H
#define ZORCH_VM_TENSOR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "zorch.h"

/* Counts the writes made in grad mode to a storage that a recorded op filled.
   That op's node and the nodes that read the values note the count, and the
   backward refuses a gradient through values overwritten in between through
   a handle whose history does not record the write (detach(), an alias),
   so that the history would no longer describe them.
   Shared by the storage and those nodes, so it outlives either. */
typedef struct ag_watch {
  int refcount;
  uint32_t writes;
} ag_watch;

/* A reference-counted allocation on one device. `deleter` frees memory zorch
   does not own (wrapped host buffers); otherwise the device's backend frees it. */
typedef struct storage {
  int refcount;
  void *data;
  size_t nbytes;
  zorch_device device;
  void (*deleter)(void *data, void *ctx);
  void *deleter_ctx;
  bool borrowed; /* wrapped without a deleter: never freed by zorch */
  uint32_t version; /* bumped by each in-place write; autograd checks saved tensors against it */
  ag_watch *watch;  /* made when a recorded op fills the storage, else NULL */
  struct zmem_account *mem; /* the account charged with nbytes (state.h), or NULL */
} storage;

typedef struct ag_node ag_node;

typedef struct grad_hook {
  zorch_grad_hook fn;
  void *ud;
} grad_hook;

/* A view: shape, strides (elements) and offset over a storage. */
struct zorch_tensor {
  int refcount;
  int ndim;
  zorch_dtype dtype;
  bool requires_grad;
  bool view_nograd; /* a view made with grad mode off: PyTorch refuses a recorded write through it */
  int64_t shape[ZORCH_MAX_DIMS];
  int64_t strides[ZORCH_MAX_DIMS];
  int64_t offset;
  storage *st;
  /* autograd */
  zorch_tensor *grad; /* accumulated gradient (leaves) */
  ag_node *grad_fn;   /* the node that made this tensor (non-leaves) */
  grad_hook hook;
  int ag_pending;     /* edges still to deliver in the running backward pass */
  /* views (PyTorch's): a view op's result holds the tensor at the root of
     its chain of views (a reference); a recorded write through the root or
     any of its views gives the root a new history (hist_gen counts them) and
     each view's grad_fn is made again from it when next used (base_gen: the
     root's hist_gen the view's grad_fn follows) */
  uint32_t base_gen;
  zorch_tensor *base;
  uint32_t hist_gen;
  struct zmem_account *mem; /* charged for this handle (a VM's tensor_limit), or NULL */
};

/* The root whose history a view follows, or NULL for a tensor that is no view
   (or a view whose root was since moved to other memory, by a ZeRO rebind). */
static inline zorch_tensor *tensor_view_root(const zorch_tensor *t) {
  return t->base && t->base->st == t->st ? t->base : NULL;
}
/* A view whose root's history was rebased by a write since its grad_fn was
   made: ag_view_sync makes it again. */
static inline bool tensor_view_stale(const zorch_tensor *t) {
  const zorch_tensor *b = tensor_view_root(t);
  return b && t->base_gen != b->hist_gen && b->grad_fn;
}
/* requires_grad and leafness as they will be once a stale view is synced. */
static inline bool tensor_requires_grad(const zorch_tensor *t) { return t->requires_grad || tensor_view_stale(t); }
static inline bool tensor_is_leaf(const zorch_tensor *t) { return !t->grad_fn && !tensor_view_stale(t); }
/* Makes v a view of t for autograd (v shares t's storage): v holds t's root. */
void tensor_set_view_of(zorch_tensor *v, zorch_tensor *t);
/* Whether t is the only handle on its memory (a view and the root only it
   holds count as one), so that it can be taken over rather than copied. */
bool tensor_owns_storage(const zorch_tensor *t);

/* Called by every in-place op before it writes t: refuses a t whose elements
   share memory (a stride-0 dim of size > 1, as `expand` makes), then bumps the
   version of t's storage, so that a backward that saved a view of it fails
   rather than using the new values, and in grad mode its watch's writes. */
zorch_status tensor_mark_written(const char *op, zorch_tensor *t);

/* A new reference to s's watch, made first when `make`; NULL when s has none
   and make is false, or on failure to allocate (then with the error set). */
ag_watch *storage_watch(storage *s, bool make);
void ag_watch_release(ag_watch *w);

/* Frees a device storage's memory but keeps the storage, so its views stay
   valid handles (ops refuse them, see check_arg); restore allocates it again
   with undefined contents. For memory zorch owns only (the ZeRO engine's stage 3
   parameter groups on GPUs). */
void storage_drop_data(storage *s);
zorch_status storage_restore_data(storage *s);

/* Whether freed tensors, storages and small blocks are kept for reuse (off in
   sanitizer builds and with ZORCH_ALLOC_CACHE=0, so memory checkers see every
   free). */
bool alloc_cache_enabled(void);

/* Element size per dtype. */
extern const size_t dtype_sizes[ZORCH_NDTYPES];

/* ---- construction (no autograd) -------------------------------------------- */
/* New contiguous tensor with uninitialised memory; checks sizes for overflow. */
zorch_tensor *tensor_new(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev);
zorch_tensor *tensor_new_like(const zorch_tensor *t);
/* A new handle over t's storage with the given geometry. */
zorch_tensor *tensor_alias(const zorch_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset);
/* Points t at `base`'s storage from element `offset` on, contiguous in t's
   shape and with base's dtype (the ZeRO engine makes parameters views of its
   flat buffer). */
void tensor_rebind(zorch_tensor *t, const zorch_tensor *base, int64_t offset);
/* Storage-sharing handle with no autograd history (what nodes save). */
zorch_tensor *tensor_detached(const zorch_tensor *t);
/* Whether a shape's element count and contiguous strides fit in int64 (every
   tensor's shape does: tensor_new and tensor_alias refuse others). */
bool shape_fits(int ndim, const int64_t *shape);
/* The element count; INT64_MAX for a shape that fails shape_fits. */
int64_t shape_numel(int ndim, const int64_t *shape);
void shape_contig_strides(int ndim, const int64_t *shape, int64_t *strides);
bool tensor_same_shape(const zorch_tensor *a, const zorch_tensor *b);
static inline char *tensor_ptr(const zorch_tensor *t) {
  return (char *)t->st->data + t->offset * (int64_t)dtype_sizes[t->dtype];
}
/* Normalises a possibly negative dim; `extra` allows ndim+extra (unsqueeze). */
zorch_status dim_wrap(const char *op, int dim, int ndim, int extra, int *out);
/* Broadcasts two shapes (NumPy rules). */
zorch_status shape_broadcast(const char *op, int na, const int64_t *sa, int nb,
                             const int64_t *sb, int *nout, int64_t *out);
zorch_dtype dtype_promote(zorch_dtype a, zorch_dtype b);
/* Converts a dtype to the float type used for math on it (ints -> f32). */
zorch_dtype dtype_to_float(zorch_dtype dt);
/* Shape text of a tensor, for messages. */
#define SHAPE(t, buf) err_shape_str((t)->ndim, (t)->shape, (buf), sizeof(buf))
/* Checks a and b are on one device. */
zorch_status check_same_device(const char *op, const zorch_tensor *a, const zorch_tensor *b);
zorch_status check_arg(const char *op, const char *arg, const zorch_tensor *t);
#endif
