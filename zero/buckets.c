/* buckets.c: the gradient buckets (stages 2-3), filled from the gradient-ready
   hooks and reduce-scattered into this rank's shard as they fill (in flight
   with overlap_comm), and the reduced gradient's host copy on a GPU rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/backend/cudamod.h"
#include "engine_impl.h"

static zorch_status host_copy_part(zero_engine *e, int64_t start, int64_t n);

/* The reduced part of a bucket joins this rank's gradient shard. */
static zorch_status finish_bucket(zero_engine *e, bucket *b, zorch_tensor *recv, int64_t mine) {
  zorch_status st = ZORCH_OK;
  /* the mean, before it joins the shard: a 16-bit shard holds the mean of the
     ranks' loss-scaled gradients where their sum could overflow (DeepSpeed
     divides before its reduce-scatter too) */
  if (mine > 0 && e->c->world > 1) st = scale(recv, 1.0 / e->c->world);
  if (!st && mine > 0) {
    int64_t start = (b->lo > e->c->rank * e->shard ? b->lo : e->c->rank * e->shard) - e->c->rank * e->shard;
    if (e->pfd >= 0) {
      st = pfile_add(e, (int)(b - e->buckets), start, recv);
    } else {
      zorch_tensor *dst = range(e->gshard, start, mine);
      st = dst ? op_add_(dst, recv) : zorch_last_status();
      zorch_tensor_free(dst);
      if (!st && e->host_grad) st = host_copy_part(e, start, mine);
    }
  }
  zorch_tensor_free(b->buf);
  b->buf = NULL;
  b->pending = b->size;
  return st;
}

/* This rank's share of bucket b. */
static int64_t bucket_mine(const zero_engine *e, const bucket *b) {
  int64_t a = b->lo > e->c->rank * e->shard ? b->lo : e->c->rank * e->shard;
  int64_t z = b->hi < (e->c->rank + 1) * e->shard ? b->hi : (e->c->rank + 1) * e->shard;
  return z > a ? z - a : 0;
}

/* A reduction in flight has completed (or must now): it joins the shard. */
static zorch_status land_bucket(zero_engine *e, bucket *b, bool wait) {
  double t0 = comm_clock();
  zorch_status st = wait ? comm_wait(b->req) : ZORCH_OK;
  double t1 = comm_clock();
  b->req = NULL;
  b->in_flight = false;
  if (st == ZORCH_ERR_TIMEOUT) { /* MPI still owns the buffers */
    b->buf = b->recv = NULL;
    e->leaked = true;
    return st;
  }
  if (wait) e->t_wait += t1 - t0;
  e->t_flight += t1 - b->posted;
  if (!st) st = finish_bucket(e, b, b->recv, bucket_mine(e, b));
  zorch_tensor_free(b->recv);
  b->recv = NULL;
  if (st) err_prefix("zero bucket reduction");
  return st;
}

/* Lands the reductions in flight that have completed, oldest first (each test
   also moves MPI's progress on); with `all`, waits for every one. */
zorch_status bucket_progress(zero_engine *e, bool all) {
  zorch_status first = ZORCH_OK;
  while (e->nflight > 0) {
    bucket *b = &e->buckets[e->flight[e->flight_head]];
    bool done = all;
    if (!all) {
      zorch_status st = comm_test(b->req, &done);
      if (st) return st;
      if (done) comm_wait(b->req), b->req = NULL; /* frees the request */
    }
    if (!done) return ZORCH_OK;
    e->flight_head = (e->flight_head + 1) % e->nbuckets;
    e->nflight--;
    /* waiting for all, every one is waited for: none may stay with MPI unseen */
    zorch_status st = land_bucket(e, b, all);
    if (st && !all) return st;
    if (st && !first) first = st;
  }
  return first;
}

/* Waits for the reductions in flight (after a failed backward: the other ranks
   run them too); what fails here has nothing left to undo. */
void bucket_drain(zero_engine *e) {
  if (e->nflight) (void)bucket_progress(e, true); /* its error was the backward's, or is moot */
  e->nflight = 0;
}

