// backend.cu: the CUDA backend (built with `make CUDA=1`). It fills the same
// backend table as ops/cpu: a caching allocator, copies to and from the host,
// strided elementwise kernels on the per-element math of ops/math.h, cuBLAS
// GEMM and the Philox streams the CPU uses. Table entries without a CUDA kernel
// yet answer with an error naming the op.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <vector>

extern "C" {
#include "../../vm/device.h"
}
#include "../math.h"

#define CUDA_TRY(call)                                                                    \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess)                                                                \
      return err_set(ZORCH_ERR_DEVICE, "cuda: %s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                     cudaGetErrorString(e_));                                             \
  } while (0)

// ---- caching allocator: blocks reused by power-of-two size class --------------------
namespace {
struct cache_t {
  std::map<size_t, std::vector<void *>> free_blocks;
  std::map<void *, size_t> size_of;
  size_t held = 0, in_use = 0, peak = 0;
};
cache_t &cache() {
  static cache_t c;
  return c;
}
size_t round_class(size_t n) {
  size_t c = 512;
  while (c < n) c <<= 1;
  return c;
}
void release_cached() {
  for (auto &kv : cache().free_blocks)
    for (void *p : kv.second) {
      cudaFree(p);
      cache().held -= kv.first;
      cache().size_of.erase(p);
    }
  cache().free_blocks.clear();
}
}  // namespace

static void *cuda_alloc(int index, size_t nbytes) {
  cudaSetDevice(index);
  size_t c = round_class(nbytes ? nbytes : 1);
  auto &fl = cache().free_blocks[c];
  void *p = nullptr;
  if (!fl.empty()) {
    p = fl.back();
    fl.pop_back();
  } else if (cudaMalloc(&p, c) != cudaSuccess) {
    cudaGetLastError();
    release_cached();  // out of memory: give the cache back and try once more
    if (cudaMalloc(&p, c) != cudaSuccess) {
      cudaGetLastError();
      err_set(ZORCH_ERR_OOM, "cuda: out of memory allocating %zu bytes (%zu in use, %zu cached)", c,
              cache().in_use, cache().held - cache().in_use);
      return nullptr;
    }
    cache().size_of[p] = c;
    cache().held += c;
  } else {
    cache().size_of[p] = c;
    cache().held += c;
  }
  cache().in_use += c;
  if (cache().in_use > cache().peak) cache().peak = cache().in_use;
  return p;
}

static void cuda_free(int index, void *p) {
  (void)index;
  if (!p) return;
  auto it = cache().size_of.find(p);
  if (it == cache().size_of.end()) return;
  cache().in_use -= it->second;
  cache().free_blocks[it->second].push_back(p);
}

extern "C" void zorch_cuda_memory_stats(size_t *in_use, size_t *cached, size_t *peak) {
  *in_use = cache().in_use;
  *cached = cache().held - cache().in_use;
  *peak = cache().peak;
}

static zorch_status cuda_to_host(void *dst, const void *src, size_t n, int index) {
  cudaSetDevice(index);
  CUDA_TRY(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  return ZORCH_OK;
}

static zorch_status cuda_from_host(void *dst, const void *src, size_t n, int index) {
  cudaSetDevice(index);
  CUDA_TRY(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  return ZORCH_OK;
}

// ---- strided elementwise kernels -------------------------------------------------------
struct geom {
  int nd, nops;
  int64_t numel;
  int64_t shape[ZORCH_MAX_DIMS];
  int64_t st[4][ZORCH_MAX_DIMS];  // bytes
  char *base[4];
};

static geom make_geom(int nops, const zorch_tensor *const *ts) {
  geom g{};
  const zorch_tensor *t0 = ts[0];
  g.nd = t0->ndim;
  g.nops = nops;
  g.numel = shape_numel(t0->ndim, t0->shape);
  for (int i = 0; i < t0->ndim; i++) g.shape[i] = t0->shape[i];
  for (int k = 0; k < nops; k++) {
    g.base[k] = tensor_ptr(ts[k]);
    for (int i = 0; i < t0->ndim; i++) g.st[k][i] = ts[k]->strides[i] * (int64_t)dtype_sizes[ts[k]->dtype];
  }
  return g;
}

__device__ inline char *at(const geom &g, int k, int64_t idx) {
  int64_t off = 0;
  for (int i = g.nd - 1; i >= 0; i--) {
    int64_t c = idx % g.shape[i];
    idx /= g.shape[i];
    off += c * g.st[k][i];
  }
  return g.base[k] + off;
}

template <typename T>
__device__ inline T unary_math(int op, T x, T p0, T p1);
template <>
__device__ inline float unary_math<float>(int op, float x, float p0, float p1) {
  switch (op) {
    case UOP_NEG: return -x;
    case UOP_EXP: return expf(x);
    case UOP_LOG: return logf(x);
    case UOP_SQRT: return sqrtf(x);
    case UOP_ABS: return fabsf(x);
    case UOP_RELU: return zm_relu_f32(x);
    case UOP_GELU: return zm_gelu_f32(x);
    case UOP_GELU_TANH: return zm_gelu_tanh_f32(x);
    case UOP_TANH: return tanhf(x);
    case UOP_SIGMOID: return zm_sigmoid_f32(x);
    case UOP_ADD_S: return x + p0;
    case UOP_MUL_S: return x * p0;
    case UOP_RSUB_S: return p0 - x;
    case UOP_RDIV_S: return p0 / x;
    case UOP_POW_S: return p0 == 2.0f ? x * x : powf(x, p0);
    default: return x < p0 ? p0 : (x > p1 ? p1 : x);  // UOP_CLAMP
  }
}
template <>
__device__ inline double unary_math<double>(int op, double x, double p0, double p1) {
  switch (op) {
    case UOP_NEG: return -x;
    case UOP_EXP: return exp(x);
    case UOP_LOG: return log(x);
    case UOP_SQRT: return sqrt(x);
    case UOP_ABS: return fabs(x);
    case UOP_RELU: return zm_relu_f64(x);
    case UOP_GELU: return zm_gelu_f64(x);
    case UOP_GELU_TANH: return zm_gelu_tanh_f64(x);
    case UOP_TANH: return tanh(x);
    case UOP_SIGMOID: return zm_sigmoid_f64(x);
    case UOP_ADD_S: return x + p0;
    case UOP_MUL_S: return x * p0;
    case UOP_RSUB_S: return p0 - x;
    case UOP_RDIV_S: return p0 / x;
    case UOP_POW_S: return p0 == 2.0 ? x * x : pow(x, p0);
    default: return x < p0 ? p0 : (x > p1 ? p1 : x);
  }
}

template <typename T>
__device__ inline T binary_math(int op, T x, T y, T p0, T p1, bool *is_bool, unsigned char *b);

#define ZM_BIN(T, S)                                                              \
  template <>                                                                     \
  __device__ inline T binary_math<T>(int op, T x, T y, T p0, T p1, bool *is_bool,  \
                                     unsigned char *b) {                          \
    *is_bool = false;                                                             \
    switch (op) {                                                                 \
      case BOP_ADD: return x + y;                                                 \
      case BOP_SUB: return x - y;                                                 \
      case BOP_MUL: return x * y;                                                 \
      case BOP_DIV: return x / y;                                                 \
      case BOP_POW: return pow(x, y);                                             \
      case BOP_EQ: *is_bool = true; *b = x == y; return 0;                        \
      case BOP_LT: *is_bool = true; *b = x < y; return 0;                         \
      case BOP_GT: *is_bool = true; *b = x > y; return 0;                         \
      case BOP_RELU_BWD: return zm_relu_bwd_##S(x, y);                            \
      case BOP_GELU_BWD: return zm_gelu_bwd_##S(x, y);                            \
      case BOP_GELU_TANH_BWD: return zm_gelu_tanh_bwd_##S(x, y);                  \
      case BOP_TANH_BWD_Y: return zm_tanh_bwd_y_##S(x, y);                        \
      case BOP_SIGMOID_BWD_Y: return zm_sigmoid_bwd_y_##S(x, y);                  \
      case BOP_SQRT_BWD_Y: return zm_sqrt_bwd_y_##S(x, y);                        \
      case BOP_ABS_BWD: return zm_abs_bwd_##S(x, y);                              \
      case BOP_POW_S_BWD: return x * p0 * pow(y, p0 - (T)1);                      \
      default: return (y >= p0 && y <= p1) ? x : (T)0; /* BOP_CLAMP_BWD */        \
    }                                                                             \
  }
ZM_BIN(float, f32)
ZM_BIN(double, f64)

template <typename T>
__global__ void k_unary(geom g, int op, T p0, T p1) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < g.numel; i += (int64_t)gridDim.x * blockDim.x)
    *(T *)at(g, 0, i) = unary_math<T>(op, *(const T *)at(g, 1, i), p0, p1);
}

template <typename T>
__global__ void k_binary(geom g, int op, T p0, T p1) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < g.numel; i += (int64_t)gridDim.x * blockDim.x) {
    bool is_bool;
    unsigned char b;
    T r = binary_math<T>(op, *(const T *)at(g, 1, i), *(const T *)at(g, 2, i), p0, p1, &is_bool, &b);
    if (is_bool) *(unsigned char *)at(g, 0, i) = b;
    else *(T *)at(g, 0, i) = r;
  }
}

