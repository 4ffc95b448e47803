// cudnn.cu: convolution (one group) and training-mode batch norm through
// cuDNN's legacy-compatible API, where cuDNN is present; the module's own
// kernels (im2col + cuBLASLt driven by ops/def/conv.c, norm.cu) otherwise.
//
// cuDNN is opened here with dlopen, on the first convolution or batch norm, not
// linked: a machine without libcudnn.so.9 still loads the module and runs the
// own kernels, and `zorch info` says which path runs. ZORCH_CUDNN=0 keeps the
// own kernels (to compare, or to get their bit-repeatable sums).
//
// Deterministic by default, as the CPU path is: of the algorithms cuDNN's
// heuristic ranks (cudnnGet*Algorithm_v7, no trial runs), the first whose
// determinism is CUDNN_DETERMINISTIC is used (backward data and filter have
// atomic-add algorithms that are not); ZORCH_CUDNN_DETERMINISTIC=0 takes the
// heuristic's first choice. float32 convolutions use FMA math (no TF32) unless
// TF32 is switched on (zorch.cuda.allow_tf32), as the GEMMs do.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <tuple>

#include "cuda.h"

#ifndef ZORCH_CUDNN
void cu_cudnn_describe(char *buf, size_t n) {
  snprintf(buf, n, "cuDNN not built (no cudnn.h at build time): own conv2d and batch_norm kernels");
}
bool cu_cudnn_conv_takes(const zorch_tensor *, const zorch_tensor *, const conv_geom *) { return false; }
zorch_status cuda_conv2d(zorch_tensor *, const zorch_tensor *, const zorch_tensor *, const zorch_tensor *,
                             const conv_geom *) {
  return err_set(ZORCH_ERR_INTERNAL, "conv2d: cuDNN not built");
}
zorch_status cuda_conv2d_bwd(zorch_tensor *, zorch_tensor *, const zorch_tensor *, const zorch_tensor *,
                                 const zorch_tensor *, const conv_geom *) {
  return err_set(ZORCH_ERR_INTERNAL, "conv2d: cuDNN not built");
}
bool cu_cudnn_batch_norm(zorch_status *, zorch_tensor *, zorch_tensor *, zorch_tensor *, const zorch_tensor *,
                         const zorch_tensor *, const zorch_tensor *, zorch_tensor *, zorch_tensor *, int64_t, int64_t,
                         int64_t, bool, double, double) {
  return false;
}
bool cu_cudnn_batch_norm_bwd(zorch_status *, zorch_tensor *, zorch_tensor *, zorch_tensor *, const zorch_tensor *,
                             const zorch_tensor *, const zorch_tensor *, const zorch_tensor *, const zorch_tensor *,
                             int64_t, int64_t, int64_t, bool) {
  return false;
}
#else
#include <cudnn.h>

// The cuDNN functions used, looked up in libcudnn.so.9 (its front library,
// which loads the engine libraries it needs itself).
#define CUDNN_FNS(X)                                                                                          \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream) X(cudnnCreateTensorDescriptor)    \
  X(cudnnSetTensor4dDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)                 \
  X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnCreateConvolutionDescriptor)            \
  X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType) X(cudnnDestroyConvolutionDescriptor)       \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                     \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData)  \
  X(cudnnConvolutionBackwardFilter) X(cudnnAddTensor) X(cudnnBatchNormalizationForwardTraining)                \
  X(cudnnBatchNormalizationBackward) X(cudnnGetConvolutionForwardWorkspaceSize)                               \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)

