/* reduce.c: CPU sum/max over the middle axis of (outer, r, inner), the max
   gradient scatter, and softmax. Sums accumulate in double (int64 for integers)
   in a fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "../backend/math.h"
#include "cpu.h"
#include "vec.h"
#include "vec512.h"

/* 16-bit floats widened to float32 where they are read, and rounded once where
   written: the kernels below compute what their float32 versions compute on
   the converted tensor, without the converted tensor. */
#define LD_BF(h) zm_bf16_to_f32(h)
#define LD_H(h) zm_f16_to_f32(h)
#define ST_BF(f) zm_f32_to_bf16(f)
#define ST_H(f) zm_f32_to_f16(f)

/* Sum of n contiguous values with eight double accumulators (a fixed order). */
#define SUM_CONTIG(NAME, T)                                       \
  CPU_CLONES static double NAME(const T *a, int64_t n) {          \
    double acc[8] = {0};                                          \
    int64_t i = 0;                                                \
    for (; i + 8 <= n; i += 8)                                    \
      for (int k = 0; k < 8; k++) acc[k] += a[i + k];             \
    double s = 0;                                                 \
    for (; i < n; i++) s += a[i];                                 \
    for (int k = 0; k < 8; k++) s += acc[k];                      \
    return s;                                                     \
  }
SUM_CONTIG(sum_f64, double)

/* float32 sums: blocks of 2048 in 64 float lanes (each lane adds 32 values,
   then the lanes pairwise), the block sums in double. Near double's accuracy
   for any length, at memory speed. */
#define SUM_BLOCK 2048
CPU_CLONES static double sum_f32_serial(const float *a, int64_t n) {
  double s = 0;
  int64_t i = 0;
  for (; i + SUM_BLOCK <= n; i += SUM_BLOCK) {
    float lane[64] = {0};
    for (int64_t j = 0; j < SUM_BLOCK; j += 64)
      for (int k = 0; k < 64; k++) lane[k] += a[i + j + k];
    for (int w = 32; w > 0; w /= 2)
      for (int k = 0; k < w; k++) lane[k] += lane[k + w];
    s += lane[0];
  }
  for (; i < n; i++) s += a[i];
  return s;
}

/* The same sums in AVX-512 registers, for float32 (kind 0), bf16 (1) and
   fp16 (2): lane k of the 64 is lane k % 16 of accumulator k / 16, the
   pairwise steps the same adds: equal, bit for bit, to sum_f32_serial (and so
   the same on any machine and thread count). */
