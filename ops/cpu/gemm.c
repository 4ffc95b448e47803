/* gemm.c: CPU matrix multiply through BLAS, with a plain loop nest where no BLAS
   library is present. */
#include "../../vm/blas.h"
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

zorch_status cpu_gemm(zorch_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return ZORCH_OK;
  const blas_api *bl = blas_get();
  bool fits = m < INT32_MAX && n < INT32_MAX && k < INT32_MAX && lda < INT32_MAX &&
              ldb < INT32_MAX && ldc < INT32_MAX;
  int tra = ta ? BLAS_TRANS : BLAS_NO_TRANS, trb = tb ? BLAS_TRANS : BLAS_NO_TRANS;
  if (dt == ZORCH_F32) {
    if (bl->sgemm && fits && k > 0)
      bl->sgemm(BLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                (int)ldb, (float)beta, c, (int)ldc);
    else
      GEMM_REF(float)
    return ZORCH_OK;
  }
  if (dt == ZORCH_F64) {
    if (bl->dgemm && fits && k > 0)
      bl->dgemm(BLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
    else
      GEMM_REF(double)
    return ZORCH_OK;
  }
  return err_set(ZORCH_ERR_DTYPE, "matmul: no CPU kernel for dtype %s", zorch_dtype_name(dt));
}
