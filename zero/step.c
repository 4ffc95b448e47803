/* step.c: the public engine (include/zorch_zero.h): its lifecycle, backward
   and the training step over the partition manager (engine.h), with the loss
   scaler and the fused optimizers' state. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/def/ops.h"
#include "engine.h"
#include "zorch_zero.h"

struct zorch_zero {
  zero_engine *z;
  zorch_zero_options o;
  zero_comm *data;
  int n;
  int64_t *numel; /* of each parameter */
  double *weight; /* of each parameter in the norm; NULL: all 1 */
  zero_comm **ncomms;
  int nncomms;
  zero_norm_run *runs; /* the weighted runs of the target, made from the weights */
  int nruns;
  zorch_zero_scaler s;
  bool dynamic;
  int64_t micro, pending, steps, updates;
  zorch_tensor *m, *v, *maxv, *mom; /* fused optimizers' state, made at the first update */
  zorch_tensor *host_target, *host_grad;
  bool host_bucketed;
};

/* ---- communicators ---- */
zorch_zero_comm *zorch_zero_world(void) { return comm_get(); }
zorch_zero_comm *zorch_zero_local(void) { return comm_local(); }
int zorch_zero_comm_rank(const zorch_zero_comm *c) { return c ? c->rank : 0; }
int zorch_zero_comm_size(const zorch_zero_comm *c) { return c ? c->world : 1; }
zorch_status zorch_zero_comm_split(zorch_zero_comm *parent, int color, int key, zorch_zero_comm **out) {
  if (!parent || !out) return err_set(ZORCH_ERR_ARG, "zorch_zero_comm_split: NULL argument");
  return comm_split(parent, color, key, out);
}
zorch_status zorch_zero_allreduce(zorch_zero_comm *c, zorch_tensor *t) {
  if (!c || !t) return err_set(ZORCH_ERR_ARG, "zorch_zero_allreduce: NULL argument");
  return comm_allreduce(c, t, false);
}
zorch_status zorch_zero_allreduce_max(zorch_zero_comm *c, zorch_tensor *t) {
  if (!c || !t) return err_set(ZORCH_ERR_ARG, "zorch_zero_allreduce_max: NULL argument");
  return comm_allreduce(c, t, true);
}
const char *zorch_zero_comm_backend(const zorch_zero_comm *c) { return c ? c->backend : "local"; }
void zorch_zero_set_label(const char *label) { comm_set_label(label); }
void zorch_zero_set_timeout(double seconds) { comm_set_timeout(seconds); }
void zorch_zero_finalize(void) { comm_finalize(); }

/* ---- options and lifecycle ---- */
void zorch_zero_options_init(zorch_zero_options *o) {
#define DEFAULT(KIND, type, field, name, def, lo, hi, want, doc) .field = def,
  *o = (zorch_zero_options){ZORCH_ZERO_OPTIONS(DEFAULT)};
#undef DEFAULT
}

