/* gather.c: stage 3, the parameters in groups gathered and released: the CPU's
   gather pool, the gathers (in flight when started ahead), the per-module
   hooks and the prefetch by the previous step's forward order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_impl.h"

static void module_retain(void *ud) { ((module_ctx *)ud)->refs++; }
void gather_module_release(void *ud) {
  module_ctx *m = ud;
  if (--m->refs > 0) return;
  free(m->groups);
  free(m);
}

/* n floats from host memory into dst (contiguous, CPU or device) as the
   file's reads and the all-gathers write a group: raw, so the parameters'
   version counters (autograd's check on saved tensors) do not move. */
static zorch_status raw_from_host(zorch_tensor *dst, const float *src, int64_t n) {
  if (dst->st->device.type == ZORCH_CPU) {
    memcpy(tensor_ptr(dst), src, (size_t)n * sizeof(float));
    return ZORCH_OK;
  }
  return backend_of(dst)->from_host(tensor_ptr(dst), src, (size_t)n * sizeof(float), dst->st->device.index);
}

/* ---- stage 3 on the CPU: the gather pool ---- */

/* Free buffers go, oldest first, while the pool plus `extra` bytes would hold
   more than the groups ever held at once or than max_live_parameters allows. */
static void pool_trim(zero_engine *e, size_t extra) {
  size_t live_max = (size_t)(e->o.max_live_parameters > 0 ? e->o.max_live_parameters : 0) * dtype_sizes[e->pdt];
  size_t limit = e->pool_peak < live_max ? e->pool_peak : live_max;
  for (int k = 0; k < e->npool && e->pool_bytes + extra > limit;) {
    if (e->pool[k].used) {
      k++;
      continue;
    }
    munmap(e->pool[k].mem, e->pool[k].cap);
    e->pool_bytes -= e->pool[k].cap;
    memmove(&e->pool[k], &e->pool[k + 1], sizeof *e->pool * (size_t)(e->npool - k - 1));
    e->npool--;
  }
}

/* Memory for group g before a gather: on the CPU a free pool buffer of its
   size (at most an eighth larger), else a new one; on a GPU its own. */
zorch_status gather_attach(zero_engine *e, group *g) {
  if (!g->maplen) return storage_restore_data(g->buf->st);
  if (g->buf->st->data != g->home) return ZORCH_OK;
  size_t need = g->maplen;
  int best = -1;
  for (int k = 0; k < e->npool; k++) {
    pool_buf *b = &e->pool[k];
    if (!b->used && b->cap >= need && b->cap - need <= need / 8 && (best < 0 || b->cap < e->pool[best].cap)) best = k;
  }
  if (best < 0) {
    if (e->pool_live + need > e->pool_peak) e->pool_peak = e->pool_live + need;
    pool_trim(e, need);
    pool_buf *grown = realloc(e->pool, sizeof *grown * (size_t)(e->npool + 1));
    if (!grown) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
    e->pool = grown;
    void *mem = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return err_set(ZORCH_ERR_OOM, "zero: cannot map %zu bytes to gather a parameter group", need);
    best = e->npool++;
    e->pool[best] = (pool_buf){mem, need, false};
    e->pool_bytes += need;
  }
  e->pool[best].used = true;
  e->pool_live += e->pool[best].cap;
  if (e->pool_live > e->pool_peak) e->pool_peak = e->pool_live;
  g->buf->st->data = e->pool[best].mem;
  return ZORCH_OK;
}

/* After a release: the group reads its empty home again and its buffer goes
   back to the pool (or, lost to a collective that timed out, out of it). */
static void group_detach(zero_engine *e, group *g, bool lost) {
  if (!g->maplen) {
    storage_drop_data(g->buf->st);
    return;
  }
  void *d = g->buf->st->data;
  g->buf->st->data = g->home;
  madvise(g->home, g->maplen, MADV_DONTNEED); /* (pages written while it was released, or first filled) */
  if (d == g->home) return;
  for (int k = 0; k < e->npool; k++) {
    if (e->pool[k].mem != d) continue;
    e->pool_live -= e->pool[k].cap;
    if (lost) { /* MPI may still write it: neither reused nor unmapped */
      e->pool_bytes -= e->pool[k].cap;
      memmove(&e->pool[k], &e->pool[k + 1], sizeof *e->pool * (size_t)(e->npool - k - 1));
      e->npool--;
    } else {
      e->pool[k].used = false;
    }
    break;
  }
  pool_trim(e, 0);
}

