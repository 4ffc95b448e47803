/* common.c: the helpers every op definition uses (ops.h): new results on an
   input's device, dtype casts for the kernels, broadcast views, cleanup. */
#include <math.h>
#include <string.h>

#include "ops.h"

/* A fill value must fit an integer dtype, as in PyTorch: NaN, infinities and
   values out of range are errors, not saturated. uint8 takes [0, 256) and the
   whole numbers -255..-1, which wrap around (*v becomes the value stored;
   PyTorch wraps only its integer negatives); float and bool dtypes take any
   value. */
zorch_status zorch_check_fill(const char *op, zorch_dtype dt, double *v) {
  if (!op) op = "check_fill";
  if (!v) return err_set(ZORCH_ERR_ARG, "%s: value is NULL", op);
  double lo, hi; /* hi is exclusive */
  switch (dt) {
  case ZORCH_I32: lo = -2147483648.0, hi = 2147483648.0; break;
  case ZORCH_I64: lo = -9223372036854775808.0, hi = 9223372036854775808.0; break;
  case ZORCH_U8: lo = -255, hi = 256; break;
  case ZORCH_I8: lo = -128, hi = 128; break;
  default: return ZORCH_OK;
  }
  if (!(*v >= lo && *v < hi) || (dt == ZORCH_U8 && *v < 0 && *v != trunc(*v)))
    return err_set(ZORCH_ERR_ARG, "%s: value %.17g cannot be converted to %s without overflow", op,
                   isnan(*v) ? NAN : *v, zorch_dtype_name(dt));
  if (dt == ZORCH_U8 && *v <= -1) *v = 256 + trunc(*v);
  return ZORCH_OK;
}

zorch_status zorch_check_fill_i64(const char *op, zorch_dtype dt, int64_t *v) {
  if (!op) op = "check_fill";
  if (!v) return err_set(ZORCH_ERR_ARG, "%s: value is NULL", op);
  bool fits = dt == ZORCH_I32  ? *v >= INT32_MIN && *v <= INT32_MAX
              : dt == ZORCH_U8 ? *v >= -255 && *v <= 255
              : dt == ZORCH_I8 ? *v >= -128 && *v <= 127
                               : true;
  if (!fits)
    return err_set(ZORCH_ERR_ARG, "%s: value %lld cannot be converted to %s without overflow", op, (long long)*v,
                   zorch_dtype_name(dt));
  if (dt == ZORCH_U8 && *v < 0) *v += 256;
  return ZORCH_OK;
}

zorch_tensor *op_empty(const zorch_tensor *like, int ndim, const int64_t *shape, zorch_dtype dt) {
  return tensor_new(ndim, shape, dt, like->st->device);
}

zorch_tensor *op_zeros(const zorch_tensor *like, int ndim, const int64_t *shape, zorch_dtype dt) {
  return zorch_zeros(ndim, shape, dt, like->st->device);
}

void op_free_n(int n, zorch_tensor *const *ts) {
  for (int i = 0; i < n; i++) zorch_tensor_free(ts[i]);
}

zorch_dtype op_compute_dtype(zorch_dtype dt) {
  return dt == ZORCH_F64 ? ZORCH_F64 : ZORCH_F32;
}

zorch_dtype op_compute_dtype_on(const zorch_tensor *like, zorch_dtype dt) {
  if ((dt == ZORCH_BF16 || dt == ZORCH_F16) && backend_of(like)->native16) return dt;
  return op_compute_dtype(dt);
}

zorch_tensor *op_cast(zorch_tensor *t, zorch_dtype dt) {
  if (t->dtype == dt) return zorch_tensor_retain(t);
  zorch_tensor *out = op_empty(t, t->ndim, t->shape, dt);
  if (!out) return NULL;
  zorch_status st = backend_of(t)->copy(out, t);
  if (st) {
    zorch_tensor_free(out);
    return NULL;
  }
  return out;
}

zorch_tensor *op_recast(zorch_tensor *out, zorch_dtype dt) {
  if (!out || out->dtype == dt) return out;
  zorch_tensor *r = op_cast(out, dt);
  zorch_tensor_free(out);
  return r;
}

zorch_tensor *op_cast_contig(zorch_tensor *t, zorch_dtype dt) {
  zorch_tensor *c = op_cast(t, dt);
  if (!c) return NULL;
  zorch_tensor *out = op_contig(c);
  zorch_tensor_free(c);
  return out;
}

zorch_tensor *op_contig(zorch_tensor *t) {
  if (zorch_tensor_is_contiguous(t)) return zorch_tensor_retain(t);
  zorch_tensor *out = tensor_new_like(t);
  if (!out) return NULL;
  if (backend_of(t)->copy(out, t)) {
    zorch_tensor_free(out);
    return NULL;
  }
  return out;
}

zorch_tensor *op_broadcast_view(const zorch_tensor *t, int ndim, const int64_t *shape) {
  if (ndim == t->ndim && memcmp(shape, t->shape, sizeof(int64_t) * (size_t)ndim) == 0)
    return zorch_tensor_retain((zorch_tensor *)t); /* the same view: no handle to make */
  int64_t st[ZORCH_MAX_DIMS];
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    if (i < lead) {
      st[i] = 0;
    } else {
      int j = i - lead;
      st[i] = t->shape[j] == shape[i] ? t->strides[j] : 0;
    }
  }
  return tensor_alias(t, ndim, shape, st, t->offset);
}
