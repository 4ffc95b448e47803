/* nccl.c: the collectives of cuda tensors over NCCL (see nccl.h), built into
   the CUDA module. comm.c's functions come through the table it passes. */
#include "nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

cudaStream_t zorch_cuda_stream(int dev); /* ops/cuda/runtime.cu */

static const nccl_host *Z;
/* Each group (zero_comm) has its own NCCL communicator in c->nccl, on device
   c->nccl_dev, made at its first collective. */

static zorch_status nccl_fail(const zero_comm *c, const char *what, int64_t n, const char *why) {
  return err_set(ZORCH_ERR_IO, "%s of %lld elements failed on rank %d (NCCL): %s", what, (long long)n, c->rank, why);
}
#define NCCL_TRY(call, c, what, n)                                                   \
  do {                                                                               \
    ncclResult_t r_ = (call);                                                        \
    if (r_ != ncclSuccess) return nccl_fail(c, what, n, ncclGetErrorString(r_));     \
  } while (0)

/* The communicator, made on first use for the device of `t`. */
static zorch_status nccl_get(zero_comm *c, const zorch_tensor *t, const char *what, ncclComm_t *out) {
  int dev = t->st->device.index;
  if (c->nccl_dev >= 0 && dev != c->nccl_dev)
    return err_set(ZORCH_ERR_DEVICE, "%s: rank %d runs its NCCL collectives on cuda:%d, not cuda:%d (one GPU per rank)",
                   what, c->rank, c->nccl_dev, dev);
  if (c->nccl_dev < 0) {
    ncclUniqueId id;
    if (c->rank == 0) NCCL_TRY(ncclGetUniqueId(&id), c, "ncclGetUniqueId", 0);
    if (Z->bcast_bytes(c, &id, sizeof id, "sending the NCCL id")) {
      err_prefix(what);
      return zorch_last_status();
    }
    zorch_cuda_stream(dev); /* makes dev current */
    ncclComm_t nc;
    NCCL_TRY(ncclCommInitRank(&nc, c->world, id, c->rank), c, "ncclCommInitRank", 0);
    c->nccl = nc;
    c->nccl_dev = dev;
  }
  *out = (ncclComm_t)c->nccl;
  return ZORCH_OK;
}

/* Waits for the queued collective, checking NCCL's asynchronous errors and the
   timeout; a collective that times out has its communicator aborted, so its
   kernels stop instead of holding the device. */
static zorch_status nccl_wait(zero_comm *c, const char *what, int64_t n) {
  cudaStream_t s = zorch_cuda_stream(c->nccl_dev);
  comm_waiter w;
  Z->wait_begin(&w);
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return ZORCH_OK;
    if (e != cudaErrorNotReady) return nccl_fail(c, what, n, cudaGetErrorString(e));
    ncclResult_t ar;
    if (ncclCommGetAsyncError((ncclComm_t)c->nccl, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress)
      return nccl_fail(c, what, n, ncclGetErrorString(ar));
    zorch_status st = Z->check_wait(c, what, n, w.t0);
    if (st) {
      ncclCommAbort((ncclComm_t)c->nccl);
      c->nccl = NULL;
      return st;
    }
    Z->wait_pause(&w);
  }
}