static unsigned blocks_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

static zorch_status no_kernel(const char *op, zorch_dtype dt) {
  return err_set(ZORCH_ERR_DTYPE, "%s: no CUDA kernel for dtype %s yet", op, zorch_dtype_name(dt));
}

static zorch_status cuda_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1) {
  const zorch_tensor *ts[2] = {out, a};
  geom g = make_geom(2, ts);
  if (!g.numel) return ZORCH_OK;
  if (a->dtype == ZORCH_F32) k_unary<float><<<blocks_for(g.numel), 256>>>(g, op, (float)p0, (float)p1);
  else if (a->dtype == ZORCH_F64) k_unary<double><<<blocks_for(g.numel), 256>>>(g, op, p0, p1);
  else return no_kernel("unary op", a->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

static zorch_status cuda_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, double p0,
                                double p1) {
  const zorch_tensor *ts[3] = {out, a, b};
  geom g = make_geom(3, ts);
  if (!g.numel) return ZORCH_OK;
  if (a->dtype == ZORCH_F32) k_binary<float><<<blocks_for(g.numel), 256>>>(g, op, (float)p0, (float)p1);
  else if (a->dtype == ZORCH_F64) k_binary<double><<<blocks_for(g.numel), 256>>>(g, op, p0, p1);
  else return no_kernel("binary op", a->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// copy: same dtype by element size; float32 from and to the 16-bit floats and float64
__device__ inline double load_as(const char *p, int dt) {
  switch (dt) {
    case ZORCH_F32: return *(const float *)p;
    case ZORCH_F64: return *(const double *)p;
    case ZORCH_BF16: return zm_bf16_to_f32(*(const uint16_t *)p);
    case ZORCH_F16: return zm_f16_to_f32(*(const uint16_t *)p);
    case ZORCH_I32: return *(const int32_t *)p;
    case ZORCH_I64: return (double)*(const int64_t *)p;
    default: return *(const unsigned char *)p;
  }
}
__device__ inline void store_as(char *p, int dt, double v) {
  switch (dt) {
    case ZORCH_F32: *(float *)p = (float)v; break;
    case ZORCH_F64: *(double *)p = v; break;
    case ZORCH_BF16: *(uint16_t *)p = zm_f32_to_bf16((float)v); break;
    case ZORCH_F16: *(uint16_t *)p = zm_f32_to_f16((float)v); break;
    case ZORCH_I32: *(int32_t *)p = (int32_t)v; break;
    case ZORCH_I64: *(int64_t *)p = (int64_t)v; break;
    case ZORCH_BOOL: *(unsigned char *)p = v != 0; break;
    default: *(unsigned char *)p = (unsigned char)v; break;
  }
}

__global__ void k_copy(geom g, int dd, int ds, int same, int es) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < g.numel; i += (int64_t)gridDim.x * blockDim.x) {
    char *d = at(g, 0, i);
    const char *s = at(g, 1, i);
    if (same) for (int b = 0; b < es; b++) d[b] = s[b];
    else store_as(d, dd, load_as(s, ds));
  }
}

static zorch_status cuda_copy(zorch_tensor *dst, const zorch_tensor *src) {
  const zorch_tensor *ts[2] = {dst, src};
  geom g = make_geom(2, ts);
  if (!g.numel) return ZORCH_OK;
  k_copy<<<blocks_for(g.numel), 256>>>(g, dst->dtype, src->dtype, dst->dtype == src->dtype,
                                       (int)dtype_sizes[dst->dtype]);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

__global__ void k_fill(geom g, int dt, double v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < g.numel; i += (int64_t)gridDim.x * blockDim.x)
    store_as(at(g, 0, i), dt, v);
}

static zorch_status cuda_fill(zorch_tensor *dst, double v) {
  const zorch_tensor *ts[1] = {dst};
  geom g = make_geom(1, ts);
  if (!g.numel) return ZORCH_OK;
  k_fill<<<blocks_for(g.numel), 256>>>(g, dst->dtype, v);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// the CPU's streams, element for element (ops/math.h)
__global__ void k_random(char *p, int dt, int64_t n, uint64_t seed, uint64_t offset, int normal) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    double v = normal ? zm_random_normal(seed, offset, i)
                      : (dt == ZORCH_F64 ? zm_random_unit_f64(seed, offset, i) : (double)zm_random_unit_f32(seed, offset, i));
    store_as(p + i * (dt == ZORCH_F64 ? 8 : dt == ZORCH_F32 ? 4 : 2), dt, v);
  }
}

