/* quant.c: the kernels of the quantised weights (layouts in ops/backend/quant.h,
   design in docs/quantization.md). qlinear reads each weight once: up to
   QGEMV_ROWS rows of x take the GEMV loops, which widen the weights in
   registers and multiply them with every row; more rows (a prompt) widen a
   tile of weight rows into a float32 block the cache holds and run the GEMM
   on it. The GEMV loops come as AVX-512 intrinsics (zv512_ok) and as portable
   loops built for the baseline, AVX2 and AVX-512 (CPU_CLONES). */
#include <math.h>
#include <string.h>

#include "../backend/quant.h"
#include "cpu.h"
#include "kernels.h"
#include "vec512.h"

#define QGEMV_ROWS 4 /* rows of x the GEMV loops take at once */
#define QTILE_BYTES (1 << 20) /* the float32 weight tile of the GEMM path */

/* ---- quantize ------------------------------------------------------------------------------ */
/* int8: scale = max |w| / 127 (float16), q = round(w / scale) in -127..127.
   int4: per group, m = the weight of largest magnitude, scale = m / -8
   (float16), q = round(w / scale) + 8 in 0..15: m itself is level 0, the
   whole range -8..7 is used (an extra level on m's side). Rounding is to
   nearest even, as PyTorch's round. Returns false on a non-finite weight
   or a scale past float16. */
static bool quant_row8(int8_t *q, uint16_t *s, const float *w, int64_t in) {
  float amax = 0;
  for (int64_t k = 0; k < in; k++) {
    if (!isfinite(w[k])) return false;
    amax = fmaxf(amax, fabsf(w[k]));
  }
  *s = zm_f32_to_f16(amax / 127.0f);
  float sc = zm_f16_to_f32(*s);
  if (!isfinite(sc)) return false;
  for (int64_t k = 0; k < in; k++) {
    float v = sc > 0 ? nearbyintf(w[k] / sc) : 0;
    q[k] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
  }
  return true;
}

static bool quant_row4(uint8_t *q, uint16_t *s, const float *w, int64_t in, int64_t group) {
  memset(q, 0, (size_t)(in / 2));
  for (int64_t g = 0; g < in / group; g++) {
    const float *wg = w + g * group;
    float m = 0;
    for (int64_t j = 0; j < group; j++) {
      if (!isfinite(wg[j])) return false;
      if (fabsf(wg[j]) > fabsf(m)) m = wg[j];
    }
    s[g] = zm_f32_to_f16(m / -8.0f);
    float sc = zm_f16_to_f32(s[g]);
    if (!isfinite(sc)) return false;
    for (int64_t j = 0; j < group; j++) {
      float v = sc != 0 ? nearbyintf(wg[j] / sc) + 8 : 8;
      int n = (int)(v < 0 ? 0 : v > 15 ? 15 : v);
      int64_t k = g * group + j;
      q[(k / ZQ_BLOCK) * (ZQ_BLOCK / 2) + k % (ZQ_BLOCK / 2)] |= (uint8_t)(k % ZQ_BLOCK < ZQ_BLOCK / 2 ? n : n << 4);
    }
  }
  return true;
}

zorch_status cpu_quantize(zorch_tensor *q, zorch_tensor *scales, const zorch_tensor *w, int64_t group) {
  int64_t out = w->shape[0], in = w->shape[1];
  const float *W = (const float *)tensor_ptr(w);
  uint16_t *S = (uint16_t *)tensor_ptr(scales);
  char *Q = tensor_ptr(q);
  int bad = 0;
#pragma omp parallel for reduction(| : bad) if (out * in >= CPU_GRAIN)
  for (int64_t o = 0; o < out; o++) {
    bool ok = group == 0 ? quant_row8((int8_t *)Q + o * in, S + o, W + o * in, in)
                         : quant_row4((uint8_t *)Q + o * (in / 2), S + o * (in / group), W + o * in, in, group);
    if (!ok) bad |= 1;
  }
  if (bad)
    return err_set(ZORCH_ERR_ARG, "quantize: w holds NaN, infinite values or magnitudes past float16 scales");
  return ZORCH_OK;
}

zorch_status cpu_dequantize(zorch_tensor *w, const zorch_tensor *q, const zorch_tensor *scales, int64_t group) {
  int64_t out = w->shape[0], in = w->shape[1];
  int64_t qrow = group ? in / 2 : in, srow = group ? in / group : 1;
  const char *Q = tensor_ptr(q);
  const uint16_t *S = (const uint16_t *)tensor_ptr(scales);
  float *W = (float *)tensor_ptr(w);
#pragma omp parallel for if (out * in >= CPU_GRAIN_MEM)
  for (int64_t o = 0; o < out; o++)
    for (int64_t k = 0; k < in; k++) W[o * in + k] = zq_weight(Q + o * qrow, S + o * srow, k, group);
  return ZORCH_OK;
}

/* ---- qlinear: the GEMV loops ------------------------------------------------------------- */
/* y[r][o] = x[r] · w[o] + b[o] for R <= QGEMV_ROWS rows of x (ldx, ldy apart)
   and output rows o0 .. o1 - 1. */
