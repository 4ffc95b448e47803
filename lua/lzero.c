/* lzero.c: what the Lua engine needs from C: collectives on tensors, flattening
   parameters into one buffer, and gradient-ready hooks that call Lua. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lz.h"
#include "zorch_zero.h"

static zorch_zero_comm *get_comm(lua_State *L) {
  zorch_zero_comm *c = lz_sandboxed(L) ? zorch_zero_local() : zorch_zero_world();
  if (!c) lz_fail(L);
  return c;
}

/* zorch._comm() -> rank (0-based), world size, backend name */
static int l_comm(lua_State *L) {
  zorch_zero_comm *c = get_comm(L);
  lua_pushinteger(L, zorch_zero_comm_rank(c));
  lua_pushinteger(L, zorch_zero_comm_size(c));
  lua_pushstring(L, zorch_zero_comm_backend(c));
  return 3;
}

static int l_allreduce(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  bool max = lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "max") == 0;
  if ((max ? zorch_zero_allreduce_max : zorch_zero_allreduce)(get_comm(L), t)) return lz_fail(L);
  return 0;
}

/* process-wide settings: a sandbox's local world never waits on a peer */
static int l_comm_timeout(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  if (!lz_sandboxed(L)) zorch_zero_set_timeout(s);
  return 0;
}

/* zorch._comm_kinds([reset]) -> {{name =, calls =, bytes =, seconds =}, ...}: per kind of collective. */
static int l_comm_kinds(lua_State *L) {
  bool reset = lua_toboolean(L, 1);
  lua_newtable(L);
  const char *name;
  int64_t calls;
  uint64_t bytes;
  double seconds;
  for (int i = 0; zorch_zero_comm_kind(i, &name, &calls, &bytes, &seconds, reset); i++) {
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)calls);
    lua_setfield(L, -2, "calls");
    lua_pushinteger(L, (lua_Integer)bytes);
    lua_setfield(L, -2, "bytes");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_comm_label(lua_State *L) {
  const char *label = luaL_optstring(L, 1, "");
  if (!lz_sandboxed(L)) zorch_zero_set_label(label);
  return 0;
}

/* ---- the engine (include/zorch_zero.h) ------------------------------------------ */
#define LZ_ENGINE "zorch.ZeroEngine"

typedef struct {
  zorch_zero *e;
} lz_engine;

static zorch_zero *check_engine(lua_State *L) {
  lz_engine *b = luaL_checkudata(L, 1, LZ_ENGINE);
  if (!b->e) luaL_argerror(L, 1, "engine was freed");
  return b->e;
}

static int e_gc(lua_State *L) {
  lz_engine *b = luaL_checkudata(L, 1, LZ_ENGINE);
  zorch_zero_free(b->e);
  b->e = NULL;
  return 0;
}

/* The numbers of the list at idx (an absolute index) into a new userdata
   array on the stack, freed with it: ints, or doubles when ints is false. */
static void *number_list(lua_State *L, int idx, int *n, bool ints) {
  luaL_checktype(L, idx, LUA_TTABLE);
  *n = (int)lz_len(L, idx);
  size_t size = ints ? sizeof(int) : sizeof(double);
  void *v = lua_newuserdatauv(L, size * (size_t)(*n ? *n : 1), 0);
  for (int i = 0; i < *n; i++) {
    lz_geti(L, idx, i + 1);
    if (ints) ((int *)v)[i] = (int)luaL_checkinteger(L, -1);
    else ((double *)v)[i] = luaL_checknumber(L, -1);
    lua_pop(L, 1);
  }
  return v;
}

/* A record of named numbers, the shape of what the getters return. */
typedef enum { FIELD_INT, FIELD_NUM, FIELD_BOOL } field_kind;
typedef struct {
  const char *name;
  field_kind kind;
  double num;
  int64_t i;
} lz_field;
#define F_INT(name, v) {name, FIELD_INT, 0, (int64_t)(v)}
#define F_NUM(name, v) {name, FIELD_NUM, (double)(v), 0}
#define F_BOOL(name, v) {name, FIELD_BOOL, 0, (v) ? 1 : 0}
#define NFIELDS(f) ((int)(sizeof(f) / sizeof *(f)))