int64_t gather_pool_free_bytes(const zero_engine *e) {
  size_t b = 0;
  for (int k = 0; k < e->npool; k++)
    if (!e->pool[k].used) b += e->pool[k].cap;
  return (int64_t)b;
}

/* ---- stage 3: gathers and releases ---- */

static void ahead_done(zero_engine *e, group *g) {
  if (!g->ahead) return;
  g->ahead = false;
  e->ahead_elems -= g->hi - g->lo;
}

/* The gather in flight for g ends (waiting for it with `wait`, else only when
   it completed); false with *st OK when it has not completed. */
bool gather_land(zero_engine *e, group *g, bool wait, zorch_status *st) {
  *st = ZORCH_OK;
  double t0 = comm_clock();
  if (!wait) {
    bool done = false;
    if ((*st = comm_test(g->req, &done)) || !done) return false;
  }
  *st = comm_wait(g->req); /* (frees the request) */
  double t1 = comm_clock();
  g->req = NULL;
  if (wait) e->tg_wait += t1 - t0;
  e->tg_flight += t1 - g->posted;
  for (int k = 0; k < e->ngflight; k++)
    if (&e->groups[e->gflight[k]] == g) {
      memmove(&e->gflight[k], &e->gflight[k + 1], sizeof *e->gflight * (size_t)(e->ngflight - k - 1));
      e->ngflight--;
      break;
    }
  if (*st) {
    /* a timeout leaves the buffer with MPI; any failure leaves it unfilled */
    bool lost = *st == ZORCH_ERR_TIMEOUT;
    g->gathered = false;
    ahead_done(e, g);
    group_detach(e, g, lost);
    if (lost) e->leaked = true;
    err_prefix("zero parameter gather");
  }
  return true;
}

/* Ends the gathers in flight that have completed (each test also moves MPI's
   progress on), oldest first. */
zorch_status gather_progress(zero_engine *e) {
  for (int k = 0; k < e->ngflight;) {
    group *g = &e->groups[e->gflight[k]];
    zorch_status st;
    if (gather_land(e, g, false, &st)) {
      if (st) return st;
    } else {
      if (st) return st;
      k++;
    }
  }
  return ZORCH_OK;
}

/* Starts gathering group g (this rank's slice from the shard, or with `ahead`
   the slice the parameter file's read-ahead left in pf_send, into the group's
   buffer); `wait` finishes it now, otherwise it runs in flight (req). A
   failure leaves the group released. */
