/* conv.c: 2-d convolution and pooling over NCHW images. A convolution is
   the backend's own kernel where it has one (the CPU's, for one group), or
   else im2col (the backend's kernel) and one GEMM per group over a whole
   chunk of images, so the GEMM is as large as memory allows
   (docs/performance.md, "Convolution"); its backward is the two other GEMMs
   and col2im. Those GEMMs work on (channels, images * pixels) matrices; a copy
   that keeps rows of pixels whole moves them to and from NCHW. */
#include <stdint.h>
#include <string.h>

#include "ops.h"

/* The column matrix of one chunk of images stays under this many bytes. */
#define CONV_COL_BYTES ((int64_t)64 << 20)
/* Strides, paddings, dilations and kernels above this are refused (no overflow). */
#define CONV_MAX_PARAM ((int64_t)1 << 30)

typedef struct {
  conv_geom g;
  int64_t o, groups; /* out channels, groups */
} conv_args;

/* Images per chunk: as many as keep the column matrix under CONV_COL_BYTES. */
static int64_t conv_chunk(const conv_geom *g, zorch_dtype dt) {
  int64_t per = (int64_t)dtype_sizes[dt];
  const int64_t f[5] = {g->c, g->kh, g->kw, g->oh, g->ow};
  for (int i = 0; i < 5; i++)
    if (__builtin_mul_overflow(per, f[i], &per)) return 1; /* the allocation will say so */
  int64_t nb = per > 0 ? CONV_COL_BYTES / per : g->n;
  return nb < 1 ? 1 : nb > g->n ? g->n : nb;
}

/* dst = src viewed with the first two dims swapped: (a, b, L) <-> (b, a, L), rows
   of L elements staying contiguous on both sides. */
static zorch_status swap01(zorch_tensor *dst, zorch_tensor *src) {
  zorch_tensor *v = zorch_permute(src, (int[]){1, 0, 2});
  zorch_status st = v ? backend_of(dst)->copy(dst, v) : zorch_last_status();
  zorch_tensor_free(v);
  return st;
}

/* out (n, o, oh, ow) = x * w + b for contiguous tensors of one float dtype. For
   each chunk: col (K, nb * L) by im2col, then per group gi the GEMM
   tmp[gi] (o / groups, nb * L) = w_gi col_gi (+ b, put in tmp first), and
   tmp (o, nb, L) is copied to the chunk's images (nb, o, L). */
static zorch_status conv_forward(zorch_tensor *out, zorch_tensor *x, zorch_tensor *w,
                                 zorch_tensor *b, const conv_args *a) {
  const conv_geom *g = &a->g;
  const backend *be = backend_of(out);
  int64_t L = g->oh * g->ow, K = g->c * g->kh * g->kw, G = a->groups;
  int64_t kg = K / G, og = a->o / G, es = (int64_t)dtype_sizes[out->dtype];
  if (g->n == 0 || L == 0 || a->o == 0) return ZORCH_OK;
  if (kg == 0) { /* no input channels: the bias alone */
    zorch_status st = be->fill(out, 0);
    if (st || !b) return st;
    zorch_tensor *bv = zorch_view(b, 3, (int64_t[]){a->o, 1, 1});
    st = bv ? op_add_(out, bv) : zorch_last_status();
    zorch_tensor_free(bv);
    return st;
  }
  if (G == 1 && be->conv2d && (!be->conv2d_takes || be->conv2d_takes(x, w, g))) return be->conv2d(out, x, w, b, g);
  zorch_tensor *out3 = zorch_view(out, 3, (int64_t[]){g->n, a->o, L});
  zorch_tensor *bcol = b ? zorch_view(b, 3, (int64_t[]){a->o, 1, 1}) : NULL;
  if (!out3 || (b && !bcol)) {
    OP_FREE(out3, bcol);
    return zorch_last_status();
  }
  int64_t chunk = conv_chunk(g, out->dtype);
  zorch_status st = ZORCH_OK;
  for (int64_t n0 = 0; n0 < g->n && !st; n0 += chunk) {
    int64_t nb = g->n - n0 < chunk ? g->n - n0 : chunk, cols = nb * L;
    zorch_tensor *col = op_empty(out, 2, (int64_t[]){K, cols}, out->dtype);
    zorch_tensor *tmp = op_empty(out, 3, (int64_t[]){a->o, nb, L}, out->dtype);
    zorch_tensor *bv = NULL, *ov = NULL;
    if (!col || !tmp || (b && !(bv = op_broadcast_view(bcol, 3, tmp->shape))) ||
        !(ov = zorch_narrow(out3, 0, n0, nb)))
      st = zorch_last_status();
    if (!st) st = be->im2col(col, x, g, n0, nb);
    for (int64_t gi = 0; gi < G && !st; gi++) {
      gemm_args ga = {.dt = out->dtype, .dev = out->st->device.index, .m = og, .n = cols, .k = kg,
                      .lda = kg, .ldb = cols, .ldc = cols, .alpha = 1.0, .beta = 0.0,
                      .a = tensor_ptr(w) + gi * og * kg * es,
                      .b = tensor_ptr(col) + gi * kg * cols * es,
                      .c = tensor_ptr(tmp) + gi * og * cols * es};
      st = be->gemm(&ga);
    }
    /* the bias after the products, not under them (beta 1): a GEMM that
       accumulates runs on BLAS, one that does not on oneDNN's faster matmul */
    if (!st && b) st = op_add_(tmp, bv);
    if (!st) st = swap01(ov, tmp);
    OP_FREE(col, tmp, bv, ov);
  }
  OP_FREE(out3, bcol);
  return st;
}

