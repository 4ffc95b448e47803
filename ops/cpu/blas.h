/* blas.h: BLAS found at run time. zorch loads OpenBLAS itself (dlopen), after
   choosing its kernel, because Debian's OpenBLAS 0.3.21 does not recognise newer
   AVX-512 CPUs and would run its slow SSE3 kernel: see docs/architecture.md. */
#ifndef ZORCH_VM_BLAS_H
#define ZORCH_VM_BLAS_H
#include <stdbool.h>

typedef void (*blas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                              const float *a, int lda, const float *b, int ldb, float beta,
                              float *c, int ldc);
typedef void (*blas_dgemm_fn)(int order, int ta, int tb, int m, int n, int k, double alpha,
                              const double *a, int lda, const double *b, int ldb, double beta,
                              double *c, int ldc);
typedef struct {
  blas_sgemm_fn sgemm; /* NULL when no BLAS was found */
  blas_dgemm_fn dgemm;
  void (*set_threads)(int);
} blas_api;

/* Loads BLAS once (thread-safe) and returns its entry points. */
const blas_api *blas_get(void);
enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111, BLAS_TRANS = 112 };
#endif
