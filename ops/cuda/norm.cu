// norm.cu: batch normalisation kernels, the CPU's (ops/cpu/norm.c) on CUDA, for
// what cuDNN does not take (cudnn.cu: eval mode, no affine, cuDNN absent). x is
// (n, c, inner) contiguous; one 256-thread block per channel sums its n * inner
// elements in double, in a fixed tree (results repeat bit for bit).
#include "cuda.h"

// element t of channel j's m = n * inner elements
#define BN_AT(j, t) (((t) / inner * c + (j)) * inner + (t) % inner)

template <typename T>
__global__ void k_batch_norm(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, T *rm, T *rv, int64_t n,
                             int64_t c, int64_t inner, bool training, double momentum, double eps) {
  int64_t m = n * inner;
  for (int64_t j = blockIdx.x; j < c; j += gridDim.x) {
    double mu, rs;
    if (training) {
      double s = 0, ss = 0;
      for (int64_t t = threadIdx.x; t < m; t += blockDim.x) s += x[BN_AT(j, t)];
      mu = cu_block_sum(s) / (double)m;
      for (int64_t t = threadIdx.x; t < m; t += blockDim.x) {
        double d = (double)x[BN_AT(j, t)] - mu;
        ss += d * d;
      }
      ss = cu_block_sum(ss);
      rs = 1.0 / sqrt(ss / (double)m + eps);
      if (threadIdx.x == 0 && rm) {
        rm[j] = (T)((1 - momentum) * (double)rm[j] + momentum * mu);
        rv[j] = (T)((1 - momentum) * (double)rv[j] + momentum * ss / (double)(m - 1));
      }
    } else {
      mu = rm[j];
      rs = 1.0 / sqrt((double)rv[j] + eps);
    }
    if (threadIdx.x == 0) mean[j] = (T)mu, rstd[j] = (T)rs;
    double sc = rs * (w ? (double)w[j] : 1.0), sh = (b ? (double)b[j] : 0.0) - mu * sc;
    for (int64_t t = threadIdx.x; t < m; t += blockDim.x) {
      int64_t e = BN_AT(j, t);
      y[e] = (T)((double)x[e] * sc + sh);
    }
  }
}

static unsigned channel_blocks(int64_t c) { return (unsigned)(c < (1 << 20) ? c : (1 << 20)); }

zorch_status cuda_batch_norm(zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd, const zorch_tensor *x,
                             const zorch_tensor *w, const zorch_tensor *b, zorch_tensor *rm, zorch_tensor *rv,
                             int64_t n, int64_t c, int64_t inner, bool training, double momentum, double eps) {
  int dev = cu_dev(y);
  if (c == 0) return ZORCH_OK;
  zorch_status st;
  if (cu_cudnn_batch_norm(&st, y, mean, rstd, x, w, b, rm, rv, n, c, inner, training, momentum, eps)) return st;
  CU_REAL(x->dtype, "batch_norm",
          (CU_LAUNCH((channel_blocks(c), 256, 0, cu_stream(dev)), k_batch_norm<T>)(
              (T *)tensor_ptr(y), (T *)tensor_ptr(mean), (T *)tensor_ptr(rstd), (const T *)tensor_ptr(x),
              w ? (const T *)tensor_ptr(w) : nullptr, b ? (const T *)tensor_ptr(b) : nullptr,
              rm ? (T *)tensor_ptr(rm) : nullptr, rv ? (T *)tensor_ptr(rv) : nullptr, n, c, inner, training,
              momentum, eps)));
}

template <typename T>
__global__ void k_batch_norm_bwd(T *gx, T *gw, T *gb, const T *g, const T *x, const T *mean, const T *rstd,
                                 const T *w, int64_t n, int64_t c, int64_t inner, bool training) {
  int64_t m = n * inner;
  for (int64_t j = blockIdx.x; j < c; j += gridDim.x) {
    double mu = mean[j], rs = rstd[j], sg = 0, sgx = 0;
    for (int64_t t = threadIdx.x; t < m; t += blockDim.x) {
      int64_t e = BN_AT(j, t);
      sg += g[e];
      sgx += (double)g[e] * ((double)x[e] - mu) * rs;
    }
    sg = cu_block_sum(sg);
    sgx = cu_block_sum(sgx);
    if (threadIdx.x == 0) {
      if (gw) gw[j] = (T)sgx;
      if (gb) gb[j] = (T)sg;
    }
    if (!gx) continue;
    double sc = rs * (w ? (double)w[j] : 1.0);
    for (int64_t t = threadIdx.x; t < m; t += blockDim.x) {
      int64_t e = BN_AT(j, t);
      double v = g[e];
      if (training) v -= (sg + ((double)x[e] - mu) * rs * sgx) / (double)m;
      gx[e] = (T)(sc * v);
    }
  }
}