static int push_fields(lua_State *L, const lz_field *f, int n) {
  lua_createtable(L, 0, n);
  for (int k = 0; k < n; k++) {
    if (f[k].kind == FIELD_INT) lua_pushinteger(L, f[k].i);
    else if (f[k].kind == FIELD_BOOL) lua_pushboolean(L, (int)f[k].i);
    else lua_pushnumber(L, f[k].num);
    lua_setfield(L, -2, f[k].name);
  }
  return 1;
}

/* The options of the table at idx, by their Engine names (the schema's rows
   in zorch_zero_options.h); an absent one keeps its default. */
#define LZ_OPT_INT(f) o->f = (int)luaL_checkinteger(L, -1)
#define LZ_OPT_INT64(f) o->f = (int64_t)luaL_checkinteger(L, -1)
#define LZ_OPT_DOUBLE(f) o->f = luaL_checknumber(L, -1)
#define LZ_OPT_BOOL(f) o->f = lua_toboolean(L, -1)
#define LZ_OPT_DTYPE(f) o->f = lz_precision(L)
static zorch_dtype lz_precision(lua_State *L) {
  const char *dt = luaL_checkstring(L, -1);
  if (!strcmp(dt, "bf16")) return ZORCH_BF16;
  if (!strcmp(dt, "fp16")) return ZORCH_F16;
  if (strcmp(dt, "fp32")) luaL_error(L, "zero engine: precision must be \"fp32\", \"bf16\" or \"fp16\", got \"%s\"", dt);
  return ZORCH_F32;
}
static void lz_zero_options(lua_State *L, int idx, zorch_zero_options *o) {
  zorch_zero_options_init(o);
#define FILL(KIND, type, field, name, def, lo, hi, want, doc) \
  if (lz_getfield(L, idx, name) != LUA_TNIL) LZ_OPT_##KIND(field); \
  lua_pop(L, 1);
  ZORCH_ZERO_OPTIONS(FILL)
#undef FILL
}

/* zorch._zero_engine({params}, {the Engine's options (zero_stage, reduce_bucket_size,
   precision, ...), groups = {sizes}, group = a zorch.Group (the ranks it partitions
   over; the world's if nil), param_dir = folder for the parameter file (offload_param
   nvme) | nil}) */
static int l_zero_engine(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  zorch_zero_options o;
  lz_zero_options(L, 2, &o);
  lz_getfield(L, 2, "groups");
  if (!lua_isnil(L, -1)) o.group_sizes = number_list(L, lua_gettop(L), &o.ngroups, true);
  lz_getfield(L, 2, "param_dir");
  o.param_dir = luaL_optstring(L, -1, NULL);
  if (o.param_dir) lz_check_path(L, o.param_dir, "write");
  int n = (int)lz_len(L, 1);
  zorch_tensor **ps = lua_newuserdatauv(L, sizeof *ps * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lz_geti(L, 1, i + 1);
    ps[i] = lz_check(L, -1);
    lua_pop(L, 1);
  }
  lz_getfield(L, 2, "group");
  o.data = lz_opt_group(L, lua_gettop(L));
  lz_engine *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->e = NULL;
  lz_setmetatable(L, LZ_ENGINE);
  if (zorch_zero_new(&o, n, ps, &b->e)) return lz_fail(L);
  return 1;
}

