/* conv.c: CPU kernels of convolution (im2col and its adjoint, for the GEMM in
   ops/conv.c) and of 2-d pooling. Parallel over rows of the column matrix or
   over image planes, so no two threads write one element. */
#include <math.h>
#include <string.h>

#include "../math.h"
#include "cpu.h"
#include "kernels.h"

/* The outputs ox in [lo, hi) whose input column ix0 + ox * sw lies in the image. */
static inline void conv_x_range(int64_t ix0, const conv_geom *g, int64_t *lo, int64_t *hi) {
  int64_t l = ix0 >= 0 ? 0 : (-ix0 + g->sw - 1) / g->sw;
  int64_t h = g->w - ix0 <= 0 ? 0 : (g->w - ix0 + g->sw - 1) / g->sw;
  if (h > g->ow) h = g->ow;
  *lo = l < h ? l : h;
  *hi = h;
}

/* Row r = (ci, ki, kj) of the column matrix for images n0 .. n0 + nb - 1. */
#define IM2COL(T)                                                                          \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x);                                                \
    T *cp = (T *)tensor_ptr(col);                                                          \
    int64_t L = g->oh * g->ow, rows = g->c * g->kh * g->kw;                                \
    _Pragma("omp parallel for collapse(2) if (rows * nb * L >= CPU_GRAIN)")                \
    for (int64_t r = 0; r < rows; r++)                                                     \
      for (int64_t b = 0; b < nb; b++) {                                                   \
        int64_t kj = r % g->kw, ki = r / g->kw % g->kh, ci = r / (g->kw * g->kh);          \
        const T *plane = xp + ((n0 + b) * g->c + ci) * g->h * g->w;                        \
        T *dst = cp + (r * nb + b) * L;                                                    \
        for (int64_t oy = 0; oy < g->oh; oy++) {                                           \
          int64_t iy = oy * g->sh - g->ph + ki * g->dh;                                    \
          T *d = dst + oy * g->ow;                                                         \
          if (iy < 0 || iy >= g->h) {                                                      \
            memset(d, 0, sizeof(T) * (size_t)g->ow);                                       \
            continue;                                                                      \
          }                                                                                \
          const T *srow = plane + iy * g->w;                                               \
          int64_t ix0 = kj * g->dw - g->pw, lo, hi;                                        \
          conv_x_range(ix0, g, &lo, &hi);                                                  \
          for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0;                                   \
          if (g->sw == 1)                                                                  \
            memcpy(d + lo, srow + ix0 + lo, sizeof(T) * (size_t)(hi - lo));                \
          else                                                                             \
            for (int64_t ox = lo; ox < hi; ox++) d[ox] = srow[ix0 + ox * g->sw];           \
          for (int64_t ox = hi; ox < g->ow; ox++) d[ox] = 0;                               \
        }                                                                                  \
      }                                                                                    \
  }

zorch_status cpu_im2col(zorch_tensor *col, const zorch_tensor *x, const conv_geom *g, int64_t n0,
                        int64_t nb) {
  switch (x->dtype) {
    case ZORCH_F32: IM2COL(float) return ZORCH_OK;
    case ZORCH_F64: IM2COL(double) return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "conv2d: no CPU kernel for dtype %s",
                            zorch_dtype_name(x->dtype));
  }
}

/* One thread per (image, channel) plane: the plane is cleared, then every
   column entry that read one of its pixels is added back, in a fixed order. */
