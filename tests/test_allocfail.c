/* Allocation failures leave the library usable. A SimpleNet training step
   (Linear 10->20, ReLU, Linear 20->2, MSE, backward, gradient clipping, Adam)
   runs with an allocation failing, for every allocation the step makes: the step
   must fail with an error, never crash, and the next step must succeed and give
   the numbers a clean step gives from the same state. The same then runs through
   the embedding API: a VM made with allocations failing, and a Lua step through
   zorch.Engine{zero_stage = 2, gradient_clipping = 1.0}, and the same at stage 3.

   The test links with -Wl,--wrap=malloc,... (see the Makefile), so every
   allocation libzorch.a's objects make (the VM's Lua heap included: embed.c's
   allocator calls realloc and free) comes here first. Leaks are for ASan
   (make check-asan) to find. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <lua.h>

#include "tap.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);

/* Armed, the k-th allocation from now fails (one_shot), or it and every later
   one (persistent) until disarmed. */
static atomic_long alloc_count, fail_at;
static atomic_bool persistent, injected;

static bool should_fail(void) {
  long k = atomic_load(&fail_at);
  if (k <= 0) return false;
  long c = atomic_fetch_add(&alloc_count, 1) + 1;
  if (c == k || (c > k && atomic_load(&persistent))) {
    atomic_store(&injected, true);
    return true;
  }
  return false;
}

