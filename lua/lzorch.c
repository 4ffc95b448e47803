/* lzorch.c: luaopen_zorch: the module table, the C helpers the Lua modules use
   (fused optimizer steps, norms, save/load), and the Lua modules compiled into
   the library (nn, optim, data, engine). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lz.h"

void lz_open_data(lua_State *L);
void lz_open_zero(lua_State *L);
void lz_open_files(lua_State *L);
void lz_open_tboard(lua_State *L);
void lz_open_gradfn(lua_State *L);
void lz_open_offload(lua_State *L);
void lz_open_dist(lua_State *L);
void lz_open_fs(lua_State *L);

typedef struct {
  const char *name, *chunk; /* zorch.nn.loss, @zorch/nn/loss.lua */
  const char *src;
  size_t len;
} lz_module;
extern const lz_module lz_modules[]; /* generated from the .lua files, NULL-terminated */

/* zorch._adam_step(p, g, m, v, vmax|nil, step, {lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad,
   no_bias_correction}) */
static double field_num(lua_State *L, int t, const char *k, double def) {
  lz_getfield(L, t, k);
  double v = luaL_optnumber(L, -1, def);
  lua_pop(L, 1);
  return v;
}
static bool field_bool(lua_State *L, int t, const char *k) {
  lz_getfield(L, t, k);
  bool v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static int l_adam_step(lua_State *L) {
  luaL_checktype(L, 7, LUA_TTABLE);
  zorch_adam_opts o = {field_num(L, 7, "lr", 1e-3), field_num(L, 7, "beta1", 0.9),
                       field_num(L, 7, "beta2", 0.999), field_num(L, 7, "eps", 1e-8),
                       field_num(L, 7, "weight_decay", 0), field_bool(L, 7, "decoupled"),
                       field_bool(L, 7, "amsgrad"), field_bool(L, 7, "no_bias_correction")};
  zorch_tensor *vmax = lua_isnil(L, 5) ? NULL : lz_check(L, 5);
  if (zorch_adam_step(lz_check(L, 1), lz_check(L, 2), lz_check(L, 3), lz_check(L, 4), vmax,
                      luaL_checkinteger(L, 6), &o))
    return lz_fail(L);
  return 0;
}

/* zorch._sgd_step(p, g, buf|nil, first, {lr, momentum, dampening, weight_decay, nesterov}) */
static int l_sgd_step(lua_State *L) {
  luaL_checktype(L, 5, LUA_TTABLE);
  zorch_sgd_opts o = {field_num(L, 5, "lr", 1e-3), field_num(L, 5, "momentum", 0),
                      field_num(L, 5, "dampening", 0), field_num(L, 5, "weight_decay", 0),
                      field_bool(L, 5, "nesterov")};
  zorch_tensor *buf = lua_isnil(L, 3) ? NULL : lz_check(L, 3);
  if (zorch_sgd_step(lz_check(L, 1), lz_check(L, 2), buf, lua_toboolean(L, 4), &o)) return lz_fail(L);
  return 0;
}

/* The raw bytes of a tensor (contiguous, host), for streaming writers. */
static int l_tensor_bytes(lua_State *L) {
  zorch_tensor *t = zorch_contiguous(lz_check(L, 1));
  if (!t) return lz_fail(L);
  const char *p = zorch_tensor_data(t);
  size_t n = (size_t)zorch_tensor_numel(t) * zorch_dtype_size(zorch_tensor_dtype(t));
  if (!p && n) {
    zorch_tensor_free(t);
    return luaL_error(L, "tensor_bytes: not a host tensor");
  }
  lua_pushlstring(L, p ? p : "", n);
  zorch_tensor_free(t);
  return 1;
}

/* Wall-clock seconds from a monotonic clock, for timing. */
static int l_clock(lua_State *L) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  lua_pushnumber(L, (double)t.tv_sec + (double)t.tv_nsec * 1e-9);
  return 1;
}

/* zorch._sleep(seconds): waits without using the CPU (tests of pipeline
   schedules give their stages fixed times this way) */