#ifdef ZV512
ZV512_FN __m512 sum_ld(const void *p, int64_t i, int kind) {
  if (kind == 0) return _mm512_loadu_ps((const float *)p + i);
  if (kind == 1) return zv16_ld_bf16((const uint16_t *)p + i, 0xffff);
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}
ZV512_FN double sum_serial_512(const void *a, int64_t n, int kind) {
  double s = 0;
  int64_t i = 0;
  for (; i + SUM_BLOCK <= n; i += SUM_BLOCK) {
    __m512 l0 = _mm512_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
    for (int64_t j = i; j < i + SUM_BLOCK; j += 64) {
      l0 = _mm512_add_ps(l0, sum_ld(a, j, kind));
      l1 = _mm512_add_ps(l1, sum_ld(a, j + 16, kind));
      l2 = _mm512_add_ps(l2, sum_ld(a, j + 32, kind));
      l3 = _mm512_add_ps(l3, sum_ld(a, j + 48, kind));
    }
    l0 = _mm512_add_ps(_mm512_add_ps(l0, l2), _mm512_add_ps(l1, l3)); /* w = 32, then 16 */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(l0), _mm512_extractf32x8_ps(l0, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    s += _mm_cvtss_f32(q);
  }
  const float *f = (const float *)a;
  const uint16_t *hp = (const uint16_t *)a;
  for (; i < n; i++) s += kind == 0 ? f[i] : kind == 1 ? zm_bf16_to_f32(hp[i]) : zm_f16_to_f32(hp[i]);
  return s;
}
/* one copy per kind, the kind's branches gone */
ZV512_TARGET static double sum_512_f32(const void *a, int64_t n) { return sum_serial_512(a, n, 0); }
ZV512_TARGET static double sum_512_bf16(const void *a, int64_t n) { return sum_serial_512(a, n, 1); }
ZV512_TARGET static double sum_512_f16(const void *a, int64_t n) { return sum_serial_512(a, n, 2); }
#endif

static double sum_f32_ser(const float *a, int64_t n) {
#ifdef ZV512
  if (zv512_ok()) return sum_512_f32(a, n);
#endif
  return sum_f32_serial(a, n);
}

/* Long sums split into 64 pieces of whole blocks, added in order: the same
   result on any number of threads. */
static double sum_f32(const float *a, int64_t n) {
  if (n < 4 * CPU_GRAIN) return sum_f32_ser(a, n);
  double part[64];
  int64_t blocks = n / SUM_BLOCK, per = (blocks + 63) / 64 * SUM_BLOCK;
#pragma omp parallel for
  for (int p = 0; p < 64; p++) {
    int64_t lo = p * per, hi = p == 63 ? n : (p + 1) * per;
    if (lo > n) lo = n;
    if (hi > n) hi = n;
    part[p] = sum_f32_ser(a + lo, hi - lo);
  }
  double s = 0;
  for (int p = 0; p < 64; p++) s += part[p];
  return s;
}

/* The same sums over 16-bit values, widened as they are read: equal, bit for
   bit, to the float32 sums of the converted tensor. */
#ifdef ZV512
#define SUM16_512(a, n, KIND) \
  if (zv512_ok()) return KIND == 1 ? sum_512_bf16(a, n) : sum_512_f16(a, n);
#else
#define SUM16_512(a, n, KIND)
#endif
#define SUM16(SER, PAR, LD, KIND)                                             \
  CPU_CLONES static double SER(const uint16_t *a, int64_t n) {                \
    SUM16_512(a, n, KIND)                                                     \
    double s = 0;                                                             \
    int64_t i = 0;                                                            \
    for (; i + SUM_BLOCK <= n; i += SUM_BLOCK) {                              \
      float lane[64] = {0};                                                   \
      for (int64_t j = 0; j < SUM_BLOCK; j += 64)                             \
        for (int k = 0; k < 64; k++) lane[k] += LD(a[i + j + k]);             \
      for (int w = 32; w > 0; w /= 2)                                         \
        for (int k = 0; k < w; k++) lane[k] += lane[k + w];                   \
      s += lane[0];                                                           \
    }                                                                         \
    for (; i < n; i++) s += LD(a[i]);                                         \
    return s;                                                                 \
  }                                                                           \
  static double PAR(const uint16_t *a, int64_t n) {                           \
    if (n < 4 * CPU_GRAIN) return SER(a, n);                                  \
    double part[64];                                                          \
    int64_t blocks = n / SUM_BLOCK, per = (blocks + 63) / 64 * SUM_BLOCK;     \
    _Pragma("omp parallel for")                                               \
    for (int p = 0; p < 64; p++) {                                            \
      int64_t lo = p * per, hi = p == 63 ? n : (p + 1) * per;                 \
      if (lo > n) lo = n;                                                     \
      if (hi > n) hi = n;                                                     \
      part[p] = SER(a + lo, hi - lo);                                         \
    }                                                                         \
    double s = 0;                                                             \
    for (int p = 0; p < 64; p++) s += part[p];                                \
    return s;                                                                 \
  }
SUM16(sum_bf16_serial, sum_bf16, LD_BF, 1)
SUM16(sum_f16_serial, sum_f16, LD_H, 2)

/* max (BETTER >) or min (BETTER <) over r (stride inner) for each (outer, inner);
   NaN wins, the first best kept */
#define MAX_BODY(T, BETTER)                                                      \
  for (int64_t o = 0; o < outer; o++)                                      \
    for (int64_t i = 0; i < inner; i++) {                                  \
      const T *p = a + o * r * inner + i;                                  \
      T best = p[0];                                                       \
      int64_t bi = 0;                                                      \
      for (int64_t j = 1; j < r; j++) {                                    \
        T v = p[j * inner];                                                \
        if (v BETTER best || (v != v && best == best)) {                   \
          best = v;                                                        \
          bi = j;                                                          \
        }                                                                  \
      }                                                                    \
      out[o * inner + i] = best;                                           \
      if (idx) idx[o * inner + i] = bi;                                    \
    }

/* Column sums of a block w wide, rows pitch apart. */
#define SUM_PITCH(NAME, T, ACC)                                                   \
  CPU_CLONES static void NAME(T *out, const T *a, int64_t r, int64_t w, int64_t pitch, ACC *acc) { \
    for (int64_t i = 0; i < w; i++) acc[i] = 0;                                   \
    for (int64_t j = 0; j < r; j++) {                                             \
      const T *row = a + j * pitch;                                               \
      for (int64_t i = 0; i < w; i++) acc[i] += row[i];                           \
    }                                                                             \
    for (int64_t i = 0; i < w; i++) out[i] = (T)acc[i];                           \
  }
/* float32 column sums: blocks of SUM_PITCH_ROWS rows summed in float lanes,
   the block sums added in double (as the whole-tensor sums block theirs):
   half the vector work of converting every value to double, and as exact for
   any number of rows. Each column sums its rows in one fixed order. 16-bit
   values are widened as they are read and summed the same way, so their sums
   are the float32 sums of the widened tensor (a bf16 column sum converting
   every value to double took 2-3 times PyTorch's). */
#define SUM_PITCH_ROWS 16
#define SUM_PITCH_F(NAME, TI, LD)                                                  \
  CPU_CLONES static void NAME(float *out, const TI *a, int64_t r, int64_t w, int64_t pitch, double *acc) { \
    float part[512];                                                              \
    for (int64_t i = 0; i < w; i++) acc[i] = 0;                                   \
    for (int64_t j0 = 0; j0 < r; j0 += SUM_PITCH_ROWS) {                          \
      int64_t j1 = r - j0 < SUM_PITCH_ROWS ? r : j0 + SUM_PITCH_ROWS;             \
      const TI *row = a + j0 * pitch;                                             \
      for (int64_t i = 0; i < w; i++) part[i] = LD(row[i]);                       \
      for (int64_t j = j0 + 1; j < j1; j++) {                                     \
        row = a + j * pitch;                                                      \
        for (int64_t i = 0; i < w; i++) part[i] += LD(row[i]);                    \
      }                                                                           \
      for (int64_t i = 0; i < w; i++) acc[i] += part[i];                          \
    }                                                                             \
    for (int64_t i = 0; i < w; i++) out[i] = (float)acc[i];                       \
  }
#define LD_F32(x) (x)
SUM_PITCH_F(sum_pitch_f32, float, LD_F32)
SUM_PITCH_F(sum_pitch_bf16, uint16_t, LD_BF)
SUM_PITCH_F(sum_pitch_f16, uint16_t, LD_H)
#undef LD_F32
SUM_PITCH(sum_pitch_f64, double, double)
SUM_PITCH(sum_pitch_i64, int64_t, uint64_t)

#define SUM_KERNEL(T, SUMFN, PITCHFN, ACC) SUM_KERNEL_IO(T, T, SUMFN, PITCHFN, ACC)
/* TI in, TO out (a 16-bit input sums into float32) */
#define SUM_KERNEL_IO(T, TI, SUMFN, PITCHFN, ACC)                               \
  {                                                                             \
    T *out = (T *)tensor_ptr(outt);                                             \
    const TI *a = (const TI *)tensor_ptr(at);                                   \
    if (inner == 1 && outer == 1) {                                             \
      /* not inside the region below: made from an inactive (if false)       \
         region, the sum's own parallel region is a nested one, for which     \
         libgomp starts a new thread on every call */                         \
      out[0] = (T)SUMFN(a, r);                                                  \
    } else if (inner == 1) {                                                    \
      _Pragma("omp parallel for if (outer * r >= CPU_GRAIN && outer > 1)")      \
      for (int64_t o = 0; o < outer; o++) out[o] = (T)SUMFN(a + o * r, r);      \
    } else {                                                                    \
      const int64_t blk = 512;                                                  \
      int64_t nb = (inner + blk - 1) / blk;                                     \
      _Pragma("omp parallel for collapse(2) if (outer * r * inner >= CPU_GRAIN)") \
      for (int64_t o = 0; o < outer; o++)                                       \
        for (int64_t b = 0; b < nb; b++) {                                      \
          int64_t i0 = b * blk, w = inner - i0 < blk ? inner - i0 : blk;        \
          ACC acc[512];                                                         \
          PITCHFN(out + o * inner + i0, a + o * r * inner + i0, r, w, inner, acc); \
        }                                                                       \
    }                                                                           \
  }

/* Integer sums wrap around in two's complement, as PyTorch's do: they
   accumulate in uint64_t, where overflow is defined. */
static uint64_t sum_i64(const int64_t *a, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; i++) s += (uint64_t)a[i];
  return s;
}

