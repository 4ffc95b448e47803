/* elementwise.c: CPU unary, binary, where, copy and fill kernels. The unary and
   binary loops are generated per dtype from the op registry (ops/backend/pointwise_ops.h);
   each has a unit-stride path the compiler vectorises, the scalar-broadcast
   paths, and a general strided path. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/math.h"
#include "cpu.h"
#include "vec.h"
#include "vec512.h"

#define U1(T) (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T))

/* The registry's expressions name their type T and read x (and y), p0, p1. */
#define UNARY_LOOP(NAME, TY, EXPR)                                                  \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    typedef TY T;                                                                   \
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

#define BINARY_LOOP(NAME, TY, TO, EXPR)                                               \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    typedef TY T;                                                                     \
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

/* ---- the loops of every registered op (ops/backend/pointwise_ops.h) ----------------------- */
/* Integer loops where the registry gives integer math: INT for int32, int64,
   int8 and uint8, SIGNED for int32, int64 and int8. */
#define INT_LOOPS_NO_INT(LOOP, name, ...)
#define INT_LOOPS_FLOAT(LOOP, name, ...)
#define INT_LOOPS_SIGNED(LOOP, name, ...) \
  LOOP(name##_i32, int32_t, __VA_ARGS__) LOOP(name##_i64, int64_t, __VA_ARGS__) LOOP(name##_i8, int8_t, __VA_ARGS__)
#define INT_LOOPS_INT(LOOP, name, ...) \
  INT_LOOPS_SIGNED(LOOP, name, __VA_ARGS__) LOOP(name##_u8, uint8_t, __VA_ARGS__)

#define U_LOOPS(ID, name, node, fmath, ints, imath, ...) \
  UNARY_LOOP(u_##name##_f32, float, fmath)               \
  UNARY_LOOP(u_##name##_f64, double, fmath)              \
  INT_LOOPS_##ints(UNARY_LOOP, u_##name, imath)
ZORCH_UNARY_OPS(U_LOOPS)

/* comparisons write bool (one byte), every other op its compute type */
#define OUT_SAME(T) T
#define OUT_BOOL(T) uint8_t
#define B_INT_LOOP(NAME, TY, out, EXPR) BINARY_LOOP(NAME, TY, OUT_##out(TY), EXPR)
#define B_LOOPS(ID, name, node, out, fmath, ints, imath, ...) \
  BINARY_LOOP(b_##name##_f32, float, OUT_##out(float), fmath) \
  BINARY_LOOP(b_##name##_f64, double, OUT_##out(double), fmath) \
  INT_LOOPS_##ints(B_INT_LOOP, b_##name, out, imath)
ZORCH_BINARY_OPS(B_LOOPS)

/* ---- the tables, indexed by the enums ---------------------------------------------- */
#define IF_NO_INT(x)
#define IF_FLOAT(x)
#define IF_SIGNED(x) x,
#define IF_INT(x) x,
#define IF8_NO_INT(x)
#define IF8_FLOAT(x)
#define IF8_SIGNED(x)
#define IF8_INT(x) x,
#define U_F32(ID, name, ...) [UOP_##ID] = u_##name##_f32,
#define U_F64(ID, name, ...) [UOP_##ID] = u_##name##_f64,
#define U_I32(ID, name, node, fmath, ints, ...) IF_##ints([UOP_##ID] = u_##name##_i32)
#define U_I64(ID, name, node, fmath, ints, ...) IF_##ints([UOP_##ID] = u_##name##_i64)
#define U_U8(ID, name, node, fmath, ints, ...) IF8_##ints([UOP_##ID] = u_##name##_u8)
#define U_I8(ID, name, node, fmath, ints, ...) IF_##ints([UOP_##ID] = u_##name##_i8)
#define B_F32(ID, name, ...) [BOP_##ID] = b_##name##_f32,
#define B_F64(ID, name, ...) [BOP_##ID] = b_##name##_f64,
#define B_I32(ID, name, node, out, fmath, ints, ...) IF_##ints([BOP_##ID] = b_##name##_i32)
#define B_I64(ID, name, node, out, fmath, ints, ...) IF_##ints([BOP_##ID] = b_##name##_i64)
#define B_U8(ID, name, node, out, fmath, ints, ...) IF8_##ints([BOP_##ID] = b_##name##_u8)
#define B_I8(ID, name, node, out, fmath, ints, ...) IF_##ints([BOP_##ID] = b_##name##_i8)

static const cpu_loop utab[ZORCH_NDTYPES][UOP_COUNT] = {
    [ZORCH_F32] = {ZORCH_UNARY_OPS(U_F32)}, [ZORCH_F64] = {ZORCH_UNARY_OPS(U_F64)},
    [ZORCH_I32] = {ZORCH_UNARY_OPS(U_I32)}, [ZORCH_I64] = {ZORCH_UNARY_OPS(U_I64)},
    [ZORCH_U8] = {ZORCH_UNARY_OPS(U_U8)},   [ZORCH_I8] = {ZORCH_UNARY_OPS(U_I8)}};
/* bool operands (comparisons of bools) run the uint8 loops */
static const cpu_loop btab[ZORCH_NDTYPES][BOP_COUNT] = {
    [ZORCH_F32] = {ZORCH_BINARY_OPS(B_F32)}, [ZORCH_F64] = {ZORCH_BINARY_OPS(B_F64)},
    [ZORCH_I32] = {ZORCH_BINARY_OPS(B_I32)}, [ZORCH_I64] = {ZORCH_BINARY_OPS(B_I64)},
    [ZORCH_U8] = {ZORCH_BINARY_OPS(B_U8)},   [ZORCH_BOOL] = {ZORCH_BINARY_OPS(B_U8)},
    [ZORCH_I8] = {ZORCH_BINARY_OPS(B_I8)}};

#define U_NAME(ID, name, ...) [UOP_##ID] = #name,
#define B_NAME(ID, name, ...) [BOP_##ID] = #name,
static const char *const uop_names[] = {ZORCH_UNARY_OPS(U_NAME)};
static const char *const bop_names[] = {ZORCH_BINARY_OPS(B_NAME)};
_Static_assert(sizeof uop_names / sizeof uop_names[0] == UOP_COUNT, "a name per unary op");
_Static_assert(sizeof bop_names / sizeof bop_names[0] == BOP_COUNT, "a name per binary op");

/* float32 loops on vec.h's vectorised math, in place of the registry's libm ones */
#define FAST_U(NAME, F)                                                              \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    (void)prm;                                                                       \
    if (s[0] == 4 && s[1] == 4) {                                                    \
      float *o = (float *)p[0];                                                      \
      const float *a = (const float *)p[1];                                          \
      for (int64_t i = 0; i < n; i++) o[i] = F(a[i]);                                \
    } else {                                                                         \
      for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * s[0]) = F(*(const float *)(p[1] + i * s[1])); \
    }                                                                                \
  }
#define FAST_B(NAME, F)                                                              \
  CPU_CLONES static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    (void)prm;                                                                       \
    if (s[0] == 4 && s[1] == 4 && s[2] == 4) {                                       \
      float *o = (float *)p[0];                                                      \
      const float *a = (const float *)p[1], *b = (const float *)p[2];                \
      for (int64_t i = 0; i < n; i++) o[i] = F(a[i], b[i]);                          \
    } else {                                                                         \
      for (int64_t i = 0; i < n; i++)                                                \
        *(float *)(p[0] + i * s[0]) =                                                \
            F(*(const float *)(p[1] + i * s[1]), *(const float *)(p[2] + i * s[2])); \
    }                                                                                \
  }
FAST_U(fast_gelu, zv_gelu)
FAST_U(fast_gelu_tanh, zv_gelu_tanh)
FAST_B(fast_gelu_bwd, zv_gelu_bwd)
FAST_B(fast_gelu_tanh_bwd, zv_gelu_tanh_bwd)
static const cpu_loop ufast[UOP_COUNT] = {[UOP_GELU] = fast_gelu, [UOP_GELU_TANH] = fast_gelu_tanh};
static const cpu_loop bfast[BOP_COUNT] = {[BOP_GELU_BWD] = fast_gelu_bwd,
                                          [BOP_GELU_TANH_BWD] = fast_gelu_tanh_bwd};

/* ---- AVX-512 loops (vec512.h), for float32 and 16-bit operands ---------------------
   kind: 0 float32, 1 bfloat16, 2 float16. 16 lanes at a time, the tail masked;
   strided operands go through a 16-value buffer. A 16-bit kind widens in
   registers and rounds the float32 result once. */
#ifdef ZV512
ZV512_FN __m512 z512_ld(const char *p, int64_t s, int64_t n, int kind) {
  __mmask16 m = zv512_mask(n);
  if (s == 0) { /* a broadcast operand */
    uint16_t h = kind ? *(const uint16_t *)p : 0;
    return _mm512_set1_ps(kind == 0 ? *(const float *)p : kind == 1 ? zm_bf16_to_f32(h) : zm_f16_to_f32(h));
  }
  if (kind == 0) {
    if (s == 4) return _mm512_maskz_loadu_ps(m, p);
    float t[16] = {0};
    for (int64_t i = 0; i < n; i++) t[i] = *(const float *)(p + i * s);
    return _mm512_loadu_ps(t);
  }
  if (s == 2) return zv16_ld((const uint16_t *)p, m, kind == 1);
  uint16_t t[16] = {0};
  for (int64_t i = 0; i < n; i++) t[i] = *(const uint16_t *)(p + i * s);
  return zv16_ld(t, m, kind == 1);
}

ZV512_FN void z512_st(char *p, int64_t s, __m512 v, int64_t n, int kind) {
  __mmask16 m = zv512_mask(n);
  if (kind == 0) {
    if (s == 4) {
      _mm512_mask_storeu_ps(p, m, v);
      return;
    }
    float t[16];
    _mm512_storeu_ps(t, v);
    for (int64_t i = 0; i < n; i++) *(float *)(p + i * s) = t[i];
    return;
  }
  if (s == 2) {
    zv16_st((uint16_t *)p, v, m, kind == 1);
    return;
  }
  uint16_t t[16];
  zv16_st(t, v, 0xffff, kind == 1);
  for (int64_t i = 0; i < n; i++) *(uint16_t *)(p + i * s) = t[i];
}

#define Z512_U(NAME, F, KIND)                                                         \
  ZV512_TARGET static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    (void)prm;                                                                        \
    for (int64_t i = 0; i < n; i += 16) {                                             \
      int64_t m = n - i < 16 ? n - i : 16;                                            \
      z512_st(p[0] + i * s[0], s[0], F(z512_ld(p[1] + i * s[1], s[1], m, KIND)), m, KIND); \
    }                                                                                 \
  }
#define Z512_B(NAME, F, KIND)                                                         \
  ZV512_TARGET static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    (void)prm;                                                                        \
    for (int64_t i = 0; i < n; i += 16) {                                             \
      int64_t m = n - i < 16 ? n - i : 16;                                            \
      __m512 a = z512_ld(p[1] + i * s[1], s[1], m, KIND), b = z512_ld(p[2] + i * s[2], s[2], m, KIND); \
      z512_st(p[0] + i * s[0], s[0], F(a, b), m, KIND);                               \
    }                                                                                 \
  }
#define Z512_ALL(NAME, F, UB) UB(NAME##_f32, F, 0) UB(NAME##_bf16, F, 1) UB(NAME##_f16, F, 2)
Z512_ALL(z512_gelu, zv16_gelu, Z512_U)
Z512_ALL(z512_gelu_tanh, zv16_gelu_tanh, Z512_U)
Z512_ALL(z512_gelu_bwd, zv16_gelu_bwd, Z512_B)
Z512_ALL(z512_gelu_tanh_bwd, zv16_gelu_tanh_bwd, Z512_B)

/* The registry's simplest ops on 16-bit operands, in one pass: widened in
   registers, the op's float32 expression (the same IEEE operations and
   comparisons, so the same float32 result), rounded once. Through the
   block-wise half_loop (widen to a buffer, the float32 loop, narrow) a bf16
   add took three times a float32 add of the same elements. The float32 loops
   need none of this: the compiler vectorises them. x, y: the inputs; p0, p1:
   the op's parameters as float, as (T)prm[i] in the generated loops. */
#define Z512_P2(NAME, EXPR, KIND, NIN)                                                \
  ZV512_TARGET static void NAME(char **p, const int64_t *s, int64_t n, const double *prm) { \
    const __m512 p0 = _mm512_set1_ps((float)prm[0]), p1 = _mm512_set1_ps((float)prm[1]); \
    const __m512 zero = _mm512_setzero_ps();                                          \
    (void)p0, (void)p1, (void)zero;                                                   \
    for (int64_t i = 0; i < n; i += 16) {                                             \
      int64_t m = n - i < 16 ? n - i : 16;                                            \
      __m512 x = z512_ld(p[1] + i * s[1], s[1], m, KIND);                             \
      __m512 y = NIN == 2 ? z512_ld(p[2] + i * s[2], s[2], m, KIND) : x;              \
      (void)y;                                                                        \
      z512_st(p[0] + i * s[0], s[0], (EXPR), m, KIND);                                \
    }                                                                                 \
  }
#define Z512_16(NAME, EXPR, NIN) Z512_P2(NAME##_bf16, EXPR, 1, NIN) Z512_P2(NAME##_f16, EXPR, 2, NIN)
#define GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
Z512_16(z512_neg, _mm512_xor_ps(x, _mm512_set1_ps(-0.0f)), 1)
/* (NaN passes through, as in PyTorch: "not x <= 0" holds for it) */
Z512_16(z512_relu, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_NLE_UQ), x), 1)
Z512_16(z512_add_s, _mm512_add_ps(x, p0), 1)
Z512_16(z512_mul_s, _mm512_mul_ps(x, p0), 1)
Z512_16(z512_rsub_s, _mm512_sub_ps(p0, x), 1)
Z512_16(z512_clamp, _mm512_mask_mov_ps(_mm512_mask_mov_ps(x, GT(x, p1), p1), GT(p0, x), p0), 1)
Z512_16(z512_add, _mm512_add_ps(x, y), 2)
Z512_16(z512_sub, _mm512_sub_ps(x, y), 2)
Z512_16(z512_mul, _mm512_mul_ps(x, y), 2)
Z512_16(z512_div, _mm512_div_ps(x, y), 2)
Z512_16(z512_relu_bwd, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ), x), 2)
Z512_16(z512_mul_scaled, _mm512_mul_ps(_mm512_mul_ps(p0, y), x), 2)
Z512_16(z512_clamp_bwd,
        _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, p0, _CMP_GT_OQ) & _mm512_cmp_ps_mask(y, p1, _CMP_LT_OQ), x), 2)
