/* groups.c: the collectives of include/zorch_zero.h over any communicator
   (a process group), for callers outside the engine. */
#include "../ops/core/error.h"
#include <stdlib.h>

#include "comm.h"
#include "zorch_zero.h"

#define NEED(c, ...) \
  if (!(c) || !(__VA_ARGS__)) return err_set(ZORCH_ERR_ARG, "%s: NULL argument", __func__)

zorch_status zorch_zero_allgather(zorch_zero_comm *c, const zorch_tensor *send, zorch_tensor *recv) {
  NEED(c, send && recv);
  return comm_allgather(c, send, recv);
}

zorch_status zorch_zero_reduce_scatter(zorch_zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                       const int64_t *counts) {
  NEED(c, send && recv);
  if (counts) return comm_reduce_scatter(c, send, recv, counts);
  int64_t small[64] = {0}, *eq = c->world <= 64 ? small : malloc(sizeof *eq * (size_t)c->world);
  if (!eq) return err_set(ZORCH_ERR_OOM, "reduce_scatter: out of memory");
  for (int r = 0; r < c->world; r++) eq[r] = zorch_tensor_numel(recv);
  zorch_status st = comm_reduce_scatter(c, send, recv, eq);
  if (eq != small) free(eq);
  return st;
}

zorch_status zorch_zero_broadcast(zorch_zero_comm *c, zorch_tensor *t, int root) {
  NEED(c, t);
  return comm_broadcast(c, t, root);
}

zorch_status zorch_zero_sendrecv(zorch_zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src) {
  NEED(c, 1);
  return comm_sendrecv(c, send, dst, recv, src);
}

zorch_status zorch_zero_barrier(zorch_zero_comm *c) {
  NEED(c, 1);
  return comm_barrier(c);
}

int zorch_zero_comm_world_rank(const zorch_zero_comm *c, int r) {
  if (!c || r < 0 || r >= c->world) return -1;
  return comm_world_rank(c, r);
}

int zorch_zero_comm_kind(int i, const char **name, int64_t *calls, uint64_t *bytes, double *seconds, bool reset) {
  double s;
  if (!name || !calls || !bytes) return 0;
  return comm_kind_stats(i, name, calls, bytes, seconds ? seconds : &s, reset);
}

void zorch_zero_comm_bytes(zorch_zero_comm *c, uint64_t *sent, uint64_t *received, bool reset) {
  if (sent) *sent = c ? c->sent : 0;
  if (received) *received = c ? c->recv : 0;
  if (c && reset) comm_reset_bytes(c);
}
