/* zorch.h: the public C API of zorch: tensors, autograd, ops and fused optimizer
   kernels.

   Conventions
   - Functions that make a tensor return a new reference, or NULL on failure; then
     zorch_last_status() says what kind of failure and zorch_last_error() says what
     went wrong (op, argument, shapes). Functions that make nothing return a
     zorch_status. The message is per thread and stays until the next failure.
   - Every tensor handle is reference counted: zorch_tensor_retain() adds a
     reference, zorch_tensor_free() drops one. Arguments are borrowed: an op never
     takes ownership of its inputs.
   - Dimensions and indices are 0-based in C; negative dimensions count from the end
     (-1 is the last). The Lua layer maps its 1-based rule onto this one.
   - Library code never aborts or exits. */
#ifndef ZORCH_H
#define ZORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zorch_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public functions: the library is built with hidden visibility, so
   nothing else is exported from libzorch.so or zorch.so. */
#if defined(__GNUC__)
#define ZORCH_API __attribute__((visibility("default")))
#else
#define ZORCH_API
#endif

#define ZORCH_VERSION "0.1.0"
#define ZORCH_MAX_DIMS 8

typedef enum {
  ZORCH_OK = 0,
  ZORCH_ERR_ARG,      /* bad argument: type, count, value out of range */
  ZORCH_ERR_SHAPE,    /* shapes do not fit the op */
  ZORCH_ERR_DTYPE,    /* dtype not supported by the op */
  ZORCH_ERR_DEVICE,   /* device missing, or tensors on different devices */
  ZORCH_ERR_OOM,      /* out of memory */
  ZORCH_ERR_STATE,    /* e.g. a second backward through a freed graph */
  ZORCH_ERR_IO,       /* file or library loading */
  ZORCH_ERR_INTERNAL,
  ZORCH_ERR_TIMEOUT   /* a collective ran past comm_timeout (see zorch_set_hang_handler) */
} zorch_status;

typedef enum {
  ZORCH_F32 = 0,
  ZORCH_F64,
  ZORCH_BF16,
  ZORCH_F16,
  ZORCH_I32,
  ZORCH_I64,
  ZORCH_U8,
  ZORCH_BOOL,
  ZORCH_I8, /* signed bytes: quantised weights (docs/quantization.md) */
  ZORCH_NDTYPES
} zorch_dtype;

typedef enum { ZORCH_CPU = 0, ZORCH_CUDA = 1, ZORCH_NDEVICE_TYPES } zorch_device_type;

typedef struct {
  zorch_device_type type;
  int index;
} zorch_device;

typedef struct zorch_tensor zorch_tensor;
typedef struct zorch_generator zorch_generator;

/* ---- errors ---------------------------------------------------------------- */
ZORCH_API zorch_status zorch_last_status(void);
ZORCH_API const char *zorch_last_error(void);
ZORCH_API void zorch_clear_error(void);
/* Records a failure (code and printf-style message, which zorch_last_error()
   then gives) and returns code: how code outside zorch that zorch calls (a
   gradient hook, an update callback, a custom node's backward) reports one. */