#undef GT

/* [kind][op] */
#define U16(K) [UOP_NEG] = z512_neg_##K, [UOP_RELU] = z512_relu_##K, [UOP_ADD_S] = z512_add_s_##K, \
  [UOP_MUL_S] = z512_mul_s_##K, [UOP_RSUB_S] = z512_rsub_s_##K, [UOP_CLAMP] = z512_clamp_##K
#define B16(K) [BOP_ADD] = z512_add_##K, [BOP_SUB] = z512_sub_##K, [BOP_MUL] = z512_mul_##K,       \
  [BOP_DIV] = z512_div_##K, [BOP_RELU_BWD] = z512_relu_bwd_##K, [BOP_MUL_SCALED] = z512_mul_scaled_##K, \
  [BOP_CLAMP_BWD] = z512_clamp_bwd_##K
static const cpu_loop u512[3][UOP_COUNT] = {
    {[UOP_GELU] = z512_gelu_f32, [UOP_GELU_TANH] = z512_gelu_tanh_f32},
    {[UOP_GELU] = z512_gelu_bf16, [UOP_GELU_TANH] = z512_gelu_tanh_bf16, U16(bf16)},
    {[UOP_GELU] = z512_gelu_f16, [UOP_GELU_TANH] = z512_gelu_tanh_f16, U16(f16)}};