static int l_sleep(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  if (!(s >= 0) || s > 3600) return luaL_error(L, "_sleep: seconds must be in 0..3600, got %f", s);
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {} /* (interrupted: sleep the rest) */
  return 0;
}

/* zorch.isatty(file) -> whether a Lua file handle (io.stdout, io.stderr) is a terminal */
static int l_isatty(lua_State *L) {
  luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
  lua_pushboolean(L, s->closef != NULL && s->f != NULL && isatty(fileno(s->f)));
  return 1;
}

/* zorch._test_hook(name) -> the test hook's value (zorch_test_hook), or nil; a
   sandbox reads no environment, so none there */
static int l_test_hook(lua_State *L) {
  const char *v = lz_sandboxed(L) ? NULL : zorch_test_hook(luaL_checkstring(L, 1));
  if (v) lua_pushstring(L, v);
  else lua_pushnil(L);
  return 1;
}

static int l_set_num_threads(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 0 || n > ZORCH_MAX_THREADS)
    return luaL_argerror(L, 1, lua_pushfstring(L, "threads must be 0 (one per core) to %d, got %I", ZORCH_MAX_THREADS, n));
  lz_refuse_in_sandbox(L, "set_num_threads");
  zorch_set_num_threads((int)n);
  return 0;
}
static int l_get_num_threads(lua_State *L) { return lua_pushinteger(L, zorch_get_num_threads()), 1; }
static int l_blas_info(lua_State *L) { return lua_pushstring(L, zorch_blas_info()), 1; }
/* ---- zorch.cuda ---------------------------------------------------------------- */
static int cuda_dev_arg(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) == LUA_TSTRING) {
    zorch_device d;
    if (zorch_device_parse(lua_tostring(L, idx), &d) || d.type != ZORCH_CUDA)
      return luaL_error(L, "zorch.cuda: bad device '%s' (expected cuda or cuda:N)", lua_tostring(L, idx));
    return d.index;
  }
  return (int)luaL_checkinteger(L, idx);
}
#define CUDA_OR_RAISE(L, call, fn) \
  if (call) return luaL_error(L, "zorch.cuda.%s: %s", fn, zorch_last_error())

/* zorch.cuda.memory_stats([device]) -> {in_use, cached, peak, mallocs} in bytes */
static int l_cuda_memory_stats(lua_State *L) {
  zorch_cuda_memory m;
  CUDA_OR_RAISE(L, zorch_cuda_memory_stats(cuda_dev_arg(L, 1), &m), "memory_stats");
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)m.in_use), lua_setfield(L, -2, "in_use");
  lua_pushinteger(L, (lua_Integer)m.cached), lua_setfield(L, -2, "cached");
  lua_pushinteger(L, (lua_Integer)m.peak), lua_setfield(L, -2, "peak");
  lua_pushinteger(L, (lua_Integer)m.mallocs), lua_setfield(L, -2, "mallocs");
  return 1;
}
static int l_cuda_empty_cache(lua_State *L) {
  CUDA_OR_RAISE(L, zorch_cuda_empty_cache(cuda_dev_arg(L, 1)), "empty_cache");
  return 0;
}
static int l_cuda_synchronize(lua_State *L) {
  CUDA_OR_RAISE(L, zorch_cuda_synchronize(cuda_dev_arg(L, 1)), "synchronize");
  return 0;
}
static int l_cuda_available(lua_State *L) {
  return lua_pushboolean(L, zorch_device_available((zorch_device){ZORCH_CUDA, 0})), 1;
}
static int l_cuda_built(lua_State *L) { return lua_pushboolean(L, zorch_cuda_built()), 1; }
static int l_cuda_device_count(lua_State *L) { return lua_pushinteger(L, zorch_cuda_device_count()), 1; }
/* zorch.cuda.info() -> what the CUDA backend is (the module loaded, or why not) */
static int l_cuda_info(lua_State *L) { return lua_pushstring(L, zorch_cuda_info()), 1; }
/* zorch.cuda.allow_tf32([on]) -> whether float32 matmul may use TF32 */
static int l_cuda_tf32(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    lz_refuse_in_sandbox(L, "cuda.allow_tf32");
    zorch_cuda_set_tf32(lua_toboolean(L, 1));
  }
  return lua_pushboolean(L, zorch_cuda_tf32()), 1;
}
static const luaL_Reg cuda_fns[] = {{"available", l_cuda_available},   {"built", l_cuda_built},
                                    {"device_count", l_cuda_device_count}, {"memory_stats", l_cuda_memory_stats},
                                    {"empty_cache", l_cuda_empty_cache}, {"synchronize", l_cuda_synchronize},
                                    {"allow_tf32", l_cuda_tf32},        {"info", l_cuda_info},
                                    {NULL, NULL}};