static int e_status(lua_State *L, zorch_status st) { return st ? lz_fail(L) : 0; }
static int e_zero_grad(lua_State *L) { return e_status(L, zorch_zero_zero_grad(check_engine(L))); }
static int e_gather(lua_State *L) { return e_status(L, zorch_zero_gather(check_engine(L))); }
static int e_release(lua_State *L) { return e_status(L, zorch_zero_release(check_engine(L))); }
static int e_publish(lua_State *L) { return e_status(L, zorch_zero_publish(check_engine(L))); }
static int e_gather_param(lua_State *L) {
  return e_status(L, zorch_zero_gather_param(check_engine(L), (int)luaL_checkinteger(L, 2)));
}
static int e_sync(lua_State *L) { return e_status(L, zorch_zero_sync_shard(check_engine(L))); }

/* engine:backward(loss), engine:backward_from(t, grad): one micro-step */
static int e_backward(lua_State *L) {
  zorch_zero *e = check_engine(L);
  return e_status(L, zorch_zero_backward(e, lz_check(L, 2)));
}
static int e_backward_from(lua_State *L) {
  zorch_zero *e = check_engine(L);
  return e_status(L, zorch_zero_backward_from(e, lz_check(L, 2), lz_check(L, 3)));
}

/* The Lua update of engine:step: fn(target, grad, grad_scale, step), run
   protected; its error object stays on the stack for e_step to raise. */
typedef struct {
  lua_State *L;
  int fn;
  bool failed;
} lua_update;

static int run_update(lua_State *L) {
  const zorch_zero_update_args *a = lua_touserdata(L, 2);
  lua_pushvalue(L, 1);
  lz_push(L, zorch_tensor_retain(a->target));
  lz_push(L, zorch_tensor_retain(a->grad));
  lua_pushnumber(L, a->grad_scale);
  lua_pushinteger(L, a->step);
  lua_call(L, 4, 0);
  return 0;
}

static zorch_status call_update(const zorch_zero_update_args *a, void *ud) {
  lua_update *u = ud;
  lua_State *L = u->L;
  lua_pushcfunction(L, run_update);
  lua_pushvalue(L, u->fn);
  lua_pushlightuserdata(L, (void *)a);
  int st = lua_pcall(L, 2, 0, 0);
  if (st == LUA_OK) return ZORCH_OK;
  u->failed = true;
  const char *m = lua_tostring(L, -1);
  return zorch_set_error(st == LUA_ERRMEM ? ZORCH_ERR_OOM : ZORCH_ERR_STATE, "update: %s", m ? m : "(not a string)");
}

/* engine:step(fn) -> {stepped, overflow, norm, loss_scale, steps, reduce_s, update_s}:
   the whole optimizer step, fn the update (a Lua optimizer's) */
