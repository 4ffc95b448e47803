// reduce.cu: sums, maxima and minima over the middle dim of (outer, r, inner),
// their backward, running sums, and softmax. Sums run in double in a fixed order: the same inputs
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
        if ((op == RED_MIN ? v < best : v > best) || (v != v && best == best)) best = v, bi = k;
      }
      out[j] = best;
      if (idx) idx[j] = bi;
    }
  }
}

// Does (v, k) beat (best, bi)? The larger value (the smaller for `mn`), a NaN
// over a number, and between equals the first index: what the sequential scan
// picks.
template <typename T>
__device__ inline bool beats(T v, int64_t k, T best, int64_t bi, bool mn) {
  bool vn = v != v, bn = best != best;
  if (vn || bn) return vn && (!bn || k < bi);
  return (mn ? v < best : v > best) || (v == best && k < bi);
}

// The block's (sum, best, index) triples folded in shared memory, in a fixed
// tree; thread 0 ends with the result.
template <typename T>
__device__ void block_fold(double &s, T &v, int64_t &i, bool mn) {
  __shared__ double ss[RED_THREADS];
  __shared__ T sv[RED_THREADS];
  __shared__ int64_t si[RED_THREADS];
  int t = threadIdx.x;
  ss[t] = s, sv[t] = v, si[t] = i;
  __syncthreads();
  for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
    if (t < w) {
      ss[t] += ss[t + w];
      if (beats(sv[t + w], si[t + w], sv[t], si[t], mn)) sv[t] = sv[t + w], si[t] = si[t + w];
    }
    __syncthreads();
  }
  s = ss[0], v = sv[0], i = si[0];
}

// Long rows (inner == 1): each row is split into `parts` chunks, one block
// each. With one part the block writes the result; otherwise its partial
// (double sum, or best and index) goes to ps/pv/pi for k_fold_parts.
template <typename T>
__global__ void k_reduce_rows(int op, T *out, int64_t *idx, const T *a, int64_t r, int parts, int64_t chunk,
                              double *ps, T *pv, int64_t *pi) {
  int64_t row = blockIdx.x / parts, part = blockIdx.x % parts;
  int64_t lo = part * chunk, hi = lo + chunk < r ? lo + chunk : r;
  const T *p = a + row * r;
  int t = threadIdx.x;
  double s = 0;
  int64_t bi = lo + t < hi ? lo + t : lo;  // threads past the end repeat the first element
  T best = p[bi];
  for (int64_t k = lo + t; k < hi; k += RED_THREADS) {
    if (op == RED_SUM) s += (double)p[k];
    else if (beats(p[k], k, best, bi, op == RED_MIN)) best = p[k], bi = k;
  }
  block_fold(s, best, bi, op == RED_MIN);
  if (t) return;
  if (parts == 1) {
    out[row] = op == RED_SUM ? (T)s : best;
    if (idx && op != RED_SUM) idx[row] = bi;
  } else {
    ps[blockIdx.x] = s, pv[blockIdx.x] = best, pi[blockIdx.x] = bi;
  }
}

// One block per row folds its parts, in order.
template <typename T>
__global__ void k_fold_parts(int op, T *out, int64_t *idx, int parts, const double *ps, const T *pv, const int64_t *pi) {
  int64_t row = blockIdx.x;
  int t = threadIdx.x;
  const int64_t base = row * parts;
  double s = 0;
  int64_t j0 = t < parts ? t : 0;
  T best = pv[base + j0];
  int64_t bi = pi[base + j0];
  for (int j = t; j < parts; j += RED_THREADS) {
    s += ps[base + j];
    if (beats(pv[base + j], pi[base + j], best, bi, op == RED_MIN)) best = pv[base + j], bi = pi[base + j];
  }
  block_fold(s, best, bi, op == RED_MIN);
  if (t == 0) {
    out[row] = op == RED_SUM ? (T)s : best;
    if (idx && op != RED_SUM) idx[row] = bi;
  }
}

// Few long rows need many blocks each to fill the GPU: about 16K elements a
// block, at most 4096 blocks in all.
template <typename T>
static zorch_status launch_rows(int op, T *out, int64_t *ix, const T *a, int64_t outer, int64_t r, int dev) {
  int64_t parts = (r + 16383) / 16384;
  if (parts > 1024) parts = 1024;
  if (outer * parts > 4096) parts = 4096 / outer > 1 ? 4096 / outer : 1;
  int64_t chunk = (r + parts - 1) / parts;
  cudaStream_t st = cu_stream(dev);
  if (parts == 1) {
    CU_LAUNCH(((unsigned)outer, RED_THREADS, 0, st), k_reduce_rows<T>)(op, out, ix, a, r, 1, chunk, nullptr, nullptr, nullptr);
    return ZORCH_OK;
  }
  size_t n = (size_t)(outer * parts);
  char *scratch = (char *)cuda_alloc(dev, n * (sizeof(double) + sizeof(T) + sizeof(int64_t)));
  if (!scratch) return zorch_last_status();
  double *ps = (double *)scratch;
  int64_t *pi = (int64_t *)(ps + n);
  T *pv = (T *)(pi + n);
  CU_LAUNCH(((unsigned)n, RED_THREADS, 0, st), k_reduce_rows<T>)(op, out, ix, a, r, (int)parts, chunk, ps, pv, pi);
  CU_LAUNCH(((unsigned)outer, RED_THREADS, 0, st), k_fold_parts<T>)(op, out, ix, (int)parts, ps, pv, pi);
  cuda_free(dev, scratch);  // reused only by work queued after these kernels
  return ZORCH_OK;
}

