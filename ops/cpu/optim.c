/* optim.c: fused optimizer updates on the CPU: one pass over each parameter,
   arithmetic in the parameter's dtype with the scalars rounded to it first, as
   PyTorch's single-tensor Adam and SGD do. */
#include <math.h>
#include <omp.h>

#include "cpu.h"

/* sqrt in the parameter's dtype (C's sqrt would take a float through double) */
#define ADAM_SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)

#define ADAM(T)                                                                        \
  {                                                                                    \
    T *P = (T *)tensor_ptr(p), *M = (T *)tensor_ptr(m), *V = (T *)tensor_ptr(v);       \
    T *VM = vmax ? (T *)tensor_ptr(vmax) : NULL;                                       \
    const T *G = (const T *)tensor_ptr(g);                                             \
    const T b1w = (T)(1 - o->beta1), b2 = (T)o->beta2, b2w = (T)(1 - o->beta2);        \
    const T wd = (T)o->weight_decay, decay = (T)(1 - o->lr * o->weight_decay);         \
    const T step_size = (T)(o->lr / bc1), rbc2s = (T)1 / (T)sqrt(bc2), eps = (T)o->eps; \
    const bool l2 = o->weight_decay != 0 && !o->decoupled;                             \
    const bool dec = o->weight_decay != 0 && o->decoupled;                             \
    _Pragma("omp parallel for if (n >= CPU_GRAIN)")                                    \
    for (int64_t i = 0; i < n; i++) {                                                  \
      T gi = G[i], pi = P[i];                                                          \
      if (l2) gi = gi + wd * pi;                                                       \
      if (dec) pi = pi * decay;                                                        \
      T mi = M[i] + b1w * (gi - M[i]);                                                 \
      T vi = V[i] * b2 + b2w * gi * gi;                                                \
      M[i] = mi;                                                                       \
      V[i] = vi;                                                                       \
      if (VM) {                                                                        \
        if (vi > VM[i]) VM[i] = vi;                                                    \
        vi = VM[i];                                                                    \
      }                                                                                \
      T denom = ADAM_SQRT(vi) * rbc2s + eps;                                           \
      P[i] = pi - step_size * (mi / denom);                                            \
    }                                                                                  \
  }

/* The fp32 update without amsgrad (every ZeRO shard's step), vectorised: the
   arithmetic of ADAM(float) above, in the same order and precision (all of
   it in float32, as PyTorch's and the CUDA kernel's; the bias correction's
   square root as a reciprocal, as PyTorch's CUDA division by a scalar), so
   the results are the same bits. (The denominator was in double: its sqrt
   and two divisions on doubles made the step bound by the divider, 670
   Mparams/s on one thread.) The loop is compiled for AVX-512, AVX2 and
   plain x86-64, the best chosen when the library loads; the Makefile builds
   this file without math-errno, so that sqrt vectorises (its argument is
   never negative), and ISO C's default of no contraction keeps a multiply
   and an add from fusing into one rounding on the FMA targets. */
typedef struct {
  float b1w, b2, b2w, wd, decay, step_size, rbc2s, eps;
  bool l2, dec;
} adam_f32_k;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define ADAM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ADAM_CLONES
#endif

ADAM_CLONES
static void adam_f32(float *restrict P, const float *restrict G, float *restrict M, float *restrict V, int64_t n,
                     const adam_f32_k *k) {
  const float b1w = k->b1w, b2 = k->b2, b2w = k->b2w, wd = k->wd, decay = k->decay, step_size = k->step_size;
  const float rbc2s = k->rbc2s, eps = k->eps;
  const bool l2 = k->l2, dec = k->dec;
  for (int64_t i = 0; i < n; i++) {
    float gi = G[i], pi = P[i];
    if (l2) gi = gi + wd * pi;
    if (dec) pi = pi * decay;
    float mi = M[i] + b1w * (gi - M[i]);
    float vi = V[i] * b2 + b2w * gi * gi;
    M[i] = mi;
    V[i] = vi;
    float denom = sqrtf(vi) * rbc2s + eps;
    P[i] = pi - step_size * (mi / denom);
  }
}

/* Splits [0, n) over the threads in cache-line multiples (each thread one
   contiguous run, so each streams its own part of the four arrays). */
static void adam_f32_threads(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v, int64_t n,
                             const adam_f32_k *k) {
  float *P = (float *)tensor_ptr(p), *M = (float *)tensor_ptr(m), *V = (float *)tensor_ptr(v);
  const float *G = (const float *)tensor_ptr(g);
  _Pragma("omp parallel if (n >= CPU_GRAIN)") {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t per = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
    int64_t lo = per * t, hi = lo + per < n ? lo + per : n;
    if (lo < hi) adam_f32(P + lo, G + lo, M + lo, V + lo, hi - lo, k);
  }
}

zorch_status cpu_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                      zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  if (o->no_bias_correction) bc1 = bc2 = 1;
  if (p->dtype == ZORCH_F32 && !vmax) {
    adam_f32_k k = {(float)(1 - o->beta1), (float)o->beta2, (float)(1 - o->beta2), (float)o->weight_decay,
                    (float)(1 - o->lr * o->weight_decay), (float)(o->lr / bc1), 1.0f / (float)sqrt(bc2), (float)o->eps,
                    o->weight_decay != 0 && !o->decoupled, o->weight_decay != 0 && o->decoupled};
    adam_f32_threads(p, g, m, v, n, &k);
    return ZORCH_OK;
  }
  CPU_FLOAT_DISPATCH(p->dtype, "adam_step", ADAM);
  return ZORCH_OK;
}

#define SGD(T)                                                                         \
  {                                                                                    \
    T *P = (T *)tensor_ptr(p), *B = buf ? (T *)tensor_ptr(buf) : NULL;                 \
    const T *G = (const T *)tensor_ptr(g);                                             \
    const T lr = (T)o->lr, wd = (T)o->weight_decay, mom = (T)o->momentum;              \
    const T damp = (T)(1 - o->dampening);                                              \
    _Pragma("omp parallel for if (n >= CPU_GRAIN)")                                    \
    for (int64_t i = 0; i < n; i++) {                                                  \
      T d = G[i];                                                                      \
      if (o->weight_decay != 0) d = d + wd * P[i];                                     \
      if (B) {                                                                         \
        T bi = first ? d : B[i] * mom + damp * d;                                      \
        B[i] = bi;                                                                     \
        d = o->nesterov ? d + mom * bi : bi;                                           \
      }                                                                                \
      P[i] = P[i] - lr * d;                                                            \
    }                                                                                  \
  }

zorch_status cpu_sgd(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *buf, bool first,
                     const zorch_sgd_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  CPU_FLOAT_DISPATCH(p->dtype, "sgd_step", SGD);
  return ZORCH_OK;
}
