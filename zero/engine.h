/* engine.h: the ZeRO partition manager. It owns the flat, padded parameter
   buffer (the parameters become views of it), this rank's slices of gradients,
   master weights and parameters as the stage asks, the gradient buckets reduced
   from gradient-ready hooks during backward, and the gathers and releases of
   stage 3. The optimizer runs on `zero_engine_target` with the gradient from
   `zero_engine_reduced_grad`; lua/engine.lua drives the sequence. */
#ifndef ZORCH_ZERO_ENGINE_H
#define ZORCH_ZERO_ENGINE_H
#include "comm.h"

typedef struct zero_engine zero_engine;

typedef struct {
  int stage;           /* 0..3 */
  int64_t bucket;      /* elements per gradient reduction (stages 2-3) */
  zorch_dtype dtype;   /* parameters and gradients: ZORCH_F32, or ZORCH_BF16 or
                          ZORCH_F16 with fp32 master weights */
  /* stage 3: the parameters come in groups (a module's own, consecutive in
     order) gathered and released together; group_sizes[g] parameters each.
     ngroups 0 means one group per parameter. */
  int ngroups;
  const int *group_sizes;
  /* stages 2-3: a full bucket's reduce-scatter starts without waiting and
     completes while backward goes on (MPI; cuda buffers still wait) */
  bool overlap;
  /* stage 3: after its forward a module keeps its parameters gathered when
     fewer than this many parameter elements are used before its backward
     needs them again (judged by the previous step's forward order);
     0 releases at once */
  int64_t max_reuse_distance;
  /* stage 3 (parameters in memory): the gathers of the modules the recorded
     order says come next start without waiting, while the current module
     computes (forward by the previous step's order, backward in reverse), as
     long as the groups gathered ahead and not yet used hold at most
     prefetch_bucket_size elements; 0 gathers each module when it comes.
     Gathers ahead also stop where the gathered groups would hold more than
     max_live_parameters elements, and the CPU's pool of gather buffers keeps
     released buffers for the next gathers only within that many (and within
     the most the groups held at once). */
  int64_t prefetch_bucket_size, max_live_parameters;
  /* stage 3, float32 on the CPU (offload_param device "nvme"): this rank's
     parameter shard and its reduced gradients live in a file made (and
     unlinked) in this folder; gathers read the slices they need from it,
     reduced buckets are added into it, and the target and reduced gradient are
     views of it mapped into memory that the hot path never touches (the
     optimizer streams it, zero/offload.h). NULL: in memory. */
  const char *param_dir;
} zero_opts;

typedef struct {
  int64_t parameters, gradients, master_weights, buffers; /* bytes held now */
  int64_t numel, shard;                                   /* elements */
} zero_memory;

/* Flattens the n parameters (float32, in order) and sets up the stage; NULL
   with the error set on failure (the parameters keep their values, perhaps as
   views of a buffer they keep alive). */
zero_engine *zero_engine_new(zero_comm *c, const zero_opts *o, int n, zorch_tensor *const *params);
void zero_engine_free(zero_engine *e);
/* Before a micro-step's backward: stage 0-1 bind .grad to the flat gradient
   buffer's views; stage 3 gathers the parameters. Buckets start empty, so a
   backward that failed part way leaves nothing behind but the gradients it
   already reduced (zero_engine_zero_grad clears those). */
zorch_status zero_engine_begin_backward(zero_engine *e);
/* After backward: buckets some parameters never reached still reduce. */
zorch_status zero_engine_end_backward(zero_engine *e);
/* The gradient for the optimizer (fp32, summed over ranks and averaged; a new
   reference); *sharded tells whether it is this rank's slice only. */
zorch_tensor *zero_engine_reduced_grad(zero_engine *e, bool *sharded);
/* What the optimizer updates: the fp32 master weights, or the parameters' flat
   buffer (stage 0) or this rank's slice of it. Borrowed. */
zorch_tensor *zero_engine_target(zero_engine *e);
/* Stage 0: keep each rank's gradient unreduced at the step (zorch_zero_set_local_grads). */
void zero_engine_set_local_grads(zero_engine *e, bool on);
/* What else the norm takes: weighted runs of the gradient (a model split
   across ranks counts each element once over them: weight 0 leaves a run out)
   and the groups its sum of squares is summed over besides the data ranks. */
typedef struct {
  int64_t lo, len; /* elements of the gradient */
  double w;
} zero_norm_run;
typedef struct {
  bool weighted; /* the runs' weighted sum, not the whole gradient's */
  int nruns;
  const zero_norm_run *runs;
  int ncomms;
  zero_comm *const *comms;
} zero_norm;
/* Global L2 norm of the gradient (fp64 sums, one all-reduce when sharded, one
   per nx->comms) of a gradient multiplied by loss_scale (1 without loss
   scaling): *norm is the unscaled norm. One combined factor, 1/loss_scale
   times the clip to max_norm when above it (max_norm <= 0: no clipping),
   multiplies the gradient. An inf or nan anywhere makes the reduced sum inf
   or nan on every rank: then *overflow is set, *norm is that value, and the
   gradient is left as it is. nx may be NULL. */