static zorch_status group_fetch(zero_engine *e, group *g, bool wait, bool ahead) {
  int world = e->c->world;
  int64_t counts[256], *cnt = world <= 256 ? counts : malloc(sizeof(int64_t) * (size_t)world);
  if (!cnt) {
    if (ahead) pfile_ahead_claim(e);
    return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  }
  overlap_counts(e, g->lo, g->hi, cnt);
  int64_t mine = cnt[e->c->rank];
  int64_t start = g->lo > e->c->rank * e->shard ? g->lo - e->c->rank * e->shard : 0;
  zorch_tensor *send = NULL;
  bool filled = false; /* one rank: the slice went straight into the group, no collective */
  zorch_status st = gather_attach(e, g);
  if (!st && e->pstaged) { /* through host memory: the slice (read ahead, or now) copied to the device */
    st = ahead ? ZORCH_OK : pfile_staged_read(e, start, mine);
    const float *h = (const float *)tensor_ptr(e->pf_send);
    if (!st && world == 1) st = raw_from_host(g->buf, h, mine), filled = true;
    else if (!st && !(send = zorch_empty(1, &mine, ZORCH_F32, e->dev))) st = zorch_last_status();
    else if (!st) st = raw_from_host(send, h, mine);
  } else if (!st && ahead) {
    if (!(send = range(e->pf_send, 0, mine))) st = zorch_last_status();
  } else if (!st && e->pfd >= 0) { /* the slice from the file: at one rank straight into the group */
    if (world == 1) st = pfile_io(e, false, tensor_ptr(g->buf), start, mine, 0), filled = true;
    else if (!(send = zorch_empty(1, &mine, ZORCH_F32, e->dev))) st = zorch_last_status();
    else st = pfile_io(e, false, tensor_ptr(send), start, mine, 0);
  } else if (!st && !(send = range(e->pshard, mine ? start : 0, mine))) {
    st = zorch_last_status();
  }
  if (!st && !filled) {
    char label[96];
    snprintf(label, sizeof label, "parameter group %d (parameters %d-%d)", (int)(g - e->groups), g->first + 1,
             g->first + g->count);
    comm_set_label(label);
    double t0 = comm_clock();
    if (wait) {
      st = comm_allgatherv(e->c, send, g->buf, cnt);
      double dt = comm_clock() - t0;
      e->tg_wait += dt, e->tg_flight += dt;
    } else { /* (only from the shard in memory, which stays as it is until the step) */
      g->posted = t0;
      st = comm_iallgatherv(e->c, send, g->buf, cnt, &g->req);
      if (!st && g->req) e->gflight[e->ngflight++] = (int)(g - e->groups);
      if (!st && !g->req) e->tg_flight += comm_clock() - t0;
    }
  }
  zorch_tensor_free(send);
  if (ahead) pfile_ahead_claim(e); /* (pf_send is free for the next read) */
  if (cnt != counts) free(cnt);
  if (!st) g->gathered = true;
  else group_detach(e, g, st == ZORCH_ERR_TIMEOUT), e->leaked |= st == ZORCH_ERR_TIMEOUT;
  return st;
}

static zorch_status group_gather(zero_engine *e, group *g) {
  bool ahead = false; /* more than one rank, or staged: this rank's slice was read ahead into pf_send */
  if (e->pf_group == g && e->c->world == 1 && !e->pstaged) { /* read ahead: wait for it */
    zorch_status st = pfile_ahead_claim(e);
    if (st) return st;
  } else if (e->pf_group == g && !g->gathered) {
    zorch_status st = pfile_ahead_take(e);
    if (st) return pfile_ahead_claim(e), st;
    ahead = true;
  }
  if (g->req) { /* gathered ahead and still in flight: wait for it */
    zorch_status st;
    gather_land(e, g, true, &st);
    if (st) return st;
  }
  ahead_done(e, g);
  if (g->gathered) return ZORCH_OK;
  return group_fetch(e, g, true, ahead);
}

void gather_release(zero_engine *e, group *g) {
  if (e->pf_group == g) pfile_ahead_claim(e); /* (its pages are dropped below; an error there is moot) */
  if (g->req) {
    zorch_status st;
    gather_land(e, g, true, &st); /* (the other ranks run it too; a failure came back to the gather's user) */
  }
  ahead_done(e, g);
  if (!g->gathered) return;
  group_detach(e, g, false);
  g->gathered = false;
}

int64_t gather_bytes(const zero_engine *e) {
  int64_t b = 0;
  for (int k = 0; k < e->ngroups; k++)
    if (e->groups[k].gathered) b += (e->groups[k].hi - e->groups[k].lo) * (int64_t)dtype_sizes[e->pdt];
  return b;
}

/* Stage 3: the slice gets storage of its own, each group an mmap'd buffer that
   its parameters view; then the flat buffer goes and every group is released. */
