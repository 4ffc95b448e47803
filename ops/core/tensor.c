/* tensor.c: storage, tensor handles, reference counting and geometry helpers. */
#include "tensor.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "node.h"
#include "state.h"

bool alloc_cache_enabled(void) {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("ZORCH_ALLOC_CACHE");
    on = !(v && v[0] == '0');
  }
  return on;
#endif
}

/* Per-thread free lists of tensor and storage structs: small ops make and drop
   several handles each, and Lua's collector frees a script's temporaries
   hundreds at a time. */
#define STRUCT_CACHE 1024
typedef struct {
  void *v[STRUCT_CACHE];
  int n;
} struct_cache;
static _Thread_local struct_cache tensor_cache, storage_cache, watch_cache;

static void *cache_get(struct_cache *c, size_t size) {
  if (c->n == 0) return calloc(1, size);
  void *p = c->v[--c->n];
  memset(p, 0, size);
  return p;
}

static void cache_put(struct_cache *c, void *p) {
  if (alloc_cache_enabled() && c->n < STRUCT_CACHE) c->v[c->n++] = p;
  else free(p);
}

#define tensor_struct_new() ((zorch_tensor *)cache_get(&tensor_cache, sizeof(zorch_tensor)))
#define tensor_struct_free(t) cache_put(&tensor_cache, (t))
#define storage_struct_new() ((storage *)cache_get(&storage_cache, sizeof(storage)))
#define storage_struct_free(s) cache_put(&storage_cache, (s))

ag_watch *storage_watch(storage *s, bool make) {
  if (!s->watch && make) {
    if (!(s->watch = cache_get(&watch_cache, sizeof(ag_watch)))) return err_null(ZORCH_ERR_OOM, "out of memory");
    s->watch->refcount = 1;
  }
  if (s->watch) s->watch->refcount++;
  return s->watch;
}

void ag_watch_release(ag_watch *w) {
  if (w && --w->refcount == 0) cache_put(&watch_cache, w);
}

/* Charges nbytes to a tensor byte account (a VM's tensor_limit), taking a
   reference to it; false, with the error set, past its limit. */
static _Thread_local bool mem_refused; /* the last storage_new failed on its account's limit */
static bool mem_charge(zmem_account *a, size_t nbytes) {
  size_t used = atomic_fetch_add(&a->used, nbytes);
  if ((used + nbytes < used || used + nbytes > a->limit) && a->reclaim && !a->reclaiming) {
    atomic_fetch_sub(&a->used, nbytes); /* collect the VM's garbage, then try again */
    a->reclaiming = true;
    a->reclaim(a->reclaim_ud);
    a->reclaiming = false;
    used = atomic_fetch_add(&a->used, nbytes);
  }
  if (used + nbytes < used || used + nbytes > a->limit) {
    atomic_fetch_sub(&a->used, nbytes);
    mem_refused = true;
    err_set(ZORCH_ERR_OOM, "tensor memory limit of %zu bytes reached (%zu in use, %zu more asked)", a->limit,
            used, nbytes);
    return false;
  }
  atomic_fetch_add(&a->refs, 1);
  return true;
}

static void mem_uncharge(zmem_account *a, size_t nbytes) {
  if (!a) return;
  atomic_fetch_sub(&a->used, nbytes);
  zmem_account_release(a);
}

bool zmem_charge_current(size_t nbytes, zmem_account **acct) {
  zmem_account *a = zstate_get()->mem;
  *acct = NULL;
  if (a && !mem_charge(a, nbytes)) return false;
  *acct = a;
  return true;
}
void zmem_uncharge(zmem_account *a, size_t nbytes) { mem_uncharge(a, nbytes); }

/* Bytes of host tensor storage held now and at most since the last reset,
   for every thread (checkpointing's and offload's memory claims are checked
   with these). */
static _Atomic size_t host_in_use, host_peak;
static void host_count_add(size_t n) {
  size_t now = atomic_fetch_add(&host_in_use, n) + n;
  size_t peak = atomic_load(&host_peak);
  while (now > peak && !atomic_compare_exchange_weak(&host_peak, &peak, now)) {
  }
}
static void host_count_sub(size_t n) { atomic_fetch_sub(&host_in_use, n); }