static int e_step(lua_State *L) {
  zorch_zero *e = check_engine(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  lua_update lu = {.L = L, .fn = 2};
  zorch_zero_update u = {.kind = ZORCH_ZERO_CALLBACK, .fn = call_update, .ud = &lu};
  zorch_zero_step_info info;
  zorch_status st = zorch_zero_step(e, &u, &info);
  if (lu.failed) return lua_error(L); /* the update's own error, as it raised it */
  if (st) return lz_fail(L);
  const lz_field f[] = {F_BOOL("stepped", info.stepped), F_BOOL("overflow", info.overflow), F_NUM("norm", info.norm),
                        F_NUM("loss_scale", info.loss_scale), F_INT("steps", info.steps),
                        F_NUM("reduce_s", info.reduce_s), F_NUM("update_s", info.update_s)};
  return push_fields(L, f, NFIELDS(f));
}

/* engine:scaler() -> {scale, hysteresis, attempts, last_overflow, skipped} */
static int e_scaler(lua_State *L) {
  zorch_zero_scaler s;
  zorch_zero_get_scaler(check_engine(L), &s);
  const lz_field f[] = {F_NUM("scale", s.scale), F_INT("hysteresis", s.hysteresis), F_INT("attempts", s.attempts),
                        F_INT("last_overflow", s.last_overflow), F_INT("skipped", s.skipped)};
  return push_fields(L, f, NFIELDS(f));
}

/* engine:set_scaler(t | nil): a saved state, or nil for the start */
static int e_set_scaler(lua_State *L) {
  zorch_zero *e = check_engine(L);
  if (lua_isnoneornil(L, 2)) return zorch_zero_reset_scaler(e), 0;
  luaL_checktype(L, 2, LUA_TTABLE);
  zorch_zero_scaler s;
  lz_getfield(L, 2, "scale");
  s.scale = luaL_checknumber(L, -1);
  lz_getfield(L, 2, "hysteresis");
  s.hysteresis = (int)luaL_checkinteger(L, -1);
  lz_getfield(L, 2, "attempts");
  s.attempts = luaL_checkinteger(L, -1);
  lz_getfield(L, 2, "last_overflow");
  s.last_overflow = luaL_checkinteger(L, -1);
  lz_getfield(L, 2, "skipped");
  s.skipped = luaL_checkinteger(L, -1);
  return e_status(L, zorch_zero_set_scaler(e, &s));
}

/* engine:counts() -> micro-steps, optimizer steps, backward calls since the
   last step; engine:set_counts(micro, steps) */
static int e_counts(lua_State *L) {
  zorch_zero *e = check_engine(L);
  int64_t micro, steps;
  zorch_zero_counts(e, &micro, &steps);
  lua_pushinteger(L, micro);
  lua_pushinteger(L, steps);
  lua_pushinteger(L, zorch_zero_pending(e));
  return 3;
}
static int e_set_counts(lua_State *L) {
  zorch_zero *e = check_engine(L);
  return e_status(L, zorch_zero_set_counts(e, luaL_checkinteger(L, 2), luaL_checkinteger(L, 3)));
}

/* engine:set_local_grads(on): stage 0 steps keep each rank's own gradient */
static int e_set_local_grads(lua_State *L) {
  zorch_zero *e = check_engine(L);
  luaL_checktype(L, 2, LUA_TBOOLEAN);
  return e_status(L, zorch_zero_set_local_grads(e, lua_toboolean(L, 2)));
}

/* engine:geometry() -> {rank, world, numel, shard, padded, lo, len} (lo 0-based) */
static int e_geometry(lua_State *L) {
  zorch_zero_geometry g;
  zorch_zero_get_geometry(check_engine(L), &g);
  const lz_field f[] = {F_INT("rank", g.rank),     F_INT("world", g.world), F_INT("numel", g.numel),
                        F_INT("shard", g.shard),   F_INT("padded", g.padded), F_INT("lo", g.lo),
                        F_INT("len", g.len)};
  return push_fields(L, f, NFIELDS(f));
}

/* engine:set_norm_weights({w per parameter} | nil), engine:add_norm_comm(group) */
static int e_set_norm_weights(lua_State *L) {
  zorch_zero *e = check_engine(L);
  if (lua_isnoneornil(L, 2)) return e_status(L, zorch_zero_set_norm_weights(e, NULL));
  int n;
  double *w = number_list(L, 2, &n, false);
  return e_status(L, zorch_zero_set_norm_weights(e, w));
}
static int e_add_norm_comm(lua_State *L) {
  zorch_zero *e = check_engine(L);
  return e_status(L, zorch_zero_add_norm_comm(e, lz_opt_group(L, 2)));
}

static int e_target(lua_State *L) {
  return lz_push(L, zorch_tensor_retain(zorch_zero_target(check_engine(L))));
}

/* engine:set_host(target, grad, bucketed) | engine:set_host(): offload on a GPU rank */
static int e_set_host(lua_State *L) {
  zorch_zero *e = check_engine(L);
  zorch_tensor *t = lua_isnoneornil(L, 2) ? NULL : lz_check(L, 2), *g = lua_isnoneornil(L, 3) ? NULL : lz_check(L, 3);
  return e_status(L, zorch_zero_set_host(e, t, g, lua_toboolean(L, 4)));
}

static int e_memory(lua_State *L) {
  zorch_zero_memory m;
  zorch_zero_get_memory(check_engine(L), &m);
  const lz_field f[] = {F_INT("parameters", m.parameters), F_INT("gradients", m.gradients),
                        F_INT("master_weights", m.master_weights), F_INT("buffers", m.buffers),
                        F_INT("numel", m.numel), F_INT("shard", m.shard)};
  return push_fields(L, f, NFIELDS(f));
}

/* Seconds in flight and seconds waited, from one of the engine's timers. */
static int push_times(lua_State *L, void (*times)(zorch_zero *, double *, double *, bool)) {
  double flight, waited;
  times(check_engine(L), &flight, &waited, lua_toboolean(L, 2));
  lua_pushnumber(L, flight);
  lua_pushnumber(L, waited);
  return 2;
}

/* engine:comm_times(reset) -> seconds reductions were in flight, seconds waited */
static int e_comm_times(lua_State *L) { return push_times(L, zorch_zero_comm_times); }

/* engine:gather_times(reset) -> seconds stage 3's gathers were in flight, seconds waited */
static int e_gather_times(lua_State *L) { return push_times(L, zorch_zero_gather_times); }

/* engine:param_file() -> fd, byte offset of the shard, of its gradient; nil without one */
static int e_param_file(lua_State *L) {
  int64_t p_off, g_off;
  int fd = zorch_zero_param_file(check_engine(L), &p_off, &g_off);
  if (fd < 0) return 0;
  lua_pushinteger(L, fd);
  lua_pushinteger(L, p_off);
  lua_pushinteger(L, g_off);
  return 3;
}

/* engine:io([reset]) -> {file_bytes, read_bytes, write_bytes, io_s, ...}: the parameter file's traffic */
static int e_io(lua_State *L) {
  zorch_zero_io io;
  zorch_zero_get_io(check_engine(L), &io, lua_toboolean(L, 2));
  const lz_field f[] = {F_INT("file_bytes", io.file_bytes), F_INT("read_bytes", io.read_bytes),
                        F_INT("write_bytes", io.write_bytes), F_NUM("io_s", io.io_s),
                        F_INT("ahead_bytes", io.ahead_bytes), F_INT("behind_bytes", io.behind_bytes),
                        F_NUM("sync_s", io.sync_s)};
  return push_fields(L, f, NFIELDS(f));
}

/* engine:module_register({group ids, 0-based}) -> module id */
static int e_module_register(lua_State *L) {
  zorch_zero *e = check_engine(L);
  int n;
  int *groups = number_list(L, 2, &n, true);
  int id;
  if (zorch_zero_module_register(e, n, groups, &id)) return lz_fail(L);
  lua_pushinteger(L, id);
  return 1;
}
static int e_module_begin(lua_State *L) {
  zorch_zero *e = check_engine(L);
  return e_status(L, zorch_zero_module_begin(e, (int)luaL_checkinteger(L, 2)));
}
/* engine:module_end(id, output tensor or nil) */
static int e_module_end(lua_State *L) {
  zorch_zero *e = check_engine(L);
  int id = (int)luaL_checkinteger(L, 2);
  return e_status(L, zorch_zero_module_end(e, id, zorch_to_tensor(L, 3)));
}

static void open_engine_type(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"backward", e_backward}, {"backward_from", e_backward_from}, {"step", e_step},
      {"scaler", e_scaler}, {"set_scaler", e_set_scaler}, {"counts", e_counts}, {"set_counts", e_set_counts},
      {"set_local_grads", e_set_local_grads},
      {"geometry", e_geometry}, {"set_norm_weights", e_set_norm_weights}, {"add_norm_comm", e_add_norm_comm},
      {"target", e_target}, {"publish", e_publish}, {"zero_grad", e_zero_grad},
      {"gather", e_gather}, {"release", e_release}, {"sync_shard", e_sync}, {"gather_param", e_gather_param},
      {"memory", e_memory}, {"comm_times", e_comm_times}, {"gather_times", e_gather_times},
      {"module_register", e_module_register}, {"module_begin", e_module_begin}, {"module_end", e_module_end},
      {"param_file", e_param_file}, {"io", e_io}, {"set_host", e_set_host}, {NULL, NULL}};
  luaL_newmetatable(L, LZ_ENGINE);
  lua_pushcfunction(L, e_gc);
  lua_setfield(L, -2, "__gc");
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lz_protect_metatable(L);
  lua_pop(L, 1);
}

