/* loffload.c: the optimizer-state store on NVMe (include/zorch_zero.h) for Lua:
   zorch.offload_store(dir, numel, chunk, buffer_count) -> store with
   store:adam(p, g, step, runs) (runs: {{first element from 0, count, opts}, ...}),
   store:get(m, v), store:put(m, v), store:zero(), store:bind(fd, p_off, g_off)
   (the parameters' file, offload_param), store:grad_scale(s) (the clip's
   factor for the next adam's bound gradient), store:stats(), store:close() (also at
   collection). lua/optim.lua's Adam steps through it once lua/offload.lua set
   it as the optimizer's state store. */
#include "lz.h"

#define OFFLOAD_MT "zorch.offload"

typedef struct {
  zorch_offload *o;
} offload_box;

static zorch_offload *check_store(lua_State *L) {
  offload_box *b = luaL_checkudata(L, 1, OFFLOAD_MT);
  if (!b->o) luaL_argerror(L, 1, "the optimizer state store was closed");
  return b->o;
}

static int l_open(lua_State *L) {
  const char *dir = lz_checkpath(L, 1);
  lz_check_path(L, dir, "write");
  lua_Integer numel = luaL_checkinteger(L, 2), chunk = luaL_checkinteger(L, 3), nbuf = luaL_checkinteger(L, 4);
  if (nbuf < 2 || nbuf > 32) luaL_argerror(L, 4, "buffer_count must be in 2..32");
  offload_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->o = NULL;
  lz_setmetatable(L, OFFLOAD_MT);
  if (!(b->o = zorch_offload_open(dir, numel, chunk, (int)nbuf))) return lz_fail(L);
  return 1;
}