static ncclDataType_t nccl_type(zorch_dtype dt) {
  switch (dt) {
    case ZORCH_F64: return ncclFloat64;
    case ZORCH_BF16: return ncclBfloat16;
    case ZORCH_F16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

static zorch_status nccl_allreduce(zero_comm *c, zorch_tensor *t, bool max) {
  int64_t n = zorch_tensor_numel(t);
  ncclComm_t nc;
  if (nccl_get(c, t, "allreduce", &nc)) return zorch_last_status();
  void *p = tensor_ptr(t);
  NCCL_TRY(ncclAllReduce(p, p, (size_t)n, nccl_type(t->dtype), max ? ncclMax : ncclSum, nc,
                         zorch_cuda_stream(c->nccl_dev)),
           c, "allreduce", n);
  return nccl_wait(c, "allreduce", n);
}

static zorch_status per_rank_on(zero_comm *c, const char *what, const zorch_tensor *send, zorch_tensor *recv,
                                const int64_t *counts, bool reduce);

/* ---- collectives started on a side stream, for overlap with compute ------
   Each device has one side stream for them; it first waits for what the
   compute stream queued so far (the buffers' producers), and the collective's
   completion is an event that nccl_test polls and nccl_wait_done waits for.
   Later compute that reads the result is queued after the host saw the event
   complete, so it needs no device-side wait. */
#define MAX_SIDE 64
static cudaStream_t side_streams[MAX_SIDE];

static zorch_status side_stream(zero_comm *c, const char *what, int64_t n, cudaStream_t *out) {
  int dev = c->nccl_dev;
  if (dev < 0 || dev >= MAX_SIDE) return nccl_fail(c, what, n, "no side stream for this device");
  cudaStream_t main_s = zorch_cuda_stream(dev);
  if (!side_streams[dev] && cudaStreamCreateWithFlags(&side_streams[dev], cudaStreamNonBlocking) != cudaSuccess) {
    side_streams[dev] = NULL;
    return nccl_fail(c, what, n, cudaGetErrorString(cudaGetLastError()));
  }
  cudaEvent_t ready;
  if (cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess)
    return nccl_fail(c, what, n, cudaGetErrorString(cudaGetLastError()));
  cudaError_t e = cudaEventRecord(ready, main_s);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(side_streams[dev], ready, 0);
  cudaEventDestroy(ready); /* released once it has fired */
  if (e != cudaSuccess) return nccl_fail(c, what, n, cudaGetErrorString(e));
  *out = side_streams[dev];
  return ZORCH_OK;
}

/* The event that marks the end of what the side stream holds now. */
static zorch_status side_done(zero_comm *c, const char *what, int64_t n, void **ev) {
  cudaEvent_t done;
  if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess)
    return nccl_fail(c, what, n, cudaGetErrorString(cudaGetLastError()));
  cudaError_t e = cudaEventRecord(done, side_streams[c->nccl_dev]);
  if (e != cudaSuccess) {
    cudaEventDestroy(done);
    return nccl_fail(c, what, n, cudaGetErrorString(e));
  }
  *ev = done;
  return ZORCH_OK;
}

static zorch_status nccl_test(zero_comm *c, void *ev, const char *what, int64_t n, bool *done) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
  *done = e == cudaSuccess;
  if (e != cudaSuccess && e != cudaErrorNotReady) return nccl_fail(c, what, n, cudaGetErrorString(e));
  ncclResult_t ar;
  if (!*done && c->nccl && ncclCommGetAsyncError((ncclComm_t)c->nccl, &ar) == ncclSuccess && ar != ncclSuccess &&
      ar != ncclInProgress)
    return nccl_fail(c, what, n, ncclGetErrorString(ar));
  return ZORCH_OK;
}

/* Waits for a started collective (timed, as nccl_wait) and frees its event. */
static zorch_status nccl_wait_done(zero_comm *c, void *ev, const char *what, int64_t n) {
  comm_waiter w;
  Z->wait_begin(&w);
  zorch_status st = ZORCH_OK;
  for (;;) {
    bool done;
    st = nccl_test(c, ev, what, n, &done);
    if (st || done) break;
    st = Z->check_wait(c, what, n, w.t0);
    if (st) {
      ncclCommAbort((ncclComm_t)c->nccl);
      c->nccl = NULL;
      break;
    }
    Z->wait_pause(&w);
  }
  cudaEventDestroy((cudaEvent_t)ev);
  return st;
}

static zorch_status nccl_ireduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                         const int64_t *counts, void **ev) {
  *ev = NULL;
  zorch_status st = per_rank_on(c, "reduce_scatter", send, recv, counts, true);
  return st ? st : side_done(c, "reduce_scatter", zorch_tensor_numel(send), ev);
}

static zorch_status nccl_iallgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                                     void **ev) {
  *ev = NULL;
  zorch_status st = per_rank_on(c, "allgatherv", send, recv, counts, false);
  return st ? st : side_done(c, "allgatherv", zorch_tensor_numel(recv), ev);
}

/* Uneven parts, as one NCCL group of a call per rank rooted at that rank: a
   reduce into the part the root keeps (reduce-scatter), or a broadcast of the
   part the root owns (all-gather); queued on the side stream. */