/* Gradients of a chunk, from gt (o, nb * L), the chunk's output gradient with
   its first two dims swapped: gw_gi += gt_gi col_gi^T and gcol_gi = w_gi^T gt_gi. */
static zorch_status conv_bwd_chunk(const conv_args *a, zorch_tensor *x, zorch_tensor *w,
                                   zorch_tensor *g3, zorch_tensor *gx, zorch_tensor *gw,
                                   int64_t n0, int64_t nb) {
  /* the first chunk writes gw (beta 0: oneDNN's matmul where loaded), the next add to it */
  const conv_geom *g = &a->g;
  const backend *be = backend_of(x);
  int64_t L = g->oh * g->ow, K = g->c * g->kh * g->kw, G = a->groups, cols = nb * L;
  int64_t kg = K / G, og = a->o / G, es = (int64_t)dtype_sizes[x->dtype];
  zorch_dtype dt = x->dtype;
  int dev = x->st->device.index;
  zorch_tensor *gn = NULL, *gt = NULL, *col = NULL;
  zorch_status st = ZORCH_OK;
  if (!(gn = zorch_narrow(g3, 0, n0, nb)) || !(gt = op_empty(x, 3, (int64_t[]){a->o, nb, L}, dt)) ||
      !(col = op_empty(x, 2, (int64_t[]){K, cols}, dt)) || (st = swap01(gt, gn))) {
    st = st ? st : zorch_last_status();
    goto done;
  }
  if (gw) {
    if ((st = be->im2col(col, x, g, n0, nb))) goto done;
    for (int64_t gi = 0; gi < G && !st; gi++) {
      gemm_args ga = {.dt = dt, .dev = dev, .tb = true, .m = og, .n = kg, .k = cols,
                      .lda = cols, .ldb = cols, .ldc = kg, .alpha = 1.0, .beta = n0 ? 1.0 : 0.0,
                      .a = tensor_ptr(gt) + gi * og * cols * es,
                      .b = tensor_ptr(col) + gi * kg * cols * es,
                      .c = tensor_ptr(gw) + gi * og * kg * es};
      st = be->gemm(&ga);
    }
  }
  if (gx && !st) { /* col becomes the column gradient */
    if (og == 0) st = be->fill(col, 0);
    for (int64_t gi = 0; gi < G && og > 0 && !st; gi++) {
      gemm_args ga = {.dt = dt, .dev = dev, .ta = true, .m = kg, .n = cols, .k = og,
                      .lda = kg, .ldb = cols, .ldc = cols, .alpha = 1.0,
                      .a = tensor_ptr(w) + gi * og * kg * es,
                      .b = tensor_ptr(gt) + gi * og * cols * es,
                      .c = tensor_ptr(col) + gi * kg * cols * es};
      st = be->gemm(&ga);
    }
    if (!st) st = be->col2im(gx, col, g, n0, nb);
  }
done:
  OP_FREE(gn, gt, col);
  return st;
}