static double opt_num(lua_State *L, int idx, const char *k, double def) {
  lz_getfield(L, idx, k);
  double v = lua_isnil(L, -1) ? def : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  return v;
}
static bool opt_bool(lua_State *L, int idx, const char *k) {
  lz_getfield(L, idx, k);
  bool v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static void check_opts(lua_State *L, int idx, zorch_adam_opts *k) {
  *k = (zorch_adam_opts){opt_num(L, idx, "lr", 1e-3), opt_num(L, idx, "beta1", 0.9), opt_num(L, idx, "beta2", 0.999),
                         opt_num(L, idx, "eps", 1e-8), opt_num(L, idx, "weight_decay", 0), opt_bool(L, idx, "decoupled"),
                         opt_bool(L, idx, "amsgrad"), opt_bool(L, idx, "no_bias_correction")};
}

static int l_adam(lua_State *L) {
  zorch_offload *o = check_store(L);
  luaL_checktype(L, 5, LUA_TTABLE);
  lua_Integer n = lz_len(L, 5);
  if (n < 0 || n > 1 << 20) luaL_argerror(L, 5, "too many runs");
  zorch_offload_run *runs = lua_newuserdatauv(L, sizeof *runs * (size_t)(n > 0 ? n : 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lz_geti(L, 5, i) != LUA_TTABLE) luaL_error(L, "store:adam: run %d must be {first, count, opts [, step]}", (int)i);
    lz_geti(L, -1, 1), lz_geti(L, -2, 2), lz_geti(L, -3, 3), lz_geti(L, -4, 4);
    if (!lua_isinteger(L, -4) || !lua_isinteger(L, -3) || !lua_istable(L, -2) ||
        !(lua_isnil(L, -1) || (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1)))
      luaL_error(L, "store:adam: run %d must be {first, count, opts [, step >= 1]}", (int)i);
    runs[i - 1].lo = lua_tointeger(L, -4), runs[i - 1].len = lua_tointeger(L, -3);
    runs[i - 1].step = lua_isnil(L, -1) ? 0 : lua_tointeger(L, -1);
    check_opts(L, lua_gettop(L) - 1, &runs[i - 1].k);
    lua_pop(L, 5);
  }
  if (zorch_offload_adam(o, lz_check(L, 2), lz_check(L, 3), luaL_checkinteger(L, 4), (int)n, runs)) return lz_fail(L);
  return 0;
}

/* store:grad_scale(s): the next adam's factor for the bound gradient */
static int l_grad_scale(lua_State *L) {
  zorch_offload_set_grad_scale(check_store(L), luaL_checknumber(L, 2));
  return 0;
}

static int l_bind(lua_State *L) {
  zorch_offload *o = check_store(L);
  if (zorch_offload_bind_params(o, (int)luaL_checkinteger(L, 2), luaL_checkinteger(L, 3), luaL_checkinteger(L, 4)))
    return lz_fail(L);
  return 0;
}

static int l_zero(lua_State *L) {
  if (zorch_offload_zero(check_store(L))) return lz_fail(L);
  return 0;
}

static int l_get(lua_State *L) {
  if (zorch_offload_get(check_store(L), lz_check(L, 2), lz_check(L, 3))) return lz_fail(L);
  return 0;
}

static int l_put(lua_State *L) {
  if (zorch_offload_put(check_store(L), lz_check(L, 2), lz_check(L, 3))) return lz_fail(L);
  return 0;
}

static int l_stats(lua_State *L) {
  zorch_offload_stats s;
  zorch_offload_get_stats(check_store(L), &s);
  lua_createtable(L, 0, 8);
  lua_pushnumber(L, s.step_s), lua_setfield(L, -2, "step_s");
  lua_pushstring(L, s.uring ? "io_uring" : "pread"), lua_setfield(L, -2, "io");
  lua_pushboolean(L, s.direct), lua_setfield(L, -2, "direct");
  lua_pushinteger(L, s.file_bytes), lua_setfield(L, -2, "file_bytes");
  lua_pushinteger(L, s.buffer_bytes), lua_setfield(L, -2, "buffer_bytes");
  lua_pushnumber(L, s.read_s), lua_setfield(L, -2, "read_s");
  lua_pushnumber(L, s.write_s), lua_setfield(L, -2, "write_s");
  lua_pushnumber(L, s.wait_s), lua_setfield(L, -2, "wait_s");
  lua_pushinteger(L, s.read_bytes), lua_setfield(L, -2, "read_bytes");
  lua_pushinteger(L, s.write_bytes), lua_setfield(L, -2, "write_bytes");
  return 1;
}

static int l_close(lua_State *L) {
  offload_box *b = luaL_checkudata(L, 1, OFFLOAD_MT);
  zorch_offload_close(b->o);
  b->o = NULL;
  return 0;
}

/* zorch._offload_probe(dir, bytes) -> write MB/s, read MB/s, direct (boolean) */
static int l_probe(lua_State *L) {
  const char *dir = lz_checkpath(L, 1);
  lz_check_path(L, dir, "write");
  double w, r;
  bool direct;
  if (zorch_offload_probe(dir, luaL_checkinteger(L, 2), &w, &r, &direct)) return lz_fail(L);
  lua_pushnumber(L, w);
  lua_pushnumber(L, r);
  lua_pushboolean(L, direct);
  return 3;
}

/* zorch._host_zeros(n, pin) -> a float32 CPU tensor of n zeros, and whether
   it is page-locked (pin: through the CUDA module; ordinary memory where
   there is no module, no GPU or the driver refuses) */
static int l_host_zeros(lua_State *L) {
  int64_t n = luaL_checkinteger(L, 1);
  if (n < 0) return luaL_argerror(L, 1, "the element count must be >= 0");
  bool pinned;
  lz_push(L, zorch_host_zeros(1, &n, ZORCH_F32, lua_toboolean(L, 2), &pinned));
  lua_pushboolean(L, pinned);
  return 2;
}

/* [-0, +0]: the store's metatable, and offload_store in the module table on top. */
void lz_open_offload(lua_State *L) {
  static const luaL_Reg methods[] = {{"adam", l_adam}, {"get", l_get}, {"put", l_put},
                                     {"zero", l_zero},   {"bind", l_bind}, {"stats", l_stats}, {"grad_scale", l_grad_scale}, {"close", l_close}, {NULL, NULL}};
  if (luaL_newmetatable(L, OFFLOAD_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__gc");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "offload_store");
  lua_pushcfunction(L, l_probe);
  lua_setfield(L, -2, "_offload_probe");
  lua_pushcfunction(L, l_host_zeros);
  lua_setfield(L, -2, "_host_zeros");
}