namespace {
struct cudnn_api {
#define FIELD(f) decltype(&::f) f;
  CUDNN_FNS(FIELD)
#undef FIELD
};
cudnn_api dn;
bool dn_ok;
bool deterministic = true;
char dn_why[300];
std::once_flag dn_once;

void dn_load() {
  const char *off = getenv("ZORCH_CUDNN");
  if (off && *off == '0') {
    snprintf(dn_why, sizeof dn_why, "cuDNN switched off (ZORCH_CUDNN=0)");
    return;
  }
  const char *det = getenv("ZORCH_CUDNN_DETERMINISTIC");
  deterministic = !(det && *det == '0');
  void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(dn_why, sizeof dn_why, "cuDNN not available (%s)", e ? e : "libcudnn.so.9 not found");
    return;
  }
#define LOOK(f)                                                                      \
  if (!(dn.f = (decltype(dn.f))dlsym(h, #f))) {                                      \
    snprintf(dn_why, sizeof dn_why, "cuDNN not available (libcudnn.so.9 has no %s)", #f); \
    return;                                                                          \
  }
  CUDNN_FNS(LOOK)
#undef LOOK
  size_t v = dn.cudnnGetVersion();
  if (v < 90000) {
    snprintf(dn_why, sizeof dn_why, "cuDNN %zu is older than 9", v);
    return;
  }
  dn_ok = true;
}

bool dn_ready() {
  std::call_once(dn_once, dn_load);
  return dn_ok;
}

// One handle per device; a device's cuDNN calls are serialised (a handle is
// used by one thread at a time), as its kernels are by its one stream.
struct dn_dev {
  cudnnHandle_t h = nullptr;
  std::mutex lock;
};
dn_dev devs[64];

zorch_status dn_fail(const char *op, const char *what, cudnnStatus_t s) {
  return err_set(ZORCH_ERR_DEVICE, "%s: cuDNN %s failed: %s", op, what, dn.cudnnGetErrorString(s));
}
#define DN_TRY(op, call)                                          \
  do {                                                            \
    cudnnStatus_t s_ = (call);                                    \
    if (s_ != CUDNN_STATUS_SUCCESS) return dn_fail(op, #call, s_); \
  } while (0)

// The handle of dev, on its stream (the lock must be held).
zorch_status dn_handle(const char *op, int dev, cudnnHandle_t *out) {
  cudaStream_t s = cu_stream(dev);  // makes dev current
  if (!devs[dev].h) DN_TRY(op, dn.cudnnCreate(&devs[dev].h));
  DN_TRY(op, dn.cudnnSetStream(devs[dev].h, s));
  *out = devs[dev].h;
  return ZORCH_OK;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

cudnnDataType_t dn_type(zorch_dtype dt) { return dt == ZORCH_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

// The descriptors of one convolution, destroyed with it.
struct conv_descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  ~conv_descs() {
    if (x) dn.cudnnDestroyTensorDescriptor(x);
    if (y) dn.cudnnDestroyTensorDescriptor(y);
    if (w) dn.cudnnDestroyFilterDescriptor(w);
    if (c) dn.cudnnDestroyConvolutionDescriptor(c);
  }
};

zorch_status make_conv(conv_descs *d, zorch_dtype dt, int64_t o, const conv_geom *g) {
  const char *op = "conv2d";
  cudnnDataType_t t = dn_type(dt);
  DN_TRY(op, dn.cudnnCreateTensorDescriptor(&d->x));
  DN_TRY(op, dn.cudnnCreateTensorDescriptor(&d->y));
  DN_TRY(op, dn.cudnnCreateFilterDescriptor(&d->w));
  DN_TRY(op, dn.cudnnCreateConvolutionDescriptor(&d->c));
  DN_TRY(op, dn.cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, t, (int)g->n, (int)g->c, (int)g->h, (int)g->w));
  DN_TRY(op, dn.cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, t, (int)g->n, (int)o, (int)g->oh, (int)g->ow));
  DN_TRY(op, dn.cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NCHW, (int)o, (int)g->c, (int)g->kh, (int)g->kw));
  DN_TRY(op, dn.cudnnSetConvolution2dDescriptor(d->c, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw, (int)g->dh,
                                                (int)g->dw, CUDNN_CROSS_CORRELATION, t));
  // float32: FMA only, unless TF32 is on; float64 has no tensor-core math
  d->math = dt == ZORCH_F32 && !cu_tf32() ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  DN_TRY(op, dn.cudnnSetConvolutionMathType(d->c, d->math));
  return ZORCH_OK;
}

// The chosen algorithm and workspace of a convolution pass, cached by shape.
enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_FILTER };
typedef std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                   int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>
    algo_key;
struct algo_choice {
  int algo;
  size_t ws;
  cudnnMathType_t math;
};
std::mutex algo_lock;
std::map<algo_key, algo_choice> algos;

// The first usable algorithm of the heuristic's ranking: it ran (status) and,
// by default, it is deterministic. Under FMA math (float32 without TF32) one the
// heuristic ranked for FMA math is preferred; one ranked for the default math
// runs with FMA math set.
template <typename Perf>
bool pick(const Perf *p, int n, cudnnMathType_t math, algo_choice *out) {
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      if (p[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic && p[i].determinism != CUDNN_DETERMINISTIC) continue;
      if (math == CUDNN_FMA_MATH && p[i].mathType != CUDNN_FMA_MATH &&
          (pass == 0 || p[i].mathType != CUDNN_DEFAULT_MATH))
        continue;
      out->algo = (int)p[i].algo;
      out->ws = p[i].memory;
      out->math = math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : p[i].mathType;
      return true;
    }
  return false;
}

zorch_status choose(int pass, cudnnHandle_t h, conv_descs *d, zorch_dtype dt, int64_t o, const conv_geom *g,
                    algo_choice *out) {
  const char *op = "conv2d";
  algo_key key{pass, (int)dt, (int)d->math, (int)deterministic, g->n, g->c, g->h, g->w, o, g->kh, g->kw, g->sh, g->sw,
               g->ph, g->pw, g->dh, g->dw, g->oh, g->ow};
  {
    std::lock_guard<std::mutex> lk(algo_lock);
    auto it = algos.find(key);
    if (it != algos.end()) {
      *out = it->second;
      return ZORCH_OK;
    }
  }
  int n = 0;
  bool found = false;
  if (pass == PASS_FWD) {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DN_TRY(op, dn.cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->c, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &n, p));
    found = pick(p, n, d->math, out);
  } else if (pass == PASS_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DN_TRY(op, dn.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->c, d->x,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p));
    found = pick(p, n, d->math, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DN_TRY(op, dn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->c, d->w,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p));
    found = pick(p, n, d->math, out);
  }
  if (!found)
    return err_set(ZORCH_ERR_DEVICE, "conv2d: cuDNN has no %salgorithm for this convolution%s",
                   deterministic ? "deterministic " : "",
                   deterministic ? " (ZORCH_CUDNN_DETERMINISTIC=0 allows the others; ZORCH_CUDNN=0 uses im2col)" : "");
  // the workspace of the chosen algorithm, with its math, asked for directly
  DN_TRY(op, dn.cudnnSetConvolutionMathType(d->c, out->math));
  size_t ws = 0;
  if (pass == PASS_FWD)
    DN_TRY(op, dn.cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->c, d->y,
                                                          (cudnnConvolutionFwdAlgo_t)out->algo, &ws));
  else if (pass == PASS_BWD_DATA)
    DN_TRY(op, dn.cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->c, d->x,
                                                               (cudnnConvolutionBwdDataAlgo_t)out->algo, &ws));
  else
    DN_TRY(op, dn.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->c, d->w,
                                                                 (cudnnConvolutionBwdFilterAlgo_t)out->algo, &ws));
  DN_TRY(op, dn.cudnnSetConvolutionMathType(d->c, d->math));
  if (ws > out->ws) out->ws = ws;
  std::lock_guard<std::mutex> lk(algo_lock);
  algos[key] = *out;
  return ZORCH_OK;
}