static zorch_status conv_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const conv_args *a = AG_ARGS(n, conv_args);
  zorch_tensor *x = n->saved[0], *w = n->saved[1];
  bool want_x = ag_wants(n, 0), want_w = ag_wants(n, 1), want_b = n->nin > 2 && ag_wants(n, 2);
  int64_t L = a->g.oh * a->g.ow, K = a->g.c * a->g.kh * a->g.kw;
  zorch_tensor *gc = NULL, *g3 = NULL, *gx = NULL, *gw = NULL;
  zorch_status st = ZORCH_OK;
  if (!(gc = op_cast_contig(g, x->dtype)) ||
      (want_b && !(gin[2] = zorch_sum(gc, 3, (int[]){0, 2, 3}, false))) ||
      !(g3 = zorch_view(gc, 3, (int64_t[]){a->g.n, a->o, L})) ||
      (want_x && !(gx = K > 0 && L > 0 ? op_empty(x, x->ndim, x->shape, x->dtype) /* col2im fills it */
                                       : op_zeros(x, x->ndim, x->shape, x->dtype))) ||
      (want_w && !(gw = op_zeros(x, w->ndim, w->shape, x->dtype)))) {
    st = zorch_last_status();
    goto done;
  }
  const backend *be = backend_of(x);
  if ((want_x || want_w) && K > 0 && L > 0 && a->groups == 1 && be->conv2d_bwd &&
      (!be->conv2d_takes || be->conv2d_takes(x, w, &a->g))) {
    st = backend_of(x)->conv2d_bwd(gx, gw, gc, x, w, &a->g);
  } else if ((want_x || want_w) && K > 0 && L > 0) {
    int64_t chunk = conv_chunk(&a->g, x->dtype);
    for (int64_t n0 = 0; n0 < a->g.n && !st; n0 += chunk)
      st = conv_bwd_chunk(a, x, w, g3, gx, gw, n0, a->g.n - n0 < chunk ? a->g.n - n0 : chunk);
  }
  if (!st) {
    gin[0] = gx, gin[1] = gw;
    gx = gw = NULL;
  }
done:
  OP_FREE(gc, g3, gx, gw);
  if (st) err_prefix("conv2d");
  return st;
}

/* One of stride, padding or dilation: two values, `lo` the smallest allowed. */
static zorch_status conv_param(const char *op, const char *what, const int64_t *v, int64_t lo) {
  for (int i = 0; i < 2; i++)
    if (v[i] < lo || v[i] > CONV_MAX_PARAM)
      return err_set(ZORCH_ERR_ARG, "%s: %s (%lld, %lld) must be %s", op, what, (long long)v[0],
                     (long long)v[1], lo ? "positive" : "non-negative");
  return ZORCH_OK;
}

/* Checks the operands and fills the geometry (x is 4-d here; `shown` is the
   input as the caller gave it, for messages). */
