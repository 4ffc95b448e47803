/* gemm.c: CPU matrix multiply through BLAS, with a plain loop nest where no BLAS
   library is present. bfloat16 runs on oneDNN's bf16 matmul (ops/cpu/dnnl.c)
   where it is loaded; 16-bit GEMMs otherwise convert through float32. float32
   GEMMs without alpha or beta (linear, matmul) run on oneDNN's matmul where
   dnnl_f32_ready says so, the rest on BLAS. */
#include <stdlib.h>

#include "../backend/math.h"
#include "../core/cancel.h"
#include "blas.h"
#include "cpu.h"
#include "dnnl.h"
#include "kernels.h"

#define GEMM_REF(T)                                                                    \
  {                                                                                    \
    const T *A = a, *B = b;                                                            \
    T *C = c;                                                                          \
    _Pragma("omp parallel for if (m * n * k >= CPU_GRAIN)")                            \
    for (int64_t i = 0; i < m; i++) {                                                  \
      for (int64_t j = 0; j < n; j++) {                                                \
        double s = 0;                                                                  \
        for (int64_t l = 0; l < k; l++)                                                \
          s += (double)(ta ? A[l * lda + i] : A[i * lda + l]) *                        \
               (double)(tb ? B[j * ldb + l] : B[l * ldb + j]);                         \
        T prev = beta == 0 ? (T)0 : (T)(beta * (double)C[i * ldc + j]);               \
        C[i * ldc + j] = (T)(alpha * s) + prev;                                        \
      }                                                                                \
    }                                                                                  \
  }

/* The epilogue: bias rows go into C first (beta then counts them once), relu after. */
#define EPI_BIAS(T)                                                                    \
  for (int64_t i = 0; i < m; i++)                                                      \
    for (int64_t j = 0; j < n; j++) ((T *)c)[i * ldc + j] = ((const T *)g->bias)[j];
#define EPI_RELU(T)                                                                    \
  for (int64_t i = 0; i < m; i++)                                                      \
    for (int64_t j = 0; j < n; j++)                                                    \
      if (!(((T *)c)[i * ldc + j] > 0)) ((T *)c)[i * ldc + j] = 0;

/* rows x cols of a 16-bit matrix (leading dim ld) into packed float32, and back. */
static float *widen(const void *p, int64_t rows, int64_t cols, int64_t ld, zorch_dtype dt) {
  float *f = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof(float));
  if (!f) return NULL;
  const uint16_t *h = p;
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      f[i * cols + j] = dt == ZORCH_BF16 ? zm_bf16_to_f32(h[i * ld + j]) : zm_f16_to_f32(h[i * ld + j]);
  return f;
}

static void narrow(void *p, const float *f, int64_t rows, int64_t cols, int64_t ld, zorch_dtype dt) {
  uint16_t *h = p;
#pragma omp parallel for if (rows * cols >= CPU_GRAIN)
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      h[i * ld + j] = dt == ZORCH_BF16 ? zm_f32_to_bf16(f[i * cols + j]) : zm_f32_to_f16(f[i * cols + j]);
}

/* relu of a 16-bit C in place: both formats keep the sign in the top bit, and
   NaN goes to 0 as in the float32 epilogue. */
static void relu16(void *c, int64_t m, int64_t n, int64_t ldc, zorch_dtype dt) {
  uint16_t *h = c, nan = dt == ZORCH_BF16 ? 0x7f80 : 0x7c00;
#pragma omp parallel for if (m * n >= CPU_GRAIN)
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      uint16_t v = h[i * ldc + j];
      if ((v & 0x8000) || (v & 0x7fff) > nan || (v & 0x7fff) == 0) h[i * ldc + j] = 0;
    }
}

/* A 16-bit GEMM through float32 copies of the operands. */
static zorch_status gemm16_via_f32(const gemm_args *g) {
  gemm_args f = *g;
  float *a = NULL, *b = NULL, *c = NULL, *bias = NULL;
  zorch_status st = ZORCH_OK;
  int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  if (!(a = widen(g->a, ar, ac, g->lda, g->dt)) || !(b = widen(g->b, br, bc, g->ldb, g->dt)) ||
      !(c = g->beta != 0 ? widen(g->c, g->m, g->n, g->ldc, g->dt)
                         : malloc((size_t)(g->m * g->n) * sizeof(float))) ||
      (g->bias && !(bias = widen(g->bias, 1, g->n, g->n, g->dt)))) {
    st = err_set(ZORCH_ERR_OOM, "matmul: out of memory for the float32 copies of a %lldx%lldx%lld "
                 "GEMM", (long long)g->m, (long long)g->n, (long long)g->k);
    goto done;
  }
  f.dt = ZORCH_F32, f.a = a, f.b = b, f.c = c, f.bias = bias;
  f.lda = ac, f.ldb = bc, f.ldc = g->n;
  if (!(st = cpu_gemm(&f))) narrow(g->c, c, g->m, g->n, g->ldc, g->dt);
done:
  free(a), free(b), free(c), free(bias);
  return st;
}

