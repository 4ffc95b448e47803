// nccl.cc: the emulated NCCL of one rank (nccl.h). Every collective of one
// rank is a copy (or nothing, in place); the group calls nest as NCCL's do.
#include "nccl.h"

#include <string.h>

struct cu_emu_nccl { bool aborted; };

namespace {
thread_local int group_depth = 0;
size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}
ncclResult_t move(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c) {
  if (!c || c->aborted) return ncclInvalidUsage;
  size_t es = type_size(t);
  if (!es || root != 0 || (n && (!s || !r))) return ncclInvalidArgument;
  if (s != r && n) memmove(r, s, n * es);
  return ncclSuccess;
}
}  // namespace

extern "C" {
ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (the emulated NCCL has one rank only)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unhandled error";
  }
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  strcpy(id->internal, "zorch cuda emulator");
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId, int rank) {
  *c = nullptr;
  if (nranks != 1 || rank != 0) return ncclInvalidUsage;
  *c = new cu_emu_nccl{false};
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  delete c;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c) c->aborted = true;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
  *r = c && !c->aborted ? ncclSuccess : ncclInvalidUsage;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  group_depth--;
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c,
                           cudaStream_t) {
  return move(s, r, n, t, 0, c);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c,
                               cudaStream_t) {
  return move(s, r, n, t, 0, c);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
  return move(s, r, n, t, 0, c);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t c,
                        cudaStream_t) {
  return move(s, r, n, t, root, c);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t) {
  return move(s, r, n, t, root, c);
}
// one rank has no peer
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
}