/* The schema's ranges (zorch_zero_options.h); the dtype by its values. */
#define CHECK_INT(f, lo, hi, want) CHECK_RANGE(f, lo, hi, want)
#define CHECK_INT64(f, lo, hi, want) CHECK_RANGE(f, lo, hi, want)
#define CHECK_DOUBLE(f, lo, hi, want) CHECK_RANGE(f, lo, hi, want)
#define CHECK_BOOL(f, lo, hi, want)
#define CHECK_DTYPE(f, lo, hi, want)
#define CHECK_RANGE(f, lo, hi, want)                                                                   \
  if (!((double)o->f >= (lo) && (double)o->f <= (hi)))                                                 \
    return err_set(ZORCH_ERR_ARG, "zorch_zero: " #f " must be %s, got %g", want, (double)o->f);
#define CHECK(KIND, type, field, name, def, lo, hi, want, doc) CHECK_##KIND(field, lo, hi, want)
static zorch_status check_options(const zorch_zero_options *o) {
  ZORCH_ZERO_OPTIONS(CHECK)
  if (o->dtype != ZORCH_F32 && o->dtype != ZORCH_BF16 && o->dtype != ZORCH_F16)
    return err_set(ZORCH_ERR_ARG, "zorch_zero: dtype must be float32, bfloat16 or float16, got %s",
                   zorch_dtype_name(o->dtype));
  if (o->ngroups < 0 || (o->ngroups > 0 && !o->group_sizes))
    return err_set(ZORCH_ERR_ARG, "zorch_zero: ngroups %d without group_sizes", o->ngroups);
  return ZORCH_OK;
}

static void scaler_reset(zorch_zero *e) {
  bool fp16 = e->o.dtype == ZORCH_F16;
  e->s = (zorch_zero_scaler){.scale = !fp16 ? 1 : e->o.loss_scale > 0 ? e->o.loss_scale : ldexp(1.0, e->o.initial_scale_power),
                             .hysteresis = e->o.hysteresis, .attempts = 0, .last_overflow = -1, .skipped = 0};
  e->dynamic = fp16 && e->o.loss_scale == 0;
}

zorch_status zorch_zero_new(const zorch_zero_options *o, int n, zorch_tensor *const *params, zorch_zero **out) {
  if (!o || !params || !out || n < 1) return err_set(ZORCH_ERR_ARG, "zorch_zero_new: NULL argument or no parameters");
  *out = NULL;
  zorch_status st = check_options(o);
  if (st) return st;
  for (int i = 0; i < n; i++)
    if (!params[i]) return err_set(ZORCH_ERR_ARG, "zorch_zero_new: parameter %d is NULL", i + 1);
  zero_comm *data = o->data ? o->data : comm_get();
  if (!data) return zorch_last_status();
  zorch_zero *e = calloc(1, sizeof *e);
  if (!e) return err_set(ZORCH_ERR_OOM, "zorch_zero_new: out of memory");
  e->o = *o;
  e->data = data;
  e->n = n;
  e->numel = calloc((size_t)n, sizeof *e->numel);
  int *gs = o->ngroups ? malloc(sizeof *gs * (size_t)o->ngroups) : NULL;
  if (!e->numel || (o->ngroups && !gs)) {
    free(gs);
    zorch_zero_free(e);
    return err_set(ZORCH_ERR_OOM, "zorch_zero_new: out of memory");
  }
  if (gs) memcpy(gs, o->group_sizes, sizeof *gs * (size_t)o->ngroups);
  e->o.group_sizes = gs;
  for (int i = 0; i < n; i++) e->numel[i] = zorch_tensor_numel(params[i]);
  zero_opts zo = {.stage = o->stage, .bucket = o->bucket, .dtype = o->dtype, .ngroups = o->ngroups, .group_sizes = gs,
                  .overlap = o->overlap, .max_reuse_distance = o->max_reuse_distance,
                  .prefetch_bucket_size = o->prefetch_bucket_size, .max_live_parameters = o->max_live_parameters,
                  .param_dir = o->param_dir};
  if (!(e->z = zero_engine_new(data, &zo, n, params))) {
    st = zorch_last_status();
    zorch_zero_free(e);
    return st;
  }
  if (o->model && (st = zorch_zero_add_norm_comm(e, o->model))) {
    zorch_zero_free(e);
    return st;
  }
  scaler_reset(e);
  *out = e;
  return ZORCH_OK;
}

void zorch_zero_free(zorch_zero *e) {
  if (!e) return;
  zero_engine_free(e->z);
  OP_FREE(e->m, e->v, e->maxv, e->mom, e->host_target, e->host_grad);
  free((void *)e->o.group_sizes);
  free(e->numel);
  free(e->weight);
  free(e->ncomms);
  free(e->runs);
  free(e);
}

void zorch_zero_get_geometry(const zorch_zero *e, zorch_zero_geometry *g) {
  zero_memory m;
  zero_engine_memory(e->z, &m);
  g->rank = e->data->rank;
  g->world = e->data->world;
  g->numel = m.numel;
  g->shard = m.shard;
  g->padded = m.shard * e->data->world;
  g->lo = e->o.stage == 0 ? 0 : (int64_t)e->data->rank * m.shard;
  g->len = e->o.stage == 0 ? g->padded : m.shard;
}

zorch_tensor *zorch_zero_target(zorch_zero *e) { return zero_engine_target(e->z); }

/* The weighted runs of the target: each parameter's piece in it, neighbours
   of one weight merged, weight 0 left out. */
static zorch_status make_runs(zorch_zero *e) {
  zorch_zero_geometry g;
  zorch_zero_get_geometry(e, &g);
  free(e->runs);
  e->runs = malloc(sizeof *e->runs * (size_t)e->n);
  e->nruns = 0;
  if (!e->runs) return err_set(ZORCH_ERR_OOM, "zorch_zero: out of memory");
  int64_t off = 0;
  for (int i = 0; i < e->n; i++) {
    int64_t a = off > g.lo ? off : g.lo, b = off + e->numel[i] < g.lo + g.len ? off + e->numel[i] : g.lo + g.len;
    double w = e->weight[i];
    if (a < b && w != 0) {
      zero_norm_run *last = e->nruns ? &e->runs[e->nruns - 1] : NULL;
      if (last && last->w == w && last->lo + last->len == a - g.lo) last->len += b - a;
      else e->runs[e->nruns++] = (zero_norm_run){a - g.lo, b - a, w};
    }
    off += e->numel[i];
  }
  return ZORCH_OK;
}

zorch_status zorch_zero_set_norm_weights(zorch_zero *e, const double *weights) {
  if (!e) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_norm_weights: NULL engine");
  if (!weights) {
    free(e->weight), e->weight = NULL;
    free(e->runs), e->runs = NULL, e->nruns = 0;
    return ZORCH_OK;
  }
  for (int i = 0; i < e->n; i++)
    if (!(weights[i] >= 0) || !isfinite(weights[i]))
      return err_set(ZORCH_ERR_ARG, "zorch_zero_set_norm_weights: weight %d is %g, not a finite number >= 0", i + 1,
                     weights[i]);
  if (!e->weight && !(e->weight = malloc(sizeof *e->weight * (size_t)e->n)))
    return err_set(ZORCH_ERR_OOM, "zorch_zero: out of memory");
  memcpy(e->weight, weights, sizeof *e->weight * (size_t)e->n);
  return make_runs(e);
}

zorch_status zorch_zero_add_norm_comm(zorch_zero *e, zorch_zero_comm *c) {
  if (!e || !c) return err_set(ZORCH_ERR_ARG, "zorch_zero_add_norm_comm: NULL argument");
  for (int k = 0; k < e->nncomms; k++)
    if (e->ncomms[k] == c) return ZORCH_OK;
  zero_comm **cs = realloc(e->ncomms, sizeof *cs * (size_t)(e->nncomms + 1));
  if (!cs) return err_set(ZORCH_ERR_OOM, "zorch_zero: out of memory");
  e->ncomms = cs;
  e->ncomms[e->nncomms++] = c;
  return ZORCH_OK;
}

/* ---- backward ---- */
zorch_status zorch_zero_zero_grad(zorch_zero *e) {
  if (!e) return err_set(ZORCH_ERR_ARG, "zorch_zero_zero_grad: NULL engine");
  return zero_engine_zero_grad(e->z);
}

/* t's backward from grad (NULL: t has one element) with the engine's
   buckets around it. */
static zorch_status run_backward(zorch_zero *e, zorch_tensor *t, zorch_tensor *grad) {
  e->micro++, e->pending++;
  zorch_status st = zero_engine_begin_backward(e->z);
  if (!st) st = zorch_backward(t, grad, false);
  if (!st) st = zero_engine_end_backward(e->z);
  return st;
}

zorch_status zorch_zero_backward(zorch_zero *e, zorch_tensor *loss) {
  if (!e || !loss) return err_set(ZORCH_ERR_ARG, "zorch_zero_backward: NULL argument");
  if (zorch_tensor_numel(loss) != 1)
    return err_set(ZORCH_ERR_SHAPE, "zorch_zero_backward: the loss must have one element, got %" PRId64,
                   zorch_tensor_numel(loss));
  /* the same products as a script's loss * (1 / k) * scale */
  zorch_tensor *a = e->o.accumulation > 1 ? zorch_mul_scalar(loss, 1.0 / e->o.accumulation) : zorch_tensor_retain(loss);
  zorch_tensor *b = a && e->s.scale != 1 ? zorch_mul_scalar(a, e->s.scale) : zorch_tensor_retain(a);
  zorch_status st = b ? run_backward(e, b, NULL) : zorch_last_status();
  OP_FREE(a, b);
  return st;
}

zorch_status zorch_zero_backward_from(zorch_zero *e, zorch_tensor *t, zorch_tensor *grad) {
  if (!e || !t || !grad) return err_set(ZORCH_ERR_ARG, "zorch_zero_backward_from: NULL argument");
  zorch_tensor *g = e->s.scale != 1 ? zorch_mul_scalar(grad, e->s.scale) : zorch_tensor_retain(grad);
  zorch_status st = g ? run_backward(e, t, g) : zorch_last_status();
  zorch_tensor_free(g);
  return st;
}

/* ---- the loss scaler: DeepSpeed's update_scale ---- */
static void update_scale(zorch_zero *e, bool overflow) {
  zorch_zero_scaler *s = &e->s;
  const zorch_zero_options *o = &e->o;
  if (overflow) s->skipped++;
  if (e->dynamic) {
    if (overflow) {
      if (o->hysteresis == 1 || s->hysteresis == 1) s->scale = fmax(s->scale / 2, o->min_loss_scale);
      else s->hysteresis--;
      s->last_overflow = s->attempts;
    } else {
      if (o->consecutive_hysteresis) s->hysteresis = o->hysteresis;
      if ((s->attempts - s->last_overflow) % o->loss_scale_window == 0) {
        if (!o->consecutive_hysteresis) s->hysteresis = o->hysteresis;
        s->scale *= 2;
      }
    }
  }
  s->attempts++;
}

void zorch_zero_get_scaler(const zorch_zero *e, zorch_zero_scaler *s) { *s = e->s; }
zorch_status zorch_zero_set_scaler(zorch_zero *e, const zorch_zero_scaler *s) {
  if (!e || !s) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_scaler: NULL argument");
  if (!(s->scale > 0) || !isfinite(s->scale) || s->hysteresis < 0 || s->attempts < 0)
    return err_set(ZORCH_ERR_ARG, "zorch_zero_set_scaler: scale %g, hysteresis %d, attempts %" PRId64 " out of range",
                   s->scale, s->hysteresis, s->attempts);
  e->s = *s;
  return ZORCH_OK;
}
void zorch_zero_counts(const zorch_zero *e, int64_t *micro, int64_t *steps) {
  if (micro) *micro = e->micro;
  if (steps) *steps = e->steps;
}
int64_t zorch_zero_pending(const zorch_zero *e) { return e->pending; }

zorch_status zorch_zero_set_host(zorch_zero *e, zorch_tensor *host_target, zorch_tensor *host_grad, bool bucketed) {
  if (!e) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_host: NULL engine");
  if (!host_target != !host_grad) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_host: give both tensors or neither");
  zorch_zero_geometry g;
  zorch_zero_get_geometry(e, &g);
  if (host_target && (zorch_tensor_numel(host_target) != g.len || zorch_tensor_numel(host_grad) != g.len))
    return err_set(ZORCH_ERR_SHAPE, "zorch_zero_set_host: the host tensors must have %" PRId64 " elements", g.len);
  if (bucketed && host_grad) {
    zorch_status st = zero_engine_set_host_grad(e->z, host_grad);
    if (st) return st;
  }
  OP_FREE(e->host_target, e->host_grad);
  e->host_target = host_target ? zorch_tensor_retain(host_target) : NULL;
  e->host_grad = host_grad ? zorch_tensor_retain(host_grad) : NULL;
  e->host_bucketed = bucketed;
  return ZORCH_OK;
}

/* ---- the step ---- */
static zorch_tensor *zeros_like(zorch_tensor *t) {
  return zorch_zeros(zorch_tensor_ndim(t), zorch_tensor_shape(t), zorch_tensor_dtype(t), zorch_tensor_device(t));
}

static zorch_status fused_update(zorch_zero *e, const zorch_zero_update *u, zorch_tensor *target, zorch_tensor *grad,
                                 double grad_scale) {
  if (grad_scale != 1.0)
    return err_set(ZORCH_ERR_STATE, "zorch_zero_step: the gradient lives in the parameter file: a callback update "
                                    "streams it (the fused updates run on gradients in memory)");
  if (u->kind == ZORCH_ZERO_ADAM) {
    if (!e->m && (!(e->m = zeros_like(target)) || !(e->v = zeros_like(target)))) return zorch_last_status();
    if (u->adam.amsgrad && !e->maxv && !(e->maxv = zeros_like(target))) return zorch_last_status();
    e->updates++;
    return zorch_adam_step(target, grad, e->m, e->v, u->adam.amsgrad ? e->maxv : NULL, e->updates, &u->adam);
  }
  bool first = false;
  if (u->sgd.momentum != 0 && !e->mom) {
    if (!(e->mom = zeros_like(target))) return zorch_last_status();
    first = true;
  }
  e->updates++;
  return zorch_sgd_step(target, grad, u->sgd.momentum != 0 ? e->mom : NULL, first, &u->sgd);
}

zorch_status zorch_zero_step(zorch_zero *e, const zorch_zero_update *u, zorch_zero_step_info *info) {
  zorch_zero_step_info dummy;
  if (!info) info = &dummy;
  memset(info, 0, sizeof *info);
  if (!e || !u) return err_set(ZORCH_ERR_ARG, "zorch_zero_step: NULL argument");
  info->loss_scale = e->s.scale;
  info->steps = e->steps;
  if (u->kind != ZORCH_ZERO_ADAM && u->kind != ZORCH_ZERO_SGD && (u->kind != ZORCH_ZERO_CALLBACK || !u->fn))
    return err_set(ZORCH_ERR_ARG, "zorch_zero_step: the update must be ZORCH_ZERO_ADAM, ZORCH_ZERO_SGD or a callback");
  if (e->pending == 0)
    return err_set(ZORCH_ERR_STATE, "zorch_zero_step: no zorch_zero_backward since the last step");
  if (e->micro % e->o.accumulation != 0) return ZORCH_OK;
  e->pending = 0;
  double t0 = comm_clock();
  bool sharded, overflow = false;
  zorch_tensor *grad = zero_engine_reduced_grad(e->z, &sharded);
  if (!grad) return zorch_last_status();
  zero_norm nx = {.weighted = e->weight != NULL, .nruns = e->nruns, .runs = e->runs, .ncomms = e->nncomms,
                  .comms = e->ncomms};
  zorch_status st = zero_engine_clip(e->z, grad, sharded, e->o.clip, e->s.scale, &nx, &info->norm, &overflow);
  if (st) goto done;
  int64_t p_off, g_off;
  double grad_scale = zero_engine_param_file(e->z, &p_off, &g_off) >= 0 ? zero_engine_take_grad_scale(e->z) : 1.0;
  double t1 = comm_clock();
  info->reduce_s = t1 - t0;
  overflow = overflow && (e->o.dtype == ZORCH_F16 || e->o.check_grad_overflow);
  update_scale(e, overflow);
  info->loss_scale = e->s.scale;
  if (overflow) {
    info->overflow = true;
    st = zero_engine_release(e->z); /* (stage 3; the parameters did not change) */
    goto done;
  }
  zorch_tensor *target = zero_engine_target(e->z), *g = grad;
  if (e->host_target) { /* offload on a GPU rank: the clipped gradient on the host copy's side */
    st = e->host_bucketed ? zero_engine_host_grad_finish(e->z) : zorch_copy_(e->host_grad, grad);
    if (st) goto done;
    target = e->host_target, g = e->host_grad;
  }
  if (u->kind == ZORCH_ZERO_CALLBACK) {
    zorch_zero_update_args a = {.target = target, .grad = g, .grad_scale = grad_scale, .step = e->updates + 1};
    if (!(st = u->fn(&a, u->ud))) e->updates++;
  } else {
    st = fused_update(e, u, target, g, grad_scale);
  }
  if (!st && e->host_target) st = zorch_copy_(zero_engine_target(e->z), e->host_target);
  if (!st) st = zero_engine_after_update(e->z);
  if (st) goto done;
  e->steps++;
  info->stepped = true;
  info->steps = e->steps;
  info->update_s = comm_clock() - t1;
done:
  zorch_tensor_free(grad);
  return st;
}

zorch_status zorch_zero_set_local_grads(zorch_zero *e, bool on) {
  if (!e) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_local_grads: NULL engine");
  if (on && e->o.stage != 0)
    return err_set(ZORCH_ERR_ARG, "zorch_zero_set_local_grads: only at ZeRO stage 0 (the gradient is whole on every rank)");
  zero_engine_set_local_grads(e->z, on);
  return ZORCH_OK;
}

/* ---- checkpoints ---- */
#define CK_META 12
zorch_status zorch_zero_save(zorch_zero *e, const char *path) {
  if (!e || !path) return err_set(ZORCH_ERR_ARG, "zorch_zero_save: NULL argument");
  zorch_zero_geometry g;
  zorch_zero_get_geometry(e, &g);
  const char *names[4] = {"target"};
  zorch_tensor *ts[4] = {zero_engine_target(e->z)};
  int n = 1;
  if (e->m) names[n] = "exp_avg", ts[n++] = e->m, names[n] = "exp_avg_sq", ts[n++] = e->v;
  if (e->maxv) names[n] = "max_exp_avg_sq", ts[n++] = e->maxv;
  if (e->mom) names[n] = "momentum", ts[n++] = e->mom;
  char vals[CK_META][32];
  const char *keys[CK_META] = {"stage", "rank", "world", "numel", "micro", "steps", "updates", "scale",
                               "hysteresis", "attempts", "last_overflow", "skipped"};
  snprintf(vals[0], 32, "%d", e->o.stage);
  snprintf(vals[1], 32, "%d", g.rank);
  snprintf(vals[2], 32, "%d", g.world);
  snprintf(vals[3], 32, "%" PRId64, g.numel);
  snprintf(vals[4], 32, "%" PRId64, e->micro);
  snprintf(vals[5], 32, "%" PRId64, e->steps);
  snprintf(vals[6], 32, "%" PRId64, e->updates);
  snprintf(vals[7], 32, "%a", e->s.scale); /* (hexadecimal: exact) */
  snprintf(vals[8], 32, "%d", e->s.hysteresis);
  snprintf(vals[9], 32, "%" PRId64, e->s.attempts);
  snprintf(vals[10], 32, "%" PRId64, e->s.last_overflow);
  snprintf(vals[11], 32, "%" PRId64, e->s.skipped);
  const char *vp[CK_META];
  for (int k = 0; k < CK_META; k++) vp[k] = vals[k];
  return zorch_save_safetensors_meta(path, n, names, ts, CK_META, keys, vp);
}

static const char *meta_get(int n, char **k, char **v, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(k[i], key)) return v[i];
  return NULL;
}

