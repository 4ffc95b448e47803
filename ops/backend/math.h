/* math.h: per-element math shared by every backend. Each function is static
   inline and, under nvcc, also __device__, so the CPU tests check the very
   formulas the CUDA kernels run. Bodies are written once over a type T and
   instantiated for float (_f32) and double (_f64); <tgmath.h> picks expf for float
   in C, and CUDA's overloads do the same in device code. ZM(f, args) calls zm_f
   for the type of its first argument (C11 _Generic; overloads under nvcc), so one
   expression serves both types (the op registry, ops/backend/pointwise_ops.h). */
#ifndef ZORCH_OPS_MATH_H
#define ZORCH_OPS_MATH_H
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZM_INLINE __host__ __device__ static inline
#elif defined(__cplusplus) /* the emulated CUDA build (ops/cuda/emu): C++'s overloads */
#include <math.h>
#define ZM_INLINE static inline
#else
#include <tgmath.h>
#define ZM_INLINE static inline
#endif
#if defined(__CUDACC__) || defined(__cplusplus)
#define ZM_CXX 1
#endif

#ifdef ZM_CXX
#define ZM(f, ...) zm_##f(__VA_ARGS__)
#define ZM_OVERLOAD1(name)                                                  \
  ZM_INLINE float name(float x) { return name##_f32(x); }                   \
  ZM_INLINE double name(double x) { return name##_f64(x); }
#define ZM_OVERLOAD2(name)                                                  \
  ZM_INLINE float name(float g, float x) { return name##_f32(g, x); }       \
  ZM_INLINE double name(double g, double x) { return name##_f64(g, x); }
#else
#define ZM_FIRST(a, ...) a
#define ZM(f, ...) \
  _Generic((ZM_FIRST(__VA_ARGS__, 0)), float: zm_##f##_f32, double: zm_##f##_f64)(__VA_ARGS__)
#define ZM_OVERLOAD1(name)
#define ZM_OVERLOAD2(name)
#endif

#define ZM_DEF1(name, body)                                    \
  ZM_INLINE float name##_f32(float x) {                        \
    typedef float T;                                           \
    body                                                       \
  }                                                            \
  ZM_INLINE double name##_f64(double x) {                      \
    typedef double T;                                          \
    body                                                       \
  }                                                            \
  ZM_OVERLOAD1(name)
#define ZM_DEF2(name, body)                                    \
  ZM_INLINE float name##_f32(float g, float x) {               \
    typedef float T;                                           \
    body                                                       \
  }                                                            \
  ZM_INLINE double name##_f64(double g, double x) {            \
    typedef double T;                                          \
    body                                                       \
  }                                                            \
  ZM_OVERLOAD2(name)

/* Functions of more arguments, each declared with a parameter list PL(T) (a
   macro of the element type): ZM_DEFP(zm_elu, ZM_ELU_PL, body). */
#ifdef ZM_CXX
#define ZM_DEFP(name, PL, ...)                                            \
  ZM_INLINE float name##_f32 PL(float) { typedef float T; __VA_ARGS__ }    \
  ZM_INLINE double name##_f64 PL(double) { typedef double T; __VA_ARGS__ } \
  ZM_INLINE float name PL(float) { typedef float T; __VA_ARGS__ }          \
  ZM_INLINE double name PL(double) { typedef double T; __VA_ARGS__ }
#else
#define ZM_DEFP(name, PL, ...)                                            \
  ZM_INLINE float name##_f32 PL(float) { typedef float T; __VA_ARGS__ }    \
  ZM_INLINE double name##_f64 PL(double) { typedef double T; __VA_ARGS__ }
#endif

/* forward */
ZM_DEF1(zm_relu, return !(x <= (T)0) ? x : (T)0;) /* NaN passes through */
ZM_DEF1(zm_sigmoid, return (T)1 / ((T)1 + exp(-x));)
/* silu(x) = x * sigmoid(x) (PyTorch's F.silu) */
ZM_DEF1(zm_silu, return x / ((T)1 + exp(-x));)
/* gelu(x) = x * Phi(x), Phi the standard normal CDF (PyTorch's default). */
ZM_DEF1(zm_gelu, return (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440));)
/* The tanh approximation (PyTorch's approximate="tanh"). */
ZM_DEF1(zm_gelu_tanh,
        T u = (T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x);
        return (T)0.5 * x * ((T)1 + tanh(u));)

