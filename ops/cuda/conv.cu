// conv.cu: im2col and its adjoint for the convolution GEMMs (ops/def/conv.c), and
// 2-d pooling. The backward kernels gather (one thread per input pixel) and add
// in the CPU kernels' order, so there are no atomics and the sums repeat.
#include "cuda.h"

// One thread per column entry: row (ci, ki, kj), column (image, oy, ox).
template <typename T>
__global__ void k_im2col(T *col, const T *x, conv_geom g, int64_t n0, int64_t nb) {
  int64_t L = g.oh * g.ow, total = g.c * g.kh * g.kw * nb * L;
  FOR(j, total) {
    int64_t ox = j % g.ow, oy = j / g.ow % g.oh, b = j / L % nb, r = j / (L * nb);
    int64_t kj = r % g.kw, ki = r / g.kw % g.kh, ci = r / (g.kw * g.kh);
    int64_t iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
    col[j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? x[(((n0 + b) * g.c + ci) * g.h + iy) * g.w + ix] : (T)0;
  }
}

zorch_status cuda_im2col(zorch_tensor *col, const zorch_tensor *x, const conv_geom *g, int64_t n0, int64_t nb) {
  int64_t total = g->c * g->kh * g->kw * nb * g->oh * g->ow;
  if (total == 0) return ZORCH_OK;
  int dev = cu_dev(x);
  CU_REAL(x->dtype, "conv2d",
          (CU_LAUNCH(ON(total, dev), k_im2col<T>)((T *)tensor_ptr(col), (const T *)tensor_ptr(x), *g, n0, nb)));
}

// One thread per pixel of images n0 .. n0 + nb - 1: the column entries that read
// it, kernel position by kernel position (one window position each), as the CPU adds them.
template <typename T>
__global__ void k_col2im(T *gx, const T *col, conv_geom g, int64_t n0, int64_t nb) {
  int64_t L = g.oh * g.ow, total = nb * g.c * g.h * g.w;
  FOR(j, total) {
    int64_t ix = j % g.w, iy = j / g.w % g.h, ci = j / (g.w * g.h) % g.c, b = j / (g.w * g.h * g.c);
    T s = 0;
    for (int64_t ki = 0; ki < g.kh; ki++) {
      int64_t ty = iy + g.ph - ki * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      int64_t oy = ty / g.sh;
      if (oy >= g.oh) continue;
      for (int64_t kj = 0; kj < g.kw; kj++) {
        int64_t tx = ix + g.pw - kj * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        int64_t ox = tx / g.sw;
        if (ox >= g.ow) continue;
        int64_t r = (ci * g.kh + ki) * g.kw + kj;
        s += col[(r * nb + b) * L + oy * g.ow + ox];
      }
    }
    gx[(n0 * g.c) * g.h * g.w + j] = s;
  }
}

zorch_status cuda_col2im(zorch_tensor *gx, const zorch_tensor *col, const conv_geom *g, int64_t n0, int64_t nb) {
  int64_t total = nb * g->c * g->h * g->w;
  if (total == 0) return ZORCH_OK;
  int dev = cu_dev(gx);
  CU_REAL(gx->dtype, "conv2d",
          (CU_LAUNCH(ON(total, dev), k_col2im<T>)((T *)tensor_ptr(gx), (const T *)tensor_ptr(col), *g, n0, nb)));
}

// One thread per output: the CPU's loops (the first NaN wins, else the first
// maximum; averages sum in double).
template <typename T>
__global__ void k_pool(int kind, T *out, int64_t *idx, const T *x, conv_geom g) {
  int64_t total = g.n * g.oh * g.ow;
  int ad = kind == POOL_ADAPTIVE_AVG, inc = kind == POOL_AVG;
  FOR(j, total) {
    int64_t ox = j % g.ow, oy = j / g.ow % g.oh, p = j / (g.ow * g.oh);
    const T *plane = x + p * g.h * g.w;
    if (kind == POOL_MAX) {
      int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw, best = -1;
      T m = (T)-INFINITY;
      bool nan = false;
      for (int64_t ki = 0; ki < g.kh && !nan; ki++) {
        int64_t iy = y0 + ki * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kj = 0; kj < g.kw && !nan; kj++) {
          int64_t ix = x0 + kj * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          T v = plane[iy * g.w + ix];
          if (best < 0 || v > m || v != v) {
            m = v;
            best = iy * g.w + ix;
            nan = v != v;
          }
        }
      }
      out[j] = m;
      idx[j] = best < 0 ? 0 : best;
    } else {
      int64_t ylo, yhi, xlo, xhi;
      int64_t cy = zm_pool_window(ad, inc, oy, g.h, g.oh, g.kh, g.sh, g.ph, &ylo, &yhi);
      int64_t cx = zm_pool_window(ad, inc, ox, g.w, g.ow, g.kw, g.sw, g.pw, &xlo, &xhi);
      double s = 0;
      for (int64_t iy = ylo; iy < yhi; iy++)
        for (int64_t ix = xlo; ix < xhi; ix++) s += (double)plane[iy * g.w + ix];
      out[j] = (T)(cy * cx > 0 ? s / (double)(cy * cx) : 0);
    }
  }
}