void zorch_host_memory_stats(size_t *in_use, size_t *peak) {
  if (in_use) *in_use = atomic_load(&host_in_use);
  if (peak) *peak = atomic_load(&host_peak);
}
void zorch_host_memory_reset_peak(void) { atomic_store(&host_peak, atomic_load(&host_in_use)); }

static storage *storage_new(size_t nbytes, zorch_device dev) {
  const device_mem *m = device_mem_get(dev.type);
  if (!m || dev.index < 0 || dev.index >= m->count()) {
    char name[32];
    int n = m ? m->count() : 0;
    zorch_device_name(dev, name, sizeof name);
    const char *why = device_why(dev.type);
    if (!m && dev.type != ZORCH_CUDA) return err_null(ZORCH_ERR_DEVICE, "device %s: backend not built", name);
    if (!m && *why) return err_null(ZORCH_ERR_DEVICE, "device %s: not available: %s", name, why);
    return err_null(ZORCH_ERR_DEVICE, "device %s: not available (%d CUDA device%s present)%s%s", name, n,
                    n == 1 ? "" : "s", *why ? ": " : "", why);
  }
  zmem_account *mem = zstate_get()->mem;
  mem_refused = false;
  if (mem && !mem_charge(mem, nbytes)) return NULL;
  storage *s = storage_struct_new();
  if (!s) {
    mem_uncharge(mem, nbytes);
    return err_null(ZORCH_ERR_OOM, "out of memory");
  }
  s->data = m->alloc(dev.index, nbytes);
  if (!s->data) {
    mem_uncharge(mem, nbytes);
    storage_struct_free(s);
    /* a device allocator says itself what it was asked and what it holds */
    return dev.type == ZORCH_CPU ? err_null(ZORCH_ERR_OOM, "out of memory allocating %zu bytes", nbytes) : NULL;
  }
  s->refcount = 1;
  s->nbytes = nbytes;
  s->device = dev;
  s->mem = mem;
  if (dev.type == ZORCH_CPU) host_count_add(nbytes);
  return s;
}

static void storage_release(storage *s) {
  if (!s || --s->refcount > 0) return;
  if (s->deleter) {
    s->deleter(s->data, s->deleter_ctx);
  } else if (!s->borrowed && s->data) {
    device_mem_get(s->device.type)->free(s->device.index, s->data);
    if (s->device.type == ZORCH_CPU) host_count_sub(s->nbytes);
  }
  mem_uncharge(s->mem, s->nbytes);
  ag_watch_release(s->watch);
  storage_struct_free(s);
}

void storage_drop_data(storage *s) {
  if (s->deleter || s->borrowed || !s->data) return;
  device_mem_get(s->device.type)->free(s->device.index, s->data);
  s->data = NULL;
  if (s->device.type == ZORCH_CPU) host_count_sub(s->nbytes);
}

zorch_status storage_restore_data(storage *s) {
  if (s->data) return ZORCH_OK;
  if (!(s->data = device_mem_get(s->device.type)->alloc(s->device.index, s->nbytes)))
    return s->device.type == ZORCH_CPU ? err_set(ZORCH_ERR_OOM, "out of memory allocating %zu bytes", s->nbytes)
                                       : zorch_last_status();
  if (s->device.type == ZORCH_CPU) host_count_add(s->nbytes);
  return ZORCH_OK;
}

/* The largest element count (and extent) a shape may have: its bytes, at
   up to 16 per element, still fit an int64_t. */
#define SHAPE_MAX_ELEMS (INT64_MAX / 16)

/* True when the shape's element count and the product of its sizes with
   zeros counted as ones (what its contiguous strides reach) both fit
   SHAPE_MAX_ELEMS: every tensor's shape does, so numel, nbytes and strides
   are computed without overflow. A zero-size tensor may have huge dims as
   long as the same shape with its zeros made ones would fit. */
bool shape_fits(int ndim, const int64_t *shape) {
  int64_t extent = 1;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(extent, shape[i] > 1 ? shape[i] : 1, &extent) ||
        extent > SHAPE_MAX_ELEMS)
      return false;
  return true;
}

int64_t shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX; /* only for shapes that fail shape_fits */
  return n;
}

void shape_contig_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    /* saturates for a shape that fails shape_fits, which tensor_alias refuses */
    if (__builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s)) s = INT64_MAX;
  }
}

