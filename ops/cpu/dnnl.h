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

/* float32 convolution with one group, NCHW x and out, OIHW w (o filters), b
   (o) or NULL: out = x * w + b, and its backward, gx and gw (either may be
   NULL) from gout, both written. False (nothing or part written) when oneDNN
   is not loaded or has no fast kernel for the problem: the caller runs its
   own. Whatever the bf16 matmul's state, oneDNN loads for these. */
struct conv_geom;
bool dnnl_conv2d_f32(float *out, const float *x, const float *w, const float *b, int64_t o,
                     const struct conv_geom *g);
bool dnnl_conv2d_bwd_f32(float *gx, float *gw, const float *gout, const float *x, const float *w, int64_t o,
                         const struct conv_geom *g);

/* What runs the bf16 GEMMs, for zorch_blas_info. */
const char *dnnl_info(void);
#endif
