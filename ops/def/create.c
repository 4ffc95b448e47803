/* create.c: creation, copies, dtype and device conversion, element access. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/cudamod.h"
#include "../backend/math.h"
#include "ops.h"

static const zorch_device cpu_dev = {ZORCH_CPU, 0};

/* ---- creation ------------------------------------------------------------------- */
zorch_tensor *zorch_empty(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev) {
  backend_get(dev.type); /* starts a device backend (and its allocator) on first use */
  return tensor_new(ndim, shape, dt, dev);
}

zorch_tensor *zorch_full(int ndim, const int64_t *shape, double value, zorch_dtype dt,
                         zorch_device dev) {
  if (zorch_check_fill("full", dt, &value)) return NULL;
  return op_full(ndim, shape, value, dt, dev);
}

zorch_tensor *op_full(int ndim, const int64_t *shape, double value, zorch_dtype dt, zorch_device dev) {
  zorch_tensor *t = zorch_empty(ndim, shape, dt, dev);
  if (!t) return NULL;
  if (backend_of(t)->fill(t, value)) {
    zorch_tensor_free(t);
    return NULL;
  }
  return t;
}

zorch_tensor *zorch_zeros(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev) {
  return op_full(ndim, shape, 0, dt, dev);
}

zorch_tensor *zorch_ones(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev) {
  return op_full(ndim, shape, 1, dt, dev);
}

zorch_tensor *zorch_arange(double start, double end, double step, zorch_dtype dt,
                           zorch_device dev) {
  if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
    return err_null(ZORCH_ERR_ARG, "arange: start, end and step must be finite and step nonzero "
                                   "(got %g, %g, %g)", start, end, step);
  if ((end - start) / step > 1e15)
    return err_null(ZORCH_ERR_ARG, "arange: too many elements (%g to %g by %g)", start, end, step);
  double nd = ceil((end - start) / step);
  int64_t n = nd > 0 ? (int64_t)nd : 0;
  zorch_tensor *host = tensor_new(1, &n, ZORCH_F64, cpu_dev);
  if (!host) return NULL;
  double *p = (double *)tensor_ptr(host);
  for (int64_t i = 0; i < n; i++) p[i] = start + (double)i * step;
  zorch_tensor *c = op_cast(host, dt);
  zorch_tensor_free(host);
  if (!c || dev.type == ZORCH_CPU) return c;
  zorch_tensor *d = zorch_to_device(c, dev);
  zorch_tensor_free(c);
  return d;
}

/* The integers [start, end) by step as int64 (2^53 and beyond exact), then
   converted to dt and moved to dev. The count is taken in uint64_t, where
   end - start cannot overflow. */
zorch_tensor *zorch_arange_i64(int64_t start, int64_t end, int64_t step, zorch_dtype dt, zorch_device dev) {
  if (step == 0) return err_null(ZORCH_ERR_ARG, "arange: step must be nonzero");
  uint64_t span = 0, by = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
  if (step > 0 && end > start) span = (uint64_t)end - (uint64_t)start;
  if (step < 0 && start > end) span = (uint64_t)start - (uint64_t)end;
  uint64_t count = span / by + (span % by != 0);
  if (count > (uint64_t)1e15)
    return err_null(ZORCH_ERR_ARG, "arange: too many elements (%lld to %lld by %lld)", (long long)start,
                    (long long)end, (long long)step);
  int64_t n = (int64_t)count;
  zorch_tensor *host = tensor_new(1, &n, ZORCH_I64, cpu_dev);
  if (!host) return NULL;
  int64_t *p = (int64_t *)tensor_ptr(host);
  for (int64_t i = 0; i < n; i++) p[i] = (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step);
  zorch_tensor *c = op_cast(host, dt);
  zorch_tensor_free(host);
  if (!c || dev.type == ZORCH_CPU) return c;
  zorch_tensor *d = zorch_to_device(c, dev);
  zorch_tensor_free(c);
  return d;
}

zorch_tensor *zorch_full_i64(int ndim, const int64_t *shape, int64_t value, zorch_dtype dt, zorch_device dev) {
  if (zorch_check_fill_i64("full", dt, &value)) return NULL;
  zorch_tensor *t = zorch_empty(ndim, shape, dt, dev);
  if (t && op_fill_i64_(t, value)) {
    zorch_tensor_free(t);
    return NULL;
  }
  return t;
}

