// gemm.cu: matrix multiply through cuBLASLt. Row-major C = A B is column-major
// C^T = B^T A^T, so A and B swap places in the call. float32 (TF32 only when
// switched on), bfloat16 and float16 (float32 accumulation and scale) and
// float64; the bias and relu epilogues fuse nn.Linear's bias and activation.
// A plan (descriptors, layouts and the heuristic's algorithm) is made once per
// shape, layout, epilogue and pointer alignment, then reused. Shapes cuBLASLt
// has no algorithm for (odd leading dimensions of 16-bit matrices, say) go to
// cublasGemmEx.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda.h"

#define WORKSPACE ((size_t)32 << 20)

namespace {
struct plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool ok = false;
};
typedef std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int> plan_key;
struct lt_dev {
  cublasLtHandle_t h = nullptr;
  void *ws = nullptr;
  std::map<plan_key, plan> plans;
};
std::mutex lt_lock;
lt_dev lts[64];

int align_of(const void *p) {
  uintptr_t u = (uintptr_t)p;
  int a = 1;
  while (a < 256 && !(u & (uintptr_t)a)) a <<= 1;
  return a;
}

zorch_status lt_fail(const char *what, cublasStatus_t st) {
  return err_set(ZORCH_ERR_DEVICE, "matmul: cuBLASLt %s failed with status %d", what, (int)st);
}
}  // namespace

#define LT_TRY(call, what)                       \
  do {                                           \
    cublasStatus_t s_ = (call);                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(what, s_); \
  } while (0)

static zorch_status lt_get(int dev, lt_dev **out) {
  if (dev < 0 || dev >= 64) return err_set(ZORCH_ERR_DEVICE, "matmul: no device %d", dev);
  lt_dev &d = lts[dev];
  if (!d.h) {  // the workspace first, so a handle never exists without one
    cu_stream(dev);
    if (!d.ws) CUDA_TRY(cudaMalloc(&d.ws, WORKSPACE));
    LT_TRY(cublasLtCreate(&d.h), "create");
  }
  *out = &d;
  return ZORCH_OK;
}

static cudaDataType_t lt_type(zorch_dtype dt) {
  return dt == ZORCH_F64 ? CUDA_R_64F : dt == ZORCH_BF16 ? CUDA_R_16BF : dt == ZORCH_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static void plan_free(plan *p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
}

static zorch_status make_plan_parts(lt_dev *d, const gemm_args *g, int epi, bool tf32, int al, plan *p);

// A plan, or an error with nothing left allocated.
static zorch_status make_plan(lt_dev *d, const gemm_args *g, int epi, bool tf32, int al, plan *p) {
  zorch_status st = make_plan_parts(d, g, epi, tf32, al, p);
  if (st) plan_free(p);
  return st;
}

static zorch_status make_plan_parts(lt_dev *d, const gemm_args *g, int epi, bool tf32, int al, plan *p) {
  cublasComputeType_t ct = g->dt == ZORCH_F64 ? CUBLAS_COMPUTE_64F : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t io = lt_type(g->dt), scale = g->dt == ZORCH_F64 ? CUDA_R_64F : CUDA_R_32F;
  LT_TRY(cublasLtMatmulDescCreate(&p->desc, ct, scale), "descriptor");
  cublasOperation_t ob = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, oa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // the first operand is our B (n x k after its op), the second our A
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ob, sizeof ob), "transpose");
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &oa, sizeof oa), "transpose");
  cublasLtEpilogue_t e = (cublasLtEpilogue_t)epi;
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "epilogue");
  if (epi & CUBLASLT_EPILOGUE_BIAS)
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias),
           "bias pointer");
  LT_TRY(cublasLtMatrixLayoutCreate(&p->la, io, g->tb ? g->k : g->n, g->tb ? g->n : g->k, g->ldb), "layout");
  LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, io, g->ta ? g->m : g->k, g->ta ? g->k : g->m, g->lda), "layout");
  LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, io, g->n, g->m, g->ldc), "layout");
  cublasLtMatmulPreference_t pref;
  LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "preference");
  size_t ws = WORKSPACE;
  uint32_t a32 = (uint32_t)al;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulPreferenceAttributes_t aligns[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (auto at : aligns) cublasLtMatmulPreferenceSetAttribute(pref, at, &a32, sizeof a32);
  cublasLtMatmulHeuristicResult_t res;
  int nres = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(d->h, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && nres > 0) {
    p->algo = res.algo;
    p->ok = true;
  }
  return ZORCH_OK;  // !ok: no algorithm for this epilogue; the caller falls back
}

// ---- the fallback epilogue: bias rows written first (beta = 1), relu after ----
template <typename S>
__global__ void k_bias_rows(char *c, const char *bias, int64_t m, int64_t n, int64_t ldc) {
  size_t es = sizeof(S);
  FOR(i, m * n) {
    int64_t r = i / n, j = i % n;
    io<S>::st(c + (r * ldc + j) * es, io<S>::ld(bias + j * es));
  }
}
template <typename S>
__global__ void k_relu_rows(char *c, int64_t m, int64_t n, int64_t ldc) {
  typedef typename io<S>::C C;
  size_t es = sizeof(S);
  FOR(i, m * n) {
    char *p = c + ((i / n) * ldc + i % n) * es;
    C v = io<S>::ld(p);
    if (!(v > (C)0)) io<S>::st(p, (C)0);
  }
}