zorch_status cpu_reduce(red_op op, zorch_tensor *outt, zorch_tensor *idxt, const zorch_tensor *at,
                        int64_t outer, int64_t r, int64_t inner) {
  int64_t *idx = idxt ? (int64_t *)tensor_ptr(idxt) : NULL;
  if (op == RED_SUM) {
    switch (at->dtype) {
      case ZORCH_F32: SUM_KERNEL(float, sum_f32, sum_pitch_f32, double) return ZORCH_OK;
      case ZORCH_F64: SUM_KERNEL(double, sum_f64, sum_pitch_f64, double) return ZORCH_OK;
      case ZORCH_I64: SUM_KERNEL(int64_t, sum_i64, sum_pitch_i64, uint64_t) return ZORCH_OK;
      case ZORCH_BF16:
        if (outt->dtype != ZORCH_F32) break;
        SUM_KERNEL_IO(float, uint16_t, sum_bf16, sum_pitch_bf16, double) return ZORCH_OK;
      case ZORCH_F16:
        if (outt->dtype != ZORCH_F32) break;
        SUM_KERNEL_IO(float, uint16_t, sum_f16, sum_pitch_f16, double) return ZORCH_OK;
      default: break;
    }
  } else if (r > 0) {
#define MINMAX(T)                                \
  T *out = (T *)tensor_ptr(outt);                \
  const T *a = (const T *)tensor_ptr(at);        \
  if (op == RED_MAX) {                           \
    MAX_BODY(T, >)                               \
  } else {                                       \
    MAX_BODY(T, <)                               \
  }
    CPU_REAL_DISPATCH(at->dtype, op == RED_MAX ? "max" : "min", MINMAX);
#undef MINMAX
    return ZORCH_OK;
  }
  return err_set(ZORCH_ERR_DTYPE, "%s: no CPU kernel for dtype %s",
                 op == RED_SUM ? "sum" : op == RED_MAX ? "max" : "min",
                 zorch_dtype_name(at->dtype));
}