static zorch_status conv_check(zorch_tensor *x, const zorch_tensor *shown, zorch_tensor *w,
                               zorch_tensor *b, const zorch_conv2d_opts *o, conv_args *a) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "conv2d";
  if (w->ndim != 4)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: weight %s must be (out_channels, in_channels / "
                   "groups, kh, kw)", SHAPE(w, s1));
  int64_t st[2] = {o && o->stride[0] ? o->stride[0] : 1, o && o->stride[1] ? o->stride[1] : 1};
  int64_t pd[2] = {o ? o->padding[0] : 0, o ? o->padding[1] : 0};
  int64_t dl[2] = {o && o->dilation[0] ? o->dilation[0] : 1, o && o->dilation[1] ? o->dilation[1] : 1};
  int64_t groups = o && o->groups ? o->groups : 1;
  if (conv_param(op, "stride", st, 1) || conv_param(op, "padding", pd, 0) ||
      conv_param(op, "dilation", dl, 1))
    return zorch_last_status();
  int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], wd = x->shape[3];
  int64_t oc = w->shape[0], kh = w->shape[2], kw = w->shape[3];
  if (groups < 1 || groups > CONV_MAX_PARAM)
    return err_set(ZORCH_ERR_ARG, "conv2d: groups must be positive, got %lld", (long long)groups);
  if (c % groups)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: groups %lld does not divide the %lld channels of "
                   "input %s", (long long)groups, (long long)c, SHAPE(shown, s1));
  if (oc % groups)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: groups %lld does not divide the %lld out channels "
                   "of weight %s", (long long)groups, (long long)oc, SHAPE(w, s1));
  if (w->shape[1] != c / groups)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: weight %s expects %lld input channels per group, "
                   "input %s has %lld", SHAPE(w, s1), (long long)w->shape[1], SHAPE(shown, s2),
                   (long long)(c / groups));
  if (kh < 1 || kw < 1 || kh > CONV_MAX_PARAM || kw > CONV_MAX_PARAM)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: weight %s has an empty kernel", SHAPE(w, s1));
  if (b && (b->ndim != 1 || b->shape[0] != oc))
    return err_set(ZORCH_ERR_SHAPE, "conv2d: bias %s does not fit weight %s (expected (%lld,))",
                   SHAPE(b, s1), SHAPE(w, s2), (long long)oc);
  int64_t eh = dl[0] * (kh - 1) + 1, ew = dl[1] * (kw - 1) + 1;
  int64_t nh = h + 2 * pd[0] - eh, nw = wd + 2 * pd[1] - ew;
  if (nh < 0 || nw < 0)
    return err_set(ZORCH_ERR_SHAPE, "conv2d: the output would be empty: input %s padded by (%lld, "
                   "%lld) is smaller than the kernel (%lld, %lld) dilated to (%lld, %lld)",
                   SHAPE(shown, s1), (long long)pd[0], (long long)pd[1], (long long)kh,
                   (long long)kw, (long long)eh, (long long)ew);
  a->g = (conv_geom){.n = n, .c = c, .h = h, .w = wd, .oh = nh / st[0] + 1, .ow = nw / st[1] + 1,
                     .kh = kh, .kw = kw, .sh = st[0], .sw = st[1], .ph = pd[0], .pw = pd[1],
                     .dh = dl[0], .dw = dl[1]};
  a->o = oc, a->groups = groups;
  return ZORCH_OK;
}

/* x (n, c, h, w) -> (n, o, oh, ow) */
static zorch_tensor *conv2d_4d(zorch_tensor *x, const zorch_tensor *shown, zorch_tensor *w,
                               zorch_tensor *b, const zorch_conv2d_opts *o) {
  conv_args a;
  if (conv_check(x, shown, w, b, o, &a)) return NULL;
  zorch_dtype cd = op_compute_dtype(x->dtype);
  zorch_tensor *cx = NULL, *cw = NULL, *cb = NULL, *out = NULL;
  if (!(cx = op_cast_contig(x, cd)) || !(cw = op_cast_contig(w, cd)) ||
      (b && !(cb = op_cast_contig(b, cd))) ||
      !(out = op_empty(x, 4, (int64_t[]){a.g.n, a.o, a.g.oh, a.g.ow}, cd)))
    goto fail;
  if (conv_forward(out, cx, cw, cb, &a) || !(out = op_recast(out, x->dtype))) goto fail;
  zorch_tensor *in[3] = {x, w, b};
  out = ag_record(out, "ConvolutionBackward", conv_bwd, b ? 3 : 2, in, 2,
                  (zorch_tensor *[]){cx, cw}, &a, sizeof a);
  goto done;
fail:
  zorch_tensor_free(out);
  out = NULL;
  err_prefix("conv2d");
done:
  OP_FREE(cx, cw, cb);
  return out;
}

zorch_tensor *zorch_conv2d(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b,
                           const zorch_conv2d_opts *o) {
  char s1[ERR_SHAPE_BUF];
  const char *op = "conv2d";
  if (check_arg(op, "input", x) || check_arg(op, "weight", w) || (b && check_arg(op, "bias", b)) ||
      check_same_device(op, x, w) || (b && check_same_device(op, x, b)))
    return NULL;
  if (!zorch_dtype_is_float(x->dtype))
    return err_null(ZORCH_ERR_DTYPE, "conv2d: needs a floating-point input, got %s",
                    zorch_dtype_name(x->dtype));
  if (w->dtype != x->dtype || (b && b->dtype != x->dtype))
    return err_null(ZORCH_ERR_DTYPE, "conv2d: input (%s), weight (%s)%s%s%s must have one dtype",
                    zorch_dtype_name(x->dtype), zorch_dtype_name(w->dtype), b ? " and bias (" : "",
                    b ? zorch_dtype_name(b->dtype) : "", b ? ")" : "");
  if (x->ndim == 4) return conv2d_4d(x, x, w, b, o);
  if (x->ndim != 3)
    return err_null(ZORCH_ERR_SHAPE, "conv2d: input %s must be (N, C, H, W) or (C, H, W)",
                    SHAPE(x, s1));
  /* one image: a batch of one, through views that autograd follows */
  zorch_tensor *x4 = zorch_unsqueeze(x, 0), *o4 = x4 ? conv2d_4d(x4, x, w, b, o) : NULL;
  zorch_tensor *out = o4 ? zorch_squeeze(o4, 0) : NULL;
  OP_FREE(x4, o4);
  return out;
}

