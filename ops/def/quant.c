/* quant.c: quantised weights (include/zorch_ops.h's quantize, dequantize and
   qlinear; layouts in ops/backend/quant.h, docs/quantization.md). */
#include <string.h>

#include "ops.h"

static const zorch_device host = {ZORCH_CPU, 0};

/* The format of q and scales: group 0 for int8 rows, else int4's group;
   *in gets the input count. */
static zorch_status quant_format(const char *op, const zorch_tensor *q, const zorch_tensor *scales, int64_t *in,
                                 int64_t *group) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg(op, "q", q) || check_arg(op, "scales", scales) || check_same_device(op, q, scales))
    return zorch_last_status();
  if (q->ndim != 2 || (q->dtype != ZORCH_I8 && q->dtype != ZORCH_U8))
    return err_set(ZORCH_ERR_DTYPE, "%s: q must be int8 (out, in) or uint8 (out, in / 2), got %s %s", op,
                   zorch_dtype_name(q->dtype), SHAPE(q, s1));
  if (scales->dtype != ZORCH_F16)
    return err_set(ZORCH_ERR_DTYPE, "%s: scales must be float16, got %s", op, zorch_dtype_name(scales->dtype));
  int64_t out = q->shape[0];
  if (q->dtype == ZORCH_I8) {
    if (scales->ndim != 1 || scales->shape[0] != out)
      return err_set(ZORCH_ERR_SHAPE, "%s: int8 q %s needs scales (%lld), got %s", op, SHAPE(q, s1), (long long)out,
                     SHAPE(scales, s2));
    *in = q->shape[1], *group = 0;
    return ZORCH_OK;
  }
  *in = 2 * q->shape[1];
  int64_t ng = scales->ndim == 2 ? scales->shape[1] : 0;
  if (scales->ndim != 2 || scales->shape[0] != out || ng == 0 || *in == 0 || *in % ng || (*in / ng) % 32)
    return err_set(ZORCH_ERR_SHAPE, "%s: scales %s do not divide the %lld inputs into groups of a multiple of 32", op,
                   SHAPE(scales, s1), (long long)*in);
  *group = *in / ng;
  return ZORCH_OK;
}

zorch_status zorch_quantize(zorch_tensor *w, int bits, int64_t group, zorch_tensor **q, zorch_tensor **scales) {
  char s[ERR_SHAPE_BUF];
  if (!q || !scales) return err_set(ZORCH_ERR_ARG, "quantize: q and scales must not be NULL");
  *q = *scales = NULL;
  if (check_arg("quantize", "w", w)) return zorch_last_status();
  if (w->ndim != 2 || !zorch_dtype_is_float(w->dtype))
    return err_set(ZORCH_ERR_SHAPE, "quantize: w must be a float matrix (out, in), got %s %s",
                   zorch_dtype_name(w->dtype), SHAPE(w, s));
  int64_t out = w->shape[0], in = w->shape[1];
  if (bits != 8 && bits != 4) return err_set(ZORCH_ERR_ARG, "quantize: bits must be 8 or 4, got %d", bits);
  if (bits == 8 && group != 0)
    return err_set(ZORCH_ERR_ARG, "quantize: int8 has one scale per output row: group must be 0, got %lld",
                   (long long)group);
  if (bits == 4 && (group <= 0 || group % 32))
    return err_set(ZORCH_ERR_ARG, "quantize: group must be a positive multiple of 32, got %lld", (long long)group);
  if (bits == 4 && in == 0)
    return err_set(ZORCH_ERR_SHAPE, "quantize: 4 bits need at least one group of inputs, got in_features 0");
  if (bits == 4 && in % group)
    return err_set(ZORCH_ERR_SHAPE, "quantize: in_features %lld is not a multiple of the group %lld", (long long)in,
                   (long long)group);
  /* the kernel is the CPU's: another device's w goes through host memory */
  zorch_device dev = w->st->device;
  zorch_tensor *hw = NULL, *wc = NULL, *hq = NULL, *hs = NULL;
  zorch_status st = ZORCH_OK;
  int64_t qshape[2] = {out, bits == 8 ? in : in / 2}, sshape[2] = {out, bits == 8 ? 1 : in / group};
  if (!(hw = dev.type == ZORCH_CPU ? zorch_tensor_retain(w) : zorch_to_device(w, host)) ||
      !(wc = op_cast_contig(hw, ZORCH_F32)) || !(hq = op_empty(wc, 2, qshape, bits == 8 ? ZORCH_I8 : ZORCH_U8)) ||
      !(hs = op_empty(wc, bits == 8 ? 1 : 2, sshape, ZORCH_F16)) ||
      (st = backend_get(ZORCH_CPU)->quantize(hq, hs, wc, bits == 8 ? 0 : group)))
    goto done;
  if (dev.type == ZORCH_CPU) {
    *q = hq, *scales = hs;
    hq = hs = NULL;
  } else if (!(*q = zorch_to_device(hq, dev)) || !(*scales = zorch_to_device(hs, dev))) {
    OP_FREE(*q, *scales);
    *q = *scales = NULL;
  }
done:
  OP_FREE(hw, wc, hq, hs);
  if (!*q) {
    if (!st) st = zorch_last_status();
    err_prefix("quantize");
  }
  return *q ? ZORCH_OK : st;
}

