/* rearrange.c: flip, roll, repeat and tile, repeat_interleave, unbind,
   movedim, unflatten and pad: elements moved or repeated, made of views, cat
   and index_select, whose gradients they inherit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* An int64 index vector of n values on like's device. */
static zorch_tensor *index_vec(const zorch_tensor *like, int64_t n, const int64_t *v) {
  zorch_tensor *h = zorch_from_buffer(v, 1, &n, ZORCH_I64);
  if (!h || like->st->device.type == ZORCH_CPU) return h;
  zorch_tensor *d = zorch_to_device(h, like->st->device);
  zorch_tensor_free(h);
  return d;
}

/* a's rows `v` (n of them) along dim d: index_select with an index built here. */
static zorch_tensor *pick(zorch_tensor *a, int d, int64_t n, const int64_t *v) {
  zorch_tensor *ix = index_vec(a, n, v), *out = ix ? zorch_index_select(a, d, ix) : NULL;
  zorch_tensor_free(ix);
  return out;
}

/* A copy of t when t shares a's storage (ops that return new tensors, as
   PyTorch's do, even when nothing moved). */
static zorch_tensor *own(zorch_tensor *t, const zorch_tensor *a) {
  if (!t || !zorch_tensor_shares_storage(t, a)) return t;
  zorch_tensor *c = zorch_clone(t);
  zorch_tensor_free(t);
  return c;
}

/* Wraps the n dims into ds (0-based), refusing repeats. */
static zorch_status wrap_dims(const char *op, const zorch_tensor *a, int n, const int *dims, int *ds) {
  bool seen[ZORCH_MAX_DIMS] = {0};
  if (n < 0 || n > ZORCH_MAX_DIMS || (n && !dims)) return err_set(ZORCH_ERR_ARG, "%s: bad dims list (%d dims)", op, n);
  for (int i = 0; i < n; i++) {
    if (dim_wrap(op, dims[i], a->ndim, 0, &ds[i])) return zorch_last_status();
    if (seen[ds[i]]) return err_set(ZORCH_ERR_ARG, "%s: dim " ERR_IX("%d") " repeated", op, dims[i]);
    seen[ds[i]] = true;
  }
  return ZORCH_OK;
}

/* ---- flip and roll ------------------------------------------------------------------------- */
/* The reversed rows of dim d, one index_select per dim. */
zorch_tensor *zorch_flip(zorch_tensor *a, int ndims, const int *dims) {
  if (check_arg("flip", "input", a)) return NULL;
  int ds[ZORCH_MAX_DIMS];
  if (wrap_dims("flip", a, ndims, dims, ds)) return NULL;
  zorch_tensor *cur = zorch_tensor_retain(a);
  for (int i = 0; i < ndims && cur && a->ndim; i++) {
    int64_t n = cur->shape[ds[i]];
    int64_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    zorch_tensor *next = NULL;
    if (!v) err_set(ZORCH_ERR_OOM, "flip: out of memory");
    else {
      for (int64_t k = 0; k < n; k++) v[k] = n - 1 - k;
      next = pick(cur, ds[i], n, v);
      free(v);
    }
    zorch_tensor_free(cur);
    cur = next;
  }
  cur = own(cur, a);
  if (!cur) err_prefix("flip");
  return cur;
}

/* The last s rows of dim d, then the others. */
static zorch_tensor *roll_dim(zorch_tensor *a, int d, int64_t shift) {
  int64_t n = a->shape[d], s = n ? ((shift % n) + n) % n : 0;
  if (s == 0) return zorch_tensor_retain(a);
  zorch_tensor *hi = NULL, *lo = NULL, *out = NULL;
  if ((hi = zorch_narrow(a, d, n - s, s)) && (lo = zorch_narrow(a, d, 0, n - s)))
    out = zorch_cat(2, (zorch_tensor *[]){hi, lo}, d);
  OP_FREE(hi, lo);
  return out;
}

