/* optim.c: fused optimizer updates on the CPU: one pass over each parameter,
   arithmetic in the parameter's dtype with the scalars rounded to it first, as
   PyTorch's single-tensor Adam and SGD do. */
#include <math.h>

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

zorch_status cpu_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                      zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o) {
  int64_t n = shape_numel(p->ndim, p->shape);
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  if (o->no_bias_correction) bc1 = bc2 = 1;
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