// A workspace from the caching allocator; freed at once after the call is
// queued (the stream orders any reuse after it).
struct workspace {
  int dev;
  void *p = nullptr;
  explicit workspace(int d) : dev(d) {}
  ~workspace() {
    if (p) cuda_free(dev, p);
  }
  bool get(size_t n) { return !n || (p = cuda_alloc(dev, n)) != nullptr; }
};

// alpha/beta for cuDNN: double for float64 data, float otherwise.
struct scale {
  float f;
  double d;
  explicit scale(double v) : f((float)v), d(v) {}
  const void *of(zorch_dtype dt) const { return dt == ZORCH_F64 ? (const void *)&d : (const void *)&f; }
};
}  // namespace

void cu_cudnn_describe(char *buf, size_t n) {
  if (!dn_ready()) {
    snprintf(buf, n, "%s: own conv2d (im2col + cuBLASLt) and batch_norm kernels", dn_why);
    return;
  }
  size_t v = dn.cudnnGetVersion();
  snprintf(buf, n, "cuDNN %zu.%zu.%zu for conv2d and batch_norm (%s algorithms)", v / 10000, v / 100 % 100, v % 100,
           deterministic ? "deterministic" : "fastest");
}

// cuDNN takes a float32/float64 convolution whose sizes fit its int descriptors.
bool cu_cudnn_conv_takes(const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g) {
  if (!dn_ready() || (x->dtype != ZORCH_F32 && x->dtype != ZORCH_F64) || cu_dev(x) >= 64) return false;
  const int64_t v[] = {g->n, g->c, g->h, g->w, w->shape[0], g->kh, g->kw, g->oh, g->ow,
                       g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
  for (int64_t e : v)
    if (!fits_int(e)) return false;
  // element counts too (cuDNN indexes with int in places)
  return g->n * g->c * g->h * g->w <= INT32_MAX && g->n * w->shape[0] * g->oh * g->ow <= INT32_MAX &&
         zorch_tensor_numel(w) <= INT32_MAX;
}

zorch_status cuda_conv2d(zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b,
                             const conv_geom *g) {
  int dev = cu_dev(x);
  zorch_dtype dt = x->dtype;
  int64_t o = w->shape[0];
  std::lock_guard<std::mutex> lk(devs[dev].lock);
  cudnnHandle_t h;
  conv_descs d;
  algo_choice a;
  if (dn_handle("conv2d", dev, &h) || make_conv(&d, dt, o, g) || choose(PASS_FWD, h, &d, dt, o, g, &a))
    return zorch_last_status();
  DN_TRY("conv2d", dn.cudnnSetConvolutionMathType(d.c, a.math));
  workspace ws(dev);
  if (!ws.get(a.ws)) return zorch_last_status();
  scale one(1), zero(0);
  DN_TRY("conv2d", dn.cudnnConvolutionForward(h, one.of(dt), d.x, tensor_ptr(x), d.w, tensor_ptr(w), d.c,
                                               (cudnnConvolutionFwdAlgo_t)a.algo, ws.p, a.ws, zero.of(dt), d.y,
                                               tensor_ptr(out)));
  if (b) {
    cudnnTensorDescriptor_t bd;
    DN_TRY("conv2d", dn.cudnnCreateTensorDescriptor(&bd));
    cudnnStatus_t s = dn.cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, dn_type(dt), 1, (int)o, 1, 1);
    if (s == CUDNN_STATUS_SUCCESS) s = dn.cudnnAddTensor(h, one.of(dt), bd, tensor_ptr(b), one.of(dt), d.y, tensor_ptr(out));
    dn.cudnnDestroyTensorDescriptor(bd);
    if (s != CUDNN_STATUS_SUCCESS) return dn_fail("conv2d", "cudnnAddTensor (bias)", s);
  }
  return cu_launched("conv2d");
}