#define MAX_BWD(T)                                                          \
  {                                                                         \
    T *gi = (T *)tensor_ptr(gin);                                           \
    const T *gg = (const T *)tensor_ptr(g);                                 \
    for (int64_t o = 0; o < outer; o++)                                     \
      for (int64_t i = 0; i < inner; i++) {                                 \
        int64_t j = idx[o * inner + i];                                     \
        gi[(o * r + j) * inner + i] += gg[o * inner + i];                   \
      }                                                                     \
  }

zorch_status cpu_max_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *idxt,
                         int64_t outer, int64_t r, int64_t inner) {
  const int64_t *idx = (const int64_t *)tensor_ptr(idxt);
  (void)r;
  CPU_FLOAT_DISPATCH(gin->dtype, "max backward", MAX_BWD);
  return ZORCH_OK;
}

#define CUMSUM(T, ACC)                                                        \
  {                                                                         \
    T *o_ = (T *)tensor_ptr(out);                                           \
    const T *a_ = (const T *)tensor_ptr(a);                                 \
    _Pragma("omp parallel for collapse(2) if (outer * n * inner >= CPU_GRAIN)") \
    for (int64_t o = 0; o < outer; o++)                                     \
      for (int64_t i = 0; i < inner; i++) {                                 \
        ACC s = 0;                                                          \
        for (int64_t k = 0; k < n; k++) {                                   \
          int64_t j = reverse ? n - 1 - k : k, at = (o * n + j) * inner + i;  \
          s += a_[at];                                                      \
          o_[at] = (T)s;                                                    \
        }                                                                   \
      }                                                                     \
  }

zorch_status cpu_cumsum(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t n,
                        int64_t inner, bool reverse) {
  /* (the running sum: double for the floats, unsigned for int64 so overflow wraps) */
#define CUMSUM_ACC_float double
#define CUMSUM_ACC_double double
#define CUMSUM_ACC_int64_t uint64_t
#define CUMSUM_T(T) CUMSUM(T, CUMSUM_ACC_##T)
  CPU_REAL_DISPATCH(a->dtype, "cumsum", CUMSUM_T);
#undef CUMSUM_T
  return ZORCH_OK;
}

#define SOFTMAX(T)                                                               \
  {                                                                              \
    T *y = (T *)tensor_ptr(out);                                                 \
    const T *x = (const T *)tensor_ptr(a);                                       \
    _Pragma("omp parallel for collapse(2) if (outer * c * inner >= CPU_GRAIN)")  \
    for (int64_t o = 0; o < outer; o++)                                          \
      for (int64_t i = 0; i < inner; i++) {                                      \
        const T *xp = x + o * c * inner + i;                                     \
        T *yp = y + o * c * inner + i;                                           \
        T mx = -INFINITY;                                                        \
        for (int64_t j = 0; j < c; j++)                                          \
          if (xp[j * inner] > mx || xp[j * inner] != xp[j * inner]) mx = xp[j * inner]; \
        double sum = 0;                                                          \
        for (int64_t j = 0; j < c; j++) sum += exp(xp[j * inner] - mx);          \
        if (log_) {                                                              \
          T lse = (T)log(sum);                                                   \
          for (int64_t j = 0; j < c; j++) yp[j * inner] = xp[j * inner] - mx - lse; \
        } else {                                                                 \
          T inv = (T)(1.0 / sum);                                                \
          for (int64_t j = 0; j < c; j++) yp[j * inner] = exp(xp[j * inner] - mx) * inv; \
        }                                                                        \
      }                                                                          \
  }

