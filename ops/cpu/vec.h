/* vec.h: float32 math written so the compiler vectorises it: no libm calls, no
   branches (selects only), integer tricks through memcpy. Inside a CPU_CLONES
   loop each becomes AVX-512 (or AVX2) code; the baseline clone runs it scalar.
   Accuracy: expf within 2 ulp, erff within 2.5e-7 absolute (tests/test_cpu_kernels.c
   sweeps them against double-precision libm). */
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
  float e = p * zv_bits_f((n1 + 127) << 23) * zv_bits_f((n2 + 127) << 23);
  return x > hi ? x * 2.0f * 1e38f : e; /* +inf above the range (and NaN kept) */
}

/* erf(x): its Taylor series (to x^25) below |x| = 1.3, where it is within
   1e-8; above, Abramowitz and Stegun 7.1.26, 1 - t P(t) e^{-x^2} with
   t = 1/(1 + p|x|), within 1.5e-7 absolute, under float32's spacing near 1. */
static inline float zv_erff(float x) {
  float ax = x < 0 ? -x : x;
  float z2 = x * x;
  float s = 1.0f / 11975040000.0f; /* (-1)^k / (k! (2k+1)), k = 12 down to 0 */
  s = s * z2 - 1.0f / 918086400.0f;
  s = s * z2 + 1.0f / 76204800.0f;
  s = s * z2 - 1.0f / 6894720.0f;
  s = s * z2 + 1.0f / 685440.0f;
  s = s * z2 - 1.0f / 75600.0f;
  s = s * z2 + 1.0f / 9360.0f;
  s = s * z2 - 1.0f / 1320.0f;
  s = s * z2 + 1.0f / 216.0f;
  s = s * z2 - 1.0f / 42.0f;
  s = s * z2 + 1.0f / 10.0f;
  s = s * z2 - 1.0f / 3.0f;
  s = s * z2 + 1.0f;
  float small = 1.12837916709551257f * x * s;
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  float y = 1.0f - q * t * zv_expf(-ax * ax);
  return ax < 1.3f ? small : (x < 0 ? -y : y);
}

/* gelu(x) = x/2 (1 + erf(x/sqrt 2)), PyTorch's default form. */
static inline float zv_gelu(float x) {
  return 0.5f * x * (1.0f + zv_erff(x * 0.70710678118654752f));
}

/* The tanh form: x/2 (1 + tanh u) = x / (1 + e^{-2u}), which keeps its relative
   accuracy for negative x where 1 + tanh u cancels. */
static inline float zv_gelu_tanh(float x) {
  float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return x / (1.0f + zv_expf(-2.0f * u));
}

/* d gelu / dx times g: Phi(x) + x phi(x). */
static inline float zv_gelu_bwd(float g, float x) {
  float cdf = 0.5f * (1.0f + zv_erff(x * 0.70710678118654752f));
  float pdf = zv_expf(-0.5f * x * x) * 0.39894228040143267794f;
  return g * (cdf + x * pdf);
}

/* The tanh form's derivative with s = sigmoid(2u) = (1 + tanh u)/2, so that
   1 - tanh^2 u = 4 s (1 - s): g s (1 + 2 x (1 - s) du/dx). */
static inline float zv_gelu_tanh_bwd(float g, float x) {
  const float k = 0.79788456080286535588f;
  float x2 = x * x;
  float u = k * (x + 0.044715f * x2 * x);
  float s = 1.0f / (1.0f + zv_expf(-2.0f * u));
  float du = k * (1.0f + 3.0f * 0.044715f * x2);
  return g * s * (1.0f + 2.0f * x * (1.0f - s) * du);
}
#endif
