/* test_zero_api.c: include/zorch_zero.h on one local rank: options checked,
   the step's counting, the update equal to the fused Adam's, the norm, the
   fp16 loss scaler, shard checkpoints, check_grad_overflow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "zorch_zero.h"

static zorch_tensor *param(const double *v, int ndim, const int64_t *shape) {
  zorch_tensor *t = from_doubles(v, ndim, shape, ZORCH_F32);
  if (t) zorch_set_requires_grad(t, true);
  return t;
}

static const double W[6] = {0.5, -1, 2, 0.25, -0.75, 1.5}, B[3] = {0.1, -0.2, 0.3};
static const double X[4] = {1, 2, -1, 0.5};

/* sum((x W^T + b)^2) over a (2, 2) batch */
static zorch_tensor *loss(zorch_tensor *w, zorch_tensor *b, double scale_x) {
  double xv[4];
  for (int i = 0; i < 4; i++) xv[i] = X[i] * scale_x;
  zorch_tensor *x = from_doubles(xv, SHAPE(2, 2), ZORCH_F32);
  zorch_tensor *y = zorch_linear(x, w, b);
  zorch_tensor *sq = zorch_mul(y, y);
  zorch_tensor *l = zorch_sum(sq, 0, NULL, false);
  zorch_tensor_free(x), zorch_tensor_free(y), zorch_tensor_free(sq);
  return l;
}

static zorch_status make(int stage, zorch_dtype dt, int accum, double clip, zorch_tensor **p, zorch_zero **e) {
  zorch_zero_options o;
  zorch_zero_options_init(&o);
  o.stage = stage, o.dtype = dt, o.accumulation = accum, o.clip = clip, o.data = zorch_zero_local();
  p[0] = param(W, SHAPE(3, 2));
  p[1] = param(B, SHAPE(3));
  return zorch_zero_new(&o, 2, p, e);
}

static bool same_bits(zorch_tensor *a, zorch_tensor *b) {
  return zorch_tensor_numel(a) == zorch_tensor_numel(b) &&
         !memcmp(zorch_tensor_data(a), zorch_tensor_data(b), (size_t)zorch_tensor_numel(a) * 4);
}

/* An engine whose options check for overflow (check_grad_overflow) or not. */
static zorch_status make_checked(int stage, zorch_dtype dt, bool check, zorch_tensor **p, zorch_zero **e) {
  zorch_zero_options o;
  zorch_zero_options_init(&o);
  o.stage = stage, o.dtype = dt, o.check_grad_overflow = check, o.data = zorch_zero_local();
  p[0] = param(W, SHAPE(3, 2));
  p[1] = param(B, SHAPE(3));
  return zorch_zero_new(&o, 2, p, e);
}

/* One micro-step and step on loss(scale_x) (stage 3 gathers for the forward
   first; a no-op at the others). */
static zorch_status step_on(zorch_zero *e, zorch_tensor **p, double scale_x, const zorch_zero_update *u,
                            zorch_zero_step_info *info) {
  zorch_status st = zorch_zero_gather(e);
  zorch_tensor *l = st ? NULL : loss(p[0], p[1], scale_x);
  if (!st && !l) st = zorch_last_status();
  if (!st) st = zorch_zero_zero_grad(e);
  if (!st) st = zorch_zero_backward(e, l);
  if (!st) st = zorch_zero_step(e, u, info);
  zorch_tensor_free(l);
  return st;
}

static bool all_finite(zorch_tensor *t) {
  int64_t n = zorch_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)n);
  bool fin = v && zorch_tensor_to_doubles(t, v, n) == ZORCH_OK;
  for (int64_t i = 0; fin && i < n; i++) fin = isfinite(v[i]);
  free(v);
  return fin;
}

/* check_grad_overflow (fp32, bf16): a step on a nan or inf gradient is
   skipped, leaving the target and the optimizer's state as they were; off, the
   step runs on it as the header says (overflow is float16's only). */
