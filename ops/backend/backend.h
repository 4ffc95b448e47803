/* backend.h: the kernel backend table. Ops (the files in ops/) check shapes, allocate outputs and
   record autograd; the kernels they call come from the backend of the tensors'
   device. A CUDA backend fills the same table, so callers never change.

   Kernel contracts (all tensors on the backend's device):
   - copy: dst and src have one shape; any strides (src may broadcast with stride
     0), any dtypes; converts.
   - unary/binary/where: out has the broadcast shape and any strides; inputs are
     views of that shape (stride 0 where broadcast) with out's dtype, except the
     comparisons (out is bool) and `where`'s condition (bool).
   - reduce, softmax, index ops, norms, optimizers: inputs contiguous, shapes given
     in the (outer, n, inner) form the op layer computes. */
#ifndef ZORCH_OPS_BACKEND_H
#define ZORCH_OPS_BACKEND_H
#include "../core/device.h"
#include "../core/node.h"
#include "../core/tensor.h"
#include "pointwise_ops.h" /* the uop and bop enums */

typedef enum { RED_SUM, RED_MAX, RED_MIN } red_op;

/* The kernel slots of the declared ops (include/zorch_ops.h): ZORCH_OP_KERNELS
   expands KERNEL(slot, params) and KERNEL_OPT(slot, params) (a slot the CPU
   alone fills), defined by the user, for each, in order. */
#define ZK_ROW_(name, ret, params, args, lua, kernels, cases) ZORCH_EXPAND_ kernels
#define ZORCH_OP_KERNELS ZORCH_OPS(ZK_ROW_)

/* Where gather and scatter read and write: the index has shape `ishape`, the
   indexed tensor `ashape` (both contiguous, `ndim` dims); outside `dim` the
   index is no larger than the indexed tensor. */
typedef struct index_geom {
  int ndim, dim;
  int64_t ishape[ZORCH_MAX_DIMS], ashape[ZORCH_MAX_DIMS];
} index_geom;

/* The gemm slot's arguments (matmul's row in include/zorch_ops.h): row-major
   C (m, n) = epilogue(alpha * op(A) op(B) + beta * C) on device pointers of
   device `dev`; the epilogue adds `bias` (n, may be NULL) to every row, then
   applies relu when asked. */
typedef struct gemm_args {
  zorch_dtype dt;
  int dev;
  bool ta, tb, relu;
  int64_t m, n, k, lda, ldb, ldc;
  double alpha, beta;
  const void *a, *b, *bias;
  void *c;
} gemm_args;

/* The window geometry of a 2-d convolution or pooling over NCHW images: n
   images (pooling: n * c planes, c = 1) of c channels, h x w in, oh x ow out,
   kernel kh x kw, stride, zero padding and dilation. */
typedef struct conv_geom {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} conv_geom;

/* What the attention kernels compute over (attention's row in include/zorch_ops.h):
   bh query heads (B * H), tq queries and tk keys of head dim d; query head h
   reads key/value head h / group; heads is H, so head h is batch h / heads.
   mask: NULL, or a bool (true: attend) or compute-dtype (added) view of
   (B, H, tq, tk), stride 0 where it broadcasts. kseg and qseg: NULL, or int64
   (B, tk) and (B, tq) with unit column stride. window 0: none. */
typedef struct att_geom {
  int64_t bh, tq, tk, d, heads, group, window;
  bool causal;
  double scale;
  const zorch_tensor *mask, *kseg, *qseg;
} att_geom;

/* The pooling kinds: max (argmax kept), average counting the padding or not,
   and adaptive average (PyTorch's windows floor(i*h/oh) .. ceil((i+1)*h/oh)). */
typedef enum { POOL_MAX, POOL_AVG, POOL_AVG_EXCL_PAD, POOL_ADAPTIVE_AVG } pool_kind;

typedef struct backend {
  const char *name;
  /* unary, binary and gemm take bfloat16/float16 tensors themselves (computing
     in float32, rounding once); otherwise the op layer converts through float32 */
  bool native16;
  /* gemm takes bfloat16/float16 operands itself even where native16 is false
     (the CPU's bf16 matmul units), so matmul and linear do not convert them */
  bool gemm16;
  /* reduce (sums, into float32 out), softmax (inner 1), softmax_bwd, nll,
     nll_bwd, layer_norm and layer_norm_bwd take bfloat16/float16 tensors
     themselves, computing in float32 and rounding once: layer norm's mean and
     rstd are float32, nll's loss and nll_bwd's g float32, the rest in the input's
     dtype. Otherwise the op layer converts them through float32. */
  bool rows16;
  zorch_status (*copy)(zorch_tensor *dst, const zorch_tensor *src);
  zorch_status (*fill)(zorch_tensor *dst, double v);
  zorch_status (*unary)(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1);
  zorch_status (*binary)(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b,
                         double p0, double p1);
  zorch_status (*where)(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a,
                        const zorch_tensor *b);
  /* The attention kernels (include/zorch_ops.h) also take q, k, v, out, g and the gradients as
     strided views whose last dim is contiguous (the heads of a fused QKV
     projection in place), not only contiguous tensors. */
  bool attention_strided;
  /* Optional (NULL: always): whether conv2d and conv2d_bwd (include/zorch_ops.h)
     take this convolution; when false, ops/def/conv.c runs im2col and the GEMM
     (CUDA: cuDNN absent, or sizes beyond its int descriptors). */
  bool (*conv2d_takes)(const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g);
  /* host <-> device and device -> device copies of contiguous bytes (NULL on
     the CPU backend); to_host waits for the device's queued work. */
  zorch_status (*to_host)(void *dst, const void *src, size_t n, int index);
  zorch_status (*from_host)(void *dst, const void *src, size_t n, int index);
  zorch_status (*to_device)(void *dst, const void *src, size_t n, int index);
  /* the declared ops' kernels (include/zorch_ops.h) */
#define KERNEL(slot, params) zorch_status(*slot) params;
#define KERNEL_OPT KERNEL
  ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
} backend;

/* The backend of a device type, or NULL when it was not built. */
const backend *backend_get(zorch_device_type type);
/* The backend of a tensor (never NULL for a tensor that exists). */
static inline const backend *backend_of(const zorch_tensor *t) {
  return backend_get(t->st->device.type);
}
void backend_register(zorch_device_type type, const backend *b);
/* The CPU backend, defined in ops/cpu. */
extern const backend cpu_backend;
#endif
