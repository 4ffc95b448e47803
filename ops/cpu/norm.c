/* norm.c: batch normalisation kernels. x is (n, c, inner) contiguous; the
   statistics of channel j run over its n * inner elements, in double. */
#include <math.h>

#include "cpu.h"
#include "kernels.h"

/* Training: mean and biased variance of the batch normalise; the running
   variance takes the unbiased one (PyTorch's rule). Eval: the running stats. */
#define BATCH_NORM(T)                                                                   \
  {                                                                                     \
    T *yp = (T *)tensor_ptr(y), *mp = (T *)tensor_ptr(mean), *rp = (T *)tensor_ptr(rstd); \
    const T *xp = (const T *)tensor_ptr(x);                                             \
    const T *wp = w ? (const T *)tensor_ptr(w) : NULL, *bp = b ? (const T *)tensor_ptr(b) : NULL; \
    T *rmp = rm ? (T *)tensor_ptr(rm) : NULL, *rvp = rv ? (T *)tensor_ptr(rv) : NULL;   \
    int64_t m = n * inner;                                                              \
    _Pragma("omp parallel for if (n * c * inner >= CPU_GRAIN)")                         \
    for (int64_t j = 0; j < c; j++) {                                                   \
      double mu, rs;                                                                    \
      if (training) {                                                                   \
        double s = 0, ss = 0;                                                           \
        for (int64_t i = 0; i < n; i++)                                                 \
          for (int64_t k = 0; k < inner; k++) s += xp[(i * c + j) * inner + k];         \
        mu = s / (double)m;                                                             \
        for (int64_t i = 0; i < n; i++)                                                 \
          for (int64_t k = 0; k < inner; k++) {                                         \
            double d = (double)xp[(i * c + j) * inner + k] - mu;                        \
            ss += d * d;                                                                \
          }                                                                             \
        rs = 1.0 / sqrt(ss / (double)m + eps);                                          \
        if (rmp) rmp[j] = (T)((1 - momentum) * (double)rmp[j] + momentum * mu);         \
        if (rvp) rvp[j] = (T)((1 - momentum) * (double)rvp[j] + momentum * ss / (double)(m - 1)); \
      } else {                                                                          \
        mu = rmp[j];                                                                    \
        rs = 1.0 / sqrt((double)rvp[j] + eps);                                          \
      }                                                                                 \
      mp[j] = (T)mu;                                                                    \
      rp[j] = (T)rs;                                                                    \
      double sc = rs * (wp ? (double)wp[j] : 1.0), sh = (bp ? (double)bp[j] : 0.0) - mu * sc; \
      for (int64_t i = 0; i < n; i++)                                                   \
        for (int64_t k = 0; k < inner; k++) {                                           \
          int64_t e = (i * c + j) * inner + k;                                          \
          yp[e] = (T)((double)xp[e] * sc + sh);                                         \
        }                                                                               \
    }                                                                                   \
  }

zorch_status cpu_batch_norm(zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,
                            const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b,
                            zorch_tensor *rm, zorch_tensor *rv, int64_t n, int64_t c,
                            int64_t inner, bool training, double momentum, double eps) {
  CPU_FLOAT_DISPATCH(x->dtype, "batch_norm", BATCH_NORM);
  return ZORCH_OK;
}

/* With xh = (x - mean) * rstd and sums over a channel's m elements:
   gb = sum g, gw = sum g * xh; training: gx = w * rstd * (g - gb / m - xh * gw / m),
   eval (an affine map): gx = w * rstd * g. */
#define BATCH_NORM_BWD(T)                                                               \
  {                                                                                     \
    const T *gp = (const T *)tensor_ptr(g), *xp = (const T *)tensor_ptr(x);             \
    const T *mp = (const T *)tensor_ptr(mean), *rp = (const T *)tensor_ptr(rstd);       \
    const T *wp = w ? (const T *)tensor_ptr(w) : NULL;                                  \
    T *gxp = gx ? (T *)tensor_ptr(gx) : NULL;                                           \
    T *gwp = gw ? (T *)tensor_ptr(gw) : NULL, *gbp = gb ? (T *)tensor_ptr(gb) : NULL;   \
    double m = (double)(n * inner);                                                     \
    _Pragma("omp parallel for if (n * c * inner >= CPU_GRAIN)")                         \
    for (int64_t j = 0; j < c; j++) {                                                   \
      double mu = mp[j], rs = rp[j], sg = 0, sgx = 0;                                   \
      for (int64_t i = 0; i < n; i++)                                                   \
        for (int64_t k = 0; k < inner; k++) {                                           \
          int64_t e = (i * c + j) * inner + k;                                          \
          sg += gp[e];                                                                  \
          sgx += (double)gp[e] * ((double)xp[e] - mu) * rs;                             \
        }                                                                               \
      if (gwp) gwp[j] = (T)sgx;                                                         \
      if (gbp) gbp[j] = (T)sg;                                                          \
      if (!gxp) continue;                                                               \
      double sc = rs * (wp ? (double)wp[j] : 1.0);                                      \
      for (int64_t i = 0; i < n; i++)                                                   \
        for (int64_t k = 0; k < inner; k++) {                                           \
          int64_t e = (i * c + j) * inner + k;                                          \
          double v = gp[e];                                                             \
          if (training) v -= (sg + ((double)xp[e] - mu) * rs * sgx) / m;                \
          gxp[e] = (T)(sc * v);                                                         \
        }                                                                               \
    }                                                                                   \
  }

