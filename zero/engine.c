/* engine.c: the ZeRO partition manager (see engine.h). Buffers are float32
   unless a 16-bit dtype (bf16 or fp16) is on; collectives always reduce in
   float32. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../ops/backend/cudamod.h"
#include "../ops/def/ops.h"
#include "offload.h"

#define ZERO_ALIGN 16 /* elements: every shard is a multiple of this */
#define SQ_BLOCK 65536 /* elements: the gradient norm's blocks (sum_squares) */

typedef struct bucket {
  int64_t lo, hi;    /* flat range [lo, hi) */
  int size, pending; /* parameters in it, and still to arrive */
  zorch_tensor *buf; /* float32 staging while it fills (and while its reduction runs) */
  /* overlap_comm: the reduction in flight, its receive buffer (this rank's
     part) and when it started */
  comm_request *req;
  zorch_tensor *recv;
  bool in_flight;
  double posted;
} bucket;

typedef struct param_ctx {
  zero_engine *e;
  int index;
} param_ctx;

/* Stage 3: parameters gathered together. On the CPU the group's storage
   points, while gathered, at a buffer of the engine's gather pool and, while
   released, at the group's own mapping (`home`), which holds no pages: a
   parameter read then sees zeros, never freed memory, and memory given back
   by one release serves the next gather without faulting pages in again. On
   a GPU a buffer whose memory goes back to the caching allocator on release
   (ops then refuse the parameters by name). */
typedef struct group group;
struct group {
  int first, count;   /* parameters [first, first + count) */
  int64_t lo, hi;     /* flat range */
  zorch_tensor *buf;  /* (hi - lo) elements */
  size_t maplen;      /* CPU: bytes of home and of the pool buffer it takes */
  void *home;
  bool gathered;      /* (or its gather is in flight: req) */
  int pending;        /* gradients still to arrive in this backward pass */
  /* a gather started ahead of need (prefetch): the request while in flight,
     when it started, and whether no module has used the group since */
  comm_request *req;
  double posted;
  bool ahead;
};

/* A buffer of the gather pool (CPU, stage 3). */
typedef struct pool_buf {
  void *mem;
  size_t cap;
  bool used;
} pool_buf;

/* Shared by the engine and the autograd nodes whose pre-backward hook gathers
   the module: freed when the last of them lets go, so a graph that outlives its
   engine finds `e` NULL instead of freed memory. */
typedef struct module_ctx {
  zero_engine *e;
  int id, ngroups, *groups;
  int fwd_pos;        /* position in this step's forward order */
  int refs;
} module_ctx;

static void module_retain(void *ud) { ((module_ctx *)ud)->refs++; }
static void module_release(void *ud) {
  module_ctx *m = ud;
  if (--m->refs > 0) return;
  free(m->groups);
  free(m);
}

