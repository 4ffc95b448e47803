/* param_file.c: offload_param (param_dir), this rank's shard and its gradients
   in one file, with its read-ahead and write-behind threads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_impl.h"
#include "offload.h"

/* ---- offload_param: the shard and its gradients in a file (engine.h, param_dir) ---- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n floats at element `at` of the shard (region 0) or of its gradient (1),
   from the file into buf or (write) from buf into the file, whole. */
static zorch_status pfile_rw(zero_engine *e, zero_io *acc, bool write, void *buf, int64_t at, int64_t n, int region) {
  off_t off = (off_t)((region ? e->goff : 0) + at) * (off_t)sizeof(float);
  double t0 = now_s();
  if (!zoff_pio(e->pfd, e->pdirect, write, buf, (size_t)n * sizeof(float), off))
    return err_set(ZORCH_ERR_IO, "zero: %s the parameter file (offload_param): %s", write ? "writing" : "reading",
                   strerror(errno));
  acc->io_s += now_s() - t0;
  if (write) acc->write_bytes += n * (int64_t)sizeof(float);
  else acc->read_bytes += n * (int64_t)sizeof(float);
  return ZORCH_OK;
}

/* (the calling thread's traffic; the read-ahead thread keeps its own) */
zorch_status pfile_io(zero_engine *e, bool write, void *buf, int64_t at, int64_t n, int region) {
  return pfile_rw(e, &e->io, write, buf, at, n, region);
}

/* ---- the engine's I/O threads (read-ahead, write-behind) ---- */

/* Starts fn on a thread of its own with its lock and condition; false (and
   nothing left to free) when no thread can be made: the caller then does the
   work in line. */
static bool worker_start(pthread_t *t, pthread_mutex_t *mu, pthread_cond_t *cv, void *(*fn)(void *), void *arg) {
  pthread_mutex_init(mu, NULL);
  pthread_cond_init(cv, NULL);
  if (pthread_create(t, NULL, fn, arg) == 0) return true;
  pthread_mutex_destroy(mu);
  pthread_cond_destroy(cv);
  return false;
}

/* Sets *stop under the thread's lock, wakes it, joins it, frees the lock and
   condition. */
void pfile_worker_stop(pthread_t t, pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop) {
  pthread_mutex_lock(mu);
  *stop = true;
  pthread_cond_broadcast(cv);
  pthread_mutex_unlock(mu);
  pthread_join(t, NULL);
  pthread_mutex_destroy(mu);
  pthread_cond_destroy(cv);
}

/* ---- the parameter file's read-ahead ---- */

static void *pf_main(void *arg) {
  zero_engine *e = arg;
  pthread_mutex_lock(&e->pf_mu);
  for (;;) {
    while (!e->pf_stop && (!e->pf_group || e->pf_done)) pthread_cond_wait(&e->pf_cv, &e->pf_mu);
    if (e->pf_stop) break;
    void *dst = e->pf_dst;
    int64_t at = e->pf_at, n = e->pf_n;
    pthread_mutex_unlock(&e->pf_mu);
    zero_io acc = {0};
    zorch_status st = pfile_rw(e, &acc, false, dst, at, n, 0);
    pthread_mutex_lock(&e->pf_mu);
    e->pf_io.read_bytes += acc.read_bytes, e->pf_io.io_s += acc.io_s;
    e->pf_status = st;
    if (st) snprintf(e->pf_msg, sizeof e->pf_msg, "%s", zorch_last_error());
    e->pf_done = true;
    pthread_cond_broadcast(&e->pf_cv);
  }
  pthread_mutex_unlock(&e->pf_mu);
  return NULL;
}

/* Waits for the read in flight and claims it: at one rank its group is
   gathered (or the read's error comes back); at more the slice read is
   dropped (pfile_ahead_take keeps it for the gather). */
