/* quant.c: the kernels of the quantised weights (layouts in ops/backend/quant.h,
   design in docs/quantization.md). Up to QGEMV_MAX rows of x (decode),
   qlinear's GEMV loops widen the weights in registers and multiply them with
   QGEMV_ROWS rows of x a pass; more rows (a prompt) widen tiles of weight rows
   into float32 blocks and run the float32 GEMM on them. The GEMV loops come
   as AVX-512 intrinsics (zv512_ok) and as portable loops built for the
   baseline, AVX2 and AVX-512 (CPU_CLONES). */
#include <math.h>
#include <string.h>

#include "../backend/quant.h"
#include "cpu.h"
#include "kernels.h"
#include "vec512.h"

#define QGEMV_ROWS 4 /* rows of x the GEMV loops take at once */
#define QGEMV_MAX 16 /* up to which row count the GEMV loops run (in passes), the GEMM path above */
#define QTILE_BYTES (1 << 22) /* the float32 weight tile of the GEMM path (4 MiB) */

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

static void deq_row(float *dst, const void *q, const uint16_t *s, int64_t in, int64_t group);

zorch_status cpu_dequantize(zorch_tensor *w, const zorch_tensor *q, const zorch_tensor *scales, int64_t group) {
  int64_t out = w->shape[0], in = w->shape[1];
  int64_t qrow = group ? in / 2 : in, srow = group ? in / group : 1;
  const char *Q = tensor_ptr(q);
  const uint16_t *S = (const uint16_t *)tensor_ptr(scales);
  float *W = (float *)tensor_ptr(w);
#pragma omp parallel for if (out * in >= CPU_GRAIN_MEM)
  for (int64_t o = 0; o < out; o++) deq_row(W + o * in, Q + o * qrow, S + o * srow, in, group);
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

/* The portable loops: 16 partial sums a row, which the compilers vectorise
   (target_clones builds them for AVX2 and AVX-512 too); the int8 values go
   through their unsigned bytes, the form GCC widens in vector registers. */
CPU_CLONES static void gemv8_any(const qgemv *a, int R, int64_t o0, int64_t o1) {
  int64_t in = a->in;
  for (int64_t o = o0; o < o1; o++) {
    const uint8_t *qr = (const uint8_t *)a->q + o * in;
    float acc[QGEMV_ROWS][16] = {{0}}, sc = zm_f16_to_f32(a->s[o]);
    int64_t k = 0;
    for (; k + 16 <= in; k += 16) {
      const uint8_t *qb = qr + k;
      float wf[16];
      for (int j = 0; j < 16; j++) wf[j] = (float)((qb[j] ^ 128) - 128) * sc;
      for (int r = 0; r < R; r++) {
        const float *xr = a->x + r * a->ldx + k;
        for (int j = 0; j < 16; j++) acc[r][j] += xr[j] * wf[j];
      }
    }
    for (; k < in; k++)
      for (int r = 0; r < R; r++) acc[r][0] += a->x[r * a->ldx + k] * ((float)((qr[k] ^ 128) - 128) * sc);
    for (int r = 0; r < R; r++) {
      float t = 0;
      for (int j = 0; j < 16; j++) t += acc[r][j];
      a->y[r * a->ldy + o] = t + (a->b ? a->b[o] : 0);
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
      float sc = zm_f16_to_f32(sr[k / a->group]), lo[16], hi[16]; /* (the division: once per 32 weights) */
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

/* A 16-byte block of a 4-bit row as its 32 levels n - 8 (floats): the
   nibbles split and offset in bytes (cheap 128-bit operations), then widened
   16 at a time. */
ZV512_FN void zq_block_512(const uint8_t *qb, __m512 *lo, __m512 *hi) {
  const __m128i m = _mm_set1_epi8(15), c8 = _mm_set1_epi8(8);
  __m128i raw = _mm_loadu_si128((const __m128i *)qb);
  __m128i l8 = _mm_sub_epi8(_mm_and_si128(raw, m), c8), h8 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), c8);
  *lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(l8));
  *hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h8));
}

#define QSC_CHUNK 512 /* groups whose scales are widened at once, on the stack */

/* Each group's sum of levels times x, then times its scale; two groups at a
   time into two accumulators a row (the chains interleave). The scales are
   widened 16 at a time beforehand: per group only a broadcast from memory. */