template <typename T>
static zorch_status launch_reduce(int op, T *out, int64_t *ix, const T *a, int64_t outer, int64_t r, int64_t inner,
                                  int dev) {
  if (!std::is_integral<T>::value && inner == 1 && r >= 1024 && outer <= 65535 && r > outer)
    return launch_rows<T>(op, out, ix, a, outer, r, dev);
  CU_LAUNCH(ON(outer * inner, dev), k_reduce<T>)(op, out, ix, a, outer, r, inner);
  return ZORCH_OK;
}

zorch_status cuda_reduce(red_op op, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *a, int64_t outer,
                         int64_t r, int64_t inner) {
  int64_t *ix = idx ? (int64_t *)tensor_ptr(idx) : nullptr;
  if (outer * inner == 0) return ZORCH_OK;
  int dev = cu_dev(a);
  zorch_status st;
  if (a->dtype == ZORCH_F32)
    st = launch_reduce<float>(op, (float *)tensor_ptr(out), ix, (const float *)tensor_ptr(a), outer, r, inner, dev);
  else if (a->dtype == ZORCH_F64)
    st = launch_reduce<double>(op, (double *)tensor_ptr(out), ix, (const double *)tensor_ptr(a), outer, r, inner, dev);
  else if (a->dtype == ZORCH_I64)
    st = launch_reduce<int64_t>(op, (int64_t *)tensor_ptr(out), ix, (const int64_t *)tensor_ptr(a), outer, r, inner, dev);
  else
    return cu_no_kernel(op == RED_SUM ? "sum" : op == RED_MAX ? "max" : "min", a->dtype);
  return st ? st : cu_launched(op == RED_SUM ? "sum" : op == RED_MAX ? "max" : "min");
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
          (CU_LAUNCH(ON(outer * inner, dev), k_max_bwd<T>)((T *)tensor_ptr(gin), (const T *)tensor_ptr(g), ix, outer, r, inner)));
}

// one thread per (outer, inner) line, in order: the CPU's sums, in the same
// order and precision (double for floats, int64 for integers)
template <typename T, typename A>
__global__ void k_cumsum(T *out, const T *a, int64_t outer, int64_t n, int64_t inner, int reverse) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    A s = 0;
    for (int64_t k = 0; k < n; k++) {
      int64_t e = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
      s += (A)a[e];
      out[e] = (T)s;
    }
  }
}

zorch_status cuda_cumsum(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t n, int64_t inner,
                         bool reverse) {
  if (outer * inner == 0) return ZORCH_OK;
  int dev = cu_dev(a);
  if (a->dtype == ZORCH_F32)
    CU_LAUNCH(ON(outer * inner, dev), k_cumsum<float, double>)((float *)tensor_ptr(out), (const float *)tensor_ptr(a), outer,
                                                        n, inner, reverse);
  else if (a->dtype == ZORCH_F64)
    CU_LAUNCH(ON(outer * inner, dev), k_cumsum<double, double>)((double *)tensor_ptr(out), (const double *)tensor_ptr(a),
                                                         outer, n, inner, reverse);
  else if (a->dtype == ZORCH_I64)
    CU_LAUNCH(ON(outer * inner, dev), k_cumsum<int64_t, int64_t>)((int64_t *)tensor_ptr(out), (const int64_t *)tensor_ptr(a),
                                                           outer, n, inner, reverse);
  else
    return cu_no_kernel("cumsum", a->dtype);
  return cu_launched("cumsum");
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

// long contiguous rows (inner == 1): one block a row
template <typename T>
__global__ void k_softmax_rows(T *y, const T *x, int64_t c, int log_) {
  const T *xp = x + blockIdx.x * c;
  T *yp = y + blockIdx.x * c;
  double mx = -INFINITY, s = 0;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
    double v = (double)xp[k];
    if (v > mx || v != v) mx = v;
  }
  T m = (T)cu_block_max(mx);
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) s += exp((double)(xp[k] - m));
  s = cu_block_sum(s);
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
    yp[k] = log_ ? (T)(xp[k] - m - log(s)) : (T)(exp((double)(xp[k] - m)) / s);
}

template <typename T>
static void launch_softmax(T *y, const T *x, int64_t outer, int64_t c, int64_t inner, int log_, int dev) {
  if (inner == 1 && c >= 256 && outer < (1LL << 31))
    CU_LAUNCH(((unsigned)outer, 256, 0, cu_stream(dev)), k_softmax_rows<T>)(y, x, c, log_);
  else
    CU_LAUNCH(ON(outer * inner, dev), k_softmax<T>)(y, x, outer, c, inner, log_);
}

zorch_status cuda_softmax(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t c, int64_t inner, bool log_) {
  if (outer * inner == 0) return ZORCH_OK;
  int dev = cu_dev(a);
  CU_REAL(a->dtype, "softmax",
          launch_softmax<T>((T *)tensor_ptr(out), (const T *)tensor_ptr(a), outer, c, inner, log_, dev));
}
