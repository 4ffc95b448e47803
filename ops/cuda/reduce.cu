// reduce.cu: sums and maxima over the middle dim of (outer, r, inner), their
// backward, and softmax. Sums run in double in a fixed order: the same inputs
// give the same bits on every run (no atomics).
#include <type_traits>

#include "cuda.h"

#define RED_THREADS 256

// one thread per output: coalesced across threads when inner > 1
template <typename T>
__global__ void k_reduce(int op, T *out, int64_t *idx, const T *a, int64_t outer, int64_t r, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    const T *p = a + o * r * inner + i;
    if (op == RED_SUM) {
      double s = 0;
      for (int64_t k = 0; k < r; k++) s += (double)p[k * inner];
      out[j] = (T)s;
    } else {
      T best = p[0];
      int64_t bi = 0;
      for (int64_t k = 1; k < r; k++) {
        T v = p[k * inner];
        if (v > best || (v != v && best == best)) best = v, bi = k;
      }
      out[j] = best;
      if (idx) idx[j] = bi;
    }
  }
}

// Does (v, k) beat (best, bi)? The larger value, a NaN over a number, and
// between equals the first index: what the sequential scan picks.
template <typename T>
__device__ inline bool beats(T v, int64_t k, T best, int64_t bi) {
  bool vn = v != v, bn = best != best;
  if (vn || bn) return vn && (!bn || k < bi);
  return v > best || (v == best && k < bi);
}

// one block per output row (inner == 1, long rows): strided partial results,
// then a tree in shared memory
template <typename T>
__global__ void k_reduce_rows(int op, T *out, int64_t *idx, const T *a, int64_t r) {
  __shared__ double ss[RED_THREADS];
  __shared__ T sv[RED_THREADS];
  __shared__ int64_t si[RED_THREADS];
  const T *p = a + blockIdx.x * r;
  int t = threadIdx.x;
  double s = 0;
  T best = p[t < r ? t : 0];
  int64_t bi = t < r ? t : 0;
  for (int64_t k = t; k < r; k += RED_THREADS) {
    if (op == RED_SUM) s += (double)p[k];
    else if (beats(p[k], k, best, bi)) best = p[k], bi = k;
  }
  ss[t] = s, sv[t] = best, si[t] = bi;
  __syncthreads();
  for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
    if (t < w) {
      ss[t] += ss[t + w];
      if (beats(sv[t + w], si[t + w], sv[t], si[t])) sv[t] = sv[t + w], si[t] = si[t + w];
    }
    __syncthreads();
  }
  if (t == 0) {
    out[blockIdx.x] = op == RED_SUM ? (T)ss[0] : sv[0];
    if (idx && op != RED_SUM) idx[blockIdx.x] = si[0];
  }
}

template <typename T>
static void launch_reduce(int op, T *out, int64_t *ix, const T *a, int64_t outer, int64_t r, int64_t inner, int dev) {
  if (!std::is_integral<T>::value && inner == 1 && r >= 1024 && outer <= 65535 && r > outer)
    k_reduce_rows<T><<<(unsigned)outer, RED_THREADS, 0, cu_stream(dev)>>>(op, out, ix, a, r);
  else
    k_reduce<T><<<ON(outer * inner, dev)>>>(op, out, ix, a, outer, r, inner);
}

zorch_status cuda_reduce(red_op op, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *a, int64_t outer,
                         int64_t r, int64_t inner) {
  int64_t *ix = idx ? (int64_t *)tensor_ptr(idx) : nullptr;
  if (outer * inner == 0) return ZORCH_OK;
  int dev = cu_dev(a);
  if (a->dtype == ZORCH_F32)
    launch_reduce<float>(op, (float *)tensor_ptr(out), ix, (const float *)tensor_ptr(a), outer, r, inner, dev);
  else if (a->dtype == ZORCH_F64)
    launch_reduce<double>(op, (double *)tensor_ptr(out), ix, (const double *)tensor_ptr(a), outer, r, inner, dev);
  else if (a->dtype == ZORCH_I64)
    launch_reduce<int64_t>(op, (int64_t *)tensor_ptr(out), ix, (const int64_t *)tensor_ptr(a), outer, r, inner, dev);
  else
    return cu_no_kernel(op == RED_SUM ? "sum" : "max", a->dtype);
  return cu_launched(op == RED_SUM ? "sum" : "max");
}

template <typename T>
__global__ void k_max_bwd(T *gin, const T *g, const int64_t *idx, int64_t outer, int64_t r, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    gin[(o * r + idx[j]) * inner + i] += g[j];
  }
}

zorch_status cuda_max_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *idx, int64_t outer, int64_t r,
                          int64_t inner) {
  if (outer * inner == 0) return ZORCH_OK;
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int dev = cu_dev(gin);
  CU_REAL(gin->dtype, "max",
          (k_max_bwd<T><<<ON(outer * inner, dev)>>>((T *)tensor_ptr(gin), (const T *)tensor_ptr(g), ix, outer, r, inner)));
}

template <typename T>
__global__ void k_softmax(T *y, const T *x, int64_t outer, int64_t c, int64_t inner, int log_) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    const T *xp = x + o * c * inner + i;
    T *yp = y + o * c * inner + i;
    T mx = xp[0];
    for (int64_t k = 1; k < c; k++)
      if (xp[k * inner] > mx || xp[k * inner] != xp[k * inner]) mx = xp[k * inner];
    double s = 0;
    for (int64_t k = 0; k < c; k++) s += exp((double)(xp[k * inner] - mx));
    for (int64_t k = 0; k < c; k++)
      yp[k * inner] = log_ ? (T)(xp[k * inner] - mx - log(s)) : (T)(exp((double)(xp[k * inner] - mx)) / s);
  }
}

zorch_status cuda_softmax(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t c, int64_t inner, bool log_) {
  if (outer * inner == 0) return ZORCH_OK;
  int dev = cu_dev(a);
  CU_REAL(a->dtype, "softmax",
          (k_softmax<T><<<ON(outer * inner, dev)>>>((T *)tensor_ptr(out), (const T *)tensor_ptr(a), outer, c, inner, log_)));
}
