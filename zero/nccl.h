/* nccl.h: the collectives of cuda tensors, over NCCL. They live in the CUDA
   module (zero/nccl.c is built into libzorch_cuda.so, ops/cuda/module.h), so
   zero/comm.c reaches them through a table: the module's
   ZORCH_CUDA_NCCL_ENTRY, given zero's broadcast and timed-wait functions,
   returns it. One rank per GPU; each group (zero_comm) has its own
   communicator, made at its first collective, its id sent from rank 0 over MPI (a build without MPI has one
   rank). Each call queues the collective on the device's stream and waits for
   it (so the wait is timed, and its errors reach the caller), except the
   started ones (ireduce_scatter, iallgatherv) for overlap; buffers are
   contiguous and on the rank's device. */
#ifndef ZORCH_ZERO_NCCL_H
#define ZORCH_ZERO_NCCL_H
#include "comm.h"

/* What zero lends the collectives (zero/comm.c's functions). */
typedef struct nccl_host {
  size_t size; /* sizeof(nccl_host) */
  zorch_status (*bcast_bytes)(zero_comm *c, void *buf, size_t bytes, const char *what);
  zorch_status (*check_wait)(const zero_comm *c, const char *what, int64_t n, double t0);
  void (*wait_begin)(comm_waiter *w);
  void (*wait_pause)(comm_waiter *w);
} nccl_host;

typedef struct nccl_api {
  zorch_status (*allreduce)(zero_comm *c, zorch_tensor *t, bool max);
  /* buf holds world slices of n; this rank's slice gets its sum, in place. */
  zorch_status (*reduce_scatter_inplace)(zero_comm *c, zorch_tensor *buf, int64_t n);
  zorch_status (*allgather)(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, int64_t n);
  /* point to point, both halves in one NCCL group (either may be NULL) */
  zorch_status (*sendrecv)(zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src);
  zorch_status (*broadcast)(zero_comm *c, zorch_tensor *t, int root);
  /* Started on the device's side stream after the compute queued so far, not
     waited for: *ev is the completion that test polls and wait_done waits for
     (timed) and frees. The buffers stay untouched until then. */
  zorch_status (*ireduce_scatter)(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                                  void **ev);
  zorch_status (*iallgatherv)(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                              void **ev);
  zorch_status (*test)(zero_comm *c, void *ev, const char *what, int64_t n, bool *done);
  zorch_status (*wait_done)(zero_comm *c, void *ev, const char *what, int64_t n);
} nccl_api;

/* The type of ZORCH_CUDA_NCCL_ENTRY: NULL when h does not fit. */
typedef const nccl_api *(*nccl_entry)(const nccl_host *h);
#endif