/* Validates a shape and returns its element count, or -1 with an error set. */
static int64_t shape_check(const char *op, int ndim, const int64_t *shape, zorch_dtype dt) {
  char buf[ERR_SHAPE_BUF];
  if (ndim < 0 || ndim > ZORCH_MAX_DIMS) {
    err_set(ZORCH_ERR_ARG, "%s: %d dimensions (at most %d)", op, ndim, ZORCH_MAX_DIMS);
    return -1;
  }
  if ((unsigned)dt >= ZORCH_NDTYPES) {
    err_set(ZORCH_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dt);
    return -1;
  }
  if (ndim > 0 && !shape) {
    err_set(ZORCH_ERR_ARG, "%s: shape is NULL", op);
    return -1;
  }
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      err_set(ZORCH_ERR_SHAPE, "%s: negative size in shape %s", op,
              err_shape_str(ndim, shape, buf, sizeof buf));
      return -1;
    }
  }
  if (!shape_fits(ndim, shape)) {
    err_set(ZORCH_ERR_OOM, "%s: shape %s is too large (its element count or strides overflow 64 bits)", op,
            err_shape_str(ndim, shape, buf, sizeof buf));
    return -1;
  }
  return shape_numel(ndim, shape);
}

static zorch_tensor *tensor_handle(storage *s, int ndim, const int64_t *shape,
                                   const int64_t *strides, int64_t offset, zorch_dtype dt) {
  if (!shape_fits(ndim, shape)) {
    char buf[ERR_SHAPE_BUF];
    return err_null(ZORCH_ERR_SHAPE, "shape %s is too large (its element count or strides overflow 64 bits)",
                    err_shape_str(ndim, shape, buf, sizeof buf));
  }
  zmem_account *mem;
  if (!zmem_charge_current(sizeof(zorch_tensor), &mem)) return NULL;
  zorch_tensor *t = tensor_struct_new();
  if (!t) {
    mem_uncharge(mem, sizeof(zorch_tensor));
    return err_null(ZORCH_ERR_OOM, "out of memory");
  }
  t->refcount = 1;
  t->mem = mem;
  t->ndim = ndim;
  t->dtype = dt;
  if (ndim) {
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
  }
  t->offset = offset;
  t->st = s;
  s->refcount++;
  return t;
}

zorch_tensor *tensor_new(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev) {
  int64_t n = shape_check("empty", ndim, shape, dt);
  if (n < 0) return NULL;
  storage *s = storage_new((size_t)n * dtype_sizes[dt], dev);
  if (!s) {
    if (zorch_last_status() == ZORCH_ERR_OOM && !mem_refused) {
      char buf[ERR_SHAPE_BUF], why[256] = "";
      /* a device's allocator says what it holds and what is free: keep that */
      if (dev.type != ZORCH_CPU) snprintf(why, sizeof why, " (%s)", zorch_last_error());
      err_set(ZORCH_ERR_OOM, "out of memory allocating %lld bytes for a %s tensor of shape %s%s",
              (long long)(n * (int64_t)dtype_sizes[dt]), zorch_dtype_name(dt),
              err_shape_str(ndim, shape, buf, sizeof buf), why);
    }
    return NULL;
  }
  int64_t strides[ZORCH_MAX_DIMS];
  shape_contig_strides(ndim, shape, strides);
  zorch_tensor *t = tensor_handle(s, ndim, shape, strides, 0, dt);
  storage_release(s);
  return t;
}

zorch_tensor *tensor_new_like(const zorch_tensor *t) {
  return tensor_new(t->ndim, t->shape, t->dtype, t->st->device);
}

zorch_tensor *tensor_alias(const zorch_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset) {
  return tensor_handle(t->st, ndim, shape, strides, offset, t->dtype);
}

void tensor_rebind(zorch_tensor *t, const zorch_tensor *base, int64_t offset) {
  base->st->refcount++;
  storage_release(t->st);
  t->st = base->st;
  t->dtype = base->dtype;
  t->offset = offset;
  shape_contig_strides(t->ndim, t->shape, t->strides);
}

zorch_status tensor_mark_written(const char *op, zorch_tensor *t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->strides[i] == 0 && t->shape[i] > 1)
      return err_set(ZORCH_ERR_ARG, "%s: unsupported operation: more than one element of the written-to "
                     "tensor refers to a single memory location (dim " ERR_IX("%d") " has stride 0); "
                     "clone() the tensor before writing to it", op, i);
  t->st->version++;
  if (t->st->watch && zorch_is_grad_enabled()) t->st->watch->writes++;
  return ZORCH_OK;
}