static zorch_tensor *find(int n, char **names, zorch_tensor **ts, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return ts[i];
  return NULL;
}

/* The saved tensor into the engine's (made when missing), sizes checked. */
static zorch_status restore(const char *path, zorch_tensor *src, zorch_tensor **dst, zorch_tensor *like) {
  if (!src) return ZORCH_OK;
  if (zorch_tensor_numel(src) != zorch_tensor_numel(like))
    return err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s: a saved state of %" PRId64 " elements for a target of %" PRId64,
                   path, zorch_tensor_numel(src), zorch_tensor_numel(like));
  if (!*dst && !(*dst = zeros_like(like))) return zorch_last_status();
  zorch_tensor *flat = zorch_reshape(src, zorch_tensor_ndim(*dst), zorch_tensor_shape(*dst));
  zorch_status st = flat ? zorch_copy_(*dst, flat) : zorch_last_status();
  zorch_tensor_free(flat);
  return st;
}

zorch_status zorch_zero_load(zorch_zero *e, const char *path) {
  if (!e || !path) return err_set(ZORCH_ERR_ARG, "zorch_zero_load: NULL argument");
  int n = 0, nm = 0;
  char **names = NULL, **keys = NULL, **vals = NULL;
  zorch_tensor **ts = NULL;
  zorch_status st = zorch_load_safetensors_meta(path, &n, &names, &ts, &nm, &keys, &vals);
  if (st) return st;
  zorch_zero_geometry g;
  zorch_zero_get_geometry(e, &g);
  int64_t want[4] = {e->o.stage, g.rank, g.world, g.numel};
  const char *what[4] = {"stage", "rank", "world", "numel"};
  int64_t got[9];
  const char *more[5] = {"micro", "steps", "updates", "hysteresis", "attempts"};
  for (int k = 0; k < 4 && !st; k++) {
    const char *v = meta_get(nm, keys, vals, what[k]);
    if (!v || sscanf(v, "%" SCNd64, &got[k]) != 1)
      st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s is not an engine's checkpoint (no %s)", path, what[k]);
    else if (got[k] != want[k])
      st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s was saved with %s %" PRId64 ", this engine has %" PRId64, path,
                   what[k], got[k], want[k]);
  }
  for (int k = 0; k < 5 && !st; k++) {
    const char *v = meta_get(nm, keys, vals, more[k]);
    if (!v || sscanf(v, "%" SCNd64, &got[4 + k]) != 1)
      st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s: no %s", path, more[k]);
  }
  zorch_zero_scaler s = e->s;
  const char *sc = meta_get(nm, keys, vals, "scale"), *lo = meta_get(nm, keys, vals, "last_overflow"),
             *sk = meta_get(nm, keys, vals, "skipped");
  if (!st && (!sc || !lo || !sk || sscanf(sc, "%la", &s.scale) != 1 || sscanf(lo, "%" SCNd64, &s.last_overflow) != 1 ||
              sscanf(sk, "%" SCNd64, &s.skipped) != 1))
    st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s: no loss scaler state", path);
  zorch_tensor *target = zero_engine_target(e->z), *src = find(n, names, ts, "target");
  if (!st && !src) st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s holds no target", path);
  if (!st && zorch_tensor_numel(src) != zorch_tensor_numel(target))
    st = err_set(ZORCH_ERR_ARG, "zorch_zero_load: %s: a target of %" PRId64 " elements for one of %" PRId64, path,
                 zorch_tensor_numel(src), zorch_tensor_numel(target));
  if (!st) {
    s.hysteresis = (int)got[7], s.attempts = got[8];
    st = restore(path, src, &target, target);
  }
  if (!st) st = restore(path, find(n, names, ts, "exp_avg"), &e->m, target);
  if (!st) st = restore(path, find(n, names, ts, "exp_avg_sq"), &e->v, target);
  if (!st) st = restore(path, find(n, names, ts, "max_exp_avg_sq"), &e->maxv, target);
  if (!st) st = restore(path, find(n, names, ts, "momentum"), &e->mom, target);
  if (!st) {
    e->micro = got[4], e->steps = got[5], e->updates = got[6], e->pending = 0;
    e->s = s;
    st = zero_engine_after_update(e->z); /* the values into the parameters */
  }
  zorch_safetensors_free(n, names, ts);
  zorch_safetensors_meta_free(nm, keys, vals);
  return st;
}