struct zero_engine {
  zero_comm *c;
  zero_opts o;
  zorch_device dev;       /* where the parameters and every buffer live */
  int n;
  zorch_tensor **params;  /* retained */
  int64_t *offset;        /* flat offset of each parameter */
  int64_t numel, shard, padded;
  zorch_dtype pdt;        /* parameter and gradient dtype */
  zorch_tensor *flat;     /* (padded) parameters; NULL while stage 3 is released */
  zorch_tensor *pshard;   /* (shard) this rank's parameters: a view, or owned at stage 3 */
  zorch_tensor *master;   /* fp32 master weights (bf16, fp16), else NULL */
  zorch_tensor *gflat;    /* (padded) gradients, stages 0-1 */
  zorch_tensor *gshard;   /* (shard) reduced gradients, stages 1-3 */
  zorch_tensor *g32;      /* float32 copy of gflat or gshard for the step (bf16, fp16), kept */
  zorch_tensor *recv;     /* float32 receive buffer of the largest bucket */
  bucket *buckets;
  int nbuckets;
  int *bucket_of;
  param_ctx *ctx;
  group *groups;
  int ngroups;
  int *group_of;
  module_ctx **modules;
  int nmodules;
  int *fwd_order;     /* module ids in the order their forward ran */
  int nfwd, fwd_cap;
  int *prev_order;    /* the previous step's order, to gather ahead in forward */
  int nprev;
  /* overlap_comm: buckets whose reduction is in flight, in the order they
     started (a ring of nbuckets), and the seconds reductions were in flight and
     the seconds backward waited for them */
  int *flight, nflight, flight_head;
  double t_flight, t_wait;
  bool leaked; /* a reduction or a gather timed out: its buffers stay with MPI */
  /* stage 3 on the CPU: the gather pool. `live` is the bytes of the buffers
     groups hold, `peak` the most they held at once; free buffers are kept
     while the pool stays within both the peak and max_live_parameters */
  pool_buf *pool;
  int npool;
  size_t pool_bytes, pool_live, pool_peak;
  /* stage 3 prefetch: elements gathered ahead and not yet used, the groups
     whose gathers are in flight (in the order they started), and the seconds
     gathers were in flight and the seconds compute was blocked in them */
  int64_t ahead_elems;
  int *gflight, ngflight;
  double tg_flight, tg_wait;
  /* offload_param (param_dir): the shard then its gradients in one file */
  int pfd;            /* -1: in memory */
  zorch_tensor *pmap; /* the whole file mapped (pshard and gshard view it) */
  zorch_tensor *gtmp; /* host: two slots for a bucket's part (read, added to, written back), then (staged)
                         the device's part copied to the host; each gtmp_half elements */
  int64_t gtmp_half;
  /* write-behind: a thread of its own writes each bucket's summed part from
     its slot while backward goes on; gw_queued jobs were handed over,
     gw_done written (slot = job % 2); gw_status the first failure */
  bool gw_on, gw_started, gw_stop;
  pthread_t gw_thread;
  pthread_mutex_t gw_mu;
  pthread_cond_t gw_cv;
  int64_t gw_queued, gw_done, gw_at[2], gw_n[2];
  zorch_status gw_status;
  char gw_msg[256];
  zero_io gw_io;
  bool *gwritten;     /* per bucket: its part written since zero_grad */
  zero_io io, pf_io;   /* the parameter file's traffic: calling thread, read-ahead thread */
  /* the file moves with direct I/O (O_DIRECT, where the filesystem takes it);
     the gradients start goff elements in, on an aligned offset */
  bool pdirect;
  int64_t goff;
  /* the groups' buffers are not host memory (a GPU rank; the offload_host test hook
     takes the path on the CPU): the file's reads and writes go through host
     buffers (pf_send for gathers, gtmp for buckets) and copies */
  bool pstaged;
  /* the gradient's sums of squares per SQ_BLOCK block of the shard (as
     sum_squares makes them), taken as buckets are written: bvalid[b] when
     block b was whole in the last write that touched it; the clip reads only
     the others. gcoef: the clip's factor, still to multiply the file's
     gradient (the optimizer's stream applies it: zero_engine_take_grad_scale) */
  double *bsum;
  bool *bvalid;
  int64_t nblk;
  double gcoef;
  /* offload on a GPU rank (zero_engine_set_host_grad): each reduced bucket's
     part of gshard is copied to host_grad as it lands (on a GPU, on the side
     stream), and the factors the clip multiplied gshard by are kept for the
     host copy (nhost_coef -1: too many, the copy is redone whole) */
  zorch_tensor *host_grad;
  double host_coef[4];
  int nhost_coef;
  /* the gather ahead reads its group's slice on a thread of its own while the
     current module computes: at one rank straight into the group, at more
     into pf_send, which the gather then all-gathers from (the collective
     itself waits for the gather, in the same order on every rank); pf_group
     is the read in flight (or done and not yet claimed), NULL when none;
     pf_dst, pf_at, pf_n what it reads */
  pthread_t pf_thread;
  bool pf_started, pf_stop, pf_done;
  pthread_mutex_t pf_mu;
  pthread_cond_t pf_cv;
  struct group *pf_group;
  zorch_tensor *pf_send;
  void *pf_dst;
  int64_t pf_at, pf_n;
  zorch_status pf_status;
  char pf_msg[256];
};

static zorch_tensor *flat_view(zorch_tensor *base, int64_t off, int ndim, const int64_t *shape) {
  int64_t st[ZORCH_MAX_DIMS];
  shape_contig_strides(ndim, shape, st);
  return tensor_alias(base, ndim, shape, st, base->offset + off);
}

static zorch_tensor *range(zorch_tensor *base, int64_t off, int64_t len) {
  return flat_view(base, off, 1, &len);
}

static zorch_status scale(zorch_tensor *t, double s) {
  return backend_of(t)->unary(UOP_MUL_S, t, t, s, 0);
}

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
static zorch_status pfile_io(zero_engine *e, bool write, void *buf, int64_t at, int64_t n, int region) {
  return pfile_rw(e, &e->io, write, buf, at, n, region);
}