static zorch_tensor *random_tensor(const char *op, int ndim, const int64_t *shape,
                                   zorch_dtype dt, zorch_device dev, zorch_generator *gen,
                                   bool normal) {
  if (!zorch_dtype_is_float(dt))
    return err_null(ZORCH_ERR_DTYPE, "%s: needs a floating-point dtype, got %s", op,
                    zorch_dtype_name(dt));
  zorch_tensor *t = zorch_empty(ndim, shape, dt, dev);
  if (!t) return NULL;
  uint64_t seed;
  int64_t n = zorch_tensor_numel(t);
  uint64_t off = rng_reserve(gen, zm_random_blocks(n, !normal && dt != ZORCH_F64), &seed);
  if (backend_of(t)->random(t, seed, off, normal)) {
    zorch_tensor_free(t);
    return NULL;
  }
  return t;
}

zorch_tensor *zorch_rand(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev,
                         zorch_generator *gen) {
  return random_tensor("rand", ndim, shape, dt, dev, gen, false);
}

zorch_tensor *zorch_randn(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev,
                          zorch_generator *gen) {
  return random_tensor("randn", ndim, shape, dt, dev, gen, true);
}

/* Whether every integer in [lo, hi] has a value in dt (PyTorch refuses a
   range that does not, rather than wrapping or clamping). */
static bool int_range_fits(zorch_dtype dt, int64_t lo, int64_t hi) {
  if (dt == ZORCH_U8) return lo >= 0 && hi <= 255;
  if (dt == ZORCH_I8) return lo >= -128 && hi <= 127;
  if (dt == ZORCH_I32) return lo >= INT32_MIN && hi <= INT32_MAX;
  return true;
}

/* Integers in [low, high): 64 random bits per element (two lanes, as the
   float64 uniforms), modulo the range; the kernel writes int64. */
zorch_tensor *zorch_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                            zorch_dtype dt, zorch_device dev, zorch_generator *gen) {
  if (high <= low)
    return err_null(ZORCH_ERR_ARG, "randint: high (%lld) must be greater than low (%lld)",
                    (long long)high, (long long)low);
  if (dt == ZORCH_BOOL || (unsigned)dt >= ZORCH_NDTYPES)
    return err_null(ZORCH_ERR_DTYPE, "randint: needs a numeric dtype, got %s",
                    (unsigned)dt < ZORCH_NDTYPES ? zorch_dtype_name(dt) : "an invalid one");
  if (!int_range_fits(dt, low, high - 1))
    return err_null(ZORCH_ERR_ARG, "randint: values from %lld to %lld do not all fit %s", (long long)low,
                    (long long)(high - 1), zorch_dtype_name(dt));
  zorch_tensor *t = zorch_empty(ndim, shape, ZORCH_I64, dev);
  if (!t) return NULL;
  uint64_t seed, off = rng_reserve(gen, zm_random_blocks(zorch_tensor_numel(t), 0), &seed);
  if (backend_of(t)->randint(t, seed, off, low, (uint64_t)high - (uint64_t)low)) {
    zorch_tensor_free(t);
    return NULL;
  }
  return op_recast(t, dt);
}

/* A random permutation of 0..n-1: the positions of n random 64-bit keys (the
   randint stream) in sorted order, ties in first order. Made on the host and
   copied, so every device gets the same permutation. */
zorch_tensor *zorch_randperm(int64_t n, zorch_dtype dt, zorch_device dev, zorch_generator *gen) {
  if (n < 0) return err_null(ZORCH_ERR_ARG, "randperm: n must be >= 0, got %lld", (long long)n);
  if (dt == ZORCH_BOOL || (unsigned)dt >= ZORCH_NDTYPES)
    return err_null(ZORCH_ERR_DTYPE, "randperm: needs a numeric dtype, got %s",
                    (unsigned)dt < ZORCH_NDTYPES ? zorch_dtype_name(dt) : "an invalid one");
  if (n > 0 && !int_range_fits(dt, 0, n - 1))
    return err_null(ZORCH_ERR_ARG, "randperm: values from 0 to %lld do not all fit %s", (long long)(n - 1),
                    zorch_dtype_name(dt));
  zorch_tensor *host = tensor_new(1, &n, ZORCH_I64, cpu_dev);
  if (!host) return NULL;
  int64_t *keys = malloc(2 * (size_t)(n ? n : 1) * sizeof(int64_t));
  if (!keys) {
    zorch_tensor_free(host);
    return err_null(ZORCH_ERR_OOM, "randperm: out of memory for %lld keys", (long long)n);
  }
  uint64_t seed, off = rng_reserve(gen, zm_random_blocks(n, 0), &seed);
  for (int64_t i = 0; i < n; i++) keys[i] = (int64_t)zm_random_u64(seed, off, i);
  int64_t *perm = (int64_t *)tensor_ptr(host);
  /* keys[0, n) are sorted by position; keys[n, 2n) is the sort's scratch */
  zm_sort_row_i64(keys, 1, n, 0, perm, keys + n);
  free(keys);
  zorch_tensor *c = op_recast(host, dt);
  if (!c || dev.type == ZORCH_CPU) return c;
  zorch_tensor *d = zorch_to_device(c, dev);
  zorch_tensor_free(c);
  return d;
}

