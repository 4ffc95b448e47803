/* norm.c: the gradient's global norm (fp64 sums of squares in a fixed order,
   in memory or from the parameter file) and the one factor that unscales and
   clips it. */
#include <math.h>
#include <stdlib.h>

#include "engine_impl.h"

/* The sum of squares in double, in a fixed order whatever the thread count:
   blocks of SQ_BLOCK summed in 16 interleaved lanes each (independent chains,
   where one running sum waited on every add), the blocks' sums added in order. */
static double block_sumsq(const float *q, int64_t m) {
  int64_t j = 0;
  double lane[16] = {0};
  for (; j + 16 <= m; j += 16)
    for (int k = 0; k < 16; k++) lane[k] += (double)q[j + k] * q[j + k];
  double r = 0;
  for (int k = 0; k < 16; k++) r += lane[k];
  for (; j < m; j++) r += (double)q[j] * q[j];
  return r;
}

/* The gradient's elements [start, start + n) of the shard were just written
   from q: the sums of squares of the blocks they hold whole, for the clip;
   the blocks they cut are left to it to read. */
void norm_note_sums(zero_engine *e, const float *q, int64_t start, int64_t n) {
  if (n <= 0) return;
  for (int64_t b = start / SQ_BLOCK; b < e->nblk && b * SQ_BLOCK < start + n; b++) {
    int64_t lo = b * SQ_BLOCK, hi = lo + SQ_BLOCK < e->shard ? lo + SQ_BLOCK : e->shard;
    e->bvalid[b] = lo >= start && hi <= start + n;
    if (e->bvalid[b]) e->bsum[b] = block_sumsq(q + (lo - start), hi - lo);
  }
}

static double sum_squares(const float *p, int64_t n) {
  int64_t nb = (n + SQ_BLOCK - 1) / SQ_BLOCK;
  double stack[64], *part = nb <= 64 ? stack : malloc(sizeof(double) * (size_t)nb);
  double s = 0;
  if (!part) { /* (no memory for the partial sums: one chain) */
    for (int64_t i = 0; i < n; i++) s += (double)p[i] * p[i];
    return s;
  }
#pragma omp parallel for if (nb > 1)
  for (int64_t b = 0; b < nb; b++) {
    int64_t m = n - b * SQ_BLOCK < SQ_BLOCK ? n - b * SQ_BLOCK : SQ_BLOCK;
    part[b] = block_sumsq(p + b * SQ_BLOCK, m);
  }
  for (int64_t b = 0; b < nb; b++) s += part[b];
  if (part != stack) free(part);
  return s;
}

/* The global sum of squares: t (one float64, this rank's sum; freed here)
   summed over the ranks when the gradient is sharded; *norm the unscaled norm,
   *overflow when it is inf or nan. */
static zorch_status global_norm(zero_engine *e, zorch_tensor *t, bool sharded, const zero_norm *nx,
                                double loss_scale, double *norm, bool *overflow) {
  zorch_status st = t ? ZORCH_OK : zorch_last_status();
  if (!st && sharded && e->c->world > 1) {
    comm_set_label("the gradient norm");
    st = comm_allreduce(e->c, t, false);
  }
  if (nx && nx->ncomms) comm_set_label("the gradient norm over the model's ranks");
  for (int k = 0; !st && nx && k < nx->ncomms; k++) st = comm_allreduce(nx->comms[k], t, false);
  double sq = 0;
  if (!st) st = zorch_tensor_to_doubles(t, &sq, 1);
  zorch_tensor_free(t);
  if (st) return st;
  *overflow = !isfinite(sq);
  if (e->local_grads && e->c->world > 1) { /* each rank's own norm: every rank must skip an overflow alike */
    double any = *overflow;
    int64_t one = 1;
    zorch_tensor *f = zorch_tensor_wrap(&any, ZORCH_F64, 1, &one, NULL);
    comm_set_label("the overflow check");
    st = f ? comm_allreduce(e->c, f, true) : zorch_last_status();
    zorch_tensor_free(f);
    if (st) return st;
    *overflow = any != 0;
  }
  *norm = sqrt(sq) / loss_scale;
  return ZORCH_OK;
}

