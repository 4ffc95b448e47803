/* gemm.c: CPU matrix multiply through BLAS, with a plain loop nest where no BLAS
   library is present. */
#include "blas.h"
#include "cpu.h"

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

zorch_status cpu_gemm(const gemm_args *g) {
  int64_t m = g->m, n = g->n, k = g->k, lda = g->lda, ldb = g->ldb, ldc = g->ldc;
  bool ta = g->ta, tb = g->tb;
  double alpha = g->alpha, beta = g->beta;
  const void *a = g->a, *b = g->b;
  void *c = g->c;
  if (m == 0 || n == 0) return ZORCH_OK;
  if (g->dt != ZORCH_F32 && g->dt != ZORCH_F64)
    return err_set(ZORCH_ERR_DTYPE, "matmul: no CPU kernel for dtype %s", zorch_dtype_name(g->dt));
  if (g->bias && beta != 0)
    return err_set(ZORCH_ERR_ARG, "matmul: a bias epilogue needs beta = 0");
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