/* sign: 0 for both zeros and for NaN (PyTorch's (0 < x) - (x < 0)). Written
   as that difference: the nested select vectorised into an x != 0 compare,
   which valgrind's AVX emulation gets wrong for NaN. */
ZM_DEF1(zm_sign, return (T)((T)0 < x) - (T)(x < (T)0);)
/* frac: x - trunc(x), with the sign of x (NaN for +-inf, as PyTorch) */
ZM_DEF1(zm_frac, return x - (T)trunc(x);)
/* round half to even; decimals d: rint(x * 10^d) / 10^d, or for d < 0
   rint(x / 10^-d) * 10^-d (PyTorch's two forms) */
#define ZM_ROUND_PL(T) (T x, T d)
ZM_DEFP(zm_round_decimals, ZM_ROUND_PL,
        if (d == (T)0) return rint(x);
        T ten = pow((T)10, fabs(d));
        return d > (T)0 ? rint(x * ten) / ten : rint(x / ten) * ten;)
/* elu and its kin: x <= 0 ? neg * expm1(x * inscale) : pos * x (PyTorch's
   negcoef = alpha * scale, poscoef = scale, input_scale) */
#define ZM_ELU_PL(T) (T x, T neg, T pos, T inscale)
ZM_DEFP(zm_elu, ZM_ELU_PL, return x <= (T)0 ? expm1(x * inscale) * neg : x * pos;)
/* softplus: log1p(exp(beta x)) / beta, x itself where beta x > threshold */
#define ZM_SOFTPLUS_PL(T) (T x, T beta, T threshold)
ZM_DEFP(zm_softplus, ZM_SOFTPLUS_PL,
        return x * beta > threshold ? x : (T)log1p(exp(x * beta)) / beta;)
/* hardsigmoid: clamp(x + 3, 0, 6) / 6; NaN kept */
ZM_DEF1(zm_hardsigmoid,
        T r = x + (T)3;
        r = r < (T)0 ? (T)0 : (r > (T)6 ? (T)6 : r);
        return r / (T)6;)
ZM_DEF1(zm_hardswish,
        T r = x + (T)3;
        r = r < (T)0 ? (T)0 : (r > (T)6 ? (T)6 : r);
        return x * r / (T)6;)
/* mish: x * tanh(softplus(x)) */
ZM_DEF1(zm_mish, return x * (T)tanh(log1p(exp(x)));)
/* logsigmoid: min(x, 0) - log1p(exp(-|x|)), which neither overflows nor
   loses the small values */
ZM_DEF1(zm_logsigmoid, return (x < (T)0 ? x : (T)0) - log1p(exp(-fabs(x)));)
ZM_DEF1(zm_softsign, return x / ((T)1 + fabs(x));)

/* backward: g is the incoming gradient, x the input (or y the output, as named) */
ZM_DEF2(zm_relu_bwd, return x <= (T)0 ? (T)0 : g;) /* a NaN passes g, as PyTorch's threshold_backward */
ZM_DEF2(zm_gelu_bwd,
        T cdf = (T)0.5 * ((T)1 + erf(x * (T)0.70710678118654752440));
        T pdf = exp((T)-0.5 * x * x) * (T)0.39894228040143267794;
        return g * (cdf + x * pdf);)
ZM_DEF2(zm_gelu_tanh_bwd,
        T k = (T)0.79788456080286535588;
        T x2 = x * x;
        T u = k * (x + (T)0.044715 * x2 * x);
        T t = tanh(u);
        T du = k * ((T)1 + (T)3 * (T)0.044715 * x2);
        return g * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du);)
ZM_DEF2(zm_tanh_bwd_y, return g * ((T)1 - x * x);)        /* x is y = tanh */
ZM_DEF2(zm_sigmoid_bwd_y, return g * x * ((T)1 - x);)     /* x is y = sigmoid */
ZM_DEF2(zm_silu_bwd,
        T s = (T)1 / ((T)1 + exp(-x));
        return g * s * ((T)1 + x * ((T)1 - s));)