zorch_status cuda_conv2d_bwd(zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *gout, const zorch_tensor *x,
                                 const zorch_tensor *w, const conv_geom *g) {
  int dev = cu_dev(x);
  zorch_dtype dt = x->dtype;
  int64_t o = w->shape[0];
  std::lock_guard<std::mutex> lk(devs[dev].lock);
  cudnnHandle_t h;
  conv_descs d;
  if (dn_handle("conv2d backward", dev, &h) || make_conv(&d, dt, o, g)) return zorch_last_status();
  scale one(1), zero(0);
  if (gx) {
    algo_choice a;
    if (choose(PASS_BWD_DATA, h, &d, dt, o, g, &a)) return zorch_last_status();
    DN_TRY("conv2d backward", dn.cudnnSetConvolutionMathType(d.c, a.math));
    workspace ws(dev);
    if (!ws.get(a.ws)) return zorch_last_status();
    DN_TRY("conv2d backward",
           dn.cudnnConvolutionBackwardData(h, one.of(dt), d.w, tensor_ptr(w), d.y, tensor_ptr(gout), d.c,
                                           (cudnnConvolutionBwdDataAlgo_t)a.algo, ws.p, a.ws, zero.of(dt), d.x,
                                           tensor_ptr(gx)));
  }
  if (gw) {
    algo_choice a;
    DN_TRY("conv2d backward", dn.cudnnSetConvolutionMathType(d.c, d.math));
    if (choose(PASS_BWD_FILTER, h, &d, dt, o, g, &a)) return zorch_last_status();
    DN_TRY("conv2d backward", dn.cudnnSetConvolutionMathType(d.c, a.math));
    workspace ws(dev);
    if (!ws.get(a.ws)) return zorch_last_status();
    DN_TRY("conv2d backward",
           dn.cudnnConvolutionBackwardFilter(h, one.of(dt), d.x, tensor_ptr(x), d.y, tensor_ptr(gout), d.c,
                                             (cudnnConvolutionBwdFilterAlgo_t)a.algo, ws.p, a.ws, zero.of(dt), d.w,
                                             tensor_ptr(gw)));
  }
  return cu_launched("conv2d backward");
}