zorch_status bucket_reduce(zero_engine *e, bucket *b) {
  int world = e->c->world;
  int64_t counts[256], *cnt = world <= 256 ? counts : malloc(sizeof(int64_t) * (size_t)world);
  if (!cnt) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  overlap_counts(e, b->lo, b->hi, cnt);
  int64_t mine = cnt[e->c->rank], len = b->hi - b->lo, one = mine ? mine : 1;
  zorch_status st = ZORCH_OK;
  if (!b->buf && !(b->buf = zorch_zeros(1, &len, ZORCH_F32, e->dev)))
    st = zorch_last_status();
  /* in flight, the bucket needs a receive buffer of its own */
  zorch_tensor *recv = st ? NULL : e->o.overlap ? zorch_empty(1, &one, ZORCH_F32, e->dev) : range(e->recv, 0, mine);
  if (!st && !recv) st = zorch_last_status();
  if (!st && e->o.overlap && mine != one) { /* a zero-length view of it for the collective */
    zorch_tensor *v = range(recv, 0, 0);
    zorch_tensor_free(recv);
    if (!(recv = v)) st = zorch_last_status();
  }
  char label[96];
  snprintf(label, sizeof label, "gradient bucket %d (elements %lld-%lld)", (int)(b - e->buckets),
           (long long)b->lo, (long long)b->hi);
  comm_set_label(label);
  if (!st && e->o.overlap) {
    b->posted = comm_clock();
    st = comm_ireduce_scatter(e->c, b->buf, recv, cnt, &b->req);
    if (!st) {
      b->recv = recv;
      recv = NULL;
      b->in_flight = true;
      e->flight[(e->flight_head + e->nflight) % e->nbuckets] = (int)(b - e->buckets);
      e->nflight++;
    }
  } else if (!st) {
    double t0 = comm_clock();
    st = comm_reduce_scatter(e->c, b->buf, recv, cnt);
    double dt = comm_clock() - t0;
    e->t_wait += dt, e->t_flight += dt;
    if (!st) st = finish_bucket(e, b, recv, mine);
  }
  zorch_tensor_free(recv);
  if (cnt != counts) free(cnt);
  if (st) err_prefix("zero bucket reduction");
  return st;
}

/* Gradient-ready hook (stages 2-3): the gradient goes into its bucket and the
   parameter's own copy is dropped; a full bucket is reduced at once. */
static zorch_status on_grad(zorch_tensor *leaf, void *ud) {
  param_ctx *pc = ud;
  zero_engine *e = pc->e;
  bucket *b = &e->buckets[e->bucket_of[pc->index]];
  zorch_tensor *g = leaf->grad;
  if (g) {
    int64_t len = b->hi - b->lo;
    if (!b->buf && !(b->buf = zorch_zeros(1, &len, ZORCH_F32, e->dev)))
      return zorch_last_status();
    zorch_tensor *dst = flat_view(b->buf, e->offset[pc->index] - b->lo, g->ndim, g->shape);
    zorch_status st = dst ? op_copy_(dst, g) : zorch_last_status();
    zorch_tensor_free(dst);
    if (st) return st;
    zorch_set_grad(leaf, NULL);
  }
  if (e->groups) { /* stage 3: a group whose gradients are all in goes back */
    group *gr = &e->groups[e->group_of[pc->index]];
    if (--gr->pending == 0) {
      gather_release(e, gr);
      gr->pending = gr->count;
    }
  }
  if (e->nflight) {
    zorch_status st = bucket_progress(e, false);
    if (st) return st;
  }
  if (e->ngflight) {
    zorch_status st = gather_progress(e);
    if (st) return st;
  }
  if (--b->pending == 0) return bucket_reduce(e, b);
  return ZORCH_OK;
}