zorch_status cpu_batch_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                                const zorch_tensor *g, const zorch_tensor *x,
                                const zorch_tensor *mean, const zorch_tensor *rstd,
                                const zorch_tensor *w, int64_t n, int64_t c, int64_t inner,
                                bool training) {
  CPU_FLOAT_DISPATCH(x->dtype, "batch_norm backward", BATCH_NORM_BWD);
  return ZORCH_OK;
}

/* RMSNorm rows (include/zorch_ops.h): sums of squares in double, one row per
   iteration. With r = rstd and the row's s = sum_k g_k w_k x_k,
   gx_j = r w_j g_j - x_j r^3 s / cols, and gw_j sums g_j x_j r over the rows. */
#define RMS_NORM(T)                                                                     \
  {                                                                                     \
    T *yp = (T *)tensor_ptr(y), *rp = (T *)tensor_ptr(rstd);                            \
    const T *xp = (const T *)tensor_ptr(x), *wp = w ? (const T *)tensor_ptr(w) : NULL;  \
    _Pragma("omp parallel for if (rows * cols >= CPU_GRAIN)")                           \
    for (int64_t i = 0; i < rows; i++) {                                                \
      const T *xr = xp + i * cols;                                                      \
      double ss = 0;                                                                    \
      for (int64_t j = 0; j < cols; j++) ss += (double)xr[j] * (double)xr[j];           \
      T r = (T)(1.0 / sqrt(ss / (double)cols + eps));                                   \
      rp[i] = r;                                                                        \
      for (int64_t j = 0; j < cols; j++) yp[i * cols + j] = wp ? xr[j] * r * wp[j] : xr[j] * r; \
    }                                                                                   \
  }

zorch_status cpu_rms_norm(zorch_tensor *y, zorch_tensor *rstd, const zorch_tensor *x,
                          const zorch_tensor *w, int64_t rows, int64_t cols, double eps) {
  CPU_FLOAT_DISPATCH(x->dtype, "rms_norm", RMS_NORM);
  return ZORCH_OK;
}

#define RMS_NORM_BWD(T)                                                                 \
  {                                                                                     \
    T *gxp = (T *)tensor_ptr(gx);                                                       \
    const T *gp = (const T *)tensor_ptr(g), *xp = (const T *)tensor_ptr(x);             \
    const T *rp = (const T *)tensor_ptr(rstd), *wp = w ? (const T *)tensor_ptr(w) : NULL; \
    _Pragma("omp parallel for if (rows * cols >= CPU_GRAIN)")                           \
    for (int64_t i = 0; i < rows; i++) {                                                \
      const T *gr = gp + i * cols, *xr = xp + i * cols;                                 \
      double r = (double)rp[i], s = 0;                                                  \
      for (int64_t j = 0; j < cols; j++) s += (double)gr[j] * (wp ? (double)wp[j] : 1.0) * (double)xr[j]; \
      double k = r * r * r * s / (double)cols;                                          \
      for (int64_t j = 0; j < cols; j++)                                                \
        gxp[i * cols + j] = (T)(r * (wp ? (double)wp[j] : 1.0) * (double)gr[j] - (double)xr[j] * k); \
    }                                                                                   \
    if (gw) { /* rows in order per column: the same bits on every thread count */      \
      T *gwp = (T *)tensor_ptr(gw);                                                     \
      _Pragma("omp parallel for if (rows * cols >= CPU_GRAIN)")                         \
      for (int64_t j = 0; j < cols; j++) {                                              \
        double a = 0;                                                                   \
        for (int64_t i = 0; i < rows; i++)                                              \
          a += (double)gp[i * cols + j] * (double)xp[i * cols + j] * (double)rp[i];     \
        gwp[j] = (T)a;                                                                  \
      }                                                                                 \
    }                                                                                   \
  }

zorch_status cpu_rms_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *g,
                              const zorch_tensor *x, const zorch_tensor *w,
                              const zorch_tensor *rstd, int64_t rows, int64_t cols) {
  CPU_FLOAT_DISPATCH(x->dtype, "rms_norm backward", RMS_NORM_BWD);
  return ZORCH_OK;
}
