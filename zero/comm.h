/* comm.h: collectives behind one small interface, so the ZeRO engine runs the
   same on one process ("local"), over MPI for CPU tensors ("mpi") and over NCCL
   for cuda tensors (chosen per call by the buffers' device). Buffers are
   contiguous float32/float64 tensors (all-gathers also take 16-bit floats).
   Byte counters record what this rank sends and receives under a ring
   algorithm: (N-1)/N of the buffer for a reduce-scatter or an all-gather. */
#ifndef ZORCH_ZERO_COMM_H
#define ZORCH_ZERO_COMM_H
#include "../ops/core/tensor.h"

typedef struct zero_comm {
  int rank, world;
  const char *backend;
  uint64_t sent, recv; /* bytes since the last comm_reset_bytes */
  /* A group (comm_split) has its own MPI communicator (mpi, NULL for the
     world's), the world rank of each of its ranks (members, NULL for the world)
     and its own NCCL communicator, made on first use (zero/nccl.c). */
  void *mpi;
  int *members;
  void *nccl;
  int nccl_dev;
  struct zero_comm *next; /* the groups made so far */
} zero_comm;

/* The process's communicator: "mpi" when launched by mpirun (or srun) with more
   than one rank and MPI was built in, else "local". Created once; NULL with the
   error set when MPI cannot start. */
/* A world of one rank that never calls MPI: a sandboxed script's, which must
   neither start MPI nor read the launcher's environment. */
zero_comm *comm_local(void);
zero_comm *comm_get(void);
/* In-place sum (or max) across ranks. */
zorch_status comm_allreduce(zero_comm *c, zorch_tensor *t, bool max);
/* send (numel = sum of counts) reduced by sum; this rank receives counts[rank]
   elements into recv. counts has world entries. */
zorch_status comm_reduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                 const int64_t *counts);
/* Sum-reduces buf (world equal slices of n) so this rank's slice of buf holds
   its sum, without a second buffer. */
zorch_status comm_reduce_scatter_inplace(zero_comm *c, zorch_tensor *buf);
/* Every rank's `send` (equal sizes) concatenated into recv, in rank order. */
zorch_status comm_allgather(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv);
/* Each rank contributes counts[rank] elements (send); recv gets every rank's
   piece in rank order (sum of counts elements). */
zorch_status comm_allgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                             const int64_t *counts);
void comm_reset_bytes(zero_comm *c);
/* Per kind of collective: calls, bytes sent and seconds to completion (zorch_zero_comm_kind). */
int comm_kind_stats(int i, const char **name, int64_t *calls, uint64_t *bytes, double *seconds, bool reset);
/* A reduce-scatter started without waiting (comm_reduce_scatter's arguments),
   for overlapping it with compute: *req is NULL when it already completed (one
   rank), else a request that comm_test polls (each poll also moves MPI's
   progress on) and comm_wait ends. cuda buffers go to NCCL on the device's
   side stream, after the compute queued so far, and the request is its
   completion event. The buffers must stay untouched until then. comm_wait frees
   the request whatever its outcome; after a timeout the buffers stay in MPI's
   hands, so their owner must not free them (comm_wait says so by returning
   ZORCH_ERR_TIMEOUT). */
typedef struct comm_request comm_request;
zorch_status comm_ireduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                                  comm_request **req);
/* An all-gather started without waiting (comm_allgatherv's arguments), ended
   the same way; recv must stay untouched until then. */
zorch_status comm_iallgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                              comm_request **req);
zorch_status comm_test(comm_request *r, bool *done);
zorch_status comm_wait(comm_request *r);
/* Collective over parent: the ranks that pass the same color form one group,
   ordered by key (then by their rank in parent). *out lives as long as the
   process (freeing a communicator is collective, so groups are never freed
   one by one). */
zorch_status comm_split(zero_comm *parent, int color, int key, zero_comm **out);
/* The world rank of the group's rank r. */
int comm_world_rank(const zero_comm *c, int r);
/* Point to point, both halves at once so that neighbours exchanging in both
   directions cannot deadlock: send (or NULL) goes to rank dst, recv (or NULL)
   is filled from rank src (ranks of c). Buffers are contiguous, of any dtype;
   the message must fill recv exactly. */
zorch_status comm_sendrecv(zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src);
/* Host bytes: piece r (per bytes) of this rank's send goes to rank r, which
   puts it at piece `rank` of its recv (alltoall); or every rank's piece of per
   bytes concatenated in rank order (allgather). Counted as the all-gather is. */
zorch_status comm_alltoall_bytes(zero_comm *c, const void *send, void *recv, size_t per);
zorch_status comm_allgather_bytes(zero_comm *c, const void *send, void *recv, size_t per);
/* The 1-bit compressed all-reduce (zero/onebit.c): buf (float32, n elements)
   becomes the mean over ranks as sign bits and one scale per rank's chunk,
   with error feedback: worker_err (n padded to a multiple of 8 x world) and
   server_err (that over world) carry what the compression lost to the next
   call. A world of one leaves buf as it is. */
int64_t comm_onebit_padded(const zero_comm *c, int64_t n);
zorch_status comm_compressed_allreduce(zero_comm *c, zorch_tensor *buf, zorch_tensor *worker_err,
                                       zorch_tensor *server_err);
/* root's t copied into every rank's t (any contiguous dtype). */
zorch_status comm_broadcast(zero_comm *c, zorch_tensor *t, int root);
zorch_status comm_barrier(zero_comm *c);
/* rank 0's `bytes` at buf sent to every rank (a timed wait, like the others). */
zorch_status comm_bcast_bytes(zero_comm *c, void *buf, size_t bytes, const char *what);
/* What the next collectives carry (a bucket, a parameter group), for the
   timeout's message. */
void comm_set_label(const char *label);
/* Seconds a collective may wait before it times out (0: never). */
void comm_set_timeout(double seconds);
/* Timed waits. comm_clock() is monotonic seconds; a wait loop that started at
   t0 calls comm_check_wait, which returns OK while the collective is within the
   timeout. Past it, the hang goes to the host's handler (zorch_set_hang_handler)
   and, when that returns, the result is ZORCH_ERR_TIMEOUT with a message naming
   the rank, the collective, its size and label, and which ranks have not
   reached it (each rank's count of collectives entered is published in a
   one-sided MPI window that the timed-out rank reads); every later collective then
   fails with ZORCH_ERR_STATE, since the timed-out one is still pending. */
double comm_clock(void);
zorch_status comm_check_wait(const zero_comm *c, const char *what, int64_t n, double t0);
/* The pause between two polls of a pending collective: a short spin, then
   sleeps growing to 1 ms. comm_wait_begin starts a wait (t0 for
   comm_check_wait), comm_wait_pause goes between polls. */
typedef struct comm_waiter {
  double t0, nap; /* when the wait began; the next sleep in seconds (0: spinning) */
} comm_waiter;
void comm_wait_begin(comm_waiter *w);
void comm_wait_pause(comm_waiter *w);
/* Ends every rank with `code` (used by the command line after an error). */
void comm_abort(int code);
/* Finalises MPI if it was started; safe to call more than once. */
void comm_finalize(void);
#endif