zorch_tensor *zorch_roll(zorch_tensor *a, int nshifts, const int64_t *shifts, int ndims, const int *dims) {
  if (check_arg("roll", "input", a)) return NULL;
  if (nshifts < 1 || !shifts) return err_null(ZORCH_ERR_ARG, "roll: expected at least one shift");
  zorch_tensor *cur = NULL;
  if (ndims == 0) { /* the flattened input, shape restored */
    if (nshifts != 1)
      return err_null(ZORCH_ERR_ARG, "roll: without dims, takes one shift, got %d", nshifts);
    zorch_tensor *f = zorch_reshape(a, 1, (int64_t[]){-1}), *r = f ? roll_dim(f, 0, shifts[0]) : NULL;
    cur = r ? zorch_reshape(r, a->ndim, a->shape) : NULL;
    OP_FREE(f, r);
  } else {
    if (nshifts != ndims)
      return err_null(ZORCH_ERR_ARG, "roll: %d shifts for %d dims (shifts and dims must pair up)", nshifts, ndims);
    int ds[ZORCH_MAX_DIMS];
    if (ndims < 0 || ndims > ZORCH_MAX_DIMS || !dims) return err_null(ZORCH_ERR_ARG, "roll: bad dims list");
    for (int i = 0; i < ndims; i++)
      if (dim_wrap("roll", dims[i], a->ndim, 0, &ds[i])) return NULL;
    cur = zorch_tensor_retain(a);
    for (int i = 0; i < ndims && cur && a->ndim; i++) {
      zorch_tensor *next = roll_dim(cur, ds[i], shifts[i]);
      zorch_tensor_free(cur);
      cur = next;
    }
  }
  cur = own(cur, a);
  if (!cur) err_prefix("roll");
  return cur;
}

/* ---- repeat, tile, repeat_interleave ---------------------------------------------------------- */
/* a with dim d repeated r times, through a 4-dim view (before, r, size, after). */
static zorch_tensor *repeat_one(zorch_tensor *a, int d, int64_t r) {
  int64_t before = 1, after = 1, out[ZORCH_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) {
    if (i < d) before *= a->shape[i];
    if (i > d) after *= a->shape[i];
    out[i] = i == d ? a->shape[i] * r : a->shape[i];
  }
  zorch_tensor *v = NULL, *e = NULL, *o = NULL;
  if ((v = zorch_reshape(a, 4, (int64_t[]){before, 1, a->shape[d], after})) &&
      (e = zorch_expand(v, 4, (int64_t[]){before, r, a->shape[d], after})))
    o = zorch_reshape(e, a->ndim, out);
  OP_FREE(v, e);
  return o;
}

/* a (n dims, reps for each) repeated: viewed with each repeated dim split into
   (reps, size), expanded along the reps and copied once by reshape. When that
   takes more than ZORCH_MAX_DIMS dims, one dim at a time. */
static zorch_tensor *repeat_n(zorch_tensor *a, int n, const int64_t *reps) {
  int64_t vs[ZORCH_MAX_DIMS], es[ZORCH_MAX_DIMS], out[ZORCH_MAX_DIMS];
  int lead = n - a->ndim, k = 0, split = 0;
  for (int i = 0; i < n; i++) split += reps[i] != 1 && i >= lead && a->shape[i - lead] != 1;
  if (n + split > ZORCH_MAX_DIMS) {
    for (int i = 0; i < n; i++) out[i] = i < lead ? 1 : a->shape[i - lead];
    zorch_tensor *cur = zorch_reshape(a, n, out);
    for (int i = 0; i < n && cur; i++) {
      if (reps[i] == 1) continue;
      zorch_tensor *next = repeat_one(cur, i, reps[i]);
      zorch_tensor_free(cur);
      cur = next;
    }
    return cur;
  }
  for (int i = 0; i < n; i++) {
    int64_t s = i < lead ? 1 : a->shape[i - lead];
    out[i] = s * reps[i];
    if (reps[i] != 1 && s != 1) {
      vs[k] = 1, es[k++] = reps[i];
      vs[k] = s, es[k++] = s;
    } else {
      vs[k] = s, es[k++] = s * reps[i];
    }
  }
  zorch_tensor *v = NULL, *e = NULL, *r = NULL;
  if ((v = zorch_reshape(a, k, vs)) && (e = zorch_expand(v, k, es))) r = zorch_reshape(e, n, out);
  OP_FREE(v, e);
  return r;
}