/* The file's gradient multiplied by the factor a clip left pending, in
   pieces read, multiplied and written back (a second clip before the step:
   the in-memory gradient would have been scaled by the first). */
#define PF_BLOCKS 16
static zorch_status pfile_apply_coef(zero_engine *e) {
  double coef = e->gcoef;
  if (coef == 1.0) return ZORCH_OK;
  int64_t per = (int64_t)SQ_BLOCK * PF_BLOCKS, n = e->shard;
  float *buf = malloc((size_t)per * sizeof(float));
  if (!buf) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  zorch_status st = ZORCH_OK;
  for (int64_t lo = 0; !st && lo < n; lo += per) {
    int64_t m = n - lo < per ? n - lo : per;
    zorch_tensor *w = NULL;
    if (!(st = pfile_io(e, false, buf, lo, m, 1))) {
      w = zorch_tensor_wrap(buf, ZORCH_F32, 1, &m, NULL);
      st = w ? scale(w, coef) : zorch_last_status();
    }
    zorch_tensor_free(w);
    if (!st) st = pfile_io(e, true, buf, lo, m, 1), norm_note_sums(e, buf, lo, m);
  }
  free(buf);
  if (!st) e->gcoef = 1;
  return st;
}

/* zero_engine_clip for a gradient in the parameter file: the same blocks'
   sums in the same order, most of them taken as the buckets were written
   (norm_note_sums), the blocks a bucket's edge cut read back; the factor is
   left pending for the optimizer's stream to apply as it reads each chunk
   (zero_engine_take_grad_scale), so the step reads the gradient once. */
static zorch_status pfile_clip(zero_engine *e, bool sharded, double max_norm, double loss_scale, double *norm,
                               bool *overflow) {
  zorch_status st = pfile_behind_wait(e, 0);
  if (!st) st = pfile_apply_coef(e);
  if (st) return st;
  int64_t n = e->shard;
  float *buf = NULL;
  double s = 0;
  for (int64_t b = 0; b < e->nblk && !st; b++) {
    if (!e->bvalid[b]) { /* this block and the invalid ones after it (up to PF_BLOCKS) from the file */
      int64_t nb = 1;
      while (nb < PF_BLOCKS && b + nb < e->nblk && !e->bvalid[b + nb]) nb++;
      int64_t lo = b * SQ_BLOCK, m = (b + nb) * SQ_BLOCK < n ? nb * SQ_BLOCK : n - lo;
      if (!buf && !(buf = malloc((size_t)SQ_BLOCK * PF_BLOCKS * sizeof(float)))) {
        st = err_set(ZORCH_ERR_OOM, "zero: out of memory");
        break;
      }
      if ((st = pfile_io(e, false, buf, lo, m, 1))) break;
#pragma omp parallel for if (nb > 1)
      for (int64_t k = 0; k < nb; k++)
        e->bsum[b + k] = block_sumsq(buf + k * SQ_BLOCK, m - k * SQ_BLOCK < SQ_BLOCK ? m - k * SQ_BLOCK : SQ_BLOCK);
      for (int64_t k = 0; k < nb; k++) e->bvalid[b + k] = true;
    }
  }
  free(buf);
  for (int64_t b = 0; b < e->nblk && !st; b++) s += e->bsum[b];
  int64_t one = 1;
  if (!st) st = global_norm(e, zorch_full(1, &one, s, ZORCH_F64, e->dev), sharded, NULL, loss_scale, norm, overflow);
  if (st || *overflow) return st;
  double coef = 1.0 / loss_scale, clip = max_norm / (*norm + 1e-6);
  if (max_norm > 0 && clip < 1) coef *= clip;
  e->gcoef = coef;
  return ZORCH_OK;
}