zorch_tensor *zorch_from_buffer(const void *data, int ndim, const int64_t *shape,
                                zorch_dtype dt) {
  zorch_tensor *t = tensor_new(ndim, shape, dt, cpu_dev);
  if (!t) return NULL;
  size_t n = (size_t)zorch_tensor_numel(t) * dtype_sizes[dt];
  if (n && !data) {
    zorch_tensor_free(t);
    return err_null(ZORCH_ERR_ARG, "from_buffer: data is NULL");
  }
  if (n) memcpy(tensor_ptr(t), data, n);
  return t;
}

/* ---- copies ------------------------------------------------------------------------- */
/* The bytes [*lo, *hi) of t's storage that t's elements lie in (empty for no
   elements). */
static void storage_span(const zorch_tensor *t, int64_t *lo, int64_t *hi) {
  op_span(t->ndim, t->shape, t->strides, t->offset, lo, hi);
  int64_t es = (int64_t)dtype_sizes[t->dtype];
  *lo *= es;
  *hi *= es;
}

/* Whether copying src into dst elementwise could read an element after writing
   it: both in one storage with intersecting spans, unless src is dst's own
   geometry (each element then copies onto itself). */
static bool copy_overlaps(const zorch_tensor *dst, const zorch_tensor *src) {
  if (dst->st != src->st) return false;
  if (dst->dtype == src->dtype && dst->offset == src->offset && tensor_same_shape(dst, src) &&
      memcmp(dst->strides, src->strides, sizeof(int64_t) * (size_t)dst->ndim) == 0)
    return false;
  int64_t dlo, dhi, slo, shi;
  storage_span(dst, &dlo, &dhi);
  storage_span(src, &slo, &shi);
  return dlo < dhi && slo < shi && dlo < shi && slo < dhi;
}

/* ---- in-place writes that autograd sees (inplace.c records them) ---------------------------------- */
zorch_status zorch_copy_(zorch_tensor *dst, zorch_tensor *src) {
  if (check_arg("copy_", "dst", dst) || check_arg("copy_", "src", src)) return zorch_last_status();
  op_write w;
  if (op_write_begin("copy_", dst, dst, src, &w)) return zorch_last_status();
  return op_write_end(&w, op_copy_(dst, src));
}

zorch_status zorch_fill_(zorch_tensor *dst, double value) {
  if (check_arg("fill_", "dst", dst) || zorch_check_fill("fill_", dst->dtype, &value)) return zorch_last_status();
  op_write w;
  if (op_write_begin("fill_", dst, dst, NULL, &w)) return zorch_last_status();
  return op_write_end(&w, op_fill_(dst, value));
}

zorch_status zorch_fill_i64_(zorch_tensor *dst, int64_t value) {
  if (check_arg("fill_", "dst", dst) || zorch_check_fill_i64("fill_", dst->dtype, &value)) return zorch_last_status();
  op_write w;
  if (op_write_begin("fill_", dst, dst, NULL, &w)) return zorch_last_status();
  return op_write_end(&w, op_fill_i64_(dst, value));
}

zorch_status op_assign_index(zorch_tensor *t, int64_t index, zorch_tensor *src, bool integer, int64_t ivalue,
                             double value) {
  const char *op = "index assignment";
  if (check_arg(op, "tensor", t) || (src && check_arg(op, "value", src))) return zorch_last_status();
  if (!src && (integer ? zorch_check_fill_i64(op, t->dtype, &ivalue) : zorch_check_fill(op, t->dtype, &value)))
    return zorch_last_status();
  bool prev = zorch_set_grad_enabled(false); /* the part written is a plain view */
  zorch_tensor *part = zorch_select(t, 0, index);
  zorch_set_grad_enabled(prev);
  if (!part) return zorch_last_status();
  op_write w;
  zorch_status st = op_write_begin(op, t, part, src, &w);
  if (!st) st = op_write_end(&w, src ? op_copy_(part, src) : integer ? op_fill_i64_(part, ivalue) : op_fill_(part, value));
  zorch_tensor_free(part);
  return st;
}