/* One contiguous float32 row: the max (NaN, when present, wins and turns the row
   to NaN as in the general loop), e^(x - max) in registers summed in 16 lanes,
   one scale. */
CPU_CLONES static void softmax_row_f32(float *y, const float *x, int64_t c, bool log_) {
  float mx = -INFINITY;
  int nan = 0;
  for (int64_t j = 0; j < c; j++) {
    mx = x[j] > mx ? x[j] : mx;
    nan |= x[j] != x[j];
  }
  if (nan) mx = NAN;
  float lane[16] = {0};
  int64_t j = 0;
  if (log_) {
    for (; j + 16 <= c; j += 16)
      for (int k = 0; k < 16; k++) lane[k] += zv_expf(x[j + k] - mx);
  } else {
    for (; j + 16 <= c; j += 16)
      for (int k = 0; k < 16; k++) lane[k] += y[j + k] = zv_expf(x[j + k] - mx);
  }
  for (; j < c; j++) {
    float e = zv_expf(x[j] - mx);
    if (!log_) y[j] = e;
    lane[0] += e;
  }
  double sum = 0;
  for (int k = 0; k < 16; k++) sum += lane[k];
  if (log_) {
    float lse = (float)log(sum);
    for (j = 0; j < c; j++) y[j] = (x[j] - mx) - lse;
  } else {
    float inv = (float)(1.0 / sum);
    for (j = 0; j < c; j++) y[j] *= inv;
  }
}

#define ROW16_KEEP 4096
/* 16-bit rows go through float32 blocks of RB values on the stack: widened
   by one loop, computed on, narrowed by another (each loop on its own
   vectorises; the conversions inside the math kept it scalar). */
#define RB 256
#define WIDEN_NARROW(SUF, LD, ST)                                                   \
  static inline void widen_##SUF(float *f, const uint16_t *h, int64_t n) {          \
    for (int64_t i = 0; i < n; i++) f[i] = LD(h[i]);                                \
  }                                                                                 \
  static inline void narrow_##SUF(uint16_t *h, const float *f, int64_t n) {         \
    for (int64_t i = 0; i < n; i++) h[i] = ST(f[i]);                                \
  }
WIDEN_NARROW(bf16, LD_BF, ST_BF)
WIDEN_NARROW(f16, LD_H, ST_H)

/* A 16-bit row: softmax_row_f32's arithmetic on the widened values (the same
   lanes, so the same float32 results), rounded once. A row of up to ROW16_KEEP
   elements keeps its e^(x - max) in a float32 buffer on the stack for the
   output pass; a longer one takes them again (the exp is most of the cost). */
#define SOFTMAX_ROW16(NAME, SUF)                                                    \
  CPU_CLONES static void NAME(uint16_t *y, const uint16_t *x, int64_t c, bool log_) { \
    float buf[RB], mx = -INFINITY, kept[ROW16_KEEP];                                \
    bool keep = !log_ && c <= ROW16_KEEP;                                           \
    int nan = 0;                                                                    \
    for (int64_t j0 = 0; j0 < c; j0 += RB) {                                        \
      int64_t m = c - j0 < RB ? c - j0 : RB;                                        \
      widen_##SUF(buf, x + j0, m);                                                  \
      for (int64_t j = 0; j < m; j++) {                                             \
        mx = buf[j] > mx ? buf[j] : mx;                                             \
        nan |= buf[j] != buf[j];                                                    \
      }                                                                             \
    }                                                                               \
    if (nan) mx = NAN;                                                              \
    float lane[16] = {0};                                                           \
    for (int64_t j0 = 0; j0 < c; j0 += RB) {                                        \
      int64_t m = c - j0 < RB ? c - j0 : RB, j = 0;                                 \
      widen_##SUF(buf, x + j0, m);                                                  \
      for (int64_t i = 0; i < m; i++) buf[i] = zv_expf(buf[i] - mx);                \
      if (keep) memcpy(kept + j0, buf, sizeof(float) * (size_t)m);                  \
      for (; j + 16 <= m; j += 16)                                                  \
        for (int k = 0; k < 16; k++) lane[k] += buf[j + k];                         \
      for (; j < m; j++) lane[0] += buf[j];                                         \
    }                                                                               \
    double sum = 0;                                                                 \
    for (int k = 0; k < 16; k++) sum += lane[k];                                    \
    float lse = (float)log(sum), inv = (float)(1.0 / sum);                          \
    for (int64_t j0 = 0; j0 < c; j0 += RB) {                                        \
      int64_t m = c - j0 < RB ? c - j0 : RB;                                        \
      if (keep) {                                                                   \
        for (int64_t j = 0; j < m; j++) buf[j] = kept[j0 + j] * inv;                \
      } else {                                                                      \
        widen_##SUF(buf, x + j0, m);                                                \
        if (log_)                                                                   \
          for (int64_t j = 0; j < m; j++) buf[j] = (buf[j] - mx) - lse;             \
        else                                                                        \
          for (int64_t j = 0; j < m; j++) buf[j] = zv_expf(buf[j] - mx) * inv;      \
      }                                                                             \
      narrow_##SUF(y + j0, buf, m);                                                 \
    }                                                                               \
  }