static int l_is_tensor(lua_State *L) { return lua_pushboolean(L, zorch_to_tensor(L, 1) != NULL), 1; }

static const luaL_Reg misc[] = {{"_adam_step", l_adam_step}, {"_sgd_step", l_sgd_step},
                                {"set_num_threads", l_set_num_threads},
                                {"get_num_threads", l_get_num_threads}, {"blas_info", l_blas_info},
                                {"is_tensor", l_is_tensor},  {"cuda_available", l_cuda_available}, {"clock", l_clock},
                                {"isatty", l_isatty},        {"_sleep", l_sleep},
                                {"_tensor_bytes", l_tensor_bytes}, {"_test_hook", l_test_hook},
                                {NULL, NULL}};

/* __newindex of the private table: names starting with '_' stay private,
   the others are the module's (a Lua module defining zorch.Foo).
   Upvalue 1: the module table. */
static int private_newindex(lua_State *L) {
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  lua_settop(L, 3);
  if (k && k[0] == '_') lua_rawset(L, 1);
  else lua_rawset(L, lua_upvalueindex(1));
  return 0;
}

/* Moves the helpers whose names start with '_' from the module table at z to
   a private table, which the embedded Lua modules get in its place: it reads
   through to the module table, and keeps what they define under '_' names.
   Scripts do not see it; trusted code finds it in the registry as
   "zorch.private". [-0, +1, m] */
static int open_private(lua_State *L, int z) {
  lua_newtable(L);
  int priv = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, z)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING && lua_tostring(L, -1)[0] == '_') {
      lua_pushvalue(L, -1);
      lua_pushvalue(L, -1);
      lua_rawget(L, z);
      lua_rawset(L, priv);
    }
  }
  lua_pushnil(L);
  while (lua_next(L, priv)) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, z);
  }
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, z);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, z);
  lua_pushcclosure(L, private_newindex, 1);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, priv);
  lua_pushvalue(L, priv);
  lua_setfield(L, LUA_REGISTRYINDEX, "zorch.private");
  return priv;
}

/* In a sandbox, the environment of the embedded modules: the globals as they
   are now, with the io and os of lz_push_module_io, reading through to the
   globals for anything defined later. Pushes it and returns its index, or
   returns 0 and pushes nothing outside a sandbox. */
static int open_module_env(lua_State *L) {
  lz_vm *vm = lz_vm_get(L);
  if (!vm || !vm->sandbox) return 0;
  lua_newtable(L);
  int env = lua_gettop(L);
  lua_pushglobaltable(L);
  int g = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, g)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, env);
  }
  lz_push_module_io(L);
  lua_setfield(L, env, "os");
  lua_setfield(L, env, "io");
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, g);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, env);
  lua_settop(L, env);
  return env;
}

/* zorch._require(name): an embedded module (zorch.nn.loss), loaded once as
   `require` would: its chunk, named after the installed file (@zorch/nn/loss.lua),
   gets the private table and the name, and what it returns (true for nothing)
   is package.loaded[name]; a top-level one's table (zorch.nn) is also the
   module table's field. A module that needs another requires it, so the order
   of loading is the order of these calls. Upvalues: the private table, the
   module environment (or nil), the module table, the set of modules being loaded. */
static const lz_module *find_module(const char *name) {
  for (const lz_module *m = lz_modules; m->name; m++)
    if (strcmp(m->name, name) == 0) return m;
  return NULL;
}

