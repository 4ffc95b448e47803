/* nn.c: CPU index, loss, normalisation and random-number kernels. */
#include <math.h>
#include <string.h>

#include "../backend/math.h"
#include "cpu.h"
#include "vec512.h"

/* Index v at position k of an index tensor is not in 0..n-1. */
zorch_status cpu_bad_index(const char *op, int64_t v, int64_t k, int64_t n) {
  return err_set(ZORCH_ERR_ARG, "%s: index " ERR_IXV("%lld") " at position " ERR_IX("%lld")
                 " is out of range " ERR_IXV("0") ".." ERR_IXV("%lld") "%s", op, (long long)v,
                 (long long)k, (long long)n - 1, v == -1 ? ERR_NOTE1(" (indices are 1-based, as Lua counts)") : "");
}

zorch_status cpu_index_select(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx,
                              int64_t outer, int64_t n, int64_t inner) {
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int64_t ni = shape_numel(idx->ndim, idx->shape);
  for (int64_t k = 0; k < ni; k++)
    if (ix[k] < 0 || ix[k] >= n) return cpu_bad_index("index_select", ix[k], k, n);
  size_t row = (size_t)inner * dtype_sizes[a->dtype];
  const char *src = tensor_ptr(a);
  char *dst = tensor_ptr(out);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < ni; k++)
      memcpy(dst + (size_t)(o * ni + k) * row, src + (size_t)(o * n + ix[k]) * row, row);
  return ZORCH_OK;
}

#define INDEX_ADD(T)                                                   \
  {                                                                    \
    T *o_ = (T *)tensor_ptr(out);                                      \
    const T *s_ = (const T *)tensor_ptr(src);                          \
    for (int64_t o = 0; o < outer; o++)                                \
      for (int64_t k = 0; k < ni; k++) {                               \
        T *d = o_ + (o * n + ix[k]) * inner;                           \
        const T *s = s_ + (o * ni + k) * inner;                        \
        for (int64_t i = 0; i < inner; i++) d[i] += s[i];              \
      }                                                                \
  }

/* 16-bit floats add in float and round after each add, in index order: the
   same sums, bit for bit, as the CUDA kernel's */
#define INDEX_ADD16(TO_F32, FROM_F32)                                         \
  {                                                                           \
    uint16_t *o_ = (uint16_t *)tensor_ptr(out);                               \
    const uint16_t *s_ = (const uint16_t *)tensor_ptr(src);                   \
    for (int64_t o = 0; o < outer; o++)                                       \
      for (int64_t k = 0; k < ni; k++) {                                      \
        uint16_t *d = o_ + (o * n + ix[k]) * inner;                           \
        const uint16_t *s = s_ + (o * ni + k) * inner;                        \
        for (int64_t i = 0; i < inner; i++) d[i] = FROM_F32(TO_F32(d[i]) + TO_F32(s[i])); \
      }                                                                       \
  }

zorch_status cpu_index_add(zorch_tensor *out, const zorch_tensor *src, const zorch_tensor *idx,
                           int64_t outer, int64_t n, int64_t inner) {
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int64_t ni = shape_numel(idx->ndim, idx->shape);
  for (int64_t k = 0; k < ni; k++)
    if (ix[k] < 0 || ix[k] >= n) return cpu_bad_index("index_add", ix[k], k, n);
  CPU_FLOAT16_DISPATCH(out->dtype, "index_add", INDEX_ADD, INDEX_ADD16);
  return ZORCH_OK;
}

#define NLL(T)                                                              \
  {                                                                         \
    T *l = (T *)tensor_ptr(loss);                                           \
    const T *lp = (const T *)tensor_ptr(logp);                              \
    for (int64_t i = 0; i < n; i++) l[i] = tg[i] == ignore ? (T)0 : -lp[i * c + tg[i]]; \
  }
#define NLL_BWD(T)                                                          \
  {                                                                         \
    T *gi = (T *)tensor_ptr(gin);                                           \
    const T *gg = (const T *)tensor_ptr(g);                                 \
    for (int64_t i = 0; i < n; i++)                                         \
      if (tg[i] != ignore) gi[i * c + tg[i]] = -gg[i];                      \
  }

static zorch_status check_targets(const int64_t *tg, int64_t n, int64_t c, int64_t ignore) {
  for (int64_t i = 0; i < n; i++)
    if (tg[i] != ignore && (tg[i] < 0 || tg[i] >= c))
      return err_set(ZORCH_ERR_ARG, "target " ERR_IXV("%lld") " at position " ERR_IX("%lld")
                     " is out of range " ERR_IXV("0") ".." ERR_IXV("%lld") "%s", (long long)tg[i],
                     (long long)i, (long long)c - 1,
                     tg[i] == -1 ? ERR_NOTE1(" (targets are 1-based, as Lua counts; add 1 to 0-based labels)") : "");
  return ZORCH_OK;
}

/* 16-bit log-probabilities, a float32 loss */
#define NLL16(LD)                                                           \
  {                                                                         \
    float *l = (float *)tensor_ptr(loss);                                   \
    const uint16_t *lp = (const uint16_t *)tensor_ptr(logp);                \
    for (int64_t i = 0; i < n; i++) l[i] = tg[i] == ignore ? 0.0f : -LD(lp[i * c + tg[i]]); \
  }