static zorch_status gemm_whole(const gemm_args *g);

/* A GEMM past this many multiply-adds runs in panels of C's rows, with a
   look at the deadline and the interrupt flag between two (cancel.h). A
   panel is about 60 ms at 290 GFLOP/s; panels of 2^31 cost OpenBLAS 10% of
   a 4096^3 product. */
#define GEMM_PANEL_MACS ((int64_t)1 << 33)

zorch_status cpu_gemm(const gemm_args *g) {
  bool wide = g->dt == ZORCH_F32 || g->dt == ZORCH_F64;
  int64_t nk = g->n * (g->k > 0 ? g->k : 1);
  if (!wide || g->m < 128 || g->m * nk <= GEMM_PANEL_MACS) {
    zorch_status st = g->m * nk >= ZCANCEL_MIN ? zcancel_poll("matmul") : ZORCH_OK;
    return st ? st : gemm_whole(g);
  }
  int64_t rows = (GEMM_PANEL_MACS / nk + 63) / 64 * 64;
  if (rows < 64) rows = 64;
  size_t es = dtype_sizes[g->dt];
  for (int64_t i = 0; i < g->m; i += rows) {
    zorch_status st = zcancel_poll("matmul"); /* before the first panel too: a stopped caller's next call is quick */
    if (st) return st;
    gemm_args p = *g;
    p.m = g->m - i < rows ? g->m - i : rows;
    p.a = (const char *)g->a + (size_t)(g->ta ? i : i * g->lda) * es;
    p.c = (char *)g->c + (size_t)(i * g->ldc) * es;
    if ((st = gemm_whole(&p))) return st;
  }
  return ZORCH_OK;
}

static zorch_status gemm_whole(const gemm_args *g) {
  int64_t m = g->m, n = g->n, k = g->k, lda = g->lda, ldb = g->ldb, ldc = g->ldc;
  bool ta = g->ta, tb = g->tb;
  double alpha = g->alpha, beta = g->beta;
  const void *a = g->a, *b = g->b;
  void *c = g->c;
  if (m == 0 || n == 0) return ZORCH_OK;
  if (g->dt == ZORCH_BF16 || g->dt == ZORCH_F16) {
    if (g->dt == ZORCH_BF16 && k > 0 && alpha == 1 && beta == 0 &&
        dnnl_bf16_gemm(ta, tb, m, n, k, a, lda, b, ldb, g->bias, c, ldc)) {
      if (g->relu) relu16(c, m, n, ldc, g->dt);
      return ZORCH_OK;
    }
    return gemm16_via_f32(g);
  }
  if (g->dt != ZORCH_F32 && g->dt != ZORCH_F64)
    return err_set(ZORCH_ERR_DTYPE, "matmul: no CPU kernel for dtype %s", zorch_dtype_name(g->dt));
  if (g->bias && beta != 0)
    return err_set(ZORCH_ERR_ARG, "matmul: a bias epilogue needs beta = 0");
  if (g->dt == ZORCH_F32 && k > 0 && alpha == 1 && beta == 0 &&
      dnnl_f32_gemm(ta, tb, m, n, k, a, lda, b, ldb, g->bias, c, ldc)) {
    if (g->relu) { EPI_RELU(float) }
    return ZORCH_OK;
  }
  if (g->bias) {
    if (g->dt == ZORCH_F32) { EPI_BIAS(float) } else { EPI_BIAS(double) }
    beta = 1;
  }
  const blas_api *bl = blas_get();
  bool fits = m < INT32_MAX && n < INT32_MAX && k < INT32_MAX && lda < INT32_MAX &&
              ldb < INT32_MAX && ldc < INT32_MAX;
  int tra = ta ? BLAS_TRANS : BLAS_NO_TRANS, trb = tb ? BLAS_TRANS : BLAS_NO_TRANS;
  if (g->dt == ZORCH_F32) {
    if (bl->sgemm && fits && k > 0)
      bl->sgemm(BLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                (int)ldb, (float)beta, c, (int)ldc);
    else
      GEMM_REF(float)
    if (g->relu) { EPI_RELU(float) }
  } else {
    if (bl->dgemm && fits && k > 0)
      bl->dgemm(BLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
    else
      GEMM_REF(double)
    if (g->relu) { EPI_RELU(double) }
  }
  return ZORCH_OK;
}
