/* conv.c: CPU kernels of convolution (im2col and its adjoint, for the GEMMs in
   ops/def/conv.c, and the whole convolution with one group, image by image) and of
   2-d pooling. Parallel over rows of the column matrix, blocks of images or
   image planes, so no two threads write one element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/math.h"
#include "cpu.h"
#include "kernels.h"
#include "vec512.h"

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
  static void im2col_##T(T *cp, const T *xp, const conv_geom *g, int64_t n0, int64_t nb) { \
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

IM2COL(float)
IM2COL(double)

zorch_status cpu_im2col(zorch_tensor *col, const zorch_tensor *x, const conv_geom *g, int64_t n0,
                        int64_t nb) {
#define IM2COL_RUN(T) im2col_##T((T *)tensor_ptr(col), (const T *)tensor_ptr(x), g, n0, nb);
  CPU_FLOAT_DISPATCH(x->dtype, "conv2d", IM2COL_RUN);
#undef IM2COL_RUN
  return ZORCH_OK;
}

/* One thread per (image, channel) plane: the plane is cleared, then every
   column entry that read one of its pixels is added back, in a fixed order. */
#define COL2IM(T)                                                                          \
  static void col2im_##T(T *gp, const T *cp, const conv_geom *g, int64_t n0, int64_t nb) { \
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

COL2IM(float)
COL2IM(double)

zorch_status cpu_col2im(zorch_tensor *gx, const zorch_tensor *col, const conv_geom *g, int64_t n0,
                        int64_t nb) {
#define COL2IM_RUN(T) col2im_##T((T *)tensor_ptr(gx), (const T *)tensor_ptr(col), g, n0, nb);
  CPU_FLOAT_DISPATCH(gx->dtype, "conv2d backward", COL2IM_RUN);
#undef COL2IM_RUN
  return ZORCH_OK;
}

/* ---- the whole convolution (groups = 1), image by image ----------------------------------
   Blocks of CONV_BLOCK images run in parallel, each image as im2col into a
   buffer that stays in cache and one GEMM straight into (or from) its NCHW
   planes; BLAS runs single-threaded inside the parallel loop. The weight
   gradient is summed per block, then over blocks in order, so it does not
   depend on the thread count. */
#define CONV_BLOCK 8

static void conv_gemm(zorch_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                      int64_t ldc) {
  gemm_args ga = {.dt = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                  .ldc = ldc, .alpha = 1.0, .beta = beta, .a = a, .b = b, .c = c};
  cpu_gemm(&ga); /* float32 and float64 only, which the callers check */
}

#define CONV_FWD(T)                                                                        \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x), *wp = (const T *)tensor_ptr(w);                \
    const T *bp = b ? (const T *)tensor_ptr(b) : NULL;                                     \
    T *op = (T *)tensor_ptr(out);                                                          \
    _Pragma("omp parallel for schedule(dynamic) if (nblk > 1 && g->n * O * K * L >= CPU_GRAIN)") \
    for (int64_t blk = 0; blk < nblk; blk++) {                                             \
      T *col = cpu_scratch(sizeof(T) * (size_t)(K * L));                                   \
      if (!col) {                                                                          \
        failed = 1;                                                                        \
        continue;                                                                          \
      }                                                                                    \
      int64_t end = (blk + 1) * CONV_BLOCK < g->n ? (blk + 1) * CONV_BLOCK : g->n;         \
      for (int64_t n = blk * CONV_BLOCK; n < end; n++) {                                   \
        T *on = op + n * O * L;                                                            \
        im2col_##T(col, xp, g, n, 1);                                                      \
        conv_gemm(dt, false, false, O, L, K, wp, K, col, L, 0.0, on, L);                   \
        if (bp) /* after the products (still in cache): a GEMM that accumulates runs on BLAS */ \
          for (int64_t o = 0; o < O; o++)                                                  \
            for (int64_t l = 0; l < L; l++) on[o * L + l] += bp[o];                        \
      }                                                                                    \
      cpu_scratch_free(col);                                                               \
    }                                                                                      \
  }