static zorch_tensor *repeat_op(const char *op, zorch_tensor *a, int n, const int64_t *reps, bool tile) {
  char s[ERR_SHAPE_BUF];
  if (check_arg(op, "input", a)) return NULL;
  if (n < 0 || n > ZORCH_MAX_DIMS || (n && !reps)) return err_null(ZORCH_ERR_ARG, "%s: bad reps list (%d entries)", op, n);
  if (!tile && n < a->ndim)
    return err_null(ZORCH_ERR_ARG, "%s: %d repeats for input %s: give at least one per dim", op, n, SHAPE(a, s));
  int64_t r[ZORCH_MAX_DIMS];
  int m = n < a->ndim ? a->ndim : n;
  for (int i = 0; i < m; i++) {
    r[i] = i < m - n ? 1 : reps[i - (m - n)];
    if (r[i] < 0) return err_null(ZORCH_ERR_ARG, "%s: repeats must be >= 0, got %lld", op, (long long)r[i]);
    int64_t size = i < m - a->ndim ? 1 : a->shape[i - (m - a->ndim)], prod;
    if (__builtin_mul_overflow(size, r[i], &prod))
      return err_null(ZORCH_ERR_SHAPE, "%s: %lld repeats of a dim of size %lld of input %s overflow 64 bits", op,
                      (long long)r[i], (long long)size, SHAPE(a, s));
  }
  zorch_tensor *out = own(repeat_n(a, m, r), a);
  if (!out) err_prefix(op);
  return out;
}

zorch_tensor *zorch_repeat(zorch_tensor *a, int n, const int64_t *reps) { return repeat_op("repeat", a, n, reps, false); }
zorch_tensor *zorch_tile(zorch_tensor *a, int n, const int64_t *reps) { return repeat_op("tile", a, n, reps, true); }

zorch_tensor *zorch_repeat_interleave(zorch_tensor *a, int64_t repeats, const int *dim) {
  if (check_arg("repeat_interleave", "input", a)) return NULL;
  if (repeats < 0)
    return err_null(ZORCH_ERR_ARG, "repeat_interleave: repeats must be >= 0, got %lld", (long long)repeats);
  int d = 0;
  if (dim && dim_wrap("repeat_interleave", *dim, a->ndim, 0, &d)) return NULL;
  zorch_tensor *src = dim && a->ndim ? zorch_tensor_retain(a) : zorch_reshape(a, 1, (int64_t[]){-1});
  zorch_tensor *u = NULL, *e = NULL, *out = NULL;
  int64_t len;
  if (src && __builtin_mul_overflow(src->shape[d], repeats, &len)) {
    char s[ERR_SHAPE_BUF];
    long long n = src->shape[d];
    zorch_tensor_free(src);
    return err_null(ZORCH_ERR_SHAPE, "repeat_interleave: %lld repeats of the %lld elements along the dim of input %s"
                    " overflow 64 bits", (long long)repeats, n, SHAPE(a, s));
  }
  if (src && (u = zorch_unsqueeze(src, d + 1))) {
    int64_t es[ZORCH_MAX_DIMS], os[ZORCH_MAX_DIMS];
    for (int i = 0; i < u->ndim; i++) es[i] = i == d + 1 ? repeats : u->shape[i];
    for (int i = 0; i < src->ndim; i++) os[i] = i == d ? src->shape[d] * repeats : src->shape[i];
    if ((e = zorch_expand(u, u->ndim, es))) out = own(zorch_reshape(e, src->ndim, os), a);
  }
  OP_FREE(src, u, e);
  if (!out) err_prefix("repeat_interleave");
  return out;
}

/* Element i of dim repeated repeats[i] times (one count for all when repeats
   has one): an index_select with the counts read to the host. */