static const cpu_loop b512[3][BOP_COUNT] = {
    {[BOP_GELU_BWD] = z512_gelu_bwd_f32, [BOP_GELU_TANH_BWD] = z512_gelu_tanh_bwd_f32},
    {[BOP_GELU_BWD] = z512_gelu_bwd_bf16, [BOP_GELU_TANH_BWD] = z512_gelu_tanh_bwd_bf16, B16(bf16)},
    {[BOP_GELU_BWD] = z512_gelu_bwd_f16, [BOP_GELU_TANH_BWD] = z512_gelu_tanh_bwd_f16, B16(f16)}};
#undef U16
#undef B16

#endif

static int kind_of(zorch_dtype dt) { return dt == ZORCH_BF16 ? 1 : dt == ZORCH_F16 ? 2 : 0; }

static cpu_loop loop512_u(uop op, zorch_dtype dt) {
#ifdef ZV512
  if ((dt == ZORCH_F32 || dt == ZORCH_BF16 || dt == ZORCH_F16) && zv512_ok()) return u512[kind_of(dt)][op];
#endif
  (void)op, (void)dt;
  return NULL;
}
static cpu_loop loop512_b(bop op, zorch_dtype dt, zorch_dtype out) {
#ifdef ZV512
  if ((dt == ZORCH_F32 || dt == ZORCH_BF16 || dt == ZORCH_F16) && out == dt && zv512_ok())
    return b512[kind_of(dt)][op];
#endif
  (void)op, (void)dt, (void)out;
  return NULL;
}