#define COL2IM(T)                                                                          \
  {                                                                                        \
    T *gp = (T *)tensor_ptr(gx);                                                           \
    const T *cp = (const T *)tensor_ptr(col);                                              \
    int64_t L = g->oh * g->ow, hw = g->h * g->w;                                           \
    _Pragma("omp parallel for collapse(2) if (nb * g->c * g->kh * g->kw * L >= CPU_GRAIN)") \
    for (int64_t b = 0; b < nb; b++)                                                       \
      for (int64_t ci = 0; ci < g->c; ci++) {                                              \
        T *plane = gp + ((n0 + b) * g->c + ci) * hw;                                       \
        memset(plane, 0, sizeof(T) * (size_t)hw);                                          \
        for (int64_t ki = 0; ki < g->kh; ki++)                                             \
          for (int64_t kj = 0; kj < g->kw; kj++) {                                         \
            int64_t r = (ci * g->kh + ki) * g->kw + kj;                                    \
            const T *src = cp + (r * nb + b) * L;                                          \
            for (int64_t oy = 0; oy < g->oh; oy++) {                                       \
              int64_t iy = oy * g->sh - g->ph + ki * g->dh;                                \
              if (iy < 0 || iy >= g->h) continue;                                          \
              T *drow = plane + iy * g->w;                                                 \
              const T *s = src + oy * g->ow;                                               \
              int64_t ix0 = kj * g->dw - g->pw, lo, hi;                                    \
              conv_x_range(ix0, g, &lo, &hi);                                              \
              for (int64_t ox = lo; ox < hi; ox++) drow[ix0 + ox * g->sw] += s[ox];        \
            }                                                                              \
          }                                                                                \
      }                                                                                    \
  }

zorch_status cpu_col2im(zorch_tensor *gx, const zorch_tensor *col, const conv_geom *g, int64_t n0,
                        int64_t nb) {
  switch (gx->dtype) {
    case ZORCH_F32: COL2IM(float) return ZORCH_OK;
    case ZORCH_F64: COL2IM(double) return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "conv2d: no CPU backward for dtype %s",
                            zorch_dtype_name(gx->dtype));
  }
}

/* Max over the window's inputs inside the image (the padding never wins);
   the first NaN wins, else the first of equal maxima. */
#define MAXPOOL(T)                                                                         \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x);                                                \
    T *op = (T *)tensor_ptr(out);                                                          \
    int64_t *ip = (int64_t *)tensor_ptr(idx);                                              \
    _Pragma("omp parallel for if (g->n * g->oh * g->ow * g->kh * g->kw >= CPU_GRAIN)")     \
    for (int64_t p = 0; p < g->n; p++) {                                                   \
      const T *plane = xp + p * g->h * g->w;                                               \
      for (int64_t oy = 0; oy < g->oh; oy++)                                               \
        for (int64_t ox = 0; ox < g->ow; ox++) {                                           \
          int64_t y0 = oy * g->sh - g->ph, x0 = ox * g->sw - g->pw, best = -1;             \
          T m = (T)-INFINITY;                                                              \
          for (int64_t ki = 0; ki < g->kh; ki++) {                                         \
            int64_t iy = y0 + ki * g->dh;                                                  \
            if (iy < 0 || iy >= g->h) continue;                                            \
            for (int64_t kj = 0; kj < g->kw; kj++) {                                       \
              int64_t ix = x0 + kj * g->dw;                                                \
              if (ix < 0 || ix >= g->w) continue;                                          \
              T v = plane[iy * g->w + ix];                                                 \
              if (best < 0 || v > m || isnan(v)) {                                         \
                m = v;                                                                     \
                best = iy * g->w + ix;                                                     \
                if (isnan(v)) goto found_##T;                                              \
              }                                                                            \
            }                                                                              \
          }                                                                                \
        found_##T:                                                                         \
          op[(p * g->oh + oy) * g->ow + ox] = m;                                           \
          ip[(p * g->oh + oy) * g->ow + ox] = best < 0 ? 0 : best;                         \
        }                                                                                  \
    }                                                                                      \
  }