SOFTMAX_ROW16(softmax_row_bf16, bf16)
SOFTMAX_ROW16(softmax_row_f16, f16)

/* ---- AVX-512 rows (vec512.h) -------------------------------------------------------
   kind: 0 float32, 1 bfloat16, 2 float16. The float32 and the 16-bit rows run
   the same arithmetic on the same lanes (the tail masked into lanes 0..), so a
   16-bit row is the float32 row of its widened values, rounded once. */
#ifdef ZV512
ZV512_FN __m512 zr_ld(const void *p, int64_t j, __mmask16 m, int kind) {
  if (kind == 0) return _mm512_maskz_loadu_ps(m, (const float *)p + j);
  return zv16_ld((const uint16_t *)p + j, m, kind == 1);
}
ZV512_FN void zr_st(void *p, int64_t j, __m512 v, __mmask16 m, int kind) {
  if (kind == 0) _mm512_mask_storeu_ps((float *)p + j, m, v);
  else zv16_st((uint16_t *)p + j, v, m, kind == 1);
}
/* the 16 lanes added in double, lane 0 first */
ZV512_FN double zr_lanes(__m512 v) {
  float l[16];
  _mm512_storeu_ps(l, v);
  double s = 0;
  for (int k = 0; k < 16; k++) s += l[k];
  return s;
}

/* The max (a NaN anywhere makes it NaN, and so the row), e^(x - max) summed in
   16 lanes, one scale. A float32 row keeps its exponentials in y, a 16-bit row
   of up to ROW16_KEEP values in a float32 buffer on the stack; a longer one
   takes them again. */
static inline __attribute__((always_inline)) ZV512_TARGET void softmax_row_512_of(void *y, const void *x, int64_t c,
                                                                        bool log_, int kind) {
  float kept[ROW16_KEEP];
  float *ke = kind == 0 ? (float *)y : (!log_ && c <= ROW16_KEEP ? kept : NULL);
  __m512 vmx = ZV_C(-INFINITY);
  __mmask16 nan = 0;
  for (int64_t j = 0; j < c; j += 16) {
    __mmask16 m = zv512_mask(c - j);
    __m512 v = zr_ld(x, j, m, kind);
    vmx = _mm512_mask_max_ps(vmx, m, vmx, v);
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
  }
  __m512 mx = nan ? ZV_C(NAN) : _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
  __m512 lane = _mm512_setzero_ps();
  for (int64_t j = 0; j < c; j += 16) {
    __mmask16 m = zv512_mask(c - j);
    __m512 e = zv16_expf(_mm512_sub_ps(zr_ld(x, j, m, kind), mx));
    lane = _mm512_mask_add_ps(lane, m, lane, e);
    if (ke && !log_) _mm512_mask_storeu_ps(ke + j, m, e);
  }
  double sum = zr_lanes(lane);
  if (log_) {
    __m512 lse = _mm512_set1_ps((float)log(sum));
    for (int64_t j = 0; j < c; j += 16) {
      __mmask16 m = zv512_mask(c - j);
      zr_st(y, j, _mm512_sub_ps(_mm512_sub_ps(zr_ld(x, j, m, kind), mx), lse), m, kind);
    }
    return;
  }
  __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
  for (int64_t j = 0; j < c; j += 16) {
    __mmask16 m = zv512_mask(c - j);
    __m512 e = ke ? _mm512_maskz_loadu_ps(m, ke + j) : zv16_expf(_mm512_sub_ps(zr_ld(x, j, m, kind), mx));
    zr_st(y, j, _mm512_mul_ps(e, inv), m, kind);
  }
}

