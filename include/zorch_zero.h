/* zorch_zero.h: data-parallel training with ZeRO (stages 0-3) from C.

   An engine takes a model's parameters (float32 leaves, in a fixed order that
   every rank shares), flattens them into one padded buffer (the parameters
   become views of it) and partitions across the ranks of a communicator what
   the stage asks for:
     stage 0  nothing: gradients all-reduced (plain data parallel)
     stage 1  the optimizer's state: each rank updates its slice
     stage 2  the gradients too, reduced in buckets during backward
     stage 3  the parameters too: gathered around each module's forward and
              backward (the module hooks below), released after
   One training step is
     zorch_zero_zero_grad(e)                  at the start of each accumulation window
     loss = forward(...)                      (stage 3: inside module_begin/module_end)
     zorch_zero_backward(e, loss)             every micro-step
     zorch_zero_step(e, &update, &info)       reduces, clips, updates once a window is full
   Every rank makes the same calls in the same order (they are collective).

   Errors: every function that can fail returns a zorch_status (or NULL) and
   sets the message zorch_last_error() returns; none aborts or exits. A failed
   call leaves the engine usable for zorch_zero_free, and for a new attempt of
   the step when the failure was not a collective's timeout.
   Ownership: tensors passed in are borrowed unless said otherwise; tensors
   returned are borrowed (valid until the engine is freed) unless said
   otherwise. */
#ifndef ZORCH_ZERO_H
#define ZORCH_ZERO_H
#include "zorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- communicators --------------------------------------------------------------------- */
/* A set of ranks that run collectives together. Communicators live as long as
   the process (freeing one is collective): never free them. */
typedef struct zero_comm zorch_zero_comm;

/* The process's communicator: MPI's world when launched by mpirun (or srun,
   zorch launch) with more than one rank, else one local rank. Made on first
   call; NULL with the error set when MPI cannot start. */
ZORCH_API zorch_zero_comm *zorch_zero_world(void);
/* A world of one rank that never starts MPI. */
ZORCH_API zorch_zero_comm *zorch_zero_local(void);
ZORCH_API int zorch_zero_comm_rank(const zorch_zero_comm *c); /* 0-based */
ZORCH_API int zorch_zero_comm_size(const zorch_zero_comm *c);
/* Collective over parent: ranks passing the same color form one group, ordered
   by key; *out set on success. */
ZORCH_API zorch_status zorch_zero_comm_split(zorch_zero_comm *parent, int color, int key, zorch_zero_comm **out);
/* In-place sum over the ranks of c of a contiguous float32 or float64 tensor. */
ZORCH_API zorch_status zorch_zero_allreduce(zorch_zero_comm *c, zorch_tensor *t);
/* The same with the maximum over the ranks in place of the sum. */
ZORCH_API zorch_status zorch_zero_allreduce_max(zorch_zero_comm *c, zorch_tensor *t);
/* The transport: "mpi", "nccl" or "local". */
ZORCH_API const char *zorch_zero_comm_backend(const zorch_zero_comm *c);
/* What the next collectives are for, named in a timeout's message. */
ZORCH_API void zorch_zero_set_label(const char *label);
/* Seconds a collective may wait before it fails with ZORCH_ERR_TIMEOUT (0: never). */
ZORCH_API void zorch_zero_set_timeout(double seconds);
/* Ends MPI if it was started (after the last collective; safe to repeat). */
ZORCH_API void zorch_zero_finalize(void);

/* ---- collectives over a communicator (process groups) ----------------------------------
   Every rank of c makes the same calls in the same order. Tensors are
   contiguous; ranks are c's, from 0. */
/* Every rank's send (equal sizes) concatenated into recv, in rank order. */
ZORCH_API zorch_status zorch_zero_allgather(zorch_zero_comm *c, const zorch_tensor *send, zorch_tensor *recv);
/* send summed over the ranks; this rank gets counts[rank] elements into recv.
   counts has one entry per rank (NULL: recv's size for every rank). */
