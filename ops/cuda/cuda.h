// cuda.h: what the CUDA kernel files share: the per-device stream, launch
// geometry, strided indexing and 16-bit loads and stores. Every kernel runs on
// its device's stream, so work is queued and nothing waits for the GPU except a
// copy to the host.
#ifndef ZORCH_OPS_CUDA_H
#define ZORCH_OPS_CUDA_H
#include <cuda_runtime.h>

extern "C" {
#include "../backend/backend.h"
}
#include "../backend/math.h"

#define CUDA_TRY(call)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return err_set(ZORCH_ERR_DEVICE, "cuda: %s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                     cudaGetErrorString(e_));                                                      \
  } while (0)

// Whether float32 GEMMs may use TF32 (zorch_cuda_tf32(); the switch is the core's).
extern "C" bool cu_tf32(void);
// "cuDNN 9.x (conv2d, batch_norm)", or why the own kernels run (cudnn.cu).
void cu_cudnn_describe(char *buf, size_t n);
// cuDNN's convolution (cuda_conv2d and cuda_conv2d_bwd, declared with the op
// table's kernels below) and batch norm (cudnn.cu). conv_takes: whether cuDNN runs
// this convolution (present, float32/float64, sizes within its int
// descriptors); the batch norms return false when they leave the call to the
// own kernels (norm.cu), else true with the status in *st.
bool cu_cudnn_conv_takes(const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g);
bool cu_cudnn_batch_norm(zorch_status *st, zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,
                         const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b, zorch_tensor *rm,
                         zorch_tensor *rv, int64_t n, int64_t c, int64_t inner, bool training, double momentum,
                         double eps);
bool cu_cudnn_batch_norm_bwd(zorch_status *st, zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                             const zorch_tensor *g, const zorch_tensor *x, const zorch_tensor *mean,
                             const zorch_tensor *rstd, const zorch_tensor *w, int64_t n, int64_t c, int64_t inner,
                             bool training);