/* One copy per kind: with kind a constant, the loads and stores lose their
   branches (the loops' kind tests and jumps were a quarter of the 16-bit
   row's samples in `perf`). */
ZV512_TARGET static void softmax_row_512_f32(void *y, const void *x, int64_t c, bool log_) {
  softmax_row_512_of(y, x, c, log_, 0);
}
ZV512_TARGET static void softmax_row_512_bf16(void *y, const void *x, int64_t c, bool log_) {
  softmax_row_512_of(y, x, c, log_, 1);
}
ZV512_TARGET static void softmax_row_512_f16(void *y, const void *x, int64_t c, bool log_) {
  softmax_row_512_of(y, x, c, log_, 2);
}
ZV512_TARGET static void softmax_row_512(void *y, const void *x, int64_t c, bool log_, int kind) {
  if (kind == 0) softmax_row_512_f32(y, x, c, log_);
  else if (kind == 1) softmax_row_512_bf16(y, x, c, log_);
  else softmax_row_512_f16(y, x, c, log_);
}

/* The gradient: s = sum(g * y) (softmax) or sum(g) (log_softmax) in 16 lanes,
   then gx = y (g - s) or g - e^y s. */
ZV512_FN void softmax_bwd_row_512(void *gx, const void *g, const void *y, int64_t c, bool log_, int kind) {
  __m512 lane = _mm512_setzero_ps();
  for (int64_t j = 0; j < c; j += 16) {
    __mmask16 m = zv512_mask(c - j);
    __m512 gv = zr_ld(g, j, m, kind);
    lane = _mm512_add_ps(lane, log_ ? gv : _mm512_mul_ps(gv, zr_ld(y, j, m, kind)));
  }
  __m512 s = _mm512_set1_ps((float)zr_lanes(lane));
  for (int64_t j = 0; j < c; j += 16) {
    __mmask16 m = zv512_mask(c - j);
    __m512 gv = zr_ld(g, j, m, kind), yv = zr_ld(y, j, m, kind);
    __m512 r = log_ ? _mm512_fnmadd_ps(zv16_expf(yv), s, gv) : _mm512_mul_ps(yv, _mm512_sub_ps(gv, s));
    zr_st(gx, j, r, m, kind);
  }
}
#endif

static int row_kind(zorch_dtype dt) { return dt == ZORCH_BF16 ? 1 : dt == ZORCH_F16 ? 2 : 0; }

zorch_status cpu_softmax(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t c,
                         int64_t inner, bool log_) {
#ifdef ZV512
  if ((a->dtype == ZORCH_F32 || a->dtype == ZORCH_BF16 || a->dtype == ZORCH_F16) && inner == 1 &&
      out->dtype == a->dtype && zv512_ok()) {
    char *y = tensor_ptr(out);
    const char *x = tensor_ptr(a);
    int kind = row_kind(a->dtype);
    size_t row = (size_t)c * dtype_sizes[a->dtype];
#pragma omp parallel for if (outer * c >= CPU_GRAIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) softmax_row_512(y + (size_t)o * row, x + (size_t)o * row, c, log_, kind);
    return ZORCH_OK;
  }
#endif
  if ((a->dtype == ZORCH_BF16 || a->dtype == ZORCH_F16) && inner == 1 && out->dtype == a->dtype) {
    uint16_t *y = (uint16_t *)tensor_ptr(out);
    const uint16_t *x = (const uint16_t *)tensor_ptr(a);
    bool bf = a->dtype == ZORCH_BF16;
#pragma omp parallel for if (outer * c >= CPU_GRAIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
      if (bf) softmax_row_bf16(y + o * c, x + o * c, c, log_);
      else softmax_row_f16(y + o * c, x + o * c, c, log_);
    }
    return ZORCH_OK;
  }
  if (a->dtype == ZORCH_F32 && inner == 1) {
    float *y = (float *)tensor_ptr(out);
    const float *x = (const float *)tensor_ptr(a);
#pragma omp parallel for if (outer * c >= CPU_GRAIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) softmax_row_f32(y + o * c, x + o * c, c, log_);
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(a->dtype, "softmax", SOFTMAX);
  return ZORCH_OK;
}

/* The softmax gradient of one row in float32 registers: s = sum(g * y) (softmax)
   or sum(g) (log_softmax) in 16 lanes, then one pass that writes gx. */
