// elementwise.cu: unary and binary ops over any strides and broadcasts on the
// per-element math of ops/math.h (the formulas the CPU tests check), copies with
// dtype conversion, fill, where, and the CPU's Philox streams. 16-bit floats
// load as float, compute in float and round once on store, as the CPU path does.
#include "cuda.h"

#define ZM_UNARY(T, S)                                                         \
  __device__ inline T unary_math(int op, T x, T p0, T p1) {                    \
    switch (op) {                                                              \
      case UOP_NEG: return -x;                                                 \
      case UOP_EXP: return exp(x);                                             \
      case UOP_LOG: return log(x);                                             \
      case UOP_SQRT: return sqrt(x);                                           \
      case UOP_ABS: return fabs(x);                                            \
      case UOP_RELU: return zm_relu_##S(x);                                    \
      case UOP_GELU: return zm_gelu_##S(x);                                    \
      case UOP_GELU_TANH: return zm_gelu_tanh_##S(x);                          \
      case UOP_TANH: return tanh(x);                                           \
      case UOP_SIGMOID: return zm_sigmoid_##S(x);                              \
      case UOP_ADD_S: return x + p0;                                           \
      case UOP_MUL_S: return x * p0;                                           \
      case UOP_RSUB_S: return p0 - x;                                          \
      case UOP_RDIV_S: return p0 / x;                                          \
      case UOP_POW_S: return p0 == (T)2 ? x * x : pow(x, p0);                  \
      default: return x < p0 ? p0 : (x > p1 ? p1 : x); /* UOP_CLAMP */        \
    }                                                                          \
  }
ZM_UNARY(float, f32)
ZM_UNARY(double, f64)

// Comparisons write bool (one byte); everything else the compute type.
#define ZM_BINARY(T, S)                                                                   \
  __device__ inline T binary_math(int op, T x, T y, T p0, T p1) {                         \
    switch (op) {                                                                         \
      case BOP_ADD: return x + y;                                                         \
      case BOP_SUB: return x - y;                                                         \
      case BOP_MUL: return x * y;                                                         \
      case BOP_DIV: return x / y;                                                         \
      case BOP_POW: return pow(x, y);                                                     \
      case BOP_EQ: return x == y;                                                         \
      case BOP_LT: return x < y;                                                          \
      case BOP_GT: return x > y;                                                          \
      case BOP_RELU_BWD: return zm_relu_bwd_##S(x, y);                                    \
      case BOP_GELU_BWD: return zm_gelu_bwd_##S(x, y);                                    \
      case BOP_GELU_TANH_BWD: return zm_gelu_tanh_bwd_##S(x, y);                          \
      case BOP_TANH_BWD_Y: return zm_tanh_bwd_y_##S(x, y);                                \
      case BOP_SIGMOID_BWD_Y: return zm_sigmoid_bwd_y_##S(x, y);                          \
      case BOP_SQRT_BWD_Y: return zm_sqrt_bwd_y_##S(x, y);                                \
      case BOP_ABS_BWD: return zm_abs_bwd_##S(x, y);                                      \
      case BOP_POW_S_BWD: return x * p0 * pow(y, p0 - (T)1);                              \
      default: return (y >= p0 && y <= p1) ? x : (T)0; /* BOP_CLAMP_BWD */                \
    }                                                                                     \
  }
ZM_BINARY(float, f32)
ZM_BINARY(double, f64)

