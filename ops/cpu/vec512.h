/* vec512.h: vec.h's float32 math written out in AVX-512 registers (FMA,
   vscalefps for 2^n, masked loads and stores for the tails), and the 16-bit
   conversions of ops/backend/math.h on 16 values at a time. GCC's vectorisation of
   vec.h (target_clones) turned its selects into masked operations without FMA
   and spilled the constants; written by hand the same algorithms take about
   half the instructions.

   Every function here gives each lane what it gives that value in any other
   lane or call: a 16-bit kernel that widens, computes here and narrows once
   equals the float32 kernel on the widened tensor, rounded once. The code
   runs where zv512_ok() says the CPU has AVX-512 (F, BW, VL, DQ); elsewhere
   the callers keep vec.h's portable loops. The two agree within a float32
   rounding or two (FMA), not bit for bit. */
#ifndef ZORCH_OPS_CPU_VEC512_H
#define ZORCH_OPS_CPU_VEC512_H
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ZORCH_NO_AVX512)
#define ZV512 1
#include <immintrin.h>

#define ZV512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define ZV512_FN static inline ZV512_TARGET

/* Whether this CPU runs the code below (asked once per file); the
   environment variable ZORCH_NO_AVX512=1 keeps the portable loops (to test
   them, or to compare). */
static inline bool zv512_ok(void) {
  static _Atomic int ok = -1; /* (asked from parallel regions too) */
  int v = atomic_load_explicit(&ok, memory_order_relaxed);
  if (v < 0) {
    const char *off = getenv("ZORCH_NO_AVX512");
    __builtin_cpu_init();
    v = !(off && off[0] == '1') && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    atomic_store_explicit(&ok, v, memory_order_relaxed);
  }
  return v;
}

#define ZV_C(v) _mm512_set1_ps(v)

/* Lanes 0..n-1 of 16 (n <= 16). */
static inline __mmask16 zv512_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* ---- 16-bit loads and stores: ops/backend/math.h's conversions, bit for bit ---------- */
ZV512_FN __m512 zv16_ld_bf16(const uint16_t *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Round to nearest even; a NaN keeps its top bits, made quiet. */
ZV512_FN void zv16_st_bf16(uint16_t *p, __m512 f, __mmask16 m) {
  __m512i u = _mm512_castps_si512(f);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

/* F16C's conversion, with a NaN's payload kept as zm_f16_to_f32 keeps it
   (the instruction would set the quiet bit). */
ZV512_FN __m512 zv16_ld_f16(const uint16_t *p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  __m512 f = _mm512_cvtph_ps(h);
  __m512i w = _mm512_cvtepu16_epi32(h);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
  if (nan) {
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
    __m512i man = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
    __m512i b = _mm512_or_si512(_mm512_or_si512(sign, man), _mm512_set1_epi32(0x7f800000));
    f = _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(b));
  }
  return f;
}

/* Round to nearest even (subnormal halves included); every NaN becomes the
   quiet NaN of its sign, as zm_f32_to_f16 writes it. */
ZV512_FN void zv16_st_f16(uint16_t *p, __m512 f, __mmask16 m) {
  __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (nan) {
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(f), 16), _mm512_set1_epi32(0x8000));
    __m256i q = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    h = _mm256_mask_blend_epi16(nan, h, q);
  }
  _mm256_mask_storeu_epi16(p, m, h);
}

/* 16-bit values of either kind (bf: bfloat16, else float16). */
ZV512_FN __m512 zv16_ld(const uint16_t *p, __mmask16 m, bool bf) {
  return bf ? zv16_ld_bf16(p, m) : zv16_ld_f16(p, m);
}
ZV512_FN void zv16_st(uint16_t *p, __m512 f, __mmask16 m, bool bf) {
  if (bf) zv16_st_bf16(p, f, m);
  else zv16_st_f16(p, f, m);
}

/* ---- the math --------------------------------------------------------------- */
/* e^x for x in [-112, 88.7] (or NaN) as zv_expf: x = n ln2 + r,
   e^r = 1 + r + r^2 P(r) (Cephes' degree-5 P), 2^n by vscalefps (which rounds
   a subnormal result once). */