/* ---- stage 3 ---- */
#define NEED(e, fn) \
  if (!(e)) return err_set(ZORCH_ERR_ARG, fn ": NULL engine")
zorch_status zorch_zero_gather(zorch_zero *e) {
  NEED(e, "zorch_zero_gather");
  return zero_engine_gather(e->z);
}
zorch_status zorch_zero_release(zorch_zero *e) {
  NEED(e, "zorch_zero_release");
  return zero_engine_release(e->z);
}
zorch_status zorch_zero_sync_shard(zorch_zero *e) {
  NEED(e, "zorch_zero_sync_shard");
  return zero_engine_sync_shard(e->z);
}
zorch_status zorch_zero_module_register(zorch_zero *e, int n, const int *groups, int *id) {
  NEED(e, "zorch_zero_module_register");
  if (n < 0 || (n && !groups) || !id) return err_set(ZORCH_ERR_ARG, "zorch_zero_module_register: bad arguments");
  return zero_engine_module_register(e->z, n, groups, id);
}
zorch_status zorch_zero_module_begin(zorch_zero *e, int id) {
  NEED(e, "zorch_zero_module_begin");
  return zero_engine_module_begin(e->z, id);
}
zorch_status zorch_zero_module_end(zorch_zero *e, int id, zorch_tensor *out) {
  NEED(e, "zorch_zero_module_end");
  return zero_engine_module_end(e->z, id, out);
}
zorch_status zorch_zero_gather_param(zorch_zero *e, int i) {
  NEED(e, "zorch_zero_gather_param");
  if (i < 0 || i >= e->n) return err_set(ZORCH_ERR_ARG, "zorch_zero_gather_param: parameter %d of %d", i, e->n);
  return zero_engine_gather_param(e->z, i);
}

