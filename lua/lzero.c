/* lzero.c: what the Lua engine needs from C: collectives on tensors, flattening
   parameters into one buffer, and gradient-ready hooks that call Lua. */
#include <math.h>
#include <string.h>

#include "../vm/tensor.h"
#include "../zero/comm.h"
#include "lz.h"

static zero_comm *get_comm(lua_State *L) {
  zero_comm *c;
  if (comm_get(&c)) lz_fail(L);
  return c;
}

/* zorch._comm() -> rank (0-based), world size, backend name */
static int l_comm(lua_State *L) {
  zero_comm *c = get_comm(L);
  lua_pushinteger(L, c->rank);
  lua_pushinteger(L, c->world);
  lua_pushstring(L, c->backend);
  return 3;
}

static int l_allreduce(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  bool max = lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "max") == 0;
  if (comm_allreduce(get_comm(L), t, max)) return lz_fail(L);
  return 0;
}

/* zorch._reduce_scatter(send, recv, {count per rank}) */
static int l_reduce_scatter(lua_State *L) {
  zorch_tensor *send = lz_check(L, 1), *recv = lz_check(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  zero_comm *c = get_comm(L);
  int64_t *counts = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)c->world, 0);
  for (int r = 0; r < c->world; r++) {
    lua_geti(L, 3, r + 1);
    counts[r] = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
  }
  if (comm_reduce_scatter(c, send, recv, counts)) return lz_fail(L);
  return 0;
}

static int l_reduce_scatter_inplace(lua_State *L) {
  if (comm_reduce_scatter_inplace(get_comm(L), lz_check(L, 1))) return lz_fail(L);
  return 0;
}

static int l_allgather(lua_State *L) {
  if (comm_allgather(get_comm(L), lz_check(L, 1), lz_check(L, 2))) return lz_fail(L);
  return 0;
}

static int l_comm_bytes(lua_State *L) {
  zero_comm *c = get_comm(L);
  lua_pushinteger(L, (lua_Integer)c->sent);
  lua_pushinteger(L, (lua_Integer)c->recv);
  if (lua_toboolean(L, 1)) comm_reset_bytes(c);
  return 2;
}

/* zorch._flatten({params}, total, dtype?) -> flat: copies the parameters, in
   order, into one zero-padded buffer of `total` elements (of `dtype`, default
   theirs) and makes each a view of it. */
static int l_flatten(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int64_t total = luaL_checkinteger(L, 2);
  zorch_dtype want = ZORCH_NDTYPES;
  if (!lua_isnoneornil(L, 3) && zorch_dtype_parse(luaL_checkstring(L, 3), &want)) return lz_fail(L);
  int n = (int)luaL_len(L, 1);
  int64_t need = 0;
  zorch_dtype dt = ZORCH_F32;
  for (int i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    zorch_tensor *p = lz_check(L, -1);
    if (i == 1) dt = p->dtype;
    if (p->dtype != dt || (dt != ZORCH_F32 && dt != ZORCH_F64))
      return luaL_error(L, "engine: parameter %d is %s; parameters must all be float32 or all float64", i,
                        zorch_dtype_name(p->dtype));
    need += zorch_tensor_numel(p);
    lua_pop(L, 1);
  }
  if (need > total) return luaL_error(L, "engine: %d elements do not fit a buffer of %d", (int)need, (int)total);
  if (want != ZORCH_NDTYPES) dt = want;
  zorch_tensor *flat = zorch_zeros(1, &total, dt, (zorch_device){ZORCH_CPU, 0});
  if (!flat) return lz_fail(L);
  lz_push(L, flat);
  int64_t off = 0;
  for (int i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    zorch_tensor *p = lz_check(L, -1);
    int64_t k = zorch_tensor_numel(p);
    zorch_tensor *dst = tensor_alias(flat, p->ndim, p->shape, p->strides, off);
    if (!dst) return lz_fail(L);
    shape_contig_strides(p->ndim, p->shape, dst->strides);
    zorch_status st = zorch_copy_(dst, p);
    zorch_tensor_free(dst);
    if (st) return lz_fail(L);
    tensor_rebind(p, flat, off);
    off += k;
    lua_pop(L, 1);
  }
  return 1;
}