/* ---- pooling ---------------------------------------------------------------------------------- */
typedef struct {
  conv_geom g; /* g.n planes */
  pool_kind kind;
} pool_args;

static const char *pool_name(pool_kind k) {
  return k == POOL_MAX ? "max_pool2d" : k == POOL_ADAPTIVE_AVG ? "adaptive_avg_pool2d" : "avg_pool2d";
}

static zorch_status pool_bwd(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const pool_args *a = AG_ARGS(n, pool_args);
  ag_edge *e = &n->in[0];
  zorch_dtype cd = op_compute_dtype(e->dtype);
  zorch_tensor *gc = NULL, *gx = NULL;
  zorch_status st;
  if (!(gc = op_cast_contig(g, cd)) || !(gx = op_empty(g, e->ndim, e->shape, cd)))
    st = zorch_last_status();
  else
    st = backend_of(gx)->pool2d_bwd(a->kind, gx, gc, a->kind == POOL_MAX ? n->saved[0] : NULL, &a->g);
  zorch_tensor_free(gc);
  if (st) {
    zorch_tensor_free(gx);
    err_prefix(pool_name(a->kind));
    return st;
  }
  gin[0] = gx;
  return ZORCH_OK;
}

/* PyTorch's pooling output size along one axis (0 or less: none fits). */
static int64_t pool_out(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t num = n + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t q = num >= 0 ? num / s : -((-num + s - 1) / s); /* floor */
  int64_t out = q + 1;
  if (ceil_mode && out > 0 && (out - 1) * s >= n + p) out--;
  return out;
}

/* Checks x (3-d or 4-d float) and runs the pool with geometry g (h, w, oh, ow
   and the window filled by the caller; n set here). */
static zorch_tensor *pool_run(pool_kind k, zorch_tensor *x, conv_geom g, zorch_tensor **indices) {
  const char *op = pool_name(k);
  int64_t planes = x->shape[0] * x->shape[1];
  if (x->ndim == 3) planes = x->shape[0];
  g.n = planes, g.c = 1;
  int64_t shape[4];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 2] = g.oh, shape[x->ndim - 1] = g.ow;
  zorch_dtype cd = op_compute_dtype(x->dtype);
  zorch_tensor *cx = NULL, *out = NULL, *idx = NULL;
  if (!(cx = op_cast_contig(x, cd)) || !(out = op_empty(x, x->ndim, shape, cd)) ||
      (k == POOL_MAX && !(idx = op_empty(x, x->ndim, shape, ZORCH_I64))) ||
      backend_of(x)->pool2d(k, out, idx, cx, &g) || !(out = op_recast(out, x->dtype))) {
    zorch_tensor_free(out);
    out = NULL;
    err_prefix(op);
    goto done;
  }
  pool_args a = {g, k};
  out = ag_record(out, k == POOL_MAX ? "MaxPool2DBackward" : k == POOL_AVG_EXCL_PAD || k == POOL_AVG
                       ? "AvgPool2DBackward" : "AdaptiveAvgPool2DBackward",
                  pool_bwd, 1, &x, idx ? 1 : 0, &idx, &a, sizeof a);
  if (out && indices) *indices = zorch_tensor_retain(idx);
done:
  OP_FREE(cx, idx);
  return out;
}

static zorch_status pool_check_input(const char *op, const zorch_tensor *x) {
  char s1[ERR_SHAPE_BUF];
  if (check_arg(op, "input", x)) return zorch_last_status();
  if (x->ndim != 3 && x->ndim != 4)
    return err_set(ZORCH_ERR_SHAPE, "%s: input %s must be (N, C, H, W) or (C, H, W)", op,
                   SHAPE(x, s1));
  if (!zorch_dtype_is_float(x->dtype))
    return err_set(ZORCH_ERR_DTYPE, "%s: needs a floating-point input, got %s", op,
                   zorch_dtype_name(x->dtype));
  return ZORCH_OK;
}

