// quant.cu: the quantised weights' kernels (ops/backend/quant.h's layouts),
// computing what ops/cpu/quant.c computes (its AVX-512 loops): int8 rows sum x * q and scale the
// sum once, int4 weights are (nibble - 8) * their group's scale. qlinear runs
// one warp per output value, its lanes striding over the inputs (coalesced
// reads of x and the weights), for every row count; quantize is the CPU's.
#include "cuda.h"
#include "../backend/quant.h"

__global__ void k_dequantize(float *w, const char *q, const uint16_t *s, int64_t out, int64_t in, int64_t group) {
  int64_t qrow = group ? in / 2 : in, srow = group ? in / group : 1;
  FOR(i, out * in) {
    int64_t o = i / in, k = i % in;
    w[i] = zq_weight(q + o * qrow, s + o * srow, k, group);
  }
}

__global__ void k_qlinear(float *y, const float *x, const char *q, const uint16_t *s, const float *b, int64_t rows,
                          int64_t out, int64_t in, int64_t group) {
  int64_t qrow = group ? in / 2 : in, srow = group ? in / group : 1;
  int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32, nw = (int64_t)gridDim.x * blockDim.x / 32;
  int lane = threadIdx.x % 32;
  for (int64_t t = warp; t < rows * out; t += nw) {
    int64_t r = t / out, o = t % out;
    const char *qr = q + o * qrow;
    const float *xr = x + r * in;
    float acc = 0;
    if (group == 0)
      for (int64_t k = lane; k < in; k += 32) acc += xr[k] * (float)((const int8_t *)qr)[k];
    else
      for (int64_t k = lane; k < in; k += 32) acc += xr[k] * zq_weight(qr, s + o * srow, k, group);
    for (int off = 16; off; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[t] = (group == 0 ? acc * zm_f16_to_f32(s[o]) : acc) + (b ? b[o] : 0.0f);
  }
}

zorch_status cuda_dequantize(zorch_tensor *w, const zorch_tensor *q, const zorch_tensor *scales, int64_t group) {
  int64_t out = w->shape[0], in = w->shape[1];
  if (out * in == 0) return ZORCH_OK;
  CU_LAUNCH(ON(out * in, cu_dev(w)), k_dequantize)((float *)tensor_ptr(w), tensor_ptr(q),
                                             (const uint16_t *)tensor_ptr(scales), out, in, group);
  return cu_launched("dequantize");
}

zorch_status cuda_qlinear(zorch_tensor *y, const zorch_tensor *x, const zorch_tensor *q, const zorch_tensor *scales,
                          const zorch_tensor *b, int64_t rows, int64_t group) {
  int64_t out = q->shape[0], in = x->shape[x->ndim - 1];
  if (rows * out == 0) return ZORCH_OK;
  CU_LAUNCH(ON(rows * out * 32, cu_dev(y)), k_qlinear)((float *)tensor_ptr(y), (const float *)tensor_ptr(x), tensor_ptr(q),
                                                 (const uint16_t *)tensor_ptr(scales),
                                                 b ? (const float *)tensor_ptr(b) : nullptr, rows, out, in, group);
  return cu_launched("qlinear");
}