zorch_status cuda_pool2d(pool_kind k, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *x,
                         const conv_geom *g) {
  int64_t total = g->n * g->oh * g->ow;
  if (total == 0) return ZORCH_OK;
  int dev = cu_dev(x);
  int64_t *ip = idx ? (int64_t *)tensor_ptr(idx) : NULL;
  CU_REAL(x->dtype, "pool2d",
          (CU_LAUNCH(ON(total, dev), k_pool<T>)((int)k, (T *)tensor_ptr(out), ip, (const T *)tensor_ptr(x), *g)));
}

// One thread per input pixel: the outputs whose window holds it, in row-major
// output order (the CPU's order of addition).
template <typename T>
__global__ void k_pool_bwd(int kind, T *gx, const T *go, const int64_t *idx, conv_geom g) {
  int64_t total = g.n * g.h * g.w, ohw = g.oh * g.ow;
  int ad = kind == POOL_ADAPTIVE_AVG, inc = kind == POOL_AVG;
  FOR(j, total) {
    int64_t ix = j % g.w, iy = j / g.w % g.h, p = j / (g.w * g.h);
    const T *gp = go + p * ohw;
    T s = 0;
    if (kind == POOL_MAX) {
      const int64_t *ipl = idx + p * ohw;
      int64_t here = iy * g.w + ix;
      for (int64_t ki = g.kh - 1; ki >= 0; ki--) {  // oy ascending
        int64_t ty = iy + g.ph - ki * g.dh;
        if (ty < 0 || ty % g.sh || ty / g.sh >= g.oh) continue;
        for (int64_t kj = g.kw - 1; kj >= 0; kj--) {
          int64_t tx = ix + g.pw - kj * g.dw;
          if (tx < 0 || tx % g.sw || tx / g.sw >= g.ow) continue;
          int64_t o = ty / g.sh * g.ow + tx / g.sw;
          if (ipl[o] == here) s += gp[o];
        }
      }
    } else {
      int64_t y0, y1, x0, x1;
      if (ad) {
        y0 = iy * g.oh / g.h, y1 = (iy + 1) * g.oh / g.h;
        x0 = ix * g.ow / g.w, x1 = (ix + 1) * g.ow / g.w;
      } else {
        int64_t a = iy + g.ph - g.kh + 1, b = ix + g.pw - g.kw + 1;
        y0 = a > 0 ? (a + g.sh - 1) / g.sh : 0, y1 = (iy + g.ph) / g.sh;
        x0 = b > 0 ? (b + g.sw - 1) / g.sw : 0, x1 = (ix + g.pw) / g.sw;
      }
      if (y1 > g.oh - 1) y1 = g.oh - 1;
      if (x1 > g.ow - 1) x1 = g.ow - 1;
      for (int64_t oy = y0; oy <= y1; oy++) {
        int64_t ylo, yhi, xlo, xhi;
        int64_t cy = zm_pool_window(ad, inc, oy, g.h, g.oh, g.kh, g.sh, g.ph, &ylo, &yhi);
        if (iy < ylo || iy >= yhi) continue;
        for (int64_t ox = x0; ox <= x1; ox++) {
          int64_t cx = zm_pool_window(ad, inc, ox, g.w, g.ow, g.kw, g.sw, g.pw, &xlo, &xhi);
          if (ix < xlo || ix >= xhi || cy * cx <= 0) continue;
          s += (T)((double)gp[oy * g.ow + ox] / (double)(cy * cx));
        }
      }
    }
    gx[j] = s;
  }
}

zorch_status cuda_pool2d_bwd(pool_kind k, zorch_tensor *gx, const zorch_tensor *gout, const zorch_tensor *idx,
                             const conv_geom *g) {
  int64_t total = g->n * g->h * g->w;
  if (total == 0) return ZORCH_OK;
  int dev = cu_dev(gx);
  const int64_t *ip = idx ? (const int64_t *)tensor_ptr(idx) : NULL;
  CU_REAL(gx->dtype, "pool2d",
          (CU_LAUNCH(ON(total, dev), k_pool_bwd<T>)((int)k, (T *)tensor_ptr(gx), (const T *)tensor_ptr(gout), ip, *g)));
}