zorch_tensor *tensor_detached(const zorch_tensor *t) {
  return tensor_alias(t, t->ndim, t->shape, t->strides, t->offset);
}

bool tensor_same_shape(const zorch_tensor *a, const zorch_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

zorch_status dim_wrap(const char *op, int dim, int ndim, int extra, int *out) {
  int n = ndim + extra;
  int lo = n > 0 ? -n : -1, hi = n > 0 ? n - 1 : 0;
  if (dim < lo || dim > hi) {
    if (lo == -1)
      return err_set(ZORCH_ERR_ARG, "%s: dim " ERR_IX("%d") " out of range for a %d-d tensor "
                     "(expected " ERR_IX("0") " or -1)", op, dim, ndim);
    return err_set(ZORCH_ERR_ARG, "%s: dim " ERR_IX("%d") " out of range for a %d-d tensor "
                   "(expected " ERR_IX("0") ".." ERR_IX("%d") " or %d..-1)", op, dim, ndim, hi, lo);
  }
  *out = dim < 0 ? dim + (n > 0 ? n : 1) : dim;
  return ZORCH_OK;
}

zorch_status shape_broadcast(const char *op, int na, const int64_t *sa, int nb,
                             const int64_t *sb, int *nout, int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t a = i < n - na ? 1 : sa[i - (n - na)];
    int64_t b = i < n - nb ? 1 : sb[i - (n - nb)];
    if (a != b && a != 1 && b != 1) {
      char ba[ERR_SHAPE_BUF], bb[ERR_SHAPE_BUF];
      return err_set(ZORCH_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast (dim " ERR_IX("%d") ": %lld vs %lld)",
                     op, err_shape_str(na, sa, ba, sizeof ba), err_shape_str(nb, sb, bb, sizeof bb),
                     i, (long long)a, (long long)b);
    }
    out[i] = a == 1 ? b : a;
  }
  *nout = n;
  return ZORCH_OK;
}

zorch_status check_same_device(const char *op, const zorch_tensor *a, const zorch_tensor *b) {
  if (a->st->device.type != b->st->device.type || a->st->device.index != b->st->device.index) {
    char da[32], db[32];
    zorch_device_name(a->st->device, da, sizeof da);
    zorch_device_name(b->st->device, db, sizeof db);
    return err_set(ZORCH_ERR_DEVICE, "%s: tensors on different devices (%s and %s)", op, da, db);
  }
  return ZORCH_OK;
}

zorch_status check_arg(const char *op, const char *arg, const zorch_tensor *t) {
  if (!t) return err_set(ZORCH_ERR_ARG, "%s: argument '%s' is NULL", op, arg);
  if (!t->st->data && t->st->nbytes)
    return err_set(ZORCH_ERR_STATE, "%s: argument '%s' has no memory now: ZeRO stage 3 released it (a "
                   "parameter is gathered only inside its module's forward and backward)", op, arg);
  return ZORCH_OK;
}

/* ---- public handle API ----------------------------------------------------- */
zorch_tensor *zorch_tensor_retain(zorch_tensor *t) {
  if (t) t->refcount++;
  return t;
}

static void __attribute__((noinline)) tensor_free_rare(zorch_tensor *t) { zorch_tensor_free(t); }

void zorch_tensor_free(zorch_tensor *t) {
  /* a chain of gradients (t.grad.grad...) or of views' roots goes in a loop,
     not one call deeper each (a view with a gradient, rare, takes a call) */
  while (t && --t->refcount == 0) {
    zorch_tensor *next = t->grad, *base = t->base;
    storage_release(t->st);
    ag_node_release(t->grad_fn);
    mem_uncharge(t->mem, sizeof(zorch_tensor));
    tensor_struct_free(t);
    if (base && next) tensor_free_rare(base);
    t = next ? next : base;
  }
}

void tensor_set_view_of(zorch_tensor *v, zorch_tensor *t) {
  zorch_tensor *root = tensor_view_root(t);
  if (!root) root = t;
  v->base = zorch_tensor_retain(root);
  v->base_gen = root->hist_gen;
  v->view_nograd = !zorch_is_grad_enabled() || (root != t && t->view_nograd);
}