zorch_status zero_engine_clip(zero_engine *e, zorch_tensor *grad, bool sharded, double max_norm,
                              double loss_scale, const zero_norm *nx, double *norm, bool *overflow);
/* With param_dir, zero_engine_clip leaves its factor (1/loss_scale times the
   clip) pending instead of rewriting the gradient in the file: this returns
   it (1: none) and clears it. The optimizer's stream multiplies each chunk's
   gradient by it as it reads it (zoff_set_grad_scale); zero_grad drops it. */
double zero_engine_take_grad_scale(zero_engine *e);
/* Offload on a GPU rank, stages 2-3, float32: from now on each reduced
   bucket's part of this rank's gradient is copied into host (a contiguous
   float32 CPU tensor of `shard` elements, pinned where it can be) as it is
   reduced: on a GPU with an asynchronous copy on the device's side stream,
   so the copies overlap backward; on the CPU (the tests' emulation) at once.
   zero_grad zeros it. zero_engine_host_grad_finish, before the optimizer
   steps from it, waits for the copies and multiplies the copy by the factors
   zero_engine_clip multiplied the gradient by (the same products, from the
   same unscaled values). */
zorch_status zero_engine_set_host_grad(zero_engine *e, zorch_tensor *host);
zorch_status zero_engine_host_grad_finish(zero_engine *e);
/* After the optimizer: master weights into the parameters, then all-gather
   (stages 1-2) or release (stage 3). */
zorch_status zero_engine_after_update(zero_engine *e);
zorch_status zero_engine_zero_grad(zero_engine *e);
/* Stage 3: gather every group, release every group (their pages go back to the
   system; the parameters then read zeros), or keep this rank's slice after the
   parameters were written. No-ops at other stages. */
zorch_status zero_engine_gather(zero_engine *e);
zorch_status zero_engine_release(zero_engine *e);
/* Stage 3: gather the group holding parameter i (0-based) alone. */
zorch_status zero_engine_gather_param(zero_engine *e, int i);
zorch_status zero_engine_sync_shard(zero_engine *e);
/* Stage 3, per module: `module_register` names the groups a module owns and
   sets *id to its id. Before its forward, `module_begin` gathers them; after,
   `module_end` releases them and arms a hook on the node that made `out`, which
   gathers them again before that node's backward, and gathers the module that
   ran forward before it (the next one backward needs) ahead of time. Groups are
   released once all their gradients are in. */
zorch_status zero_engine_module_register(zero_engine *e, int ngroups, const int *groups, int *id);
zorch_status zero_engine_module_begin(zero_engine *e, int module);
zorch_status zero_engine_module_end(zero_engine *e, int module, zorch_tensor *out);
void zero_engine_memory(const zero_engine *e, zero_memory *m);
/* Stages 2-3: seconds the gradient reductions were in flight (from start to
   the moment they were found complete) and seconds backward was blocked in
   them, since the last reset. Without overlap_comm the two are equal; the
   communication overlap hides is the blocked time without it minus the
   blocked time with it. */
void zero_engine_comm_times(zero_engine *e, double *in_flight, double *waited, bool reset);
/* Stage 3: the same for the parameter gathers: seconds from each gather's
   start to the moment it was found complete, and seconds forward and backward
   were blocked in gathers (every gather that was not started ahead is all
   waiting); the difference is the gather time prefetching hid. */
void zero_engine_gather_times(zero_engine *e, double *in_flight, double *waited, bool reset);
/* With param_dir: the file's descriptor (the engine's: dup it to keep it) and
   the byte offsets of the shard's element 0 and of its gradient; -1 without. */
int zero_engine_param_file(const zero_engine *e, int64_t *p_off, int64_t *g_off);
/* The parameter file's traffic since the last reset: bytes read, written and
   the seconds spent in the reads and writes (gathers, bucket additions,
   clipping); *file_bytes its size. Zeros without param_dir. */
typedef struct {
  int64_t file_bytes, read_bytes, write_bytes;
  double io_s;
  int64_t ahead_bytes; /* of read_bytes: read ahead on the read-ahead thread */
  int64_t behind_bytes; /* of write_bytes: bucket parts written behind on the writer thread */
  double sync_s;        /* of io_s: the calling thread's, which the step waited through */
} zero_io;
void zero_engine_io(zero_engine *e, zero_io *io, bool reset);
#endif