static zorch_status cuda_random(zorch_tensor *out, uint64_t seed, uint64_t offset, bool normal) {
  int64_t n = shape_numel(out->ndim, out->shape);
  if (!n) return ZORCH_OK;
  k_random<<<blocks_for(n), 256>>>(tensor_ptr(out), out->dtype, n, seed, offset, normal);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// ---- GEMM through cuBLAS: row-major C = A B is column-major C^T = B^T A^T ---------------
static cublasHandle_t blas_handle() {
  static cublasHandle_t h = nullptr;
  if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) h = nullptr;
  return h;
}

static zorch_status cuda_gemm(zorch_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                              int64_t ldc) {
  cublasHandle_t h = blas_handle();
  if (!h) return err_set(ZORCH_ERR_DEVICE, "matmul: cuBLAS could not start");
  if (m == 0 || n == 0) return ZORCH_OK;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  if (dt == ZORCH_F32) {
    float al = (float)alpha, be = (float)beta;
    st = cublasSgemm(h, ob, oa, (int)n, (int)m, (int)k, &al, (const float *)b, (int)ldb, (const float *)a, (int)lda,
                     &be, (float *)c, (int)ldc);
  } else if (dt == ZORCH_F64) {
    st = cublasDgemm(h, ob, oa, (int)n, (int)m, (int)k, &alpha, (const double *)b, (int)ldb, (const double *)a,
                     (int)lda, &beta, (double *)c, (int)ldc);
  } else {
    return no_kernel("matmul", dt);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return err_set(ZORCH_ERR_DEVICE, "matmul: cublas gemm (%lld x %lld x %lld) failed with status %d", (long long)m,
                   (long long)n, (long long)k, (int)st);
  return ZORCH_OK;
}

// ---- reductions, softmax, indexing, losses, norms, optimizers ------------------------
// Simple kernels: one thread per output row or element, loops inside; sums in
// double in a fixed order, as on the CPU.
#define GRID(n) blocks_for(n), 256
#define FOR(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void k_reduce(int op, T *out, int64_t *idx, const T *a, int64_t outer, int64_t r, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    const T *p = a + o * r * inner + i;
    if (op == RED_SUM) {
      double s = 0;
      for (int64_t k = 0; k < r; k++) s += (double)p[k * inner];
      out[j] = (T)s;
    } else {
      T best = p[0];
      int64_t bi = 0;
      for (int64_t k = 1; k < r; k++) {
        T v = p[k * inner];
        if (v > best || (v != v && best == best)) best = v, bi = k;
      }
      out[j] = best;
      if (idx) idx[j] = bi;
    }
  }
}