/* a float32 g into a 16-bit gradient, rounded once */
#define NLL_BWD16(ST)                                                       \
  {                                                                         \
    uint16_t *gi = (uint16_t *)tensor_ptr(gin);                             \
    const float *gg = (const float *)tensor_ptr(g);                         \
    for (int64_t i = 0; i < n; i++)                                         \
      if (tg[i] != ignore) gi[i * c + tg[i]] = ST(-gg[i]);                  \
  }

zorch_status cpu_nll(zorch_tensor *loss, const zorch_tensor *logp, const zorch_tensor *t, int64_t n,
                     int64_t c, int64_t ignore) {
  const int64_t *tg = (const int64_t *)tensor_ptr(t);
  zorch_status st = check_targets(tg, n, c, ignore);
  if (st) return st;
  if (loss->dtype == ZORCH_F32 && logp->dtype == ZORCH_BF16) {
    NLL16(zm_bf16_to_f32)
    return ZORCH_OK;
  }
  if (loss->dtype == ZORCH_F32 && logp->dtype == ZORCH_F16) {
    NLL16(zm_f16_to_f32)
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(logp->dtype, "nll", NLL);
  return ZORCH_OK;
}

zorch_status cpu_nll_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *t, int64_t n,
                         int64_t c, int64_t ignore) {
  const int64_t *tg = (const int64_t *)tensor_ptr(t);
  if (g->dtype == ZORCH_F32 && gin->dtype == ZORCH_BF16) {
    NLL_BWD16(zm_f32_to_bf16)
    return ZORCH_OK;
  }
  if (g->dtype == ZORCH_F32 && gin->dtype == ZORCH_F16) {
    NLL_BWD16(zm_f32_to_f16)
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(gin->dtype, "nll backward", NLL_BWD);
  return ZORCH_OK;
}

/* Statistics in double; mean and rstd are stored per row in the input dtype. */
#define LAYER_NORM(T)                                                             \
  {                                                                               \
    T *yp = (T *)tensor_ptr(y), *mp = (T *)tensor_ptr(mean), *rp = (T *)tensor_ptr(rstd); \
    const T *xp = (const T *)tensor_ptr(x);                                       \
    const T *wp = w ? (const T *)tensor_ptr(w) : NULL, *bp = b ? (const T *)tensor_ptr(b) : NULL; \
    _Pragma("omp parallel for if (rows * cols >= CPU_GRAIN)")                     \
    for (int64_t r = 0; r < rows; r++) {                                          \
      const T *xr = xp + r * cols;                                                \
      double s = 0, ss = 0;                                                       \
      for (int64_t j = 0; j < cols; j++) s += xr[j];                              \
      double mu = s / (double)cols;                                               \
      for (int64_t j = 0; j < cols; j++) ss += ((double)xr[j] - mu) * ((double)xr[j] - mu); \
      double rs = 1.0 / sqrt(ss / (double)cols + eps);                            \
      mp[r] = (T)mu;                                                              \
      rp[r] = (T)rs;                                                              \
      for (int64_t j = 0; j < cols; j++) {                                        \
        T v = (T)(((double)xr[j] - mu) * rs);                                     \
        if (wp) v *= wp[j];                                                       \
        if (bp) v += bp[j];                                                       \
        yp[r * cols + j] = v;                                                     \
      }                                                                           \
    }                                                                             \
  }

/* Sum of n floats in 16 lanes, the lanes added in double. */
static inline double lanes_sum(const float *lane) {
  double s = 0;
  for (int k = 0; k < 16; k++) s += lane[k];
  return s;
}

/* One float32 row: the mean, then the variance about it (two passes, so no
   cancellation), each summed in 16 float lanes; then the scaled row. The mean
   is mu + mu_lo, two floats: x - mu is exact for x near the mean, so the
   centred values keep double's accuracy when the row has a large offset. */
CPU_CLONES static void layer_norm_row_f32(float *y, float *mp, float *rp, const float *x,
                                          const float *w, const float *b, int64_t cols,
                                          double eps) {
  /* summed about the first value, so that an offset costs no precision */
  float lane[16] = {0}, x0 = cols ? x[0] : 0;
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16)
    for (int k = 0; k < 16; k++) lane[k] += x[j + k] - x0;
  double s = lanes_sum(lane);
  for (; j < cols; j++) s += x[j] - x0;
  double mean = (double)x0 + s / (double)cols;
  float mu = (float)mean, lo = (float)(mean - (double)mu);
  for (int k = 0; k < 16; k++) lane[k] = 0;
  for (j = 0; j + 16 <= cols; j += 16)
    for (int k = 0; k < 16; k++) {
      float d = (x[j + k] - mu) - lo;
      lane[k] += d * d;
    }
  double ss = lanes_sum(lane);
  for (; j < cols; j++) {
    float d = (x[j] - mu) - lo;
    ss += (double)d * (double)d;
  }
  if (!isfinite(ss)) /* a square past float32's range: the sum again in double */
    for (ss = 0, j = 0; j < cols; j++) {
      float d = (x[j] - mu) - lo;
      ss += (double)d * (double)d;
    }
  float rs = (float)(1.0 / sqrt(ss / (double)cols + eps));
  *mp = mu;
  *rp = rs;
  if (w && b)
    for (j = 0; j < cols; j++) y[j] = ((x[j] - mu) - lo) * rs * w[j] + b[j];
  else if (w)
    for (j = 0; j < cols; j++) y[j] = ((x[j] - mu) - lo) * rs * w[j];
  else if (b)
    for (j = 0; j < cols; j++) y[j] = ((x[j] - mu) - lo) * rs + b[j];
  else
    for (j = 0; j < cols; j++) y[j] = ((x[j] - mu) - lo) * rs;
}