ZM_DEF2(zm_sqrt_bwd_y, return g * (T)0.5 / x;)            /* x is y = sqrt */
ZM_DEF2(zm_abs_bwd, return x > (T)0 ? g : (x < (T)0 ? -g : (T)0);)
ZM_DEF2(zm_sin_bwd, return g * (T)cos(x);)
ZM_DEF2(zm_cos_bwd, return -g * (T)sin(x);)

/* the gradients of the unary ops above and of the math library's; x is the
   input unless the name ends in _y (then it is the output y) */
ZM_DEF2(zm_reciprocal_bwd_y, return -g * (T)(x * x);)
ZM_DEF2(zm_rsqrt_bwd_y, return (T)-0.5 * g * (x * x * x);)
ZM_DEF2(zm_square_bwd, return g * (T)2 * x;)
ZM_DEF2(zm_log1p_bwd, return g / (x + (T)1);)
ZM_DEF2(zm_expm1_bwd_y, return g * (x + (T)1);)
ZM_DEF2(zm_log2_bwd, return g / (x * (T)0.69314718055994530942);)
ZM_DEF2(zm_log10_bwd, return g / (x * (T)2.30258509299404568402);)
ZM_DEF2(zm_exp2_bwd_y, return g * x * (T)0.69314718055994530942;)
/* 2 / sqrt(pi) */
ZM_DEF2(zm_erf_bwd, return g * (T)1.12837916709551257390 * exp(-x * x);)
ZM_DEF2(zm_erfc_bwd, return -g * (T)1.12837916709551257390 * exp(-x * x);)
ZM_DEF2(zm_asin_bwd, return g / sqrt((T)1 - x * x);)
ZM_DEF2(zm_acos_bwd, return -g / sqrt((T)1 - x * x);)
ZM_DEF2(zm_atan_bwd, return g / (x * x + (T)1);)
ZM_DEF2(zm_sinh_bwd, return g * (T)cosh(x);)
ZM_DEF2(zm_cosh_bwd, return g * (T)sinh(x);)
ZM_DEF2(zm_tan_bwd_y, return g * ((T)1 + x * x);)
ZM_DEF2(zm_asinh_bwd, return g / sqrt(x * x + (T)1);)
ZM_DEF2(zm_acosh_bwd, return g / sqrt(x * x - (T)1);)
ZM_DEF2(zm_atanh_bwd, return g / ((T)1 - x * x);)
/* PyTorch's masks at the kinks: leaky_relu's slope at 0 and below */
#define ZM_BWD1_PL(T) (T g, T x, T p)
ZM_DEFP(zm_leaky_relu_bwd, ZM_BWD1_PL, return x > (T)0 ? g : g * p;)
#define ZM_ELU_BWD_PL(T) (T g, T x, T neg, T pos, T inscale)
ZM_DEFP(zm_elu_bwd, ZM_ELU_BWD_PL,
        return x <= (T)0 ? g * inscale * neg * exp(x * inscale) : g * pos;)
#define ZM_BWD2_PL(T) (T g, T x, T p0, T p1)
ZM_DEFP(zm_softplus_bwd, ZM_BWD2_PL,
        T z = exp(x * p0);
        return x * p0 > p1 ? g : g * z / (z + (T)1);)
/* hardtanh: no gradient at the bounds, outside them or at NaN (PyTorch's
   vectorised loop; its scalar one passes NaN's) */
ZM_DEFP(zm_hardtanh_bwd, ZM_BWD2_PL, return (x > p0 && x < p1) ? g : (T)0;)
ZM_DEF2(zm_hardsigmoid_bwd, return (x > (T)-3 && x < (T)3) ? g / (T)6 : (T)0;)
/* hardswish: 0 up to -3, x / 3 + 1/2 inside, 1 from 3 on (and at NaN) */
ZM_DEF2(zm_hardswish_bwd,
        return x <= (T)-3 ? (T)0 : (x < (T)3 ? g * (x / (T)3 + (T)0.5) : g);)
ZM_DEF2(zm_mish_bwd,
        T t = tanh(log1p(exp(x)));
        T s = (T)1 / ((T)1 + exp(-x));
        return g * (t + x * s * ((T)1 - t * t));)