static zorch_status cuda_reduce(red_op op, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *a, int64_t outer,
                                int64_t r, int64_t inner) {
  int64_t *ix = idx ? (int64_t *)tensor_ptr(idx) : nullptr;
  if (outer * inner == 0) return ZORCH_OK;
  if (a->dtype == ZORCH_F32)
    k_reduce<float><<<GRID(outer * inner)>>>(op, (float *)tensor_ptr(out), ix, (const float *)tensor_ptr(a), outer, r, inner);
  else if (a->dtype == ZORCH_F64)
    k_reduce<double><<<GRID(outer * inner)>>>(op, (double *)tensor_ptr(out), ix, (const double *)tensor_ptr(a), outer, r, inner);
  else if (a->dtype == ZORCH_I64)
    k_reduce<int64_t><<<GRID(outer * inner)>>>(op, (int64_t *)tensor_ptr(out), ix, (const int64_t *)tensor_ptr(a), outer, r, inner);
  else return no_kernel(op == RED_SUM ? "sum" : "max", a->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

template <typename T>
__global__ void k_max_bwd(T *gin, const T *g, const int64_t *idx, int64_t outer, int64_t r, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    gin[(o * r + idx[j]) * inner + i] += g[j];
  }
}

static zorch_status cuda_max_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *idx, int64_t outer,
                                 int64_t r, int64_t inner) {
  if (outer * inner == 0) return ZORCH_OK;
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  if (gin->dtype == ZORCH_F32)
    k_max_bwd<float><<<GRID(outer * inner)>>>((float *)tensor_ptr(gin), (const float *)tensor_ptr(g), ix, outer, r, inner);
  else if (gin->dtype == ZORCH_F64)
    k_max_bwd<double><<<GRID(outer * inner)>>>((double *)tensor_ptr(gin), (const double *)tensor_ptr(g), ix, outer, r, inner);
  else return no_kernel("max", gin->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

template <typename T>
__global__ void k_softmax(T *y, const T *x, int64_t outer, int64_t c, int64_t inner, int log_) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    const T *xp = x + o * c * inner + i;
    T *yp = y + o * c * inner + i;
    T mx = xp[0];
    for (int64_t k = 1; k < c; k++)
      if (xp[k * inner] > mx || xp[k * inner] != xp[k * inner]) mx = xp[k * inner];
    double s = 0;
    for (int64_t k = 0; k < c; k++) s += exp((double)(xp[k * inner] - mx));
    for (int64_t k = 0; k < c; k++)
      yp[k * inner] = log_ ? (T)(xp[k * inner] - mx - log(s)) : (T)(exp((double)(xp[k * inner] - mx)) / s);
  }
}