// *none: cuBLASLt has no algorithm for this case (nothing ran, no error set).
static zorch_status run(lt_dev *d, const gemm_args *g, int epi, double beta, bool tf32, bool *none) {
  *none = false;
  int al = align_of(g->a);
  al = std::min(al, align_of(g->b));
  al = std::min(al, align_of(g->c));
  // the heuristic reads the bias pointer's alignment from the descriptor
  int bal = (epi & CUBLASLT_EPILOGUE_BIAS) ? align_of(g->bias) : 0;
  plan_key key{g->dt, g->ta, g->tb, g->m, g->n, g->k, g->lda, g->ldb, g->ldc, epi, beta != 0, tf32, al, bal};
  plan *p;
  {
    std::lock_guard<std::mutex> lk(lt_lock);
    auto it = d->plans.find(key);
    if (it == d->plans.end()) {
      plan np;
      zorch_status st = make_plan(d, g, epi, tf32, al, &np);
      if (st) return st;
      it = d->plans.emplace(key, np).first;
    }
    p = &it->second;
  }
  if (!p->ok) {
    *none = true;
    return ZORCH_OK;
  }
  if (g->bias && (epi & CUBLASLT_EPILOGUE_BIAS))
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias),
           "bias pointer");
  float a32 = (float)g->alpha, b32 = (float)beta;
  const void *al_p = g->dt == ZORCH_F64 ? (const void *)&g->alpha : &a32;
  const void *be_p = g->dt == ZORCH_F64 ? (const void *)&beta : &b32;
  cublasStatus_t st = cublasLtMatmul(d->h, p->desc, al_p, g->b, p->la, g->a, p->lb, be_p, g->c, p->lc, g->c, p->lc,
                                     &p->algo, d->ws, WORKSPACE, cu_stream(g->dev));
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) *none = true;  // nothing ran: the caller falls back
  else if (st != CUBLAS_STATUS_SUCCESS) return lt_fail("matmul", st);
  return ZORCH_OK;
}

// The fallback: cuBLAS's general GEMM, same layout trick, float32 (or float64)
// accumulation.
static cublasHandle_t blas_handles[64];
static zorch_status gemm_ex(const gemm_args *g, double beta, bool tf32) {
  cublasHandle_t &h = blas_handles[g->dev];
  cudaStream_t s = cu_stream(g->dev);
  if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    h = nullptr;
    return err_set(ZORCH_ERR_DEVICE, "matmul: cuBLAS could not start on cuda:%d", g->dev);
  }
  cublasSetStream(h, s);
  cudaDataType_t io = g->dt == ZORCH_F64 ? CUDA_R_64F : g->dt == ZORCH_BF16 ? CUDA_R_16BF
                      : g->dt == ZORCH_F16 ? CUDA_R_16F : CUDA_R_32F;
  cublasComputeType_t ct = g->dt == ZORCH_F64 ? CUBLAS_COMPUTE_64F : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  float a32 = (float)g->alpha, b32 = (float)beta;
  const void *al = g->dt == ZORCH_F64 ? (const void *)&g->alpha : &a32;
  const void *be = g->dt == ZORCH_F64 ? (const void *)&beta : &b32;
  cublasStatus_t st = cublasGemmEx(h, g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n,
                                   (int)g->m, (int)g->k, al, g->b, io, (int)g->ldb, g->a, io, (int)g->lda, be, g->c, io,
                                   (int)g->ldc, ct, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return err_set(ZORCH_ERR_DEVICE, "matmul: cublasGemmEx (%lld x %lld x %lld, %s) failed with status %d",
                   (long long)g->m, (long long)g->n, (long long)g->k, zorch_dtype_name(g->dt), (int)st);
  return ZORCH_OK;
}

zorch_status cuda_gemm(const gemm_args *g) {
  if (g->m == 0 || g->n == 0) return ZORCH_OK;
  if (g->k == 0) return err_set(ZORCH_ERR_ARG, "matmul: an empty inner dimension reaches the GEMM");
  if (g->bias && g->beta != 0) return err_set(ZORCH_ERR_ARG, "matmul: a bias epilogue needs beta = 0");
  if (g->dt != ZORCH_F32 && g->dt != ZORCH_F64 && g->dt != ZORCH_BF16 && g->dt != ZORCH_F16)
    return cu_no_kernel("matmul", g->dt);
  lt_dev *d = nullptr;
  zorch_status st = lt_get(g->dev, &d);
  if (st) return st;
  bool tf32 = g->dt == ZORCH_F32 && cu_tf32();
  int epi = g->bias ? (g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                    : (g->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  bool none = false;
  if (epi != CUBLASLT_EPILOGUE_DEFAULT && g->dt != ZORCH_F64) {
    st = run(d, g, epi, g->beta, tf32, &none);
    if (st || !none) return st;
  }
  // no fused epilogue: bias first, the plain GEMM, relu after
  double beta = g->beta;
  int dev = g->dev;
  if (g->bias) {
    CU_FLOAT_DISPATCH(g->dt, (CU_LAUNCH(ON(g->m * g->n, dev), k_bias_rows<S>)((char *)g->c, (const char *)g->bias, g->m,
                                                                          g->n, g->ldc)));
    if ((st = cu_launched("linear"))) return st;
    beta = 1;
  }
  st = run(d, g, CUBLASLT_EPILOGUE_DEFAULT, beta, tf32, &none);
  if (!st && none) {
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->lda > INT32_MAX || g->ldb > INT32_MAX ||
        g->ldc > INT32_MAX)
      return err_set(ZORCH_ERR_DEVICE, "matmul: no GEMM for %s (%lld x %lld x %lld)", zorch_dtype_name(g->dt),
                     (long long)g->m, (long long)g->n, (long long)g->k);
    st = gemm_ex(g, beta, tf32);
  }
  if (st) return st;
  if (g->relu) {
    CU_FLOAT_DISPATCH(g->dt, (CU_LAUNCH(ON(g->m * g->n, dev), k_relu_rows<S>)((char *)g->c, g->m, g->n, g->ldc)));
    return cu_launched("relu");
  }
  return ZORCH_OK;
}
