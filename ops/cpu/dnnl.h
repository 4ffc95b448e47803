/* dnnl.h: oneDNN found at run time, for bfloat16 GEMMs on the CPU's bf16 units.
   When zorch was built with oneDNN 2.x's headers (Debian 12's libdnnl-dev) it
   loads oneDNN itself (dlopen): ZORCH_DNNL_LIB if set, else libdnnl.so.3 where
   the loader finds one, else libdnnl.so.2. Without any, the bf16 GEMM converts
   through float32 BLAS. */
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

/* True when float32 GEMMs go to oneDNN's matmul: a brgemm kernel was found
   (not the reference loop), oneDNN is on, and ZORCH_SGEMM is not "blas"
   ("dnnl" takes whatever kernel oneDNN has). */
bool dnnl_f32_ready(void);

/* The same matmul in float32 (bias (n) float32 or NULL); false when oneDNN is
   not used for float32, the problem is small (under 2^21 multiply-adds, unless
   ZORCH_SGEMM=dnnl) or oneDNN refused it: the caller runs OpenBLAS. */
bool dnnl_f32_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                   int64_t lda, const float *b, int64_t ldb, const float *bias, float *c,
                   int64_t ldc);

/* What runs the bf16 and the float32 GEMMs, for zorch_blas_info. */
const char *dnnl_info(void);
const char *dnnl_f32_info(void);
#endif