/* The column buffer's K * L elements (and the weight gradient's nblk partial
   sums of O * K) fit in memory sizes; otherwise no allocation could hold them. */
static zorch_status conv_sizes_fit(int64_t K, int64_t L, int64_t O, int64_t nblk) {
  int64_t kl, ok_, parts;
  if (__builtin_mul_overflow(K, L, &kl) || __builtin_mul_overflow(kl, (int64_t)sizeof(double), &kl) ||
      __builtin_mul_overflow(O, K, &ok_) || __builtin_mul_overflow(ok_, nblk, &parts) ||
      __builtin_mul_overflow(parts, (int64_t)sizeof(double), &parts))
    return err_set(ZORCH_ERR_OOM, "conv2d: the column buffer of %lld x %lld elements is too large",
                   (long long)K, (long long)L);
  return ZORCH_OK;
}

zorch_status cpu_conv2d(zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *w,
                        const zorch_tensor *b, const conv_geom *g) {
  int64_t O = w->shape[0], K = g->c * g->kh * g->kw, L = g->oh * g->ow;
  int64_t nblk = (g->n + CONV_BLOCK - 1) / CONV_BLOCK;
  zorch_dtype dt = x->dtype;
  int failed = 0;
  if (conv_sizes_fit(K, L, O, 1)) return zorch_last_status();
  CPU_FLOAT_DISPATCH(dt, "conv2d", CONV_FWD);
  if (failed) return err_set(ZORCH_ERR_OOM, "conv2d: out of memory for the column buffer");
  return ZORCH_OK;
}

/* Per image: gw_blk += gout_n col_n^T; gcol = w^T gout_n, folded back by col2im. */
#define CONV_BWD(T)                                                                        \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x), *wp = (const T *)tensor_ptr(w);                \
    const T *gp = (const T *)tensor_ptr(gout);                                             \
    T *gxp = gx ? (T *)tensor_ptr(gx) : NULL, *part = (T *)parts;                          \
    _Pragma("omp parallel for schedule(dynamic) if (nblk > 1 && g->n * O * K * L >= CPU_GRAIN)") \
    for (int64_t blk = 0; blk < nblk; blk++) {                                             \
      T *col = cpu_scratch(sizeof(T) * (size_t)(K * L));                                   \
      if (!col) {                                                                          \
        failed = 1;                                                                        \
        continue;                                                                          \
      }                                                                                    \
      int64_t end = (blk + 1) * CONV_BLOCK < g->n ? (blk + 1) * CONV_BLOCK : g->n;         \
      for (int64_t n = blk * CONV_BLOCK; n < end; n++) {                                   \
        const T *gn = gp + n * O * L;                                                      \
        if (part) {                                                                        \
          im2col_##T(col, xp, g, n, 1);                                                    \
          conv_gemm(dt, false, true, O, K, L, gn, L, col, L, n > blk * CONV_BLOCK ? 1.0 : 0.0, \
                    part + blk * O * K, K);                                                \
        }                                                                                  \
        if (gxp) {                                                                         \
          conv_gemm(dt, true, false, K, L, O, wp, K, gn, L, 0.0, col, L);                  \
          col2im_##T(gxp, col, g, n, 1);                                                   \
        }                                                                                  \
      }                                                                                    \
      cpu_scratch_free(col);                                                               \
    }                                                                                      \
    if (part) {                                                                            \
      T *gwp = (T *)tensor_ptr(gw);                                                        \
      for (int64_t i = 0; i < O * K; i++) {                                                \
        T acc = 0;                                                                         \
        for (int64_t k = 0; k < nblk; k++) acc += part[k * O * K + i];                     \
        gwp[i] = acc;                                                                      \
      }                                                                                    \
    }                                                                                      \
  }