/* ---- gradient-ready hooks that call Lua ------------------------------------------ */
static const char HOOKS = 'h'; /* registry key of {lightuserdata(tensor) = fn} */

/* The tensors a Lua state has put hooks on, each with a reference, so that
   closing the state removes its hooks before anything of it is freed: a host
   tensor's hook must not call into a closed VM. A userdata in the registry
   ("zorch.hooks"); its address is the hooks' ud. */
typedef struct {
  const void *tag; /* &hooks_tag (lz_tagged) */
  lua_State *L;    /* the main thread */
  zorch_tensor **ts;
  int n, cap;
} lua_hooks;
static const char hooks_tag;

/* Runs protected: finds the leaf's hook and calls it with the leaf. Pushing
   the leaf allocates, so it must not happen outside the protected call.
   [-1, +0, e] */
static int run_lua_hook(lua_State *L) {
  zorch_tensor *leaf = lua_touserdata(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &HOOKS);
  if (!lua_istable(L, -1)) return 0;
  if (lua_rawgetp(L, -1, leaf) != LUA_TFUNCTION) return 0;
  lz_push(L, zorch_tensor_retain(leaf));
  lua_call(L, 1, 0);
  return 0;
}

/* The gradient hook of a leaf with a Lua hook: it runs from inside
   zorch_backward, so a Lua error (memory errors included) must not unwind
   through the backward pass; it becomes the pass's error instead. From a
   host's backward it runs as an entry into the VM: the VM's state current
   (grad mode as the pass has it), its budget counting. */