// ---- batch norm: training mode with weight and bias (and, backward, every
// gradient wanted) goes to cuDNN's spatial batch norm; x (n, c, inner) is the
// 4-d (n, c, inner, 1). The rest (eval mode, no affine, a gradient not wanted)
// stays on the own kernels of norm.cu, which give the same values. ----
namespace {
bool bn_takes(const zorch_tensor *x, int64_t n, int64_t c, int64_t inner) {
  return dn_ready() && (x->dtype == ZORCH_F32 || x->dtype == ZORCH_F64) && cu_dev(x) < 64 && fits_int(n) &&
         fits_int(c) && fits_int(inner) && zorch_tensor_numel(x) <= INT32_MAX;
}

struct bn_descs {
  cudnnTensorDescriptor_t x = nullptr, p = nullptr;
  ~bn_descs() {
    if (x) dn.cudnnDestroyTensorDescriptor(x);
    if (p) dn.cudnnDestroyTensorDescriptor(p);
  }
};

zorch_status make_bn(const char *op, bn_descs *d, zorch_dtype dt, int64_t n, int64_t c, int64_t inner) {
  DN_TRY(op, dn.cudnnCreateTensorDescriptor(&d->x));
  DN_TRY(op, dn.cudnnCreateTensorDescriptor(&d->p));
  DN_TRY(op, dn.cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dn_type(dt), (int)n, (int)c, (int)inner, 1));
  DN_TRY(op, dn.cudnnSetTensor4dDescriptor(d->p, CUDNN_TENSOR_NCHW, dn_type(dt), 1, (int)c, 1, 1));
  return ZORCH_OK;
}
}  // namespace

bool cu_cudnn_batch_norm(zorch_status *st, zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,
                         const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b, zorch_tensor *rm,
                         zorch_tensor *rv, int64_t n, int64_t c, int64_t inner, bool training, double momentum,
                         double eps) {
  if (!training || !w || !b || !bn_takes(x, n, c, inner)) return false;
  int dev = cu_dev(x);
  zorch_dtype dt = x->dtype;
  std::lock_guard<std::mutex> lk(devs[dev].lock);
  cudnnHandle_t h;
  bn_descs d;
  if (dn_handle("batch_norm", dev, &h) || make_bn("batch_norm", &d, dt, n, c, inner)) {
    *st = zorch_last_status();
    return true;
  }
  scale one(1), zero(0);
  // cuDNN's running variance takes the unbiased variance, as the contract asks
  cudnnStatus_t s = dn.cudnnBatchNormalizationForwardTraining(
      h, CUDNN_BATCHNORM_SPATIAL, one.of(dt), zero.of(dt), d.x, tensor_ptr(x), d.x, tensor_ptr(y), d.p,
      tensor_ptr(w), tensor_ptr(b), momentum, rm ? tensor_ptr(rm) : nullptr, rv ? tensor_ptr(rv) : nullptr, eps,
      tensor_ptr(mean), tensor_ptr(rstd));
  *st = s == CUDNN_STATUS_SUCCESS ? cu_launched("batch_norm")
                                  : dn_fail("batch_norm", "cudnnBatchNormalizationForwardTraining", s);
  return true;
}

bool cu_cudnn_batch_norm_bwd(zorch_status *st, zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,
                             const zorch_tensor *g, const zorch_tensor *x, const zorch_tensor *mean,
                             const zorch_tensor *rstd, const zorch_tensor *w, int64_t n, int64_t c, int64_t inner,
                             bool training) {
  if (!training || !gx || !gw || !gb || !w || !bn_takes(x, n, c, inner)) return false;
  int dev = cu_dev(x);
  zorch_dtype dt = x->dtype;
  std::lock_guard<std::mutex> lk(devs[dev].lock);
  cudnnHandle_t h;
  bn_descs d;
  if (dn_handle("batch_norm backward", dev, &h) || make_bn("batch_norm backward", &d, dt, n, c, inner)) {
    *st = zorch_last_status();
    return true;
  }
  scale one(1), zero(0);
  // the saved mean and 1/sqrt(var + eps) are given, so eps is not used
  cudnnStatus_t s = dn.cudnnBatchNormalizationBackward(
      h, CUDNN_BATCHNORM_SPATIAL, one.of(dt), zero.of(dt), one.of(dt), zero.of(dt), d.x, tensor_ptr(x), d.x,
      tensor_ptr(g), d.x, tensor_ptr(gx), d.p, tensor_ptr(w), tensor_ptr(gw), tensor_ptr(gb), 1e-5,
      tensor_ptr(mean), tensor_ptr(rstd));
  *st = s == CUDNN_STATUS_SUCCESS ? cu_launched("batch_norm backward")
                                  : dn_fail("batch_norm backward", "cudnnBatchNormalizationBackward", s);
  return true;
}
#endif
