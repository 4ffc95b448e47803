/* dnnl.h: oneDNN found at run time, for bfloat16 GEMMs on the CPU's bf16 units.
   zorch loads libdnnl.so.2 itself (dlopen) when it was built with oneDNN 2.x's
   headers; without either, the bf16 GEMM converts through float32 BLAS. */
#ifndef ZORCH_OPS_CPU_DNNL_H
#define ZORCH_OPS_CPU_DNNL_H
#include <stdbool.h>
#include <stdint.h>

/* True when a oneDNN with a native bf16 matmul kernel was loaded (once,
   thread-safe). ZORCH_DNNL=0 turns it off; sanitizer builds load it only
   with ZORCH_DNNL=1. */
bool dnnl_bf16_ready(void);

/* Row-major C (m, n) bf16 = op(A) op(B) (+ bias (n) bf16 when not NULL), A and B
   bf16, accumulating in float32. Returns false (nothing written) when oneDNN
   refused the problem, so the caller runs its fallback. */
bool dnnl_bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                    int64_t lda, const uint16_t *b, int64_t ldb, const uint16_t *bias,
                    uint16_t *c, int64_t ldc);

/* What runs the bf16 GEMMs, for zorch_blas_info. */
const char *dnnl_info(void);
#endif
