/* attention.c: the CPU attention kernels, forward and backward, in the manner of
   FlashAttention: the scores are made a key block at a time and never stored
   whole, so the extra memory is the per-row log-sum-exp and scratch of a few
   blocks per thread, whatever the sequence length. The work is split over heads
   and query blocks (forward) and over heads (backward, each thread owning its
   heads' dQ, so no two threads add to one element and the sums do not depend on
   the thread count). The inner loops run over contiguous keys or over the head
   dim, plain loops the compiler vectorises (built for AVX2 and AVX-512 too). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"

/* a tensor's first element as a pointer of any element type */
#define P(t) ((void *)tensor_ptr(t))

#define ATT_BQ 64 /* queries per forward work item */
#define ATT_BK 64 /* keys per block */
#define ATT_CW 32 /* output columns per register tile */

#define T float
#define SFX f32
#define EXP expf
#define LOG logf
#include "attention_tpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG

#define T double
#define SFX f64
#define EXP exp
#define LOG log
#include "attention_tpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG

zorch_status cpu_attention(zorch_tensor *out, zorch_tensor *lse, const zorch_tensor *q,
                           const zorch_tensor *k, const zorch_tensor *v, int64_t bh, int64_t tq,
                           int64_t tk, int64_t d, bool causal, double scale) {
  switch (q->dtype) {
    case ZORCH_F32:
      return fwd_f32(P(out), P(lse), P(q), P(k),
                     P(v), bh, tq, tk, d, causal, (float)scale);
    case ZORCH_F64:
      return fwd_f64(P(out), P(lse), P(q), P(k),
                     P(v), bh, tq, tk, d, causal, scale);
    default:
      return err_set(ZORCH_ERR_DTYPE, "attention: no CPU kernel for dtype %s",
                     zorch_dtype_name(q->dtype));
  }
}

zorch_status cpu_attention_bwd(zorch_tensor *dq, zorch_tensor *dk, zorch_tensor *dv,
                               const zorch_tensor *g, const zorch_tensor *q,
                               const zorch_tensor *k, const zorch_tensor *v,
                               const zorch_tensor *out, const zorch_tensor *lse, int64_t bh,
                               int64_t tq, int64_t tk, int64_t d, bool causal, double scale) {
  switch (q->dtype) {
    case ZORCH_F32:
      return bwd_f32(P(dq), P(dk), P(dv), P(g),
                     P(q), P(k), P(v), P(out),
                     P(lse), bh, tq, tk, d, causal, (float)scale);
    case ZORCH_F64:
      return bwd_f64(P(dq), P(dk), P(dv), P(g),
                     P(q), P(k), P(v), P(out),
                     P(lse), bh, tq, tk, d, causal, scale);
    default:
      return err_set(ZORCH_ERR_DTYPE, "attention: no CPU backward for dtype %s",
                     zorch_dtype_name(q->dtype));
  }
}