static zorch_status no_kernel(const char *op, zorch_dtype dt) {
  return err_set(ZORCH_ERR_DTYPE, "%s: no CPU kernel for dtype %s", op, zorch_dtype_name(dt));
}

/* ---- 16-bit operands: the float32 loops, a block at a time --------------------------
   Each block of inputs is widened into float32 buffers on the stack, the float32
   loop runs on them and its results are rounded once into the 16-bit output (a
   bool output, of comparisons, is written in place): the very values of a
   whole-tensor conversion, without its temporaries. */
#define HALF_BLK 512
typedef struct {
  double prm[2]; /* first: the loops get a pointer to it */
  cpu_loop f;
  zorch_dtype dt;
  int nin;
  bool out16;
} half_ctx;

CPU_CLONES static void widen16(float *f, const char *p, int64_t s, int64_t n, zorch_dtype dt) {
  if (s == 0) { /* a broadcast operand (a scalar gradient, say): one value */
    uint16_t h = *(const uint16_t *)p;
    float v = dt == ZORCH_BF16 ? zm_bf16_to_f32(h) : zm_f16_to_f32(h);
    for (int64_t i = 0; i < n; i++) f[i] = v;
  } else if (dt == ZORCH_BF16 && s == 2)
    for (int64_t i = 0; i < n; i++) f[i] = zm_bf16_to_f32(((const uint16_t *)p)[i]);
  else if (dt == ZORCH_BF16)
    for (int64_t i = 0; i < n; i++) f[i] = zm_bf16_to_f32(*(const uint16_t *)(p + i * s));
  else
    for (int64_t i = 0; i < n; i++) f[i] = zm_f16_to_f32(*(const uint16_t *)(p + i * s));
}