zorch_status pfile_ahead_claim(zero_engine *e) {
  pthread_mutex_lock(&e->pf_mu);
  while (e->pf_group && !e->pf_done) pthread_cond_wait(&e->pf_cv, &e->pf_mu);
  group *g = e->pf_group;
  zorch_status st = e->pf_status;
  char msg[256];
  memcpy(msg, e->pf_msg, sizeof msg);
  e->pf_group = NULL, e->pf_done = false, e->pf_status = ZORCH_OK;
  pthread_mutex_unlock(&e->pf_mu);
  if (!g) return ZORCH_OK;
  if (st) return err_set(st, "%s", msg);
  if (e->c->world == 1 && !e->pstaged) g->gathered = true;
  return ZORCH_OK;
}

/* More than one rank: waits for group g's slice read ahead into pf_send; the
   read stays claimed (pf_send untouched) until pfile_ahead_claim. */
zorch_status pfile_ahead_take(zero_engine *e) {
  pthread_mutex_lock(&e->pf_mu);
  while (e->pf_group && !e->pf_done) pthread_cond_wait(&e->pf_cv, &e->pf_mu);
  zorch_status st = e->pf_status;
  char msg[256];
  memcpy(msg, e->pf_msg, sizeof msg);
  pthread_mutex_unlock(&e->pf_mu);
  return st ? err_set(st, "%s", msg) : ZORCH_OK;
}

/* This rank's part of group g: its first element in the shard and count. */
static int64_t group_mine(const zero_engine *e, const group *g, int64_t *start) {
  int64_t a = g->lo > e->c->rank * e->shard ? g->lo : e->c->rank * e->shard;
  int64_t z = g->hi < (e->c->rank + 1) * e->shard ? g->hi : (e->c->rank + 1) * e->shard;
  *start = z > a ? a - e->c->rank * e->shard : 0;
  return z > a ? z - a : 0;
}

/* pf_send, made once: host memory for the largest slice of a group this rank
   reads from the file (its part at more than one rank, the whole group at one). */
static zorch_status pf_send_ready(zero_engine *e) {
  if (e->pf_send) return ZORCH_OK;
  int64_t most = 1, s;
  zorch_device cpu = {ZORCH_CPU, 0};
  for (int k = 0; k < e->ngroups; k++) {
    int64_t n = e->c->world > 1 ? group_mine(e, &e->groups[k], &s) : e->groups[k].hi - e->groups[k].lo;
    if (n > most) most = n;
  }
  return (e->pf_send = zorch_empty(1, &most, ZORCH_F32, cpu)) ? ZORCH_OK : zorch_last_status();
}

/* Starts reading group g ahead (the parameter file); a read still in flight
   is claimed first. */
zorch_status pfile_ahead_start(zero_engine *e, group *g) {
  if (g->gathered || e->pf_group == g) return ZORCH_OK;
  int64_t start, mine = group_mine(e, g, &start);
  if (e->c->world > 1 && mine == 0) return ZORCH_OK; /* (nothing of it here to read) */
  zorch_status st = (e->c->world > 1 || e->pstaged) ? pf_send_ready(e) : ZORCH_OK;
  if (!st && e->pf_started) st = pfile_ahead_claim(e);
  if (st) return st;
  if (!e->pf_started) {
    if (!worker_start(&e->pf_thread, &e->pf_mu, &e->pf_cv, pf_main, e))
      return ZORCH_OK; /* (no thread: the gather reads it when it comes) */
    e->pf_started = true;
  }
  /* (at one rank the read lands in the group's own memory) */
  if (e->c->world == 1 && !e->pstaged && (st = gather_attach(e, g))) return st;
  pthread_mutex_lock(&e->pf_mu);
  e->pf_group = g, e->pf_done = false;
  if (e->c->world == 1 && !e->pstaged) e->pf_dst = tensor_ptr(g->buf), e->pf_at = g->lo, e->pf_n = g->hi - g->lo;
  else if (e->c->world == 1) e->pf_dst = tensor_ptr(e->pf_send), e->pf_at = g->lo, e->pf_n = g->hi - g->lo;
  else e->pf_dst = tensor_ptr(e->pf_send), e->pf_at = start, e->pf_n = mine;
  pthread_cond_broadcast(&e->pf_cv);
  pthread_mutex_unlock(&e->pf_mu);
  return ZORCH_OK;
}

