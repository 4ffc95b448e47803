/* patterns.c: eye, linspace, logspace and one_hot: tensors of a fixed
   pattern. */
#include <math.h>
#include <stdlib.h>

#include "ops.h"

zorch_tensor *zorch_eye(int64_t n, int64_t m, zorch_dtype dt, zorch_device dev) {
  if (m < 0 && m != -1) return err_null(ZORCH_ERR_ARG, "eye: m must be >= 0, got %lld", (long long)m);
  if (n < 0) return err_null(ZORCH_ERR_ARG, "eye: n must be >= 0, got %lld", (long long)n);
  if (m == -1) m = n;
  zorch_tensor *r = NULL, *rv = NULL, *c = NULL, *e = NULL, *out = NULL;
  if ((r = zorch_arange_i64(0, n, 1, ZORCH_I64, dev)) && (rv = zorch_reshape(r, 2, (int64_t[]){n, 1})) &&
      (c = zorch_arange_i64(0, m, 1, ZORCH_I64, dev)) && (e = zorch_eq(rv, c)))
    out = op_cast(e, dt);
  OP_FREE(r, rv, c, e);
  if (!out) err_prefix("eye");
  return out;
}

/* steps values from start to end, both included; PyTorch's: from start for the
   first half, from end for the second, so that both ends are exact. */
static zorch_tensor *spaced(const char *op, double start, double end, int64_t steps, double base, bool log_,
                            zorch_dtype dt, zorch_device dev) {
  if (steps < 0) return err_null(ZORCH_ERR_ARG, "%s: steps must be >= 0, got %lld", op, (long long)steps);
  if ((uint64_t)steps > SIZE_MAX / sizeof(double))
    return err_null(ZORCH_ERR_OOM, "%s: %lld steps are too many (their size overflows 64 bits)", op, (long long)steps);
  double *v = malloc(sizeof *v * (size_t)(steps ? steps : 1));
  if (!v) return err_null(ZORCH_ERR_OOM, "%s: out of memory", op);
  double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  /* float32: start, end and step rounded to float32 and each value rounded
     once (a fused multiply-add), which is what PyTorch's CPU build gives */
  bool f32 = dt == ZORCH_F32 && !log_;
  if (f32) {
    float fs = (float)start, fe = (float)end;
    start = fs, end = fe;
    step = steps > 1 ? (double)((fe - fs) / (float)(steps - 1)) : 0;
  }
  for (int64_t i = 0; i < steps; i++) {
    bool lo = i < steps / 2 || steps == 1;
    v[i] = lo ? start + step * (double)i : end - step * (double)(steps - 1 - i);
    if (log_) v[i] = pow(base, v[i]);
  }
  zorch_tensor *h = zorch_from_buffer(v, 1, &steps, ZORCH_F64), *c = h ? zorch_to_dtype(h, dt) : NULL;
  free(v);
  zorch_tensor *out = c ? zorch_to_device(c, dev) : NULL;
  OP_FREE(h, c);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_linspace(double start, double end, int64_t steps, zorch_dtype dt, zorch_device dev) {
  return spaced("linspace", start, end, steps, 10, false, dt, dev);
}

zorch_tensor *zorch_logspace(double start, double end, int64_t steps, double base, zorch_dtype dt,
                             zorch_device dev) {
  return spaced("logspace", start, end, steps, base, true, dt, dev);
}

zorch_tensor *zorch_one_hot(zorch_tensor *idx, int64_t num_classes) {
  if (check_arg("one_hot", "input", idx)) return NULL;
  if (idx->dtype != ZORCH_I64)
    return err_null(ZORCH_ERR_DTYPE, "one_hot: expects an int64 tensor of classes, got %s", zorch_dtype_name(idx->dtype));
  if (num_classes < -1) return err_null(ZORCH_ERR_ARG, "one_hot: num_classes must be -1 or >= 0, got %lld", (long long)num_classes);
  if (zorch_tensor_numel(idx) == 0 && num_classes == -1)
    return err_null(ZORCH_ERR_ARG, "one_hot: cannot infer num_classes from an empty tensor");
  if (zorch_tensor_numel(idx) > 0) {
    bool prev = zorch_set_grad_enabled(false);
    zorch_tensor *lo = zorch_min(idx, 0, NULL, false, NULL), *hi = zorch_max(idx, 0, NULL, false, NULL);
    zorch_set_grad_enabled(prev);
    int64_t l = 0, h = 0;
    zorch_status st = !lo || !hi ? zorch_last_status() : zorch_tensor_to_i64s(lo, &l, 1);
    if (!st) st = zorch_tensor_to_i64s(hi, &h, 1);
    OP_FREE(lo, hi);
    if (st) return NULL;
    if (l < 0) return err_null(ZORCH_ERR_ARG, "one_hot: class " ERR_IXV("%lld") " is negative", (long long)l);
    if (num_classes == -1) num_classes = h + 1;
    else if (h >= num_classes)
      return err_null(ZORCH_ERR_ARG, "one_hot: class " ERR_IXV("%lld") " out of range for num_classes %lld",
                      (long long)h, (long long)num_classes);
  }
  zorch_tensor *u = NULL, *c = NULL, *e = NULL, *out = NULL;
  if ((u = zorch_unsqueeze(idx, -1)) && (c = zorch_arange_i64(0, num_classes, 1, ZORCH_I64, idx->st->device)) &&
      (e = zorch_eq(u, c)))
    out = op_cast(e, ZORCH_I64);
  OP_FREE(u, c, e);
  if (!out) err_prefix("one_hot");
  return out;
}