CPU_CLONES static void softmax_bwd_row_f32(float *gx, const float *g, const float *y, int64_t c,
                                           bool log_) {
  float lane[16] = {0};
  int64_t j = 0;
  if (log_) {
    for (; j + 16 <= c; j += 16)
      for (int k = 0; k < 16; k++) lane[k] += g[j + k];
    for (; j < c; j++) lane[0] += g[j];
  } else {
    for (; j + 16 <= c; j += 16)
      for (int k = 0; k < 16; k++) lane[k] += g[j + k] * y[j + k];
    for (; j < c; j++) lane[0] += g[j] * y[j];
  }
  double sd = 0;
  for (int k = 0; k < 16; k++) sd += lane[k];
  float s = (float)sd;
  if (log_)
    for (j = 0; j < c; j++) gx[j] = g[j] - zv_expf(y[j]) * s;
  else
    for (j = 0; j < c; j++) gx[j] = y[j] * (g[j] - s);
}

/* The same on 16-bit rows through float32 blocks, rounded once. */
#define SOFTMAX_BWD_ROW16(NAME, SUF)                                                     \
  CPU_CLONES static void NAME(uint16_t *gx, const uint16_t *g, const uint16_t *y, int64_t c, \
                              bool log_) {                                               \
    float gb[RB], yb[RB], lane[16] = {0};                                                \
    for (int64_t j0 = 0; j0 < c; j0 += RB) {                                             \
      int64_t m = c - j0 < RB ? c - j0 : RB, j = 0;                                      \
      widen_##SUF(gb, g + j0, m);                                                        \
      if (!log_) {                                                                       \
        widen_##SUF(yb, y + j0, m);                                                      \
        for (int64_t i = 0; i < m; i++) gb[i] *= yb[i];                                  \
      }                                                                                  \
      for (; j + 16 <= m; j += 16)                                                       \
        for (int k = 0; k < 16; k++) lane[k] += gb[j + k];                               \
      for (; j < m; j++) lane[0] += gb[j];                                               \
    }                                                                                    \
    double sd = 0;                                                                       \
    for (int k = 0; k < 16; k++) sd += lane[k];                                          \
    float s = (float)sd;                                                                 \
    for (int64_t j0 = 0; j0 < c; j0 += RB) {                                             \
      int64_t m = c - j0 < RB ? c - j0 : RB;                                             \
      widen_##SUF(gb, g + j0, m);                                                        \
      widen_##SUF(yb, y + j0, m);                                                        \
      if (log_)                                                                          \
        for (int64_t i = 0; i < m; i++) gb[i] = gb[i] - zv_expf(yb[i]) * s;              \
      else                                                                               \
        for (int64_t i = 0; i < m; i++) gb[i] = yb[i] * (gb[i] - s);                     \
      narrow_##SUF(gx + j0, gb, m);                                                      \
    }                                                                                    \
  }
SOFTMAX_BWD_ROW16(softmax_bwd_row_bf16, bf16)
SOFTMAX_BWD_ROW16(softmax_bwd_row_f16, f16)

zorch_status cpu_softmax_bwd(zorch_tensor *gx, const zorch_tensor *g, const zorch_tensor *y,
                             int64_t outer, int64_t c, bool log_) {
  zorch_dtype dt = y->dtype;
  if ((dt != ZORCH_F32 && dt != ZORCH_BF16 && dt != ZORCH_F16) || g->dtype != dt || gx->dtype != dt)
    return err_set(ZORCH_ERR_DTYPE, "softmax: no CPU backward for dtype %s", zorch_dtype_name(dt));
  char *o = tensor_ptr(gx);
  const char *gp = tensor_ptr(g), *yp = tensor_ptr(y);
  size_t row = (size_t)c * dtype_sizes[dt];
#ifdef ZV512
  if (zv512_ok()) {
    int kind = row_kind(dt);
#pragma omp parallel for if (outer * c >= CPU_GRAIN && outer > 1)
    for (int64_t r = 0; r < outer; r++) {
      size_t off = (size_t)r * row;
      softmax_bwd_row_512(o + off, gp + off, yp + off, c, log_, kind);
    }
    return ZORCH_OK;
  }
#endif
#pragma omp parallel for if (outer * c >= CPU_GRAIN && outer > 1)
  for (int64_t r = 0; r < outer; r++) {
    size_t off = (size_t)r * row;
    if (dt == ZORCH_F32)
      softmax_bwd_row_f32((float *)(o + off), (const float *)(gp + off), (const float *)(yp + off), c, log_);
    else if (dt == ZORCH_BF16)
      softmax_bwd_row_bf16((uint16_t *)(o + off), (const uint16_t *)(gp + off),
                           (const uint16_t *)(yp + off), c, log_);
    else
      softmax_bwd_row_f16((uint16_t *)(o + off), (const uint16_t *)(gp + off),
                          (const uint16_t *)(yp + off), c, log_);
  }
  return ZORCH_OK;
}