/* The file (unlinked at once), the shard written into it, both regions mapped:
   pshard and gshard become views of the mapping. */
zorch_status pfile_open(zero_engine *e) {
  if (e->o.stage != 3 || e->pdt != ZORCH_F32)
    return err_set(ZORCH_ERR_ARG, "zero: parameters on nvme need ZeRO stage 3 with float32 parameters");
  e->pstaged = e->dev.type != ZORCH_CPU || zorch_test_hook("offload_host"); /* (a CPU rank taking the GPU's path) */
  const char *dir = e->o.param_dir;
  char *path = malloc(strlen(dir) + 32);
  if (!path) return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  sprintf(path, "%s/zorch-param-XXXXXX", dir);
  e->pfd = mkstemp(path);
  if (e->pfd < 0) {
    zorch_status st = err_set(ZORCH_ERR_IO, "zero: cannot make a file in nvme_path %s: %s", dir, strerror(errno));
    free(path);
    return st;
  }
  unlink(path); /* the file lives while the engine does */
  free(path);
  /* direct I/O where the filesystem takes it (ZORCH_OFFLOAD_DIRECT=0: not) */
  const char *dio = getenv("ZORCH_OFFLOAD_DIRECT");
  int dfd = dio && !strcmp(dio, "0") ? -1 : zoff_reopen(e->pfd, true, 0);
  if (dfd >= 0) close(e->pfd), e->pfd = dfd, e->pdirect = true;
  /* both regions start and end on aligned offsets (the optimizer's direct
     chunks round their last transfer up to the alignment) */
  int64_t al = ZOFF_ALIGN / sizeof(float);
  e->goff = (e->shard + al - 1) / al * al;
  size_t bytes = (size_t)e->goff * 2 * sizeof(float);
  if (ftruncate(e->pfd, (off_t)bytes) != 0)
    return err_set(ZORCH_ERR_IO, "zero: cannot size the parameter file in %s (%zu bytes): %s", dir, bytes,
                   strerror(errno));
  /* each parameter's elements in this shard (reading a parameter whose pages
     were never written maps no memory: a deferred initialisation costs none) */
  int64_t mlo = e->c->rank * e->shard, mhi = mlo + e->shard;
  for (int i = 0; i < e->n; i++) {
    zorch_tensor *p = e->params[i];
    int64_t lo = e->offset[i], hi = lo + zorch_tensor_numel(p);
    int64_t a = lo > mlo ? lo : mlo, b = hi < mhi ? hi : mhi;
    if (b <= a) continue;
    zorch_tensor *c = zorch_tensor_is_contiguous(p) ? zorch_tensor_retain(p) : zorch_contiguous(p);
    if (c && e->pstaged) { /* (on the device: a host copy) */
      zorch_device cpu = {ZORCH_CPU, 0};
      zorch_tensor *h = zorch_empty(p->ndim, p->shape, ZORCH_F32, cpu);
      if (h && op_copy_(h, c)) zorch_tensor_free(h), h = NULL;
      zorch_tensor_free(c);
      c = h;
    }
    zorch_status st = c ? pfile_io(e, true, tensor_ptr(c) + (a - lo) * 4, a - mlo, b - a, 0) : zorch_last_status();
    zorch_tensor_free(c);
    if (st) return st;
  }
  void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, e->pfd, 0);
  if (mem == MAP_FAILED) return err_set(ZORCH_ERR_IO, "zero: cannot map the parameter file: %s", strerror(errno));
  int64_t len = e->goff * 2;
  if (!(e->pmap = zorch_tensor_wrap_owned(mem, ZORCH_F32, 1, &len, NULL, unmap_deleter, (void *)bytes))) {
    munmap(mem, bytes);
    return zorch_last_status();
  }
  e->pshard = range(e->pmap, 0, e->shard);
  e->gshard = range(e->pmap, e->goff, e->shard);
  e->io = (zero_io){0};
  e->nblk = (e->shard + SQ_BLOCK - 1) / SQ_BLOCK;
  e->gcoef = 1;
  if (!(e->bsum = calloc((size_t)e->nblk + 1, sizeof *e->bsum)) || !(e->bvalid = calloc((size_t)e->nblk + 1, 1)))
    return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  return e->pshard && e->gshard ? ZORCH_OK : zorch_last_status();
}

