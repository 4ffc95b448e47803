// cublas_v2.h of the emulated build: cublasGemmEx, on the host (blas.cc).
#ifndef ZORCH_CUDA_EMU_CUBLAS_V2_H
#define ZORCH_CUDA_EMU_CUBLAS_V2_H
#include "cublasLt.h"

typedef struct cu_emu_blas *cublasHandle_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t algo);
#endif
