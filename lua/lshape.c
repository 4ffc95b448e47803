/* lshape.c: the Lua functions and methods of repeat_interleave, unbind,
   movedim and its aliases, unflatten, pad, eye and linspace (ops/def/rearrange.c,
   patterns.c). Dims and
   classes are 1-based here, as everywhere in Lua. Every argument is read
   before a tensor is made, so that a Lua error leaks nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lz.h"

#define T(i) lz_check(L, i)
#define PUSH(x) return lz_push(L, (x))

/* dims: nil (none given), a number, or a table of numbers; 0-based out */
static int opt_dims(lua_State *L, int idx, int *dims) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    dims[0] = lz_dim(L, idx);
    return 1;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer n = lz_len(L, idx);
  if (n > ZORCH_MAX_DIMS) luaL_argerror(L, idx, "too many dims (at most 8)");
  for (int i = 0; i < (int)n; i++) {
    lz_geti(L, idx, i + 1);
    dims[i] = lz_dim(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  return (int)n;
}

/* ---- shape ops ---------------------------------------------------------------------------- */
/* repeat_interleave(x, n | counts, dim?): counts an int64 tensor */
static int f_repeat_interleave(lua_State *L) {
  zorch_tensor *x = T(1), *r = zorch_to_tensor(L, 2);
  lua_Integer n = r ? 0 : luaL_checkinteger(L, 2);
  int d = lua_isnoneornil(L, 3) ? 0 : lz_dim(L, 3);
  const int *dp = lua_isnoneornil(L, 3) ? NULL : &d;
  if (r) PUSH(zorch_repeat_interleave_tensor(x, T(2), dp));
  PUSH(zorch_repeat_interleave(x, n, dp));
}
/* unbind(x, dim = 1): a list of views */
static int f_unbind(lua_State *L) {
  zorch_tensor *x = T(1);
  int d = lua_isnoneornil(L, 2) ? 0 : lz_dim(L, 2), w;
  if (zorch_tensor_ndim(x) == 0) {
    zorch_unbind(x, d, NULL); /* sets its error */
    return lz_fail(L);
  }
  if (zorch_wrap_dim("unbind", d, zorch_tensor_ndim(x), 0, &w)) return lz_fail(L);
  int64_t n = zorch_tensor_shape(x)[w];
  lua_createtable(L, (int)n, 0);
  zorch_tensor **parts = lua_newuserdatauv(L, sizeof *parts * (size_t)(n ? n : 1), 0);
  if (zorch_unbind(x, d, parts)) return lz_fail(L);
  for (int64_t i = 0; i < n; i++) { /* each push takes its reference */
    lz_push(L, parts[i]);
    lua_rawseti(L, -3, i + 1);
  }
  lua_pop(L, 1);
  return 1;
}
/* movedim(x, src, dst): numbers or tables of numbers */
static int f_movedim(lua_State *L) {
  zorch_tensor *x = T(1);
  int s[ZORCH_MAX_DIMS], t[ZORCH_MAX_DIMS];
  luaL_checkany(L, 2);
  luaL_checkany(L, 3);
  int ns = opt_dims(L, 2, s), nt = opt_dims(L, 3, t);
  if (ns != nt) return luaL_error(L, "movedim: %d source dims for %d destinations", ns, nt);
  PUSH(zorch_movedim(x, ns, s, t));
}
/* Pushes t, or raises the last error with `op` in front (the aliases below
   are made of other ops, whose names their messages would carry). */
static int push_as(lua_State *L, zorch_tensor *t, const char *op) {
  if (!t) zorch_error_prefix(op);
  PUSH(t);
}
static int swap(lua_State *L, const char *op) {
  zorch_tensor *x = T(1);
  int a = lz_dim(L, 2), b = lz_dim(L, 3);
  return push_as(L, zorch_transpose(x, a, b), op);
}
static int f_swapaxes(lua_State *L) { return swap(L, "swapaxes"); }
static int f_swapdims(lua_State *L) { return swap(L, "swapdims"); }
/* unflatten(x, dim, sizes) */
static int f_unflatten(lua_State *L) {
  zorch_tensor *x = T(1);
  int d = lz_dim(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  int64_t sizes[ZORCH_MAX_DIMS];
  int n = lz_ints(L, 3, sizes, ZORCH_MAX_DIMS);
  PUSH(zorch_unflatten(x, d, n, sizes));
}
/* broadcast_to(x, sizes): expand's rules */
static int f_broadcast_to(lua_State *L) {
  zorch_tensor *x = T(1);
  int64_t shape[ZORCH_MAX_DIMS];
  int n = lz_sizes(L, 2, shape);
  return push_as(L, zorch_expand(x, n, shape), "broadcast_to");
}
static int f_expand_as(lua_State *L) {
  zorch_tensor *x = T(1), *o = T(2);
  return push_as(L, zorch_expand(x, zorch_tensor_ndim(o), zorch_tensor_shape(o)), "expand_as");
}
static int f_view_as(lua_State *L) {
  zorch_tensor *x = T(1), *o = T(2);
  return push_as(L, zorch_view(x, zorch_tensor_ndim(o), zorch_tensor_shape(o)), "view_as");
}
static int f_type_as(lua_State *L) {
  zorch_tensor *x = T(1), *o = T(2);
  return push_as(L, zorch_to_dtype(x, zorch_tensor_dtype(o)), "type_as");
}
/* pad(x, pads, mode = "constant", value = 0) */
static int f_pad(lua_State *L) {
  static const char *const modes[] = {"constant", "reflect", "replicate", "circular", NULL};
  zorch_tensor *x = T(1);
  luaL_checktype(L, 2, LUA_TTABLE);
  int64_t pads[2 * ZORCH_MAX_DIMS];
  int n = lz_ints(L, 2, pads, 2 * ZORCH_MAX_DIMS);
  zorch_pad_mode mode = (zorch_pad_mode)luaL_checkoption(L, 3, "constant", modes);
  double value = luaL_optnumber(L, 4, 0);
  if (mode != ZORCH_PAD_CONSTANT && !lua_isnoneornil(L, 4) && value != 0)
    return luaL_error(L, "pad: mode '%s' takes no value (only 'constant' fills)", modes[mode]);
  PUSH(zorch_pad(x, n, pads, mode, value));
}

/* ---- creation ------------------------------------------------------------------------------ */
static int push_new(lua_State *L, zorch_tensor *t, const lz_opts *o) {
  if (t && o->requires_grad && zorch_set_requires_grad(t, true)) {
    zorch_tensor_free(t);
    t = NULL;
  }
  PUSH(t);
}
/* eye(n, m?, opts) */
static int f_eye(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1), m = -1;
  int oi = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) m = luaL_checkinteger(L, 2), oi = 3;
  if (m == -1 && oi == 3) return luaL_argerror(L, 2, "eye: m must be >= 0");
  lz_opts o;
  lz_get_opts(L, oi, &o, ZORCH_F32);
  return push_new(L, zorch_eye(n, m, o.dtype, o.device), &o);
}
/* linspace(start, end, steps, opts) */
static int f_linspace(lua_State *L) {
  double a = luaL_checknumber(L, 1), b = luaL_checknumber(L, 2);
  lua_Integer steps = luaL_checkinteger(L, 3);
  lz_opts o;
  lz_get_opts(L, 4, &o, ZORCH_F32);
  return push_new(L, zorch_linspace(a, b, steps, o.dtype, o.device), &o);
}
/* logspace(start, end, steps, base = 10, opts) */
static int f_logspace(lua_State *L) {
  double a = luaL_checknumber(L, 1), b = luaL_checknumber(L, 2), base = 10;
  lua_Integer steps = luaL_checkinteger(L, 3);
  int oi = 4;
  if (lua_type(L, 4) == LUA_TNUMBER) base = lua_tonumber(L, 4), oi = 5;
  lz_opts o;
  lz_get_opts(L, oi, &o, ZORCH_F32);
  return push_new(L, zorch_logspace(a, b, steps, base, o.dtype, o.device), &o);
}
static const luaL_Reg both[] = {
    {"repeat_interleave", f_repeat_interleave}, {"unbind", f_unbind},
    {"movedim", f_movedim}, {"moveaxis", f_movedim}, {"swapaxes", f_swapaxes}, {"swapdims", f_swapdims}, {"unflatten", f_unflatten},
    {"broadcast_to", f_broadcast_to}, {"expand_as", f_expand_as}, {"view_as", f_view_as}, {"type_as", f_type_as},
    {"pad", f_pad}, {NULL, NULL}};

static const luaL_Reg functions_only[] = {
    {"eye", f_eye}, {"linspace", f_linspace}, {"logspace", f_logspace}, {NULL, NULL}};

/* [-0, +0]: adds the functions to the module table at `module` and the methods
   to `methods`; tolist is totable's other name. */
void lz_open_shape(lua_State *L, int module, int methods) {
  lua_pushvalue(L, module);
  luaL_setfuncs(L, both, 0);
  luaL_setfuncs(L, functions_only, 0);
  lz_getfield(L, -1, "totable");
  lua_setfield(L, -2, "tolist");
  lua_pop(L, 1);
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, both, 0);
  lz_getfield(L, -1, "totable");
  lua_setfield(L, -2, "tolist");
  lua_pop(L, 1);
}