ZM_DEF2(zm_logsigmoid_bwd,
        T z = exp(-fabs(x));
        return x < (T)0 ? g * ((T)1 - z / ((T)1 + z)) : g * (z / ((T)1 + z));)
/* as the quotient's rule gives it: NaN at +-inf, as PyTorch */
ZM_DEF2(zm_softsign_bwd,
        T d = (T)1 + fabs(x);
        return g / d - g * fabs(x) / (d * d);)
ZM_DEF2(zm_tanhshrink_bwd,
        T t = tanh(x);
        return g * (t * t);)

/* ---- two-input math (x and y, the op's inputs) ---------------------------- */
#define ZM_DEFB(name, body)                                    \
  ZM_INLINE float name##_f32(float x, float y) {               \
    typedef float T;                                           \
    body                                                       \
  }                                                            \
  ZM_INLINE double name##_f64(double x, double y) {            \
    typedef double T;                                          \
    body                                                       \
  }                                                            \
  ZM_OVERLOAD2(name)

/* maximum and minimum let NaN through, fmax and fmin drop it; a tie gives x
   (so the sign of a zero is x's), as PyTorch's */
ZM_DEFB(zm_maximum, return (x != x || y != y) ? (T)(x + y) : (x < y ? y : x);)
ZM_DEFB(zm_minimum, return (x != x || y != y) ? (T)(x + y) : (y < x ? y : x);)
ZM_DEFB(zm_fmax, return x != x ? y : (y != y ? x : (x < y ? y : (T)x));)
ZM_DEFB(zm_fmin, return x != x ? y : (y != y ? x : (y < x ? y : (T)x));)
/* log(exp(x) + exp(y)) without overflow; equal infinities give themselves */
ZM_DEFB(zm_logaddexp,
        if (x == y) return x + (T)0.69314718055994530942;
        T m = x > y ? x : y;
        return m + log1p(exp(-fabs(x - y)));)
/* Python's remainder: the sign of the divisor */
ZM_DEFB(zm_remainder,
        T r = fmod(x, y);
        return (r != (T)0 && (r < (T)0) != (y < (T)0)) ? r + y : r;)
/* Python's floor division: floor(x / y) taken from the exact remainder, so a
   quotient such as 1 // 0.1 rounds the way the remainder says (9, not 10);
   a zero divisor gives x / y (inf or NaN) */
ZM_DEFB(zm_floor_divide,
        if (y == (T)0) return x / y;
        T r = fmod(x, y);
        T q = (x - r) / y;
        if (r != (T)0 && (r < (T)0) != (y < (T)0)) q -= (T)1;
        if (q == (T)0) return copysign((T)0, x / y);
        T f = floor(q);
        return q - f > (T)0.5 ? f + (T)1 : f;)

/* Integer division kernels, on int64 (each dtype's values fit). A zero divisor
   gives 0: the op layer refuses it before a kernel runs. The most negative
   value divided by -1 wraps in two's complement (the hardware would trap). */
ZM_INLINE int64_t zm_ifloor_divide(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  int64_t q = x / y;
  return (x % y != 0 && (x < 0) != (y < 0)) ? q - 1 : q;
}
ZM_INLINE int64_t zm_ifmod(int64_t x, int64_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
ZM_INLINE int64_t zm_iremainder(int64_t x, int64_t y) {
  int64_t r = zm_ifmod(x, y);
  return (r != 0 && (r < 0) != (y < 0)) ? r + y : r;
}
/* x^e wrapping in two's complement; a negative e gives 0 but for bases 1 and -1
   (the op layer refuses a negative scalar exponent) */
ZM_INLINE int64_t zm_ipow(int64_t x, int64_t e) {
  if (e < 0) return x == 1 ? 1 : x == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)x;
  for (; e; e >>= 1) {
    if (e & 1) r *= b;
    b *= b;
  }
  return (int64_t)r;
}