CPU_CLONES static void narrow16(char *p, int64_t s, const float *f, int64_t n, zorch_dtype dt) {
  if (dt == ZORCH_BF16 && s == 2)
    for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = zm_f32_to_bf16(f[i]);
  else if (dt == ZORCH_BF16)
    for (int64_t i = 0; i < n; i++) *(uint16_t *)(p + i * s) = zm_f32_to_bf16(f[i]);
  else
    for (int64_t i = 0; i < n; i++) *(uint16_t *)(p + i * s) = zm_f32_to_f16(f[i]);
}

static void half_loop(char **p, const int64_t *s, int64_t n, const double *prm) {
  const half_ctx *c = (const half_ctx *)(const void *)prm;
  float buf[3][HALF_BLK];
  for (int64_t i0 = 0; i0 < n; i0 += HALF_BLK) {
    int64_t m = n - i0 < HALF_BLK ? n - i0 : HALF_BLK;
    char *q[3];
    int64_t qs[3] = {4, 4, 4};
    for (int k = 1; k <= c->nin; k++) {
      widen16(buf[k], p[k] + i0 * s[k], s[k], m, c->dt);
      q[k] = (char *)buf[k];
    }
    q[0] = c->out16 ? (char *)buf[0] : p[0] + i0 * s[0];
    if (!c->out16) qs[0] = s[0];
    c->f(q, qs, m, c->prm);
    if (c->out16) narrow16(p[0] + i0 * s[0], s[0], buf[0], m, c->dt);
  }
}

static bool is16(zorch_dtype dt) { return dt == ZORCH_BF16 || dt == ZORCH_F16; }

/* ---- 16-bit unary ops by table ------------------------------------------------------
   A 16-bit input has 65536 values: for GELU (both forms) on a large tensor the
   op's own 16-bit loop runs once over all of them into a table (built on
   first use, kept for the process), and each element is then a lookup: the
   same bits as computing it, at the cost of a load. */
#define LUT_MIN 131072
static uint16_t *_Atomic lut_tab[2][UOP_COUNT];