static void check_grad_overflow(void) {
  zorch_zero_update u = {.kind = ZORCH_ZERO_ADAM, .adam = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}};
  static const struct {
    int stage;
    zorch_dtype dt;
  } cases[] = {{1, ZORCH_F32}, {3, ZORCH_F32}, {2, ZORCH_BF16}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int stage = cases[c].stage;
    const char *dn = cases[c].dt == ZORCH_F32 ? "fp32" : "bf16";
    zorch_tensor *p[2], *q[2];
    zorch_zero *e = NULL, *ref = NULL;
    if (make_checked(stage, cases[c].dt, true, p, &e) || make_checked(stage, cases[c].dt, true, q, &ref)) {
      ok(0, "%s stage %d: engines with check_grad_overflow (%s)", dn, stage, zorch_last_error());
      zorch_zero_free(e), zorch_zero_free(ref);
      continue;
    }
    zorch_tensor *before = zorch_clone(zorch_zero_target(e));
    zorch_zero_step_info info[2];
    static const double bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
      zorch_status st = step_on(e, p, bad[k], &u, &info[k]);
      ok(st == ZORCH_OK && !info[k].stepped && info[k].overflow && info[k].steps == 0 && info[k].loss_scale == 1 &&
             !isfinite(info[k].norm),
         "%s stage %d, check_grad_overflow: %s gradient skips the step (stepped %d, overflow %d, norm %g)", dn, stage,
         k ? "an inf" : "a nan", info[k].stepped, info[k].overflow, info[k].norm);
      ok(same_bits(before, zorch_zero_target(e)), "%s stage %d: the target unchanged after the %s step", dn, stage,
         k ? "inf" : "nan");
    }
    zorch_zero_scaler s;
    zorch_zero_get_scaler(e, &s);
    int64_t micro, steps;
    zorch_zero_counts(e, &micro, &steps);
    ok(s.skipped == 2 && s.attempts == 2 && s.scale == 1 && steps == 0,
       "%s stage %d: two skipped, none taken (skipped %lld, steps %lld)", dn, stage, (long long)s.skipped,
       (long long)steps);
    /* the next finite step is the first update: the same bits as an engine that saw only it (Adam's moments
       and step count untouched by the skipped ones) */
    zorch_zero_step_info fi, ri;
    ok(step_on(e, p, 1, &u, &fi) == ZORCH_OK && fi.stepped && !fi.overflow && fi.steps == 1 && isfinite(fi.norm) &&
           !same_bits(before, zorch_zero_target(e)),
       "%s stage %d: a following finite step updates", dn, stage);
    ok(step_on(ref, q, 1, &u, &ri) == ZORCH_OK && ri.stepped && same_bits(zorch_zero_target(ref), zorch_zero_target(e)) &&
           fi.norm == ri.norm,
       "%s stage %d: and it is the first update's, bit for bit (the optimizer state untouched)", dn, stage);
    zorch_zero_free(e), zorch_zero_free(ref);
    for (int i = 0; i < 2; i++) zorch_tensor_free(p[i]), zorch_tensor_free(q[i]);
    zorch_tensor_free(before);
  }

  /* off (the default): fp32 does not look for overflow; the update runs on the nan gradient */
  zorch_tensor *p[2];
  zorch_zero *e = NULL;
  zorch_zero_options o;
  zorch_zero_options_init(&o);
  ok(!o.check_grad_overflow, "check_grad_overflow is off by default");
  if (make_checked(1, ZORCH_F32, false, p, &e)) {
    ok(0, "an fp32 engine without check_grad_overflow (%s)", zorch_last_error());
    return;
  }
  zorch_zero_step_info info;
  bool finite0 = all_finite(zorch_zero_target(e));
  zorch_status st = step_on(e, p, NAN, &u, &info);
  ok(finite0 && st == ZORCH_OK && info.stepped && !info.overflow && info.steps == 1 && isnan(info.norm),
     "without check_grad_overflow a nan gradient's step runs (stepped %d, overflow %d, norm %g)", info.stepped,
     info.overflow, info.norm);
  zorch_zero_scaler s;
  zorch_zero_get_scaler(e, &s);
  ok(s.skipped == 0 && !all_finite(zorch_zero_target(e)), "nothing skipped: the nan reached the target");
  zorch_zero_free(e);
  zorch_tensor_free(p[0]), zorch_tensor_free(p[1]);
}