/* ---- write-behind of the gradients' bucket parts ---- */

static void *gw_main(void *arg) {
  zero_engine *e = arg;
  pthread_mutex_lock(&e->gw_mu);
  for (;;) {
    while (!e->gw_stop && e->gw_done == e->gw_queued) pthread_cond_wait(&e->gw_cv, &e->gw_mu);
    if (e->gw_done == e->gw_queued) break; /* (stopping, nothing left) */
    int slot = (int)(e->gw_done % 2);
    int64_t at = e->gw_at[slot], n = e->gw_n[slot];
    bool skip = e->gw_status != ZORCH_OK;
    pthread_mutex_unlock(&e->gw_mu);
    zero_io acc = {0};
    zorch_status st = skip ? ZORCH_OK : pfile_rw(e, &acc, true, (float *)tensor_ptr(e->gtmp) + slot * e->gtmp_half, at, n, 1);
    pthread_mutex_lock(&e->gw_mu);
    e->gw_io.write_bytes += acc.write_bytes, e->gw_io.io_s += acc.io_s;
    if (st && !e->gw_status) e->gw_status = st, snprintf(e->gw_msg, sizeof e->gw_msg, "%s", zorch_last_error());
    e->gw_done++;
    pthread_cond_broadcast(&e->gw_cv);
  }
  pthread_mutex_unlock(&e->gw_mu);
  return NULL;
}

/* Waits until at most `left` writes are still queued; the first failure
   (once) as a status. */
zorch_status pfile_behind_wait(zero_engine *e, int64_t left) {
  if (!e->gw_started) return ZORCH_OK;
  pthread_mutex_lock(&e->gw_mu);
  while (e->gw_queued - e->gw_done > left) pthread_cond_wait(&e->gw_cv, &e->gw_mu);
  zorch_status st = e->gw_status;
  char msg[256];
  memcpy(msg, e->gw_msg, sizeof msg);
  e->gw_status = ZORCH_OK;
  pthread_mutex_unlock(&e->gw_mu);
  return st ? err_set(st, "%s", msg) : ZORCH_OK;
}

/* The slot for the next bucket part: 0 without write-behind; else the one
   whose previous write is done (waited for). */
static zorch_status gw_slot(zero_engine *e, int *slot) {
  *slot = 0;
  if (!e->gw_on) return ZORCH_OK;
  if (!e->gw_started) {
    if (!worker_start(&e->gw_thread, &e->gw_mu, &e->gw_cv, gw_main, e)) {
      e->gw_on = false; /* (no thread: the writes stay in line) */
      return ZORCH_OK;
    }
    e->gw_started = true;
  }
  *slot = (int)(e->gw_queued % 2);
  return pfile_behind_wait(e, 1);
}

/* A reduced bucket's part added into the file's gradients, as into gshard: the
   sum of zeros (or what the window added before) and the part; written
   behind (the next bucket's addition does not wait for it) with write-behind. */