zorch_tensor *zorch_repeat_interleave_tensor(zorch_tensor *a, zorch_tensor *repeats, const int *dim) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  const char *op = "repeat_interleave";
  if (check_arg(op, "input", a) || check_arg(op, "repeats", repeats)) return NULL;
  if (repeats->dtype != ZORCH_I64 || repeats->ndim > 1)
    return err_null(ZORCH_ERR_ARG, "%s: repeats must be an int64 tensor of 0 or 1 dims, got %s %s", op,
                    zorch_dtype_name(repeats->dtype), SHAPE(repeats, s1));
  int d = 0;
  if (dim && dim_wrap(op, *dim, a->ndim, 0, &d)) return NULL;
  zorch_tensor *src = dim && a->ndim ? zorch_tensor_retain(a) : zorch_reshape(a, 1, (int64_t[]){-1});
  if (!src) return NULL;
  int64_t n = src->shape[d], nr = zorch_tensor_numel(repeats), total = 0;
  int64_t *r = NULL, *v = NULL;
  zorch_tensor *out = NULL;
  if (nr != 1 && nr != n) {
    err_set(ZORCH_ERR_SHAPE, "%s: repeats %s must have one count, or one per element of dim " ERR_IX("%d")
            " of input %s (%lld)", op, SHAPE(repeats, s1), dim ? *dim : 0, SHAPE(a, s2), (long long)n);
    goto done;
  }
  if (!(r = malloc(sizeof *r * (size_t)(nr ? nr : 1)))) {
    err_set(ZORCH_ERR_OOM, "%s: out of memory", op);
    goto done;
  }
  if (zorch_tensor_to_i64s(repeats, r, nr)) goto done;
  for (int64_t i = 0; i < n; i++) {
    int64_t k = r[nr == 1 ? 0 : i];
    if (k < 0) {
      err_set(ZORCH_ERR_ARG, "%s: repeats must be >= 0, got %lld", op, (long long)k);
      goto done;
    }
    if (__builtin_add_overflow(total, k, &total)) {
      err_set(ZORCH_ERR_ARG, "%s: the repeats add up past int64", op);
      goto done;
    }
  }
  if (!(v = malloc(sizeof *v * (size_t)(total ? total : 1)))) {
    err_set(ZORCH_ERR_OOM, "%s: out of memory", op);
    goto done;
  }
  for (int64_t i = 0, at = 0; i < n; i++)
    for (int64_t k = 0; k < r[nr == 1 ? 0 : i]; k++) v[at++] = i;
  out = pick(src, d, total, v);
done:
  free(r);
  free(v);
  zorch_tensor_free(src);
  if (!out) err_prefix(op);
  return out;
}

/* ---- unbind, movedim, unflatten ------------------------------------------------------------- */
zorch_status zorch_unbind(zorch_tensor *a, int dim, zorch_tensor **out) {
  if (check_arg("unbind", "input", a)) return zorch_last_status();
  if (a->ndim == 0) return err_set(ZORCH_ERR_SHAPE, "unbind: cannot unbind a 0-dimensional tensor");
  int d;
  if (dim_wrap("unbind", dim, a->ndim, 0, &d)) return zorch_last_status();
  for (int64_t i = 0; i < a->shape[d]; i++)
    if (!(out[i] = zorch_select(a, d, i))) {
      while (i > 0) zorch_tensor_free(out[--i]);
      return zorch_last_status();
    }
  return ZORCH_OK;
}

zorch_tensor *zorch_movedim(zorch_tensor *a, int n, const int *src, const int *dst) {
  if (check_arg("movedim", "input", a)) return NULL;
  int s[ZORCH_MAX_DIMS], t[ZORCH_MAX_DIMS], perm[ZORCH_MAX_DIMS];
  if (wrap_dims("movedim", a, n, src, s) || wrap_dims("movedim", a, n, dst, t)) return NULL;
  bool used_src[ZORCH_MAX_DIMS] = {0}, used_dst[ZORCH_MAX_DIMS] = {0};
  for (int i = 0; i < n && a->ndim; i++) {
    perm[t[i]] = s[i];
    used_src[s[i]] = used_dst[t[i]] = true;
  }
  for (int i = 0, k = 0; i < a->ndim; i++) { /* the other dims keep their order */
    if (used_dst[i]) continue;
    while (used_src[k]) k++;
    perm[i] = k++;
  }
  return zorch_permute(a, perm);
}