double zero_engine_take_grad_scale(zero_engine *e) {
  double c = e->gcoef;
  e->gcoef = 1;
  return c;
}

/* The sum of squares of n elements of g from element lo (float64, one
   element, on g's device): in order on the CPU, on the device otherwise
   (squares in float32, no float64 copy of the shard, summed in double). */
static zorch_tensor *part_sumsq(zero_engine *e, zorch_tensor *g, int64_t lo, int64_t n) {
  int64_t one = 1;
  if (e->dev.type == ZORCH_CPU) return zorch_full(1, &one, sum_squares((const float *)tensor_ptr(g) + lo, n), ZORCH_F64, e->dev);
  zorch_tensor *part = NULL, *sq2 = NULL, *s0 = NULL, *s1 = NULL, *t = NULL;
  if ((part = zorch_narrow(g, 0, lo, n)) && (sq2 = zorch_mul(part, part)) && (s0 = zorch_sum(sq2, 0, NULL, false)) &&
      (s1 = zorch_reshape(s0, 1, &one)))
    t = zorch_to_dtype(s1, ZORCH_F64);
  OP_FREE(part, sq2, s0, s1);
  return t;
}

/* The weighted runs' sum: each run's squares times its weight, added in order. */
static zorch_tensor *runs_sumsq(zero_engine *e, zorch_tensor *g, const zero_norm *nx) {
  int64_t one = 1, n = zorch_tensor_numel(g);
  double s = 0;
  for (int k = 0; k < nx->nruns; k++) {
    const zero_norm_run *r = &nx->runs[k];
    if (r->lo < 0 || r->len < 0 || r->lo + r->len > n)
      return err_null(ZORCH_ERR_ARG, "zero: a norm run [%lld, %lld) is outside the gradient's %lld elements",
                      (long long)r->lo, (long long)(r->lo + r->len), (long long)n);
    zorch_tensor *t = part_sumsq(e, g, r->lo, r->len);
    double v = 0;
    zorch_status st = t ? zorch_tensor_to_doubles(t, &v, 1) : zorch_last_status();
    zorch_tensor_free(t);
    if (st) return NULL;
    s += r->w * v;
  }
  return zorch_full(1, &one, s, ZORCH_F64, e->dev);
}

zorch_status zero_engine_clip(zero_engine *e, zorch_tensor *g, bool sharded, double max_norm, double loss_scale,
                              const zero_norm *nx, double *norm, bool *overflow) {
  if (!zorch_tensor_is_contiguous(g) || g->dtype != ZORCH_F32)
    return err_set(ZORCH_ERR_ARG, "zero: clipping needs a contiguous float32 gradient");
  bool in_file = e->pfd >= 0 && g->st == e->gshard->st;
  bool weighted = nx && nx->weighted;
  if (in_file && !weighted) /* the gradient in the file: streamed */
    return pfile_clip(e, sharded, max_norm, loss_scale, norm, overflow);
  zorch_status st = in_file ? pfile_behind_wait(e, 0) : ZORCH_OK;
  if (!st && in_file) st = pfile_apply_coef(e);
  if (st) return st;
  zorch_tensor *t = weighted ? runs_sumsq(e, g, nx) : part_sumsq(e, g, 0, zorch_tensor_numel(g));
  st = global_norm(e, t, sharded, nx, loss_scale, norm, overflow);
  if (st || *overflow) return st;
  /* one factor: unscale, and clip the unscaled gradient */
  double coef = 1.0 / loss_scale, clip = max_norm / (*norm + 1e-6);
  if (max_norm > 0 && clip < 1) coef *= clip;
  if (in_file) return e->gcoef = coef, ZORCH_OK;
  if (coef != 1.0 && e->host_grad && g->st == e->gshard->st && e->nhost_coef >= 0) /* (for the host copy) */
    e->nhost_coef < 4 ? (void)(e->host_coef[e->nhost_coef++] = coef) : (void)(e->nhost_coef = -1);
  return coef != 1.0 ? scale(g, coef) : ZORCH_OK;
}