int main(void) {
  zorch_zero_options o;
  zorch_zero_options_init(&o);
  ok(o.stage == 0 && o.accumulation == 1 && o.dtype == ZORCH_F32 && o.bucket == 500000000 && o.hysteresis == 2,
     "options_init: the documented defaults");
  zorch_tensor *p[2] = {param(W, SHAPE(3, 2)), param(B, SHAPE(3))};
  zorch_zero *e = NULL;
  o.data = zorch_zero_local();
  o.stage = 4;
  ok(zorch_zero_new(&o, 2, p, &e) == ZORCH_ERR_ARG && !e && error_has("stage must be 0, 1, 2 or 3"), "stage 4 refused");
  o.stage = 1, o.clip = -1;
  ok(zorch_zero_new(&o, 2, p, &e) == ZORCH_ERR_ARG && error_has("clip must be"), "a negative clip refused");
  o.clip = 0, o.accumulation = 0;
  ok(zorch_zero_new(&o, 2, p, &e) == ZORCH_ERR_ARG && error_has("accumulation"), "accumulation 0 refused");
  o.accumulation = 1;
  zorch_tensor *nul[2] = {p[0], NULL};
  ok(zorch_zero_new(&o, 2, nul, &e) == ZORCH_ERR_ARG && !e && error_has("parameter 2 is NULL"), "a NULL parameter refused");
  /* a frozen parameter is the engine's too (it gets no gradient, as a script's frozen weight) */
  zorch_set_requires_grad(p[1], false);
  double b1[3] = {0};
  ok(zorch_zero_new(&o, 2, p, &e) == ZORCH_OK && e && zorch_tensor_to_doubles(p[1], b1, 3) == ZORCH_OK &&
         b1[0] == (float)B[0] && b1[1] == (float)B[1] && b1[2] == (float)B[2],
     "a frozen parameter taken, its values kept");
  zorch_zero_free(e), e = NULL;
  zorch_tensor_free(p[0]), zorch_tensor_free(p[1]);

  /* stage 1, accumulation 2: the geometry, counting, the update */
  ok(make(1, ZORCH_F32, 2, 0, p, &e) == ZORCH_OK && e, "an engine at stage 1");
  zorch_zero_geometry g;
  zorch_zero_get_geometry(e, &g);
  ok(g.rank == 0 && g.world == 1 && g.numel == 9 && g.shard == 16 && g.lo == 0 && g.len == 16 &&
         zorch_tensor_numel(zorch_zero_target(e)) == 16,
     "geometry: 9 elements padded to a shard of 16");
  zorch_zero_update u = {.kind = ZORCH_ZERO_ADAM, .adam = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}};
  zorch_zero_step_info info;
  ok(zorch_zero_step(e, &u, &info) == ZORCH_ERR_STATE && error_has("no zorch_zero_backward"), "a step before any backward");
  zorch_tensor *rw = param(W, SHAPE(3, 2)), *rb = param(B, SHAPE(3)); /* the reference: plain autograd and Adam */
  for (int k = 0; k < 2; k++) {
    zorch_tensor *l = loss(p[0], p[1], 1), *r = loss(rw, rb, 1);
    zorch_tensor *rh = zorch_mul_scalar(r, 0.5);
    if (k == 0) ok(zorch_zero_zero_grad(e) == ZORCH_OK, "zero_grad");
    ok(zorch_zero_backward(e, l) == ZORCH_OK && zorch_backward(rh, NULL, false) == ZORCH_OK, "backward %d", k + 1);
    ok(zorch_zero_step(e, &u, &info) == ZORCH_OK && info.stepped == (k == 1), "step %d: %s", k + 1,
       k ? "the window is full: it steps" : "half a window: no update");
    ok(zorch_zero_pending(e) == (k ? 0 : 1), "backward calls pending after step %d: %lld", k + 1,
       (long long)zorch_zero_pending(e));
    zorch_tensor_free(l), zorch_tensor_free(r), zorch_tensor_free(rh);
  }
  double gv[9], sq = 0;
  zorch_tensor_to_doubles(zorch_grad(rw), gv, 6);
  zorch_tensor_to_doubles(zorch_grad(rb), gv + 6, 3);
  for (int i = 0; i < 9; i++) sq += gv[i] * gv[i];
  ok(fabs(info.norm - sqrt(sq)) < 1e-6 * sqrt(sq) && info.steps == 1 && info.loss_scale == 1,
     "the norm of the accumulated gradient (%g, want %g)", info.norm, sqrt(sq));
  zorch_tensor *m[2] = {zorch_zeros(SHAPE(3, 2), ZORCH_F32, CPU), zorch_zeros(SHAPE(3), ZORCH_F32, CPU)};
  zorch_tensor *v[2] = {zorch_zeros(SHAPE(3, 2), ZORCH_F32, CPU), zorch_zeros(SHAPE(3), ZORCH_F32, CPU)};
  zorch_set_requires_grad(rw, false), zorch_set_requires_grad(rb, false);
  zorch_adam_step(rw, zorch_grad(rw), m[0], v[0], NULL, 1, &u.adam);
  zorch_adam_step(rb, zorch_grad(rb), m[1], v[1], NULL, 1, &u.adam);
  ok(same_bits(p[0], rw) && same_bits(p[1], rb), "the update is the fused Adam's on the averaged gradient, bit for bit");

  /* checkpoints */
  char path[] = "/tmp/zorch_zero_ckXXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  zorch_tensor *saved = zorch_clone(zorch_zero_target(e));
  ok(zorch_zero_save(e, path) == ZORCH_OK, "save the shard");
  for (int k = 0; k < 2; k++) {
    zorch_tensor *l = loss(p[0], p[1], 1);
    zorch_zero_backward(e, l);
    zorch_zero_step(e, &u, &info);
    zorch_tensor_free(l);
  }
  ok(info.stepped && info.steps == 2 && !same_bits(saved, zorch_zero_target(e)), "another step changed the target");
  ok(zorch_zero_load(e, path) == ZORCH_OK && same_bits(saved, zorch_zero_target(e)), "load brings the saved shard back");
  int64_t micro, steps;
  zorch_zero_counts(e, &micro, &steps);
  ok(micro == 2 && steps == 1, "and the counts (micro %lld, steps %lld)", (long long)micro, (long long)steps);
  zorch_tensor *q[2];
  zorch_zero *e0 = NULL;
  make(0, ZORCH_F32, 1, 0, q, &e0);
  ok(zorch_zero_load(e0, path) == ZORCH_ERR_ARG && error_has("stage 1, this engine has 0"),
     "a checkpoint of another stage is refused, named");
  double bad[2] = {1, -1};
  ok(zorch_zero_set_norm_weights(e0, bad) == ZORCH_ERR_ARG && error_has("weight 2"), "a negative norm weight refused");
  zorch_zero_free(e0), zorch_tensor_free(q[0]), zorch_tensor_free(q[1]);
  unlink(path);
  zorch_zero_free(e);
  for (int i = 0; i < 2; i++) zorch_tensor_free(m[i]), zorch_tensor_free(v[i]), zorch_tensor_free(p[i]);
  zorch_tensor_free(rw), zorch_tensor_free(rb), zorch_tensor_free(saved);

  /* fp16: the dynamic scaler absorbs one overflow (hysteresis 2), halves at the second */
  ok(make(2, ZORCH_F16, 1, 1.0, p, &e) == ZORCH_OK, "an fp16 engine at stage 2");
  zorch_zero_scaler s;
  zorch_zero_get_scaler(e, &s);
  ok(s.scale == 65536 && s.hysteresis == 2, "the scale starts at 2^16");
  zorch_tensor *pl[2] = {p[0], p[1]};
  double scales[3];
  bool stepped[3];
  for (int k = 0; k < 3; k++) {
    zorch_zero_zero_grad(e);
    zorch_tensor *l0 = loss(pl[0], pl[1], k < 2 ? INFINITY : 1e-3);
    zorch_tensor *l = zorch_mul_scalar(l0, 0.01); /* (small: 2^15 times its gradient fits in float16) */
    zorch_tensor_free(l0);
    zorch_zero_backward(e, l);
    zorch_zero_step(e, &u, &info);
    scales[k] = info.loss_scale, stepped[k] = info.stepped;
    zorch_tensor_free(l);
  }
  ok(!stepped[0] && !stepped[1] && stepped[2] && scales[0] == 65536 && scales[1] == 32768 && scales[2] == 32768,
     "overflows skip the step; the second halves the scale (%g, %g, %g)", scales[0], scales[1], scales[2]);
  zorch_zero_get_scaler(e, &s);
  ok(s.skipped == 2 && s.attempts == 3, "the scaler counts the skipped steps");
  zorch_zero_free(e);
  zorch_tensor_free(p[0]), zorch_tensor_free(p[1]);

  check_grad_overflow();
  return done_testing();
}