static zorch_status per_rank_on(zero_comm *c, const char *what, const zorch_tensor *send, zorch_tensor *recv,
                                const int64_t *counts, bool reduce) {
  const zorch_tensor *whole = reduce ? send : recv;
  int64_t total = zorch_tensor_numel(whole), off = 0;
  size_t es = dtype_sizes[whole->dtype];
  ncclComm_t nc;
  if (nccl_get(c, whole, what, &nc)) return zorch_last_status();
  cudaStream_t s = NULL;
  if (side_stream(c, what, total, &s)) return zorch_last_status();
  NCCL_TRY(ncclGroupStart(), c, what, total);
  for (int r = 0; r < c->world; r++) {
    bool mine = r == c->rank;
    ncclResult_t res = ncclSuccess;
    if (counts[r] > 0 && reduce)
      res = ncclReduce(tensor_ptr(send) + (size_t)off * es, mine ? tensor_ptr(recv) : NULL, (size_t)counts[r],
                       nccl_type(whole->dtype), ncclSum, r, nc, s);
    else if (counts[r] > 0)
      res = ncclBroadcast(mine ? tensor_ptr(send) : NULL, tensor_ptr(recv) + (size_t)off * es, (size_t)counts[r],
                          nccl_type(whole->dtype), r, nc, s);
    if (res != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(c, what, total, ncclGetErrorString(res));
    }
    off += counts[r];
  }
  NCCL_TRY(ncclGroupEnd(), c, what, total);
  return ZORCH_OK;
}


static zorch_status nccl_reduce_scatter_inplace(zero_comm *c, zorch_tensor *buf, int64_t n) {
  ncclComm_t nc;
  if (nccl_get(c, buf, "reduce_scatter", &nc)) return zorch_last_status();
  char *p = tensor_ptr(buf);
  /* in place when the result is this rank's slice of the input */
  NCCL_TRY(ncclReduceScatter(p, p + (size_t)(n * c->rank) * dtype_sizes[buf->dtype], (size_t)n, nccl_type(buf->dtype),
                             ncclSum, nc, zorch_cuda_stream(c->nccl_dev)),
           c, "reduce_scatter", n * c->world);
  return nccl_wait(c, "reduce_scatter", n * c->world);
}

static zorch_status nccl_allgather(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, int64_t n) {
  ncclComm_t nc;
  if (nccl_get(c, send, "allgather", &nc)) return zorch_last_status();
  NCCL_TRY(ncclAllGather(tensor_ptr(send), tensor_ptr(recv), (size_t)n, nccl_type(send->dtype), nc,
                         zorch_cuda_stream(c->nccl_dev)),
           c, "allgather", n * c->world);
  return nccl_wait(c, "allgather", n * c->world);
}


static zorch_status nccl_sendrecv(zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src) {
  const zorch_tensor *any = send ? send : recv;
  size_t sb = send ? (size_t)zorch_tensor_numel(send) * dtype_sizes[send->dtype] : 0;
  size_t rb = recv ? (size_t)zorch_tensor_numel(recv) * dtype_sizes[recv->dtype] : 0;
  ncclComm_t nc;
  if (nccl_get(c, any, "sendrecv", &nc)) return zorch_last_status();
  cudaStream_t s = zorch_cuda_stream(c->nccl_dev);
  /* one NCCL group, so two neighbours exchanging both ways do not deadlock */
  NCCL_TRY(ncclGroupStart(), c, "sendrecv", (int64_t)(sb + rb));
  ncclResult_t r1 = send ? ncclSend(tensor_ptr(send), sb, ncclUint8, dst, nc, s) : ncclSuccess;
  ncclResult_t r2 = recv ? ncclRecv(tensor_ptr(recv), rb, ncclUint8, src, nc, s) : ncclSuccess;
  ncclResult_t r3 = ncclGroupEnd();
  ncclResult_t r = r1 != ncclSuccess ? r1 : r2 != ncclSuccess ? r2 : r3;
  if (r != ncclSuccess) return nccl_fail(c, "sendrecv", (int64_t)(sb + rb), ncclGetErrorString(r));
  return nccl_wait(c, "sendrecv", (int64_t)(sb + rb));
}

static zorch_status nccl_broadcast(zero_comm *c, zorch_tensor *t, int root) {
  size_t n = (size_t)zorch_tensor_numel(t) * dtype_sizes[t->dtype];
  ncclComm_t nc;
  if (nccl_get(c, t, "broadcast", &nc)) return zorch_last_status();
  void *p = tensor_ptr(t);
  NCCL_TRY(ncclBroadcast(p, p, n, ncclUint8, root, nc, zorch_cuda_stream(c->nccl_dev)), c, "broadcast", (int64_t)n);
  return nccl_wait(c, "broadcast", (int64_t)n);
}

static const nccl_api the_api = {nccl_allreduce,       nccl_reduce_scatter_inplace, nccl_allgather,
                                 nccl_sendrecv,        nccl_broadcast,              nccl_ireduce_scatter,
                                 nccl_iallgatherv,     nccl_test,                   nccl_wait_done};

__attribute__((visibility("default"))) const nccl_api *zorch_cuda_nccl_open(const nccl_host *h) {
  if (!h || h->size != sizeof(nccl_host)) return NULL;
  Z = h;
  return &the_api;
}