static zorch_status call_lua_hook(zorch_tensor *leaf, void *ud) {
  lua_State *L = ((lua_hooks *)ud)->L;
  if (!lua_checkstack(L, 2)) return zorch_set_error(ZORCH_ERR_OOM, "gradient hook: out of memory (Lua stack)");
  lz_vm *vm = lz_vm_get(L);
  bool grad = zorch_is_grad_enabled();
  struct zstate *prev = vm ? lz_vm_enter(vm) : NULL;
  bool vm_grad = zorch_is_grad_enabled();
  zorch_set_grad_enabled(grad);
  lua_pushcfunction(L, run_lua_hook);
  lua_pushlightuserdata(L, leaf);
  int st = lua_pcall(L, 1, 0, 0);
  char msg[1024] = "";
  if (st != LUA_OK) {
    const char *m = lua_tostring(L, -1);
    snprintf(msg, sizeof msg, "%s", m ? m : "(error object is not a string)");
    lua_pop(L, 1);
  }
  zorch_set_grad_enabled(vm_grad);
  if (vm) lz_vm_leave(vm, prev);
  if (st == LUA_OK) return ZORCH_OK;
  zorch_status code = st == LUA_ERRMEM ? ZORCH_ERR_OOM : ZORCH_ERR_STATE;
  return zorch_set_error(code, "gradient hook: %s", msg);
}

/* Removes the hooks of a closing Lua state from tensors that still carry them. */
static int hooks_gc(lua_State *L) {
  lua_hooks *h = lz_tagged(L, 1, &hooks_tag, sizeof *h);
  if (!h) return 0;
  for (int i = 0; i < h->n; i++) {
    zorch_tensor *t = h->ts[i];
    void *ud;
    if (zorch_get_grad_hook(t, &ud) == call_lua_hook && ud == h) zorch_set_grad_hook(t, NULL, NULL);
    zorch_tensor_free(t);
  }
  free(h->ts);
  h->ts = NULL;
  h->n = h->cap = 0;
  return 0;
}