typedef struct {
  float *y;
  const float *x, *b;
  const void *q;
  const uint16_t *s;
  int64_t ldx, ldy, in, group;
} qgemv;

/* The portable loops: 16 partial sums a row, which the compilers keep in
   vector registers (target_clones builds them for AVX2 and AVX-512 too). */
CPU_CLONES static void gemv8_any(const qgemv *a, int R, int64_t o0, int64_t o1) {
  int64_t in = a->in;
  for (int64_t o = o0; o < o1; o++) {
    const int8_t *qr = (const int8_t *)a->q + o * in;
    float acc[QGEMV_ROWS][16] = {{0}};
    int64_t k = 0;
    for (; k + 16 <= in; k += 16)
      for (int r = 0; r < R; r++)
        for (int j = 0; j < 16; j++) acc[r][j] += a->x[r * a->ldx + k + j] * (float)qr[k + j];
    for (; k < in; k++)
      for (int r = 0; r < R; r++) acc[r][0] += a->x[r * a->ldx + k] * (float)qr[k];
    float sc = zm_f16_to_f32(a->s[o]);
    for (int r = 0; r < R; r++) {
      float t = 0;
      for (int j = 0; j < 16; j++) t += acc[r][j];
      a->y[r * a->ldy + o] = t * sc + (a->b ? a->b[o] : 0);
    }
  }
}

CPU_CLONES static void gemv4_any(const qgemv *a, int R, int64_t o0, int64_t o1) {
  int64_t in = a->in, ng = in / a->group;
  for (int64_t o = o0; o < o1; o++) {
    const uint8_t *qr = (const uint8_t *)a->q + o * (in / 2);
    const uint16_t *sr = a->s + o * ng;
    float acc[QGEMV_ROWS][16] = {{0}};
    for (int64_t k = 0; k < in; k += ZQ_BLOCK) {
      const uint8_t *qb = qr + k / 2;
      float sc = zm_f16_to_f32(sr[k / a->group]), lo[16], hi[16];
      for (int j = 0; j < 16; j++) lo[j] = (float)((qb[j] & 15) - 8) * sc, hi[j] = (float)((qb[j] >> 4) - 8) * sc;
      for (int r = 0; r < R; r++) {
        const float *xr = a->x + r * a->ldx + k;
        for (int j = 0; j < 16; j++) acc[r][j] += xr[j] * lo[j] + xr[16 + j] * hi[j];
      }
    }
    for (int r = 0; r < R; r++) {
      float t = 0;
      for (int j = 0; j < 16; j++) t += acc[r][j];
      a->y[r * a->ldy + o] = t + (a->b ? a->b[o] : 0);
    }
  }
}

#ifdef ZV512
/* AVX-512: 16 weights widened per instruction pair, two accumulators a row
   (two FMA chains in flight), x read from L1. */
ZV512_FN __attribute__((always_inline)) void gemv8_512_r(const qgemv *a, const int R, int64_t o0, int64_t o1) {
  int64_t in = a->in;
  for (int64_t o = o0; o < o1; o++) {
    const int8_t *qr = (const int8_t *)a->q + o * in;
    __m512 acc[QGEMV_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= in; k += 32) {
      __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(qr + k))));
      __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(qr + k + 16))));
      for (int r = 0; r < R; r++) {
        const float *xr = a->x + r * a->ldx + k;
        acc[r][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), acc[r][1]);
      }
    }
    for (; k < in; k += 16) {
      __mmask16 m = zv512_mask(in - k);
      __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, qr + k)));
      for (int r = 0; r < R; r++)
        acc[r][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, a->x + r * a->ldx + k), acc[r][0]);
    }
    float sc = zm_f16_to_f32(a->s[o]);
    for (int r = 0; r < R; r++)
      a->y[r * a->ldy + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) * sc + (a->b ? a->b[o] : 0);
  }
}

/* two 16-byte blocks (64 weights) per step, four accumulators a row; the
   weights are (n - 8) * scale, one fmsub from the nibble n (exact: the
   product of a small integer and a float16 fits float32) */
ZV512_FN __attribute__((always_inline)) void gemv4_512_r(const qgemv *a, const int R, int64_t o0, int64_t o1) {
  int64_t in = a->in, ng = in / a->group;
  const __m512i nib = _mm512_set1_epi32(15);
  for (int64_t o = o0; o < o1; o++) {
    const uint8_t *qr = (const uint8_t *)a->q + o * (in / 2);
    const uint16_t *sr = a->s + o * ng;
    __m512 acc[QGEMV_ROWS][4];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < in; k += 2 * ZQ_BLOCK) {
      int nb = k + 2 * ZQ_BLOCK <= in ? 2 : 1;
      for (int h = 0; h < nb; h++) {
        int64_t kb = k + h * ZQ_BLOCK;
        __m512 sv = _mm512_set1_ps(zm_f16_to_f32(sr[kb / a->group]));
        __m512 s8 = _mm512_mul_ps(sv, _mm512_set1_ps(8));
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qr + kb / 2)));
        __m512 lo = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, nib)), sv, s8);
        __m512 hi = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), sv, s8);
        for (int r = 0; r < R; r++) {
          const float *xr = a->x + r * a->ldx + kb;
          acc[r][2 * h] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xr), acc[r][2 * h]);
          acc[r][2 * h + 1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), acc[r][2 * h + 1]);
        }
      }
    }
    for (int r = 0; r < R; r++) {
      __m512 t = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      a->y[r * a->ldy + o] = _mm512_reduce_add_ps(t) + (a->b ? a->b[o] : 0);
    }
  }
}