zorch_status cpu_conv2d_bwd(zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *gout,
                            const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g) {
  int64_t O = w->shape[0], K = g->c * g->kh * g->kw, L = g->oh * g->ow;
  int64_t nblk = (g->n + CONV_BLOCK - 1) / CONV_BLOCK;
  zorch_dtype dt = x->dtype;
  if (dt != ZORCH_F32 && dt != ZORCH_F64)
    return err_set(ZORCH_ERR_DTYPE, "conv2d: no CPU backward for dtype %s", zorch_dtype_name(dt));
  if (conv_sizes_fit(K, L, O, nblk)) return zorch_last_status();
  void *parts = NULL;
  if (gw && nblk > 0 && !(parts = calloc((size_t)(nblk * O * K), dtype_sizes[dt])))
    return err_set(ZORCH_ERR_OOM, "conv2d: out of memory for the weight gradient's partial sums");
  int failed = 0;
  if (dt == ZORCH_F32) CONV_BWD(float) else CONV_BWD(double)
  free(parts);
  if (failed) return err_set(ZORCH_ERR_OOM, "conv2d: out of memory for the column buffer");
  return ZORCH_OK;
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

/* Max pooling 2x2, stride 2, no padding, every window inside the image (the
   CNNs' usual pooling): the four inputs compared in the general loop's order,
   without its bounds checks and window loops (several times faster). */
#define MAXPOOL2_PICK(v, at)                                                               \
  if (!isnan(m) && ((v) > m || isnan(v))) m = (v), best = (at);
#define MAXPOOL2(T)                                                                        \
  {                                                                                        \
    const T *xp = (const T *)tensor_ptr(x);                                                \
    T *op = (T *)tensor_ptr(out);                                                          \
    int64_t *ip = (int64_t *)tensor_ptr(idx);                                              \
    int64_t w = g->w, ohw = g->oh * g->ow;                                                 \
    bool vec = maxpool2_vec_ok(g);                                                         \
    _Pragma("omp parallel for if (g->n * ohw * 4 >= CPU_GRAIN)")                           \
    for (int64_t p = 0; p < g->n; p++) {                                                   \
      const T *plane = xp + p * g->h * w;                                                  \
      T *o = op + p * ohw;                                                                 \
      int64_t *oi = ip + p * ohw;                                                          \
      for (int64_t oy = 0; oy < g->oh; oy++) {                                             \
        const T *r0 = plane + 2 * oy * w, *r1 = r0 + w;                                    \
        int64_t ox0 = vec ? maxpool2_row_##T(r0, r1, o + oy * g->ow, oi + oy * g->ow, g->ow, 2 * oy * w, w) : 0; \
        for (int64_t ox = ox0; ox < g->ow; ox++) {                                         \
          int64_t at = 2 * oy * w + 2 * ox, best = at;                                     \
          T m = r0[2 * ox];                                                                \
          MAXPOOL2_PICK(r0[2 * ox + 1], at + 1)                                            \
          MAXPOOL2_PICK(r1[2 * ox], at + w)                                                \
          MAXPOOL2_PICK(r1[2 * ox + 1], at + w + 1)                                        \
          o[oy * g->ow + ox] = m;                                                          \
          oi[oy * g->ow + ox] = best;                                                      \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

/* The AVX-512 rows below build indices in 32 bits: planes under 2^31 elements. */
static bool maxpool2_vec_ok(const conv_geom *g) {
#ifdef ZV512
  return zv512_ok() && g->h * g->w < INT32_MAX;
#else
  (void)g;
  return false;
#endif
}

/* The same picks on 16 outputs at a time (AVX-512): the even and odd columns
   of both rows split by two-source permutes, each lane choosing as
   MAXPOOL2_PICK does, in the same order, without the branches that random
   data mispredicts. Returns the outputs done (the scalar loop does the rest;
   the stubs below do none). */
#ifdef ZV512
ZV512_TARGET static int64_t maxpool2_row_float(const float *r0, const float *r1, float *o, int64_t *oi, int64_t ow,
                                               int64_t at, int64_t w) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i off[3] = {_mm512_set1_epi32(1), _mm512_set1_epi32((int)w), _mm512_set1_epi32((int)w + 1)};
  for (int64_t ox = 0; ox < ow; ox += 16) {
    int64_t n = ow - ox < 16 ? ow - ox : 16; /* a short row (MNIST's 14 and 7) is one masked step */
    __mmask16 mo = zv512_mask(n), ma = zv512_mask(2 * n), mb = zv512_mask(2 * n - 16 > 0 ? 2 * n - 16 : 0);
    __m512 x0 = _mm512_maskz_loadu_ps(ma, r0 + 2 * ox), x1 = _mm512_maskz_loadu_ps(mb, r0 + 2 * ox + 16);
    __m512 y0 = _mm512_maskz_loadu_ps(ma, r1 + 2 * ox), y1 = _mm512_maskz_loadu_ps(mb, r1 + 2 * ox + 16);
    __m512 v[3] = {_mm512_permutex2var_ps(x0, odd, x1), _mm512_permutex2var_ps(y0, even, y1),
                   _mm512_permutex2var_ps(y0, odd, y1)};
    __m512 m = _mm512_permutex2var_ps(x0, even, x1);
    __m512i k = even; /* each lane's offset from at + 2 * ox */
    for (int j = 0; j < 3; j++) {
      __mmask16 take = _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q) &
                       (_mm512_cmp_ps_mask(v[j], m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v[j], v[j], _CMP_UNORD_Q));
      m = _mm512_mask_mov_ps(m, take, v[j]);
      k = _mm512_mask_add_epi32(k, take, even, off[j]);
    }
    _mm512_mask_storeu_ps(o + ox, mo, m);
    __m512i base = _mm512_set1_epi64(at + 2 * ox);
    _mm512_mask_storeu_epi64(oi + ox, (__mmask8)mo,
                             _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(k))));
    _mm512_mask_storeu_epi64(oi + ox + 8, (__mmask8)(mo >> 8),
                             _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(k, 1))));
  }
  return ow;
}
#else
static int64_t maxpool2_row_float(const float *r0, const float *r1, float *o, int64_t *oi, int64_t ow, int64_t at,
                                  int64_t w) {
  (void)r0, (void)r1, (void)o, (void)oi, (void)ow, (void)at, (void)w;
  return 0;
}
#endif
static int64_t maxpool2_row_double(const double *r0, const double *r1, double *o, int64_t *oi, int64_t ow,
                                   int64_t at, int64_t w) {
  (void)r0, (void)r1, (void)o, (void)oi, (void)ow, (void)at, (void)w;
  return 0;
}