zorch_status pfile_add(zero_engine *e, int b, int64_t start, zorch_tensor *part) {
  int64_t n = zorch_tensor_numel(part);
  int slot;
  zorch_status st = gw_slot(e, &slot);
  if (!st && e->gwritten[b]) st = pfile_behind_wait(e, 0); /* (what the window wrote before, on the disk first) */
  if (st) return st;
  zorch_tensor *tmp = range(e->gtmp, slot * e->gtmp_half, n);
  st = tmp ? op_fill_(tmp, 0) : zorch_last_status();
  if (!st && e->gwritten[b]) st = pfile_io(e, false, tensor_ptr(tmp), start, n, 1);
  zorch_tensor *hp = NULL; /* staged: the device's part on the host first (gtmp's third slot) */
  if (!st && e->pstaged) {
    hp = range(e->gtmp, 2 * e->gtmp_half, n);
    st = hp ? op_copy_(hp, part) : zorch_last_status();
    part = hp;
  }
  if (!st) st = op_add_(tmp, part);
  zorch_tensor_free(hp);
  if (!st) norm_note_sums(e, (const float *)tensor_ptr(tmp), start, n);
  if (!st && e->gw_on) { /* to the writer */
    pthread_mutex_lock(&e->gw_mu);
    e->gw_at[slot] = start, e->gw_n[slot] = n;
    e->gw_queued++;
    pthread_cond_broadcast(&e->gw_cv);
    pthread_mutex_unlock(&e->gw_mu);
  } else if (!st) {
    st = pfile_io(e, true, tensor_ptr(tmp), start, n, 1);
  }
  if (!st) e->gwritten[b] = true;
  zorch_tensor_free(tmp);
  return st;
}

/* Buckets no gradient reached since zero_grad: zeros in the file, as in gshard. */
zorch_status pfile_fill_unwritten(zero_engine *e) {
  int64_t mlo = e->c->rank * e->shard, mhi = mlo + e->shard;
  for (int k = 0; k < e->nbuckets; k++) {
    bucket *b = &e->buckets[k];
    int64_t lo = b->lo > mlo ? b->lo : mlo, hi = b->hi < mhi ? b->hi : mhi;
    if (e->gwritten[k] || hi <= lo) continue;
    zorch_tensor *tmp = range(e->gtmp, 0, hi - lo);
    zorch_status st = tmp ? op_fill_(tmp, 0) : zorch_last_status();
    if (!st) st = pfile_io(e, true, tensor_ptr(tmp), lo - mlo, hi - lo, 1);
    if (!st) norm_note_sums(e, (const float *)tensor_ptr(tmp), lo - mlo, hi - lo);
    zorch_tensor_free(tmp);
    if (st) return st;
    e->gwritten[k] = true;
  }
  return ZORCH_OK;
}

int zero_engine_param_file(const zero_engine *e, int64_t *p_off, int64_t *g_off) {
  *p_off = 0, *g_off = e->goff * (int64_t)sizeof(float);
  return e->pfd;
}

void zero_engine_io(zero_engine *e, zero_io *io, bool reset) {
  *io = e->io;
  io->sync_s = e->io.io_s;
  if (e->pf_started) pthread_mutex_lock(&e->pf_mu);
  io->read_bytes += e->pf_io.read_bytes, io->io_s += e->pf_io.io_s, io->ahead_bytes = e->pf_io.read_bytes;
  if (reset) e->pf_io = (zero_io){0};
  if (e->pf_started) pthread_mutex_unlock(&e->pf_mu);
  if (e->gw_started) pthread_mutex_lock(&e->gw_mu);
  io->write_bytes += e->gw_io.write_bytes, io->io_s += e->gw_io.io_s, io->behind_bytes = e->gw_io.write_bytes;
  if (reset) e->gw_io = (zero_io){0};
  if (e->gw_started) pthread_mutex_unlock(&e->gw_mu);
  io->file_bytes = e->pfd >= 0 ? e->shard * 2 * (int64_t)sizeof(float) : 0;
  if (reset) e->io = (zero_io){0};
}

/* Staged: n elements of the shard from `start` into pf_send (host), on the
   calling thread (a read ahead still in flight is claimed first). */
zorch_status pfile_staged_read(zero_engine *e, int64_t start, int64_t n) {
  zorch_status st = pf_send_ready(e);
  if (!st && e->pf_started) st = pfile_ahead_claim(e);
  return st ? st : pfile_io(e, false, tensor_ptr(e->pf_send), start, n, 0);
}
