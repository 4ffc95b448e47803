/* print.c: PyTorch-style text for tensors: one width and number style for all
   elements, rows aligned, "..." past 1000 elements, 80 columns. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = (b->cap + (size_t)k + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

enum { STYLE_INT, STYLE_FLOAT_INT, STYLE_FIXED, STYLE_SCI, STYLE_BOOL };
typedef struct {
  int style, width;
  const double *v;     /* the values (floats, bool) */
  const int64_t *iv;   /* or, for integer dtypes, exactly: a double rounds past 2^53 */
  const zorch_tensor *t;
  bool summarize;
  int indent;
} fmt_ctx;

/* Element i of the values. */
static int fmt_one(char *out, size_t n, const fmt_ctx *c, int64_t i) {
  if (c->iv) return snprintf(out, n, "%lld", (long long)c->iv[i]);
  double x = c->v[i];
  if (c->style == STYLE_BOOL) return snprintf(out, n, "%s", x != 0 ? "True" : "False");
  if (isnan(x)) return snprintf(out, n, "nan");
  if (isinf(x)) return snprintf(out, n, x > 0 ? "inf" : "-inf");
  switch (c->style) {
    case STYLE_INT: return snprintf(out, n, "%.0f", x);
    case STYLE_FLOAT_INT: return snprintf(out, n, "%.0f.", x);
    case STYLE_FIXED: return snprintf(out, n, "%.4f", x);
    default: return snprintf(out, n, "%.4e", x);
  }
}

#define EDGE 3
/* Visits the indices shown along a dim of size n. */
static int64_t shown(const fmt_ctx *c, int64_t n) { return c->summarize && n > 2 * EDGE ? 2 * EDGE : n; }
static int64_t shown_index(const fmt_ctx *c, int64_t n, int64_t k) {
  return c->summarize && n > 2 * EDGE && k >= EDGE ? n - 2 * EDGE + k : k;
}

static void fmt_rec(sbuf *b, const fmt_ctx *c, int dim, int64_t off) {
  const zorch_tensor *t = c->t;
  int64_t n = t->shape[dim], m = shown(c, n);
  int64_t stride = 1;
  for (int i = dim + 1; i < t->ndim; i++) stride *= t->shape[i];
  sb_add(b, "[");
  if (dim == t->ndim - 1) {
    int per_line = (80 - c->indent - dim - 1) / (c->width + 2);
    if (per_line < 1) per_line = 1;
    for (int64_t k = 0; k < m; k++) {
      if (k) {
        if (k % per_line == 0) sb_add(b, ",\n%*s", c->indent + dim + 1, "");
        else sb_add(b, ", ");
      }
      if (c->summarize && n > 2 * EDGE && k == EDGE) sb_add(b, "..., ");
      char e[64];
      fmt_one(e, sizeof e, c, off + shown_index(c, n, k));
      sb_add(b, "%*s", c->width, e);
    }
  } else {
    for (int64_t k = 0; k < m; k++) {
      if (k) {
        sb_add(b, ",");
        for (int i = 0; i < t->ndim - dim - 1; i++) sb_add(b, "\n");
        sb_add(b, "%*s", c->indent + dim + 1, "");
      }
      if (c->summarize && n > 2 * EDGE && k == EDGE) {
        sb_add(b, "...,");
        for (int i = 0; i < t->ndim - dim - 1; i++) sb_add(b, "\n");
        sb_add(b, "%*s", c->indent + dim + 1, "");
      }
      fmt_rec(b, c, dim + 1, off + shown_index(c, n, k) * stride);
    }
  }
  sb_add(b, "]");
}

/* Picks the number style from the values that will be shown. */
static void pick_style(fmt_ctx *c, int64_t numel) {
  zorch_dtype dt = c->t->dtype;
  if (dt == ZORCH_BOOL) {
    c->style = STYLE_BOOL;
  } else if (!zorch_dtype_is_float(dt)) {
    c->style = STYLE_INT;
  } else {
    bool integral = true;
    double amax = 0, amin = INFINITY;
    for (int64_t i = 0; i < numel; i++) {
      double x = c->v[i];
      if (!isfinite(x)) continue;
      if (x != floor(x)) integral = false;
      double a = fabs(x);
      if (a > amax) amax = a;
      if (a > 0 && a < amin) amin = a;
    }
    if (integral && amax < 1e8) c->style = STYLE_FLOAT_INT;
    else if (amax > 1e8 || (amin < INFINITY && (amin < 1e-4 || amax / amin > 1000))) c->style = STYLE_SCI;
    else c->style = STYLE_FIXED;
  }
  c->width = 1;
  char e[64];
  for (int64_t i = 0; i < numel; i++) {
    int w = fmt_one(e, sizeof e, c, i);
    if (w > c->width) c->width = w;
  }
}

char *zorch_tensor_format(const zorch_tensor *t) {
  if (!t) return err_null(ZORCH_ERR_ARG, "format: tensor is NULL");
  int64_t numel = zorch_tensor_numel(t);
  bool exact = t->dtype != ZORCH_BOOL && !zorch_dtype_is_float(t->dtype);
  double *v = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(double)); /* (8 bytes: an int64 too) */
  if (!v) return err_null(ZORCH_ERR_OOM, "format: out of memory");
  if (exact ? zorch_tensor_to_i64s(t, (int64_t *)(void *)v, numel) : zorch_tensor_to_doubles(t, v, numel)) {
    free(v);
    return NULL;
  }
  sbuf b = {0};
  sb_add(&b, "tensor(");
  fmt_ctx c = {.v = exact ? NULL : v, .iv = exact ? (const int64_t *)(void *)v : NULL, .t = t,
               .summarize = numel > 1000, .indent = 7};
  pick_style(&c, numel);
  char sh[ERR_SHAPE_BUF];
  if (t->ndim == 0) {
    char e[64];
    fmt_one(e, sizeof e, &c, 0);
    sb_add(&b, "%s", e);
  } else if (numel == 0) {
    sb_add(&b, "[], size=%s", SHAPE(t, sh));
  } else {
    fmt_rec(&b, &c, 0, 0);
  }
  if (t->dtype != ZORCH_F32 && t->dtype != ZORCH_I64 && t->dtype != ZORCH_BOOL)
    sb_add(&b, ", dtype=%s", zorch_dtype_name(t->dtype));
  if (t->st->device.type != ZORCH_CPU) {
    char d[32];
    zorch_device_name(t->st->device, d, sizeof d);
    sb_add(&b, ", device='%s'", d);
  }
  if (zorch_grad_fn_name(t))
    sb_add(&b, ", grad_fn=<%s>", zorch_grad_fn_name(t));
  else if (tensor_requires_grad(t))
    sb_add(&b, ", requires_grad=True");
  sb_add(&b, ")");
  free(v);
  if (b.oom) {
    free(b.s);
    return err_null(ZORCH_ERR_OOM, "format: out of memory");
  }
  return b.s;
}
