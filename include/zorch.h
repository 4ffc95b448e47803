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
ZORCH_API zorch_tensor *zorch_empty(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev);
ZORCH_API zorch_tensor *zorch_zeros(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev);
ZORCH_API zorch_tensor *zorch_ones(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev);
ZORCH_API zorch_tensor *zorch_full(int ndim, const int64_t *shape, double value, zorch_dtype dt,
                         zorch_device dev);
/* [start, end) by step, like torch.arange. */
ZORCH_API zorch_tensor *zorch_arange(double start, double end, double step, zorch_dtype dt,
                           zorch_device dev);
/* Integer twins of full and arange (and fill_ below): the value travels as an
   int64_t, so an int64 tensor gets all 64 bits (a double holds integers
   exactly only up to 2^53). Other dtypes get the value converted as from
   the double path. */
ZORCH_API zorch_tensor *zorch_full_i64(int ndim, const int64_t *shape, int64_t value, zorch_dtype dt,
                                       zorch_device dev);
ZORCH_API zorch_tensor *zorch_arange_i64(int64_t start, int64_t end, int64_t step, zorch_dtype dt,
                                         zorch_device dev);
/* Uniform [0, 1) and standard normal from a counter-based generator (NULL: the
   default one). The same seed gives the same numbers on every device. */
ZORCH_API zorch_tensor *zorch_rand(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev,
                         zorch_generator *gen);
ZORCH_API zorch_tensor *zorch_randn(int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev,
                          zorch_generator *gen);
/* Integers uniform in [low, high) (high > low), drawn as int64 and converted to
   dt; and a random permutation of 0..n-1. Counter based like rand: the same seed
   gives the same numbers on every device. */
ZORCH_API zorch_tensor *zorch_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                                      zorch_dtype dt, zorch_device dev, zorch_generator *gen);
ZORCH_API zorch_tensor *zorch_randperm(int64_t n, zorch_dtype dt, zorch_device dev,
                                       zorch_generator *gen);
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
ZORCH_API zorch_tensor *zorch_view(zorch_tensor *t, int ndim, const int64_t *shape); /* -1 infers */
ZORCH_API zorch_tensor *zorch_reshape(zorch_tensor *t, int ndim, const int64_t *shape);
ZORCH_API zorch_tensor *zorch_transpose(zorch_tensor *t, int d0, int d1);
ZORCH_API zorch_tensor *zorch_permute(zorch_tensor *t, const int *dims);
ZORCH_API zorch_tensor *zorch_narrow(zorch_tensor *t, int dim, int64_t start, int64_t length);
ZORCH_API zorch_tensor *zorch_select(zorch_tensor *t, int dim, int64_t index);
ZORCH_API zorch_tensor *zorch_expand(zorch_tensor *t, int ndim, const int64_t *shape); /* -1 keeps */
ZORCH_API zorch_tensor *zorch_unsqueeze(zorch_tensor *t, int dim);
ZORCH_API zorch_tensor *zorch_squeeze(zorch_tensor *t, int dim);
ZORCH_API zorch_tensor *zorch_flatten(zorch_tensor *t);
/* ---- copies ------------------------------------------------------------------------- */
ZORCH_API zorch_tensor *zorch_contiguous(zorch_tensor *t); /* t itself (retained) when contiguous */
ZORCH_API zorch_tensor *zorch_clone(zorch_tensor *t);
ZORCH_API zorch_tensor *zorch_to_dtype(zorch_tensor *t, zorch_dtype dt); /* differentiable for floats */
ZORCH_API zorch_tensor *zorch_to_device(zorch_tensor *t, zorch_device dev);
/* Copies src into dst (broadcast, dtype converted). In grad mode the write is
   recorded on dst when dst has a history or src requires grad (dst's
   grad_fn becomes CopyBackwards; FillBackward for the fills). A leaf that
   requires grad takes constants and values without grad as data and stays
   a leaf; a src that requires grad is refused there (ZORCH_ERR_STATE).
   Reading, through another handle, values written since a recorded op made
   them refuses the backward (docs/api.md, "In-place writes"). */
ZORCH_API zorch_status zorch_copy_(zorch_tensor *dst, zorch_tensor *src);
ZORCH_API zorch_status zorch_fill_(zorch_tensor *dst, double value);
ZORCH_API zorch_status zorch_fill_i64_(zorch_tensor *dst, int64_t value);

