// optim.cu: the fused Adam/AdamW and SGD updates, one thread per element.
#include "cuda.h"

// PyTorch's single-tensor formulas, scalars rounded to the parameter dtype first
// (the CPU's: the bias correction's square root as a reciprocal)
template <typename T>
__global__ void k_adam(T *P, const T *G, T *M, T *V, T *VM, int64_t n, T b1w, T b2, T b2w, T wd, T decay, T step_size,
                       T rbc2s, T eps, int l2, int dec) {
  FOR(i, n) {
    T gi = G[i], pi = P[i];
    if (l2) gi = gi + wd * pi;
    if (dec) pi = pi * decay;
    T mi = M[i] + b1w * (gi - M[i]);
    T vi = V[i] * b2 + b2w * gi * gi;
    M[i] = mi;
    V[i] = vi;
    if (VM) {
      if (vi > VM[i]) VM[i] = vi;
      vi = VM[i];
    }
    T denom = sqrt(vi) * rbc2s + eps;
    P[i] = pi - step_size * (mi / denom);
  }
}

zorch_status cuda_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                              zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o) {
  int dev = cu_dev(p);
  int64_t n = shape_numel(p->ndim, p->shape);
  if (!n) return ZORCH_OK;
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  if (o->no_bias_correction) bc1 = bc2 = 1;
  int l2 = o->weight_decay != 0 && !o->decoupled, dec = o->weight_decay != 0 && o->decoupled;
  CU_REAL(p->dtype, "adam_step",
          (CU_LAUNCH(ON(n, dev), k_adam<T>)((T *)tensor_ptr(p), (const T *)tensor_ptr(g), (T *)tensor_ptr(m), (T *)tensor_ptr(v),
                                  vmax ? (T *)tensor_ptr(vmax) : nullptr, n, (T)(1 - o->beta1), (T)o->beta2,
                                  (T)(1 - o->beta2), (T)o->weight_decay, (T)(1 - o->lr * o->weight_decay),
                                  (T)(o->lr / bc1), (T)1 / (T)sqrt(bc2), (T)o->eps, l2, dec)));
}

template <typename T>
__global__ void k_sgd(T *P, const T *G, T *B, int64_t n, T lr, T wd, T mom, T damp, int first, int nesterov, int has_wd) {
  FOR(i, n) {
    T d = G[i];
    if (has_wd) d = d + wd * P[i];
    if (B) {
      T bi = first ? d : B[i] * mom + damp * d;
      B[i] = bi;
      d = nesterov ? d + mom * bi : bi;
    }
    P[i] = P[i] - lr * d;
  }
}

zorch_status cuda_sgd(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *buf, bool first,
                             const zorch_sgd_opts *o) {
  int dev = cu_dev(p);
  int64_t n = shape_numel(p->ndim, p->shape);
  if (!n) return ZORCH_OK;
  CU_REAL(p->dtype, "sgd_step",
          (CU_LAUNCH(ON(n, dev), k_sgd<T>)((T *)tensor_ptr(p), (const T *)tensor_ptr(g), buf ? (T *)tensor_ptr(buf) : nullptr, n,
                                 (T)o->lr, (T)o->weight_decay, (T)o->momentum, (T)(1 - o->dampening), first,
                                 o->nesterov, o->weight_decay != 0)));
}