/* A 16-bit row: layer_norm_row_f32's arithmetic on the widened values (the
   same float32 results, rounded once); mean and rstd in float32. */
#define LAYER_NORM_ROW16(NAME, LD, ST)                                                  \
  CPU_CLONES static void NAME(uint16_t *y, float *mp, float *rp, const uint16_t *x,     \
                              const uint16_t *w, const uint16_t *b, int64_t cols, double eps) { \
    float lane[16] = {0}, x0 = cols ? LD(x[0]) : 0;                                     \
    int64_t j = 0;                                                                      \
    for (; j + 16 <= cols; j += 16)                                                     \
      for (int k = 0; k < 16; k++) lane[k] += LD(x[j + k]) - x0;                        \
    double s = lanes_sum(lane);                                                         \
    for (; j < cols; j++) s += LD(x[j]) - x0;                                           \
    double mean = (double)x0 + s / (double)cols;                                        \
    float mu = (float)mean, lo = (float)(mean - (double)mu);                            \
    for (int k = 0; k < 16; k++) lane[k] = 0;                                           \
    for (j = 0; j + 16 <= cols; j += 16)                                                \
      for (int k = 0; k < 16; k++) {                                                    \
        float d = (LD(x[j + k]) - mu) - lo;                                             \
        lane[k] += d * d;                                                               \
      }                                                                                 \
    double ss = lanes_sum(lane);                                                        \
    for (; j < cols; j++) {                                                             \
      float d = (LD(x[j]) - mu) - lo;                                                   \
      ss += (double)d * (double)d;                                                      \
    }                                                                                   \
    if (!isfinite(ss))                                                                  \
      for (ss = 0, j = 0; j < cols; j++) {                                              \
        float d = (LD(x[j]) - mu) - lo;                                                 \
        ss += (double)d * (double)d;                                                    \
      }                                                                                 \
    float rs = (float)(1.0 / sqrt(ss / (double)cols + eps));                            \
    *mp = mu;                                                                           \
    *rp = rs;                                                                           \
    if (w && b)                                                                         \
      for (j = 0; j < cols; j++) y[j] = ST(((LD(x[j]) - mu) - lo) * rs * LD(w[j]) + LD(b[j])); \
    else if (w)                                                                         \
      for (j = 0; j < cols; j++) y[j] = ST(((LD(x[j]) - mu) - lo) * rs * LD(w[j]));     \
    else if (b)                                                                         \
      for (j = 0; j < cols; j++) y[j] = ST(((LD(x[j]) - mu) - lo) * rs + LD(b[j]));     \
    else                                                                                \
      for (j = 0; j < cols; j++) y[j] = ST(((LD(x[j]) - mu) - lo) * rs);                \
  }
LAYER_NORM_ROW16(layer_norm_row_bf16, zm_bf16_to_f32, zm_f32_to_bf16)
LAYER_NORM_ROW16(layer_norm_row_f16, zm_f16_to_f32, zm_f32_to_f16)

/* The same row in AVX-512 registers for float32 (kind 0), bf16 (1) and fp16 (2)
   values: the sums in 16 float lanes (the tail masked into lanes 0..), added
   in double; one arithmetic for every kind, so that a 16-bit row is the
   float32 row of its widened values, rounded once. */
#ifdef ZV512
ZV512_FN __m512 ln_ld(const void *p, int64_t j, __mmask16 m, int kind) {
  if (kind == 0) return _mm512_maskz_loadu_ps(m, (const float *)p + j);
  return zv16_ld((const uint16_t *)p + j, m, kind == 1);
}
ZV512_FN double ln_lanes(__m512 v) {
  float l[16];
  _mm512_storeu_ps(l, v);
  return lanes_sum(l);
}
/* The first pass: the lanes' sums of x - x0, x0 the row's first value (a
   shift that keeps the variance's pass accurate). Four accumulators
   (vectors j/16 mod 4), so that the adds do not wait on each other. When
   `f` is given, the row (16-bit, `kind`) is also widened into it, in the same
   pass. */