/* An in-place op's result `src`, already computed, written into dst as PyTorch's
   in-place ops write: the result's dtype must cast to dst's by PyTorch's rule
   (no float into an integer tensor, nothing but bool into bool) and its shape
   broadcast to dst's, which keeps its shape; autograd records the write as
   copy_ does. */
zorch_status zorch_assign_(const char *op, zorch_tensor *dst, zorch_tensor *src) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (!op) op = "assign_";
  if (check_arg(op, "self", dst) || check_arg(op, "result", src)) return zorch_last_status();
  bool float_in = zorch_dtype_is_float(src->dtype), float_out = zorch_dtype_is_float(dst->dtype);
  if ((float_in && !float_out) || (src->dtype != ZORCH_BOOL && dst->dtype == ZORCH_BOOL))
    return err_set(ZORCH_ERR_DTYPE, "%s: the result's dtype %s cannot be written in place into a tensor of dtype %s "
                   "(PyTorch's casting rule); convert the tensor first, or use the op without _",
                   op, zorch_dtype_name(src->dtype), zorch_dtype_name(dst->dtype));
  int n;
  int64_t shape[ZORCH_MAX_DIMS];
  if (shape_broadcast(op, dst->ndim, dst->shape, src->ndim, src->shape, &n, shape) ||
      n != dst->ndim || memcmp(shape, dst->shape, sizeof(int64_t) * (size_t)n) != 0)
    return err_set(ZORCH_ERR_SHAPE, "%s: the result's shape %s does not fit the tensor of shape %s written in "
                   "place (an in-place op keeps its tensor's shape)", op, SHAPE(src, a), SHAPE(dst, b));
  for (int i = 0; i < dst->ndim; i++) /* an expanded dst: refused under op's name, not copy_'s */
    if (dst->strides[i] == 0 && dst->shape[i] > 1) return tensor_mark_written(op, dst);
  op_write w;
  if (op_write_begin(op, dst, dst, src, &w)) return zorch_last_status();
  return op_write_end(&w, op_copy_(dst, src));
}

zorch_status op_copy_(zorch_tensor *dst, zorch_tensor *src) {
  char a[ERR_SHAPE_BUF], b[ERR_SHAPE_BUF];
  if (check_arg("copy_", "dst", dst) || check_arg("copy_", "src", src)) return zorch_last_status();
  int n;
  int64_t shape[ZORCH_MAX_DIMS];
  if (shape_broadcast("copy_", dst->ndim, dst->shape, src->ndim, src->shape, &n, shape))
    return zorch_last_status();
  if (n != dst->ndim || memcmp(shape, dst->shape, sizeof(int64_t) * (size_t)n) != 0)
    return err_set(ZORCH_ERR_SHAPE, "copy_: source shape %s does not broadcast to %s",
                   SHAPE(src, a), SHAPE(dst, b));
  zorch_tensor *s = src;
  bool moved = false;
  if (src->st->device.type != dst->st->device.type || src->st->device.index != dst->st->device.index) {
    s = zorch_to_device(src, dst->st->device);
    if (!s) return zorch_last_status();
    moved = true;
  }
  if (!moved && copy_overlaps(dst, s)) { /* read everything before writing any of it */
    zorch_tensor *tmp = tensor_new_like(s);
    if (!tmp || backend_of(s)->copy(tmp, s)) {
      zorch_tensor_free(tmp);
      return zorch_last_status();
    }
    s = tmp;
    moved = true;
  }
  zorch_tensor *v = NULL;
  zorch_status st = tensor_mark_written("copy_", dst);
  if (!st) v = op_broadcast_view(s, dst->ndim, dst->shape);
  if (!st) st = v ? backend_of(dst)->copy(dst, v) : zorch_last_status();
  zorch_tensor_free(v);
  if (moved) zorch_tensor_free(s);
  return st;
}

zorch_status op_fill_(zorch_tensor *dst, double value) {
  if (check_arg("fill_", "dst", dst) || tensor_mark_written("fill_", dst)) return zorch_last_status();
  return backend_of(dst)->fill(dst, value);
}

/* The kernels' fill takes a double, exact up to 2^53: an int64 destination
   with a value beyond that is filled by copying from an int64 scalar. */