#define AVGPOOL(T)                                                                         \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x);                                                \
    T *op = (T *)tensor_ptr(out);                                                          \
    _Pragma("omp parallel for if (g->n * g->oh * g->ow * g->kh * g->kw >= CPU_GRAIN)")     \
    for (int64_t p = 0; p < g->n; p++) {                                                   \
      const T *plane = xp + p * g->h * g->w;                                               \
      for (int64_t oy = 0; oy < g->oh; oy++) {                                             \
        int64_t ylo, yhi, xlo, xhi;                                                        \
        int64_t cy = zm_pool_window(ad, inc, oy, g->h, g->oh, g->kh, g->sh, g->ph, &ylo, &yhi); \
        for (int64_t ox = 0; ox < g->ow; ox++) {                                           \
          int64_t cx = zm_pool_window(ad, inc, ox, g->w, g->ow, g->kw, g->sw, g->pw, &xlo, &xhi); \
          double s = 0;                                                                    \
          for (int64_t iy = ylo; iy < yhi; iy++)                                           \
            for (int64_t ix = xlo; ix < xhi; ix++) s += (double)plane[iy * g->w + ix];     \
          int64_t cnt = cy * cx;                                                           \
          op[(p * g->oh + oy) * g->ow + ox] = (T)(cnt > 0 ? s / (double)cnt : 0);          \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

zorch_status cpu_pool2d(pool_kind k, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *x,
                        const conv_geom *g) {
  int ad = k == POOL_ADAPTIVE_AVG, inc = k == POOL_AVG;
  (void)ad, (void)inc;
  switch (x->dtype) {
    case ZORCH_F32:
      if (k == POOL_MAX) MAXPOOL(float) else AVGPOOL(float)
      return ZORCH_OK;
    case ZORCH_F64:
      if (k == POOL_MAX) MAXPOOL(double) else AVGPOOL(double)
      return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "pool2d: no CPU kernel for dtype %s",
                            zorch_dtype_name(x->dtype));
  }
}

/* Per plane (one thread each): max pooling adds each gradient at its argmax;
   the averages spread each gradient over the window's inputs. */
#define POOL_BWD(T)                                                                        \
  {                                                                                        \
    T *gp = (T *)tensor_ptr(gx);                                                           \
    const T *gop = (const T *)tensor_ptr(gout);                                            \
    const int64_t *ip = idx ? (const int64_t *)tensor_ptr(idx) : NULL;                     \
    int64_t hw = g->h * g->w, ohw = g->oh * g->ow;                                         \
    _Pragma("omp parallel for if (g->n * ohw * g->kh * g->kw >= CPU_GRAIN)")               \
    for (int64_t p = 0; p < g->n; p++) {                                                   \
      T *plane = gp + p * hw;                                                              \
      const T *go = gop + p * ohw;                                                         \
      memset(plane, 0, sizeof(T) * (size_t)hw);                                            \
      if (k == POOL_MAX) {                                                                 \
        for (int64_t o = 0; o < ohw; o++) plane[ip[p * ohw + o]] += go[o];                 \
        continue;                                                                          \
      }                                                                                    \
      for (int64_t oy = 0; oy < g->oh; oy++) {                                             \
        int64_t ylo, yhi, xlo, xhi;                                                        \
        int64_t cy = zm_pool_window(ad, inc, oy, g->h, g->oh, g->kh, g->sh, g->ph, &ylo, &yhi); \
        for (int64_t ox = 0; ox < g->ow; ox++) {                                           \
          int64_t cx = zm_pool_window(ad, inc, ox, g->w, g->ow, g->kw, g->sw, g->pw, &xlo, &xhi); \
          if (cy * cx <= 0) continue;                                                      \
          T v = (T)((double)go[oy * g->ow + ox] / (double)(cy * cx));                      \
          for (int64_t iy = ylo; iy < yhi; iy++)                                           \
            for (int64_t ix = xlo; ix < xhi; ix++) plane[iy * g->w + ix] += v;             \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

zorch_status cpu_pool2d_bwd(pool_kind k, zorch_tensor *gx, const zorch_tensor *gout,
                            const zorch_tensor *idx, const conv_geom *g) {
  int ad = k == POOL_ADAPTIVE_AVG, inc = k == POOL_AVG;
  switch (gx->dtype) {
    case ZORCH_F32: POOL_BWD(float) return ZORCH_OK;
    case ZORCH_F64: POOL_BWD(double) return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "pool2d: no CPU backward for dtype %s",
                            zorch_dtype_name(gx->dtype));
  }
}