// integers: the ops the op layer keeps integral (the rest promote to float)
__device__ inline int64_t unary_int(int op, int64_t x, double p0, double p1) {
  switch (op) {
    case UOP_NEG: return -x;
    case UOP_ABS: return x < 0 ? -x : x;
    case UOP_RELU: return x > 0 ? x : 0;
    case UOP_ADD_S: return x + (int64_t)p0;
    case UOP_MUL_S: return x * (int64_t)p0;
    case UOP_RSUB_S: return (int64_t)p0 - x;
    default: return x < (int64_t)p0 ? (int64_t)p0 : (x > (int64_t)p1 ? (int64_t)p1 : x);
  }
}
__device__ inline int64_t binary_int(int op, int64_t x, int64_t y) {
  switch (op) {
    case BOP_ADD: return x + y;
    case BOP_SUB: return x - y;
    case BOP_MUL: return x * y;
    case BOP_EQ: return x == y;
    case BOP_LT: return x < y;
    default: return x > y;  // BOP_GT
  }
}
__device__ inline int64_t load_int(const char *p, int dt) {
  switch (dt) {
    case ZORCH_I64: return *(const int64_t *)p;
    case ZORCH_I32: return *(const int32_t *)p;
    default: return *(const unsigned char *)p;
  }
}
__device__ inline void store_int(char *p, int dt, int64_t v) {
  switch (dt) {
    case ZORCH_I64: *(int64_t *)p = v; break;
    case ZORCH_I32: *(int32_t *)p = (int32_t)v; break;
    case ZORCH_BOOL: *(unsigned char *)p = v != 0; break;
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
  return dt == ZORCH_I32 || dt == ZORCH_I64 || dt == ZORCH_U8 || dt == ZORCH_BOOL;
}

zorch_status cuda_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1) {
  const zorch_tensor *ts[2] = {out, a};
  geom g = cu_geom(2, ts);
  if (!g.numel) return ZORCH_OK;
  int dev = cu_dev(out);
  if (is_int(a->dtype)) {
    k_unary_int<<<ON(g.numel, dev)>>>(g, a->dtype, op, p0, p1);
    return cu_launched("unary op");
  }
  bool done = false;
  CU_FLOAT_DISPATCH(a->dtype, (k_unary<S><<<ON(g.numel, dev)>>>(g, op, p0, p1), done = true));
  return done ? cu_launched("unary op") : cu_no_kernel("unary op", a->dtype);
}

zorch_status cuda_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, double p0,
                         double p1) {
  const zorch_tensor *ts[3] = {out, a, b};
  geom g = cu_geom(3, ts);
  if (!g.numel) return ZORCH_OK;
  int dev = cu_dev(out), cmp = op == BOP_EQ || op == BOP_LT || op == BOP_GT;
  if (is_int(a->dtype)) {
    if (op > BOP_MUL && !cmp) return cu_no_kernel("binary op", a->dtype);
    k_binary_int<<<ON(g.numel, dev)>>>(g, a->dtype, out->dtype, op);
    return cu_launched("binary op");
  }
  bool done = false;
  CU_FLOAT_DISPATCH(a->dtype, (k_binary<S><<<ON(g.numel, dev)>>>(g, op, cmp, p0, p1), done = true));
  return done ? cu_launched("binary op") : cu_no_kernel("binary op", a->dtype);
}

// copy: same dtype byte for byte; otherwise converted through double
__global__ void k_copy(geom g, int dd, int ds, int same, int es) {
  FOR(i, g.numel) {
    char *d = at(g, 0, i);
    const char *s = at(g, 1, i);
    if (same) for (int b = 0; b < es; b++) d[b] = s[b];
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
  k_copy<<<ON(g.numel, dev)>>>(g, dst->dtype, src->dtype, dst->dtype == src->dtype, (int)dtype_sizes[dst->dtype]);
  return cu_launched("copy");
}

__global__ void k_fill(geom g, int dt, double v) { FOR(i, g.numel) store_as(at(g, 0, i), dt, v); }

zorch_status cuda_fill(zorch_tensor *dst, double v) {
  const zorch_tensor *ts[1] = {dst};
  geom g = cu_geom(1, ts);
  if (!g.numel) return ZORCH_OK;
  k_fill<<<ON(g.numel, cu_dev(dst))>>>(g, dst->dtype, v);
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
  k_where<<<ON(g.numel, cu_dev(out))>>>(g, (int)dtype_sizes[out->dtype]);
  return cu_launched("where");
}

// the CPU's streams, element for element (ops/math.h)
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
  k_random<<<ON(n, cu_dev(out))>>>(tensor_ptr(out), out->dtype, n, seed, offset, normal);
  return cu_launched("random");
}
