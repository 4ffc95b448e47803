// elementwise.cu: unary and binary ops over any strides and broadcasts, their
// cases generated from the op registry (ops/backend/pointwise_ops.h) on the per-element
// math of ops/backend/math.h (the formulas the CPU tests check), copies with
// dtype conversion, fill, where, and the CPU's Philox streams. 16-bit floats
// load as float, compute in float and round once on store, as the CPU path does.
#include "cuda.h"

// The cases of every registered op (ops/backend/pointwise_ops.h): the registry's
// expressions name their type T and read x (and y), p0, p1.
#define CU_FCASE_U(ID, name, node, fmath, ...) \
  case UOP_##ID: return (fmath);
#define CU_FCASE_B(ID, name, node, out, fmath, ...) \
  case BOP_##ID: return (fmath);
template <typename T>
__device__ inline T unary_math(int op, T x, T p0, T p1) {
  switch (op) { ZORCH_UNARY_OPS(CU_FCASE_U) }
  return x;
}
// Comparisons give 0 or 1, stored as bool by the kernel.
template <typename T>
__device__ inline T binary_math(int op, T x, T y, T p0, T p1) {
  switch (op) { ZORCH_BINARY_OPS(CU_FCASE_B) }
  return x;
}

// integers: the ops with integer math (the op layer sends no others), on int64
#define CU_ICASE_NO_INT(K, e)
#define CU_ICASE_FLOAT(K, e)
#define CU_ICASE_SIGNED(K, e) \
  case K: return (e);
#define CU_ICASE_INT(K, e) \
  case K: return (e);
#define CU_ICASE_U(ID, name, node, fmath, ik, imath, ...) CU_ICASE_##ik(UOP_##ID, imath)
#define CU_ICASE_B(ID, name, node, out, fmath, ik, imath, ...) CU_ICASE_##ik(BOP_##ID, imath)
__device__ inline int64_t unary_int(int op, int64_t x, double dp0, double dp1) {
  typedef int64_t T;
  const T p0 = (T)dp0, p1 = (T)dp1;
  (void)p0;
  (void)p1;
  switch (op) { ZORCH_UNARY_OPS(CU_ICASE_U) }
  return x;
}
__device__ inline int64_t binary_int(int op, int64_t x, int64_t y) {
  typedef int64_t T;
  const T p0 = 0, p1 = 0;
  (void)p0;
  (void)p1;
  switch (op) { ZORCH_BINARY_OPS(CU_ICASE_B) }
  return x;
}

// What the host checks before a launch: integer kernels, bool outputs.
#define CU_HAS_INT_NO_INT false
#define CU_HAS_INT_FLOAT false
#define CU_HAS_INT_SIGNED true
#define CU_HAS_INT_INT true
#define CU_IS_BOOL_SAME false
#define CU_IS_BOOL_BOOL true
#define CU_UINT(ID, name, node, fmath, ik, ...) CU_HAS_INT_##ik,
#define CU_BINT(ID, name, node, out, fmath, ik, ...) CU_HAS_INT_##ik,
#define CU_BCMP(ID, name, node, out, ...) CU_IS_BOOL_##out,
#define CU_NAME(ID, name, ...) #name,
static const bool uop_ints[] = {ZORCH_UNARY_OPS(CU_UINT)};
static const bool bop_ints[] = {ZORCH_BINARY_OPS(CU_BINT)};
static const bool bop_cmp[] = {ZORCH_BINARY_OPS(CU_BCMP)};
static const char *const uop_names[] = {ZORCH_UNARY_OPS(CU_NAME)};
static const char *const bop_names[] = {ZORCH_BINARY_OPS(CU_NAME)};
static_assert(sizeof uop_ints / sizeof uop_ints[0] == UOP_COUNT, "a flag per unary op");
static_assert(sizeof uop_names / sizeof uop_names[0] == UOP_COUNT, "a name per unary op");
static_assert(sizeof bop_ints / sizeof bop_ints[0] == BOP_COUNT, "a flag per binary op");
static_assert(sizeof bop_cmp / sizeof bop_cmp[0] == BOP_COUNT, "a flag per binary op");
static_assert(sizeof bop_names / sizeof bop_names[0] == BOP_COUNT, "a name per binary op");