static bool maxpool2_fits(const conv_geom *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 &&
         g->dw == 1 && 2 * g->oh <= g->h && 2 * g->ow <= g->w;
}

zorch_status cpu_pool2d(pool_kind k, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *x,
                        const conv_geom *g) {
  int ad = k == POOL_ADAPTIVE_AVG, inc = k == POOL_AVG;
  (void)ad, (void)inc;
  bool fast = k == POOL_MAX && maxpool2_fits(g);
#define POOL_FWD(T) if (fast) MAXPOOL2(T) else if (k == POOL_MAX) MAXPOOL(T) else AVGPOOL(T)
  CPU_FLOAT_DISPATCH(x->dtype, "pool2d", POOL_FWD);
#undef POOL_FWD
  return ZORCH_OK;
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

#ifdef ZV512
/* The gradient of maxpool2_row_float's row: each window's four inputs get
   the output's gradient where its index points and 0 elsewhere (the windows
   do not overlap), written in order with the even and odd columns
   interleaved back by two-source permutes; no clear of the plane first. */
ZV512_TARGET static void maxpool2_bwd_row_float(float *d0, float *d1, const float *go, const int64_t *gi, int64_t ow,
                                                int64_t at, int64_t w) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  const __m512i two = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i one = _mm512_set1_epi32(1), down = _mm512_set1_epi32((int)w);
  for (int64_t ox = 0; ox < ow; ox += 16) {
    int64_t n = ow - ox < 16 ? ow - ox : 16;
    __mmask16 mo = zv512_mask(n), ma = zv512_mask(2 * n), mb = zv512_mask(2 * n - 16 > 0 ? 2 * n - 16 : 0);
    __m512 v = _mm512_maskz_loadu_ps(mo, go + ox);
    __m512i base = _mm512_set1_epi64(at + 2 * ox);
    __m256i k0 = _mm512_cvtepi64_epi32(_mm512_sub_epi64(_mm512_maskz_loadu_epi64((__mmask8)mo, gi + ox), base));
    __m256i k1 = _mm512_cvtepi64_epi32(_mm512_sub_epi64(_mm512_maskz_loadu_epi64((__mmask8)(mo >> 8), gi + ox + 8), base));
    __m512i k = _mm512_sub_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(k0), k1, 1), two);
    __m512 tl = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), v);
    __m512 tr = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, one), v);
    __m512 bl = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, down), v);
    __m512 br = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_add_epi32(down, one)), v);
    _mm512_mask_storeu_ps(d0 + 2 * ox, ma, _mm512_permutex2var_ps(tl, lo, tr));
    _mm512_mask_storeu_ps(d0 + 2 * ox + 16, mb, _mm512_permutex2var_ps(tl, hi, tr));
    _mm512_mask_storeu_ps(d1 + 2 * ox, ma, _mm512_permutex2var_ps(bl, lo, br));
    _mm512_mask_storeu_ps(d1 + 2 * ox + 16, mb, _mm512_permutex2var_ps(bl, hi, br));
  }
}