ZV512_FN __m512 zv16_expf_in_range(__m512 x) {
  __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(x, ZV_C(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(kf, ZV_C(0.693359375f), x);
  r = _mm512_fmadd_ps(kf, ZV_C(2.12194440e-4f), r);
  __m512 p = ZV_C(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, ZV_C(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, ZV_C(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, ZV_C(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, ZV_C(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, ZV_C(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), ZV_C(1.0f));
  return _mm512_scalef_ps(p, kf);
}

/* e^x for any x: clamped into that range, +inf above it, NaN kept
   (vminps/vmaxps return their second operand on a NaN). */
ZV512_FN __m512 zv16_expf(__m512 x) {
  const __m512 hi = ZV_C(88.72283935546875f);
  __m512 e = zv16_expf_in_range(_mm512_min_ps(hi, _mm512_max_ps(ZV_C(-104.0f), x)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), e, ZV_C(INFINITY));
}

/* erfc(|x| / sqrt 2) = e^{-x^2/2} R(t), t = 1 / (1 + a/2), a = |x| / sqrt 2,
   for every x: R, of degree 9 in t, fitted to erfc(a) e^{a^2} on [0, 10.54]
   (relative error 3.5e-8; scripts/fit-erfc.py). x^2 = hi + lo exactly (FMA), and
   e^{-x^2/2} = e^{-hi/2} (1 - lo/2): the argument's rounding, which would cost
   a relative 6e-8 x^2/2, is not taken. Beyond |x| = 14.9 erfc is 0 in float32. */
ZV512_FN __m512 zv16_erfc_half_e(__m512 x, __m512 *ep) {
  __m512 ax = _mm512_min_ps(ZV_C(14.9f), _mm512_abs_ps(x)); /* NaN stays */
  __m512 t = _mm512_div_ps(ZV_C(1.0f), _mm512_fmadd_ps(ax, ZV_C(0.35355339059327376f), ZV_C(1.0f)));
  __m512 p = ZV_C(-5.588956177e-02f);
  p = _mm512_fmadd_ps(p, t, ZV_C(2.682637572e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(-4.512442350e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(2.335160673e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(7.449285593e-03f));
  p = _mm512_fmadd_ps(p, t, ZV_C(1.860633492e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(2.482582778e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(2.813988328e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(2.821887136e-01f));
  p = _mm512_fmadd_ps(p, t, ZV_C(-4.511383395e-06f));
  __m512 hi = _mm512_mul_ps(ax, ax), lo = _mm512_fmsub_ps(ax, ax, hi);
  __m512 e = zv16_expf_in_range(_mm512_mul_ps(hi, ZV_C(-0.5f)));
  e = _mm512_fnmadd_ps(_mm512_mul_ps(e, ZV_C(0.5f)), lo, e);
  *ep = e;
  return _mm512_mul_ps(p, e);
}
ZV512_FN __m512 zv16_erfc_half(__m512 x) {
  __m512 e;
  return zv16_erfc_half_e(x, &e);
}

/* 2 Phi(x) = 1 + erf(x / sqrt 2): erfc(|x| / sqrt 2) for x < 0 (relative
   accuracy kept for x << 0), 2 minus it otherwise. */
ZV512_FN __m512 zv16_phi2(__m512 x) {
  __m512 c = zv16_erfc_half(x);
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(neg, _mm512_sub_ps(ZV_C(2.0f), c), c);
}

ZV512_FN __m512 zv16_gelu(__m512 x) {
  return _mm512_mul_ps(_mm512_mul_ps(x, ZV_C(0.5f)), zv16_phi2(x));
}

/* g (Phi(x) + x phi(x)), phi's e^{-x^2/2} the one erfc took (0 beyond
   |x| = 14.9, as it is in float32) */
ZV512_FN __m512 zv16_gelu_bwd(__m512 g, __m512 x) {
  __m512 e, c = zv16_erfc_half_e(x, &e);
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 cdf = _mm512_mul_ps(_mm512_mask_blend_ps(neg, _mm512_sub_ps(ZV_C(2.0f), c), c), ZV_C(0.5f));
  __m512 pdf = _mm512_mul_ps(e, ZV_C(0.39894228040143267794f));
  return _mm512_mul_ps(g, _mm512_fmadd_ps(x, pdf, cdf));
}

/* x / (1 + e^{-2u}), u = k (x + 0.044715 x^3) */
ZV512_FN __m512 zv16_gelu_tanh_u(__m512 x, __m512 x2) {
  return _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(x2, ZV_C(0.044715f)), x, x),
                       ZV_C(0.79788456080286535588f));
}
ZV512_FN __m512 zv16_gelu_tanh(__m512 x) {
  __m512 u = zv16_gelu_tanh_u(x, _mm512_mul_ps(x, x));
  __m512 e = zv16_expf(_mm512_mul_ps(u, ZV_C(-2.0f)));
  return _mm512_div_ps(x, _mm512_add_ps(e, ZV_C(1.0f)));
}

/* zv_gelu_tanh_bwd: g s (1 + 2 x (1 - s) du/dx), 1 - s = e s. */
ZV512_FN __m512 zv16_gelu_tanh_bwd(__m512 g, __m512 x) {
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 e = zv16_expf(_mm512_mul_ps(zv16_gelu_tanh_u(x, x2), ZV_C(-2.0f)));
  __m512 s = _mm512_div_ps(ZV_C(1.0f), _mm512_add_ps(e, ZV_C(1.0f)));
  __m512 du = _mm512_mul_ps(_mm512_fmadd_ps(x2, ZV_C(3.0f * 0.044715f), ZV_C(1.0f)),
                            ZV_C(0.79788456080286535588f));
  __m512 one_s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(e, ZV_C(1e30f), _CMP_GT_OQ),
                                      _mm512_mul_ps(e, s), ZV_C(1.0f));
  __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), one_s), du);
  return _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_add_ps(t, ZV_C(1.0f)));
}
#endif
#endif