zorch_status gather_setup(zero_engine *e) {
  if (e->pfd < 0) { /* (in the file, the slice has its own storage already) */
    zorch_tensor *own = zorch_clone(e->pshard);
    if (!own) return zorch_last_status();
    zorch_tensor_free(e->pshard);
    e->pshard = own;
  }
  int ng = e->o.ngroups > 0 ? e->o.ngroups : e->n;
  e->groups = calloc((size_t)ng, sizeof *e->groups);
  e->group_of = calloc((size_t)e->n, sizeof *e->group_of);
  e->gflight = calloc((size_t)ng, sizeof *e->gflight);
  if (!e->groups || !e->group_of || !e->gflight) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  size_t page = (size_t)sysconf(_SC_PAGESIZE), es = dtype_sizes[e->pdt];
  int first = 0;
  for (int k = 0; k < ng; k++) {
    int count = e->o.ngroups > 0 ? e->o.group_sizes[k] : 1;
    if (count < 1 || first + count > e->n) return err_set(ZORCH_ERR_ARG, "zero: parameter groups do not cover the parameters");
    group *g = &e->groups[e->ngroups++];
    g->first = first;
    g->count = g->pending = count;
    g->lo = e->offset[first];
    g->hi = e->offset[first + count - 1] + zorch_tensor_numel(e->params[first + count - 1]);
    int64_t len = g->hi - g->lo;
    if (e->dev.type == ZORCH_CPU) {
      g->maplen = ((size_t)len * es + page - 1) / page * page;
      if (!g->maplen) g->maplen = page;
      void *mem = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) return err_set(ZORCH_ERR_OOM, "zero: cannot map %zu bytes for a parameter group", g->maplen);
      g->home = mem;
      g->buf = zorch_tensor_wrap_owned(mem, e->pdt, 1, &len, NULL, unmap_deleter, (void *)g->maplen);
      if (!g->buf) {
        munmap(mem, g->maplen);
        return zorch_last_status();
      }
    } else if (!(g->buf = zorch_empty(1, &len, e->pdt, e->dev))) {
      return zorch_last_status();
    }
    if (e->flat) {
      zorch_tensor *src = range(e->flat, g->lo, len);
      zorch_status st = src ? op_copy_(g->buf, src) : zorch_last_status();
      zorch_tensor_free(src);
      if (st) return st;
      g->gathered = true;
    } /* (in the file mode the group starts released: gathers read the file) */
    for (int i = first; i < first + count; i++) {
      e->group_of[i] = k;
      tensor_rebind(e->params[i], g->buf, e->offset[i] - g->lo);
    }
    first += count;
  }
  if (first != e->n) return err_set(ZORCH_ERR_ARG, "zero: parameter groups do not cover the parameters");
  zorch_tensor_free(e->flat);
  e->flat = NULL;
  return zero_engine_release(e);
}

zorch_status zero_engine_gather(zero_engine *e) {
  for (int k = 0; k < e->ngroups; k++) {
    zorch_status st = group_gather(e, &e->groups[k]);
    if (st) return st;
  }
  return ZORCH_OK;
}

zorch_status zero_engine_gather_param(zero_engine *e, int i) {
  if (!e->groups) return ZORCH_OK;
  if (i < 0 || i >= e->n) return err_set(ZORCH_ERR_ARG, "zero: no parameter %d", i + 1);
  return group_gather(e, &e->groups[e->group_of[i]]);
}

zorch_status zero_engine_release(zero_engine *e) {
  for (int k = 0; k < e->ngroups; k++) gather_release(e, &e->groups[k]);
  return ZORCH_OK;
}

/* After parameters were written (load_state_dict): this rank's slice of each
   gathered group goes back into the shard and the master weights. */
zorch_status zero_engine_sync_shard(zero_engine *e) {
  int64_t mlo = e->c->rank * e->shard, mhi = mlo + e->shard;
  for (int k = 0; k < e->ngroups; k++) {
    group *g = &e->groups[k];
    int64_t lo = g->lo > mlo ? g->lo : mlo, hi = g->hi < mhi ? g->hi : mhi;
    if (g->req) { /* gathered ahead: its values first */
      zorch_status st;
      gather_land(e, g, true, &st);
      if (st) return st;
    }
    if (!g->gathered || hi <= lo) continue;
    if (e->pfd >= 0 && e->pstaged) { /* into the file, through the host */
      zorch_device cpu = {ZORCH_CPU, 0};
      int64_t n = hi - lo;
      zorch_tensor *src = range(g->buf, lo - g->lo, n), *h = src ? zorch_empty(1, &n, ZORCH_F32, cpu) : NULL;
      zorch_status st = h ? op_copy_(h, src) : zorch_last_status();
      if (!st) st = pfile_io(e, true, tensor_ptr(h), lo - mlo, n, 0);
      zorch_tensor_free(src), zorch_tensor_free(h);
      if (st) return st;
      continue;
    }
    if (e->pfd >= 0) { /* into the file */
      zorch_status st = pfile_io(e, true, (char *)tensor_ptr(g->buf) + (lo - g->lo) * 4, lo - mlo, hi - lo, 0);
      if (st) return st;
      continue;
    }
    zorch_tensor *src = range(g->buf, lo - g->lo, hi - lo);
    zorch_tensor *dst = src ? range(e->pshard, lo - mlo, hi - lo) : NULL;
    zorch_tensor *mst = dst && e->master ? range(e->master, lo - mlo, hi - lo) : NULL;
    zorch_status st = dst ? op_copy_(dst, src) : zorch_last_status();
    if (!st && mst) st = op_copy_(mst, src);
    zorch_tensor_free(src);
    zorch_tensor_free(dst);
    zorch_tensor_free(mst);
    if (st) return st;
  }
  return ZORCH_OK;
}