ZORCH_API zorch_status zorch_zero_reduce_scatter(zorch_zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                                 const int64_t *counts);
/* root's t copied into every rank's t (any dtype). */
ZORCH_API zorch_status zorch_zero_broadcast(zorch_zero_comm *c, zorch_tensor *t, int root);
/* Point to point, both halves at once so that neighbours exchanging both ways
   cannot deadlock: send (or NULL) to rank dst, recv (or NULL) filled from rank
   src; the message must fill recv exactly. */
ZORCH_API zorch_status zorch_zero_sendrecv(zorch_zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv,
                                           int src);
/* The 1-bit compressed all-reduce (zero/onebit.c): buf (float32, CPU) becomes
   its mean over c's ranks, sent as sign bits (8 a byte) and one scale per
   rank's chunk, with error feedback: worker_err has
   zorch_zero_onebit_padded(c, numel) elements, server_err that over the
   size of c; both start at zero and carry each call's compression error to
   the next. With one rank buf stays as it is. */
ZORCH_API zorch_status zorch_zero_compressed_allreduce(zorch_zero_comm *c, zorch_tensor *buf, zorch_tensor *worker_err,
                                                       zorch_tensor *server_err);
ZORCH_API int64_t zorch_zero_onebit_padded(const zorch_zero_comm *c, int64_t n);
/* Returns once every rank of c has called it. */
ZORCH_API zorch_status zorch_zero_barrier(zorch_zero_comm *c);
/* The world rank of c's rank r (r itself for the world; -1 out of range). */
ZORCH_API int zorch_zero_comm_world_rank(const zorch_zero_comm *c, int r);
/* Bytes this rank sent and received over c since the last reset (either
   pointer may be NULL); reset: start counting again from 0 after reading. */
ZORCH_API void zorch_zero_comm_bytes(zorch_zero_comm *c, uint64_t *sent, uint64_t *received, bool reset);
/* The i-th kind of collective this process has entered (0-based; returns 0
   past the last): its name, calls, bytes this rank sent and seconds from each
   call's start to its completion as this rank saw it (seconds may be NULL),
   counted since the last call with reset (which zeroes that kind's counts). */
ZORCH_API int zorch_zero_comm_kind(int i, const char **name, int64_t *calls, uint64_t *bytes, double *seconds,
                                   bool reset);

/* ---- optimizer state on NVMe (ZeRO-Infinity's offload_optimizer "nvme") ---------------
   Adam's two moments of numel elements live in one file under a folder, in
   chunks of `chunk` elements; a step streams them through nbuf >= 2 buffers,
   reading ahead and writing behind on an I/O thread, so memory holds nbuf
   chunks, not the state. Each chunk's update is zorch_adam_step: the same
   arithmetic, element for element, as over the whole. */
typedef struct zoff zorch_offload;
/* A store of zeros in a new file under dir (unlinked at once: it goes when
   the store closes or the process ends). A chunk that is a multiple of 1024
   elements moves with direct I/O where the filesystem allows it. NULL with
   the error set. */
ZORCH_API zorch_offload *zorch_offload_open(const char *dir, int64_t numel, int64_t chunk, int nbuf);
ZORCH_API void zorch_offload_close(zorch_offload *o); /* NULL is fine */
/* The elements [lo, lo + len) that one parameter group's options update;
   step: their own step count (a parameter stepped fewer times, having been
   frozen), or 0 for the call's. */
typedef struct {
  int64_t lo, len;
  zorch_adam_opts k;
  int64_t step;
} zorch_offload_run;
/* One Adam step of param (float32, numel contiguous elements, CPU) with grad,
   the moments streamed from and back to the file; each run's elements with
   its options, the others left as they are. */
ZORCH_API zorch_status zorch_offload_adam(zorch_offload *o, zorch_tensor *param, zorch_tensor *grad, int64_t step,
                                          int nruns, const zorch_offload_run *runs);
