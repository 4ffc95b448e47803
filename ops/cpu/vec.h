/* vec.h: float32 math written so the compiler vectorises it: no libm calls, no
   branches (selects only), integer tricks through memcpy. Inside a CPU_CLONES
   loop each becomes AVX-512 (or AVX2) code; the baseline clone runs it scalar.
   Accuracy: expf within 2 ulp, 1 + erf and GELU within 2e-7 relative
   (tests/test_cpu_kernels.c sweeps them against double-precision libm). */
#ifndef ZORCH_OPS_CPU_VEC_H
#define ZORCH_OPS_CPU_VEC_H
#include <stdint.h>
#include <string.h>

static inline float zv_bits_f(int32_t i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline int32_t zv_f_bits(float f) {
  int32_t i;
  memcpy(&i, &f, 4);
  return i;
}

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes'
   coefficients), 2^n built in the exponent bits in two halves so that the
   results near overflow and the subnormal ones come out right. NaN stays NaN. */
static inline float zv_expf(float x) {
  const float hi = 88.72283935546875f, lo = -104.0f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float kf = xc * 1.44269504088896341f + magic;
  int32_t n = zv_f_bits(kf) - zv_f_bits(magic);
  float nf = kf - magic;
  float r = xc - nf * 0.693359375f + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t n1 = n >> 1, n2 = n - n1;
  /* (shifted unsigned: a NaN input gives an n out of range, harmlessly) */
  float e = p * zv_bits_f((int32_t)((uint32_t)(n1 + 127) << 23)) *
            zv_bits_f((int32_t)((uint32_t)(n2 + 127) << 23));
  return x > hi ? x * 2.0f * 1e38f : e; /* +inf above the range (and NaN kept) */
}

/* erf(z) for |z| < 0.5 by its Taylor series to z^13 (within 1e-9). */
static inline float zv_erf_small(float z) {
  float z2 = z * z;
  float s = 1.0f / 9360.0f; /* (-1)^k / (k! (2k+1)), k = 6 down to 0 */
  s = s * z2 - 1.0f / 1320.0f;
  s = s * z2 + 1.0f / 216.0f;
  s = s * z2 - 1.0f / 42.0f;
  s = s * z2 + 1.0f / 10.0f;
  s = s * z2 - 1.0f / 3.0f;
  s = s * z2 + 1.0f;
  return 1.12837916709551257f * z * s;
}

/* 2 Phi(x) = 1 + erf(x / sqrt 2), keeping its relative accuracy where it is
   small (x << 0). Below |x / sqrt 2| = 0.5 the Taylor series; above,
   erfc(a) = e^{-a^2} P(t), t = 1/(1 + a/2), P of degree 10 fitted to
   erfc(a) e^{a^2} on [0.5, 10] (relative error 1e-8). e^{-a^2} = e^{-x^2/2} is
   taken from x itself in two factors (the small one by a series), x^2 = h^2 + l (|x| + h) with h the top 12
   bits of |x|: h^2 is exact, and so the result escapes the rounding of a^2 (or
   of x / sqrt 2), which would cost a relative 6e-8 a^2. */
static inline float zv_phi2(float x) {
  float ax = x < 0 ? -x : x;
  ax = ax > 14.9f ? 14.9f : ax; /* erfc is 0 in float32 beyond; NaN stays */
  float a = ax * 0.70710678118654752f;
  float t = 1.0f / (1.0f + 0.5f * a);
  float p = -2.006621141e-02f;
  p = p * t + 1.574590091e-02f;
  p = p * t + 1.738663550e-01f;
  p = p * t - 4.101081862e-01f;
  p = p * t + 2.616697804e-01f;
  p = p * t - 3.894832862e-02f;
  p = p * t + 2.132467723e-01f;
  p = p * t + 2.395238047e-01f;
  p = p * t + 2.830125281e-01f;
  p = p * t + 2.820284756e-01f;
  p = p * t + 2.099559453e-06f;
  float h = zv_bits_f(zv_f_bits(ax) & (int32_t)0xfffff000), l = ax - h;
  float d = -0.5f * l * (ax + h); /* |d| < 0.11: e^d by its series to d^5 */
  float ed = 1.0f + d * (1.0f + d * (0.5f + d * (1.0f / 6.0f + d * (1.0f / 24.0f + d * (1.0f / 120.0f)))));
  float c = p * zv_expf(-0.5f * h * h) * ed;
  return a < 0.5f ? 1.0f + zv_erf_small(x * 0.70710678118654752f) : (x < 0 ? c : 2.0f - c);
}

/* gelu(x) = x/2 (1 + erf(x/sqrt 2)), PyTorch's default form. */
static inline float zv_gelu(float x) { return 0.5f * x * zv_phi2(x); }

/* The tanh form: x/2 (1 + tanh u) = x / (1 + e^{-2u}), which keeps its relative
   accuracy for negative x where 1 + tanh u cancels. */
static inline float zv_gelu_tanh(float x) {
  float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return x / (1.0f + zv_expf(-2.0f * u));
}

/* d gelu / dx times g: Phi(x) + x phi(x). */
static inline float zv_gelu_bwd(float g, float x) {
  float cdf = 0.5f * zv_phi2(x);
  float pdf = zv_expf(-0.5f * x * x) * 0.39894228040143267794f;
  return g * (cdf + x * pdf);
}

/* The tanh form's derivative with s = sigmoid(2u) = (1 + tanh u)/2, so that
   1 - tanh^2 u = 4 s (1 - s): g s (1 + 2 x (1 - s) du/dx), with 1 - s taken as
   e s (e = e^{-2u}), not by a subtraction that cancels. */
static inline float zv_gelu_tanh_bwd(float g, float x) {
  const float k = 0.79788456080286535588f;
  float x2 = x * x;
  float u = k * (x + 0.044715f * x2 * x);
  float e = zv_expf(-2.0f * u);
  float s = 1.0f / (1.0f + e);
  float du = k * (1.0f + 3.0f * 0.044715f * x2);
  float one_s = e > 1e30f ? 1.0f : e * s; /* e = inf: s = 0, 1 - s = 1 */
  return g * s * (1.0f + 2.0f * x * one_s * du);
}
#endif