__device__ inline int64_t load_int(const char *p, int dt) {
  switch (dt) {
    case ZORCH_I64: return *(const int64_t *)p;
    case ZORCH_I32: return *(const int32_t *)p;
    case ZORCH_I8: return *(const signed char *)p;
    default: return *(const unsigned char *)p;
  }
}
__device__ inline void store_int(char *p, int dt, int64_t v) {
  switch (dt) {
    case ZORCH_I64: *(int64_t *)p = v; break;
    case ZORCH_I32: *(int32_t *)p = (int32_t)v; break;
    case ZORCH_BOOL: *(unsigned char *)p = v != 0; break;
    case ZORCH_I8: *(signed char *)p = (signed char)v; break;
    default: *(unsigned char *)p = (unsigned char)v; break;
  }
}

template <typename S>
__global__ void k_unary(geom g, int op, double p0, double p1) {
  typedef typename io<S>::C C;
  FOR(i, g.numel) io<S>::st(at(g, 0, i), unary_math(op, (C)io<S>::ld(at(g, 1, i)), (C)p0, (C)p1));
}
__global__ void k_unary_int(geom g, int dt, int op, double p0, double p1) {
  FOR(i, g.numel) store_int(at(g, 0, i), dt, unary_int(op, load_int(at(g, 1, i), dt), p0, p1));
}

template <typename S>
__global__ void k_binary(geom g, int op, int cmp, double p0, double p1) {
  typedef typename io<S>::C C;
  FOR(i, g.numel) {
    C r = binary_math(op, (C)io<S>::ld(at(g, 1, i)), (C)io<S>::ld(at(g, 2, i)), (C)p0, (C)p1);
    if (cmp) *(unsigned char *)at(g, 0, i) = r != (C)0;
    else io<S>::st(at(g, 0, i), r);
  }
}
__global__ void k_binary_int(geom g, int dt, int odt, int op) {
  FOR(i, g.numel) store_int(at(g, 0, i), odt, binary_int(op, load_int(at(g, 1, i), dt), load_int(at(g, 2, i), dt)));
}

static bool is_int(zorch_dtype dt) {
  return dt == ZORCH_I32 || dt == ZORCH_I64 || dt == ZORCH_U8 || dt == ZORCH_I8 || dt == ZORCH_BOOL;
}

zorch_status cuda_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1) {
  const zorch_tensor *ts[2] = {out, a};
  geom g = cu_geom(2, ts);
  if (!g.numel) return ZORCH_OK;
  int dev = cu_dev(out);
  if (is_int(a->dtype)) {
    if (!uop_ints[op]) return cu_no_kernel(uop_names[op], a->dtype);
    CU_LAUNCH(ON(g.numel, dev), k_unary_int)(g, a->dtype, op, p0, p1);
    return cu_launched(uop_names[op]);
  }
  bool done = false;
  CU_FLOAT_DISPATCH(a->dtype, (CU_LAUNCH(ON(g.numel, dev), k_unary<S>)(g, op, p0, p1), done = true));
  return done ? cu_launched(uop_names[op]) : cu_no_kernel(uop_names[op], a->dtype);
}

zorch_status cuda_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, double p0,
                         double p1) {
  const zorch_tensor *ts[3] = {out, a, b};
  geom g = cu_geom(3, ts);
  if (!g.numel) return ZORCH_OK;
  int dev = cu_dev(out), cmp = bop_cmp[op];
  if (is_int(a->dtype)) {
    if (!bop_ints[op]) return cu_no_kernel(bop_names[op], a->dtype);
    CU_LAUNCH(ON(g.numel, dev), k_binary_int)(g, a->dtype, out->dtype, op);
    return cu_launched(bop_names[op]);
  }
  bool done = false;
  CU_FLOAT_DISPATCH(a->dtype, (CU_LAUNCH(ON(g.numel, dev), k_binary<S>)(g, op, cmp, p0, p1), done = true));
  return done ? cu_launched(bop_names[op]) : cu_no_kernel(bop_names[op], a->dtype);
}