/* The parameters and gradients live in the file fd too (float32 from byte
   offsets p_off and g_off; fd is duplicated): from now on adam reads them with
   the moments and writes the parameters back, ignoring the data of the
   tensors it is given (their sizes are still checked). */
ZORCH_API zorch_status zorch_offload_bind_params(zorch_offload *o, int fd, int64_t p_off, int64_t g_off);
/* With the parameters bound: the next adam multiplies each chunk's gradient
   by s first (the clip and loss-scale factor), for that step only. */
ZORCH_API void zorch_offload_set_grad_scale(zorch_offload *o, double s);
/* The moments, whole, into m and v (float32, numel, contiguous), or from them
   into the file (checkpoints); zero: both to zeros (a fresh state). */
ZORCH_API zorch_status zorch_offload_get(zorch_offload *o, zorch_tensor *m, zorch_tensor *v);
ZORCH_API zorch_status zorch_offload_put(zorch_offload *o, const zorch_tensor *m, const zorch_tensor *v);
ZORCH_API zorch_status zorch_offload_zero(zorch_offload *o);
typedef struct {
  int64_t file_bytes;              /* on disk: the moments */
  int64_t buffer_bytes;            /* in memory: the chunk buffers */
  double read_s, write_s, wait_s;  /* the last step: I/O thread reading, writing; the step waiting for it */
  double step_s;                   /* the last step, start to end */
  int64_t read_bytes, write_bytes; /* the last step (parameters and gradients included when bound) */
  bool uring;                      /* the I/O went through io_uring (else pread/pwrite) */
  bool direct;                     /* the moments' file moves with direct I/O */
} zorch_offload_stats;
/* The store's sizes and the last step's I/O into *s. */
ZORCH_API void zorch_offload_get_stats(const zorch_offload *o, zorch_offload_stats *s);
/* The disk under dir, measured: `bytes` written then read back (direct I/O
   where allowed, *direct says) in a file made and unlinked there, in MB/s. */
ZORCH_API zorch_status zorch_offload_probe(const char *dir, int64_t bytes, double *write_mbps, double *read_mbps,
                                           bool *direct);

/* ---- options --------------------------------------------------------------------------- */
/* The fields the Engine's options fill come from the schema, one row each
   (include/zorch_zero_options.h: the field, its default, range and doc; see
   docs/config.md). stage 0..3; clip the max global L2 norm (0: none);
   accumulation micro-steps per step; dtype ZORCH_F32, or ZORCH_BF16 /
   ZORCH_F16 (16-bit parameters and gradients, float32 master weights); fp16's
   loss scaler as DeepSpeed's (loss_scale 0: dynamic from 2^initial_scale_power,
   doubled after loss_scale_window good steps, halved, not below
   min_loss_scale, once `hysteresis` overflows were absorbed); bucket elements
   per reduction and overlap (stages 2-3); stage 3's sizes in elements. */
#include "zorch_zero_options.h"
typedef struct {
#define ZORCH_ZERO_OPTION_FIELD(KIND, type, field, name, def, lo, hi, want, doc) type field;
  ZORCH_ZERO_OPTIONS(ZORCH_ZERO_OPTION_FIELD)
#undef ZORCH_ZERO_OPTION_FIELD
  /* stage 3: the parameters' owner runs: ngroups groups of group_sizes[g]
     consecutive parameters, gathered and released together (a module's own);
     0 groups: one per parameter. The array is copied. */
  int ngroups;
  const int *group_sizes;
  /* stage 3, float32 on the CPU: the shard and its gradient live in a file
     made (and unlinked at once) in this folder; NULL: in memory */
  const char *param_dir;
  zorch_zero_comm *data;         /* the ranks holding replicas (NULL: zorch_zero_world()) */
  zorch_zero_comm *model;        /* the ranks the model is split over (tensor or pipeline
                                    parallel): the norm is summed over them too; NULL: none */
} zorch_zero_options;

