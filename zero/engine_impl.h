/* engine_impl.h: the ZeRO engine's state and what its files share. Private:
   included only by zero/engine.c (lifecycle, the backward boundary), buckets.c
   (gradient buckets and their reduction), norm.c (the gradient norm and the
   clip), gather.c (stage 3: gathers, pool, module hooks, prefetch) and
   param_file.c (offload_param's file and its I/O threads); step.c and the
   bindings use engine.h. Buffers are float32 unless a 16-bit dtype (bf16 or
   fp16) is on; collectives always reduce in float32. */
#ifndef ZORCH_ZERO_ENGINE_IMPL_H
#define ZORCH_ZERO_ENGINE_IMPL_H
#include <pthread.h>
#include <sys/mman.h>

#include "../ops/def/ops.h"
#include "engine.h"

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
  bool local_grads; /* stage 0: the step keeps each rank's own gradient (the 1-bit optimizers reduce) */
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

/* ---- views, scaling and shard arithmetic every file uses ---- */

static inline zorch_tensor *flat_view(zorch_tensor *base, int64_t off, int ndim, const int64_t *shape) {
  int64_t st[ZORCH_MAX_DIMS];
  shape_contig_strides(ndim, shape, st);
  return tensor_alias(base, ndim, shape, st, base->offset + off);
}

static inline zorch_tensor *range(zorch_tensor *base, int64_t off, int64_t len) {
  return flat_view(base, off, 1, &len);
}

static inline zorch_status scale(zorch_tensor *t, double s) {
  return backend_of(t)->unary(UOP_MUL_S, t, t, s, 0);
}

static inline void unmap_deleter(void *data, void *ctx) { munmap(data, (size_t)ctx); }

/* The elements of [lo, hi) in each rank's shard. */
static inline void overlap_counts(const zero_engine *e, int64_t lo, int64_t hi, int64_t *counts) {
  for (int r = 0; r < e->c->world; r++) {
    int64_t a = lo > r * e->shard ? lo : r * e->shard;
    int64_t b = hi < (r + 1) * e->shard ? hi : (r + 1) * e->shard;
    counts[r] = b > a ? b - a : 0;
  }
}

/* ---- buckets.c ---- */
zorch_status bucket_setup(zero_engine *e);
zorch_status bucket_reduce(zero_engine *e, bucket *b);
zorch_status bucket_progress(zero_engine *e, bool all);
void bucket_drain(zero_engine *e);

/* ---- norm.c ---- */
void norm_note_sums(zero_engine *e, const float *q, int64_t start, int64_t n);

/* ---- gather.c ---- */
zorch_status gather_setup(zero_engine *e);
zorch_status gather_attach(zero_engine *e, group *g);
void gather_release(zero_engine *e, group *g);
bool gather_land(zero_engine *e, group *g, bool wait, zorch_status *st);
zorch_status gather_progress(zero_engine *e);
int64_t gather_bytes(const zero_engine *e);
int64_t gather_pool_free_bytes(const zero_engine *e);
void gather_module_release(void *ud);

/* ---- param_file.c ---- */
zorch_status pfile_open(zero_engine *e);
zorch_status pfile_io(zero_engine *e, bool write, void *buf, int64_t at, int64_t n, int region);
zorch_status pfile_add(zero_engine *e, int b, int64_t start, zorch_tensor *part);
zorch_status pfile_fill_unwritten(zero_engine *e);
zorch_status pfile_staged_read(zero_engine *e, int64_t start, int64_t n);
zorch_status pfile_ahead_start(zero_engine *e, group *g);
zorch_status pfile_ahead_claim(zero_engine *e);
zorch_status pfile_ahead_take(zero_engine *e);
zorch_status pfile_behind_wait(zero_engine *e, int64_t left);
void pfile_worker_stop(pthread_t t, pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop);
#endif
