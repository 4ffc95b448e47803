/* quant.h: the layouts of the quantised weights (docs/quantization.md), the
   element math the CPU and CUDA kernels share.

   int8: q (out, in) int8, w[o][k] ~ q[o][k] * scales[o] (float16).
   int4: q (out, in / 2) uint8, groups of `group` inputs (a multiple of 32),
   w[o][k] ~ (nibble(o, k) - 8) * scales[o][k / group] (float16). Each row is
   blocks of 32 inputs in 16 bytes: byte j of block b holds input 32b + j in
   its low nibble and 32b + 16 + j in its high one, so one 16-byte load gives
   two runs of 16 consecutive inputs. */
#ifndef ZORCH_OPS_BACKEND_QUANT_H
#define ZORCH_OPS_BACKEND_QUANT_H
#include <stdint.h>

#include "math.h"

#define ZQ_BLOCK 32 /* inputs per 16-byte block of a 4-bit row */

/* the stored nibble (0..15) of input k of a 4-bit row */
ZM_INLINE int zq_nibble(const uint8_t *row, int64_t k) {
  uint8_t b = row[(k / ZQ_BLOCK) * (ZQ_BLOCK / 2) + (k % (ZQ_BLOCK / 2))];
  return (k % ZQ_BLOCK) < ZQ_BLOCK / 2 ? (b & 15) : (b >> 4);
}

/* the dequantised input k of row o: int8 (group 0) or int4 (q the row's bytes) */
ZM_INLINE float zq_weight(const void *qrow, const uint16_t *srow, int64_t k, int64_t group) {
  if (group == 0) return (float)((const int8_t *)qrow)[k] * zm_f16_to_f32(srow[0]);
  return (float)(zq_nibble((const uint8_t *)qrow, k) - 8) * zm_f16_to_f32(srow[k / group]);
}
#endif