ZV512_FN __m512 ln_first_pass(float *f, const void *x, int64_t cols, int kind, __m512 *x0p) {
  __m512 x0 = _mm512_set1_ps(cols ? _mm512_cvtss_f32(ln_ld(x, 0, 1, kind)) : 0.0f);
  __m512 l0 = _mm512_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
  int64_t j = 0;
  for (; j + 64 <= cols; j += 64) {
    __m512 v0 = ln_ld(x, j, 0xffff, kind), v1 = ln_ld(x, j + 16, 0xffff, kind);
    __m512 v2 = ln_ld(x, j + 32, 0xffff, kind), v3 = ln_ld(x, j + 48, 0xffff, kind);
    if (f) {
      _mm512_storeu_ps(f + j, v0), _mm512_storeu_ps(f + j + 16, v1);
      _mm512_storeu_ps(f + j + 32, v2), _mm512_storeu_ps(f + j + 48, v3);
    }
    l0 = _mm512_add_ps(l0, _mm512_sub_ps(v0, x0));
    l1 = _mm512_add_ps(l1, _mm512_sub_ps(v1, x0));
    l2 = _mm512_add_ps(l2, _mm512_sub_ps(v2, x0));
    l3 = _mm512_add_ps(l3, _mm512_sub_ps(v3, x0));
  }
  for (; j < cols; j += 16) {
    __mmask16 m = zv512_mask(cols - j);
    __m512 v = ln_ld(x, j, m, kind);
    if (f) _mm512_mask_storeu_ps(f + j, m, v);
    l0 = _mm512_add_ps(l0, _mm512_maskz_sub_ps(m, v, x0));
  }
  *x0p = x0;
  return _mm512_add_ps(_mm512_add_ps(l0, l1), _mm512_add_ps(l2, l3));
}

/* The variance's sum in double, for a row whose float32 squares overflowed
   (values more than 1.8e19 from the mean; PyTorch gives 0 or NaN there). */
ZV512_FN double ln_ss_double(const void *x, int64_t cols, int kind, float mu, float lo) {
  double ss = 0;
  for (int64_t j = 0; j < cols; j += 16) {
    __mmask16 m = zv512_mask(cols - j);
    float d[16];
    _mm512_storeu_ps(d, _mm512_maskz_sub_ps(m, _mm512_sub_ps(ln_ld(x, j, m, kind), _mm512_set1_ps(mu)),
                                            _mm512_set1_ps(lo)));
    for (int k = 0; k < 16; k++) ss += (double)d[k] * (double)d[k];
  }
  return ss;
}

/* One row from its first pass's lane sums (x0 and lane, ln_first_pass). */
ZV512_FN void layer_norm_row_rest_512(void *y, float *mp, float *rp, const void *x, const void *w, const void *b,
                                      int64_t cols, double eps, int kind, int okind, __m512 x0, __m512 lane) {
  __m512 l0, l1, l2, l3;
  int64_t j;
  double mean = (double)_mm512_cvtss_f32(x0) + ln_lanes(lane) / (double)cols;
  float mu = (float)mean, lo = (float)(mean - (double)mu);
  __m512 vmu = _mm512_set1_ps(mu), vlo = _mm512_set1_ps(lo);
#define LN_D(jj, m) _mm512_maskz_sub_ps(m, _mm512_sub_ps(ln_ld(x, jj, m, kind), vmu), vlo)
  l0 = l1 = l2 = l3 = _mm512_setzero_ps();
  for (j = 0; j + 64 <= cols; j += 64) {
    __m512 d0 = LN_D(j, 0xffff), d1 = LN_D(j + 16, 0xffff), d2 = LN_D(j + 32, 0xffff), d3 = LN_D(j + 48, 0xffff);
    l0 = _mm512_fmadd_ps(d0, d0, l0);
    l1 = _mm512_fmadd_ps(d1, d1, l1);
    l2 = _mm512_fmadd_ps(d2, d2, l2);
    l3 = _mm512_fmadd_ps(d3, d3, l3);
  }
  for (; j < cols; j += 16) {
    __m512 d = LN_D(j, zv512_mask(cols - j));
    l0 = _mm512_fmadd_ps(d, d, l0);
  }
#undef LN_D
  lane = _mm512_add_ps(_mm512_add_ps(l0, l1), _mm512_add_ps(l2, l3));
  double ss = ln_lanes(lane);
  if (!isfinite(ss)) ss = ln_ss_double(x, cols, kind, mu, lo);
  float rs = (float)(1.0 / sqrt(ss / (double)cols + eps));
  __m512 vrs = _mm512_set1_ps(rs);
  *mp = mu;
  *rp = rs;
  for (j = 0; j < cols; j += 16) {
    __mmask16 m = zv512_mask(cols - j);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(ln_ld(x, j, m, kind), vmu), vlo), vrs);
    if (w && b) v = _mm512_fmadd_ps(v, ln_ld(w, j, m, kind), ln_ld(b, j, m, kind));
    else if (w) v = _mm512_mul_ps(v, ln_ld(w, j, m, kind));
    else if (b) v = _mm512_add_ps(v, ln_ld(b, j, m, kind));
    if (okind == 0) _mm512_mask_storeu_ps((float *)y + j, m, v);
    else zv16_st((uint16_t *)y + j, v, m, okind == 1);
  }
}

ZV512_FN void layer_norm_row_512(void *y, float *mp, float *rp, const void *x, const void *w,
                                 const void *b, int64_t cols, double eps, int kind, int okind) {
  __m512 x0, lane = ln_first_pass(NULL, x, cols, kind, &x0);
  layer_norm_row_rest_512(y, mp, rp, x, w, b, cols, eps, kind, okind, x0, lane);
}