zorch_tensor *zorch_dequantize(zorch_tensor *q, zorch_tensor *scales) {
  int64_t in, group;
  if (quant_format("dequantize", q, scales, &in, &group)) return NULL;
  zorch_tensor *qc = NULL, *sc = NULL, *w = NULL;
  int64_t shape[2] = {q->shape[0], in};
  if (!(qc = op_contig(q)) || !(sc = op_contig(scales)) || !(w = op_empty(q, 2, shape, ZORCH_F32)) ||
      backend_of(w)->dequantize(w, qc, sc, group)) {
    zorch_tensor_free(w);
    w = NULL;
    err_prefix("dequantize");
  }
  OP_FREE(qc, sc);
  return w;
}

static zorch_status qlinear_bwd(ag_node *nd, zorch_tensor *g, zorch_tensor **gin) {
  (void)nd, (void)g, (void)gin;
  return err_set(ZORCH_ERR_STATE, "qlinear: no gradient: quantised weights are for inference (run the forward under "
                                  "zorch.no_grad, or train an nn.Linear and quantise it after)");
}

zorch_tensor *zorch_qlinear(zorch_tensor *x, zorch_tensor *q, zorch_tensor *scales, zorch_tensor *b) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  int64_t in, group;
  if (check_arg("qlinear", "input", x) || quant_format("qlinear", q, scales, &in, &group) ||
      check_same_device("qlinear", x, q) || (b && (check_arg("qlinear", "bias", b) || check_same_device("qlinear", x, b))))
    return NULL;
  int64_t out = q->shape[0];
  if (!zorch_dtype_is_float(x->dtype))
    return err_null(ZORCH_ERR_DTYPE, "qlinear: input must be floating point, got %s", zorch_dtype_name(x->dtype));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != in)
    return err_null(ZORCH_ERR_SHAPE, "qlinear: input %s does not fit the quantised weight's %lld inputs", SHAPE(x, s1),
                    (long long)in);
  if (b && (b->ndim != 1 || b->shape[0] != out || !zorch_dtype_is_float(b->dtype)))
    return err_null(ZORCH_ERR_SHAPE, "qlinear: bias must be a float vector (%lld), got %s %s", (long long)out,
                    zorch_dtype_name(b->dtype), SHAPE(b, s2));
  int64_t rows = 1, oshape[ZORCH_MAX_DIMS];
  for (int i = 0; i < x->ndim - 1; i++) rows *= x->shape[i];
  memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  oshape[x->ndim - 1] = out;
  zorch_tensor *xc = NULL, *qc = NULL, *sc = NULL, *bc = NULL, *y = NULL;
  if (!(xc = op_cast_contig(x, ZORCH_F32)) || !(qc = op_contig(q)) || !(sc = op_contig(scales)) ||
      (b && !(bc = op_cast_contig(b, ZORCH_F32))) || !(y = op_empty(x, x->ndim, oshape, ZORCH_F32)) ||
      backend_of(y)->qlinear(y, xc, qc, sc, bc, rows, group) || !(y = op_recast(y, x->dtype))) {
    zorch_tensor_free(y);
    y = NULL;
    err_prefix("qlinear");
  }
  OP_FREE(xc, qc, sc, bc);
  if (!y) return NULL;
  return ag_record(y, "QlinearBackward", qlinear_bwd, b ? 2 : 1, (zorch_tensor *[]){x, b}, 0, NULL, NULL, 0);
}