/* R as a constant in each copy, so the accumulators stay in registers */
ZV512_TARGET static void gemv_512(const qgemv *a, int R, int64_t o0, int64_t o1) {
#define QCASE(n)                                                             \
  case n:                                                                    \
    if (a->group) gemv4_512_r(a, n, o0, o1); else gemv8_512_r(a, n, o0, o1); \
    break;
  switch (R) { QCASE(1) QCASE(2) QCASE(3) default: QCASE(4) }
#undef QCASE
}
#endif

/* The kernel the CPU runs: AVX-512 where it has it, unless ZORCH_NO_AVX512. */
static void gemv_rows(const qgemv *a, int R, int64_t o0, int64_t o1) {
#ifdef ZV512
  if (zv512_ok()) {
    gemv_512(a, R, o0, o1);
    return;
  }
#endif
  if (a->group) gemv4_any(a, R, o0, o1);
  else gemv8_any(a, R, o0, o1);
}

/* Rows of x in passes of QGEMV_ROWS, output rows split over the threads in
   blocks of 16. */
static void qlinear_gemv(qgemv a, int64_t rows, int64_t out) {
  int64_t nblk = (out + 15) / 16;
  for (int64_t r0 = 0; r0 < rows; r0 += QGEMV_ROWS) {
    int R = (int)(rows - r0 < QGEMV_ROWS ? rows - r0 : QGEMV_ROWS);
    qgemv p = a;
    p.x = a.x + r0 * a.ldx, p.y = a.y + r0 * a.ldy;
#pragma omp parallel for schedule(static) if (out * a.in >= CPU_GRAIN)
    for (int64_t bi = 0; bi < nblk; bi++) gemv_rows(&p, R, bi * 16, bi * 16 + 16 < out ? bi * 16 + 16 : out);
  }
}

/* ---- qlinear: the GEMM path -------------------------------------------------------------- */
/* Tiles of nt weight rows widened into float32 (QTILE_BYTES, which L2 holds)
   and multiplied by all of x with the float32 GEMM (cpu_gemm: oneDNN or BLAS),
   its epilogue adding the tile's bias. */
static zorch_status qlinear_gemm(const qgemv *a, int64_t rows, int64_t out) {
  int64_t in = a->in, nt = QTILE_BYTES / 4 / in;
  nt = nt < 16 ? 16 : nt - nt % 16;
  if (nt > out) nt = out;
  float *tile = cpu_scratch((size_t)(nt * in) * sizeof(float));
  if (!tile) return err_set(ZORCH_ERR_OOM, "qlinear: out of memory for a %lld x %lld weight tile", (long long)nt,
                            (long long)in);
  int64_t qrow = a->group ? in / 2 : in, srow = a->group ? in / a->group : 1;
  zorch_status st = ZORCH_OK;
  for (int64_t o0 = 0; o0 < out && !st; o0 += nt) {
    int64_t n = out - o0 < nt ? out - o0 : nt;
#pragma omp parallel for if (n * in >= CPU_GRAIN)
    for (int64_t o = 0; o < n; o++)
      for (int64_t k = 0; k < in; k++)
        tile[o * in + k] = zq_weight((const char *)a->q + (o0 + o) * qrow, a->s + (o0 + o) * srow, k, a->group);
    gemm_args g = {.dt = ZORCH_F32, .dev = 0, .tb = true, .m = rows, .n = n, .k = in, .lda = a->ldx, .ldb = in,
                   .ldc = a->ldy, .alpha = 1.0, .a = a->x, .b = tile, .bias = a->b ? a->b + o0 : NULL,
                   .c = a->y + o0};
    st = cpu_gemm(&g);
  }
  cpu_scratch_free(tile);
  return st;
}

zorch_status cpu_qlinear(zorch_tensor *y, const zorch_tensor *x, const zorch_tensor *q, const zorch_tensor *scales,
                         const zorch_tensor *b, int64_t rows, int64_t group) {
  int64_t out = q->shape[0], in = x->shape[x->ndim - 1];
  qgemv a = {(float *)tensor_ptr(y), (const float *)tensor_ptr(x), b ? (const float *)tensor_ptr(b) : NULL,
             tensor_ptr(q), (const uint16_t *)tensor_ptr(scales), in, out, in, group};
  if (rows == 0 || out == 0) return ZORCH_OK;
  if (rows <= QGEMV_ROWS || in == 0) {
    qlinear_gemv(a, rows, out);
    return ZORCH_OK;
  }
  return qlinear_gemm(&a, rows, out);
}