zorch_tensor *zorch_unflatten(zorch_tensor *a, int dim, int nsizes, const int64_t *sizes) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (check_arg("unflatten", "input", a)) return NULL;
  int d;
  if (dim_wrap("unflatten", dim, a->ndim, 0, &d)) return NULL;
  if (nsizes < 1 || !sizes) return err_null(ZORCH_ERR_ARG, "unflatten: sizes must not be empty");
  if (a->ndim - 1 + nsizes > ZORCH_MAX_DIMS)
    return err_null(ZORCH_ERR_SHAPE, "unflatten: the result would have more than %d dims", ZORCH_MAX_DIMS);
  int64_t sh[ZORCH_MAX_DIMS], known = 1;
  int k = 0, infer = -1;
  bool zero = false, over = false; /* a 0 among the sizes; a product past 64 bits */
  for (int i = 0; i < a->ndim; i++) {
    if (i != d) {
      sh[k++] = a->shape[i];
      continue;
    }
    for (int j = 0; j < nsizes; j++, k++) {
      sh[k] = sizes[j];
      if (sizes[j] == -1 && infer < 0) infer = k;
      else if (sizes[j] < 0)
        return err_null(ZORCH_ERR_SHAPE, "unflatten: bad sizes %s (at most one -1, others >= 0)",
                        err_shape_str(nsizes, sizes, s1, sizeof s1));
      else {
        zero |= sizes[j] == 0;
        over |= __builtin_mul_overflow(known, sizes[j], &known);
      }
    }
  }
  if (zero) known = 0;
  int64_t n = a->shape[d];
  if (over && !zero)
    return err_null(ZORCH_ERR_SHAPE, "unflatten: sizes %s multiply past 64 bits, not to %lld, the size of dim " ERR_IX("%d")
                    " of input %s", err_shape_str(nsizes, sizes, s1, sizeof s1), (long long)n, dim, SHAPE(a, s2));
  if (infer >= 0 && known && n % known == 0) sh[infer] = n / known;
  else if (infer >= 0 || known != n)
    return err_null(ZORCH_ERR_SHAPE, "unflatten: sizes %s do not multiply to %lld, the size of dim " ERR_IX("%d")
                    " of input %s", err_shape_str(nsizes, sizes, s1, sizeof s1), (long long)n, dim, SHAPE(a, s2));
  return zorch_reshape(a, k, sh);
}

/* ---- pad ------------------------------------------------------------------------------------- */
static const char *const pad_names[] = {"constant", "reflect", "replicate", "circular"};

/* a padded along dim d by lo rows before and hi after (both >= 0). */
static zorch_tensor *pad_dim(zorch_tensor *a, int d, int64_t lo, int64_t hi, zorch_pad_mode mode, double value) {
  int64_t n = a->shape[d];
  zorch_tensor *part[3] = {NULL, zorch_tensor_retain(a), NULL}, *out = NULL;
  for (int side = 0; side < 2; side++) {
    int64_t p = side ? hi : lo;
    if (p == 0) continue;
    zorch_tensor **t = &part[side ? 2 : 0];
    if (mode == ZORCH_PAD_CONSTANT) {
      int64_t sh[ZORCH_MAX_DIMS];
      memcpy(sh, a->shape, sizeof sh);
      sh[d] = p;
      if ((*t = op_empty(a, a->ndim, sh, a->dtype)) && op_fill_(*t, value)) zorch_tensor_free(*t), *t = NULL;
    } else if (mode == ZORCH_PAD_CIRCULAR) {
      *t = zorch_narrow(a, d, side ? 0 : n - p, p);
    } else {
      int64_t *v = malloc(sizeof *v * (size_t)p);
      if (!v) {
        err_set(ZORCH_ERR_OOM, "pad: out of memory");
        goto done;
      }
      for (int64_t k = 0; k < p; k++)
        v[k] = mode == ZORCH_PAD_REPLICATE ? (side ? n - 1 : 0) : side ? n - 2 - k : p - k;
      *t = pick(a, d, p, v);
      free(v);
    }
    if (!*t) goto done;
  }
  zorch_tensor *list[3];
  int cnt = 0;
  for (int i = 0; i < 3; i++)
    if (part[i]) list[cnt++] = part[i];
  out = cnt == 1 ? zorch_tensor_retain(a) : zorch_cat(cnt, list, d);
done:
  OP_FREE(part[0], part[1], part[2]);
  return out;
}