void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return should_fail() ? NULL : __real_calloc(n, size); }
/* A shrinking realloc never fails: Lua relies on that, as C libraries do. */
void *__wrap_realloc(void *p, size_t n) {
  if (n && !(p && malloc_usable_size(p) >= n) && should_fail()) return NULL;
  return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n) { return should_fail() ? NULL : __real_aligned_alloc(align, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  return should_fail() ? ENOMEM : __real_posix_memalign(p, align, n);
}
char *__wrap_strdup(const char *s) { return should_fail() ? NULL : __real_strdup(s); }

static void arm(long k, bool all_after) {
  atomic_store(&alloc_count, 0);
  atomic_store(&injected, false);
  atomic_store(&persistent, all_after);
  atomic_store(&fail_at, k);
}
/* Disarms; returns how many allocations were counted while armed. */
static long disarm(void) {
  atomic_store(&fail_at, 0);
  return atomic_load(&alloc_count);
}
/* Counts the allocations of what runs until disarm(), failing none. */
static void count_only(void) { arm(LONG_MAX, false); }

/* ---- part 1: the C API ------------------------------------------------------------ */
#define NP 4
typedef struct {
  zorch_tensor *p[NP], *m[NP], *v[NP]; /* parameters and Adam's moments */
  int64_t step;
} net;

/* A copy of a net's state (parameters, moments, step) to restore it from. */
typedef struct {
  zorch_tensor *p[NP], *m[NP], *v[NP];
  int64_t step;
} snapshot;

/* Values only: the copies neither record nor carry a gradient. */
static void snapshot_take(snapshot *s, const net *n) {
  bool prev = zorch_set_grad_enabled(false);
  for (int i = 0; i < NP; i++) {
    s->p[i] = zorch_clone(n->p[i]);
    s->m[i] = zorch_clone(n->m[i]);
    s->v[i] = zorch_clone(n->v[i]);
  }
  zorch_set_grad_enabled(prev);
  s->step = n->step;
}
static bool snapshot_restore(const snapshot *s, net *n) {
  bool good = true;
  for (int i = 0; i < NP; i++) {
    good &= zorch_copy_(n->p[i], s->p[i]) == ZORCH_OK;
    good &= zorch_copy_(n->m[i], s->m[i]) == ZORCH_OK;
    good &= zorch_copy_(n->v[i], s->v[i]) == ZORCH_OK;
    good &= zorch_set_grad(n->p[i], NULL) == ZORCH_OK;
  }
  n->step = s->step;
  return good;
}
static void snapshot_free(snapshot *s) {
  for (int i = 0; i < NP; i++) {
    zorch_tensor_free(s->p[i]);
    zorch_tensor_free(s->m[i]);
    zorch_tensor_free(s->v[i]);
  }
}

/* Scales the gradients so that their global L2 norm is at most max_norm. */
static zorch_status clip_grads(net *n, double max_norm) {
  double sq = 0;
  for (int i = 0; i < NP; i++) {
    zorch_tensor *g = zorch_grad(n->p[i]);
    if (!g) return ZORCH_ERR_STATE;
    zorch_tensor *g2 = zorch_mul(g, g), *s = g2 ? zorch_sum(g2, 0, NULL, false) : NULL;
    double v = 0;
    zorch_status st = s ? zorch_tensor_item(s, &v) : zorch_last_status();
    zorch_tensor_free(g2);
    zorch_tensor_free(s);
    if (st) return st;
    sq += v;
  }
  double coef = max_norm / (sqrt(sq) + 1e-6);
  if (coef >= 1) return ZORCH_OK;
  for (int i = 0; i < NP; i++) {
    zorch_tensor *g = zorch_grad(n->p[i]), *scaled = zorch_mul_scalar(g, coef);
    zorch_status st = scaled ? zorch_copy_(g, scaled) : zorch_last_status();
    zorch_tensor_free(scaled);
    if (st) return st;
  }
  return ZORCH_OK;
}

/* One training step; the loss into *loss. Any failure returns its status. */
static zorch_status train_step(net *n, zorch_tensor *x, zorch_tensor *y, double *loss) {
  zorch_tensor *h = zorch_linear(x, n->p[0], n->p[1]), *r = h ? zorch_relu(h) : NULL;
  zorch_tensor *o = r ? zorch_linear(r, n->p[2], n->p[3]) : NULL;
  zorch_tensor *l = o ? zorch_mse_loss(o, y, ZORCH_REDUCE_MEAN) : NULL;
  zorch_status st = l ? zorch_tensor_item(l, loss) : zorch_last_status();
  for (int i = 0; i < NP && !st; i++) st = zorch_set_grad(n->p[i], NULL);
  if (!st) st = zorch_backward(l, NULL, false);
  if (!st) st = clip_grads(n, 0.5);
  zorch_adam_opts ao = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  if (!st) n->step++;
  for (int i = 0; i < NP && !st; i++)
    st = zorch_adam_step(n->p[i], zorch_grad(n->p[i]), n->m[i], n->v[i], NULL, n->step, &ao);
  zorch_tensor *ts[] = {h, r, o, l};
  for (int i = 0; i < 4; i++) zorch_tensor_free(ts[i]);
  return st;
}

/* True when every parameter of a equals b's, bit for bit. */
static bool same_params(const net *a, const snapshot *b) {
  for (int i = 0; i < NP; i++) {
    int64_t k = zorch_tensor_numel(a->p[i]);
    double *x = calloc((size_t)k, sizeof *x), *y = calloc((size_t)k, sizeof *y);
    bool same = x && y && !zorch_tensor_to_doubles(a->p[i], x, k) && !zorch_tensor_to_doubles(b->p[i], y, k) &&
                memcmp(x, y, sizeof *x * (size_t)k) == 0;
    free(x);
    free(y);
    if (!same) return false;
  }
  return true;
}

static zorch_tensor *param(int nd, const int64_t *shape, zorch_generator *g) {
  zorch_tensor *r = zorch_randn(nd, shape, ZORCH_F32, CPU, g), *p = zorch_mul_scalar(r, 0.3);
  zorch_tensor_free(r);
  zorch_set_requires_grad(p, true);
  return p;
}

/* Runs the step with the k-th allocation failing, for k = 1, 2, ... until a run
   completes without a failure; after each failing run the state is restored and
   a clean step must match the reference. */
static void c_api_part(bool all_after) {
  const char *mode = all_after ? "every allocation from the k-th on" : "the k-th allocation";
  zorch_generator *g = zorch_generator_new(5);
  zorch_tensor *x = zorch_randn(SHAPE(16, 10), ZORCH_F32, CPU, g), *y = zorch_randn(SHAPE(16, 2), ZORCH_F32, CPU, g);
  net n = {{param(SHAPE(20, 10), g), param(SHAPE(20), g), param(SHAPE(2, 20), g), param(SHAPE(2), g)}, {0}, {0}, 0};
  for (int i = 0; i < NP; i++) {
    n.m[i] = zorch_zeros(zorch_tensor_ndim(n.p[i]), zorch_tensor_shape(n.p[i]), ZORCH_F32, CPU);
    n.v[i] = zorch_zeros(zorch_tensor_ndim(n.p[i]), zorch_tensor_shape(n.p[i]), ZORCH_F32, CPU);
  }
  double loss;
  /* a first step loads BLAS and the like; the state after it is the start */
  ok(train_step(&n, x, y, &loss) == ZORCH_OK, "C step (%s failing): a clean first step", mode);
  snapshot start, ref;
  snapshot_take(&start, &n);
  double ref_loss = NAN;
  count_only();
  zorch_status st = train_step(&n, x, y, &ref_loss);
  long total = disarm();
  snapshot_take(&ref, &n);
  ok(st == ZORCH_OK && total > 0, "C step (%s failing): a clean step makes %ld allocations", mode, total);

  long errors = 0, bad_error = 0, bad_next = 0, k;
  for (k = 1; k <= total + 1; k++) {
    snapshot_restore(&start, &n);
    zorch_clear_error();
    arm(k, all_after);
    st = train_step(&n, x, y, &loss);
    disarm();
    if (!atomic_load(&injected)) break; /* the step made fewer than k allocations */
    if (st != ZORCH_OK && zorch_last_status() != ZORCH_OK && zorch_last_error()[0] && zorch_is_grad_enabled()) errors++;
    else if (bad_error++ < 5) printf("# k = %ld: the failure gave %s (last error: %s)\n", k,
                                       st ? "no message, or grad mode off" : "no error", zorch_last_error());
    snapshot_restore(&start, &n);
    double next = NAN;
    if (train_step(&n, x, y, &next) != ZORCH_OK || next != ref_loss || !same_params(&n, &ref)) {
      if (bad_next++ < 5) printf("# k = %ld: the next step differs or fails (%s)\n", k, zorch_last_error());
    }
  }
  ok(k == total + 1, "C step (%s failing): every allocation failed once (k = 1..%ld), and k = %ld fails none", mode,
     k - 1, k);
  ok(bad_error == 0, "C step (%s failing): all %ld failing steps returned an error with a message, grad mode on (%ld did not)", mode,
     errors, bad_error);
  ok(bad_next == 0, "C step (%s failing): the next step succeeds with the clean step's loss and parameters (%ld did not)",
     mode, bad_next);
  snapshot_free(&start);
  snapshot_free(&ref);
  for (int i = 0; i < NP; i++) {
    zorch_tensor_free(n.p[i]);
    zorch_tensor_free(n.m[i]);
    zorch_tensor_free(n.v[i]);
  }
  zorch_tensor_free(x);
  zorch_tensor_free(y);
  zorch_generator_free(g);
}

/* ---- part 2: the embedding API and Lua ------------------------------------------- */
static const char setup_chunk[] =
    "local nn, optim = zorch.nn, zorch.optim\n"
    "zorch.manual_seed(1)\n"
    "local SimpleNet = nn.Module:extend 'SimpleNet'\n"
    "function SimpleNet:init() self.fc1 = nn.Linear(10, 20); self.fc2 = nn.Linear(20, 2) end\n"
    "function SimpleNet:forward(x) return self.fc2(zorch.relu(self.fc1(x))) end\n"
    "local engine = zorch.Engine{zero_stage = ..., gradient_clipping = 1.0}\n"
    "local model = SimpleNet()\n"
    "local opt = optim.Adam(model:parameters(), {lr = 1e-2})\n"
    "model, _, opt = engine:prepare(model, nil, opt)\n"
    "local crit = nn.MSELoss()\n"
    "local X, Y = zorch.randn(16, 10), zorch.randn(16, 2)\n"
    "local input = zorch.randn(16, 10):requires_grad_()\n"
    "input:register_hook(function(t) hooked = t.grad:sum():item() end)\n"
    "function step()\n"
    "  local loss = crit(model(X + input), Y)\n"
    "  opt:zero_grad(); input.grad = nil\n"
    "  engine:backward(loss)\n"
    "  opt:step()\n"
    "  last = loss\n"
    "  return loss\n"
    "end\n"
    /* the state to start from, and what a clean step gives from it */
    "local function copy(sd) local c = {} for k, v in pairs(sd) do c[k] = v:clone() end return c end\n"
    "local start\n"
    "function save() start = {copy(model:state_dict()), opt:state_dict()} end\n"
    "function restore() model:load_state_dict(start[1]); opt:load_state_dict(start[2]) end\n"
    "local ref\n"
    "function save_ref() ref = {loss = last:item(), params = copy(model:state_dict())} end\n"
    "function check_ref()\n"
    "  assert(last:item() == ref.loss, 'the loss differs')\n"
    "  for k, v in pairs(model:state_dict()) do\n"
    "    assert((v - ref.params[k]):abs():sum():item() == 0, k .. ' differs')\n"
    "  end\n"
    "end\n";

/* A step through the VM: its loss tensor into *out (NULL on failure). */
static zorch_status vm_step(zorch_vm *vm, zorch_tensor **out) { return zorch_vm_call(vm, "step", 0, NULL, 1, out); }

/* The value of a step's loss (NaN when there is none); frees the tensor. */
static double loss_of(zorch_tensor *t) {
  double v = NAN;
  if (t && zorch_tensor_item(t, &v)) v = NAN;
  zorch_tensor_free(t);
  return v;
}

/* What a sweep over k saw. */
typedef struct {
  long runs, injected, errors, bad_error, bad_after;
} sweep;

static void vm_new_part(void) {
  count_only();
  zorch_vm *vm = zorch_vm_new(NULL);
  long total = disarm();
  ok(vm != NULL, "vm_new: a clean VM takes %ld allocations", total);
  zorch_vm_free(vm);
  /* thousands of allocations (every Lua module is loaded): a stride keeps the
     test short; each failure must still give NULL and a message */
  long stride = total / 400 + 1;
  sweep s = {0};
  for (long k = 1; k <= total; k += stride) {
    zorch_clear_error();
    arm(k, true);
    vm = zorch_vm_new(NULL);
    disarm();
    s.runs++;
    if (!atomic_load(&injected)) continue;
    s.injected++;
    if (!vm && zorch_last_status() != ZORCH_OK && zorch_last_error()[0]) s.errors++;
    else if (s.bad_error++ < 5) printf("# vm_new, k = %ld: %s\n", k, vm ? "a VM despite the failure" : "no message");
    zorch_vm_free(vm);
  }
  vm = zorch_vm_new(NULL);
  ok(vm && zorch_vm_dostring(vm, "assert(zorch.ones(2):sum():item() == 2)", "=t") == ZORCH_OK,
     "vm_new with allocation k.. failing (k = 1..%ld, stride %ld, %ld runs): a VM made afterwards works", total,
     stride, s.runs);
  ok(s.bad_error == 0 && s.injected > 0, "vm_new: %ld failing runs all returned NULL with a message (%ld did not)",
     s.injected, s.bad_error);
  zorch_vm_free(vm);
}

/* The Lua SimpleNet step on an engine of ZeRO stage `stage`. */
static void vm_step_part(int stage) {
  zorch_vm *vm = zorch_vm_new(NULL);
  char setup[64];
  snprintf(setup, sizeof setup, "load(simplenet, '=simplenet')(%d)", stage);
  lua_State *L = zorch_vm_state(vm);
  lua_pushstring(L, setup_chunk);
  lua_setglobal(L, "simplenet");
  ok(vm && zorch_vm_dostring(vm, setup, "=setup") == ZORCH_OK, "a VM sets up SimpleNet on a ZeRO-%d engine%s%s",
     stage, vm ? ": " : "", vm ? zorch_vm_error(vm) : "");
  zorch_tensor *out = NULL;
  zorch_status st = vm_step(vm, &out);
  double loss = loss_of(out);
  ok(st == ZORCH_OK && isfinite(loss), "stage %d: a clean Lua step (loss %.4f)", stage, loss);
  ok(zorch_vm_dostring(vm, "save()", "=t") == ZORCH_OK, "stage %d: the state is saved: %s", stage, zorch_vm_error(vm));
  count_only();
  st = vm_step(vm, &out);
  long total = disarm();
  loss = loss_of(out);
  ok(st == ZORCH_OK && isfinite(loss) && zorch_vm_dostring(vm, "save_ref()", "=t") == ZORCH_OK,
     "stage %d: a clean Lua step makes %ld allocations (loss %.4f)", stage, total, loss);
  /* about 150 allocations: every one is tried (the stride keeps a larger step
     under a minute, also under ASan). First each alone: Lua retries a failed
     allocation after an emergency collection, so a step may then succeed; then
     each with every later one failing too, which always fails the step. */
  long stride = total / 300 + 1;
  for (int all_after = 0; all_after <= 1; all_after++) {
    const char *mode = all_after ? "allocation k.. failing" : "allocation k failing";
    sweep s = {0};
    long absorbed = 0;
    for (long k = 1; k <= total; k += stride) {
      zorch_clear_error();
      if (zorch_vm_dostring(vm, "restore()", "=t")) break;
      arm(k, all_after);
      st = vm_step(vm, &out);
      disarm();
      loss_of(out);
      s.runs++;
      if (!atomic_load(&injected)) continue;
      s.injected++;
      if (st != ZORCH_OK && zorch_vm_error(vm)[0] && zorch_is_grad_enabled()) s.errors++;
      else if (st == ZORCH_OK && !all_after) absorbed++;
      else if (s.bad_error++ < 5)
        printf("# stage %d, %s, k = %ld: %s\n", stage, mode, k, st ? "no message, or grad mode off" : "no error");
      st = zorch_vm_dostring(vm, "restore()", "=t");
      if (!st) st = vm_step(vm, &out);
      loss_of(out);
      if (!st) st = zorch_vm_dostring(vm, "check_ref()", "=t");
      if (st && s.bad_after++ < 5)
        printf("# stage %d, %s, k = %ld: the next step: %s\n", stage, mode, k, zorch_vm_error(vm));
    }
    ok(s.injected > 0 && s.bad_error == 0,
       "stage %d, Lua step with %s (k = 1..%ld, stride %ld): %ld failing steps returned an error with a message "
       "and grad mode on, %ld recovered (%ld neither)", stage, mode, total, stride, s.errors, absorbed, s.bad_error);
    ok(s.bad_after == 0,
       "stage %d, %s: the step after each failure succeeds with the clean step's loss and parameters (%ld did not)",
       stage, mode, s.bad_after);
  }
  ok(zorch_vm_dostring(vm, "assert(zorch.is_grad_enabled() and type(hooked) == 'number')", "=t") == ZORCH_OK,
     "stage %d: grad mode is on and the gradient hook ran: %s", stage, zorch_vm_error(vm));
  zorch_vm_free(vm);
}

int main(void) {
  setenv("ZORCH_ALLOC_CACHE", "0", 1); /* per-thread caches would hide allocations */
  zorch_set_num_threads(1);            /* one thread: the same allocations every run */
  c_api_part(false);
  c_api_part(true);
  vm_new_part();
  vm_step_part(2);
  vm_step_part(3); /* parameters gathered around each module, from pre-backward hooks too */
  return done_testing();
}