ZORCH_API zorch_status zorch_set_error(zorch_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- dtypes and devices ---------------------------------------------------- */
ZORCH_API size_t zorch_dtype_size(zorch_dtype dt);
ZORCH_API const char *zorch_dtype_name(zorch_dtype dt); /* "float32", "bfloat16", ... */
/* Parses "float32"/"f32"/"float", ...; returns ZORCH_ERR_ARG for unknown names. */
ZORCH_API zorch_status zorch_dtype_parse(const char *name, zorch_dtype *out);
ZORCH_API bool zorch_dtype_is_float(zorch_dtype dt);
/* Parses "cpu", "cuda", "cuda:1". */
ZORCH_API zorch_status zorch_device_parse(const char *name, zorch_device *out);
/* Writes "cpu" or "cuda:N" into buf. */
ZORCH_API void zorch_device_name(zorch_device dev, char *buf, size_t n);
/* True when a backend for this device type was built and has a device present. */
ZORCH_API bool zorch_device_available(zorch_device dev);

/* ---- CUDA (in a CPU-only build these answer ZORCH_ERR_DEVICE, count 0) ------ */
ZORCH_API bool zorch_cuda_built(void);
ZORCH_API int zorch_cuda_device_count(void);
typedef struct zorch_cuda_memory {
  size_t in_use;  /* bytes in tensors now */
  size_t cached;  /* bytes held by the caching allocator for reuse */
  size_t peak;    /* most bytes in tensors at once */
  size_t mallocs; /* cudaMalloc calls so far (a reused block makes none) */
} zorch_cuda_memory;
ZORCH_API zorch_status zorch_cuda_memory_stats(int dev, zorch_cuda_memory *out);
/* Gives the allocator's cached blocks back to the device. */
ZORCH_API zorch_status zorch_cuda_empty_cache(int dev);
/* Waits until the device's queued kernels are done. */
ZORCH_API zorch_status zorch_cuda_synchronize(int dev);
/* TF32 tensor cores for float32 matmul: off by default (full float32), on with
   this or ZORCH_ALLOW_TF32=1. */
ZORCH_API void zorch_cuda_set_tf32(bool on);
ZORCH_API bool zorch_cuda_tf32(void);
/* What the CUDA backend is: "module /path/libzorch_cuda.so loaded (CUDA runtime
   ..., cuDNN ...); 1 device", "module not loaded: <reason>" (the module is
   opened the first time a cuda device is asked for), or "not built". */
ZORCH_API const char *zorch_cuda_info(void);

/* ---- creation ---------------------------------------------------------------- */
/* empty, zeros, ones, full, arange, full_i64, arange_i64, rand, randn, randint,
   randperm, eye, linspace and logspace are rows of include/zorch_ops.h. */
/* Copies `shape`'s worth of contiguous elements from a host buffer. */
ZORCH_API zorch_tensor *zorch_from_buffer(const void *data, int ndim, const int64_t *shape,
                                zorch_dtype dt);
/* Wraps a host buffer without copying. `strides` in elements (NULL: contiguous). The
   buffer must outlive every tensor that views it; `deleter(data, ctx)`, if given,
   runs when the last view goes. */
ZORCH_API zorch_tensor *zorch_tensor_wrap(void *data, zorch_dtype dt, int ndim, const int64_t *shape,
                                const int64_t *strides);
ZORCH_API zorch_tensor *zorch_tensor_wrap_owned(void *data, zorch_dtype dt, int ndim,
                                      const int64_t *shape, const int64_t *strides,
                                      void (*deleter)(void *data, void *ctx), void *ctx);

/* ---- references and properties ------------------------------------------------ */
ZORCH_API zorch_tensor *zorch_tensor_retain(zorch_tensor *t);
ZORCH_API void zorch_tensor_free(zorch_tensor *t); /* drops one reference; NULL is fine */
ZORCH_API int zorch_tensor_refcount(const zorch_tensor *t);
ZORCH_API int zorch_tensor_ndim(const zorch_tensor *t);
ZORCH_API const int64_t *zorch_tensor_shape(const zorch_tensor *t);
ZORCH_API const int64_t *zorch_tensor_strides(const zorch_tensor *t); /* in elements */
ZORCH_API int64_t zorch_tensor_offset(const zorch_tensor *t);         /* in elements */
ZORCH_API int64_t zorch_tensor_numel(const zorch_tensor *t);
ZORCH_API zorch_dtype zorch_tensor_dtype(const zorch_tensor *t);
ZORCH_API zorch_device zorch_tensor_device(const zorch_tensor *t);
ZORCH_API bool zorch_tensor_is_contiguous(const zorch_tensor *t);
/* Host pointer to the first element (NULL for device tensors). */
ZORCH_API void *zorch_tensor_data(const zorch_tensor *t);
/* True when both views share one storage. */
ZORCH_API bool zorch_tensor_shares_storage(const zorch_tensor *a, const zorch_tensor *b);
/* Copies the elements, converted to double, into out[numel] (row-major order). */
ZORCH_API zorch_status zorch_tensor_to_doubles(const zorch_tensor *t, double *out, int64_t n);
/* The same converted to int64 (exact for the integer dtypes, which a double
   is not beyond 2^53; floats truncate toward zero). */
ZORCH_API zorch_status zorch_tensor_to_i64s(const zorch_tensor *t, int64_t *out, int64_t n);
/* Value of a one-element tensor. */
ZORCH_API zorch_status zorch_tensor_item(const zorch_tensor *t, double *out);
/* Element at a multi-index (0-based, ndim entries). */
ZORCH_API zorch_status zorch_tensor_get(const zorch_tensor *t, const int64_t *index, double *out);
/* PyTorch-style text; the caller frees the result with free(). */
ZORCH_API char *zorch_tensor_format(const zorch_tensor *t);

/* ---- views (share storage; differentiable) ------------------------------------- */
/* (view ... flatten are rows of include/zorch_ops.h) */
/* ---- copies ------------------------------------------------------------------------- */
/* (contiguous, clone, to_dtype and to_device are rows of include/zorch_ops.h) */
/* Copies src into dst (broadcast, dtype converted). In grad mode the write is
   recorded when dst's values have a history or src requires grad: on dst
   (grad_fn CopyBackwards; FillBackward for the fills), or, dst being a view,
   on the tensor it views (CopySlices), whose views then follow the new
   history. A leaf that requires grad takes constants and values without
   grad as data and stays a leaf; a src that requires grad is refused there,
   and any recorded write into a view of it (ZORCH_ERR_STATE). Reading,
   through a handle that is no view (detach()), values written since a
   recorded op made them refuses the backward (docs/api.md, "In-place
   writes"). */
ZORCH_API zorch_status zorch_copy_(zorch_tensor *dst, zorch_tensor *src);
ZORCH_API zorch_status zorch_fill_(zorch_tensor *dst, double value);
ZORCH_API zorch_status zorch_fill_i64_(zorch_tensor *dst, int64_t value); /* exact past 2^53, as full_i64 */
/* An in-place op's result src, already computed, written into dst as
   PyTorch's in-place ops write (x:add_(y) is zorch_assign_("add_", x, x + y)):
   src's dtype must cast to dst's by PyTorch's rule (no float into an integer
   tensor, nothing but bool into bool) and its shape broadcast to dst's, which
   keeps its shape; autograd records the write as zorch_copy_ does. Errors
   name op. */
ZORCH_API zorch_status zorch_assign_(const char *op, zorch_tensor *dst, zorch_tensor *src);

/* ---- elementwise ops (NumPy broadcasting, PyTorch type promotion) ------------------ */
/* The registry's user-facing elementwise ops (ops/backend/pointwise_ops.h),
   unary first, in registry order, for bindings and tests that go over every
   op: its name, tensor inputs (1 or 2), scalar parameters, whether it records
   a gradient, the inputs the tests draw (ZORCH_DOM_* bits) and a call that
   runs its public function on in[0..nin) and p[0..nparams). *n gets the count. */
enum { ZORCH_DOM_ANY = 0, ZORCH_DOM_POS_A = 1, ZORCH_DOM_POS_B = 2, ZORCH_DOM_UNIT_A = 4, ZORCH_DOM_GT1_A = 8 };
typedef struct zorch_pointwise_op {
  const char *name;
  int nin;
  int nparams;
  int differentiable;
  int dom; /* positive a (POS_A) or b (POS_B), a inside (-1, 1) (UNIT_A), a above 1 (GT1_A) */
  zorch_tensor *(*call)(zorch_tensor *const *in, const double *p);
} zorch_pointwise_op;
ZORCH_API const zorch_pointwise_op *zorch_pointwise_ops(int *n);
ZORCH_API zorch_tensor *zorch_add(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_sub(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_mul(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_div(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_pow(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_add_scalar(zorch_tensor *a, double s);
ZORCH_API zorch_tensor *zorch_mul_scalar(zorch_tensor *a, double s);
ZORCH_API zorch_tensor *zorch_rsub_scalar(zorch_tensor *a, double s); /* s - a */
ZORCH_API zorch_tensor *zorch_rdiv_scalar(zorch_tensor *a, double s); /* s / a */
ZORCH_API zorch_tensor *zorch_pow_scalar(zorch_tensor *a, double exponent);
ZORCH_API zorch_tensor *zorch_neg(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_exp(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_log(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_sqrt(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_abs(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_relu(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_gelu(zorch_tensor *a, bool tanh_approx);
ZORCH_API zorch_tensor *zorch_tanh(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_sigmoid(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_silu(zorch_tensor *a); /* a * sigmoid(a) */
ZORCH_API zorch_tensor *zorch_sin(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_cos(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_clamp(zorch_tensor *a, double min, double max); /* +-INFINITY: open */
/* Rounding and other step functions (integer inputs stay integer; zero
   gradient). round: half to even, at `decimals` digits (negative: left of the
   point; integer inputs need 0). */
ZORCH_API zorch_tensor *zorch_sign(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_floor(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_ceil(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_round(zorch_tensor *a, int decimals);
ZORCH_API zorch_tensor *zorch_trunc(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_frac(zorch_tensor *a); /* a - trunc(a); floating-point inputs */
ZORCH_API zorch_tensor *zorch_reciprocal(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_rsqrt(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_square(zorch_tensor *a); /* integer inputs stay integer */
ZORCH_API zorch_tensor *zorch_log1p(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_expm1(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_log2(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_log10(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_exp2(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_erf(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_erfc(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_asin(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_acos(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_atan(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_sinh(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_cosh(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_tan(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_asinh(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_acosh(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_atanh(zorch_tensor *a);
/* Activations, torch.nn.functional's (PyTorch's defaults in brackets). Those
   without integer kernels in PyTorch refuse integer inputs, except softsign
   and tanhshrink, which compute them in float32. */
ZORCH_API zorch_tensor *zorch_leaky_relu(zorch_tensor *a, double negative_slope); /* [0.01] */
ZORCH_API zorch_tensor *zorch_elu(zorch_tensor *a, double alpha);                 /* [1] */
ZORCH_API zorch_tensor *zorch_selu(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_celu(zorch_tensor *a, double alpha); /* [1]; alpha != 0 */
ZORCH_API zorch_tensor *zorch_softplus(zorch_tensor *a, double beta, double threshold); /* [1, 20] */
/* [-1, 1]; min_val <= max_val; integer inputs stay integer */
ZORCH_API zorch_tensor *zorch_hardtanh(zorch_tensor *a, double min_val, double max_val);
ZORCH_API zorch_tensor *zorch_relu6(zorch_tensor *a); /* hardtanh(a, 0, 6) */
ZORCH_API zorch_tensor *zorch_hardsigmoid(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_hardswish(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_mish(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_logsigmoid(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_softsign(zorch_tensor *a);   /* a / (1 + |a|) */
ZORCH_API zorch_tensor *zorch_tanhshrink(zorch_tensor *a); /* a - tanh(a) */
/* Two-input elementwise math, broadcast and promoted as above. maximum and
   minimum pass NaN on, fmax and fmin drop it; fmod's result has the dividend's
   sign (C's), remainder's the divisor's (Python's %); floor_divide is Python's
   //. Integer tensors stay integer for maximum, minimum, fmax, fmin, fmod,
   remainder and floor_divide; an integer divisor holding 0 is an error. */
ZORCH_API zorch_tensor *zorch_maximum(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_minimum(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_fmax(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_fmin(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_atan2(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_hypot(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_logaddexp(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_copysign(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_fmod(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_remainder(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_floor_divide(zorch_tensor *a, zorch_tensor *b); /* no gradient */
/* lerp, lerp_scalar, addcmul, addcdiv, clamp_min, clamp_max, isclose, allclose and
   equal are rows of include/zorch_ops.h */
/* Comparisons give ZORCH_BOOL tensors; no gradient. */
ZORCH_API zorch_tensor *zorch_eq(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_lt(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_gt(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_ne(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_le(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_ge(zorch_tensor *a, zorch_tensor *b);

/* ---- linear algebra and nn ------------------------------------------------------------- */
/* the activations zorch_linear_act fuses (include/zorch_ops.h) */
typedef enum { ZORCH_ACT_NONE, ZORCH_ACT_RELU, ZORCH_ACT_GELU, ZORCH_ACT_GELU_TANH } zorch_activation;
/* how a loss reduces over the batch (the losses are in include/zorch_ops.h) */
typedef enum { ZORCH_REDUCE_MEAN = 0, ZORCH_REDUCE_SUM, ZORCH_REDUCE_NONE } zorch_reduction;
/* ---- convolution and pooling over NCHW images (x (N, C, H, W) or one image
   (C, H, W)); PyTorch's shapes and output sizes. Zeros in the options mean the
   defaults, so `{0}` (or NULL for conv2d) is PyTorch's default call. The ops
   (conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d) are in include/zorch_ops.h. */
typedef struct {
  int64_t stride[2];   /* 0: 1 */
  int64_t padding[2];  /* zeros added on each side */
  int64_t dilation[2]; /* 0: 1 */
  int64_t groups;      /* 0: 1 */
} zorch_conv2d_opts;
typedef struct {
  int64_t kernel[2];   /* required */
  int64_t stride[2];   /* 0: the kernel */
  int64_t padding[2];  /* at most half the kernel; padding never wins a max */
  int64_t dilation[2]; /* 0: 1; max pooling only */
  bool ceil_mode;      /* round the output size up (a window must start inside the input or its left padding) */
  bool exclude_pad;    /* avg_pool2d divides by the inputs inside the image (PyTorch's count_include_pad = false) */
} zorch_pool2d_opts;

/* ---- the options of zorch_attention (include/zorch_ops.h); NULL or {0}: no mask,
   scale 1/sqrt(D). Query i (0-based) sees key j when every rule given allows it;
   causal and the window are aligned to the bottom right (off = Tk - Tq). */
typedef struct {
  bool causal;              /* j <= i + off */
  double scale;             /* <= 0: 1/sqrt(D) */
  int64_t window;           /* > 0: i + off - window < j (Mistral's sliding window) */
  zorch_tensor *mask;       /* bool (true: attend) or float (added to the scores), broadcast to (B, H, Tq, Tk) */
  zorch_tensor *segments;   /* int64 (B, Tk): the keys' segment ids; a query sees its own segment's keys */
  zorch_tensor *q_segments; /* int64 (B, Tq), the queries' ids; NULL: the last Tq of segments */
} zorch_attention_opts;

/* ---- more reductions, shape ops, creation and matrix products (PyTorch's) -------------- */
/* out[i] = select(a, dim, i) for every i: out needs room for a's size in dim. */
ZORCH_API zorch_status zorch_unbind(zorch_tensor *a, int dim, zorch_tensor **out);
typedef enum { ZORCH_PAD_CONSTANT = 0, ZORCH_PAD_REFLECT, ZORCH_PAD_REPLICATE, ZORCH_PAD_CIRCULAR } zorch_pad_mode;

/* ---- autograd -------------------------------------------------------------------------- */
ZORCH_API zorch_status zorch_set_requires_grad(zorch_tensor *t, bool on); /* leaves only */
ZORCH_API bool zorch_requires_grad(const zorch_tensor *t);
ZORCH_API bool zorch_is_leaf(const zorch_tensor *t);
/* The accumulated gradient (borrowed reference, NULL when none). */
ZORCH_API zorch_tensor *zorch_grad(const zorch_tensor *t);
/* Replaces .grad (NULL clears it); the tensor is retained. */
ZORCH_API zorch_status zorch_set_grad(zorch_tensor *t, zorch_tensor *grad);
/* Name of the node that made t ("AddBackward", ...) or NULL for leaves. */
ZORCH_API const char *zorch_grad_fn_name(const zorch_tensor *t);
/* Backward from t; `grad` may be NULL when t has one element. */
ZORCH_API zorch_status zorch_backward(zorch_tensor *t, zorch_tensor *grad, bool retain_graph);
ZORCH_API zorch_tensor *zorch_detach(zorch_tensor *t); /* shares storage, no history */
/* Grad mode is per thread; returns the previous value. */
ZORCH_API bool zorch_set_grad_enabled(bool on);
ZORCH_API bool zorch_is_grad_enabled(void);
/* Called on a leaf once its .grad is final for the current backward pass. A
   non-OK return stops the backward pass with that error. */
typedef zorch_status (*zorch_grad_hook)(zorch_tensor *leaf, void *ud);
ZORCH_API zorch_status zorch_set_grad_hook(zorch_tensor *leaf, zorch_grad_hook fn, void *ud);
/* The leaf's hook (NULL: none), *ud its data when ud is not NULL. */
ZORCH_API zorch_grad_hook zorch_get_grad_hook(const zorch_tensor *leaf, void **ud);

/* ---- random numbers (Philox4x32-10, counter based) -------------------------------------- */
ZORCH_API zorch_generator *zorch_generator_new(uint64_t seed);
ZORCH_API void zorch_generator_free(zorch_generator *g);
ZORCH_API void zorch_generator_seed(zorch_generator *g, uint64_t seed); /* also resets the offset */
ZORCH_API uint64_t zorch_generator_offset(const zorch_generator *g);
ZORCH_API void zorch_generator_set_offset(zorch_generator *g, uint64_t offset);
ZORCH_API zorch_generator *zorch_default_generator(void);
ZORCH_API void zorch_manual_seed(uint64_t seed); /* seeds the default generator */
/* the random constructors and multinomial are in include/zorch_ops.h */
/* ---- host memory: bytes of host (CPU) tensor storage, all threads ---------------- */
ZORCH_API void zorch_host_memory_stats(size_t *in_use, size_t *peak);
ZORCH_API void zorch_host_memory_reset_peak(void); /* the peak becomes what is in use now */

/* ---- the options of the fused optimizer updates (zorch_adam_step and
   zorch_sgd_step, include/zorch_ops.h) ----------------------------------------------------- */
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled; /* AdamW: weight decay applied to the parameter, not the gradient */
  bool amsgrad;   /* uses max_v */
  bool no_bias_correction; /* DeepSpeed's bias_correction false: step size lr, denominator sqrt(v) + eps */
} zorch_adam_opts;
typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
} zorch_sgd_opts;

/* ---- runtime ------------------------------------------------------------------------------- */
/* Number of threads CPU kernels use (and BLAS); 0 asks for the default (cores).
   Negative counts mean 0; more than ZORCH_MAX_THREADS mean that many. */
#define ZORCH_MAX_THREADS 1024
ZORCH_API void zorch_set_num_threads(int n);
ZORCH_API int zorch_get_num_threads(void);
/* BLAS in use: e.g. "OpenBLAS 0.3.21 SkylakeX"; "builtin" when none was found. */
ZORCH_API const char *zorch_blas_info(void);
/* Test hooks, for the test suite only: ZORCH_TEST_HOOKS holds hooks separated
   by ':', each a name or name=value ("overflow=2,5:offload_host"). The value of
   hook `name` (the empty string for a bare name), or NULL when it is not set
   (docs/environment.md lists the hooks). Nothing else in zorch reads a test
   switch. */
ZORCH_API const char *zorch_test_hook(const char *name);

/* ---- for language bindings: messages, dims, scalar operands, item writes -----------------
   What a binding (the Lua layer is one) needs beyond the ops to map its own
   conventions onto them: it counts dims and indices from 1, names its own
   functions in messages, and turns numbers into operands. */
/* The last error's message with its dims and indices counted from base (0:
   the text zorch_last_error() gives; 1: as a 1-based binding shows them) into
   out (n >= 1 bytes, cut to fit); returns out. "" when there is no error. */
ZORCH_API const char *zorch_last_error_based(int base, char *out, size_t n);
/* Puts "op: " in front of the last message unless it starts so already: a
   function made of other ops names itself in their errors. */
ZORCH_API void zorch_error_prefix(const char *op);
/* shape as the messages print it, "(2, 3)" ("(4,)" for one dim), into buf
   (n bytes; ZORCH_SHAPE_BUF holds any shape); returns buf. */
#define ZORCH_SHAPE_BUF 160
ZORCH_API const char *zorch_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* dim (negative: from the end) of a tensor of ndim dims (ndim + extra
   positions: extra 1 for an insert position, as unsqueeze's) as 0..ndim+extra-1
   in *out. Out of range: ZORCH_ERR_ARG naming op and the valid range (a 0-d
   tensor takes 0 and -1). */
ZORCH_API zorch_status zorch_wrap_dim(const char *op, int dim, int ndim, int extra, int *out);
/* A 0-d tensor of value in dt on dev: the operand a number stands for beside a
   tensor. Unlike zorch_full it takes any value: converted as a kernel converts
   its scalar argument (integers saturate), not refused when out of dt's range. */
ZORCH_API zorch_tensor *zorch_scalar(double value, zorch_dtype dt, zorch_device dev);
/* An error (naming op) unless *v fits dt, checked before anything is
   allocated: integer dtypes refuse NaN, infinities and out-of-range values, as
   PyTorch's fills do; a negative value for uint8 becomes the one stored (-1:
   255). What zorch_full and the fills check, for a binding that converts
   values itself. */
ZORCH_API zorch_status zorch_check_fill(const char *op, zorch_dtype dt, double *v);
ZORCH_API zorch_status zorch_check_fill_i64(const char *op, zorch_dtype dt, int64_t *v);
/* t[index] = src (broadcast to the entry), or a constant: a write into entry
   index (0-based, negative from the end) of dim 0 that autograd records as
   zorch_copy_ and the fills record theirs. The constants are range-checked as
   zorch_fill_ and zorch_fill_i64_ check them. */
ZORCH_API zorch_status zorch_setitem_(zorch_tensor *t, int64_t index, zorch_tensor *src);
ZORCH_API zorch_status zorch_setitem_fill_(zorch_tensor *t, int64_t index, double value);
ZORCH_API zorch_status zorch_setitem_fill_i64_(zorch_tensor *t, int64_t index, int64_t value);

/* ---- custom autograd nodes: PyTorch's autograd.Function, from C ---------------------------
   The caller computes a function's output itself (any way it likes, under
   zorch_set_grad_enabled(false) or not) and then records one node that stands
   for the whole computation: backward gets the output's gradient and returns
   each input's. Activation checkpointing is one: its backward recomputes the
   segment and differentiates it. */
#define ZORCH_CUSTOM_MAX_SAVED 5
typedef struct {
  /* the node's name, what zorch_grad_fn_name() gives ("MyOpBackward"); it
     must outlive the node (a string literal) */
  const char *name;
  /* Sets grad_in[i] (NULL on entry) to input i's gradient from grad, the
     output's: a new reference of the input's shape or one that broadcasts to
     it (summed and converted as for every op), or NULL for none. saved: the
     tensors given when recording, unchanged since (an in-place write to one
     fails the backward before this runs). Runs with grad mode off. An error:
     return it, with its message set by zorch_set_error; the backward pass
     fails with it, and frees the gradients set so far. */
  zorch_status (*backward)(void *ctx, zorch_tensor *grad, zorch_tensor *const *saved, int nin,
                           zorch_tensor **grad_in);
  /* Drops ctx, exactly once: when the node's saved state goes (after a
     backward that did not retain the graph, or when the graph is freed), or
     before zorch_custom_node returns when it recorded nothing. NULL: nothing
     to drop. */
  void (*release)(void *ctx);
} zorch_custom_fn;
/* True when grad mode is on and one of the n tensors requires grad: whether
   zorch_custom_node would record a node for them. */
ZORCH_API bool zorch_grad_needed(int n, zorch_tensor *const *ts);
/* A new tensor with out's values (sharing its storage) whose grad_fn is a node
   of fn over the nin inputs (at most 64), keeping the nsave tensors
   (ZORCH_CUSTOM_MAX_SAVED at most) for backward. fn is copied; ctx is
   passed to its functions. Without grad mode, or when no input requires
   grad, the result is out detached and nothing is recorded. NULL on failure
   (ctx released). A second backward through the node after its saved state
   went is ZORCH_ERR_STATE, as for every op. */
#define ZORCH_CUSTOM_MAX_IN 64
ZORCH_API zorch_tensor *zorch_custom_node(zorch_tensor *out, int nin, zorch_tensor *const *inputs, int nsave,
                                          zorch_tensor *const *save, const zorch_custom_fn *fn, void *ctx);
/* The count of in-place writes to t's storage so far (what autograd compares
   for the tensors a node saved). */
ZORCH_API uint32_t zorch_tensor_version(const zorch_tensor *t);
/* The seed g was last seeded with (PyTorch's initial_seed); with
   zorch_generator_offset it is all of g's state. */
ZORCH_API uint64_t zorch_generator_initial_seed(const zorch_generator *g);

/* ---- per-thread state: what an embedded VM runs under -----------------------------------
   The default generator, grad mode, the last error and the account that
   tensor memory is charged to belong to a state. Each thread has its own; an
   embedding host gives each VM one and makes it current while the VM runs, so
   that VMs on one thread do not see each other's seeds, modes or errors. */
typedef struct zstate zorch_state;
/* A fresh state: default seed, grad mode on, no error. NULL when out of memory. */
ZORCH_API zorch_state *zorch_state_new(void);
/* Frees a state that is not current on any thread; NULL is fine. */
ZORCH_API void zorch_state_free(zorch_state *s);
/* Makes s current on this thread (NULL: the thread's own) and returns the one
   that was, to be swapped back when the VM returns. */
ZORCH_API zorch_state *zorch_state_swap(zorch_state *s);

/* ---- page-locked host memory -------------------------------------------------------------- */
/* A CPU tensor of zeros in page-locked memory (cudaMallocHost, through the CUDA
   module) when pin is true and that is possible, else in ordinary memory;
   *pinned (may be NULL) says which. Page-locked memory moves to and from a
   GPU faster; without the module, a GPU, or with the driver refusing, the
   tensor is ordinary. */
ZORCH_API zorch_tensor *zorch_host_zeros(int ndim, const int64_t *shape, zorch_dtype dt, bool pin, bool *pinned);

/* ---- Lua ---------------------------------------------------------------------------------
   The Lua module: `require "zorch"` (zorch.so, or luaL_requiref(L, "zorch",
   luaopen_zorch, 1) in a host that has its own lua_State). */
typedef struct lua_State lua_State;
ZORCH_API int luaopen_zorch(lua_State *L);
/* Pushes t as a Lua tensor; the Lua value takes over the caller's reference. On
   NULL it raises the last error; it raises (and frees t) where luaopen_zorch
   has not run in L. [-0, +1, e] */
ZORCH_API void zorch_push_tensor(lua_State *L, zorch_tensor *t);
/* The tensor at stack index idx (borrowed), or raises a Lua error. [-0, +0, v] */
ZORCH_API zorch_tensor *zorch_check_tensor(lua_State *L, int idx);
/* The tensor at idx, or NULL when the value is not a tensor. [-0, +0, -] */
ZORCH_API zorch_tensor *zorch_to_tensor(lua_State *L, int idx);

/* ---- distributed runs ----------------------------------------------------------------------
   Ends every rank of an MPI job with `code` (what the zorch command does after an
   error, so no rank waits forever); nothing happens in a single process. */
ZORCH_API void zorch_dist_abort(int code);
/* The number of ranks the launcher started (1 outside a launcher). */
ZORCH_API int zorch_dist_world(void);
/* A collective that has waited longer than its timeout (the Engine's
   comm_timeout) calls the hang handler on the thread that waits, with a message
   naming the rank, the collective, its size and what it carried. The handler
   may end the process (the zorch command ends the job); when it returns, or
   none is set, the collective fails with ZORCH_ERR_TIMEOUT. The timed-out
   collective stays pending, so MPI and NCCL are unusable afterwards: every
   later collective fails with ZORCH_ERR_STATE; save what is needed and end the
   process. Process-wide; NULL removes the handler. */
typedef void (*zorch_hang_handler)(const char *msg, void *ud);
ZORCH_API void zorch_set_hang_handler(zorch_hang_handler fn, void *ud);

/* ---- embedding: a Lua VM with zorch loaded ---------------------------------------------- */
typedef struct zorch_vm zorch_vm;
typedef struct {
  int sandbox;      /* no io, os, package, debug, dofile, loadfile, require of C code,
                       string.dump, collectgarbage("stop"); zorch's own file functions
                       (save, load, read_csv, checkpoints, Logger files, plots) only
                       inside allow_read/allow_write (examples/embed/README.md) */
  size_t mem_limit; /* bytes of Lua heap (not tensor memory); 0: unlimited */
  /* Folders a sandboxed script may read (allow_read) and read and write
     (allow_write), with everything under them: NULL-terminated lists, resolved
     when the VM is made (each must exist); a path is checked after resolving
     symlinks and "..". NULL: none. Ignored without sandbox. */
  const char *const *allow_read;
  const char *const *allow_write;
  size_t tensor_limit;        /* bytes of tensor storage, handles and graph nodes made while the VM runs, all
                                 devices; 0: unlimited */
  unsigned long long max_instructions; /* Lua instructions per entry (dofile, dostring, call); 0: unlimited */
  double max_seconds;         /* wall-clock seconds per entry; 0: unlimited */
} zorch_vm_opts;
/* A new VM (opts may be NULL); NULL on failure with zorch_last_error() set. */
ZORCH_API zorch_vm *zorch_vm_new(const zorch_vm_opts *opts);
ZORCH_API void zorch_vm_free(zorch_vm *vm);
ZORCH_API zorch_status zorch_vm_dofile(zorch_vm *vm, const char *path);
ZORCH_API zorch_status zorch_vm_dostring(zorch_vm *vm, const char *chunk, const char *name);
/* Calls the global function `fn` with nin tensors; up to nout results that are
   tensors are stored in outs (new references; NULL for non-tensor results). */
ZORCH_API zorch_status zorch_vm_call(zorch_vm *vm, const char *fn, int nin, zorch_tensor *const *ins,
                           int nout, zorch_tensor **outs);
/* The message of the VM's last failure (with a traceback). */
ZORCH_API const char *zorch_vm_error(const zorch_vm *vm);
/* The VM's lua_State, for hosts that push their own values. */
ZORCH_API lua_State *zorch_vm_state(zorch_vm *vm);

/* ---- safetensors --------------------------------------------------------------------------
   Writes n named tensors (any device, converted to host) atomically: a temporary
   file in the same folder, fsynced, then renamed over `path`. */
ZORCH_API zorch_status zorch_save_safetensors(const char *path, int n, const char *const *names,
                                    zorch_tensor *const *ts);
/* Reads every tensor of a file; *names and *ts are arrays of *n entries the caller
   frees with zorch_safetensors_free. Corrupt or truncated files are errors that
   name the file and the problem. */
ZORCH_API zorch_status zorch_load_safetensors(const char *path, int *n, char ***names, zorch_tensor ***ts);
ZORCH_API void zorch_safetensors_free(int n, char **names, zorch_tensor **ts);
/* One tensor of a file, reading only its bytes. */
ZORCH_API zorch_tensor *zorch_load_safetensors_one(const char *path, const char *name);
/* zorch_save_safetensors with nmeta string pairs as the header's __metadata__. */
ZORCH_API zorch_status zorch_save_safetensors_meta(const char *path, int n, const char *const *names,
                                         zorch_tensor *const *ts, int nmeta, const char *const *meta_keys,
                                         const char *const *meta_values);
/* zorch_load_safetensors that also returns the __metadata__ (*nmeta pairs, none
   when absent; freed with zorch_safetensors_meta_free). A __metadata__ that does
   not map strings to strings is an error. */
ZORCH_API zorch_status zorch_load_safetensors_meta(const char *path, int *n, char ***names, zorch_tensor ***ts,
                                         int *nmeta, char ***meta_keys, char ***meta_values);
ZORCH_API void zorch_safetensors_meta_free(int n, char **keys, char **values);

/* ---- file formats: npy, IDX, CSV, token files, zorch.save trees, TensorBoard events ------
   The readers check every header field (and the file's size against it) before
   they allocate anything; a corrupt, truncated or hostile file is ZORCH_ERR_IO
   with a message that names the file and the fault, never a crash. On failure
   *out is NULL. Tensors come back on the CPU, contiguous, owned by the caller.
   Writers replace their file atomically, as zorch_save_safetensors does. */
/* A NumPy .npy file (versions 1 to 3): dtypes <f4 <f8 <f2 <i4 <i8 |u1 |b1 in C
   order (Fortran order, big-endian and other dtypes are refused). */
ZORCH_API zorch_status zorch_npy_load(const char *path, zorch_tensor **out);
/* Writes t (any device or layout) as a version 1.0 .npy file; bfloat16 is
   ZORCH_ERR_DTYPE (NumPy has none). */
ZORCH_API zorch_status zorch_npy_save(const char *path, zorch_tensor *t);
/* An IDX file (MNIST, Fashion-MNIST), plain or gzip-compressed, of the
   stored shape: uint8 stays uint8, int8 and int16 widen to int32, int32,
   float32 and float64 stay. At most 2^40 bytes of data; bytes past the data
   or a damaged gzip stream are errors. */
ZORCH_API zorch_status zorch_idx_load(const char *path, zorch_tensor **out);
/* CSV: rows of numbers into float32 (rows, cols); every row has the first
   row's field count, empty lines are skipped. NULL opts: no header line,
   delimiter ','. */
typedef struct {
  bool header;    /* the first line names the columns: skipped */
  char delimiter; /* 0: ',' */
} zorch_csv_opts;
ZORCH_API zorch_status zorch_csv_load(const char *path, const zorch_csv_opts *opts, zorch_tensor **out);
/* A file of token ids into int64 (n). A file that starts with llm.c's
   1,024-byte header (int32 magic 20240520, version 1: uint16 ids, 2: uint32
   ids, the token count) is read by it, whatever width says; else the file has
   no header and `width` bytes a token (1: bytes of text; 2: little-endian
   uint16; 4: little-endian uint32). Tokenizers: include/zorch_tokenizer.h. */
ZORCH_API zorch_status zorch_tokens_load(const char *path, int width, zorch_tensor **out);
/* Writes n bytes to path atomically (a temporary file beside it, fsynced,
   renamed over it; a symlink at path is followed). */
ZORCH_API zorch_status zorch_write_file_atomic(const char *path, const void *data, size_t n);

/* The format of zorch.save: a tree of tensors and plain values, as a list of
   items in pre-order. A LIST, MAP or PAIRS item opens a table that an END item
   closes; the items between are its entries: a LIST's in order, a MAP's each
   with `key` (UTF-8 text), a PAIRS table's alternately a key (a BOOL, INT,
   FLOAT other than NaN, or STRING item) and its value. Strings are UTF-8
   without NUL bytes (len 0: strlen; key_len likewise). */
typedef enum {
  ZORCH_TREE_BOOL = 0,
  ZORCH_TREE_INT,
  ZORCH_TREE_FLOAT,
  ZORCH_TREE_STRING,
  ZORCH_TREE_TENSOR,
  ZORCH_TREE_LIST,
  ZORCH_TREE_MAP,
  ZORCH_TREE_PAIRS,
  ZORCH_TREE_END
} zorch_tree_kind;
typedef struct {
  zorch_tree_kind kind;
  const char *key; /* a MAP entry's key, else NULL */
  size_t key_len;
  bool b;          /* BOOL */
  int64_t i;       /* INT */
  double f;        /* FLOAT */
  const char *s;   /* STRING */
  size_t len;
  zorch_tensor *t; /* TENSOR: borrowed when saving, owned by the tree when loaded */
} zorch_tree_item;
/* Writes the tree (items[0] opens its root table, items[n-1] closes it) to
   path: a MAP of tensors alone as a plain safetensors file, any other tree as
   its tensors, named by their paths ("opt.state.1.exp_avg", list entries
   counted from 1; a name taken gets "#2", ...), and the values as JSON in
   __metadata__["zorch.values"]. Map keys and pair keys are written sorted, so
   one tree gives one file. A malformed list (unclosed, a MAP entry without a
   key, a repeated key, text that is not UTF-8, more than 64 tables deep) is
   ZORCH_ERR_ARG and writes nothing. */
ZORCH_API zorch_status zorch_tree_save(const char *path, size_t n, const zorch_tree_item *items);
/* A tree as loaded: items as above (a file without values: one MAP of its
   tensors), and the file's tensors the values do not name, under their names. */
typedef struct {
  size_t n;
  zorch_tree_item *items;
  int nextra;
  const char **extra_names;
  zorch_tensor **extra;
} zorch_tree;
/* Reads a file zorch_tree_save (or any safetensors writer) made; malformed
   values are ZORCH_ERR_IO naming the file and the fault. Free with
   zorch_tree_free, which drops the tensors' references and the strings. */
ZORCH_API zorch_status zorch_tree_load(const char *path, zorch_tree **out);
ZORCH_API void zorch_tree_free(zorch_tree *tree);

/* TensorBoard event files (records of Event protobufs, each framed with
   masked CRC-32Cs). The CRC-32C (Castagnoli) of n bytes; masked: TensorBoard's
   ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
ZORCH_API uint32_t zorch_crc32c(const void *p, size_t n, bool masked);
/* One framed record: an Event at step with n scalar values (tags[i] of
   tag_lens[i] bytes, NULL tag_lens: strlen) and, when not NULL, file_version;
   wall_time in seconds since the epoch (NaN: now). *out (free() it) holds *len
   bytes. ZORCH_ERR_OOM when out of memory or over 64 MiB. */
ZORCH_API zorch_status zorch_event_encode(int64_t step, double wall_time, const char *file_version, int n,
                                          const char *const *tags, const size_t *tag_lens, const double *values,
                                          void **out, size_t *len);
/* dir/events.out.tfevents.<seconds>.<host>.<pid>, the name TensorBoard's own
   writer uses, into buf (n bytes; too short: ZORCH_ERR_ARG). */
ZORCH_API zorch_status zorch_events_filename(const char *dir, char *buf, size_t n);
/* A writer of a new event file in dir (which must exist), its first record
   the file version; add scalars, flush, close (which frees it; NULL is fine). */
typedef struct zorch_events zorch_events;
ZORCH_API zorch_status zorch_events_open(const char *dir, zorch_events **out);
ZORCH_API const char *zorch_events_path(const zorch_events *w);
ZORCH_API zorch_status zorch_events_add_scalar(zorch_events *w, const char *tag, double value, int64_t step);
ZORCH_API zorch_status zorch_events_flush(zorch_events *w);
ZORCH_API zorch_status zorch_events_close(zorch_events *w);

/* The declared ops (include/zorch_ops.h, documented in docs/api.md). */
#define ZORCH_OP_PROTO_(name, ret, params, ...) ZORCH_API ret zorch_##name params;
ZORCH_OPS(ZORCH_OP_PROTO_)
#undef ZORCH_OP_PROTO_

#ifdef __cplusplus
}
#endif
#endif
