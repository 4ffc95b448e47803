/* onebit.c: the 1-bit compressed all-reduce of 1-bit Adam, 0/1 Adam and 1-bit
   LAMB (Tang et al. 2021). Each rank ("worker") adds its error feedback to
   its buffer, keeps one scale (the RMS) and the signs, and sends chunk r of
   the signs to rank r (MPI_Alltoall, 8 signs a byte) with its scale
   (MPI_Allgather). Rank r ("server" of chunk r) averages the workers'
   scale x sign, adds its own error feedback and compresses the result the
   same way; an all-gather of the servers' signs and scales rebuilds the
   whole buffer on every rank. The errors (what each compression lost) are
   added back at the next call, so nothing is lost over time. A cuda buffer
   is copied to the host and compressed there (its bytes go over MPI). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "../ops/backend/backend.h"
#include "zorch_zero.h"

int64_t comm_onebit_padded(const zero_comm *c, int64_t n) {
  int64_t unit = 8 * (int64_t)c->world;
  return (n + unit - 1) / unit * unit;
}

/* x += err; the scale ||x|| / sqrt(m); signs packed (bit set: x >= 0, which
   decodes to +scale; 0 goes to +scale as sign(0) + 1 > 0 does); err = x - the
   decoded value. */
/* (branch-free: the signs are random, a branch on them mispredicts half the time) */
static float compress(float *x, float *err, int64_t m, uint8_t *bits) {
  double sq = 0;
#pragma omp parallel for reduction(+ : sq) if (m > (1 << 18))
  for (int64_t i = 0; i < m; i++) {
    x[i] += err[i];
    sq += (double)x[i] * x[i];
  }
  float scale = (float)(sqrt(sq) / sqrt((double)m));
#pragma omp parallel for if (m > (1 << 18))
  for (int64_t b = 0; b < m / 8; b++) { /* (m is a multiple of 8) */
    unsigned byte = 0;
    for (int k = 0; k < 8; k++) {
      int64_t i = 8 * b + k;
      unsigned pos = !(x[i] < 0);
      byte |= pos << k;
      err[i] = x[i] - scale * (float)(2 * (int)pos - 1);
    }
    bits[b] = (uint8_t)byte;
  }
  return scale;
}

/* out[i] (+)= +-scale for the m signs at bits */
static void decode(const uint8_t *bits, int64_t m, float scale, float *out, bool add) {
#pragma omp parallel for if (m > (1 << 18))
  for (int64_t b = 0; b < m / 8; b++)
    for (int k = 0; k < 8; k++) {
      float v = scale * (float)(2 * (int)((bits[b] >> k) & 1) - 1);
      if (add) out[8 * b + k] += v;
      else out[8 * b + k] = v;
    }
}

static zorch_status check_f32(const char *arg, const zorch_tensor *t, int64_t want, bool host) {
  if (!t || t->dtype != ZORCH_F32 || !zorch_tensor_is_contiguous(t) || (host && t->st->device.type != ZORCH_CPU))
    return err_set(ZORCH_ERR_ARG, "compressed_allreduce: %s must be a contiguous float32%s tensor", arg,
                   host ? " CPU" : "");
  if (want >= 0 && zorch_tensor_numel(t) != want)
    return err_set(ZORCH_ERR_SHAPE, "compressed_allreduce: %s has %lld elements, expected %lld", arg,
                   (long long)zorch_tensor_numel(t), (long long)want);
  return ZORCH_OK;
}

zorch_status comm_compressed_allreduce(zero_comm *c, zorch_tensor *buf, zorch_tensor *worker_err,
                                       zorch_tensor *server_err) {
  if (!c) return err_set(ZORCH_ERR_ARG, "compressed_allreduce: NULL communicator");
  if (check_f32("the buffer", buf, -1, false)) return zorch_last_status();
  int64_t n = zorch_tensor_numel(buf), P = comm_onebit_padded(c, n), W = c->world, C = P / W;
  if (check_f32("worker_error", worker_err, P, true) || check_f32("server_error", server_err, C, true))
    return zorch_last_status();
  /* a device buffer is compressed on the host: its errors live there, its
     bytes travel over MPI like a CPU buffer's */
  bool dev = buf->st->device.type != ZORCH_CPU;
  const backend *be = backend_of(buf);
  int di = buf->st->device.index;
  if (W == 1 || n == 0) return ZORCH_OK; /* one rank: nothing to agree on, nothing compressed */
  float *x = calloc((size_t)P, sizeof *x), *wscale = malloc(sizeof(float) * (size_t)W);
  float *sscale = malloc(sizeof(float) * (size_t)W);
  uint8_t *mine = malloc((size_t)P / 8), *got = malloc((size_t)P / 8), *sbits = malloc((size_t)C / 8 + 1);
  zorch_status st = ZORCH_OK;
  if (!x || !wscale || !sscale || !mine || !got || !sbits) {
    st = err_set(ZORCH_ERR_OOM, "compressed_allreduce: out of memory for %lld elements", (long long)P);
    goto done;
  }
  if (dev) st = be->to_host(x, tensor_ptr(buf), sizeof(float) * (size_t)n, di);
  else memcpy(x, tensor_ptr(buf), sizeof(float) * (size_t)n);
  if (st) goto done;
  float scale = compress(x, (float *)tensor_ptr(worker_err), P, mine);
  comm_set_label("the compressed signs");
  if ((st = comm_alltoall_bytes(c, mine, got, (size_t)C / 8))) goto done;
  if ((st = comm_allgather_bytes(c, &scale, wscale, sizeof scale))) goto done;
  /* the server's chunk: the workers' mean, then compressed with its own error */
  float *s = x; /* (x is free now: the first C elements hold the server's sum) */
  for (int64_t w = 0; w < W; w++) decode(got + w * (C / 8), C, wscale[w] / (float)W, s, w > 0);
  float server = compress(s, (float *)tensor_ptr(server_err), C, sbits);
  comm_set_label("the compressed mean");
  if ((st = comm_allgather_bytes(c, sbits, got, (size_t)C / 8))) goto done;
  if ((st = comm_allgather_bytes(c, &server, sscale, sizeof server))) goto done;
  /* (into x, then the buffer's n elements: the padding is not the caller's) */
  for (int64_t r = 0; r < W; r++) decode(got + r * (C / 8), C, sscale[r], x + r * C, false);
  if (dev) st = be->from_host(tensor_ptr(buf), x, sizeof(float) * (size_t)n, di);
  else memcpy(tensor_ptr(buf), x, sizeof(float) * (size_t)n);
done:
  free(x), free(wscale), free(sscale), free(mine), free(got), free(sbits);
  return st;
}

zorch_status zorch_zero_compressed_allreduce(zorch_zero_comm *c, zorch_tensor *buf, zorch_tensor *worker_err,
                                             zorch_tensor *server_err) {
  return comm_compressed_allreduce(c, buf, worker_err, server_err);
}

int64_t zorch_zero_onebit_padded(const zorch_zero_comm *c, int64_t n) { return comm_onebit_padded(c, n); }