/* Buckets: runs of parameters in reverse order (the order gradients arrive). */
zorch_status bucket_setup(zero_engine *e) {
  e->buckets = calloc((size_t)e->n, sizeof *e->buckets);
  e->bucket_of = calloc((size_t)e->n, sizeof *e->bucket_of);
  e->ctx = calloc((size_t)e->n, sizeof *e->ctx);
  e->flight = calloc((size_t)e->n, sizeof *e->flight);
  if (!e->buckets || !e->bucket_of || !e->ctx || !e->flight) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  bucket *cur = NULL;
  for (int i = e->n - 1; i >= 0; i--) {
    int64_t lo = e->offset[i], hi = lo + zorch_tensor_numel(e->params[i]);
    if (!cur || cur->hi - lo > e->o.bucket) {
      cur = &e->buckets[e->nbuckets++];
      cur->hi = hi;
    }
    cur->lo = lo;
    cur->size++;
    e->bucket_of[i] = (int)(cur - e->buckets);
  }
  /* the receive buffer holds this rank's part of a bucket: at most a shard */
  int64_t mlo = e->c->rank * e->shard, mhi = mlo + e->shard, mine = 1;
  for (int k = 0; k < e->nbuckets; k++) {
    bucket *b = &e->buckets[k];
    b->pending = b->size;
    int64_t lo = b->lo > mlo ? b->lo : mlo, hi = b->hi < mhi ? b->hi : mhi;
    if (hi - lo > mine) mine = hi - lo;
  }
  if (!(e->recv = zorch_zeros(1, &mine, ZORCH_F32, e->dev))) return zorch_last_status();
  zorch_device cpu = {ZORCH_CPU, 0};
  int64_t glen = e->pstaged ? 3 * mine : 2 * mine;
  const char *wb = getenv("ZORCH_OFFLOAD_WRITE_BEHIND");
  e->gw_on = !(wb && !strcmp(wb, "0"));
  e->gtmp_half = mine;
  if (e->pfd >= 0 && (!(e->gtmp = zorch_zeros(1, &glen, ZORCH_F32, cpu)) ||
                      !(e->gwritten = calloc((size_t)e->nbuckets, sizeof *e->gwritten))))
    return zorch_tensor_free(e->gtmp), e->gtmp = NULL, err_set(ZORCH_ERR_OOM, "zero: out of memory");
  for (int i = 0; i < e->n; i++) {
    e->ctx[i] = (param_ctx){e, i};
    zorch_status st = zorch_set_grad_hook(e->params[i], on_grad, &e->ctx[i]);
    if (st) return st;
  }
  return ZORCH_OK;
}

/* ---- offload on a GPU rank: the reduced gradient's host copy, bucket by bucket ---- */

zorch_status zero_engine_set_host_grad(zero_engine *e, zorch_tensor *host) {
  if (e->o.stage < 2 || e->pdt != ZORCH_F32 || e->pfd >= 0)
    return err_set(ZORCH_ERR_STATE, "zero: the gradient's host copy by bucket needs stage 2 or 3, float32, no parameter file");
  if (!host || host->dtype != ZORCH_F32 || zorch_tensor_numel(host) != e->shard || !zorch_tensor_is_contiguous(host) ||
      host->st->device.type != ZORCH_CPU)
    return err_set(ZORCH_ERR_ARG, "zero: the gradient's host copy must be a contiguous float32 CPU tensor of %lld elements",
                   (long long)e->shard);
  zorch_tensor_free(e->host_grad);
  e->host_grad = zorch_tensor_retain(host);
  e->nhost_coef = 0;
  return op_fill_(host, 0);
}

/* A reduced part [start, start + n) of gshard to the host copy: on a GPU on
   the side stream (backward goes on), on the CPU (the tests' emulation of
   that path) at once. */
static zorch_status host_copy_part(zero_engine *e, int64_t start, int64_t n) {
  if (n <= 0) return ZORCH_OK;
  char *dst = (char *)tensor_ptr(e->host_grad) + start * 4;
  const char *src = (const char *)tensor_ptr(e->gshard) + start * 4;
  if (e->dev.type != ZORCH_CPU) return cuda_copy_to_host_async(dst, src, (size_t)n * 4, e->dev.index);
  memcpy(dst, src, (size_t)n * 4);
  return ZORCH_OK;
}

zorch_status zero_engine_host_grad_finish(zero_engine *e) {
  if (!e->host_grad) return err_set(ZORCH_ERR_STATE, "zero: no gradient host copy was set");
  zorch_status st = e->dev.type != ZORCH_CPU ? cuda_copy_wait(e->dev.index) : ZORCH_OK;
  if (!st && e->nhost_coef < 0) st = op_copy_(e->host_grad, e->gshard); /* (the factors are in gshard) */
  for (int k = 0; !st && k < e->nhost_coef; k++) st = scale(e->host_grad, e->host_coef[k]);
  e->nhost_coef = 0;
  return st;
}