/* The defaults: the schema's (stage 0, no clipping, accumulation 1, float32,
   loss scaler as DeepSpeed's 0, 16, 1000, 2, false, 1, bucket 500000000, no
   overlap, stage 3's 0 / 50000000 / 1000000000), in memory, the world, no
   model group. */
ZORCH_API void zorch_zero_options_init(zorch_zero_options *o);

/* ---- the engine ------------------------------------------------------------------------ */
typedef struct zorch_zero zorch_zero;

/* Makes an engine over n parameters (float32 leaves on one device;
   retained; a frozen one, not requiring grad, gets no gradient: zeros). Collective over o->data. The parameters keep
   their values and become views of the engine's buffer (at stage 3 they read
   zeros outside a gather). *out on success; on failure the error names the
   option or parameter at fault. */
ZORCH_API zorch_status zorch_zero_new(const zorch_zero_options *o, int n, zorch_tensor *const *params,
                                      zorch_zero **out);
/* Frees the engine (the parameters then keep their own storage). NULL is fine. */
ZORCH_API void zorch_zero_free(zorch_zero *e);

/* Where this rank's slice lies in the flat buffer of the parameters (in
   order, then padding so every shard has `shard` elements). */
typedef struct {
  int rank, world;         /* in the data communicator */
  int64_t numel;           /* elements of all the parameters */
  int64_t shard;           /* elements per rank's slice */
  int64_t padded;          /* shard * world */
  int64_t lo, len;         /* what the update steps: elements [lo, lo + len) of the flat
                              buffer (stage 0: all of it, else this rank's slice) */
} zorch_zero_geometry;
/* The flat buffer's geometry on this rank into *g. */
ZORCH_API void zorch_zero_get_geometry(const zorch_zero *e, zorch_zero_geometry *g);
/* What the update steps (float32, len elements): the master weights, or the
   flat buffer (stage 0) or this rank's slice of it. Borrowed. */
ZORCH_API zorch_tensor *zorch_zero_target(zorch_zero *e);

/* The weight of each parameter's squares in the global norm (n values, copied):
   1 counts it, 0 leaves it out (a copy another rank of the model group
   holds), 1/T a parameter replicated on T ranks of the model group. Without
   weights every parameter counts 1. */
ZORCH_API zorch_status zorch_zero_set_norm_weights(zorch_zero *e, const double *weights);
/* A further group the norm is summed over (a model split without one model
   communicator: pipeline stages, tensor shards); groups add up. */
ZORCH_API zorch_status zorch_zero_add_norm_comm(zorch_zero *e, zorch_zero_comm *c);

/* Clears the gradients (call at the start of each accumulation window). */
ZORCH_API zorch_status zorch_zero_zero_grad(zorch_zero *e);
/* One micro-step's backward from a one-element loss: the loss times
   1/accumulation and the loss scale, then autograd, with the gradients of
   full buckets reduced as they are ready (stages 2-3). The loss is borrowed. */
ZORCH_API zorch_status zorch_zero_backward(zorch_zero *e, zorch_tensor *loss);
/* The same from a tensor and its gradient (a pipeline stage's output and the
   gradient sent back): grad times the loss scale, no 1/accumulation. */
ZORCH_API zorch_status zorch_zero_backward_from(zorch_zero *e, zorch_tensor *t, zorch_tensor *grad);

/* ---- the step -------------------------------------------------------------------------- */
/* What a callback update gets: the target and its gradient (reduced,
   averaged, unscaled and clipped; float32, len elements, borrowed); with the
   gradient in the parameter file grad_scale is the factor still to apply to
   it as it is streamed (1: none); step is the count of updates including this
   one. */
typedef struct {
  zorch_tensor *target, *grad;
  double grad_scale;
  int64_t step;
} zorch_zero_update_args;
typedef zorch_status (*zorch_zero_update_fn)(const zorch_zero_update_args *a, void *ud);