/* ---- counts and reports ---- */
zorch_status zorch_zero_set_counts(zorch_zero *e, int64_t micro, int64_t steps) {
  NEED(e, "zorch_zero_set_counts");
  if (micro < 0 || steps < 0) return err_set(ZORCH_ERR_ARG, "zorch_zero_set_counts: counts must be >= 0");
  e->micro = micro, e->steps = steps, e->updates = steps, e->pending = 0;
  return ZORCH_OK;
}
void zorch_zero_reset_scaler(zorch_zero *e) { scaler_reset(e); }
zorch_status zorch_zero_publish(zorch_zero *e) {
  NEED(e, "zorch_zero_publish");
  return zero_engine_after_update(e->z);
}
void zorch_zero_get_memory(const zorch_zero *e, zorch_zero_memory *m) {
  zero_memory z;
  zero_engine_memory(e->z, &z);
  *m = (zorch_zero_memory){z.parameters, z.gradients, z.master_weights, z.buffers, z.numel, z.shard};
}
void zorch_zero_comm_times(zorch_zero *e, double *in_flight, double *waited, bool reset) {
  zero_engine_comm_times(e->z, in_flight, waited, reset);
}
void zorch_zero_gather_times(zorch_zero *e, double *in_flight, double *waited, bool reset) {
  zero_engine_gather_times(e->z, in_flight, waited, reset);
}
int zorch_zero_param_file(const zorch_zero *e, int64_t *p_off, int64_t *g_off) {
  return zero_engine_param_file(e->z, p_off, g_off);
}
void zorch_zero_get_io(zorch_zero *e, zorch_zero_io *io, bool reset) {
  zero_io z;
  zero_engine_io(e->z, &z, reset);
  *io = (zorch_zero_io){z.file_bytes, z.read_bytes, z.write_bytes, z.io_s, z.ahead_bytes, z.behind_bytes, z.sync_s};
}