static void unmap_deleter(void *data, void *ctx);
static zorch_status group_attach(zero_engine *e, struct group *g);

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
static void worker_stop(pthread_t t, pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop) {
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
   dropped (pf_take keeps it for the gather). */
static zorch_status pf_claim(zero_engine *e) {
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
   read stays claimed (pf_send untouched) until pf_claim. */
static zorch_status pf_take(zero_engine *e) {
  pthread_mutex_lock(&e->pf_mu);
  while (e->pf_group && !e->pf_done) pthread_cond_wait(&e->pf_cv, &e->pf_mu);
  zorch_status st = e->pf_status;
  char msg[256];
  memcpy(msg, e->pf_msg, sizeof msg);
  pthread_mutex_unlock(&e->pf_mu);
  return st ? err_set(st, "%s", msg) : ZORCH_OK;
}

static void overlap_counts(const zero_engine *e, int64_t lo, int64_t hi, int64_t *counts);

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
static zorch_status pf_start(zero_engine *e, group *g) {
  if (g->gathered || e->pf_group == g) return ZORCH_OK;
  int64_t start, mine = group_mine(e, g, &start);
  if (e->c->world > 1 && mine == 0) return ZORCH_OK; /* (nothing of it here to read) */
  zorch_status st = (e->c->world > 1 || e->pstaged) ? pf_send_ready(e) : ZORCH_OK;
  if (!st && e->pf_started) st = pf_claim(e);
  if (st) return st;
  if (!e->pf_started) {
    if (!worker_start(&e->pf_thread, &e->pf_mu, &e->pf_cv, pf_main, e))
      return ZORCH_OK; /* (no thread: the gather reads it when it comes) */
    e->pf_started = true;
  }
  /* (at one rank the read lands in the group's own memory) */
  if (e->c->world == 1 && !e->pstaged && (st = group_attach(e, g))) return st;
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
static zorch_status pfile_open(zero_engine *e) {
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

static double block_sumsq(const float *q, int64_t m);

/* The gradient's elements [start, start + n) of the shard were just written
   from q: the sums of squares of the blocks they hold whole, for the clip;
   the blocks they cut are left to it to read. */
static void pfile_note_sums(zero_engine *e, const float *q, int64_t start, int64_t n) {
  if (n <= 0) return;
  for (int64_t b = start / SQ_BLOCK; b < e->nblk && b * SQ_BLOCK < start + n; b++) {
    int64_t lo = b * SQ_BLOCK, hi = lo + SQ_BLOCK < e->shard ? lo + SQ_BLOCK : e->shard;
    e->bvalid[b] = lo >= start && hi <= start + n;
    if (e->bvalid[b]) e->bsum[b] = block_sumsq(q + (lo - start), hi - lo);
  }
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
static zorch_status gw_wait(zero_engine *e, int64_t left) {
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
  return gw_wait(e, 1);
}

/* A reduced bucket's part added into the file's gradients, as into gshard: the
   sum of zeros (or what the window added before) and the part; written
   behind (the next bucket's addition does not wait for it) with write-behind. */
static zorch_status pfile_add(zero_engine *e, int b, int64_t start, zorch_tensor *part) {
  int64_t n = zorch_tensor_numel(part);
  int slot;
  zorch_status st = gw_slot(e, &slot);
  if (!st && e->gwritten[b]) st = gw_wait(e, 0); /* (what the window wrote before, on the disk first) */
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
  if (!st) pfile_note_sums(e, (const float *)tensor_ptr(tmp), start, n);
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
static zorch_status pfile_fill_unwritten(zero_engine *e) {
  int64_t mlo = e->c->rank * e->shard, mhi = mlo + e->shard;
  for (int k = 0; k < e->nbuckets; k++) {
    bucket *b = &e->buckets[k];
    int64_t lo = b->lo > mlo ? b->lo : mlo, hi = b->hi < mhi ? b->hi : mhi;
    if (e->gwritten[k] || hi <= lo) continue;
    zorch_tensor *tmp = range(e->gtmp, 0, hi - lo);
    zorch_status st = tmp ? op_fill_(tmp, 0) : zorch_last_status();
    if (!st) st = pfile_io(e, true, tensor_ptr(tmp), lo - mlo, hi - lo, 1);
    if (!st) pfile_note_sums(e, (const float *)tensor_ptr(tmp), lo - mlo, hi - lo);
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

/* The elements of [lo, hi) in each rank's shard. */
static void overlap_counts(const zero_engine *e, int64_t lo, int64_t hi, int64_t *counts) {
  for (int r = 0; r < e->c->world; r++) {
    int64_t a = lo > r * e->shard ? lo : r * e->shard;
    int64_t b = hi < (r + 1) * e->shard ? hi : (r + 1) * e->shard;
    counts[r] = b > a ? b - a : 0;
  }
}

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
static zorch_status progress(zero_engine *e, bool all) {
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
static void drain(zero_engine *e) {
  if (e->nflight) (void)progress(e, true); /* its error was the backward's, or is moot */
  e->nflight = 0;
}

static zorch_status reduce_bucket(zero_engine *e, bucket *b) {
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

static void unmap_deleter(void *data, void *ctx) { munmap(data, (size_t)ctx); }

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

/* Staged: n elements of the shard from `start` into pf_send (host), on the
   calling thread (a read ahead still in flight is claimed first). */
static zorch_status pfile_staged_read(zero_engine *e, int64_t start, int64_t n) {
  zorch_status st = pf_send_ready(e);
  if (!st && e->pf_started) st = pf_claim(e);
  return st ? st : pfile_io(e, false, tensor_ptr(e->pf_send), start, n, 0);
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
static zorch_status group_attach(zero_engine *e, group *g) {
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

static int64_t pool_free_bytes(const zero_engine *e) {
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
static bool gather_land(zero_engine *e, group *g, bool wait, zorch_status *st) {
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
static zorch_status gather_progress(zero_engine *e) {
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
    if (ahead) pf_claim(e);
    return err_set(ZORCH_ERR_OOM, "zero: out of memory");
  }
  overlap_counts(e, g->lo, g->hi, cnt);
  int64_t mine = cnt[e->c->rank];
  int64_t start = g->lo > e->c->rank * e->shard ? g->lo - e->c->rank * e->shard : 0;
  zorch_tensor *send = NULL;
  bool filled = false; /* one rank: the slice went straight into the group, no collective */
  zorch_status st = group_attach(e, g);
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
  if (ahead) pf_claim(e); /* (pf_send is free for the next read) */
  if (cnt != counts) free(cnt);
  if (!st) g->gathered = true;
  else group_detach(e, g, st == ZORCH_ERR_TIMEOUT), e->leaked |= st == ZORCH_ERR_TIMEOUT;
  return st;
}

static zorch_status group_gather(zero_engine *e, group *g) {
  bool ahead = false; /* more than one rank, or staged: this rank's slice was read ahead into pf_send */
  if (e->pf_group == g && e->c->world == 1 && !e->pstaged) { /* read ahead: wait for it */
    zorch_status st = pf_claim(e);
    if (st) return st;
  } else if (e->pf_group == g && !g->gathered) {
    zorch_status st = pf_take(e);
    if (st) return pf_claim(e), st;
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

static void group_release(zero_engine *e, group *g) {
  if (e->pf_group == g) pf_claim(e); /* (its pages are dropped below; an error there is moot) */
  if (g->req) {
    zorch_status st;
    gather_land(e, g, true, &st); /* (the other ranks run it too; a failure came back to the gather's user) */
  }
  ahead_done(e, g);
  if (!g->gathered) return;
  group_detach(e, g, false);
  g->gathered = false;
}

static int64_t group_bytes(const zero_engine *e) {
  int64_t b = 0;
  for (int k = 0; k < e->ngroups; k++)
    if (e->groups[k].gathered) b += (e->groups[k].hi - e->groups[k].lo) * (int64_t)dtype_sizes[e->pdt];
  return b;
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
      group_release(e, gr);
      gr->pending = gr->count;
    }
  }
  if (e->nflight) {
    zorch_status st = progress(e, false);
    if (st) return st;
  }
  if (e->ngflight) {
    zorch_status st = gather_progress(e);
    if (st) return st;
  }
  if (--b->pending == 0) return reduce_bucket(e, b);
  return ZORCH_OK;
}

/* Buckets: runs of parameters in reverse order (the order gradients arrive). */
static zorch_status make_buckets(zero_engine *e) {
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

/* Stage 3: the slice gets storage of its own, each group an mmap'd buffer that
   its parameters view; then the flat buffer goes and every group is released. */
static zorch_status make_groups(zero_engine *e) {
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
     shard goes straight to the file and make_groups rebinds them */
  if (o->param_dir) {
    if ((st = pfile_open(e))) goto fail_st;
    if ((st = make_buckets(e))) goto fail_st;
    if ((st = make_groups(e))) goto fail_st;
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
  if (o->stage >= 2 && (st = make_buckets(e))) goto fail_st;
  if (o->stage == 3 && (st = make_groups(e))) goto fail_st;
  return e;
fail:
  st = zorch_last_status();
fail_st:
  zero_engine_free(e);
  return NULL;
}

void zero_engine_free(zero_engine *e) {
  if (!e) return;
  drain(e);
  if (e->gw_started) {
    (void)gw_wait(e, 0);
    worker_stop(e->gw_thread, &e->gw_mu, &e->gw_cv, &e->gw_stop);
  }
  if (e->pf_started) {
    pf_claim(e);
    worker_stop(e->pf_thread, &e->pf_mu, &e->pf_cv, &e->pf_stop);
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
    module_release(e->modules[m]);
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
  drain(e);
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
      zorch_status st = reduce_bucket(e, b);
      if (st) return st;
    }
  }
  if (e->nflight) {
    zorch_status st = progress(e, true);
    if (st) return st;
  }
  for (int k = 0; k < e->ngroups; k++) {
    group_release(e, &e->groups[k]);
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
    if (g && comm_allreduce(e->c, g, false)) zorch_tensor_free(g), g = NULL;
  } else if (e->o.stage == 1) {
    zorch_tensor *full = grad_f32(e, e->gflat);
    if (full && !comm_reduce_scatter_inplace(e->c, full)) g = range(full, e->c->rank * e->shard, e->shard);
    zorch_tensor_free(full);
  } else {
    if (e->pfd >= 0 && (gw_wait(e, 0) || pfile_fill_unwritten(e))) return NULL; /* (the writes behind land first) */
    g = grad_f32(e, e->gshard);
  }
  /* (stages 2-3 divided each bucket as it was reduced) */
  if (g && N > 1 && e->o.stage < 2 && scale(g, 1.0 / N)) zorch_tensor_free(g), g = NULL;
  return g;
}

zorch_tensor *zero_engine_target(zero_engine *e) {
  if (e->master) return e->master;
  return e->o.stage == 0 ? e->flat : e->pshard;
}

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
    if (!st) st = pfile_io(e, true, buf, lo, m, 1), pfile_note_sums(e, buf, lo, m);
  }
  free(buf);
  if (!st) e->gcoef = 1;
  return st;
}

/* zero_engine_clip for a gradient in the parameter file: the same blocks'
   sums in the same order, most of them taken as the buckets were written
   (pfile_note_sums), the blocks a bucket's edge cut read back; the factor is
   left pending for the optimizer's stream to apply as it reads each chunk
   (zero_engine_take_grad_scale), so the step reads the gradient once. */
static zorch_status pfile_clip(zero_engine *e, bool sharded, double max_norm, double loss_scale, double *norm,
                               bool *overflow) {
  zorch_status st = gw_wait(e, 0);
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
  zorch_status st = in_file ? gw_wait(e, 0) : ZORCH_OK;
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
    st = gw_wait(e, 0);
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
  for (int k = 0; k < e->ngroups; k++) group_release(e, &e->groups[k]);
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
    if (!g->gathered) return pf_start(e, g);
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
  if (out) ag_set_pre_hook(out, module_pre_backward, m, module_retain, module_release);
  /* (a kept group goes when its gradients are in, or at the end of backward) */
  if (!out || !keep_for_reuse(e, m))
    for (int k = 0; k < m->ngroups; k++) group_release(e, &e->groups[m->groups[k]]);
  return ZORCH_OK;
}

static int64_t nbytes(const zorch_tensor *t) {
  return t ? zorch_tensor_numel(t) * (int64_t)dtype_sizes[t->dtype] : 0;
}

void zero_engine_memory(const zero_engine *e, zero_memory *m) {
  m->parameters = e->o.stage == 3 ? (e->pfd >= 0 ? 0 : nbytes(e->pshard)) + group_bytes(e) : nbytes(e->flat);
  m->gradients = e->gflat ? nbytes(e->gflat) : e->pfd >= 0 ? 0 : nbytes(e->gshard);
  m->master_weights = nbytes(e->master);
  m->buffers = nbytes(e->recv) + nbytes(e->g32) + nbytes(e->gtmp); /* (g32: after the first bf16 or fp16 step) */
  m->buffers += pool_free_bytes(e); /* gather buffers kept for the next gathers */
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
