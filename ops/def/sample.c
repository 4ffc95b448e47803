/* sample.c: multinomial sampling. The weights are read on the host and the
   indices drawn there from the generator's Philox stream (as randperm does), then
   copied to the weights' device: every device gets the same indices for one seed,
   and a sampling step in a generation loop moves only (rows, n) integers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/math.h"
#include "ops.h"

typedef struct {
  double key;
  int64_t idx;
} sample_key;

static int key_cmp(const void *a, const void *b) {
  const sample_key *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Checks one row of weights: finite, non-negative, some positive (and at least
   `need` positive without replacement). */
static zorch_status check_row(const double *w, int64_t ncat, int64_t row, int64_t need) {
  int64_t pos = 0;
  for (int64_t j = 0; j < ncat; j++) {
    if (!isfinite(w[j]) || w[j] < 0)
      return err_set(ZORCH_ERR_ARG, "multinomial: probs row " ERR_IX("%lld") " has weight %g at "
                     "position " ERR_IX("%lld") " (weights must be finite and non-negative)",
                     (long long)row, isnan(w[j]) ? fabs(w[j]) : w[j], (long long)j);
    pos += w[j] > 0;
  }
  if (pos == 0)
    return err_set(ZORCH_ERR_ARG, "multinomial: probs row " ERR_IX("%lld") " has no positive "
                   "weight (its sum is 0)", (long long)row);
  if (pos < need)
    return err_set(ZORCH_ERR_ARG, "multinomial: cannot draw %lld samples without replacement "
                   "from row " ERR_IX("%lld") ", which has %lld positive weights",
                   (long long)need, (long long)row, (long long)pos);
  return ZORCH_OK;
}

/* With replacement: each draw inverts the row's cumulative sum at u * total. */
static void draw_with(const double *w, int64_t ncat, int64_t n, uint64_t seed,
                      uint64_t off, int64_t first, double *cdf, int64_t *out) {
  double s = 0;
  int64_t last = 0; /* the last positive weight: where rounding at the top lands */
  for (int64_t j = 0; j < ncat; j++) {
    s += w[j];
    cdf[j] = s;
    if (w[j] > 0) last = j;
  }
  for (int64_t t = 0; t < n; t++) {
    double u = zm_random_unit_f64(seed, off, first + t) * s;
    int64_t lo = 0, hi = ncat; /* the first j with cdf[j] > u */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    out[t] = lo > last ? last : lo;
  }
}

/* Without replacement: the order of exponential arrival times E_j / w_j is the
   order of drawing one at a time, each draw from what is left in proportion to
   its weight; the first n are the sample. */
static void draw_without(const double *w, int64_t ncat, int64_t n, uint64_t seed, uint64_t off,
                         int64_t first, sample_key *keys, int64_t *out) {
  for (int64_t j = 0; j < ncat; j++) {
    double e = -log(1.0 - zm_random_unit_f64(seed, off, first + j)); /* u in (0, 1] */
    keys[j].key = w[j] > 0 ? e / w[j] : INFINITY;
    keys[j].idx = j;
  }
  qsort(keys, (size_t)ncat, sizeof *keys, key_cmp);
  for (int64_t t = 0; t < n; t++) out[t] = keys[t].idx;
}

zorch_tensor *zorch_multinomial(zorch_tensor *probs, int64_t n, bool replacement,
                                zorch_generator *gen) {
  char s1[ERR_SHAPE_BUF];
  if (check_arg("multinomial", "probs", probs)) return NULL;
  if (!zorch_dtype_is_float(probs->dtype))
    return err_null(ZORCH_ERR_DTYPE, "multinomial: probs must be floating point, got %s",
                    zorch_dtype_name(probs->dtype));
  if (probs->ndim != 1 && probs->ndim != 2)
    return err_null(ZORCH_ERR_SHAPE, "multinomial: probs must be (N) or (B, N), got %s",
                    SHAPE(probs, s1));
  int64_t ncat = probs->shape[probs->ndim - 1];
  int64_t rows = probs->ndim == 2 ? probs->shape[0] : 1;
  if (ncat < 1)
    return err_null(ZORCH_ERR_SHAPE, "multinomial: probs %s has no categories", SHAPE(probs, s1));
  if (n < 1)
    return err_null(ZORCH_ERR_ARG, "multinomial: the number of samples must be at least 1, got %lld",
                    (long long)n);
  if (!replacement && n > ncat)
    return err_null(ZORCH_ERR_ARG, "multinomial: cannot draw %lld samples without replacement "
                    "from %lld categories (probs %s)", (long long)n, (long long)ncat,
                    SHAPE(probs, s1));
  int64_t oshape[2] = {rows, n};
  int ond = probs->ndim;
  zorch_tensor *hp = NULL, *w = NULL, *host = NULL, *out = NULL;
  void *scratch = NULL;
  zorch_device cpu = {ZORCH_CPU, 0};
  if (!(hp = zorch_to_device(probs, cpu)) || !(w = op_cast_contig(hp, ZORCH_F64)) ||
      !(host = zorch_empty(ond, ond == 2 ? oshape : &n, ZORCH_I64, cpu)))
    goto done;
  scratch = malloc((size_t)ncat * (replacement ? sizeof(double) : sizeof(sample_key)));
  if (!scratch) {
    err_set(ZORCH_ERR_OOM, "multinomial: out of memory for %lld categories", (long long)ncat);
    goto done;
  }
  const double *wp = (const double *)tensor_ptr(w);
  int64_t *op = (int64_t *)tensor_ptr(host);
  for (int64_t r = 0; r < rows; r++)
    if (check_row(wp + r * ncat, ncat, r, replacement ? 0 : n)) goto done;
  {
    /* one uniform per draw with replacement, one per category without */
    int64_t per = replacement ? n : ncat;
    uint64_t seed, off = rng_reserve(gen, zm_random_blocks(rows * per, 0), &seed);
    for (int64_t r = 0; r < rows; r++) {
      if (replacement)
        draw_with(wp + r * ncat, ncat, n, seed, off, r * per, scratch, op + r * n);
      else
        draw_without(wp + r * ncat, ncat, n, seed, off, r * per, scratch, op + r * n);
    }
  }
  out = probs->st->device.type == ZORCH_CPU ? zorch_tensor_retain(host)
                                            : zorch_to_device(host, probs->st->device);
done:
  free(scratch);
  OP_FREE(hp, w, host);
  return out;
}
