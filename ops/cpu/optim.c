/* optim.c: fused optimizer updates on the CPU: one pass over each parameter,
   arithmetic in the parameter's dtype with the scalars rounded to it first, as
   PyTorch's single-tensor Adam and SGD do. */
#include <math.h>
#include <stdbool.h>

#include "cpu.h"

#define ADAM(T)                                                                        \
  {                                                                                    \
    T *P = (T *)tensor_ptr(p), *M = (T *)tensor_ptr(m), *V = (T *)tensor_ptr(v);       \
    T *VM = vmax ? (T *)tensor_ptr(vmax) : NULL;                                       \
    const T *G = (const T *)tensor_ptr(g);                                             \
    const T b1w = (T)(1 - o->beta1), b2 = (T)o->beta2, b2w = (T)(1 - o->beta2);        \
    const T wd = (T)o->weight_decay, decay = (T)(1 - o->lr * o->weight_decay);         \
    const T step_size = (T)(o->lr / bc1), bc2s = (T)sqrt(bc2), eps = (T)o->eps;        \
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
      T denom = sqrt(vi) / bc2s + eps;                                                 \
      P[i] = pi - step_size * (mi / denom);                                            \
    }                                                                                  \
  }

/* float32 without amsgrad (the usual case: GPT-2's 124M-parameter flat master
   buffer) is memory-bound once vectorised. The generic loop above is not: its
   per-element branches and libm's double sqrt (errno) keep it scalar. This is
   the same arithmetic, bit for bit (the denominator in double rounded to
   float), in branch-free chunks of a fixed length the compiler vectorises; the
   weight-decay form is chosen once per chunk, outside the element loop. */
#define ADAM_CHUNK 4096
typedef struct {
  float b1w, b2, b2w, wd, decay, step_size, bc2s, eps;
  bool l2, dec;
} adam_f32_k;

CPU_CLONES static void
adam_f32_chunk(float *restrict P, const float *restrict G, float *restrict M, float *restrict V, int64_t n,
               const adam_f32_k *k) {
  const float b1w = k->b1w, b2 = k->b2, b2w = k->b2w, wd = k->wd, decay = k->decay;
  const float step_size = k->step_size, eps = k->eps;
  const double bc2s = k->bc2s;
  /* the three weight-decay forms as separate loops, each without a branch */
#define ADAM_F32_LOOP(GI, PI)                                               \
  for (int64_t i = 0; i < n; i++) {                                         \
    float gi = (GI), pi = (PI);                                             \
    float mi = M[i] + b1w * (gi - M[i]);                                    \
    float vi = V[i] * b2 + b2w * gi * gi;                                   \
    M[i] = mi;                                                              \
    V[i] = vi;                                                              \
    float denom = (float)(sqrt((double)vi) / bc2s + (double)eps);           \
    P[i] = pi - step_size * (mi / denom);                                   \
  }
  if (k->l2) ADAM_F32_LOOP(G[i] + wd * P[i], P[i])
  else if (k->dec) ADAM_F32_LOOP(G[i], P[i] * decay)
  else ADAM_F32_LOOP(G[i], P[i])
#undef ADAM_F32_LOOP
}

static void adam_f32(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v, int64_t n,
                     double bc1, double bc2, const zorch_adam_opts *o) {
  adam_f32_k k = {(float)(1 - o->beta1), (float)o->beta2, (float)(1 - o->beta2), (float)o->weight_decay,
                  (float)(1 - o->lr * o->weight_decay), (float)(o->lr / bc1), (float)sqrt(bc2), (float)o->eps,
                  o->weight_decay != 0 && !o->decoupled, o->weight_decay != 0 && o->decoupled};
  float *P = (float *)tensor_ptr(p), *M = (float *)tensor_ptr(m), *V = (float *)tensor_ptr(v);
  const float *G = (const float *)tensor_ptr(g);
  int64_t chunks = (n + ADAM_CHUNK - 1) / ADAM_CHUNK;
#pragma omp parallel for if (n >= CPU_GRAIN)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t lo = c * ADAM_CHUNK, len = n - lo < ADAM_CHUNK ? n - lo : ADAM_CHUNK;
    adam_f32_chunk(P + lo, G + lo, M + lo, V + lo, len, &k);
  }
}

zorch_status cpu_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                      zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  if (o->no_bias_correction) bc1 = bc2 = 1;
  if (p->dtype == ZORCH_F32 && !vmax) {
    adam_f32(p, g, m, v, n, bc1, bc2, o);
    return ZORCH_OK;
  }
  switch (p->dtype) {
    case ZORCH_F32: ADAM(float) return ZORCH_OK;
    case ZORCH_F64: ADAM(double) return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "adam_step: no CPU kernel for dtype %s",
                            zorch_dtype_name(p->dtype));
  }
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
  switch (p->dtype) {
    case ZORCH_F32: SGD(float) return ZORCH_OK;
    case ZORCH_F64: SGD(double) return ZORCH_OK;
    default: return err_set(ZORCH_ERR_DTYPE, "sgd_step: no CPU kernel for dtype %s",
                            zorch_dtype_name(p->dtype));
  }
}
