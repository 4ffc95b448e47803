/* nccl.h: the collectives of cuda tensors, over NCCL (CUDA builds). One rank
   per GPU; the communicator is made at the first collective, its id sent from
   rank 0 over MPI (a build without MPI has one rank). Each call queues the collective on the device's
   stream and waits for it (so the wait is timed, and its errors reach the
   caller); buffers are contiguous and on the rank's device. */
#ifndef ZORCH_ZERO_NCCL_H
#define ZORCH_ZERO_NCCL_H
#include "comm.h"

zorch_status nccl_allreduce(zero_comm *c, zorch_tensor *t, bool max);
zorch_status nccl_reduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts);
/* buf holds world slices of n; this rank's slice gets its sum, in place. */
zorch_status nccl_reduce_scatter_inplace(zero_comm *c, zorch_tensor *buf, int64_t n);
zorch_status nccl_allgather(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, int64_t n);
zorch_status nccl_allgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts);
zorch_status nccl_sendrecv(zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src);
zorch_status nccl_broadcast(zero_comm *c, zorch_tensor *t, int root);
#endif