static int l_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_settop(L, 1);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, 2, name) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  const lz_module *m = find_module(name);
  if (!m) return luaL_error(L, "zorch._require: no module '%s' in zorch", name);
  if (lua_getfield(L, lua_upvalueindex(4), name) != LUA_TNIL)
    return luaL_error(L, "zorch._require: module '%s' requires itself (a cycle of requires)", name);
  lua_pop(L, 1);
  lua_pushboolean(L, 1);
  lua_setfield(L, lua_upvalueindex(4), name);
  if (luaL_loadbuffer(L, m->src, m->len, m->chunk) != LUA_OK) return lua_error(L);
  if (!lua_isnil(L, lua_upvalueindex(2))) {
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_setupvalue(L, -2, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_call(L, 2, 1);
  lua_pushnil(L);
  lua_setfield(L, lua_upvalueindex(4), name);
  const char *field = name + 6; /* after "zorch." */
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  } else if (lua_istable(L, -1) && !strchr(field, '.')) {
    lua_pushvalue(L, -1);
    lua_setfield(L, lua_upvalueindex(3), field);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, 2, name);
  return 1;
}

/* zorch._parts(folder): the names of the embedded modules directly in a
   folder module (zorch._parts "zorch.nn" lists zorch.nn.loss, ...), sorted:
   a folder's init.lua loads its parts with it, so a new file is a new part. */
static int l_parts(lua_State *L) {
  size_t n;
  const char *folder = luaL_checklstring(L, 1, &n);
  lua_newtable(L);
  int k = 0;
  for (const lz_module *m = lz_modules; m->name; m++)
    if (strncmp(m->name, folder, n) == 0 && m->name[n] == '.' && !strchr(m->name + n + 1, '.')) {
      lua_pushstring(L, m->name);
      lua_rawseti(L, -2, ++k);
    }
  return 1;
}

int luaopen_zorch(lua_State *L) {
  luaL_checkversion(L);
  lz_open_tensor(L);
  lua_newtable(L);
  int z = lua_gettop(L);
  lz_open_functions(L);
  luaL_setfuncs(L, misc, 0);
  luaL_newlib(L, cuda_fns);
  lua_setfield(L, z, "cuda");
  lz_open_data(L);
  lz_open_zero(L);
  lz_open_files(L);
  lz_open_fs(L);
  lz_open_tboard(L);
  lz_open_gradfn(L);
  lz_open_offload(L);
  lz_open_dist(L);
  lz_open_tokenizer(L);
  lz_open_http(L);
  lua_pushliteral(L, ZORCH_VERSION);
  lua_setfield(L, z, "version");
  int priv = open_private(L, z);
  int env = open_module_env(L);
  /* the Lua modules: zorch._require loads each top-level one (zorch.nn, a
     folder's init.lua, which loads its parts; zorch.tensor) and whatever it
     requires first. lz_modules is sorted by path. */
  lua_pushvalue(L, priv);
  if (env) lua_pushvalue(L, env);
  else lua_pushnil(L);
  lua_pushvalue(L, z);
  lua_newtable(L);
  lua_pushcclosure(L, l_require, 4);
  lua_pushvalue(L, -1);
  lua_setfield(L, priv, "_require");
  int req = lua_gettop(L);
  lua_pushcfunction(L, l_parts);
  lua_setfield(L, priv, "_parts");
  for (const lz_module *m = lz_modules; m->name; m++) {
    if (strchr(m->name + 6, '.')) continue;
    lua_pushvalue(L, req);
    lua_pushstring(L, m->name);
    lua_call(L, 1, 0);
  }
  lua_settop(L, z);
  return 1;
}

void lz_push_private(lua_State *L, const char *name) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, "zorch.private") != LUA_TTABLE) luaL_error(L, "zorch is not open");
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  if (!lua_isfunction(L, -1)) luaL_error(L, "zorch has no helper %s", name);
}

int lz_open_module(lua_State *L, const char *name) {
  luaL_requiref(L, "zorch", luaopen_zorch, 0);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, name) == LUA_TNIL) return luaL_error(L, "module '%s' is not part of zorch", name);
  return 1;
}