/* ---- elementwise ops (NumPy broadcasting, PyTorch type promotion) ------------------ */
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
/* Predicates: ZORCH_BOOL tensors, no gradient (integer inputs: never NaN or
   infinite). */
ZORCH_API zorch_tensor *zorch_isnan(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_isinf(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_isposinf(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_isneginf(zorch_tensor *a);
ZORCH_API zorch_tensor *zorch_isfinite(zorch_tensor *a);
/* NaN to `nan`, +inf to *posinf and -inf to *neginf (NULL: the largest and
   the lowest finite value of a's dtype); the gradient passes where a is
   finite. Integer inputs come back as a copy. */
ZORCH_API zorch_tensor *zorch_nan_to_num(zorch_tensor *a, double nan, const double *posinf,
                                         const double *neginf);
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
/* start + weight * (end - start), PyTorch's lerp: one float dtype for all;
   differentiable in start, end and a weight tensor. */
ZORCH_API zorch_tensor *zorch_lerp(zorch_tensor *start, zorch_tensor *end, zorch_tensor *weight);
ZORCH_API zorch_tensor *zorch_lerp_scalar(zorch_tensor *start, zorch_tensor *end, double weight);
/* t + value * a * b and t + value * a / b (addcdiv refuses two integer tensors). */
ZORCH_API zorch_tensor *zorch_addcmul(zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value);
ZORCH_API zorch_tensor *zorch_addcdiv(zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value);
ZORCH_API zorch_tensor *zorch_clamp_min(zorch_tensor *a, double min);
ZORCH_API zorch_tensor *zorch_clamp_max(zorch_tensor *a, double max);
/* |a - b| <= atol + rtol * |b| (or a == b; two NaNs too with equal_nan), a bool
   tensor; a and b of one dtype, broadcast. allclose: all of them. equal: the
   same shape and values. No gradient. */
ZORCH_API zorch_tensor *zorch_isclose(zorch_tensor *a, zorch_tensor *b, double rtol, double atol,
                                      bool equal_nan);
ZORCH_API zorch_status zorch_allclose(zorch_tensor *a, zorch_tensor *b, double rtol, double atol,
                                      bool equal_nan, bool *out);
ZORCH_API zorch_status zorch_equal(zorch_tensor *a, zorch_tensor *b, bool *out);
/* Comparisons give ZORCH_BOOL tensors; no gradient. */
ZORCH_API zorch_tensor *zorch_eq(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_lt(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_gt(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_ne(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_le(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_ge(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_where(zorch_tensor *cond, zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_masked_fill(zorch_tensor *a, zorch_tensor *mask, double value);

/* ---- reductions (dims: list of ndims entries; ndims 0 means all) ---------------------- */
/* Values of the maximum; `indices` (optional out, int64, flat index within the reduced
   dims) gets the first position of each maximum. */
ZORCH_API zorch_tensor *zorch_max(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                        zorch_tensor **indices);
/* The same for the minimum. */
ZORCH_API zorch_tensor *zorch_min(zorch_tensor *a, int ndims, const int *dims, bool keepdim,
                                  zorch_tensor **indices);
/* Only the indices (int64) of zorch_max / zorch_min; no gradient. */
ZORCH_API zorch_tensor *zorch_argmax(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
ZORCH_API zorch_tensor *zorch_argmin(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
/* log(sum(exp(x))) over dims, computed with the max subtracted (stable; -inf
   where every element is -inf) */
ZORCH_API zorch_tensor *zorch_logsumexp(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
/* x with the elements above (tril) or below (triu) diagonal k of the last two
   dims set to 0 (k > 0: above the main diagonal) */
ZORCH_API zorch_tensor *zorch_tril(zorch_tensor *x, int64_t k);
ZORCH_API zorch_tensor *zorch_triu(zorch_tensor *x, int64_t k);

/* ---- linear algebra and nn ------------------------------------------------------------- */
ZORCH_API zorch_tensor *zorch_matmul(zorch_tensor *a, zorch_tensor *b);
/* x (..., in) · w (out, in)ᵀ + b (out); b may be NULL. */
ZORCH_API zorch_tensor *zorch_linear(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b);
/* linear followed by an activation, fused into the GEMM where the device can
   (cuBLASLt's bias and relu epilogues); GELU (erf form, or the tanh form) runs
   right after the GEMM and is one autograd node with it. */
typedef enum { ZORCH_ACT_NONE, ZORCH_ACT_RELU, ZORCH_ACT_GELU, ZORCH_ACT_GELU_TANH } zorch_activation;
ZORCH_API zorch_tensor *zorch_linear_act(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b, zorch_activation act);
typedef enum { ZORCH_REDUCE_MEAN = 0, ZORCH_REDUCE_SUM, ZORCH_REDUCE_NONE } zorch_reduction;
ZORCH_API zorch_tensor *zorch_mse_loss(zorch_tensor *input, zorch_tensor *target, zorch_reduction r);
/* logits (N, C) or (C); target int64 (N) or () of class indices in [0, C);
   entries equal to ignore_index add nothing. */
ZORCH_API zorch_tensor *zorch_cross_entropy(zorch_tensor *logits, zorch_tensor *target,
                                  zorch_reduction r, int64_t ignore_index);
/* The same on log-probabilities logp (N, C) or (C): -logp[target], reduced. */
ZORCH_API zorch_tensor *zorch_nll_loss(zorch_tensor *logp, zorch_tensor *target,
                                       zorch_reduction r, int64_t ignore_index);
/* weight (V, D), idx int64 of any shape -> (*idx.shape, D). */
ZORCH_API zorch_tensor *zorch_embedding(zorch_tensor *weight, zorch_tensor *idx);
/* Normalises over the last `nnorm` dims; weight and bias (their shape) may be NULL. */
ZORCH_API zorch_tensor *zorch_layer_norm(zorch_tensor *x, int nnorm, zorch_tensor *weight,
                               zorch_tensor *bias, double eps);
/* Scaled dot-product attention, softmax(scale q k^T) v, fused: q (B, H, Tq, D),
   k and v (B, H, Tk, D) (or (BH, T, D)), one float dtype -> (B, H, Tq, D).
   scale <= 0 means 1/sqrt(D). With `causal`, query i (0-based) sees key j only
   when j <= i + Tk - Tq (the mask aligned to the bottom right: lower triangular
   for Tq == Tk, every key for one query over a key/value cache); a query that
   sees no key gets zeros. Memory beyond the output is O(B H Tq).
   Differentiable in q, k and v. */
ZORCH_API zorch_tensor *zorch_attention(zorch_tensor *q, zorch_tensor *k, zorch_tensor *v, bool causal,
                                        double scale);
/* Batch normalisation of x (N, C), (N, C, L) or (N, C, H, W) over all dims but
   C, as torch.nn.functional.batch_norm. training: the batch's statistics, and
   running_mean/running_var (C, may be NULL) updated in place with `momentum`
   (unbiased variance); otherwise the running stats. weight, bias may be NULL. */
ZORCH_API zorch_tensor *zorch_batch_norm(zorch_tensor *x, zorch_tensor *running_mean,
                                         zorch_tensor *running_var, zorch_tensor *weight,
                                         zorch_tensor *bias, bool training, double momentum,
                                         double eps);
ZORCH_API zorch_tensor *zorch_dropout(zorch_tensor *x, double p, bool training, zorch_generator *gen);
/* ---- convolution and pooling over NCHW images (x (N, C, H, W) or one image
   (C, H, W)); PyTorch's shapes and output sizes. Zeros in the options mean the
   defaults, so `{0}` (or NULL for conv2d) is PyTorch's default call. */
typedef struct {
  int64_t stride[2];   /* 0: 1 */
  int64_t padding[2];  /* zeros added on each side */
  int64_t dilation[2]; /* 0: 1 */
  int64_t groups;      /* 0: 1 */
} zorch_conv2d_opts;
/* w (out, C / groups, kh, kw), b (out) or NULL -> (N, out, OH, OW); o may be NULL. */
ZORCH_API zorch_tensor *zorch_conv2d(zorch_tensor *x, zorch_tensor *w, zorch_tensor *b,
                                     const zorch_conv2d_opts *o);
typedef struct {
  int64_t kernel[2];   /* required */
  int64_t stride[2];   /* 0: the kernel */
  int64_t padding[2];  /* at most half the kernel; padding never wins a max */
  int64_t dilation[2]; /* 0: 1; max pooling only */
  bool ceil_mode;      /* round the output size up (a window must start inside the input or its left padding) */
  bool exclude_pad;    /* avg_pool2d divides by the inputs inside the image (PyTorch's count_include_pad = false) */
} zorch_pool2d_opts;
/* indices (may be NULL) gets each maximum's position iy * W + ix in its plane (int64). */
ZORCH_API zorch_tensor *zorch_max_pool2d(zorch_tensor *x, const zorch_pool2d_opts *o,
                                         zorch_tensor **indices);
ZORCH_API zorch_tensor *zorch_avg_pool2d(zorch_tensor *x, const zorch_pool2d_opts *o);
/* Output (oh, ow): the window of output i spans floor(i * H / oh) .. ceil((i + 1) * H / oh). */
ZORCH_API zorch_tensor *zorch_adaptive_avg_pool2d(zorch_tensor *x, int64_t oh, int64_t ow);
ZORCH_API zorch_tensor *zorch_cat(int n, zorch_tensor *const *ts, int dim);
ZORCH_API zorch_tensor *zorch_stack(int n, zorch_tensor *const *ts, int dim);

/* ---- more reductions, shape ops, creation and matrix products (PyTorch's) -------------- */
/* Max and min over dims with the gradient shared evenly among ties, even over one dim. */
ZORCH_API zorch_tensor *zorch_amax(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
ZORCH_API zorch_tensor *zorch_amin(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
/* Product over one dim (ndims 1) or all (ndims 0); integers and bool give int64. */
ZORCH_API zorch_tensor *zorch_prod(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
/* Running product along dim (integers and bool give int64). */
ZORCH_API zorch_tensor *zorch_cumprod(zorch_tensor *a, int dim);
/* Vector norm over dims: p = 2, 1, INFINITY, -INFINITY, 0 (the count of
   nonzeros) or any other number: sum(|a|^p)^(1/p). Floating-point inputs. */
ZORCH_API zorch_tensor *zorch_norm(zorch_tensor *a, double p, int ndims, const int *dims, bool keepdim);
/* Whether any (all) elements are nonzero: bool (uint8 for a uint8 input). */
ZORCH_API zorch_tensor *zorch_any(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
ZORCH_API zorch_tensor *zorch_all(zorch_tensor *a, int ndims, const int *dims, bool keepdim);
ZORCH_API zorch_tensor *zorch_count_nonzero(zorch_tensor *a, int ndims, const int *dims); /* int64 */
/* A copy with the order of dims reversed. */
ZORCH_API zorch_tensor *zorch_flip(zorch_tensor *a, int ndims, const int *dims);
/* Elements shifted along dims (the flattened tensor when ndims is 0, with one shift). */
ZORCH_API zorch_tensor *zorch_roll(zorch_tensor *a, int nshifts, const int64_t *shifts, int ndims, const int *dims);
/* PyTorch's repeat (n >= a's dims, leading reps add dims) and tile (fewer reps: 1s in front). */
ZORCH_API zorch_tensor *zorch_repeat(zorch_tensor *a, int n, const int64_t *reps);
ZORCH_API zorch_tensor *zorch_tile(zorch_tensor *a, int n, const int64_t *reps);
/* Each element repeated `repeats` times along *dim (the flattened input when dim is NULL). */
ZORCH_API zorch_tensor *zorch_repeat_interleave(zorch_tensor *a, int64_t repeats, const int *dim);
/* The same with a count per element of dim (an int64 vector of its size, or of one count). */
ZORCH_API zorch_tensor *zorch_repeat_interleave_tensor(zorch_tensor *a, zorch_tensor *repeats, const int *dim);
/* out[i] = select(a, dim, i) for every i: out needs room for a's size in dim. */
ZORCH_API zorch_status zorch_unbind(zorch_tensor *a, int dim, zorch_tensor **out);
/* A view with dims src[i] moved to dst[i], the others in their order. */
ZORCH_API zorch_tensor *zorch_movedim(zorch_tensor *a, int n, const int *src, const int *dst);
/* dim split into sizes (one may be -1). */
ZORCH_API zorch_tensor *zorch_unflatten(zorch_tensor *a, int dim, int nsizes, const int64_t *sizes);
typedef enum { ZORCH_PAD_CONSTANT = 0, ZORCH_PAD_REFLECT, ZORCH_PAD_REPLICATE, ZORCH_PAD_CIRCULAR } zorch_pad_mode;
/* torch.nn.functional.pad: pads = (before, after) pairs for the last dims, the
   last dim first; negative pads crop (constant and circular modes). */
ZORCH_API zorch_tensor *zorch_pad(zorch_tensor *a, int npads, const int64_t *pads, zorch_pad_mode mode, double value);
/* n x m identity (m = -1: n). */
ZORCH_API zorch_tensor *zorch_eye(int64_t n, int64_t m, zorch_dtype dt, zorch_device dev);
ZORCH_API zorch_tensor *zorch_linspace(double start, double end, int64_t steps, zorch_dtype dt, zorch_device dev);
ZORCH_API zorch_tensor *zorch_logspace(double start, double end, int64_t steps, double base, zorch_dtype dt,
                                       zorch_device dev);
/* int64 classes (0-based) to int64 one-hot rows; num_classes -1: the largest class + 1. */
ZORCH_API zorch_tensor *zorch_one_hot(zorch_tensor *idx, int64_t num_classes);
/* Matrix products with PyTorch's strict shapes: (n,k)(k,m), (b,n,k)(b,k,m), (n,k)(k), (k)(k). */
ZORCH_API zorch_tensor *zorch_mm(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_bmm(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_mv(zorch_tensor *a, zorch_tensor *v);
ZORCH_API zorch_tensor *zorch_dot(zorch_tensor *a, zorch_tensor *b);
ZORCH_API zorch_tensor *zorch_outer(zorch_tensor *a, zorch_tensor *b);
/* beta * c + alpha * mm(a, b) (bmm for baddbmm); c broadcasts to the product. */
ZORCH_API zorch_tensor *zorch_addmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha);
ZORCH_API zorch_tensor *zorch_baddbmm(zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha);
/* The view of diagonal `offset` over dim1 and dim2, appended as the last dim. */
ZORCH_API zorch_tensor *zorch_diagonal(zorch_tensor *t, int64_t offset, int dim1, int dim2);
/* A vector to a square matrix with it on diagonal offset, or a matrix's diagonal (a copy). */
ZORCH_API zorch_tensor *zorch_diag(zorch_tensor *t, int64_t offset);
ZORCH_API zorch_tensor *zorch_trace(zorch_tensor *t);

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

/* n indices (int64) drawn from each row of probs, (N) or (B, N) non-negative
   finite weights (normalised or not), as torch.multinomial: with replacement
   each draw is independent; without, a category is drawn at most once (n <= the
   row's positive weights). Result (n) or (B, n) on probs' device; gen NULL draws
   from the default generator. */
ZORCH_API zorch_tensor *zorch_multinomial(zorch_tensor *probs, int64_t n, bool replacement,
                                          zorch_generator *gen);
/* ---- host memory: bytes of host (CPU) tensor storage, all threads ---------------- */
ZORCH_API void zorch_host_memory_stats(size_t *in_use, size_t *peak);
ZORCH_API void zorch_host_memory_reset_peak(void); /* the peak becomes what is in use now */

/* ---- fused optimizer updates: one pass, in place, PyTorch's formulas --------------------
   param, grad and state tensors share a shape, dtype f32 or f64 and contiguity. */
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled; /* AdamW: weight decay applied to the parameter, not the gradient */
  bool amsgrad;   /* uses max_v */
  bool no_bias_correction; /* DeepSpeed's bias_correction false: step size lr, denominator sqrt(v) + eps */
} zorch_adam_opts;
ZORCH_API zorch_status zorch_adam_step(zorch_tensor *param, zorch_tensor *grad, zorch_tensor *m,
                             zorch_tensor *v, zorch_tensor *max_v, int64_t step,
                             const zorch_adam_opts *o);
typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
} zorch_sgd_opts;
/* `buf` is the momentum buffer (NULL when momentum is 0); first_step copies the
   gradient into it, as PyTorch does on its first step. */
ZORCH_API zorch_status zorch_sgd_step(zorch_tensor *param, zorch_tensor *grad, zorch_tensor *buf,
                            bool first_step, const zorch_sgd_opts *o);

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
/* dim (negative: from the end) of a tensor of ndim dims (ndim + extra
   positions: extra 1 for an insert position, as unsqueeze's) as 0..ndim+extra-1
   in *out. Out of range: ZORCH_ERR_ARG naming op and the valid range (a 0-d
   tensor takes 0 and -1). */
ZORCH_API zorch_status zorch_wrap_dim(const char *op, int dim, int ndim, int extra, int *out);
/* A 0-d tensor of value in dt on dev: the operand a number stands for beside a
   tensor. Unlike zorch_full it takes any value: converted as a kernel converts
   its scalar argument (integers saturate), not refused when out of dt's range. */
ZORCH_API zorch_tensor *zorch_scalar(double value, zorch_dtype dt, zorch_device dev);
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
