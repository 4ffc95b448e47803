/* engine.c: the ZeRO partition manager's lifecycle (see engine.h; its state
   and the other files in engine_impl.h): the flat buffer and the stage's
   slices, the backward boundary, the reduced gradient and the target, the
   update's gathers, and the memory and time reports. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/backend/cudamod.h"
#include "engine_impl.h"

#define ZERO_ALIGN 16 /* elements: every shard is a multiple of this */

zero_engine *zero_engine_new(zero_comm *c, const zero_opts *o, int n, zorch_tensor *const *params) {
  if (!c || !o || n < 1 || !params || o->stage < 0 || o->stage > 3 || o->bucket < 1)
    return err_null(ZORCH_ERR_ARG, "zero: bad engine arguments");
  zero_engine *e = calloc(1, sizeof *e);
  if (!e) return err_null(ZORCH_ERR_OOM, "zero: out of memory");
  e->c = c;
  e->o = *o;
  e->n = n;
  e->pfd = -1;
  if (o->dtype != ZORCH_F32 && o->dtype != ZORCH_BF16 && o->dtype != ZORCH_F16) {
    free(e);
    return err_null(ZORCH_ERR_ARG, "zero: parameters must be float32, bfloat16 or float16");
  }
  e->pdt = o->dtype;
  e->params = calloc((size_t)n, sizeof *e->params);
  e->offset = calloc((size_t)n, sizeof *e->offset);
  zorch_status st = e->params && e->offset ? ZORCH_OK : err_set(ZORCH_ERR_OOM, "zero: out of memory");
  if (params[0]) e->dev = params[0]->st->device;
  for (int i = 0; i < n && !st; i++) {
    zorch_tensor *p = params[i];
    char dn[32];
    zorch_device_name(e->dev, dn, sizeof dn);
    if (!p || p->dtype != ZORCH_F32 || p->st->device.type != e->dev.type || p->st->device.index != e->dev.index)
      st = err_set(ZORCH_ERR_DTYPE, "zero: parameter %d must be a float32 tensor on %s (where the first one is)",
                   i + 1, dn);
    else {
      e->params[i] = zorch_tensor_retain(p);
      e->offset[i] = e->numel;
      e->numel += zorch_tensor_numel(p);
    }
  }
  if (st) goto fail_st;
  int64_t per = (e->numel + c->world - 1) / c->world;
  e->shard = (per + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
  e->padded = e->shard * c->world;
  /* the parameters in a file: no flat buffer; each parameter's slice of this
     shard goes straight to the file and gather_setup rebinds them */
  if (o->param_dir) {
    if ((st = pfile_open(e))) goto fail_st;
    if ((st = bucket_setup(e))) goto fail_st;
    if ((st = gather_setup(e))) goto fail_st;
    return e;
  }
  /* the flat buffer: copies of the parameters, which become its views */
  if (!(e->flat = zorch_zeros(1, &e->padded, e->pdt, e->dev))) goto fail;
  for (int i = 0; i < n; i++) {
    zorch_tensor *p = e->params[i];
    zorch_tensor *dst = flat_view(e->flat, e->offset[i], p->ndim, p->shape);
    st = dst ? op_copy_(dst, p) : zorch_last_status();
    zorch_tensor_free(dst);
    if (st) goto fail_st;
    tensor_rebind(p, e->flat, e->offset[i]);
  }
  if (!(e->pshard = range(e->flat, c->rank * e->shard, e->shard))) goto fail;
  if (e->pdt != ZORCH_F32 && !(e->master = zorch_to_dtype(o->stage == 0 ? e->flat : e->pshard, ZORCH_F32))) goto fail;
  if (o->stage <= 1 && !(e->gflat = zorch_zeros(1, &e->padded, e->pdt, e->dev))) goto fail;
  /* stage 1 reduces in place: its gradient slice is a view of the full buffer */
  if (o->stage == 1 && !(e->gshard = range(e->gflat, c->rank * e->shard, e->shard))) goto fail;
  if (o->stage >= 2 && !(e->gshard = zorch_zeros(1, &e->shard, e->pdt, e->dev))) goto fail;
  if (o->stage >= 2 && (st = bucket_setup(e))) goto fail_st;
  if (o->stage == 3 && (st = gather_setup(e))) goto fail_st;
  return e;
fail:
  st = zorch_last_status();
fail_st:
  zero_engine_free(e);
  return NULL;
}

void zero_engine_free(zero_engine *e) {
  if (!e) return;
  bucket_drain(e);
  if (e->gw_started) {
    (void)pfile_behind_wait(e, 0);
    pfile_worker_stop(e->gw_thread, &e->gw_mu, &e->gw_cv, &e->gw_stop);
  }
  if (e->pf_started) {
    pfile_ahead_claim(e);
    pfile_worker_stop(e->pf_thread, &e->pf_mu, &e->pf_cv, &e->pf_stop);
  }
  for (int i = 0; i < e->n; i++) {
    /* clear the hook only if it is still this engine's (a later engine may own it) */
    if (e->params && e->params[i] && e->ctx && e->params[i]->hook.ud == &e->ctx[i])
      zorch_set_grad_hook(e->params[i], NULL, NULL);
    if (e->params) zorch_tensor_free(e->params[i]);
  }
  for (int k = 0; k < e->nbuckets; k++) {
    zorch_tensor_free(e->buckets[k].buf);
    zorch_tensor_free(e->buckets[k].recv);
  }
  free(e->flight);
  for (int k = 0; k < e->ngroups; k++) {
    group *g = &e->groups[k];
    if (g->req) {
      zorch_status st;
      gather_land(e, g, true, &st);
    }
    /* a group gathered into the pool keeps its values in its own mapping:
       the parameters outlive the engine */
    if (g->buf && g->maplen && g->buf->st->data != g->home) {
      if (g->gathered) memcpy(g->home, g->buf->st->data, g->maplen);
      g->buf->st->data = g->home;
    }
    zorch_tensor_free(g->buf);
  }
  for (int k = 0; k < e->npool; k++) munmap(e->pool[k].mem, e->pool[k].cap);
  free(e->pool);
  free(e->gflight);
  for (int m = 0; m < e->nmodules; m++) {
    e->modules[m]->e = NULL; /* graphs still holding it see the engine gone */
    gather_module_release(e->modules[m]);
  }
  free(e->modules);
  free(e->fwd_order);
  free(e->prev_order);
  free(e->groups);
  free(e->group_of);
  if (e->host_grad && e->dev.type != ZORCH_CPU) (void)cuda_copy_wait(e->dev.index); /* (its copies land before it goes) */
  zorch_tensor *ts[] = {e->flat, e->pshard, e->master, e->gflat, e->gshard, e->recv, e->g32, e->gtmp, e->pmap, e->pf_send,
                        e->host_grad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) zorch_tensor_free(ts[i]);
  free(e->params);
  free(e->offset);
  free(e->buckets);
  free(e->bucket_of);
  free(e->ctx);
  free(e->gwritten);
  free(e->bsum);
  free(e->bvalid);
  if (e->pfd >= 0) close(e->pfd);
  free(e);
}

zorch_status zero_engine_begin_backward(zero_engine *e) {
  bucket_drain(e);
  /* a backward pass that failed part way left buckets part filled and counts
     part done: start every one afresh */
  for (int k = 0; k < e->nbuckets; k++) {
    bucket *b = &e->buckets[k];
    zorch_tensor_free(b->buf);
    b->buf = NULL;
    b->pending = b->size;
  }
  for (int k = 0; k < e->ngroups; k++) e->groups[k].pending = e->groups[k].count;
  if (!e->gflat) return ZORCH_OK;
  for (int i = 0; i < e->n; i++) {
    zorch_tensor *p = e->params[i];
    if (p->grad) continue;
    zorch_tensor *v = flat_view(e->gflat, e->offset[i], p->ndim, p->shape);
    zorch_status st = v ? zorch_set_grad(p, v) : zorch_last_status();
    zorch_tensor_free(v);
    if (st) return st;
  }
  return ZORCH_OK;
}

zorch_status zero_engine_end_backward(zero_engine *e) {
  for (int k = 0; k < e->nbuckets; k++) {
    bucket *b = &e->buckets[k];
    if (b->pending != b->size && !b->in_flight) {
      zorch_status st = bucket_reduce(e, b);
      if (st) return st;
    }
  }
  if (e->nflight) {
    zorch_status st = bucket_progress(e, true);
    if (st) return st;
  }
  for (int k = 0; k < e->ngroups; k++) {
    gather_release(e, &e->groups[k]);
    e->groups[k].pending = e->groups[k].count;
  }
  if (e->nfwd) { /* this step's forward order predicts the next one's */
    int *p = realloc(e->prev_order, sizeof *p * (size_t)e->nfwd);
    if (!p) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
    memcpy(p, e->fwd_order, sizeof *p * (size_t)e->nfwd);
    e->prev_order = p;
    e->nprev = e->nfwd;
  }
  e->nfwd = 0;
  return ZORCH_OK;
}

/* The 16-bit gradients in float32 for the step, in a buffer kept from step to
   step: a fresh one each step cost GPT-2 124M's bf16 step about 0.2 s more
   (the kernel zeroing half a gigabyte of new pages), the conversion itself 35 ms. */
static zorch_tensor *grad_f32(zero_engine *e, zorch_tensor *src) {
  if (e->pdt == ZORCH_F32) return zorch_tensor_retain(src);
  if (!e->g32) {
    if (!(e->g32 = zorch_to_dtype(src, ZORCH_F32))) return NULL;
  } else if (op_copy_(e->g32, src)) {
    return NULL;
  }
  return zorch_tensor_retain(e->g32);
}

zorch_tensor *zero_engine_reduced_grad(zero_engine *e, bool *sharded) {
  int N = e->c->world;
  zorch_tensor *g = NULL;
  *sharded = e->o.stage > 0;
  comm_set_label("the gradients");
  if (e->o.stage == 0) {
    g = grad_f32(e, e->gflat);
    if (e->local_grads) return g;
    if (g && comm_allreduce(e->c, g, false)) zorch_tensor_free(g), g = NULL;
  } else if (e->o.stage == 1) {
    zorch_tensor *full = grad_f32(e, e->gflat);
    if (full && !comm_reduce_scatter_inplace(e->c, full)) g = range(full, e->c->rank * e->shard, e->shard);
    zorch_tensor_free(full);
  } else {
    if (e->pfd >= 0 && (pfile_behind_wait(e, 0) || pfile_fill_unwritten(e))) return NULL; /* (the writes behind land first) */
    g = grad_f32(e, e->gshard);
  }
  /* (stages 2-3 divided each bucket as it was reduced) */
  if (g && N > 1 && e->o.stage < 2 && scale(g, 1.0 / N)) zorch_tensor_free(g), g = NULL;
  return g;
}

void zero_engine_set_local_grads(zero_engine *e, bool on) { e->local_grads = on; }

zorch_tensor *zero_engine_target(zero_engine *e) {
  if (e->master) return e->master;
  return e->o.stage == 0 ? e->flat : e->pshard;
}

zorch_status zero_engine_after_update(zero_engine *e) {
  zorch_status st = ZORCH_OK;
  if (e->master) st = op_copy_(e->o.stage == 0 ? e->flat : e->pshard, e->master);
  comm_set_label("the updated parameters");
  if (!st && (e->o.stage == 1 || e->o.stage == 2)) st = comm_allgather(e->c, e->pshard, e->flat);
  if (!st && e->o.stage == 3) st = zero_engine_release(e); /* the slices changed */
  return st;
}

zorch_status zero_engine_zero_grad(zero_engine *e) {
  zorch_status st = ZORCH_OK;
  if (e->gflat) st = op_fill_(e->gflat, 0);
  if (e->pfd >= 0) { /* the file's: stale, unread (a write behind still going lands first) */
    st = pfile_behind_wait(e, 0);
    memset(e->gwritten, 0, sizeof *e->gwritten * (size_t)e->nbuckets);
    memset(e->bvalid, 0, (size_t)e->nblk);
    e->gcoef = 1;
  }
  else if (!st && e->gshard && e->o.stage >= 2) st = op_fill_(e->gshard, 0);
  if (!st && e->host_grad) { /* (a side copy still in flight lands first) */
    if (e->dev.type != ZORCH_CPU) st = cuda_copy_wait(e->dev.index);
    if (!st) st = op_fill_(e->host_grad, 0);
    e->nhost_coef = 0;
  }
  for (int i = 0; i < e->n && !st; i++) st = zorch_set_grad(e->params[i], NULL);
  return st;
}

static int64_t nbytes(const zorch_tensor *t) {
  return t ? zorch_tensor_numel(t) * (int64_t)dtype_sizes[t->dtype] : 0;
}

void zero_engine_memory(const zero_engine *e, zero_memory *m) {
  m->parameters = e->o.stage == 3 ? (e->pfd >= 0 ? 0 : nbytes(e->pshard)) + gather_bytes(e) : nbytes(e->flat);
  m->gradients = e->gflat ? nbytes(e->gflat) : e->pfd >= 0 ? 0 : nbytes(e->gshard);
  m->master_weights = nbytes(e->master);
  m->buffers = nbytes(e->recv) + nbytes(e->g32) + nbytes(e->gtmp); /* (g32: after the first bf16 or fp16 step) */
  m->buffers += gather_pool_free_bytes(e); /* gather buffers kept for the next gathers */
  for (int k = 0; k < e->nbuckets; k++) m->buffers += nbytes(e->buckets[k].buf);
  m->numel = e->numel;
  m->shard = e->shard;
}

void zero_engine_gather_times(zero_engine *e, double *in_flight, double *waited, bool reset) {
  *in_flight = e->tg_flight;
  *waited = e->tg_wait;
  if (reset) e->tg_flight = e->tg_wait = 0;
}

void zero_engine_comm_times(zero_engine *e, double *in_flight, double *waited, bool reset) {
  *in_flight = e->t_flight;
  *waited = e->t_wait;
  if (reset) e->t_flight = e->t_wait = 0;
}
