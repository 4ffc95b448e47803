/* optim.c: checks for the fused optimizer kernels, which update parameters in
   place outside autograd. */
#include "ops.h"

static zorch_status check_state(const char *op, const char *name, const zorch_tensor *p,
                                const zorch_tensor *t) {
  char s1[ERR_SHAPE_BUF], s2[ERR_SHAPE_BUF];
  if (!t) return err_set(ZORCH_ERR_ARG, "%s: %s is NULL", op, name);
  if (!tensor_same_shape(p, t) || t->dtype != p->dtype || !zorch_tensor_is_contiguous(t))
    return err_set(ZORCH_ERR_SHAPE, "%s: %s %s %s must match the parameter %s %s and be contiguous",
                   op, name, zorch_dtype_name(t->dtype), SHAPE(t, s1), zorch_dtype_name(p->dtype),
                   SHAPE(p, s2));
  return check_same_device(op, p, t);
}

zorch_status zorch_adam_step(zorch_tensor *param, zorch_tensor *grad, zorch_tensor *m,
                             zorch_tensor *v, zorch_tensor *max_v, int64_t step,
                             const zorch_adam_opts *o) {
  const char *op = "adam_step";
  if (!param || !o) return err_set(ZORCH_ERR_ARG, "%s: param and options are required", op);
  if (!zorch_tensor_is_contiguous(param))
    return err_set(ZORCH_ERR_ARG, "%s: param must be contiguous", op);
  if (check_state(op, "grad", param, grad) || check_state(op, "exp_avg", param, m) ||
      check_state(op, "exp_avg_sq", param, v) ||
      (o->amsgrad && check_state(op, "max_exp_avg_sq", param, max_v)))
    return zorch_last_status();
  if (step < 1) return err_set(ZORCH_ERR_ARG, "%s: step must be >= 1, got %lld", op, (long long)step);
  if (!(o->lr >= 0) || !(o->eps >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) ||
      !(o->beta2 >= 0 && o->beta2 < 1) || !(o->weight_decay >= 0))
    return err_set(ZORCH_ERR_ARG, "%s: invalid hyperparameters (lr %g, betas (%g, %g), eps %g, "
                   "weight_decay %g)", op, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
  if (tensor_mark_written(op, param) || tensor_mark_written(op, m) || tensor_mark_written(op, v) ||
      (o->amsgrad && tensor_mark_written(op, max_v)))
    return zorch_last_status();
  return backend_of(param)->adam(param, grad, m, v, o->amsgrad ? max_v : NULL, step, o);
}

zorch_status zorch_sgd_step(zorch_tensor *param, zorch_tensor *grad, zorch_tensor *buf,
                            bool first_step, const zorch_sgd_opts *o) {
  const char *op = "sgd_step";
  if (!param || !o) return err_set(ZORCH_ERR_ARG, "%s: param and options are required", op);
  if (!zorch_tensor_is_contiguous(param))
    return err_set(ZORCH_ERR_ARG, "%s: param must be contiguous", op);
  if (check_state(op, "grad", param, grad) ||
      (o->momentum != 0 && check_state(op, "momentum_buffer", param, buf)))
    return zorch_last_status();
  if (!(o->lr >= 0) || !(o->momentum >= 0) || !(o->weight_decay >= 0) ||
      (o->nesterov && (o->momentum <= 0 || o->dampening != 0)))
    return err_set(ZORCH_ERR_ARG, "%s: invalid hyperparameters (lr %g, momentum %g, dampening %g, "
                   "weight_decay %g%s)", op, o->lr, o->momentum, o->dampening, o->weight_decay,
                   o->nesterov ? ", nesterov needs momentum > 0 and dampening 0" : "");
  if (tensor_mark_written(op, param) || (o->momentum != 0 && tensor_mark_written(op, buf)))
    return zorch_last_status();
  return backend_of(param)->sgd(param, grad, o->momentum != 0 ? buf : NULL, first_step, o);
}