zorch_tensor *zorch_pad(zorch_tensor *a, int npads, const int64_t *pads, zorch_pad_mode mode, double value) {
  char s[ERR_SHAPE_BUF];
  if (check_arg("pad", "input", a)) return NULL;
  if ((unsigned)mode > ZORCH_PAD_CIRCULAR) return err_null(ZORCH_ERR_ARG, "pad: unknown mode %d", (int)mode);
  if (npads < 0 || npads % 2 || (npads && !pads))
    return err_null(ZORCH_ERR_ARG, "pad: pads must come in pairs (before, after), got %d values", npads);
  int nd = npads / 2;
  if (nd > a->ndim)
    return err_null(ZORCH_ERR_SHAPE, "pad: %d pads pad %d dims, but input %s has %d", npads, nd, SHAPE(a, s), a->ndim);
  for (int i = 0; i < nd; i++) { /* bounds the crops below, so negating and adding them cannot overflow */
    int d = a->ndim - 1 - i;
    int64_t lo = pads[2 * i], hi = pads[2 * i + 1];
    if (lo < -a->shape[d] || hi < -a->shape[d])
      return err_null(ZORCH_ERR_SHAPE, "pad: pads %lld and %lld crop more than dim " ERR_IX("%d") " of input %s holds",
                      (long long)lo, (long long)hi, d, SHAPE(a, s));
  }
  const char *mname = pad_names[mode];
  if (mode != ZORCH_PAD_CONSTANT) { /* PyTorch's: a batch and channels before 1 to 3 padded dims */
    if (nd < 1 || nd > 3 || a->ndim < nd + 1 || a->ndim > nd + 2)
      return err_null(ZORCH_ERR_SHAPE, "pad: mode '%s' pads the last 1 to 3 dims of a tensor with 1 or 2 more "
                      "dims, got %d pads for input %s", mname, npads, SHAPE(a, s));
    for (int i = 0; i < nd; i++) {
      int d = a->ndim - 1 - i;
      int64_t n = a->shape[d], lo = pads[2 * i], hi = pads[2 * i + 1];
      if (mode == ZORCH_PAD_CIRCULAR) /* negative pads crop first; the rest wraps around what is left */
        n -= (lo < 0 ? -lo : 0) + (hi < 0 ? -hi : 0);
      int64_t lim = mode == ZORCH_PAD_REFLECT ? n - 1 : mode == ZORCH_PAD_CIRCULAR ? n : INT64_MAX;
      if (mode != ZORCH_PAD_CIRCULAR && (lo < 0 || hi < 0))
        return err_null(ZORCH_ERR_ARG, "pad: mode '%s' takes pads >= 0, got %lld and %lld for dim " ERR_IX("%d"),
                        mname, (long long)lo, (long long)hi, d);
      if (n <= 0 || lo > lim || hi > lim)
        return err_null(ZORCH_ERR_SHAPE, "pad: mode '%s' pads dim " ERR_IX("%d") " of input %s by at most %lld, "
                        "got %lld and %lld", mname, d, SHAPE(a, s), (long long)(n > 0 ? lim : 0), (long long)lo,
                        (long long)hi);
    }
  }
  zorch_tensor *cur = zorch_tensor_retain(a);
  for (int i = 0; i < nd && cur; i++) {
    int d = a->ndim - 1 - i;
    int64_t lo = pads[2 * i], hi = pads[2 * i + 1], n = cur->shape[d];
    zorch_tensor *c = NULL, *next = NULL;
    if (lo < 0 || hi < 0) { /* negative pads crop (constant and circular modes) */
      int64_t cl = lo < 0 ? -lo : 0, ch = hi < 0 ? -hi : 0;
      if (cl + ch > n) {
        err_set(ZORCH_ERR_SHAPE, "pad: pads %lld and %lld crop more than dim " ERR_IX("%d") " of input %s holds",
                (long long)lo, (long long)hi, d, SHAPE(a, s));
        zorch_tensor_free(cur);
        return NULL;
      }
      c = zorch_narrow(cur, d, cl, n - cl - ch);
    } else {
      c = zorch_tensor_retain(cur);
    }
    if (c) next = pad_dim(c, d, lo > 0 ? lo : 0, hi > 0 ? hi : 0, mode, value);
    OP_FREE(c, cur);
    cur = next;
  }
  cur = own(cur, a);
  if (!cur) err_prefix("pad");
  return cur;
}