/* The state's hook list, made on first use. */
static lua_hooks *hooks_get(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "zorch.hooks");
  lua_hooks *old = lz_tagged(L, -1, &hooks_tag, sizeof *old);
  lua_pop(L, 1);
  if (old) return old;
  lua_hooks *h = lua_newuserdatauv(L, sizeof *h, 0);
  *h = (lua_hooks){.tag = &hooks_tag};
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  h->L = lua_tothread(L, -1);
  if (!h->L) h->L = L; /* (the registry's slot replaced through the debug library) */
  lua_pop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, hooks_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "zorch.hooks");
  return h;
}

/* t:register_hook(fn): fn(t) runs once t's gradient is final in a backward pass;
   nil removes it. */
static int l_register_hook(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  if (!lua_isnil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  if (!zorch_is_leaf(t)) return luaL_error(L, "register_hook: hooks go on leaf tensors only");
  if (!lua_isnil(L, 2) && !zorch_requires_grad(t))
    return luaL_error(L, "register_hook: the tensor does not require grad, so no gradient would reach the hook");
  lua_hooks *h = hooks_get(L);
  void *hud;
  zorch_grad_hook hfn = zorch_get_grad_hook(t, &hud);
  if (hfn && !(hfn == call_lua_hook && hud == h))
    return luaL_error(L, "register_hook: the tensor has a hook this Lua state did not set (the host's, or "
                         "the ZeRO engine's on a prepared parameter); it is neither replaced nor removed");
  int at = 0;
  while (at < h->n && h->ts[at] != t) at++;
  if (at == h->n && !lua_isnil(L, 2) && h->n == h->cap) {
    int cap = h->cap ? 2 * h->cap : 8;
    zorch_tensor **ts = realloc(h->ts, sizeof *ts * (size_t)cap);
    if (!ts) return luaL_error(L, "register_hook: out of memory");
    h->ts = ts;
    h->cap = cap;
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &HOOKS);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &HOOKS);
  }
  lua_pushvalue(L, 2);
  lua_rawsetp(L, -2, t);
  if (zorch_set_grad_hook(t, lua_isnil(L, 2) ? NULL : call_lua_hook, h)) return lz_fail(L);
  if (at == h->n && !lua_isnil(L, 2)) {
    h->ts[h->n++] = zorch_tensor_retain(t);
  } else if (at < h->n && lua_isnil(L, 2)) {
    h->ts[at] = h->ts[--h->n];
    zorch_tensor_free(t);
  }
  return 0;
}

/* MPI is finalised when the Lua state closes. */
static int l_finalize(lua_State *L) {
  (void)L;
  zorch_zero_finalize();
  return 0;
}

void lz_open_zero(lua_State *L) {
  open_engine_type(L);
  if (!lz_sandboxed(L)) { /* a sandbox never starts MPI, nor ends the host's */
    lua_newuserdatauv(L, 1, 0);
    lua_newtable(L);
    lua_pushcfunction(L, l_finalize);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "zorch.finalizer");
  }
  static const luaL_Reg fns[] = {{"_comm", l_comm},           {"_allreduce", l_allreduce},
                                 {"_zero_engine", l_zero_engine},
                                 {"_comm_timeout", l_comm_timeout}, {"_comm_label", l_comm_label}, {"_comm_kinds", l_comm_kinds},
                                 {"register_hook", l_register_hook}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  luaL_getmetatable(L, LZ_TENSOR);
  lz_getfield(L, -1, "__methods");
  lua_pushcfunction(L, l_register_hook);
  lua_setfield(L, -2, "register_hook");
  lua_pop(L, 2);
}