// copy: same dtype byte for byte; between integer dtypes exact, wrapping
// around as C's and PyTorch's conversions do; otherwise through double
__global__ void k_copy(geom g, int dd, int ds, int same, int es, int ints) {
  FOR(i, g.numel) {
    char *d = at(g, 0, i);
    const char *s = at(g, 1, i);
    if (same) for (int b = 0; b < es; b++) d[b] = s[b];
    else if (ints) store_int(d, dd, load_int(s, ds));
    else store_as(d, dd, load_as(s, ds));
  }
}

zorch_status cuda_copy(zorch_tensor *dst, const zorch_tensor *src) {
  const zorch_tensor *ts[2] = {dst, src};
  geom g = cu_geom(2, ts);
  if (!g.numel) return ZORCH_OK;
  int dev = cu_dev(dst);
  if (dst->dtype == src->dtype && zorch_tensor_is_contiguous(dst) && zorch_tensor_is_contiguous(src))
    return cuda_to_device(tensor_ptr(dst), tensor_ptr(src), (size_t)g.numel * dtype_sizes[dst->dtype], dev);
  int ints = is_int(dst->dtype) && is_int(src->dtype) && src->dtype != ZORCH_BOOL;
  CU_LAUNCH(ON(g.numel, dev), k_copy)(g, dst->dtype, src->dtype, dst->dtype == src->dtype, (int)dtype_sizes[dst->dtype],
                               ints);
  return cu_launched("copy");
}

__global__ void k_fill(geom g, int dt, double v) { FOR(i, g.numel) store_as(at(g, 0, i), dt, v); }

zorch_status cuda_fill(zorch_tensor *dst, double v) {
  const zorch_tensor *ts[1] = {dst};
  geom g = cu_geom(1, ts);
  if (!g.numel) return ZORCH_OK;
  CU_LAUNCH(ON(g.numel, cu_dev(dst)), k_fill)(g, dst->dtype, v);
  return cu_launched("fill");
}

__global__ void k_where(geom g, int es) {
  FOR(i, g.numel) {
    const char *src = *(const unsigned char *)at(g, 1, i) ? at(g, 2, i) : at(g, 3, i);
    char *d = at(g, 0, i);
    for (int b = 0; b < es; b++) d[b] = src[b];
  }
}

zorch_status cuda_where(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a, const zorch_tensor *b) {
  const zorch_tensor *ts[4] = {out, cond, a, b};
  geom g = cu_geom(4, ts);
  if (!g.numel) return ZORCH_OK;
  CU_LAUNCH(ON(g.numel, cu_dev(out)), k_where)(g, (int)dtype_sizes[out->dtype]);
  return cu_launched("where");
}

// the CPU's streams, element for element (ops/backend/math.h)
__global__ void k_random(char *p, int dt, int64_t n, uint64_t seed, uint64_t offset, int normal) {
  FOR(i, n) {
    double v = normal ? zm_random_normal(seed, offset, i)
                      : (dt == ZORCH_F64 ? zm_random_unit_f64(seed, offset, i) : (double)zm_random_unit_f32(seed, offset, i));
    store_as(p + i * (dt == ZORCH_F64 ? 8 : dt == ZORCH_F32 ? 4 : 2), dt, v);
  }
}

zorch_status cuda_random(zorch_tensor *out, uint64_t seed, uint64_t offset, bool normal) {
  int64_t n = shape_numel(out->ndim, out->shape);
  if (!n) return ZORCH_OK;
  CU_LAUNCH(ON(n, cu_dev(out)), k_random)(tensor_ptr(out), out->dtype, n, seed, offset, normal);
  return cu_launched("random");
}

// the CPU's integers, element for element (zm_random_int, ops/backend/math.h)
__global__ void k_randint(int64_t *p, int64_t n, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  FOR(i, n) p[i] = zm_random_int(seed, offset, i, low, range);
}

zorch_status cuda_randint(zorch_tensor *out, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  if (out->dtype != ZORCH_I64) return cu_no_kernel("randint", out->dtype);
  int64_t n = shape_numel(out->ndim, out->shape);
  if (!n) return ZORCH_OK;
  CU_LAUNCH(ON(n, cu_dev(out)), k_randint)((int64_t *)tensor_ptr(out), n, seed, offset, low, range);
  return cu_launched("randint");
}