/* n 16-bit values widened into f */
ZV512_FN void ln_widen(float *f, const void *h, int64_t n, int kind) {
  for (int64_t j = 0; j < n; j += 16) _mm512_mask_storeu_ps(f + j, zv512_mask(n - j), ln_ld(h, j, zv512_mask(n - j), kind));
}

/* 16-bit rows of up to LN_WIDE values are widened once into a float32 row on
   the stack (and the weight and bias once per call), so that the three
   passes convert each value once, not three times: the same float32 values,
   so the same results. */
#define LN_WIDE 4096
ZV512_TARGET static void layer_norm_16_512(char *yp, float *mp, float *rp, const char *xp, const void *wp,
                                           const void *bp, int64_t rows, int64_t cols, double eps, int kind) {
  float wf[LN_WIDE], bf[LN_WIDE];
  if (wp) ln_widen(wf, wp, cols, kind);
  if (bp) ln_widen(bf, bp, cols, kind);
  const float *w = wp ? wf : NULL, *b = bp ? bf : NULL;
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
  for (int64_t r = 0; r < rows; r++) {
    float xf[LN_WIDE];
    __m512 x0, lane = ln_first_pass(xf, xp + (size_t)(r * cols) * 2, cols, kind, &x0); /* widened as it is summed */
    layer_norm_row_rest_512(yp + (size_t)(r * cols) * 2, mp + r, rp + r, xf, w, b, cols, eps, 0, kind, x0, lane);
  }
}
#endif