static zorch_status cuda_softmax(zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t c, int64_t inner,
                                 bool log_) {
  if (outer * inner == 0) return ZORCH_OK;
  if (a->dtype == ZORCH_F32)
    k_softmax<float><<<GRID(outer * inner)>>>((float *)tensor_ptr(out), (const float *)tensor_ptr(a), outer, c, inner, log_);
  else if (a->dtype == ZORCH_F64)
    k_softmax<double><<<GRID(outer * inner)>>>((double *)tensor_ptr(out), (const double *)tensor_ptr(a), outer, c, inner, log_);
  else return no_kernel("softmax", a->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

__global__ void k_where(geom g, int es) {
  FOR(i, g.numel) {
    const char *src = *(const unsigned char *)at(g, 1, i) ? at(g, 2, i) : at(g, 3, i);
    char *d = at(g, 0, i);
    for (int b = 0; b < es; b++) d[b] = src[b];
  }
}

static zorch_status cuda_where(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a, const zorch_tensor *b) {
  const zorch_tensor *ts[4] = {out, cond, a, b};
  geom g = make_geom(4, ts);
  if (!g.numel) return ZORCH_OK;
  k_where<<<GRID(g.numel)>>>(g, (int)dtype_sizes[out->dtype]);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// Indices are checked on the host: one copy of the (small) index tensor.
static zorch_status check_indices(const char *op, const zorch_tensor *idx, int64_t n, int64_t ignore, bool has_ignore) {
  int64_t k = shape_numel(idx->ndim, idx->shape);
  std::vector<int64_t> h((size_t)(k ? k : 1));
  CUDA_TRY(cudaMemcpy(h.data(), tensor_ptr(idx), (size_t)k * sizeof(int64_t), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < k; i++)
    if (!(has_ignore && h[(size_t)i] == ignore) && (h[(size_t)i] < 0 || h[(size_t)i] >= n))
      return err_set(ZORCH_ERR_ARG, "%s: index %lld out of range for a dimension of size %lld", op,
                     (long long)h[(size_t)i], (long long)n);
  return ZORCH_OK;
}

__global__ void k_index_select(char *out, const char *a, const int64_t *ix, int64_t outer, int64_t n, int64_t ni,
                               int64_t row) {
  FOR(j, outer * ni * row) {
    int64_t b = j % row, k = (j / row) % ni, o = j / (row * ni);
    out[j] = a[(o * n + ix[k]) * row + b];
  }
}

static zorch_status cuda_index_select(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx, int64_t outer,
                                      int64_t n, int64_t inner) {
  int64_t ni = shape_numel(idx->ndim, idx->shape), row = inner * (int64_t)dtype_sizes[a->dtype];
  zorch_status st = check_indices("index_select", idx, n, 0, false);
  if (st || outer * ni * row == 0) return st;
  k_index_select<<<GRID(outer * ni * row)>>>(tensor_ptr(out), tensor_ptr(a), (const int64_t *)tensor_ptr(idx), outer,
                                             n, ni, row);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// one thread per (outer, column): adds the rows in index order, so the result
// does not depend on scheduling (no atomics)
template <typename T>
__global__ void k_index_add(T *out, const T *src, const int64_t *ix, int64_t outer, int64_t n, int64_t ni, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    for (int64_t k = 0; k < ni; k++) out[(o * n + ix[k]) * inner + i] += src[(o * ni + k) * inner + i];
  }
}

static zorch_status cuda_index_add(zorch_tensor *out, const zorch_tensor *src, const zorch_tensor *idx, int64_t outer,
                                   int64_t n, int64_t inner) {
  int64_t ni = shape_numel(idx->ndim, idx->shape);
  zorch_status st = check_indices("index_add", idx, n, 0, false);
  if (st || outer * inner == 0) return st;
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  if (out->dtype == ZORCH_F32)
    k_index_add<float><<<GRID(outer * inner)>>>((float *)tensor_ptr(out), (const float *)tensor_ptr(src), ix, outer, n, ni, inner);
  else if (out->dtype == ZORCH_F64)
    k_index_add<double><<<GRID(outer * inner)>>>((double *)tensor_ptr(out), (const double *)tensor_ptr(src), ix, outer, n, ni, inner);
  else return no_kernel("index_add", out->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

template <typename T>
__global__ void k_nll(T *loss, const T *lp, const int64_t *t, int64_t n, int64_t c, int64_t ignore, const T *g, int bwd) {
  FOR(i, n) {
    if (bwd) { if (t[i] != ignore) loss[i * c + t[i]] = -g[i]; }
    else loss[i] = t[i] == ignore ? (T)0 : -lp[i * c + t[i]];
  }
}

static zorch_status nll_any(zorch_tensor *dst, const zorch_tensor *src, const zorch_tensor *t, int64_t n, int64_t c,
                            int64_t ignore, bool bwd) {
  zorch_status st = check_indices("cross_entropy", t, c, ignore, true);
  if (st || n == 0) return st;
  const int64_t *tg = (const int64_t *)tensor_ptr(t);
  if (dst->dtype == ZORCH_F32)
    k_nll<float><<<GRID(n)>>>((float *)tensor_ptr(dst), bwd ? nullptr : (const float *)tensor_ptr(src), tg, n, c, ignore,
                              bwd ? (const float *)tensor_ptr(src) : nullptr, bwd);
  else if (dst->dtype == ZORCH_F64)
    k_nll<double><<<GRID(n)>>>((double *)tensor_ptr(dst), bwd ? nullptr : (const double *)tensor_ptr(src), tg, n, c, ignore,
                               bwd ? (const double *)tensor_ptr(src) : nullptr, bwd);
  else return no_kernel("cross_entropy", dst->dtype);
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}
static zorch_status cuda_nll(zorch_tensor *loss, const zorch_tensor *logp, const zorch_tensor *t, int64_t n, int64_t c,
                             int64_t ignore) {
  return nll_any(loss, logp, t, n, c, ignore, false);
}
static zorch_status cuda_nll_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *t, int64_t n, int64_t c,
                                 int64_t ignore) {
  return nll_any(gin, g, t, n, c, ignore, true);
}

template <typename T>
__global__ void k_layer_norm(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t rows, int64_t cols,
                             double eps) {
  FOR(r, rows) {
    const T *xr = x + r * cols;
    double s = 0, ss = 0;
    for (int64_t j = 0; j < cols; j++) s += xr[j];
    double mu = s / (double)cols;
    for (int64_t j = 0; j < cols; j++) ss += ((double)xr[j] - mu) * ((double)xr[j] - mu);
    double rs = 1.0 / sqrt(ss / (double)cols + eps);
    mean[r] = (T)mu;
    rstd[r] = (T)rs;
    for (int64_t j = 0; j < cols; j++) {
      T v = (T)(((double)xr[j] - mu) * rs);
      if (w) v *= w[j];
      if (b) v += b[j];
      y[r * cols + j] = v;
    }
  }
}

static zorch_status cuda_layer_norm(zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd, const zorch_tensor *x,
                                    const zorch_tensor *w, const zorch_tensor *b, int64_t rows, int64_t cols, double eps) {
  if (rows == 0) return ZORCH_OK;
#define LN(T)                                                                                                        \
  k_layer_norm<T><<<GRID(rows)>>>((T *)tensor_ptr(y), (T *)tensor_ptr(mean), (T *)tensor_ptr(rstd),                  \
                                  (const T *)tensor_ptr(x), w ? (const T *)tensor_ptr(w) : nullptr,                  \
                                  b ? (const T *)tensor_ptr(b) : nullptr, rows, cols, eps)
  if (x->dtype == ZORCH_F32) LN(float);
  else if (x->dtype == ZORCH_F64) LN(double);
  else return no_kernel("layer_norm", x->dtype);
#undef LN
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// gx per row; gw, gb per column (rows in order: deterministic)
template <typename T>
__global__ void k_ln_bwd_x(T *gx, const T *g, const T *x, const T *mean, const T *rstd, const T *w, int64_t rows,
                           int64_t cols) {
  FOR(r, rows) {
    const T *gr = g + r * cols, *xr = x + r * cols;
    double mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
    for (int64_t j = 0; j < cols; j++) {
      double gh = (double)gr[j] * (w ? (double)w[j] : 1.0);
      s1 += gh;
      s2 += gh * ((double)xr[j] - mu) * rs;
    }
    s1 /= (double)cols;
    s2 /= (double)cols;
    for (int64_t j = 0; j < cols; j++) {
      double gh = (double)gr[j] * (w ? (double)w[j] : 1.0), xh = ((double)xr[j] - mu) * rs;
      gx[r * cols + j] = (T)(rs * (gh - s1 - xh * s2));
    }
  }
}
template <typename T>
__global__ void k_ln_bwd_wb(T *gw, T *gb, const T *g, const T *x, const T *mean, const T *rstd, int64_t rows,
                            int64_t cols) {
  FOR(j, cols) {
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < rows; r++) {
      double gv = g[r * cols + j];
      aw += gv * ((double)x[r * cols + j] - (double)mean[r]) * (double)rstd[r];
      ab += gv;
    }
    if (gw) gw[j] = (T)aw;
    if (gb) gb[j] = (T)ab;
  }
}

static zorch_status cuda_layer_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb, const zorch_tensor *g,
                                        const zorch_tensor *x, const zorch_tensor *mean, const zorch_tensor *rstd,
                                        const zorch_tensor *w, int64_t rows, int64_t cols) {
  if (rows == 0) return ZORCH_OK;
#define LNB(T)                                                                                                        \
  do {                                                                                                               \
    k_ln_bwd_x<T><<<GRID(rows)>>>((T *)tensor_ptr(gx), (const T *)tensor_ptr(g), (const T *)tensor_ptr(x),            \
                                  (const T *)tensor_ptr(mean), (const T *)tensor_ptr(rstd),                         \
                                  w ? (const T *)tensor_ptr(w) : nullptr, rows, cols);                               \
    if (gw || gb)                                                                                                    \
      k_ln_bwd_wb<T><<<GRID(cols)>>>(gw ? (T *)tensor_ptr(gw) : nullptr, gb ? (T *)tensor_ptr(gb) : nullptr,          \
                                     (const T *)tensor_ptr(g), (const T *)tensor_ptr(x), (const T *)tensor_ptr(mean), \
                                     (const T *)tensor_ptr(rstd), rows, cols);                                       \
  } while (0)
  if (x->dtype == ZORCH_F32) LNB(float);
  else if (x->dtype == ZORCH_F64) LNB(double);
  else return no_kernel("layer_norm", x->dtype);
#undef LNB
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

// PyTorch's single-tensor formulas, scalars rounded to the parameter dtype first
template <typename T>
__global__ void k_adam(T *P, const T *G, T *M, T *V, T *VM, int64_t n, T b1w, T b2, T b2w, T wd, T decay, T step_size,
                       T bc2s, T eps, int l2, int dec) {
  FOR(i, n) {
    T gi = G[i], pi = P[i];
    if (l2) gi = gi + wd * pi;
    if (dec) pi = pi * decay;
    T mi = M[i] + b1w * (gi - M[i]);
    T vi = V[i] * b2 + b2w * gi * gi;
    M[i] = mi;
    V[i] = vi;
    if (VM) {
      if (vi > VM[i]) VM[i] = vi;
      vi = VM[i];
    }
    T denom = sqrt(vi) / bc2s + eps;
    P[i] = pi - step_size * (mi / denom);
  }
}

static zorch_status cuda_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                              zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  if (!n) return ZORCH_OK;
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  int l2 = o->weight_decay != 0 && !o->decoupled, dec = o->weight_decay != 0 && o->decoupled;
#define ADAM(T)                                                                                                       \
  k_adam<T><<<GRID(n)>>>((T *)tensor_ptr(p), (const T *)tensor_ptr(g), (T *)tensor_ptr(m), (T *)tensor_ptr(v),        \
                         vmax ? (T *)tensor_ptr(vmax) : nullptr, n, (T)(1 - o->beta1), (T)o->beta2, (T)(1 - o->beta2), \
                         (T)o->weight_decay, (T)(1 - o->lr * o->weight_decay), (T)(o->lr / bc1), (T)sqrt(bc2),        \
                         (T)o->eps, l2, dec)
  if (p->dtype == ZORCH_F32) ADAM(float);
  else if (p->dtype == ZORCH_F64) ADAM(double);
  else return no_kernel("adam_step", p->dtype);
#undef ADAM
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

template <typename T>
__global__ void k_sgd(T *P, const T *G, T *B, int64_t n, T lr, T wd, T mom, T damp, int first, int nesterov, int has_wd) {
  FOR(i, n) {
    T d = G[i];
    if (has_wd) d = d + wd * P[i];
    if (B) {
      T bi = first ? d : B[i] * mom + damp * d;
      B[i] = bi;
      d = nesterov ? d + mom * bi : bi;
    }
    P[i] = P[i] - lr * d;
  }
}

static zorch_status cuda_sgd(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *buf, bool first,
                             const zorch_sgd_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  if (!n) return ZORCH_OK;
#define SGD(T)                                                                                                        \
  k_sgd<T><<<GRID(n)>>>((T *)tensor_ptr(p), (const T *)tensor_ptr(g), buf ? (T *)tensor_ptr(buf) : nullptr, n,        \
                        (T)o->lr, (T)o->weight_decay, (T)o->momentum, (T)(1 - o->dampening), first, o->nesterov,      \
                        o->weight_decay != 0)
  if (p->dtype == ZORCH_F32) SGD(float);
  else if (p->dtype == ZORCH_F64) SGD(double);
  else return no_kernel("sgd_step", p->dtype);
#undef SGD
  CUDA_TRY(cudaGetLastError());
  return ZORCH_OK;
}

static backend make_backend() {
  backend b{};
  b.name = "cuda";
  b.alloc = cuda_alloc;
  b.free = cuda_free;
  b.copy = cuda_copy;
  b.fill = cuda_fill;
  b.unary = cuda_unary;
  b.binary = cuda_binary;
  b.where = cuda_where;
  b.reduce = cuda_reduce;
  b.max_bwd = cuda_max_bwd;
  b.softmax = cuda_softmax;
  b.gemm = cuda_gemm;
  b.index_select = cuda_index_select;
  b.index_add = cuda_index_add;
  b.nll = cuda_nll;
  b.nll_bwd = cuda_nll_bwd;
  b.layer_norm = cuda_layer_norm;
  b.layer_norm_bwd = cuda_layer_norm_bwd;
  b.random = cuda_random;
  b.adam = cuda_adam;
  b.sgd = cuda_sgd;
  b.to_host = cuda_to_host;
  b.from_host = cuda_from_host;
  return b;
}
static const backend cuda_backend = make_backend();

static int cuda_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// Called once by vm/device.c in a CUDA build; with no GPU present the device
// count is 0 and every cuda tensor is refused with a clear error.
extern "C" void cuda_backend_init(void) {
  backend_register(ZORCH_CUDA, &cuda_backend);
  device_cuda_count = cuda_count;
}
