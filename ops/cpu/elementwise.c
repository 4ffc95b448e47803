/* elementwise.c: CPU unary, binary, where, copy and fill kernels. Loops are
   generated per dtype; each has a unit-stride path the compiler vectorises, the
   scalar-broadcast paths, and a general strided path. */
#include <math.h>
#include <string.h>

#include "../math.h"
#include "cpu.h"

#define U1(T) (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T))

#define UNARY_LOOP(NAME, T, EXPR)                                                   \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    T *o = (T *)p[0];                                                               \
    const T *a = (const T *)p[1];                                                   \
    const T p0 = (T)prm[0], p1 = (T)prm[1];                                         \
    (void)p0;                                                                       \
    (void)p1;                                                                       \
    if (U1(T)) {                                                                    \
      for (int64_t i = 0; i < n; i++) {                                             \
        T x = a[i];                                                                 \
        o[i] = (EXPR);                                                              \
      }                                                                             \
    } else {                                                                        \
      for (int64_t i = 0; i < n; i++) {                                             \
        T x = *(const T *)(p[1] + i * s[1]);                                        \
        *(T *)(p[0] + i * s[0]) = (EXPR);                                           \
      }                                                                             \
    }                                                                               \
  }

#define B3(T, x, y, z) (s[0] == (x) * (int64_t)sizeof(T) && s[1] == (y) * (int64_t)sizeof(T) && \
                        s[2] == (z) * (int64_t)sizeof(T))
#define BINARY_LOOP(NAME, T, TO, EXPR)                                                \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    const T *a = (const T *)p[1], *b = (const T *)p[2];                               \
    TO *o = (TO *)p[0];                                                               \
    const T p0 = (T)prm[0], p1 = (T)prm[1];                                           \
    (void)p0;                                                                         \
    (void)p1;                                                                         \
    bool uo = s[0] == (int64_t)sizeof(TO);                                            \
    if (uo && s[1] == (int64_t)sizeof(T) && s[2] == (int64_t)sizeof(T)) {             \
      for (int64_t i = 0; i < n; i++) {                                               \
        T x = a[i], y = b[i];                                                         \
        o[i] = (EXPR);                                                                \
      }                                                                               \
    } else if (uo && s[1] == (int64_t)sizeof(T) && s[2] == 0) {                       \
      const T y = *b;                                                                 \
      for (int64_t i = 0; i < n; i++) {                                               \
        T x = a[i];                                                                   \
        o[i] = (EXPR);                                                                \
      }                                                                               \
    } else if (uo && s[1] == 0 && s[2] == (int64_t)sizeof(T)) {                       \
      const T x = *a;                                                                 \
      for (int64_t i = 0; i < n; i++) {                                               \
        T y = b[i];                                                                   \
        o[i] = (EXPR);                                                                \
      }                                                                               \
    } else {                                                                          \
      for (int64_t i = 0; i < n; i++) {                                               \
        T x = *(const T *)(p[1] + i * s[1]), y = *(const T *)(p[2] + i * s[2]);       \
        *(TO *)(p[0] + i * s[0]) = (EXPR);                                            \
      }                                                                               \
    }                                                                                 \
  }