zorch_status cpu_layer_norm(zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,
                            const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b,
                            int64_t rows, int64_t cols, double eps) {
#ifdef ZV512
  bool k16 = (x->dtype == ZORCH_BF16 || x->dtype == ZORCH_F16) && mean->dtype == ZORCH_F32;
  if ((k16 || x->dtype == ZORCH_F32) && zv512_ok()) {
    int kind = x->dtype == ZORCH_BF16 ? 1 : x->dtype == ZORCH_F16 ? 2 : 0;
    size_t es = dtype_sizes[x->dtype];
    char *yp = tensor_ptr(y);
    float *mp = (float *)tensor_ptr(mean), *rp = (float *)tensor_ptr(rstd);
    const char *xp = tensor_ptr(x);
    const void *wp = w ? tensor_ptr(w) : NULL, *bp = b ? tensor_ptr(b) : NULL;
    if (kind != 0 && cols <= LN_WIDE) {
      layer_norm_16_512(yp, mp, rp, xp, wp, bp, rows, cols, eps, kind);
      return ZORCH_OK;
    }
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
    for (int64_t r = 0; r < rows; r++)
      layer_norm_row_512(yp + (size_t)(r * cols) * es, mp + r, rp + r, xp + (size_t)(r * cols) * es, wp, bp,
                         cols, eps, kind, kind);
    return ZORCH_OK;
  }
#endif
  if ((x->dtype == ZORCH_BF16 || x->dtype == ZORCH_F16) && mean->dtype == ZORCH_F32) {
    uint16_t *yp = (uint16_t *)tensor_ptr(y);
    float *mp = (float *)tensor_ptr(mean), *rp = (float *)tensor_ptr(rstd);
    const uint16_t *xp = (const uint16_t *)tensor_ptr(x);
    const uint16_t *wp = w ? (const uint16_t *)tensor_ptr(w) : NULL;
    const uint16_t *bp = b ? (const uint16_t *)tensor_ptr(b) : NULL;
    bool bf = x->dtype == ZORCH_BF16;
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
    for (int64_t r = 0; r < rows; r++) {
      if (bf) layer_norm_row_bf16(yp + r * cols, mp + r, rp + r, xp + r * cols, wp, bp, cols, eps);
      else layer_norm_row_f16(yp + r * cols, mp + r, rp + r, xp + r * cols, wp, bp, cols, eps);
    }
    return ZORCH_OK;
  }
  if (x->dtype == ZORCH_F32) {
    float *yp = (float *)tensor_ptr(y), *mp = (float *)tensor_ptr(mean), *rp = (float *)tensor_ptr(rstd);
    const float *xp = (const float *)tensor_ptr(x);
    const float *wp = w ? (const float *)tensor_ptr(w) : NULL, *bp = b ? (const float *)tensor_ptr(b) : NULL;
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
    for (int64_t r = 0; r < rows; r++)
      layer_norm_row_f32(yp + r * cols, mp + r, rp + r, xp + r * cols, wp, bp, cols, eps);
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(x->dtype, "layer_norm", LAYER_NORM);
  return ZORCH_OK;
}

/* gx = rstd * (gh - mean(gh) - xh * mean(gh * xh)) with gh = g * w, xh the
   normalised input; gw = sum over rows of g * xh; gb = sum over rows of g. */
#define LAYER_NORM_BWD(T) LAYER_NORM_BWD_IO(T, T, (double), (T))
/* T the tensors' type (16-bit ones read through LD and written through ST),
   MT mean's and rstd's */
#define LAYER_NORM_BWD_IO(T, MT, LD, ST)                                            \
  {                                                                                 \
    T *gxp = (T *)tensor_ptr(gx);                                                   \
    const T *gp = (const T *)tensor_ptr(g), *xp = (const T *)tensor_ptr(x);         \
    const MT *mp = (const MT *)tensor_ptr(mean), *rp = (const MT *)tensor_ptr(rstd); \
    const T *wp = w ? (const T *)tensor_ptr(w) : NULL;                              \
    _Pragma("omp parallel for if (rows * cols >= CPU_GRAIN)")                       \
    for (int64_t r = 0; r < rows; r++) {                                            \
      const T *gr = gp + r * cols, *xr = xp + r * cols;                             \
      double mu = mp[r], rs = rp[r], s1 = 0, s2 = 0;                                \
      for (int64_t j = 0; j < cols; j++) {                                          \
        double gh = LD(gr[j]) * (wp ? LD(wp[j]) : 1.0);                             \
        s1 += gh;                                                                   \
        s2 += gh * (LD(xr[j]) - mu) * rs;                                           \
      }                                                                             \
      s1 /= (double)cols;                                                           \
      s2 /= (double)cols;                                                           \
      for (int64_t j = 0; j < cols; j++) {                                          \
        double gh = LD(gr[j]) * (wp ? LD(wp[j]) : 1.0);                             \
        double xh = (LD(xr[j]) - mu) * rs;                                          \
        gxp[r * cols + j] = ST(rs * (gh - s1 - xh * s2));                           \
      }                                                                             \
    }                                                                               \
    if (gw || gb) {                                                                 \
      T *gwp = gw ? (T *)tensor_ptr(gw) : NULL, *gbp = gb ? (T *)tensor_ptr(gb) : NULL; \
      for (int64_t j = 0; j < cols; j++) {                                          \
        double aw = 0, ab = 0;                                                      \
        for (int64_t r = 0; r < rows; r++) {                                        \
          double gv = LD(gp[r * cols + j]);                                         \
          aw += gv * (LD(xp[r * cols + j]) - (double)mp[r]) * (double)rp[r];        \
          ab += gv;                                                                 \
        }                                                                           \
        if (gwp) gwp[j] = ST(aw);                                                   \
        if (gbp) gbp[j] = ST(ab);                                                   \
      }                                                                             \
    }                                                                               \
  }
/* 16-bit values: widened, and the double results rounded to float32 and then
   once more to 16 bits, as the float32 kernel's results would be converted */
#define LD_BF16(h) ((double)zm_bf16_to_f32(h))
#define ST_BF16(v) zm_f32_to_bf16((float)(v))
#define LD_F16(h) ((double)zm_f16_to_f32(h))
#define ST_F16(v) zm_f32_to_f16((float)(v))

/* float32 rows: the two row sums in 16 float lanes (added in double), gx in
   float32; then gw and gb in double over column blocks, each column's rows
   added in order (the same result on any thread count). */
/* The lanes as a GCC vector: written as float[16] arrays, the loop was
   vectorised across rows of 16 with permutes (37 KB of code, a fifth of the
   block's layer norm backward); the lane sums are the same. */
typedef float ln_v16 __attribute__((vector_size(64)));
CPU_CLONES static void layer_norm_bwd_row_f32(float *gx, const float *g, const float *x,
                                              const float *w, float mu, float rs, int64_t cols) {
  ln_v16 a1 = {0}, a2 = {0};
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    ln_v16 gh, xv;
    memcpy(&gh, g + j, sizeof gh);
    memcpy(&xv, x + j, sizeof xv);
    if (w) {
      ln_v16 wv;
      memcpy(&wv, w + j, sizeof wv);
      gh = gh * wv;
    }
    a1 += gh;
    a2 += gh * ((xv - mu) * rs);
  }
  float l1[16], l2[16];
  memcpy(l1, &a1, sizeof l1);
  memcpy(l2, &a2, sizeof l2);
  double s1 = lanes_sum(l1), s2 = lanes_sum(l2);
  for (; j < cols; j++) {
    double gh = (double)g[j] * (w ? (double)w[j] : 1.0);
    s1 += gh;
    s2 += gh * (((double)x[j] - mu) * rs);
  }
  float m1 = (float)(s1 / (double)cols), m2 = (float)(s2 / (double)cols);
  if (w)
    for (j = 0; j < cols; j++) gx[j] = rs * (g[j] * w[j] - m1 - ((x[j] - mu) * rs) * m2);
  else
    for (j = 0; j < cols; j++) gx[j] = rs * (g[j] - m1 - ((x[j] - mu) * rs) * m2);
}

CPU_CLONES static void layer_norm_bwd_cols_f32(float *gw, float *gb, const float *g, const float *x,
                                               const float *mp, const float *rp, int64_t rows,
                                               int64_t cols, int64_t j0, int64_t nj) {
  double aw[64], ab[64];
  for (int64_t j = 0; j < nj; j++) aw[j] = ab[j] = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *gr = g + r * cols + j0, *xr = x + r * cols + j0;
    double mu = mp[r], rs = rp[r];
    for (int64_t j = 0; j < nj; j++) {
      aw[j] += (double)gr[j] * (((double)xr[j] - mu) * rs);
      ab[j] += gr[j];
    }
  }
  for (int64_t j = 0; j < nj; j++) {
    if (gw) gw[j0 + j] = (float)aw[j];
    if (gb) gb[j0 + j] = (float)ab[j];
  }
}