/* The 2x2 max pool's gradient, plane by plane: each row pair from
   maxpool2_bwd_row_float, the row and column no window covered cleared. */
static void maxpool2_bwd_float(float *gp, const float *gop, const int64_t *ip, const conv_geom *g) {
  int64_t h = g->h, w = g->w, oh = g->oh, ow = g->ow, hw = h * w, ohw = oh * ow;
#pragma omp parallel for if (g->n * ohw * 4 >= CPU_GRAIN)
  for (int64_t p = 0; p < g->n; p++) {
    float *plane = gp + p * hw;
    for (int64_t oy = 0; oy < oh; oy++) {
      float *d0 = plane + 2 * oy * w;
      maxpool2_bwd_row_float(d0, d0 + w, gop + p * ohw + oy * ow, ip + p * ohw + oy * ow, ow, 2 * oy * w, w);
      for (int64_t x = 2 * ow; x < w; x++) d0[x] = d0[w + x] = 0;
    }
    if (2 * oh < h) memset(plane + 2 * oh * w, 0, sizeof(float) * (size_t)((h - 2 * oh) * w));
  }
}
#endif

zorch_status cpu_pool2d_bwd(pool_kind k, zorch_tensor *gx, const zorch_tensor *gout,
                            const zorch_tensor *idx, const conv_geom *g) {
  int ad = k == POOL_ADAPTIVE_AVG, inc = k == POOL_AVG;
#ifdef ZV512
  if (k == POOL_MAX && gx->dtype == ZORCH_F32 && maxpool2_fits(g) && maxpool2_vec_ok(g)) {
    maxpool2_bwd_float((float *)tensor_ptr(gx), (const float *)tensor_ptr(gout), (const int64_t *)tensor_ptr(idx), g);
    return ZORCH_OK;
  }
#endif
  CPU_FLOAT_DISPATCH(gx->dtype, "pool2d backward", POOL_BWD);
  return ZORCH_OK;
}