typedef enum { ZORCH_ZERO_ADAM = 0, ZORCH_ZERO_SGD, ZORCH_ZERO_CALLBACK } zorch_zero_update_kind;
typedef struct {
  zorch_zero_update_kind kind;
  zorch_adam_opts adam; /* ZORCH_ZERO_ADAM (and AdamW: adam.decoupled): state kept by the engine */
  zorch_sgd_opts sgd;   /* ZORCH_ZERO_SGD: the momentum buffer kept by the engine */
  zorch_zero_update_fn fn; /* ZORCH_ZERO_CALLBACK: an optimizer of the host's (or a script's) */
  void *ud;
} zorch_zero_update;

typedef struct {
  bool stepped;      /* an update ran (false: the window is not full yet, or an overflow) */
  bool overflow;     /* float16: an inf or nan in the gradient on some rank skipped the step */
  double norm;       /* global L2 norm of the unscaled gradient, before clipping */
  double loss_scale; /* the scale the next backward uses (1 without float16) */
  int64_t steps;     /* optimizer steps taken (skipped ones do not count) */
  double reduce_s, update_s; /* seconds: reduction and norm; update and after it */
} zorch_zero_step_info;

/* Once accumulation backward calls have run since the last step: reduce the
   gradient, compute the global norm (one sum of squares over this rank's
   slice, summed over the data ranks and the model ranks), find overflow and
   update the loss scale, unscale and clip by one factor, copy it to the host
   copy when one is set, run the update, then put the updated values into the
   parameters (all-gather at stages 1-2, release at stage 3). Earlier it does
   nothing but set info->stepped false. ZORCH_ERR_STATE without a backward
   since the last step. info may be NULL. An error in the update leaves the
   parameters as the update left them. */
ZORCH_API zorch_status zorch_zero_step(zorch_zero *e, const zorch_zero_update *u, zorch_zero_step_info *info);

/* The loss scaler: its state, for checkpoints (set restores a saved one). */
typedef struct {
  double scale;
  int hysteresis;
  int64_t attempts, last_overflow, skipped;
} zorch_zero_scaler;
/* get: the scaler's state into *s; set: restores one (a checkpoint's), refusing
   a scale that is not finite and positive or a negative count. */
ZORCH_API void zorch_zero_get_scaler(const zorch_zero *e, zorch_zero_scaler *s);
ZORCH_API zorch_status zorch_zero_set_scaler(zorch_zero *e, const zorch_zero_scaler *s);
/* Micro-steps (backward calls) so far and optimizer steps taken. */
ZORCH_API void zorch_zero_counts(const zorch_zero *e, int64_t *micro, int64_t *steps);
/* Backward calls since the last step that closed a window (0: a step now is
   ZORCH_ERR_STATE). */
ZORCH_API int64_t zorch_zero_pending(const zorch_zero *e);

/* Offload on a GPU rank (stages 2-3, float32): the update steps host_target
   (float32 CPU tensors of len elements, retained) from host_grad, into which
   each bucket's part of the reduced gradient is copied as it is reduced
   (bucketed) or the whole gradient at the step; after the update host_target
   is copied back to the device's target. NULLs turn it off. */
ZORCH_API zorch_status zorch_zero_set_host(zorch_zero *e, zorch_tensor *host_target, zorch_tensor *host_grad,
                                           bool bucketed);

/* Stage 0: on, the step keeps each rank's own (unreduced) gradient for an
   optimizer that reduces what it needs itself (the 1-bit optimizers after
   their warm-up); the gradient norm is then each rank's own, and an
   overflow on any rank skips the step on every rank. */
ZORCH_API zorch_status zorch_zero_set_local_grads(zorch_zero *e, bool on);

/* Sets the counts (a checkpoint's, restored by the host): micro-steps so
   far and optimizer steps taken; the next backward opens a window. */