static const uint16_t *lut_get(uop op, zorch_dtype dt, cpu_loop fn16, const double *prm) {
  uint16_t *_Atomic *slot = &lut_tab[dt == ZORCH_BF16 ? 0 : 1][op];
  uint16_t *t = atomic_load_explicit(slot, memory_order_acquire);
  if (t) return t;
  uint16_t *in = malloc(65536 * sizeof *in), *nt = malloc(65536 * sizeof *nt);
  if (!in || !nt) { /* no table: the caller computes */
    free(in), free(nt);
    return NULL;
  }
  for (int i = 0; i < 65536; i++) in[i] = (uint16_t)i;
  char *p[2] = {(char *)nt, (char *)in};
  int64_t s[2] = {2, 2};
  fn16(p, s, 65536, prm);
  free(in);
  uint16_t *none = NULL;
  if (!atomic_compare_exchange_strong(slot, &none, nt)) { /* another thread's table won */
    free(nt);
    return none;
  }
  return nt;
}

typedef struct {
  double prm[2];
  const uint16_t *t;
} lut_ctx;

static void lut_loop(char **p, const int64_t *s, int64_t n, const double *prm) {
  const uint16_t *t = ((const lut_ctx *)(const void *)prm)->t;
  /* (plain loads: faster here than vpgatherdd, 3.2 against 4.0 ms for 10^7.
     Unrolled: the six-instruction loop ran at 5.5-5.7 ms in some builds and
     3.4 in others on the AMD EPYC, by where it fell in the code; unrolled by
     8 it took 3.4-3.6 in every build tried.) */
  if (s[0] == 2 && s[1] == 2) {
    uint16_t *o = (uint16_t *)p[0];
    const uint16_t *a = (const uint16_t *)p[1];
#pragma GCC unroll 8
    for (int64_t i = 0; i < n; i++) o[i] = t[a[i]];
    return;
  }
  for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = t[*(const uint16_t *)(p[1] + i * s[1])];
}

zorch_status cpu_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1) {
  bool h = is16(a->dtype);
  zorch_dtype ld = h ? ZORCH_F32 : a->dtype;
  cpu_loop fn = ld == ZORCH_F32 && ufast[op] ? ufast[op] : utab[ld][op];
  if (!fn) return no_kernel(uop_names[op], a->dtype);
  cpu_loop f512 = ufast[op] || h ? loop512_u(op, a->dtype) : NULL; /* float32: GELU only */
  const zorch_tensor *ts[2] = {out, a};
  cpu_iter it;
  cpu_iter_init(&it, 2, ts);
  if (h) {
    half_ctx c = {{p0, p1}, fn, a->dtype, 1, true};
    cpu_loop f16 = f512 ? f512 : half_loop;
    if (ufast[op] && it.numel >= LUT_MIN) {
      lut_ctx l = {{p0, p1}, lut_get(op, a->dtype, f16, c.prm)};
      if (l.t) {
        cpu_iter_run_grain(&it, lut_loop, l.prm, CPU_GRAIN_MEM);
        return ZORCH_OK;
      }
    }
    /* the one-pass simple ops are bound by memory; GELU and half_loop's
       (exp, tanh, ...) by arithmetic */
    cpu_iter_run_grain(&it, f16, c.prm, f512 && !ufast[op] ? CPU_GRAIN_MEM : CPU_GRAIN);
    return ZORCH_OK;
  }
  if (f512) fn = f512;
  double prm[2] = {p0, p1};
  cpu_iter_run(&it, fn, prm);
  return ZORCH_OK;
}

