// blas.cc: the emulated cuBLASLt and cublasGemmEx (cublasLt.h, cublas_v2.h):
// column-major GEMMs on the host through the CPU's CBLAS (OpenBLAS, opened
// as ops/cpu/blas.c opens it), 16-bit operands through float32 and rounded
// once, as the CPU path computes them; plain loops where no CBLAS is found.
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../../backend/math.h"
#include "cublas_v2.h"

struct cu_emu_lt { int unused; };
struct cu_emu_blas { int unused; };
struct cu_emu_lt_desc {
  cublasComputeType_t ct;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
};
struct cu_emu_lt_layout { cudaDataType_t t; uint64_t rows, cols; int64_t ld; };
struct cu_emu_lt_pref { int unused; };

namespace {
enum { ColMajor = 102, NoTrans = 111, Trans = 112 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                         double *, int);
struct cblas {
  sgemm_fn s = nullptr;
  dgemm_fn d = nullptr;
  cblas() {
    const char *names[] = {"/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                           "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0",
                           "libblas.so.3"};
    for (const char *n : names) {
      void *h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      s = (sgemm_fn)dlsym(h, "cblas_sgemm");
      d = (dgemm_fn)dlsym(h, "cblas_dgemm");
      if (s && d) return;
      s = nullptr, d = nullptr;
    }
  }
};
const cblas &blas() {
  static cblas b;
  return b;
}

template <typename T>
void loops(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t lda, const T *b,
           int64_t ldb, T beta, T *c, int64_t ldc) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += (double)(ta ? a[p + i * lda] : a[i + p * lda]) * (tb ? b[j + p * ldb] : b[p + j * ldb]);
      T &o = c[i + j * ldc];
      o = (T)(alpha * s + (beta != 0 ? beta * o : 0));
    }
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (blas().s) blas().s(ColMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
  else loops(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
          const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
  if (blas().d) blas().d(ColMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
  else loops(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// a rows x cols column-major 16-bit matrix (leading dimension ld) as float, dense
std::vector<float> widen(cudaDataType_t t, const void *p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> v((size_t)(rows * cols));
  const uint16_t *h = (const uint16_t *)p;
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++)
      v[(size_t)(i + j * rows)] = t == CUDA_R_16BF ? zm_bf16_to_f32(h[i + j * ld]) : zm_f16_to_f32(h[i + j * ld]);
  return v;
}

// a rows x cols column-major float32 matrix with its inputs rounded to TF32
// (10 mantissa bits, to nearest), dense: what a TF32 tensor core multiplies
std::vector<float> tf32(const float *p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> v((size_t)(rows * cols));
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++) {
      uint32_t u;
      memcpy(&u, &p[i + j * ld], 4);
      if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
      memcpy(&v[(size_t)(i + j * rows)], &u, 4);
    }
  return v;
}

// D = alpha op(A) op(B) + beta C, then the epilogue (bias per row of D, relu);
// C and D are the same matrix in every call zorch makes.
cublasStatus_t matmul(cudaDataType_t t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc,
                      cublasLtEpilogue_t epi, const void *bias, bool tf32_inputs) {
  if (m < 0 || n < 0 || k < 0 || lda < 1 || ldb < 1 || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
  bool has_bias = epi & CUBLASLT_EPILOGUE_BIAS, relu = epi & CUBLASLT_EPILOGUE_RELU;
  if (has_bias && !bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (t == CUDA_R_64F) {
    double *c = (double *)C;
    if (has_bias)
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) c[i + j * ldc] = ((const double *)bias)[i];
    gemm(ta, tb, m, n, k, alpha, (const double *)A, lda, (const double *)B, ldb, has_bias ? 1.0 : beta, c, ldc);
    if (relu)
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) c[i + j * ldc] = c[i + j * ldc] > 0 ? c[i + j * ldc] : 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  bool wide = t == CUDA_R_32F;
  if (!wide && t != CUDA_R_16BF && t != CUDA_R_16F) return CUBLAS_STATUS_NOT_SUPPORTED;
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  std::vector<float> a16, b16, c16;
  const float *a = (const float *)A, *b = (const float *)B;
  float *c = (float *)C;
  int64_t la = lda, lb = ldb, lc = ldc;
  if (!wide) {
    a16 = widen(t, A, ar, ac, lda), b16 = widen(t, B, br, bc, ldb);
    c16 = beta != 0 ? widen(t, C, m, n, ldc) : std::vector<float>((size_t)(m * n));
    a = a16.data(), b = b16.data(), c = c16.data(), la = ar ? ar : 1, lb = br ? br : 1, lc = m ? m : 1;
  } else if (tf32_inputs) {
    a16 = tf32(a, ar, ac, lda), b16 = tf32(b, br, bc, ldb);
    a = a16.data(), b = b16.data(), la = ar ? ar : 1, lb = br ? br : 1;
  }
  if (has_bias)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++)
        c[i + j * lc] = wide ? ((const float *)bias)[i]
                             : t == CUDA_R_16BF ? zm_bf16_to_f32(((const uint16_t *)bias)[i])
                                                : zm_f16_to_f32(((const uint16_t *)bias)[i]);
  gemm(ta, tb, m, n, k, (float)alpha, a, la, b, lb, has_bias ? 1.0f : (float)beta, c, lc);
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      float v = c[i + j * lc];
      if (relu && !(v > 0)) v = 0;
      if (wide) c[i + j * lc] = v;
      else ((uint16_t *)C)[i + j * ldc] = t == CUDA_R_16BF ? zm_f32_to_bf16(v) : zm_f32_to_f16(v);
    }
  return CUBLAS_STATUS_SUCCESS;
}
double scalar(cudaDataType_t t, const void *p) { return t == CUDA_R_64F ? *(const double *)p : *(const float *)p; }
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = new cu_emu_lt{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t) {
  *d = new cu_emu_lt_desc{};
  (*d)->ct = ct;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: if (n != sizeof d->ta) break; d->ta = *(const cublasOperation_t *)buf; return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB: if (n != sizeof d->tb) break; d->tb = *(const cublasOperation_t *)buf; return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: if (n != sizeof d->epi) break; d->epi = *(const cublasLtEpilogue_t *)buf; return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (n != sizeof d->bias) break; d->bias = *(const void *const *)buf; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  *l = new cu_emu_lt_layout{t, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new cu_emu_lt_pref{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int want,
                                              cublasLtMatmulHeuristicResult_t *res, int *nres) {
  *nres = 0;
  if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *res = cublasLtMatmulHeuristicResult_t{};
  *nres = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
  if (!h || !d || !la || !lb || !lc || !ld || C != D) return CUBLAS_STATUS_INVALID_VALUE;
  bool ta = d->ta == CUBLAS_OP_T, tb = d->tb == CUBLAS_OP_T;
  int64_t m = (int64_t)ld->rows, n = (int64_t)ld->cols, k = (int64_t)(ta ? la->rows : la->cols);
  if ((int64_t)(ta ? la->cols : la->rows) != m || (int64_t)(tb ? lb->rows : lb->cols) != n ||
      (int64_t)(tb ? lb->cols : lb->rows) != k)
    return CUBLAS_STATUS_INVALID_VALUE;
  cudaDataType_t st = d->ct == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
  return matmul(ld->t, ta, tb, m, n, k, scalar(st, alpha), A, la->ld, B, lb->ld, scalar(st, beta), D, ld->ld, d->epi,
                d->bias, d->ct == CUBLAS_COMPUTE_32F_FAST_TF32);
}
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = new cu_emu_blas{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t) {
  if (!h || at != bt || at != ct) return CUBLAS_STATUS_INVALID_VALUE;
  cudaDataType_t st = comp == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
  return matmul(at, ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, scalar(st, alpha), A, lda, B, ldb, scalar(st, beta),
                C, ldc, CUBLASLT_EPILOGUE_DEFAULT, nullptr, comp == CUBLAS_COMPUTE_32F_FAST_TF32);
}