bool tensor_owns_storage(const zorch_tensor *t) {
  if (t->refcount != 1) return false;
  if (t->st->refcount == 1) return true;
  const zorch_tensor *b = tensor_view_root(t);
  return b && b->refcount == 1 && t->st->refcount == 2;
}

int zorch_tensor_refcount(const zorch_tensor *t) { return t ? t->refcount : 0; }
int zorch_tensor_ndim(const zorch_tensor *t) { return t->ndim; }
const int64_t *zorch_tensor_shape(const zorch_tensor *t) { return t->shape; }
const int64_t *zorch_tensor_strides(const zorch_tensor *t) { return t->strides; }
int64_t zorch_tensor_offset(const zorch_tensor *t) { return t->offset; }
int64_t zorch_tensor_numel(const zorch_tensor *t) { return shape_numel(t->ndim, t->shape); }
zorch_dtype zorch_tensor_dtype(const zorch_tensor *t) { return t->dtype; }
zorch_device zorch_tensor_device(const zorch_tensor *t) { return t->st->device; }
bool zorch_tensor_shares_storage(const zorch_tensor *a, const zorch_tensor *b) {
  return a && b && a->st == b->st;
}

bool zorch_tensor_is_contiguous(const zorch_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

void *zorch_tensor_data(const zorch_tensor *t) {
  if (!t || t->st->device.type != ZORCH_CPU) return NULL;
  return tensor_ptr(t);
}

static zorch_tensor *wrap(void *data, zorch_dtype dt, int ndim, const int64_t *shape,
                          const int64_t *strides, void (*deleter)(void *, void *), void *ctx) {
  int64_t n = shape_check("tensor_wrap", ndim, shape, dt);
  if (n < 0) return NULL;
  if (!data && n > 0) return err_null(ZORCH_ERR_ARG, "tensor_wrap: data is NULL");
  int64_t cs[ZORCH_MAX_DIMS];
  shape_contig_strides(ndim, shape, cs);
  /* the extent the strides reach, for the storage's size */
  int64_t extent = n > 0 ? 1 : 0;
  for (int i = 0; i < ndim && n > 0; i++) {
    int64_t st = strides ? strides[i] : cs[i];
    if (st < 0) return err_null(ZORCH_ERR_ARG, "tensor_wrap: negative stride at dim %d", i);
    int64_t reach;
    if (__builtin_mul_overflow(shape[i] - 1, st, &reach) || __builtin_add_overflow(extent, reach, &extent) ||
        extent > INT64_MAX / 16)
      return err_null(ZORCH_ERR_ARG, "tensor_wrap: the strides reach past 64-bit sizes at dim %d", i);
  }
  storage *s = storage_struct_new();
  if (!s) return err_null(ZORCH_ERR_OOM, "out of memory");
  s->refcount = 1;
  s->data = data;
  s->nbytes = (size_t)extent * dtype_sizes[dt];
  s->device = (zorch_device){ZORCH_CPU, 0};
  s->deleter = deleter;
  s->deleter_ctx = ctx;
  s->borrowed = deleter == NULL;
  zorch_tensor *t = tensor_handle(s, ndim, shape, strides ? strides : cs, 0, dt);
  storage_release(s);
  return t;
}

zorch_tensor *zorch_tensor_wrap(void *data, zorch_dtype dt, int ndim, const int64_t *shape,
                                const int64_t *strides) {
  return wrap(data, dt, ndim, shape, strides, NULL, NULL);
}

zorch_tensor *zorch_tensor_wrap_owned(void *data, zorch_dtype dt, int ndim,
                                      const int64_t *shape, const int64_t *strides,
                                      void (*deleter)(void *, void *), void *ctx) {
  return wrap(data, dt, ndim, shape, strides, deleter, ctx);
}

zorch_status zorch_wrap_dim(const char *op, int dim, int ndim, int extra, int *out) {
  if (!out || ndim < 0 || extra < 0)
    return err_set(ZORCH_ERR_ARG, "%s: zorch_wrap_dim: bad arguments", op ? op : "wrap_dim");
  return dim_wrap(op ? op : "wrap_dim", dim, ndim, extra, out);
}

uint32_t zorch_tensor_version(const zorch_tensor *t) { return t ? t->st->version : 0; }