static void layer_norm_bwd_f32(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                               const zorch_tensor *g, const zorch_tensor *x,
                               const zorch_tensor *mean, const zorch_tensor *rstd,
                               const zorch_tensor *w, int64_t rows, int64_t cols) {
  float *gxp = (float *)tensor_ptr(gx);
  const float *gp = (const float *)tensor_ptr(g), *xp = (const float *)tensor_ptr(x);
  const float *mp = (const float *)tensor_ptr(mean), *rp = (const float *)tensor_ptr(rstd);
  const float *wp = w ? (const float *)tensor_ptr(w) : NULL;
  float *gwp = gw ? (float *)tensor_ptr(gw) : NULL, *gbp = gb ? (float *)tensor_ptr(gb) : NULL;
  int64_t nblk = (gw || gb) ? (cols + 63) / 64 : 0;
  bool par = rows * cols >= CPU_GRAIN;
  /* one parallel region for both passes */
#pragma omp parallel if (par)
  {
#pragma omp for nowait
    for (int64_t r = 0; r < rows; r++)
      layer_norm_bwd_row_f32(gxp + r * cols, gp + r * cols, xp + r * cols, wp, mp[r], rp[r], cols);
#pragma omp for
    for (int64_t b = 0; b < nblk; b++) {
      int64_t j0 = b * 64, nj = cols - j0 < 64 ? cols - j0 : 64;
      layer_norm_bwd_cols_f32(gwp, gbp, gp, xp, mp, rp, rows, cols, j0, nj);
    }
  }
}

/* 16-bit rows of up to LN_WIDE values: g, x (and the weight, once per call)
   widened into float32 rows, layer_norm_bwd_row_f32 on them, gx rounded once;
   gw and gb summed in double over column blocks as in float32. */
#ifdef ZV512
ZV512_TARGET static void ln_narrow(void *h, const float *f, int64_t n, int kind) {
  for (int64_t j = 0; j < n; j += 16)
    zv16_st((uint16_t *)h + j, _mm512_maskz_loadu_ps(zv512_mask(n - j), f + j), zv512_mask(n - j), kind == 1);
}

ZV512_TARGET static void layer_norm_bwd_cols_16(void *gw, void *gb, const uint16_t *g, const uint16_t *x,
                                                const float *mp, const float *rp, int64_t rows,
                                                int64_t cols, int64_t j0, int64_t nj, int kind) {
  double aw[64], ab[64];
  float gf[64], xf[64], ow[64], ob[64];
  for (int64_t j = 0; j < nj; j++) aw[j] = ab[j] = 0;
  for (int64_t r = 0; r < rows; r++) {
    ln_widen(gf, g + r * cols + j0, nj, kind);
    ln_widen(xf, x + r * cols + j0, nj, kind);
    double mu = mp[r], rs = rp[r];
    for (int64_t j = 0; j < nj; j++) {
      aw[j] += (double)gf[j] * (((double)xf[j] - mu) * rs);
      ab[j] += gf[j];
    }
  }
  for (int64_t j = 0; j < nj; j++) ow[j] = (float)aw[j], ob[j] = (float)ab[j];
  if (gw) ln_narrow((uint16_t *)gw + j0, ow, nj, kind);
  if (gb) ln_narrow((uint16_t *)gb + j0, ob, nj, kind);
}

static void layer_norm_bwd_16_512(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                                  const zorch_tensor *g, const zorch_tensor *x,
                                  const zorch_tensor *mean, const zorch_tensor *rstd,
                                  const zorch_tensor *w, int64_t rows, int64_t cols, int kind) {
  uint16_t *gxp = (uint16_t *)tensor_ptr(gx);
  const uint16_t *gp = (const uint16_t *)tensor_ptr(g), *xp = (const uint16_t *)tensor_ptr(x);
  const float *mp = (const float *)tensor_ptr(mean), *rp = (const float *)tensor_ptr(rstd);
  void *gwp = gw ? tensor_ptr(gw) : NULL, *gbp = gb ? tensor_ptr(gb) : NULL;
  float wf[LN_WIDE];
  if (w) ln_widen(wf, tensor_ptr(w), cols, kind);
  const float *wv = w ? wf : NULL;
  int64_t nblk = (gw || gb) ? (cols + 63) / 64 : 0;
#pragma omp parallel if (rows * cols >= CPU_GRAIN)
  {
    float gr[LN_WIDE], xr[LN_WIDE], o[LN_WIDE];
#pragma omp for nowait
    for (int64_t r = 0; r < rows; r++) {
      ln_widen(gr, gp + r * cols, cols, kind);
      ln_widen(xr, xp + r * cols, cols, kind);
      layer_norm_bwd_row_f32(o, gr, xr, wv, mp[r], rp[r], cols);
      ln_narrow(gxp + r * cols, o, cols, kind);
    }
#pragma omp for
    for (int64_t b = 0; b < nblk; b++) {
      int64_t j0 = b * 64, nj = cols - j0 < 64 ? cols - j0 : 64;
      layer_norm_bwd_cols_16(gwp, gbp, gp, xp, mp, rp, rows, cols, j0, nj, kind);
    }
  }
}
#endif