/* The window of max_pool2d and avg_pool2d from the options, with PyTorch's checks. */
static zorch_status pool_geom(pool_kind k, const zorch_tensor *x, const zorch_pool2d_opts *o,
                              conv_geom *g) {
  char s1[ERR_SHAPE_BUF];
  const char *op = pool_name(k);
  if (!o) return err_set(ZORCH_ERR_ARG, "%s: no options (the kernel size is needed)", op);
  int64_t kn[2] = {o->kernel[0], o->kernel[1]};
  int64_t st[2] = {o->stride[0] ? o->stride[0] : kn[0], o->stride[1] ? o->stride[1] : kn[1]};
  int64_t pd[2] = {o->padding[0], o->padding[1]};
  int64_t dl[2] = {o->dilation[0] ? o->dilation[0] : 1, o->dilation[1] ? o->dilation[1] : 1};
  if (conv_param(op, "kernel_size", kn, 1) || conv_param(op, "stride", st, 1) ||
      conv_param(op, "padding", pd, 0) || conv_param(op, "dilation", dl, 1))
    return zorch_last_status();
  if (k != POOL_MAX && (dl[0] != 1 || dl[1] != 1))
    return err_set(ZORCH_ERR_ARG, "%s: has no dilation", op);
  for (int i = 0; i < 2; i++)
    if (pd[i] > (dl[i] * (kn[i] - 1) + 1) / 2)
      return err_set(ZORCH_ERR_ARG, "%s: padding (%lld, %lld) must be at most half the kernel "
                     "(%lld, %lld)%s", op, (long long)pd[0], (long long)pd[1], (long long)kn[0],
                     (long long)kn[1], k == POOL_MAX ? " as dilated" : "");
  int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
  int64_t oh = pool_out(h, kn[0], st[0], pd[0], dl[0], o->ceil_mode);
  int64_t ow = pool_out(w, kn[1], st[1], pd[1], dl[1], o->ceil_mode);
  if (oh < 1 || ow < 1)
    return err_set(ZORCH_ERR_SHAPE, "%s: the output would be empty (%lld x %lld): input %s is "
                   "smaller than the kernel (%lld, %lld)", op, (long long)oh, (long long)ow,
                   SHAPE(x, s1), (long long)kn[0], (long long)kn[1]);
  *g = (conv_geom){.h = h, .w = w, .oh = oh, .ow = ow, .kh = kn[0], .kw = kn[1], .sh = st[0],
                   .sw = st[1], .ph = pd[0], .pw = pd[1], .dh = dl[0], .dw = dl[1]};
  return ZORCH_OK;
}

zorch_tensor *zorch_max_pool2d(zorch_tensor *x, const zorch_pool2d_opts *o, zorch_tensor **indices) {
  conv_geom g;
  if (indices) *indices = NULL;
  if (pool_check_input("max_pool2d", x) || pool_geom(POOL_MAX, x, o, &g)) return NULL;
  return pool_run(POOL_MAX, x, g, indices);
}

zorch_tensor *zorch_avg_pool2d(zorch_tensor *x, const zorch_pool2d_opts *o) {
  conv_geom g;
  if (pool_check_input("avg_pool2d", x) || pool_geom(POOL_AVG, x, o, &g)) return NULL;
  return pool_run(o->exclude_pad ? POOL_AVG_EXCL_PAD : POOL_AVG, x, g, NULL);
}

zorch_tensor *zorch_adaptive_avg_pool2d(zorch_tensor *x, int64_t oh, int64_t ow) {
  char s1[ERR_SHAPE_BUF];
  const char *op = "adaptive_avg_pool2d";
  if (pool_check_input(op, x)) return NULL;
  int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
  if (oh < 1 || ow < 1 || oh > CONV_MAX_PARAM || ow > CONV_MAX_PARAM)
    return err_null(ZORCH_ERR_ARG, "adaptive_avg_pool2d: output size (%lld, %lld) must be positive",
                    (long long)oh, (long long)ow);
  if (h < 1 || w < 1)
    return err_null(ZORCH_ERR_SHAPE, "adaptive_avg_pool2d: input %s has an empty image",
                    SHAPE(x, s1));
  conv_geom g = {.h = h, .w = w, .oh = oh, .ow = ow, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .dh = 1,
                 .dw = 1};
  return pool_run(POOL_ADAPTIVE_AVG, x, g, NULL);
}