zorch_status op_fill_i64_(zorch_tensor *dst, int64_t value) {
  if (check_arg("fill_", "dst", dst)) return zorch_last_status();
  const int64_t exact = (int64_t)1 << 53;
  if (dst->dtype != ZORCH_I64 || (value >= -exact && value <= exact)) return op_fill_(dst, (double)value);
  zorch_tensor *v = tensor_new(0, NULL, ZORCH_I64, cpu_dev);
  if (!v) return zorch_last_status();
  *(int64_t *)tensor_ptr(v) = value;
  zorch_status st = op_copy_(dst, v);
  zorch_tensor_free(v);
  return st;
}

static zorch_status identity_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  (void)n;
  gin[0] = zorch_tensor_retain(g);
  return ZORCH_OK;
}

zorch_tensor *zorch_contiguous(zorch_tensor *t) {
  if (check_arg("contiguous", "input", t)) return NULL;
  if (zorch_tensor_is_contiguous(t)) return zorch_tensor_retain(t);
  return zorch_clone(t);
}

zorch_tensor *zorch_clone(zorch_tensor *t) {
  if (check_arg("clone", "input", t)) return NULL;
  zorch_tensor *out = tensor_new_like(t);
  if (!out) return NULL;
  if (backend_of(t)->copy(out, t)) {
    zorch_tensor_free(out);
    return NULL;
  }
  return ag_record(out, "CloneBackward", identity_bwd, 1, &t, 0, NULL, NULL, 0);
}

/* The engine converts each gradient to its input's dtype, so the backward of a
   dtype conversion passes the gradient through. */
zorch_tensor *zorch_to_dtype(zorch_tensor *t, zorch_dtype dt) {
  if (check_arg("to", "input", t)) return NULL;
  if ((unsigned)dt >= ZORCH_NDTYPES) return err_null(ZORCH_ERR_DTYPE, "to: invalid dtype %d", (int)dt);
  if (t->dtype == dt) return zorch_tensor_retain(t);
  zorch_tensor *out = op_cast(t, dt);
  if (!out || !zorch_dtype_is_float(dt)) return out;
  return ag_record(out, "ToCopyBackward", identity_bwd, 1, &t, 0, NULL, NULL, 0);
}

typedef struct {
  zorch_device from; /* where the input was */
} to_device_args;

static zorch_status to_device_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  gin[0] = zorch_to_device(g, AG_ARGS(n, to_device_args)->from);
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

zorch_tensor *zorch_to_device(zorch_tensor *t, zorch_device dev) {
  if (check_arg("to", "input", t)) return NULL;
  zorch_device from = t->st->device;
  if (from.type == dev.type && from.index == dev.index) return zorch_tensor_retain(t);
  zorch_tensor *c = op_contig(t);
  if (!c) return NULL;
  zorch_tensor *out = zorch_empty(t->ndim, t->shape, t->dtype, dev);
  if (!out) {
    zorch_tensor_free(c);
    return NULL;
  }
  size_t n = (size_t)zorch_tensor_numel(t) * dtype_sizes[t->dtype];
  zorch_status st;
  if (from.type == ZORCH_CPU)
    st = backend_of(out)->from_host(tensor_ptr(out), tensor_ptr(c), n, dev.index);
  else if (dev.type == ZORCH_CPU)
    st = backend_of(c)->to_host(tensor_ptr(out), tensor_ptr(c), n, from.index);
  else { /* between two GPUs: through host memory */
    void *h = malloc(n ? n : 1);
    st = h ? backend_of(c)->to_host(h, tensor_ptr(c), n, from.index) : err_set(ZORCH_ERR_OOM, "to: out of memory");
    if (!st) st = backend_of(out)->from_host(tensor_ptr(out), h, n, dev.index);
    free(h);
  }
  zorch_tensor_free(c);
  if (st) {
    zorch_tensor_free(out);
    return NULL;
  }
  to_device_args args = {.from = from};
  return ag_record(out, "ToDeviceBackward", to_device_bwd, 1, &t, 0, NULL, &args, sizeof args);
}