/* ---- 16-bit floats: round to nearest even, NaN kept quiet ---------------- */
ZM_INLINE uint32_t zm_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
ZM_INLINE float zm_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
ZM_INLINE uint16_t zm_f32_to_bf16(float f) {
  uint32_t u = zm_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
ZM_INLINE float zm_bf16_to_f32(uint16_t h) { return zm_bits_f32((uint32_t)h << 16); }

ZM_INLINE float zm_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return zm_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return zm_bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return zm_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
ZM_INLINE uint16_t zm_f32_to_f16(float f) {
  uint32_t u = zm_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);    /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to inf */
  if (a < 0x38800000u) {                                     /* subnormal or zero */
    /* the magic-number trick: adding 0.5 aligns the mantissa at 2^-24 steps and
       the FPU rounds to nearest even */
    float v = zm_bits_f32(a) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(zm_f32_bits(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
  return (uint16_t)(sign | (uint16_t)(a >> 13));
}

/* ---- Philox4x32-10 (Salmon et al., SC'11): counter-based random numbers -------- */
typedef struct {
  uint32_t v[4];
} zm_u32x4;

/* Ten rounds on a 128-bit counter with a 64-bit key. */
ZM_INLINE zm_u32x4 zm_philox4x32(zm_u32x4 c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c.v[0], p1 = (uint64_t)0xCD9E8D57u * c.v[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c.v[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1;
    c.v[1] = (uint32_t)p1;
    c.v[3] = (uint32_t)p0;
    c.v[0] = n0;
    c.v[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}
/* zorch's streams: counter = block number (64 bits), key = seed. */
ZM_INLINE zm_u32x4 zm_philox(uint64_t counter, uint64_t seed) {
  zm_u32x4 c = {{(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0}};
  return zm_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}
/* Uniform in [0, 1) with 24 random bits. */
ZM_INLINE float zm_u32_to_unit_f32(uint32_t x) { return (float)(x >> 8) * 5.9604644775390625e-8f; }
/* Uniform in [0, 1) with 53 random bits. */
ZM_INLINE double zm_u64_to_unit_f64(uint32_t lo, uint32_t hi) {
  uint64_t x = ((uint64_t)hi << 32 | lo) >> 11;
  return (double)x * 1.1102230246251565404e-16;
}

/* Stream layout, shared by every backend: uniform float32 element i takes lane
   i % 4 of block offset + i / 4; uniform float64 and normal elements take half a
   block each (two lanes), normal pairs (2j, 2j+1) come from one Box-Muller draw
   on block offset + j. Blocks used: zm_random_blocks(). */
ZM_INLINE float zm_random_unit_f32(uint64_t seed, uint64_t offset, int64_t i) {
  zm_u32x4 r = zm_philox(offset + (uint64_t)i / 4, seed);
  return zm_u32_to_unit_f32(r.v[i % 4]);
}
ZM_INLINE double zm_random_unit_f64(uint64_t seed, uint64_t offset, int64_t i) {
  zm_u32x4 r = zm_philox(offset + (uint64_t)i / 2, seed);
  int l = (int)(i % 2) * 2;
  return zm_u64_to_unit_f64(r.v[l], r.v[l + 1]);
}
ZM_INLINE double zm_random_normal(uint64_t seed, uint64_t offset, int64_t i) {
  zm_u32x4 r = zm_philox(offset + (uint64_t)i / 2, seed);
  double u1 = 1.0 - zm_u64_to_unit_f64(r.v[0], r.v[1]); /* (0, 1] */
  double u2 = zm_u64_to_unit_f64(r.v[2], r.v[3]);
  double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586477 * u2;
  return (i % 2) ? rad * sin(th) : rad * cos(th);
}
ZM_INLINE uint64_t zm_random_blocks(int64_t n, int f32_uniform) {
  return f32_uniform ? (uint64_t)(n + 3) / 4 : (uint64_t)(n + 1) / 2;
}
/* 64 random bits for element i, two lanes of block offset + i / 2 (the layout
   of the float64 uniforms: zm_random_blocks(n, 0) blocks). */
ZM_INLINE uint64_t zm_random_u64(uint64_t seed, uint64_t offset, int64_t i) {
  zm_u32x4 r = zm_philox(offset + (uint64_t)i / 2, seed);
  int l = (int)(i % 2) * 2;
  return (uint64_t)r.v[l + 1] << 32 | r.v[l];
}
/* An integer in [low, low + range), range > 0: the 64 bits modulo range (a bias
   below range / 2^64). */
ZM_INLINE int64_t zm_random_int(uint64_t seed, uint64_t offset, int64_t i, int64_t low,
                                uint64_t range) {
  return (int64_t)((uint64_t)low + zm_random_u64(seed, offset, i) % range);
}

/* ---- sorting and index geometry ---------------------------------------------- */
/* Does a go strictly before b? Ascending: the smaller first, NaN last;
   descending: the larger first, NaN first (PyTorch's order). */
#define ZM_SORT_DEF(SUF, T, ISNAN)                                                          \
  ZM_INLINE int zm_sort_before_##SUF(T a, T b, int desc) {                                 \
    int an = ISNAN(a), bn = ISNAN(b);                                                      \
    if (desc) return an ? !bn : (!bn && a > b);                                            \
    return bn ? !an : (!an && a < b);                                                      \
  }                                                                                        \
  /* Stable merge sort of a row of n values (stride s): idx gets their positions */      \
  /* in sorted order, equal values in their first order; tmp holds n scratch entries. */ \
  ZM_INLINE void zm_sort_row_##SUF(const T *v, int64_t s, int64_t n, int desc, int64_t *idx,  \
                                   int64_t *tmp) {                                         \
    for (int64_t i = 0; i < n; i++) idx[i] = i;                                            \
    int64_t *src = idx, *dst = tmp;                                                        \
    for (int64_t w = 1; w < n; w *= 2) {                                                   \
      for (int64_t lo = 0; lo < n; lo += 2 * w) {                                          \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;       \
        int64_t i = lo, j = mid, k = lo;                                                   \
        while (i < mid && j < hi)                                                          \
          dst[k++] = zm_sort_before_##SUF(v[src[j] * s], v[src[i] * s], desc) ? src[j++]   \
                                                                             : src[i++];   \
        while (i < mid) dst[k++] = src[i++];                                               \
        while (j < hi) dst[k++] = src[j++];                                                \
      }                                                                                    \
      int64_t *t = src;                                                                    \
      src = dst;                                                                           \
      dst = t;                                                                             \
    }                                                                                      \
    if (src != idx)                                                                        \
      for (int64_t i = 0; i < n; i++) idx[i] = src[i];                                     \
  }
#define ZM_ISNAN_FLOAT(x) ((x) != (x))
#define ZM_ISNAN_INT(x) ((void)(x), 0)
ZM_SORT_DEF(f32, float, ZM_ISNAN_FLOAT)
ZM_SORT_DEF(f64, double, ZM_ISNAN_FLOAT)
ZM_SORT_DEF(i64, int64_t, ZM_ISNAN_INT)

/* Offset, in a contiguous tensor of shape `full`, of where line `line` of a
   tensor of shape `part` starts: the lines run over every coordinate but `dim`
   in row-major order and start at coordinate 0 along dim (part[k] <= full[k]). */
ZM_INLINE int64_t zm_line_offset(int64_t line, int ndim, int dim, const int64_t *part,
                                 const int64_t *full) {
  int64_t off = 0, stride = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    if (k != dim) {
      off += line % part[k] * stride;
      line /= part[k];
    }
    stride *= full[k];
  }
  return off;
}

/* Pooling along one axis of n inputs (on outputs): the inputs [*lo, *hi) of
   output i, and how many the average divides by. Adaptive windows are PyTorch's
   floor(i * n / on) .. ceil((i + 1) * n / on); the others start at i * s - p,
   span k (dilation 1) and count the padding inside n + p when include_pad. */
ZM_INLINE int64_t zm_pool_window(int adaptive, int include_pad, int64_t i, int64_t n, int64_t on,
                                 int64_t k, int64_t s, int64_t p, int64_t *lo, int64_t *hi) {
  if (adaptive) {
    *lo = i * n / on;
    *hi = ((i + 1) * n + on - 1) / on;
    return *hi - *lo;
  }
  int64_t start = i * s - p, end = start + k < n + p ? start + k : n + p;
  int64_t padded = end - start;
  *lo = start > 0 ? start : 0;
  *hi = end < n ? end : n;
  return include_pad ? padded : *hi - *lo;
}
#endif