// "NCCL 2.x.y" (the version of the library the module loaded).
const char *cu_nccl_version(void);
// Makes `dev` current on this thread and returns its stream (created once).
cudaStream_t cu_stream(int dev);
// Bad indices found by kernels: a word in mapped host memory per device that a
// kernel sets ({op, index, size}) and the next wait for the device reports, as
// an error naming the op (kernels never stop the device on bad input).
enum { CU_BAD_INDEX_SELECT = 1, CU_BAD_INDEX_ADD, CU_BAD_TARGET, CU_BAD_GATHER, CU_BAD_SCATTER, CU_BAD_SCATTER_ADD };
int64_t *cu_bad_index_word(int dev);  // device pointer, or NULL (then unchecked)
__device__ inline void cu_report_bad(int64_t *w, int op, int64_t v, int64_t n) {
  if (w) w[1] = v, w[2] = n, w[0] = op;
}
// The error of the last launch, naming the op.
zorch_status cu_launched(const char *op);
zorch_status cu_no_kernel(const char *op, zorch_dtype dt);
static inline int cu_dev(const zorch_tensor *t) { return t->st->device.index; }
static inline unsigned cu_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}
// Every launch is CU_LAUNCH((grid, block, shared bytes, stream), kernel)(args):
// nvcc's <<<>>>, or under the emulated build (ops/cuda/emu, docs/cuda.md) a
// call that runs the grid on the host. ON(n, dev): enough 256-thread blocks
// for n, on the device's stream.
#define CU_ARGS(...) __VA_ARGS__
#ifdef CU_BREAK_SHMEM  // (a broken variant for tests/gpu/test_cuda_emu.sh: 8 bytes short)
#define CU_GEOM(g, b, sh, s) g, b, (sh) > 8 ? (sh) - 8 : (sh), s
#else
#define CU_GEOM(g, b, sh, s) g, b, sh, s
#endif
#ifdef ZORCH_CUDA_EMU
#define CU_LAUNCH(geom, ...) ::cu_emu::make_launch(#__VA_ARGS__, &__VA_ARGS__, CU_GEOM geom)
#else
#define CU_LAUNCH(geom, ...) __VA_ARGS__<<<CU_GEOM geom>>>
#define CU_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
#define ON(n, dev) (cu_blocks(n), 256, 0, cu_stream(dev))
#define FOR(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// ---- block-wide sums and maxima (256 threads), in a fixed tree so results
// repeat bit for bit; every thread gets the result ----
struct fold_add {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct fold_max {  // NaN wins, as in the CPU's scans
  __device__ double operator()(double a, double b) const {
    return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
  }
};
template <class F>
__device__ inline double cu_block_fold(double v) {
  __shared__ double sh[256];
  int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  // (CU_BREAK_BOUND and CU_BREAK_SYNC: broken variants for tests/gpu/test_cuda_emu.sh)
#ifdef CU_BREAK_BOUND
  for (int w = 128; w > 1; w >>= 1) {
#else
  for (int w = 128; w > 0; w >>= 1) {
#endif
    if (t < w) sh[t] = F()(sh[t], sh[t + w]);
#ifndef CU_BREAK_SYNC
    __syncthreads();
#endif
  }
  double r = sh[0];
  __syncthreads();  // sh is reused by the next call
  return r;
}
__device__ inline double cu_block_sum(double v) { return cu_block_fold<fold_add>(v); }
__device__ inline double cu_block_max(double v) { return cu_block_fold<fold_max>(v); }

// ---- strided operands: up to 4 tensors of one shape, strides in bytes ----
struct geom {
  int nd, nops;
  int contig;  // every operand dense in row-major order: no index arithmetic
  int64_t numel;
  int64_t shape[ZORCH_MAX_DIMS];
  int64_t st[4][ZORCH_MAX_DIMS];
  int64_t es[4];
  char *base[4];
};
geom cu_geom(int nops, const zorch_tensor *const *ts);

__device__ inline char *at(const geom &g, int k, int64_t idx) {
  if (g.contig) return g.base[k] + idx * g.es[k];
  int64_t off = 0;
  for (int i = g.nd - 1; i >= 0; i--) {
    int64_t c = idx % g.shape[i];
    idx /= g.shape[i];
    off += c * g.st[k][i];
  }
  return g.base[k] + off;
}

// ---- storage types: float and double as themselves, the 16-bit floats load
// as float and store rounded (the conversions of ops/backend/math.h, as on the CPU) ----
struct bf16_t { uint16_t v; };
struct f16_t { uint16_t v; };
template <typename S> struct io {
  typedef S C;  // compute type
  __device__ static S ld(const char *p) { return *(const S *)p; }
  __device__ static void st(char *p, S v) { *(S *)p = v; }
};
template <> struct io<bf16_t> {
  typedef float C;
  __device__ static float ld(const char *p) { return zm_bf16_to_f32(*(const uint16_t *)p); }
  __device__ static void st(char *p, float v) { *(uint16_t *)p = zm_f32_to_bf16(v); }
};
template <> struct io<f16_t> {
  typedef float C;
  __device__ static float ld(const char *p) { return zm_f16_to_f32(*(const uint16_t *)p); }
  __device__ static void st(char *p, float v) { *(uint16_t *)p = zm_f32_to_f16(v); }
};

// Calls F::template run<S>(args...) for the float dtypes; false for others.
#define CU_FLOAT_DISPATCH(dt, CALL)               \
  switch (dt) {                                   \
    case ZORCH_F32: { typedef float S; CALL; } break;  \
    case ZORCH_F64: { typedef double S; CALL; } break; \
    case ZORCH_BF16: { typedef bf16_t S; CALL; } break; \
    case ZORCH_F16: { typedef f16_t S; CALL; } break;  \
    default: break;                               \
  }

// Runs CALL with T as float or double for dtype dt and returns the launch's
// error, naming op; other dtypes get an error naming op and the dtype.
#define CU_REAL(dt, op, CALL)                      \
  do {                                             \
    if ((dt) == ZORCH_F32) {                       \
      typedef float T;                             \
      CALL;                                        \
    } else if ((dt) == ZORCH_F64) {                \
      typedef double T;                            \
      CALL;                                        \
    } else {                                       \
      return cu_no_kernel(op, dt);                 \
    }                                              \
    return cu_launched(op);                        \
  } while (0)

// Conversions between any two dtypes, through double.
__device__ inline double load_as(const char *p, int dt) {
  switch (dt) {
    case ZORCH_F32: return *(const float *)p;
    case ZORCH_F64: return *(const double *)p;
    case ZORCH_BF16: return zm_bf16_to_f32(*(const uint16_t *)p);
    case ZORCH_F16: return zm_f16_to_f32(*(const uint16_t *)p);
    case ZORCH_I32: return *(const int32_t *)p;
    case ZORCH_I64: return (double)*(const int64_t *)p;
    case ZORCH_I8: return *(const signed char *)p;
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
    case ZORCH_I8: *(signed char *)p = (signed char)v; break;
    case ZORCH_BOOL: *(unsigned char *)p = v != 0; break;
    default: *(unsigned char *)p = (unsigned char)v; break;
  }
}

// The kernels of the table (each file defines its own).
zorch_status cuda_copy(zorch_tensor *dst, const zorch_tensor *src);
zorch_status cuda_fill(zorch_tensor *dst, double v);
zorch_status cuda_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1);
zorch_status cuda_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, double p0,
                         double p1);
zorch_status cuda_where(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a, const zorch_tensor *b);
void *cuda_alloc(int dev, size_t nbytes);
void cuda_free(int dev, void *p);
zorch_status cuda_to_host(void *dst, const void *src, size_t n, int dev);
zorch_status cuda_from_host(void *dst, const void *src, size_t n, int dev);
zorch_status cuda_to_device(void *dst, const void *src, size_t n, int dev);
// the declared ops' kernels (include/zorch_ops.h)
#define KERNEL(slot, params) zorch_status cuda_##slot params;
#define KERNEL_OPT(slot, params)
ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
#endif