/* ---- element access ------------------------------------------------------------------- */
/* t's elements in row-major order as dt (8 bytes each) into out[n]. */
static zorch_status copy_out(const char *what, const zorch_tensor *t, zorch_dtype dt, void *out, int64_t n) {
  if (!t || !out) return err_set(ZORCH_ERR_ARG, "%s: NULL argument", what);
  int64_t numel = zorch_tensor_numel(t);
  if (n < numel)
    return err_set(ZORCH_ERR_ARG, "%s: buffer of %lld for %lld elements", what, (long long)n, (long long)numel);
  zorch_tensor *host = zorch_to_device((zorch_tensor *)t, cpu_dev);
  if (!host) return zorch_last_status();
  zorch_tensor *d = op_empty(host, t->ndim, t->shape, dt);
  zorch_status st = d ? cpu_backend.copy(d, host) : zorch_last_status();
  if (!st) memcpy(out, tensor_ptr(d), (size_t)numel * 8);
  zorch_tensor_free(d);
  zorch_tensor_free(host);
  return st;
}

zorch_status zorch_tensor_to_doubles(const zorch_tensor *t, double *out, int64_t n) {
  return copy_out("to_doubles", t, ZORCH_F64, out, n);
}

zorch_status zorch_tensor_to_i64s(const zorch_tensor *t, int64_t *out, int64_t n) {
  return copy_out("to_i64s", t, ZORCH_I64, out, n);
}

zorch_status zorch_tensor_item(const zorch_tensor *t, double *out) {
  char a[ERR_SHAPE_BUF];
  if (!t || !out) return err_set(ZORCH_ERR_ARG, "item: NULL argument");
  if (zorch_tensor_numel(t) != 1)
    return err_set(ZORCH_ERR_SHAPE, "item: a tensor with %lld elements (shape %s) cannot be "
                   "converted to a number", (long long)zorch_tensor_numel(t), SHAPE(t, a));
  return zorch_tensor_to_doubles(t, out, 1);
}

zorch_status zorch_tensor_get(const zorch_tensor *t, const int64_t *index, double *out) {
  if (!t || !out || (t->ndim && !index)) return err_set(ZORCH_ERR_ARG, "get: NULL argument");
  int64_t off = t->offset;
  for (int i = 0; i < t->ndim; i++) {
    if (index[i] < 0 || index[i] >= t->shape[i])
      return err_set(ZORCH_ERR_ARG, "get: index %lld out of range for dim %d of size %lld",
                     (long long)index[i], i, (long long)t->shape[i]);
    off += index[i] * t->strides[i];
  }
  zorch_tensor *one = tensor_alias(t, 0, NULL, NULL, off);
  if (!one) return zorch_last_status();
  zorch_status st = zorch_tensor_to_doubles(one, out, 1);
  zorch_tensor_free(one);
  return st;
}

/* ---- public: for language bindings ---- */
zorch_tensor *zorch_scalar(double value, zorch_dtype dt, zorch_device dev) {
  return op_full(0, NULL, value, dt, dev);
}

zorch_status zorch_setitem_(zorch_tensor *t, int64_t index, zorch_tensor *src) {
  if (!src) return err_set(ZORCH_ERR_ARG, "index assignment: value is NULL");
  return op_assign_index(t, index, src, false, 0, 0);
}

zorch_status zorch_setitem_fill_(zorch_tensor *t, int64_t index, double value) {
  return op_assign_index(t, index, NULL, false, 0, value);
}

zorch_status zorch_setitem_fill_i64_(zorch_tensor *t, int64_t index, int64_t value) {
  return op_assign_index(t, index, NULL, true, value, 0);
}

static void pinned_free(void *data, void *ctx) {
  (void)ctx;
  cuda_host_free(data);
}

zorch_tensor *zorch_host_zeros(int ndim, const int64_t *shape, zorch_dtype dt, bool pin, bool *pinned) {
  if (pinned) *pinned = false;
  if ((unsigned)dt >= ZORCH_NDTYPES) return err_null(ZORCH_ERR_DTYPE, "host_zeros: invalid dtype %d", (int)dt);
  if (ndim < 0 || ndim > ZORCH_MAX_DIMS || (ndim && !shape) || !shape_fits(ndim, shape))
    return zorch_zeros(ndim, shape, dt, cpu_dev); /* its error */
  int64_t n = shape_numel(ndim, shape);
  size_t bytes = (size_t)n * zorch_dtype_size(dt);
  void *p = pin ? cuda_host_alloc(bytes ? bytes : 1) : NULL;
  if (!p) return zorch_zeros(ndim, shape, dt, cpu_dev);
  memset(p, 0, bytes);
  zorch_tensor *t = zorch_tensor_wrap_owned(p, dt, ndim, shape, NULL, pinned_free, NULL);
  if (!t) {
    cuda_host_free(p);
    return NULL;
  }
  if (pinned) *pinned = true;
  return t;
}