ZORCH_API zorch_status zorch_zero_set_counts(zorch_zero *e, int64_t micro, int64_t steps);
/* The loss scaler back to its start (the options' scale, no overflow seen). */
ZORCH_API void zorch_zero_reset_scaler(zorch_zero *e);
/* Puts the target's values into the parameters (after the host wrote the
   target: a restored checkpoint): all-gather at stages 1-2, release at 3. */
ZORCH_API zorch_status zorch_zero_publish(zorch_zero *e);

/* ---- what the engine holds and spent ------------------------------------------------ */
typedef struct {
  int64_t parameters, gradients, master_weights, buffers; /* bytes held now */
  int64_t numel, shard;                                   /* elements */
} zorch_zero_memory;
/* What the engine holds now on this rank into *m. */
ZORCH_API void zorch_zero_get_memory(const zorch_zero *e, zorch_zero_memory *m);
/* Stages 2-3: seconds the gradient reductions were in flight and seconds
   backward waited in them since the last reset (reset: start again). */
ZORCH_API void zorch_zero_comm_times(zorch_zero *e, double *in_flight, double *waited, bool reset);
/* Stage 3: the same for the parameter gathers. */
ZORCH_API void zorch_zero_gather_times(zorch_zero *e, double *in_flight, double *waited, bool reset);
/* With param_dir: the parameter file's descriptor (the engine's: dup it to
   keep it) and the byte offsets of the shard and of its gradient; -1 without. */
ZORCH_API int zorch_zero_param_file(const zorch_zero *e, int64_t *p_off, int64_t *g_off);
/* The parameter file's traffic since the last reset; zeros without param_dir. */
typedef struct {
  int64_t file_bytes, read_bytes, write_bytes;
  double io_s;          /* seconds in reads and writes */
  int64_t ahead_bytes;  /* of read_bytes: read ahead on the read-ahead thread */
  int64_t behind_bytes; /* of write_bytes: written behind on the writer thread */
  double sync_s;        /* of io_s: the calling thread's */
} zorch_zero_io;
/* The parameter file's I/O so far into *io; reset: the counts start again from 0. */
ZORCH_API void zorch_zero_get_io(zorch_zero *e, zorch_zero_io *io, bool reset);

/* ---- checkpoints of the engine's shards ------------------------------------------------- */
/* This rank's state to a safetensors file at path: the target, the fused
   optimizer's state, the step counts and the loss scaler, with the stage,
   rank, world and sizes as metadata. Every rank writes its own file. */
ZORCH_API zorch_status zorch_zero_save(zorch_zero *e, const char *path);
/* Reads a file zorch_zero_save wrote on the same rank of an engine with the
   same stage, world and parameter sizes (else ZORCH_ERR_ARG naming what
   differs; nothing changed), then puts the values into the parameters.
   Collective (stages 1-3 gather). */
ZORCH_API zorch_status zorch_zero_load(zorch_zero *e, const char *path);

/* ---- stage 3: parameters gathered around modules ----------------------------------------- */
/* Gather every group (for a forward outside module hooks, or reading the
   parameters), release every group, or keep this rank's slice after the
   gathered parameters were written. No-ops at stages 0-2. */
ZORCH_API zorch_status zorch_zero_gather(zorch_zero *e);
ZORCH_API zorch_status zorch_zero_release(zorch_zero *e);
ZORCH_API zorch_status zorch_zero_sync_shard(zorch_zero *e);
/* Stage 3: gather the group holding parameter i (0-based) alone. */
ZORCH_API zorch_status zorch_zero_gather_param(zorch_zero *e, int i);
/* A module owning groups[0..n) (0-based group ids); *id its id. */
ZORCH_API zorch_status zorch_zero_module_register(zorch_zero *e, int n, const int *groups, int *id);
/* Before the module's forward: gathers its groups. */
ZORCH_API zorch_status zorch_zero_module_begin(zorch_zero *e, int id);
/* After it: releases them, and arms a hook on the node that made `out` (NULL:
   none) that gathers them again before that node's backward. */
ZORCH_API zorch_status zorch_zero_module_end(zorch_zero *e, int id, zorch_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