ZV512_FN __attribute__((always_inline)) void gemv4_512_r(const qgemv *a, const int R, int64_t o0, int64_t o1) {
  int64_t in = a->in, group = a->group, ng = in / group;
  float scf[QSC_CHUNK];
  for (int64_t o = o0; o < o1; o++) {
    const uint8_t *qr = (const uint8_t *)a->q + o * (in / 2);
    const uint16_t *sr = a->s + o * ng;
    __m512 acc[QGEMV_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    /* group gi into accumulator A (a constant, so everything stays in registers) */
#define QGROUP(gi, A)                                                                             \
  do {                                                                                            \
    __m512 t[QGEMV_ROWS], lo, hi;                                                                 \
    int64_t kb = (gi) * group;                                                                    \
    zq_block_512(qr + kb / 2, &lo, &hi);                                                          \
    for (int r = 0; r < R; r++) {                                                                 \
      const float *xr = a->x + r * a->ldx + kb;                                                   \
      t[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xr))); \
    }                                                                                             \
    for (kb += ZQ_BLOCK; kb < ((gi) + 1) * group; kb += ZQ_BLOCK) {                               \
      zq_block_512(qr + kb / 2, &lo, &hi);                                                        \
      for (int r = 0; r < R; r++) {                                                               \
        const float *xr = a->x + r * a->ldx + kb;                                                 \
        t[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), _mm512_fmadd_ps(lo, _mm512_loadu_ps(xr), t[r])); \
      }                                                                                           \
    }                                                                                             \
    __m512 sv = _mm512_set1_ps(scf[(gi) - c0]);                                                   \
    for (int r = 0; r < R; r++) acc[r][A] = _mm512_fmadd_ps(t[r], sv, acc[r][A]);                 \
  } while (0)
    for (int64_t c0 = 0; c0 < ng; c0 += QSC_CHUNK) {
      int64_t c1 = c0 + QSC_CHUNK < ng ? c0 + QSC_CHUNK : ng;
      for (int64_t i = c0; i < c1; i += 16) {
        __mmask16 m = zv512_mask(c1 - i);
        _mm512_mask_storeu_ps(scf + (i - c0), m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, sr + i)));
      }
      int64_t g = c0;
      for (; g + 1 < c1; g += 2) {
        QGROUP(g, 0);
        QGROUP(g + 1, 1);
      }
      if (g < c1) QGROUP(g, 0);
    }
#undef QGROUP
    for (int r = 0; r < R; r++)
      a->y[r * a->ldy + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + (a->b ? a->b[o] : 0);
  }
}

/* One row of dequantised weights (dequantize, the GEMM path's tiles). */
ZV512_TARGET static void deq_row_512(float *dst, const void *q, const uint16_t *s, int64_t in, int64_t group) {
  if (group == 0) {
    __m512 sv = _mm512_set1_ps(_cvtsh_ss(s[0]));
    for (int64_t k = 0; k < in; k += 16) {
      __mmask16 m = zv512_mask(in - k);
      __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, (const int8_t *)q + k)));
      _mm512_mask_storeu_ps(dst + k, m, _mm512_mul_ps(w, sv));
    }
    return;
  }
  for (int64_t g = 0; g < in / group; g++) {
    __m512 sv = _mm512_set1_ps(_cvtsh_ss(s[g]));
    for (int64_t k = g * group; k < (g + 1) * group; k += ZQ_BLOCK) {
      __m512 lo, hi;
      zq_block_512((const uint8_t *)q + k / 2, &lo, &hi);
      _mm512_storeu_ps(dst + k, _mm512_mul_ps(lo, sv)); /* exact: a small integer times a float16 */
      _mm512_storeu_ps(dst + k + 16, _mm512_mul_ps(hi, sv));
    }
  }
}
#endif

static void deq_row(float *dst, const void *q, const uint16_t *s, int64_t in, int64_t group) {
#ifdef ZV512
  if (zv512_ok()) {
    deq_row_512(dst, q, s, in, group);
    return;
  }
#endif
  for (int64_t k = 0; k < in; k++) dst[k] = zq_weight(q, s, k, group);
}

#ifdef ZV512
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
      deq_row(tile + o * in, (const char *)a->q + (o0 + o) * qrow, a->s + (o0 + o) * srow, in, a->group);
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
  if (rows <= QGEMV_MAX || in == 0) {
    qlinear_gemv(a, rows, out);
    return ZORCH_OK;
  }
  return qlinear_gemm(&a, rows, out);
}
