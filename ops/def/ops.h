/* ops.h: helpers shared by the op definitions in ops/. */
#ifndef ZORCH_OPS_OPS_H
#define ZORCH_OPS_OPS_H
#include "../core/rng.h"
#include "../backend/backend.h"


/* A new contiguous tensor on `like`'s device. */
zorch_tensor *op_empty(const zorch_tensor *like, int ndim, const int64_t *shape, zorch_dtype dt);
zorch_tensor *op_zeros(const zorch_tensor *like, int ndim, const int64_t *shape, zorch_dtype dt);
/* t converted to dt (a new reference; t itself when it already has dt). No autograd. */
zorch_tensor *op_cast(zorch_tensor *t, zorch_dtype dt);
/* Converts a freshly made result to dt, taking `out` (NULL passes through). */
zorch_tensor *op_recast(zorch_tensor *out, zorch_dtype dt);
/* dst += src in place (src broadcast to dst, converted to its dtype; 16-bit
   floats add in float32 and round once); no autograd. */
zorch_status op_add_(zorch_tensor *dst, zorch_tensor *src);
/* zorch_copy_ without autograd: a data write (zorch's own buffers, such as
   parameters copied into the ZeRO engine's flat buffers). */
zorch_status op_copy_(zorch_tensor *dst, zorch_tensor *src);
/* zorch_full without the range check: the kernels' conversion of value to dt
   (integers saturate), for scalars an op makes to compute with. */
zorch_tensor *op_full(int ndim, const int64_t *shape, double value, zorch_dtype dt, zorch_device dev);
/* zorch_fill_ and zorch_fill_i64_ without autograd: data writes. */
zorch_status op_fill_(zorch_tensor *dst, double value);
zorch_status op_fill_i64_(zorch_tensor *dst, int64_t value);
/* The storage span [*lo, *hi) of a geometry, in elements (empty for no elements). */
void op_span(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset, int64_t *lo, int64_t *hi);
/* An in-place write that autograd sees (inplace.c): op_write_begin, before
   writing src (NULL: a constant) into `part` (t, or a part of t), makes in
   grad mode the node of the values after it, on the root of t's views, or
   fails naming op where PyTorch refuses the write; op_write_end, given the
   write's status, installs the node (the views then follow it) or drops it. */
typedef struct {
  ag_node *node; /* NULL: the write is data only */
  zorch_tensor *root;
} op_write;
zorch_status op_write_begin(const char *op, zorch_tensor *t, zorch_tensor *part, zorch_tensor *src, op_write *w);
zorch_status op_write_end(op_write *w, zorch_status st);
/* t[index] = src, or the constant (ivalue when integer, else value) when src
   is NULL: a write into index `index` (0-based, negative from the end) of
   dim 0 that autograd sees, as zorch_copy_ and zorch_fill_ do for the whole. */
/* zorch_assign_ (the in-place ops' write) is public: include/zorch.h. */
zorch_status op_assign_index(zorch_tensor *t, int64_t index, zorch_tensor *src, bool integer, int64_t ivalue,
                             double value);
/* The elementwise binary kernel k with broadcasting and promotion; no autograd. */
zorch_tensor *op_binary(bop k, zorch_tensor *a, zorch_tensor *b, double p0, double p1);
/* The running sum along dim (wrapped) of a, from the end when `reverse`, in the
   kernel's dtypes: float32/float64 (16-bit floats through float32), int64 for
   integers; the result has a's float dtype, or int64. No autograd. */
zorch_tensor *op_cumsum(zorch_tensor *a, int dim, bool reverse);
/* Contiguous t (t itself, retained, when it is); no autograd. */
zorch_tensor *op_contig(zorch_tensor *t);
/* t converted to dt and contiguous (a new reference); no autograd. */
zorch_tensor *op_cast_contig(zorch_tensor *t, zorch_dtype dt);
/* A view of t with `shape` (ndim >= t->ndim) through stride-0 broadcasting; t
   itself, retained, when the shape is its own. Read-only: callers free it. */
zorch_tensor *op_broadcast_view(const zorch_tensor *t, int ndim, const int64_t *shape);
/* Computes in a float dtype wide enough for the math: f32/f64 as is, 16-bit
   floats and integers through float32 (`*work` gets that dtype). */
zorch_dtype op_compute_dtype(zorch_dtype dt);
/* The same for the elementwise and GEMM kernels of like's backend: 16-bit floats
   stay 16-bit where the backend computes them itself (in float32, rounding once). */
zorch_dtype op_compute_dtype_on(const zorch_tensor *like, zorch_dtype dt);
/* Cleanup in op definitions: temporaries start NULL, each step that can fail
   jumps to one label on NULL (`if (!(t = f(x))) goto done;`), and the label
   frees them all at once with OP_FREE(t1, t2, ...); NULLs are fine. */
void op_free_n(int n, zorch_tensor *const *ts);
#define OP_FREE(...)                                                                       \
  op_free_n((int)(sizeof((zorch_tensor *[]){__VA_ARGS__}) / sizeof(zorch_tensor *)),       \
            (zorch_tensor *[]){__VA_ARGS__})
/* Canonical (outer, r, inner) form of a reduction over `dims`: a contiguous
   tensor with the reduced dims moved together (perm says where each came from). */
typedef struct {
  int nred;
  bool red[ZORCH_MAX_DIMS];
  int perm[ZORCH_MAX_DIMS];
  int64_t outer, r, inner;
  int out_ndim;                     /* keepdim shape rank is the input's */
  int64_t keep_shape[ZORCH_MAX_DIMS];
  int64_t out_shape[ZORCH_MAX_DIMS];
} red_plan;
zorch_status red_plan_make(const char *op, const zorch_tensor *a, int ndims, const int *dims,
                           bool keepdim, red_plan *p);
/* a laid out as (outer, r, inner) per the plan (permuted and contiguous). */
zorch_tensor *red_plan_layout(zorch_tensor *a, const red_plan *p);
/* Inverse of red_plan_layout for a tensor in the plan's layout. */
zorch_tensor *red_plan_unlayout(zorch_tensor *c, const zorch_tensor *like, const red_plan *p);
#endif