zorch_status cuda_batch_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb, const zorch_tensor *g,
                                 const zorch_tensor *x, const zorch_tensor *mean, const zorch_tensor *rstd,
                                 const zorch_tensor *w, int64_t n, int64_t c, int64_t inner, bool training) {
  int dev = cu_dev(x);
  if (c == 0) return ZORCH_OK;
  zorch_status st;
  if (cu_cudnn_batch_norm_bwd(&st, gx, gw, gb, g, x, mean, rstd, w, n, c, inner, training)) return st;
  CU_REAL(x->dtype, "batch_norm backward",
          (CU_LAUNCH((channel_blocks(c), 256, 0, cu_stream(dev)), k_batch_norm_bwd<T>)(
              gx ? (T *)tensor_ptr(gx) : nullptr, gw ? (T *)tensor_ptr(gw) : nullptr,
              gb ? (T *)tensor_ptr(gb) : nullptr, (const T *)tensor_ptr(g), (const T *)tensor_ptr(x),
              (const T *)tensor_ptr(mean), (const T *)tensor_ptr(rstd), w ? (const T *)tensor_ptr(w) : nullptr, n, c,
              inner, training)));
}

// ---- RMSNorm (include/zorch_ops.h), the CPU's formulas (ops/cpu/norm.c): one
// 256-thread block per row sums the squares in double, in a fixed tree ----
template <typename T>
__global__ void k_rms_norm(T *y, T *rstd, const T *x, const T *w, int64_t rows, int64_t cols, double eps) {
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T *xr = x + i * cols;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) ss += (double)xr[j] * (double)xr[j];
    T r = (T)(1.0 / sqrt(cu_block_sum(ss) / (double)cols + eps));
    if (threadIdx.x == 0) rstd[i] = r;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) y[i * cols + j] = w ? xr[j] * r * w[j] : xr[j] * r;
  }
}

template <typename T>
__global__ void k_rms_norm_bwd_x(T *gx, const T *g, const T *x, const T *w, const T *rstd, int64_t rows,
                                 int64_t cols) {
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T *gr = g + i * cols, *xr = x + i * cols;
    double r = (double)rstd[i], s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      s += (double)gr[j] * (w ? (double)w[j] : 1.0) * (double)xr[j];
    double k = r * r * r * cu_block_sum(s) / (double)cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      gx[i * cols + j] = (T)(r * (w ? (double)w[j] : 1.0) * (double)gr[j] - (double)xr[j] * k);
  }
}

// gw per column, rows in order (deterministic)
template <typename T>
__global__ void k_rms_norm_bwd_w(T *gw, const T *g, const T *x, const T *rstd, int64_t rows, int64_t cols) {
  FOR(j, cols) {
    double a = 0;
    for (int64_t i = 0; i < rows; i++) a += (double)g[i * cols + j] * (double)x[i * cols + j] * (double)rstd[i];
    gw[j] = (T)a;
  }
}

static unsigned rms_blocks(int64_t rows) { return (unsigned)(rows < 65535 ? rows : 65535); }

template <typename T>
static void rms_norm(T *y, T *rstd, const T *x, const T *w, int64_t rows, int64_t cols, double eps, int dev) {
  CU_LAUNCH((rms_blocks(rows), 256, 0, cu_stream(dev)), k_rms_norm<T>)(y, rstd, x, w, rows, cols, eps);
}

template <typename T>
static void rms_norm_bwd(T *gx, T *gw, const T *g, const T *x, const T *w, const T *rstd, int64_t rows, int64_t cols,
                         int dev) {
  if (rows) CU_LAUNCH((rms_blocks(rows), 256, 0, cu_stream(dev)), k_rms_norm_bwd_x<T>)(gx, g, x, w, rstd, rows, cols);
  if (gw) CU_LAUNCH(ON(cols, dev), k_rms_norm_bwd_w<T>)(gw, g, x, rstd, rows, cols);
}

zorch_status cuda_rms_norm(zorch_tensor *y, zorch_tensor *rstd, const zorch_tensor *x, const zorch_tensor *w,
                           int64_t rows, int64_t cols, double eps) {
  if (rows == 0) return ZORCH_OK;
  CU_REAL(x->dtype, "rms_norm",
          rms_norm<T>((T *)tensor_ptr(y), (T *)tensor_ptr(rstd), (const T *)tensor_ptr(x),
                      w ? (const T *)tensor_ptr(w) : nullptr, rows, cols, eps, cu_dev(y)));
}

zorch_status cuda_rms_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *g, const zorch_tensor *x,
                               const zorch_tensor *w, const zorch_tensor *rstd, int64_t rows, int64_t cols) {
  CU_REAL(x->dtype, "rms_norm backward",
          rms_norm_bwd<T>((T *)tensor_ptr(gx), gw ? (T *)tensor_ptr(gw) : nullptr, (const T *)tensor_ptr(g),
                          (const T *)tensor_ptr(x), w ? (const T *)tensor_ptr(w) : nullptr,
                          (const T *)tensor_ptr(rstd), rows, cols, cu_dev(gx)));
}