/* ---- float loops: one list, instantiated for float and double ------------------ */
#define FLOAT_UNARY(X, T, S)                                           \
  X(u_neg_##S, T, -x)                                                  \
  X(u_exp_##S, T, exp(x))                                              \
  X(u_log_##S, T, log(x))                                              \
  X(u_sqrt_##S, T, sqrt(x))                                            \
  X(u_abs_##S, T, fabs(x))                                             \
  X(u_relu_##S, T, zm_relu_##S(x))                                     \
  X(u_gelu_##S, T, zm_gelu_##S(x))                                     \
  X(u_gelu_tanh_##S, T, zm_gelu_tanh_##S(x))                           \
  X(u_tanh_##S, T, tanh(x))                                            \
  X(u_sigmoid_##S, T, zm_sigmoid_##S(x))                               \
  X(u_add_s_##S, T, x + p0)                                            \
  X(u_mul_s_##S, T, x * p0)                                            \
  X(u_rsub_s_##S, T, p0 - x)                                           \
  X(u_rdiv_s_##S, T, p0 / x)                                           \
  X(u_pow_s_##S, T, p0 == (T)2 ? x * x : pow(x, p0))                   \
  X(u_clamp_##S, T, x < p0 ? p0 : (x > p1 ? p1 : x))
FLOAT_UNARY(UNARY_LOOP, float, f32)
FLOAT_UNARY(UNARY_LOOP, double, f64)

#define FLOAT_BINARY(X, T, S)                                          \
  X(b_add_##S, T, T, x + y)                                            \
  X(b_sub_##S, T, T, x - y)                                            \
  X(b_mul_##S, T, T, x * y)                                            \
  X(b_div_##S, T, T, x / y)                                            \
  X(b_pow_##S, T, T, pow(x, y))                                        \
  X(b_eq_##S, T, uint8_t, x == y)                                      \
  X(b_lt_##S, T, uint8_t, x < y)                                       \
  X(b_gt_##S, T, uint8_t, x > y)                                       \
  X(b_relu_bwd_##S, T, T, zm_relu_bwd_##S(x, y))                       \
  X(b_gelu_bwd_##S, T, T, zm_gelu_bwd_##S(x, y))                       \
  X(b_gelu_tanh_bwd_##S, T, T, zm_gelu_tanh_bwd_##S(x, y))             \
  X(b_tanh_bwd_##S, T, T, zm_tanh_bwd_y_##S(x, y))                     \
  X(b_sigmoid_bwd_##S, T, T, zm_sigmoid_bwd_y_##S(x, y))               \
  X(b_sqrt_bwd_##S, T, T, zm_sqrt_bwd_y_##S(x, y))                     \
  X(b_abs_bwd_##S, T, T, zm_abs_bwd_##S(x, y))                         \
  X(b_pow_s_bwd_##S, T, T, x * p0 * pow(y, p0 - (T)1))                 \
  X(b_clamp_bwd_##S, T, T, (y >= p0 && y <= p1) ? x : (T)0)
FLOAT_BINARY(BINARY_LOOP, float, f32)
FLOAT_BINARY(BINARY_LOOP, double, f64)

/* ---- integer loops: arithmetic that stays exact ----------------------------------- */
#define INT_UNARY(X, T, S)                   \
  X(u_neg_##S, T, (T)-x)                     \
  X(u_abs_##S, T, (T)(x < 0 ? -x : x))       \
  X(u_relu_##S, T, (T)(x > 0 ? x : 0))       \
  X(u_add_s_##S, T, (T)(x + p0))             \
  X(u_mul_s_##S, T, (T)(x * p0))             \
  X(u_rsub_s_##S, T, (T)(p0 - x))            \
  X(u_clamp_##S, T, x < p0 ? p0 : (x > p1 ? p1 : x))
#define INT_BINARY(X, T, S)                  \
  X(b_add_##S, T, T, (T)(x + y))             \
  X(b_sub_##S, T, T, (T)(x - y))             \
  X(b_mul_##S, T, T, (T)(x * y))             \
  X(b_eq_##S, T, uint8_t, x == y)            \
  X(b_lt_##S, T, uint8_t, x < y)             \
  X(b_gt_##S, T, uint8_t, x > y)
INT_UNARY(UNARY_LOOP, int32_t, i32)
INT_UNARY(UNARY_LOOP, int64_t, i64)
UNARY_LOOP(u_add_s_u8, uint8_t, (uint8_t)(x + p0))
UNARY_LOOP(u_mul_s_u8, uint8_t, (uint8_t)(x * p0))
UNARY_LOOP(u_clamp_u8, uint8_t, x < p0 ? p0 : (x > p1 ? p1 : x))
INT_BINARY(BINARY_LOOP, int32_t, i32)
INT_BINARY(BINARY_LOOP, int64_t, i64)
INT_BINARY(BINARY_LOOP, uint8_t, u8)

#define FLOAT_UTAB(S)                                                                    \
  {u_neg_##S, u_exp_##S, u_log_##S, u_sqrt_##S, u_abs_##S, u_relu_##S, u_gelu_##S,         \
   u_gelu_tanh_##S, u_tanh_##S, u_sigmoid_##S, u_add_s_##S, u_mul_s_##S, u_rsub_s_##S,     \
   u_rdiv_s_##S, u_pow_s_##S, u_clamp_##S}
#define INT_UTAB(S)                                                                      \
  {u_neg_##S, NULL, NULL, NULL, u_abs_##S, u_relu_##S, NULL, NULL, NULL, NULL, u_add_s_##S, \
   u_mul_s_##S, u_rsub_s_##S, NULL, NULL, u_clamp_##S}
#define FLOAT_BTAB(S)                                                                      \
  {b_add_##S, b_sub_##S, b_mul_##S, b_div_##S, b_pow_##S, b_eq_##S, b_lt_##S, b_gt_##S,    \
   b_relu_bwd_##S, b_gelu_bwd_##S, b_gelu_tanh_bwd_##S, b_tanh_bwd_##S, b_sigmoid_bwd_##S, \
   b_sqrt_bwd_##S, b_abs_bwd_##S, b_pow_s_bwd_##S, b_clamp_bwd_##S}
#define INT_BTAB(S) \
  {b_add_##S, b_sub_##S, b_mul_##S, NULL, NULL, b_eq_##S, b_lt_##S, b_gt_##S}

static const cpu_loop utab[ZORCH_NDTYPES][UOP_COUNT] = {
    [ZORCH_F32] = FLOAT_UTAB(f32), [ZORCH_F64] = FLOAT_UTAB(f64), [ZORCH_I32] = INT_UTAB(i32),
    [ZORCH_I64] = INT_UTAB(i64),
    [ZORCH_U8] = {[UOP_ADD_S] = u_add_s_u8, [UOP_MUL_S] = u_mul_s_u8, [UOP_CLAMP] = u_clamp_u8}};
static const cpu_loop btab[ZORCH_NDTYPES][BOP_COUNT] = {
    [ZORCH_F32] = FLOAT_BTAB(f32), [ZORCH_F64] = FLOAT_BTAB(f64), [ZORCH_I32] = INT_BTAB(i32),
    [ZORCH_I64] = INT_BTAB(i64),   [ZORCH_U8] = INT_BTAB(u8),     [ZORCH_BOOL] = INT_BTAB(u8)};

static const char *const uop_names[UOP_COUNT] = {
    "neg", "exp", "log", "sqrt", "abs", "relu", "gelu", "gelu", "tanh", "sigmoid",
    "add", "mul", "sub", "div", "pow", "clamp"};

static zorch_status no_kernel(const char *op, zorch_dtype dt) {
  return err_set(ZORCH_ERR_DTYPE, "%s: no CPU kernel for dtype %s", op, zorch_dtype_name(dt));
}

zorch_status cpu_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1) {
  cpu_loop fn = utab[a->dtype][op];
  if (!fn) return no_kernel(uop_names[op], a->dtype);
  const zorch_tensor *ts[2] = {out, a};
  cpu_iter it;
  cpu_iter_init(&it, 2, ts);
  double prm[2] = {p0, p1};
  cpu_iter_run(&it, fn, prm);
  return ZORCH_OK;
}

zorch_status cpu_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b,
                        double p0, double p1) {
  cpu_loop fn = btab[a->dtype][op];
  if (!fn) return no_kernel("binary op", a->dtype);
  const zorch_tensor *ts[3] = {out, a, b};
  cpu_iter it;
  cpu_iter_init(&it, 3, ts);
  double prm[2] = {p0, p1};
  cpu_iter_run(&it, fn, prm);
  return ZORCH_OK;
}

/* where: selects by element size, so one loop serves every dtype of that size */
#define WHERE_LOOP(NAME, T)                                                              \
  static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) {           \
    (void)prm;                                                                           \
    for (int64_t i = 0; i < n; i++) {                                                    \
      uint8_t c = *(const uint8_t *)(p[1] + i * s[1]);                                   \
      *(T *)(p[0] + i * s[0]) = c ? *(const T *)(p[2] + i * s[2]) : *(const T *)(p[3] + i * s[3]); \
    }                                                                                    \
  }
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_2, uint16_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)

zorch_status cpu_where(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a,
                       const zorch_tensor *b) {
  const zorch_tensor *ts[4] = {out, cond, a, b};
  cpu_iter it;
  cpu_iter_init(&it, 4, ts);
  size_t es = dtype_sizes[out->dtype];
  cpu_iter_run(&it, es == 1 ? where_1 : es == 2 ? where_2 : es == 4 ? where_4 : where_8, NULL);
  return ZORCH_OK;
}

/* ---- copy with conversion ------------------------------------------------------------ */
#define COPY_LOOP(NAME, TD, TS, CONV)                                              \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    (void)prm;                                                                     \
    if (s[0] == (int64_t)sizeof(TD) && s[1] == (int64_t)sizeof(TS)) {              \
      TD *o = (TD *)p[0];                                                          \
      const TS *a = (const TS *)p[1];                                              \
      for (int64_t i = 0; i < n; i++) o[i] = CONV(a[i]);                           \
    } else {                                                                       \
      for (int64_t i = 0; i < n; i++)                                              \
        *(TD *)(p[0] + i * s[0]) = CONV(*(const TS *)(p[1] + i * s[1]));           \
    }                                                                              \
  }
#define ID(x) (x)
#define TO_F32(x) ((float)(x))
#define TO_F64(x) ((double)(x))
COPY_LOOP(copy_1, uint8_t, uint8_t, ID)
COPY_LOOP(copy_2, uint16_t, uint16_t, ID)
COPY_LOOP(copy_4, uint32_t, uint32_t, ID)
COPY_LOOP(copy_8, uint64_t, uint64_t, ID)
COPY_LOOP(copy_f32_bf16, float, uint16_t, zm_bf16_to_f32)
COPY_LOOP(copy_bf16_f32, uint16_t, float, zm_f32_to_bf16)
COPY_LOOP(copy_f32_f16, float, uint16_t, zm_f16_to_f32)
COPY_LOOP(copy_f16_f32, uint16_t, float, zm_f32_to_f16)
COPY_LOOP(copy_f32_f64, float, double, TO_F32)
COPY_LOOP(copy_f64_f32, double, float, TO_F64)
COPY_LOOP(copy_f32_i64, float, int64_t, TO_F32)
COPY_LOOP(copy_f32_i32, float, int32_t, TO_F32)
COPY_LOOP(copy_f32_u8, float, uint8_t, TO_F32)

static void copy_generic(char **p, const int64_t *s, int64_t n, const double *prm) {
  zorch_dtype dd = (zorch_dtype)prm[0], ds = (zorch_dtype)prm[1];
  for (int64_t i = 0; i < n; i++) cpu_store(p[0] + i * s[0], dd, cpu_load(p[1] + i * s[1], ds));
}

static cpu_loop copy_loop(zorch_dtype dd, zorch_dtype ds) {
  bool boolish = (dd == ZORCH_BOOL) != (ds == ZORCH_BOOL);
  if (dd == ds || (dtype_sizes[dd] == 1 && dtype_sizes[ds] == 1 && !boolish)) {
    switch (dtype_sizes[dd]) {
      case 1: return copy_1;
      case 2: return copy_2;
      case 4: return copy_4;
      default: return copy_8;
    }
  }
#define PAIR(d, s) (dd == ZORCH_##d && ds == ZORCH_##s)
  if (PAIR(F32, BF16)) return copy_f32_bf16;
  if (PAIR(BF16, F32)) return copy_bf16_f32;
  if (PAIR(F32, F16)) return copy_f32_f16;
  if (PAIR(F16, F32)) return copy_f16_f32;
  if (PAIR(F32, F64)) return copy_f32_f64;
  if (PAIR(F64, F32)) return copy_f64_f32;
  if (PAIR(F32, I64)) return copy_f32_i64;
  if (PAIR(F32, I32)) return copy_f32_i32;
  if (PAIR(F32, U8)) return copy_f32_u8;
#undef PAIR
  return copy_generic;
}

zorch_status cpu_copy(zorch_tensor *dst, const zorch_tensor *src) {
  const zorch_tensor *ts[2] = {dst, src};
  cpu_iter it;
  cpu_iter_init(&it, 2, ts);
  double prm[2] = {(double)dst->dtype, (double)src->dtype};
  cpu_iter_run(&it, copy_loop(dst->dtype, src->dtype), prm);
  return ZORCH_OK;
}

static void fill_loop(char **p, const int64_t *s, int64_t n, const double *prm) {
  size_t es = (size_t)prm[1];
  const char *v = (const char *)&prm[2];
  if (s[0] == (int64_t)es && es == 4) {
    uint32_t x;
    memcpy(&x, v, 4);
    uint32_t *o = (uint32_t *)p[0];
    for (int64_t i = 0; i < n; i++) o[i] = x;
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], v, es);
}

zorch_status cpu_fill(zorch_tensor *dst, double v) {
  const zorch_tensor *ts[1] = {dst};
  cpu_iter it;
  cpu_iter_init(&it, 1, ts);
  double prm[3] = {0, (double)dtype_sizes[dst->dtype], 0};
  cpu_store((char *)&prm[2], dst->dtype, v);
  cpu_iter_run(&it, fill_loop, prm);
  return ZORCH_OK;
}