/* zorch._rebind({params}, flat | nil): parameters become views of `flat`, in
   order; with nil they are released onto a one-element NaN storage with zero
   strides (readable, never out of bounds, and visibly not the weights) until the
   next gather. */
static int l_rebind(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  zorch_tensor *flat = lua_isnoneornil(L, 2) ? NULL : lz_check(L, 2);
  int n = (int)luaL_len(L, 1);
  zorch_tensor *hold = NULL;
  int64_t off = 0;
  for (int i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    zorch_tensor *p = lz_check(L, -1);
    lua_pop(L, 1);
    int64_t k = zorch_tensor_numel(p);
    if (flat) {
      if (off + k > zorch_tensor_numel(flat) || flat->dtype != p->dtype)
        return luaL_error(L, "engine: the flat buffer does not fit parameter %d", i);
      tensor_rebind(p, flat, flat->offset + off);
    } else {
      if (!hold && !(hold = zorch_full(0, NULL, NAN, p->dtype, (zorch_device){ZORCH_CPU, 0}))) return lz_fail(L);
      tensor_rebind(p, hold, 0);
      for (int d = 0; d < p->ndim; d++) p->strides[d] = 0;
    }
    off += k;
  }
  zorch_tensor_free(hold);
  return 0;
}

/* ---- gradient-ready hooks that call Lua ------------------------------------------ */
static const char HOOKS = 'h'; /* registry key of {lightuserdata(tensor) = fn} */

static zorch_status call_lua_hook(zorch_tensor *leaf, void *ud) {
  lua_State *L = ud;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &HOOKS);
  lua_rawgetp(L, -1, leaf);
  lua_remove(L, -2);
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return ZORCH_OK;
  }
  lz_push(L, zorch_tensor_retain(leaf));
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    zorch_status st = err_set(ZORCH_ERR_STATE, "gradient hook: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return st;
  }
  return ZORCH_OK;
}

/* t:register_hook(fn): fn(t) runs once t's gradient is final in a backward pass;
   nil removes it. */
static int l_register_hook(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  if (!lua_isnil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  if (!zorch_is_leaf(t)) return luaL_error(L, "register_hook: hooks go on leaf tensors only");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &HOOKS);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &HOOKS);
  }
  lua_pushvalue(L, 2);
  lua_rawsetp(L, -2, t);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(L, -1);
  if (zorch_set_grad_hook(t, lua_isnil(L, 2) ? NULL : call_lua_hook, main)) return lz_fail(L);
  return 0;
}

/* MPI is finalised when the Lua state closes. */
static int l_finalize(lua_State *L) {
  (void)L;
  comm_finalize();
  return 0;
}

void lz_open_zero(lua_State *L) {
  lua_newuserdatauv(L, 1, 0);
  lua_newtable(L);
  lua_pushcfunction(L, l_finalize);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "zorch.finalizer");
  static const luaL_Reg fns[] = {{"_comm", l_comm},           {"_allreduce", l_allreduce},
                                 {"_reduce_scatter", l_reduce_scatter}, {"_allgather", l_allgather},
                                 {"_reduce_scatter_inplace", l_reduce_scatter_inplace},
                                 {"_comm_bytes", l_comm_bytes}, {"_flatten", l_flatten}, {"_rebind", l_rebind},
                                 {"register_hook", l_register_hook}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  luaL_getmetatable(L, LZ_TENSOR);
  lua_getfield(L, -1, "__methods");
  lua_pushcfunction(L, l_register_hook);
  lua_setfield(L, -2, "register_hook");
  lua_pop(L, 2);
}