zorch_status zero_engine_module_register(zero_engine *e, int ngroups, const int *groups, int *id) {
  if (!e->groups) return err_set(ZORCH_ERR_STATE, "zero: modules gather only at stage 3");
  module_ctx *m = calloc(1, sizeof *m);
  int *gs = calloc((size_t)(ngroups > 0 ? ngroups : 1), sizeof *gs);
  module_ctx **grown = realloc(e->modules, sizeof *grown * (size_t)(e->nmodules + 1));
  if (!m || !gs || !grown) {
    free(m);
    free(gs);
    if (grown) e->modules = grown;
    return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  }
  e->modules = grown;
  for (int k = 0; k < ngroups; k++) {
    if (groups[k] < 0 || groups[k] >= e->ngroups) {
      free(m);
      free(gs);
      return err_set(ZORCH_ERR_ARG, "zero: no parameter group %d", groups[k]);
    }
    gs[k] = groups[k];
  }
  *m = (module_ctx){e, e->nmodules, ngroups, gs, -1, 1};
  e->modules[e->nmodules] = m;
  *id = e->nmodules++;
  return ZORCH_OK;
}

static zorch_status module_gather(zero_engine *e, const module_ctx *m) {
  for (int k = 0; k < m->ngroups; k++) {
    zorch_status st = group_gather(e, &e->groups[m->groups[k]]);
    if (st) return st;
  }
  return ZORCH_OK;
}

/* The module's groups gathered ahead of need: with the parameter file its
   first group not yet gathered is read on the read-ahead thread (the rest,
   if any, when they are needed; at more than one rank the all-gather, too,
   waits for the gather), otherwise gathered now. */
static zorch_status module_ahead(zero_engine *e, const module_ctx *m) {
  if (e->pfd < 0) return module_gather(e, m);
  for (int k = 0; k < m->ngroups; k++) {
    group *g = &e->groups[m->groups[k]];
    if (!g->gathered) return pfile_ahead_start(e, g);
  }
  return ZORCH_OK;
}

static bool prefetching(const zero_engine *e) { return e->o.prefetch_bucket_size > 0 && e->pfd < 0; }

static int64_t live_elems(const zero_engine *e) {
  int64_t n = 0;
  for (int k = 0; k < e->ngroups; k++)
    if (e->groups[k].gathered) n += e->groups[k].hi - e->groups[k].lo;
  return n;
}

/* Starts the gathers of the modules at order[from], order[from + step], ...
   that are not gathered yet, while what was gathered ahead and not used stays
   within prefetch_bucket_size and the gathered groups within
   max_live_parameters. Every decision rests on state that changes only at
   these calls (not on which gathers have completed), so every rank starts
   the same gathers in the same order. */
static zorch_status prefetch(zero_engine *e, const int *order, int n, int from, int step) {
  int64_t live = live_elems(e);
  for (int q = from; q >= 0 && q < n; q += step) {
    const module_ctx *m = e->modules[order[q]];
    for (int k = 0; k < m->ngroups; k++) {
      group *g = &e->groups[m->groups[k]];
      int64_t len = g->hi - g->lo;
      if (g->gathered) continue;
      if (e->ahead_elems + len > e->o.prefetch_bucket_size || live + len > e->o.max_live_parameters) return ZORCH_OK;
      zorch_status st = group_fetch(e, g, false, false);
      if (st) return st;
      g->ahead = true;
      e->ahead_elems += len, live += len;
    }
  }
  return ZORCH_OK;
}