zorch_status cpu_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b,
                        double p0, double p1) {
  bool h = is16(a->dtype);
  zorch_dtype ld = h ? ZORCH_F32 : a->dtype;
  cpu_loop fn = ld == ZORCH_F32 && bfast[op] ? bfast[op] : btab[ld][op];
  if (!fn) return no_kernel(bop_names[op], a->dtype);
  cpu_loop f512 = bfast[op] || h ? loop512_b(op, a->dtype, out->dtype) : NULL; /* float32: GELU's gradients only */
  if (f512) {
    const zorch_tensor *ts[3] = {out, a, b};
    cpu_iter it;
    cpu_iter_init(&it, 3, ts);
    double prm[2] = {p0, p1};
    cpu_iter_run_grain(&it, f512, prm, bfast[op] ? CPU_GRAIN : CPU_GRAIN_MEM);
    return ZORCH_OK;
  }
  if (h) {
    const zorch_tensor *ts[3] = {out, a, b};
    cpu_iter it;
    cpu_iter_init(&it, 3, ts);
    half_ctx c = {{p0, p1}, fn, a->dtype, 2, is16(out->dtype)};
    cpu_iter_run_grain(&it, half_loop, c.prm, bfast[op] ? CPU_GRAIN : CPU_GRAIN_MEM);
    return ZORCH_OK;
  }
  const zorch_tensor *ts[3] = {out, a, b};
  cpu_iter it;
  cpu_iter_init(&it, 3, ts);
  double prm[2] = {p0, p1};
  /* most binary ops are an add or a multiply per element: memory-bound */
  cpu_iter_run_grain(&it, fn, prm, bfast[op] ? CPU_GRAIN : CPU_GRAIN_MEM);
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
  cpu_iter_run_grain(&it, es == 1 ? where_1 : es == 2 ? where_2 : es == 4 ? where_4 : where_8, NULL,
                     CPU_GRAIN_MEM);
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
COPY_LOOP(copy_f32_i8, float, int8_t, TO_F32)
/* integer to integer: exact, and narrowing wraps around (two's complement,
   as C's unsigned conversions and PyTorch's casts), where through double it
   would round past 2^53 and saturate */
#define WRAP32(x) ((int32_t)(uint32_t)(x))
#define WRAP8(x) ((uint8_t)(x))
#define WRAPS8(x) ((int8_t)(uint8_t)(x))
#define TO_I64(x) ((int64_t)(x))
COPY_LOOP(copy_i32_i64, int32_t, int64_t, WRAP32)
COPY_LOOP(copy_u8_i64, uint8_t, int64_t, WRAP8)
COPY_LOOP(copy_u8_i32, uint8_t, int32_t, WRAP8)
COPY_LOOP(copy_i64_i32, int64_t, int32_t, TO_I64)
COPY_LOOP(copy_i64_u8, int64_t, uint8_t, TO_I64)
COPY_LOOP(copy_i32_u8, int32_t, uint8_t, WRAP32)
COPY_LOOP(copy_i8_i64, int8_t, int64_t, WRAPS8)
COPY_LOOP(copy_i8_i32, int8_t, int32_t, WRAPS8)
COPY_LOOP(copy_i64_i8, int64_t, int8_t, TO_I64)
COPY_LOOP(copy_i32_i8, int32_t, int8_t, TO_I64)

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
  if (PAIR(F32, I8)) return copy_f32_i8;
  if (PAIR(I32, I64)) return copy_i32_i64;
  if (PAIR(U8, I64)) return copy_u8_i64;
  if (PAIR(U8, I32)) return copy_u8_i32;
  if (PAIR(I64, I32)) return copy_i64_i32;
  if (PAIR(I64, U8)) return copy_i64_u8;
  if (PAIR(I32, U8)) return copy_i32_u8;
  if (PAIR(I8, I64)) return copy_i8_i64;
  if (PAIR(I8, I32)) return copy_i8_i32;
  if (PAIR(I64, I8)) return copy_i64_i8;
  if (PAIR(I32, I8)) return copy_i32_i8;
#undef PAIR
  return copy_generic;
}

zorch_status cpu_copy(zorch_tensor *dst, const zorch_tensor *src) {
  const zorch_tensor *ts[2] = {dst, src};
  cpu_iter it;
  cpu_iter_init(&it, 2, ts);
  double prm[2] = {(double)dst->dtype, (double)src->dtype};
  cpu_loop fn = copy_loop(dst->dtype, src->dtype);
  bool same = fn == copy_1 || fn == copy_2 || fn == copy_4 || fn == copy_8;
  if (same && cpu_copy_transposed(&it, dtype_sizes[dst->dtype])) return ZORCH_OK;
  cpu_iter_run_grain(&it, fn, prm, CPU_GRAIN_MEM);
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
  if (s[0] == (int64_t)es && es == 2) { /* bf16, fp16 (zeroing 16-bit gradients) */
    uint16_t x;
    memcpy(&x, v, 2);
    uint16_t *o = (uint16_t *)p[0];
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
  cpu_iter_run_grain(&it, fill_loop, prm, CPU_GRAIN_MEM);
  return ZORCH_OK;
}