zorch_status cpu_layer_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                                const zorch_tensor *g, const zorch_tensor *x,
                                const zorch_tensor *mean, const zorch_tensor *rstd,
                                const zorch_tensor *w, int64_t rows, int64_t cols) {
#ifdef ZV512
  if ((x->dtype == ZORCH_BF16 || x->dtype == ZORCH_F16) && mean->dtype == ZORCH_F32 && cols <= LN_WIDE &&
      zv512_ok()) {
    layer_norm_bwd_16_512(gx, gw, gb, g, x, mean, rstd, w, rows, cols, x->dtype == ZORCH_BF16 ? 1 : 2);
    return ZORCH_OK;
  }
#endif
  if (x->dtype == ZORCH_BF16 && mean->dtype == ZORCH_F32) {
    LAYER_NORM_BWD_IO(uint16_t, float, LD_BF16, ST_BF16)
    return ZORCH_OK;
  }
  if (x->dtype == ZORCH_F16 && mean->dtype == ZORCH_F32) {
    LAYER_NORM_BWD_IO(uint16_t, float, LD_F16, ST_F16)
    return ZORCH_OK;
  }
  if (x->dtype == ZORCH_F32) {
    layer_norm_bwd_f32(gx, gw, gb, g, x, mean, rstd, w, rows, cols);
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(x->dtype, "layer_norm backward", LAYER_NORM_BWD);
  return ZORCH_OK;
}

/* Element i of a stream: see zm_random_* in math.h for the mapping that every
   backend shares. */
zorch_status cpu_random(zorch_tensor *out, uint64_t seed, uint64_t offset, bool normal) {
  int64_t n = shape_numel(out->ndim, out->shape);
  char *p = tensor_ptr(out);
  zorch_dtype dt = out->dtype;
  if (!zorch_dtype_is_float(dt))
    return err_set(ZORCH_ERR_DTYPE, "%s: needs a floating-point dtype, got %s",
                   normal ? "randn" : "rand", zorch_dtype_name(dt));
#pragma omp parallel for if (n >= CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) {
    double v = normal ? zm_random_normal(seed, offset, i)
                      : (dt == ZORCH_F64 ? zm_random_unit_f64(seed, offset, i)
                                         : (double)zm_random_unit_f32(seed, offset, i));
    if (dt == ZORCH_F32)
      ((float *)p)[i] = (float)v;
    else
      cpu_store(p + i * (int64_t)dtype_sizes[dt], dt, v);
  }
  return ZORCH_OK;
}

zorch_status cpu_randint(zorch_tensor *out, uint64_t seed, uint64_t offset, int64_t low,
                         uint64_t range) {
  int64_t n = shape_numel(out->ndim, out->shape), *p = (int64_t *)tensor_ptr(out);
  if (out->dtype != ZORCH_I64)
    return err_set(ZORCH_ERR_DTYPE, "randint: the kernel writes int64, got %s",
                   zorch_dtype_name(out->dtype));
#pragma omp parallel for if (n >= CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) p[i] = zm_random_int(seed, offset, i, low, range);
  return ZORCH_OK;
}

/* ---- SwiGLU (include/zorch_ops.h): silu(a) * b and its gradients, one pass each,
   with the registry's silu formulas (ops/backend/math.h) ---- */
#define SWIGLU(T)                                                                        \
  {                                                                                      \
    T *op = (T *)tensor_ptr(out);                                                        \
    const T *ap = (const T *)tensor_ptr(a), *bp = (const T *)tensor_ptr(b);              \
    _Pragma("omp parallel for if (n >= CPU_GRAIN)")                                      \
    for (int64_t i = 0; i < n; i++) op[i] = ZM(silu, ap[i]) * bp[i];                     \
  }

zorch_status cpu_swiglu(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, int64_t n) {
  CPU_FLOAT_DISPATCH(a->dtype, "swiglu", SWIGLU);
  return ZORCH_OK;
}

#define SWIGLU_BWD(T)                                                                    \
  {                                                                                      \
    T *gap = ga ? (T *)tensor_ptr(ga) : NULL, *gbp = gb ? (T *)tensor_ptr(gb) : NULL;    \
    const T *gp = (const T *)tensor_ptr(g), *ap = (const T *)tensor_ptr(a),              \
            *bp = (const T *)tensor_ptr(b);                                              \
    _Pragma("omp parallel for if (n >= CPU_GRAIN)")                                      \
    for (int64_t i = 0; i < n; i++) {                                                    \
      if (gap) gap[i] = ZM(silu_bwd, gp[i] * bp[i], ap[i]);                              \
      if (gbp) gbp[i] = gp[i] * ZM(silu, ap[i]);                                         \
    }                                                                                    \
  }

zorch_status cpu_swiglu_bwd(zorch_tensor *ga, zorch_tensor *gb, const zorch_tensor *g, const zorch_tensor *a,
                            const zorch_tensor *b, int64_t n) {
  CPU_FLOAT_DISPATCH(a->dtype, "swiglu backward", SWIGLU_BWD);
  return ZORCH_OK;
}