zorch_status zero_engine_module_begin(zero_engine *e, int module) {
  if (module < 0 || module >= e->nmodules) return err_set(ZORCH_ERR_ARG, "zero: no module %d", module);
  module_ctx *m = e->modules[module];
  if (e->nfwd >= 1 << 16) e->nfwd = 0; /* forwards without backward (evaluation) */
  if (e->nfwd == e->fwd_cap) {
    int cap = e->fwd_cap ? e->fwd_cap * 2 : 16;
    int *o = realloc(e->fwd_order, sizeof *o * (size_t)cap);
    if (!o) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
    e->fwd_order = o;
    e->fwd_cap = cap;
  }
  m->fwd_pos = e->nfwd;
  e->fwd_order[e->nfwd++] = module;
  zorch_status st = e->ngflight ? gather_progress(e) : ZORCH_OK;
  if (!st) st = module_gather(e, m);
  /* gather ahead what came next in the previous step's forward, while this
     step follows it */
  int p = m->fwd_pos;
  if (!st && p + 1 < e->nprev && e->prev_order[p] == module)
    st = prefetching(e) ? prefetch(e, e->prev_order, e->nprev, p + 1, 1)
                        : module_ahead(e, e->modules[e->prev_order[p + 1]]);
  return st;
}

/* Before the module's backward: its groups, and ahead of time those of the
   modules whose forward ran before it (the next ones backward reaches). */
static zorch_status module_pre_backward(void *ud) {
  module_ctx *m = ud;
  zero_engine *e = m->e;
  if (!e) return err_set(ZORCH_ERR_STATE, "backward: the ZeRO engine that gathered this module's parameters is gone");
  zorch_status st = e->ngflight ? gather_progress(e) : ZORCH_OK;
  if (!st) st = module_gather(e, m);
  if (!st && m->fwd_pos > 0 && m->fwd_pos <= e->nfwd)
    st = prefetching(e) ? prefetch(e, e->fwd_order, m->fwd_pos, m->fwd_pos - 1, -1)
                        : module_ahead(e, e->modules[e->fwd_order[m->fwd_pos - 1]]);
  return st;
}

static int64_t module_numel(const zero_engine *e, const module_ctx *m) {
  int64_t n = 0;
  for (int k = 0; k < m->ngroups; k++) n += e->groups[m->groups[k]].hi - e->groups[m->groups[k]].lo;
  return n;
}

/* Whether module m, whose forward just ran, is needed again by backward within
   max_reuse_distance elements: what the previous step's forward ran after it
   runs forward and then backward before m's backward comes, so the distance is
   twice their elements. Without a previous step (or when this one departs
   from it) the distance is unknown and m goes. */
static bool keep_for_reuse(const zero_engine *e, const module_ctx *m) {
  int p = m->fwd_pos;
  if (e->o.max_reuse_distance <= 0 || p < 0 || p >= e->nprev || e->prev_order[p] != m->id) return false;
  int64_t after = 0;
  for (int q = p + 1; q < e->nprev; q++) after += module_numel(e, e->modules[e->prev_order[q]]);
  return 2 * after < e->o.max_reuse_distance;
}

zorch_status zero_engine_module_end(zero_engine *e, int module, zorch_tensor *out) {
  if (module < 0 || module >= e->nmodules) return err_set(ZORCH_ERR_ARG, "zero: no module %d", module);
  module_ctx *m = e->modules[module];
  if (e->ngflight) {
    zorch_status st = gather_progress(e);
    if (st) return st;
  }
  if (out) ag_set_pre_hook(out, module_pre_backward, m, module_retain, gather_module_release);
  /* (a kept group goes when its gradients are in, or at the end of backward) */
  if (!out || !keep_for_reuse(e, m))
    for (int k = 0; k < m->ngroups; k++) gather_release(e, &e->groups[m->groups[k]]);
  return ZORCH_OK;
}
