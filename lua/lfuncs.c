/* lfuncs.c: every core op as a Lua function (zorch.relu(x)) and, where natural,
   a method (x:relu()). Thin: check arguments, call the core, push results. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lz.h"

#define T(i) lz_check(L, i)
#define PUSH(x) return lz_push(L, (x))

/* ---- creation ------------------------------------------------------------------- */
/* The arguments of the constructors: sizes (a table or numbers), the value for
   full, then an options table. */
typedef struct {
  int ndim;
  int64_t shape[ZORCH_MAX_DIMS];
  double value;
  bool int_value; /* the value is a Lua integer, kept whole in ivalue */
  int64_t ivalue;
  lz_opts o;
} new_args;

static new_args check_new_args(lua_State *L, bool with_value) {
  new_args a = {0};
  a.ndim = lz_sizes(L, 1, a.shape);
  int oi = lua_istable(L, 1) ? 2 : a.ndim + 1;
  if (with_value) {
    a.value = luaL_checknumber(L, oi);
    if ((a.int_value = lua_isinteger(L, oi))) a.ivalue = lua_tointeger(L, oi);
    oi++;
  }
  lz_get_opts(L, oi, &a.o, ZORCH_F32);
  return a;
}

/* Pushes a new tensor, first made a leaf requiring grad when the options ask. */
static int push_new(lua_State *L, zorch_tensor *t, const lz_opts *o) {
  if (t && o->requires_grad && zorch_set_requires_grad(t, true)) {
    zorch_tensor_free(t);
    t = NULL;
  }
  PUSH(t);
}

static int f_zeros(lua_State *L) {
  new_args a = check_new_args(L, false);
  return push_new(L, zorch_zeros(a.ndim, a.shape, a.o.dtype, a.o.device), &a.o);
}

/* empty(shape, opts): values unset (host memory the system hands out on first
   touch: nn.deferred's parameters) */
static int f_empty(lua_State *L) {
  new_args a = check_new_args(L, false);
  return push_new(L, zorch_empty(a.ndim, a.shape, a.o.dtype, a.o.device), &a.o);
}

static int f_ones(lua_State *L) {
  new_args a = check_new_args(L, false);
  return push_new(L, zorch_ones(a.ndim, a.shape, a.o.dtype, a.o.device), &a.o);
}

static int f_full(lua_State *L) {
  new_args a = check_new_args(L, true);
  return push_new(L, a.int_value ? zorch_full_i64(a.ndim, a.shape, a.ivalue, a.o.dtype, a.o.device)
                                 : zorch_full(a.ndim, a.shape, a.value, a.o.dtype, a.o.device), &a.o);
}

static int f_rand(lua_State *L) {
  new_args a = check_new_args(L, false);
  return push_new(L, zorch_rand(a.ndim, a.shape, a.o.dtype, a.o.device, NULL), &a.o);
}

static int f_randn(lua_State *L) {
  new_args a = check_new_args(L, false);
  return push_new(L, zorch_randn(a.ndim, a.shape, a.o.dtype, a.o.device, NULL), &a.o);
}

/* ---- zeros_like, ones_like, full_like, rand_like, randn_like ---------------------------- */
/* x's shape; x's dtype and device unless the options table at oi names them. */
typedef enum { LIKE_ZEROS, LIKE_ONES, LIKE_FULL, LIKE_RAND, LIKE_RANDN } like_kind;
static int new_like(lua_State *L, like_kind k) {
  zorch_tensor *x = T(1);
  double value = k == LIKE_FULL ? luaL_checknumber(L, 2) : 0;
  int oi = k == LIKE_FULL ? 3 : 2;
  lz_opts o;
  lz_get_opts(L, oi, &o, zorch_tensor_dtype(x));
  bool device_given = false;
  if (lua_istable(L, oi)) {
    device_given = lz_getfield(L, oi, "device") != LUA_TNIL;
    lua_pop(L, 1);
  }
  if (!device_given) o.device = zorch_tensor_device(x);
  if ((k == LIKE_RAND || k == LIKE_RANDN) && !zorch_dtype_is_float(o.dtype))
    return luaL_error(L, "%s: needs a floating-point dtype, got %s", k == LIKE_RAND ? "rand_like" : "randn_like",
                      zorch_dtype_name(o.dtype));
  int nd = zorch_tensor_ndim(x);
  const int64_t *shape = zorch_tensor_shape(x);
  zorch_tensor *t = k == LIKE_ZEROS  ? zorch_zeros(nd, shape, o.dtype, o.device)
                    : k == LIKE_ONES ? zorch_ones(nd, shape, o.dtype, o.device)
                    : k == LIKE_FULL ? zorch_full(nd, shape, value, o.dtype, o.device)
                    : k == LIKE_RAND ? zorch_rand(nd, shape, o.dtype, o.device, NULL)
                                     : zorch_randn(nd, shape, o.dtype, o.device, NULL);
  return push_new(L, t, &o);
}
static int f_zeros_like(lua_State *L) { return new_like(L, LIKE_ZEROS); }
static int f_ones_like(lua_State *L) { return new_like(L, LIKE_ONES); }
static int f_full_like(lua_State *L) { return new_like(L, LIKE_FULL); }
static int f_rand_like(lua_State *L) { return new_like(L, LIKE_RAND); }
static int f_randn_like(lua_State *L) { return new_like(L, LIKE_RANDN); }

/* randperm(n, opts): a random permutation of 1..n (int64 unless opts say) */
static int f_randperm(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  lz_opts o;
  lz_get_opts(L, 2, &o, ZORCH_I64);
  if ((o.dtype == ZORCH_U8 && n > 255) || (o.dtype == ZORCH_I8 && n > 127) || (o.dtype == ZORCH_I32 && n > INT32_MAX))
    return luaL_error(L, "randperm: values from 1 to %I do not all fit %s", n, zorch_dtype_name(o.dtype));
  zorch_tensor *p = zorch_randperm(n, ZORCH_I64, o.device, NULL);
  zorch_tensor *p1 = p ? zorch_add_scalar(p, 1) : NULL;
  zorch_tensor_free(p);
  zorch_tensor *r = p1 ? zorch_to_dtype(p1, o.dtype) : NULL;
  zorch_tensor_free(p1);
  return push_new(L, r, &o);
}

/* randint([low,] high, sizes_table, opts): integers in [low, high], both
   included as in math.random (low 1 by default: 1-based indices of a dim of
   size high); int64 unless opts say. */
static int f_randint(lua_State *L) {
  int si = lua_istable(L, 2) ? 2 : 3;
  lua_Integer low = si == 3 ? luaL_checkinteger(L, 1) : 1;
  lua_Integer high = luaL_checkinteger(L, si - 1);
  luaL_checktype(L, si, LUA_TTABLE);
  int64_t shape[ZORCH_MAX_DIMS];
  int nd = lz_sizes(L, si, shape);
  lz_opts o;
  lz_get_opts(L, si + 1, &o, ZORCH_I64);
  if (high < low)
    return luaL_error(L, "randint: high (%I) must be at least low (%I)", high, low);
  if (high == LUA_MAXINTEGER) return luaL_argerror(L, si - 1, "high must be below math.maxinteger");
  return push_new(L, zorch_randint(low, high + 1, nd, shape, o.dtype, o.device, NULL), &o);
}

static int f_arange(lua_State *L) {
  int top = lua_gettop(L), oi = top;
  while (oi > 0 && lua_type(L, oi) != LUA_TNUMBER) oi--;
  double a = luaL_checknumber(L, 1), b = 0, s = 1;
  if (oi >= 2) b = luaL_checknumber(L, 2);
  else b = a, a = 0;
  if (oi >= 3) s = luaL_checknumber(L, 3);
  lz_opts o;
  bool ints = a == (long long)a && b == (long long)b && s == (long long)s;
  lz_get_opts(L, oi + 1, &o, ints ? ZORCH_I64 : ZORCH_F32);
  /* Lua integers go the int64 way, exact beyond 2^53 */
  bool lua_ints = true;
  for (int i = 1; i <= oi; i++) lua_ints = lua_ints && lua_isinteger(L, i);
  if (lua_ints) {
    lua_Integer ia = lua_tointeger(L, 1), ib = oi >= 2 ? lua_tointeger(L, 2) : 0;
    if (oi < 2) ib = ia, ia = 0;
    PUSH(zorch_arange_i64(ia, ib, oi >= 3 ? lua_tointeger(L, 3) : 1, o.dtype, o.device));
  }
  PUSH(zorch_arange(a, b, s, o.dtype, o.device));
}

/* zorch.tensor{{1, 2}, {3, 4}}: the shape from the nesting, the dtype from the
   values (all integers: int64, booleans: bool, else float32) unless given. */
static void nested_shape(lua_State *L, int idx, int depth, int64_t *shape, int *nd) {
  if (depth >= ZORCH_MAX_DIMS) luaL_error(L, "tensor: nested more than 8 deep");
  int64_t n = (int64_t)lz_len(L, idx);
  if (depth >= *nd) {
    shape[depth] = n;
    *nd = depth + 1;
  } else if (shape[depth] != n) {
    luaL_error(L, "tensor: ragged nested table (dim %d has %d and %d entries)", depth + 1,
               (int)shape[depth], (int)n);
  }
  if (n > 0) {
    lz_geti(L, idx, 1);
    if (lua_istable(L, -1)) nested_shape(L, lua_gettop(L), depth + 1, shape, nd);
    lua_pop(L, 1);
  }
}

/* Writes the values in order into 8-byte cells: integers and booleans as
   int64_t (all 64 bits kept), other numbers as double; with as_double every
   value as double (for tables that mix integers and floats). */
static void nested_fill(lua_State *L, int idx, int depth, int nd, const int64_t *shape,
                        int64_t *out, int64_t *pos, int *kind, bool as_double) {
  if ((int64_t)lz_len(L, idx) != shape[depth])
    luaL_error(L, "tensor: ragged nested table (dim %d has %d and %d entries)", depth + 1,
               (int)shape[depth], (int)lz_len(L, idx));
  for (int64_t i = 1; i <= shape[depth]; i++) {
    lz_geti(L, idx, i);
    if (depth + 1 < nd) {
      if (!lua_istable(L, -1)) luaL_error(L, "tensor: ragged nested table at dim %d", depth + 2);
      nested_fill(L, lua_gettop(L), depth + 1, nd, shape, out, pos, kind, as_double);
    } else if (lua_type(L, -1) == LUA_TNUMBER || lua_isboolean(L, -1)) {
      bool isbool = lua_isboolean(L, -1), isint = !isbool && lua_isinteger(L, -1);
      *kind |= isbool ? 4 : isint ? 1 : 2;
      if (!as_double && (isbool || isint)) {
        out[(*pos)++] = isbool ? lua_toboolean(L, -1) : lua_tointeger(L, -1);
      } else {
        double d = isbool ? lua_toboolean(L, -1) : lua_tonumber(L, -1);
        memcpy(&out[(*pos)++], &d, sizeof d);
      }
    } else {
      luaL_error(L, "tensor: expected numbers or booleans, got %s", luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
}

static int f_tensor(lua_State *L) {
  if (lua_type(L, 1) == LUA_TNUMBER || lua_isboolean(L, 1)) {
    lz_opts o;
    int isint = lua_isinteger(L, 1);
    lz_get_opts(L, 2, &o, lua_isboolean(L, 1) ? ZORCH_BOOL : isint ? ZORCH_I64 : ZORCH_F32);
    double v = lua_isboolean(L, 1) ? lua_toboolean(L, 1) : lua_tonumber(L, 1);
    int64_t iv = lua_tointeger(L, 1);
    if (isint ? zorch_check_fill_i64("tensor", o.dtype, &iv) : zorch_check_fill("tensor", o.dtype, &v)) return lz_fail(L);
    zorch_tensor *t = isint ? zorch_full_i64(0, NULL, iv, o.dtype, o.device) : zorch_full(0, NULL, v, o.dtype, o.device);
    if (t && o.requires_grad && zorch_set_requires_grad(t, true)) zorch_tensor_free(t), t = NULL;
    PUSH(t);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2); /* the options stay at 2, scratch goes above */
  int64_t shape[ZORCH_MAX_DIMS];
  int nd = 0;
  nested_shape(L, 1, 0, shape, &nd);
  int64_t n = 1;
  for (int i = 0; i < nd; i++) {
    if (shape[i] && n > (int64_t)(SIZE_MAX / sizeof(int64_t)) / shape[i])
      return luaL_error(L, "tensor: the nested tables hold too many values");
    n *= shape[i];
  }
  int64_t *v = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
  int64_t pos = 0;
  int kind = 0;
  nested_fill(L, 1, 0, nd, shape, v, &pos, &kind, false);
  if ((kind & 2) && (kind & 5)) { /* floats among integers: all as doubles */
    pos = 0;
    nested_fill(L, 1, 0, nd, shape, v, &pos, &kind, true);
  }
  lz_opts o;
  lz_get_opts(L, 2, &o, kind == 4 ? ZORCH_BOOL : (kind & 2) || kind == 0 ? ZORCH_F32 : ZORCH_I64);
  if (o.dtype == ZORCH_I32 || o.dtype == ZORCH_I64 || o.dtype == ZORCH_U8 || o.dtype == ZORCH_I8) /* values the dtype cannot hold */
    for (int64_t i = 0; i < n; i++) {
      double dv;
      memcpy(&dv, &v[i], sizeof dv);
      if (kind & 2 ? zorch_check_fill("tensor", o.dtype, &dv) : zorch_check_fill_i64("tensor", o.dtype, &v[i]))
        return lz_fail(L);
      if (kind & 2) memcpy(&v[i], &dv, sizeof dv);
    }
  zorch_tensor *d = zorch_from_buffer(v, nd, shape, kind & 2 ? ZORCH_F64 : ZORCH_I64);
  zorch_tensor *t = d ? zorch_to_dtype(d, o.dtype) : NULL;
  zorch_tensor_free(d);
  if (t && o.device.type != ZORCH_CPU) {
    zorch_tensor *m = zorch_to_device(t, o.device);
    zorch_tensor_free(t);
    t = m;
  }
  if (t && o.requires_grad && zorch_set_requires_grad(t, true)) zorch_tensor_free(t), t = NULL;
  PUSH(t);
}

/* ---- reading values ------------------------------------------------------------------ */
/* Values leave as Lua numbers of their kind: integer dtypes through int64,
   exact (a double is not past 2^53), floats through double. v holds 8-byte
   cells of one kind or the other. */
static void push_value(lua_State *L, zorch_dtype dt, const void *cell) {
  if (dt == ZORCH_BOOL) lua_pushboolean(L, *(const int64_t *)cell != 0);
  else if (!zorch_dtype_is_float(dt)) lua_pushinteger(L, (lua_Integer) * (const int64_t *)cell);
  else lua_pushnumber(L, *(const double *)cell);
}

static zorch_status values_out(const zorch_tensor *t, void *v, int64_t n) {
  return zorch_dtype_is_float(zorch_tensor_dtype(t)) ? zorch_tensor_to_doubles(t, v, n)
                                                      : zorch_tensor_to_i64s(t, v, n);
}

static int m_item(lua_State *L) {
  zorch_tensor *t = T(1);
  int64_t v;
  if (zorch_tensor_numel(t) != 1) {
    double unused;
    if (zorch_tensor_item(t, &unused)) return lz_fail(L); /* its message names the shape */
  }
  if (values_out(t, &v, 1)) return lz_fail(L);
  push_value(L, zorch_tensor_dtype(t), &v);
  return 1;
}

static void totable_rec(lua_State *L, const zorch_tensor *t, const int64_t *v, int d, int64_t *pos) {
  int nd = zorch_tensor_ndim(t);
  int64_t n = zorch_tensor_shape(t)[d];
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 1; i <= n; i++) {
    if (d + 1 < nd) totable_rec(L, t, v, d + 1, pos);
    else push_value(L, zorch_tensor_dtype(t), &v[(*pos)++]);
    lua_rawseti(L, -2, i);
  }
}

static int m_totable(lua_State *L) {
  zorch_tensor *t = T(1);
  if (zorch_tensor_ndim(t) == 0) return m_item(L);
  int64_t n = zorch_tensor_numel(t);
  int64_t *v = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
  if (values_out(t, v, n)) return lz_fail(L);
  int64_t pos = 0;
  totable_rec(L, t, v, 0, &pos);
  return 1;
}

static int m_size(lua_State *L) {
  zorch_tensor *t = T(1);
  if (!lua_isnoneornil(L, 2)) {
    int d;
    if (zorch_tensor_ndim(t) == 0) return luaL_error(L, "size: a 0-d tensor has no dims");
    if (zorch_wrap_dim("size", lz_dim(L, 2), zorch_tensor_ndim(t), 0, &d)) return lz_fail(L);
    lua_pushinteger(L, zorch_tensor_shape(t)[d]);
    return 1;
  }
  return lz_push_shape(L, t);
}

static int m_dim(lua_State *L) { return lua_pushinteger(L, zorch_tensor_ndim(T(1))), 1; }
static int m_numel(lua_State *L) { return lua_pushinteger(L, zorch_tensor_numel(T(1))), 1; }
static int m_dtype(lua_State *L) {
  return lua_pushstring(L, zorch_dtype_name(zorch_tensor_dtype(T(1)))), 1;
}
static int m_device(lua_State *L) {
  char b[32];
  zorch_device_name(zorch_tensor_device(T(1)), b, sizeof b);
  return lua_pushstring(L, b), 1;
}
static int m_is_contiguous(lua_State *L) { return lua_pushboolean(L, zorch_tensor_is_contiguous(T(1))), 1; }

/* x:to("float64"), x:to("cuda"), x:to{dtype=, device=} */
static int m_to(lua_State *L) {
  zorch_tensor *t = T(1);
  zorch_dtype dt = zorch_tensor_dtype(t);
  zorch_device dev = zorch_tensor_device(t);
  if (lua_istable(L, 2)) {
    lz_opts o;
    lz_get_opts(L, 2, &o, dt);
    dt = o.dtype;
    lz_getfield(L, 2, "device");
    if (!lua_isnil(L, -1)) dev = o.device;
    lua_pop(L, 1);
  } else {
    const char *s = luaL_checkstring(L, 2);
    if (zorch_dtype_parse(s, &dt) != ZORCH_OK && zorch_device_parse(s, &dev) != ZORCH_OK)
      return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is neither a dtype nor a device", s));
    zorch_clear_error();
  }
  zorch_tensor *a = zorch_to_device(t, dev);
  if (!a) return lz_fail(L);
  zorch_tensor *b = zorch_to_dtype(a, dt);
  zorch_tensor_free(a);
  PUSH(b);
}
static int m_float(lua_State *L) { PUSH(zorch_to_dtype(T(1), ZORCH_F32)); }
static int m_double(lua_State *L) { PUSH(zorch_to_dtype(T(1), ZORCH_F64)); }
static int m_long(lua_State *L) { PUSH(zorch_to_dtype(T(1), ZORCH_I64)); }

/* ---- autograd ------------------------------------------------------------------------- */
static int m_backward(lua_State *L) {
  zorch_tensor *t = T(1), *g = lua_isnoneornil(L, 2) ? NULL : T(2);
  if (zorch_backward(t, g, lua_toboolean(L, 3))) return lz_fail(L);
  return 0;
}
static int m_requires_grad_(lua_State *L) {
  zorch_tensor *t = T(1);
  if (zorch_set_requires_grad(t, lua_isnone(L, 2) ? true : lua_toboolean(L, 2))) return lz_fail(L);
  lua_settop(L, 1);
  return 1;
}
static int m_detach(lua_State *L) { PUSH(zorch_detach(T(1))); }
static int m_zero_grad(lua_State *L) {
  zorch_set_grad(T(1), NULL);
  return 0;
}

static int f_no_grad(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  bool prev = zorch_set_grad_enabled(false);
  lua_pushvalue(L, 1);
  int st = lua_pcall(L, 0, LUA_MULTRET, 0);
  zorch_set_grad_enabled(prev);
  if (st != LUA_OK) return lua_error(L);
  return lua_gettop(L) - 1;
}
static int f_set_grad_enabled(lua_State *L) {
  lua_pushboolean(L, zorch_set_grad_enabled(lua_toboolean(L, 1)));
  return 1;
}
static int f_is_grad_enabled(lua_State *L) { return lua_pushboolean(L, zorch_is_grad_enabled()), 1; }
static int f_manual_seed(lua_State *L) {
  zorch_manual_seed((uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

/* ---- in place ------------------------------------------------------------------------- */
static int m_copy_(lua_State *L) {
  if (zorch_copy_(T(1), T(2))) return lz_fail(L);
  lua_settop(L, 1);
  return 1;
}
static int m_fill_(lua_State *L) {
  zorch_status st = lua_isinteger(L, 2) ? zorch_fill_i64_(T(1), lua_tointeger(L, 2))
                                        : zorch_fill_(T(1), luaL_checknumber(L, 2));
  if (st) return lz_fail(L);
  lua_settop(L, 1);
  return 1;
}
static int m_zero_(lua_State *L) {
  if (zorch_fill_(T(1), 0)) return lz_fail(L);
  lua_settop(L, 1);
  return 1;
}

/* zorch._assign(op, x, result): result written into x as the in-place op `op`
   (lua/tensor.lua builds x:add_(y) and the others on it); returns x. */
static int f_assign(lua_State *L) {
  if (zorch_assign_(luaL_checkstring(L, 1), T(2), T(3))) return lz_fail(L);
  lua_settop(L, 2);
  return 1;
}

/* ---- elementwise ------------------------------------------------------------------------ */
#define UNARY(name, call) \
  static int f_##name(lua_State *L) { PUSH(call); }
UNARY(gelu, zorch_gelu(T(1), lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "tanh") == 0))
UNARY(clamp, zorch_clamp(T(1), luaL_optnumber(L, 2, -HUGE_VAL), luaL_optnumber(L, 3, HUGE_VAL)))
/* the registry's ops with parameters, PyTorch's defaults for those left out */
/* decimals beyond +-400 give NaN for every finite input, as 10^decimals passes
   double's range; clamped there so the conversion to int cannot wrap them */
static int round_decimals(lua_State *L) {
  lua_Integer d = luaL_optinteger(L, 2, 0);
  return d > 400 ? 400 : d < -400 ? -400 : (int)d;
}
UNARY(round, zorch_round(T(1), round_decimals(L)))
UNARY(leaky_relu, zorch_leaky_relu(T(1), luaL_optnumber(L, 2, 0.01)))
UNARY(elu, zorch_elu(T(1), luaL_optnumber(L, 2, 1)))
UNARY(celu, zorch_celu(T(1), luaL_optnumber(L, 2, 1)))
UNARY(softplus, zorch_softplus(T(1), luaL_optnumber(L, 2, 1), luaL_optnumber(L, 3, 20)))
UNARY(hardtanh, zorch_hardtanh(T(1), luaL_optnumber(L, 2, -1), luaL_optnumber(L, 3, 1)))

/* lerp(start, end, weight): weight a number or a tensor */
static int f_lerp(lua_State *L) {
  zorch_tensor *a = T(1), *b = T(2);
  if (lua_type(L, 3) == LUA_TNUMBER) PUSH(zorch_lerp_scalar(a, b, lua_tonumber(L, 3)));
  PUSH(zorch_lerp(a, b, T(3)));
}
/* zorch._quantize(w, bits, group) -> q, scales (zorch.quantize in Lua reads the options) */
static int f_quantize(lua_State *L) {
  zorch_tensor *q, *s;
  if (zorch_quantize(T(1), (int)luaL_checkinteger(L, 2), luaL_checkinteger(L, 3), &q, &s)) return lz_fail(L);
  lz_push(L, q);
  lz_push(L, s);
  return 2;
}
/* allclose and equal give Lua booleans */
static int f_allclose(lua_State *L) {
  bool r;
  if (zorch_allclose(T(1), T(2), luaL_optnumber(L, 3, 1e-5), luaL_optnumber(L, 4, 1e-8), lua_toboolean(L, 5), &r))
    return lz_fail(L);
  lua_pushboolean(L, r);
  return 1;
}
static int f_equal(lua_State *L) {
  bool r;
  if (zorch_equal(T(1), T(2), &r)) return lz_fail(L);
  lua_pushboolean(L, r);
  return 1;
}
/* flatten(x, start_dim = 1, end_dim = -1): dims start..end (1-based, negative
   from the end) into one */
static int f_flatten(lua_State *L) {
  zorch_tensor *t = T(1);
  int nd = zorch_tensor_ndim(t);
  const int64_t *ts = zorch_tensor_shape(t);
  if (lua_isnoneornil(L, 2) && lua_isnoneornil(L, 3)) PUSH(zorch_flatten(t));
  int n = nd > 0 ? nd : 1, d[2];
  for (int i = 0; i < 2; i++) {
    int v = lua_isnoneornil(L, 2 + i) ? (i ? -1 : 0) : lz_dim(L, 2 + i); /* 0-based, or negative */
    d[i] = v < 0 ? v + n : v;
    if (d[i] < 0 || d[i] >= n)
      return luaL_error(L, "flatten: %s %d out of range for a %d-d tensor (1..%d or -%d..-1)",
                        i ? "end_dim" : "start_dim", v < 0 ? v : v + 1, nd, n, n);
  }
  if (d[0] > d[1]) return luaL_error(L, "flatten: start_dim %d comes after end_dim %d", d[0] + 1, d[1] + 1);
  if (nd == 0) PUSH(zorch_flatten(t));
  int64_t shape[ZORCH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < nd; i++) {
    if (i > d[0] && i <= d[1]) shape[k - 1] *= ts[i];
    else shape[k++] = ts[i];
  }
  PUSH(zorch_reshape(t, k, shape));
}

/* The registry's elementwise ops (ops/backend/pointwise_ops.h). Each unary op without
   parameters is bound as zorch.<name>(x) and x:<name>(); upvalue 1 is its zorch_pointwise_op. */
/* Refuses arguments past the first n that are not nil: PyTorch takes alpha and
   out only by keyword, so zorch.add(a, b, 2) is a mistake to report, not to
   ignore. */
static void check_max_args(lua_State *L, int n, const char *name) {
  for (int i = lua_gettop(L); i > n; i--)
    if (!lua_isnil(L, i))
      luaL_error(L, "%s: takes %d argument%s, got %d (a %s at %d)", name, n, n == 1 ? "" : "s", lua_gettop(L),
                 luaL_typename(L, i), i);
}

static int f_pointwise(lua_State *L) {
  const zorch_pointwise_op *op = lua_touserdata(L, lua_upvalueindex(1));
  check_max_args(L, 1, op->name);
  zorch_tensor *in[1] = {T(1)};
  double p[2] = {0, 0};
  return lz_push_up(L, op->call(in, p), 2);
}

/* zorch._pointwise_ops(): every registered elementwise op, in registry order, as
   {name =, nin =, nparams =, differentiable =, positive = {a, b}, domain =}
   (positive: the inputs the op's tests draw positive; domain: "unit" when
   they draw input a inside (-1, 1), "gt1" above 1, else "any"). */
static int f_pointwise_ops(lua_State *L) {
  int n;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&n);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, ops[i].name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, ops[i].nin);
    lua_setfield(L, -2, "nin");
    lua_pushinteger(L, ops[i].nparams);
    lua_setfield(L, -2, "nparams");
    lua_pushboolean(L, ops[i].differentiable);
    lua_setfield(L, -2, "differentiable");
    lua_createtable(L, 2, 0);
    lua_pushboolean(L, ops[i].dom & ZORCH_DOM_POS_A);
    lua_rawseti(L, -2, 1);
    lua_pushboolean(L, ops[i].dom & ZORCH_DOM_POS_B);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "positive");
    lua_pushstring(L, ops[i].dom & ZORCH_DOM_UNIT_A ? "unit" : ops[i].dom & ZORCH_DOM_GT1_A ? "gt1" : "any");
    lua_setfield(L, -2, "domain");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* zorch._pointwise(name, tensors..., params...): any registered op by name,
   its nin tensors then its nparams numbers. */
static int f_pointwise_call(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int n;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&n);
  for (int i = 0; i < n; i++) {
    if (strcmp(ops[i].name, name) != 0) continue;
    zorch_tensor *in[2] = {NULL, NULL};
    double p[2] = {0, 0};
    for (int k = 0; k < ops[i].nin; k++) in[k] = T(2 + k);
    for (int k = 0; k < ops[i].nparams; k++) p[k] = luaL_checknumber(L, 2 + ops[i].nin + k);
    PUSH(ops[i].call(in, p));
  }
  return luaL_argerror(L, 1, lua_pushfstring(L, "no elementwise op named '%s'", name));
}

/* The registry's binary ops, bound as zorch.<name>(a, b) and a:<name>(b),
   either operand a tensor or a number (lz_binary_op); upvalue 1 is the entry. */
static int f_pointwise2(lua_State *L) {
  const zorch_pointwise_op *op = lua_touserdata(L, lua_upvalueindex(1));
  check_max_args(L, 2, op->name);
  return lz_binary_op(L, op);
}

/* [-0, +0]: binds the unary ops without parameters and the binary ops into the
   tables at module and methods (absolute indices). */
static void open_pointwise(lua_State *L, int module, int methods) {
  int n;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&n);
  for (int i = 0; i < n; i++) {
    if (ops[i].nparams != 0) continue;
    lua_pushlightuserdata(L, (void *)&ops[i]);
    if (ops[i].nin == 1) {
      lz_push_state(L);
      lua_pushcclosure(L, f_pointwise, 2);
    } else {
      lua_pushcclosure(L, f_pointwise2, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, methods, ops[i].name);
    lua_setfield(L, module, ops[i].name);
  }
}

static int binop(lua_State *L, const char *mm) {
  check_max_args(L, 2, mm + 2);
  if (!zorch_to_tensor(L, 1) && !zorch_to_tensor(L, 2))
    return luaL_error(L, "%s: expected a tensor operand, got %s and %s", mm + 2, luaL_typename(L, 1),
                      luaL_typename(L, 2));
  luaL_getmetatable(L, LZ_TENSOR);
  lz_getfield(L, -1, mm);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);
  return 1;
}
static int f_add2(lua_State *L) { return binop(L, "__add"); }
static int f_sub(lua_State *L) { return binop(L, "__sub"); }
static int f_mul(lua_State *L) { return binop(L, "__mul"); }
static int f_div(lua_State *L) { return binop(L, "__div"); }
static int f_pow(lua_State *L) { return binop(L, "__pow"); }

static zorch_tensor *operand(lua_State *L, int i, zorch_tensor *like) {
  if (lua_type(L, i) == LUA_TNUMBER)
    return zorch_scalar(lua_tonumber(L, i), zorch_tensor_dtype(like), zorch_tensor_device(like));
  return zorch_tensor_retain(T(i));
}
typedef zorch_tensor *(*cmp_fn)(zorch_tensor *, zorch_tensor *);
static int compare(lua_State *L, cmp_fn f) {
  zorch_tensor *a = T(1), *b = operand(L, 2, a);
  if (!b) return lz_fail(L);
  zorch_tensor *r = f(a, b);
  zorch_tensor_free(b);
  PUSH(r);
}
static int f_eq(lua_State *L) { return compare(L, zorch_eq); }
static int f_lt(lua_State *L) { return compare(L, zorch_lt); }
static int f_gt(lua_State *L) { return compare(L, zorch_gt); }
static int f_ne(lua_State *L) { return compare(L, zorch_ne); }
static int f_le(lua_State *L) { return compare(L, zorch_le); }
static int f_ge(lua_State *L) { return compare(L, zorch_ge); }

static int f_where(lua_State *L) {
  zorch_tensor *c = T(1);
  for (int i = 2; i <= 3; i++) /* check both branches before taking references */
    if (!zorch_to_tensor(L, i)) luaL_checknumber(L, i);
  zorch_tensor *a = zorch_to_tensor(L, 2) ? zorch_tensor_retain(T(2)) : NULL;
  zorch_tensor *b = zorch_to_tensor(L, 3) ? zorch_tensor_retain(T(3)) : NULL;
  if (!a && !b) return luaL_error(L, "where: at least one of the branches must be a tensor");
  if (!a) a = operand(L, 2, b);
  if (!b) b = operand(L, 3, a);
  zorch_tensor *r = a && b ? zorch_where(c, a, b) : NULL;
  zorch_tensor_free(a);
  zorch_tensor_free(b);
  PUSH(r);
}
/* An integer value for an integer tensor stays exact past 2^53: a where over
   an int64 scalar (integers carry no gradient). */
static int f_masked_fill(lua_State *L) {
  zorch_tensor *a = T(1), *mask = T(2);
  zorch_dtype dt = zorch_tensor_dtype(a);
  if (!lua_isinteger(L, 3) || zorch_dtype_is_float(dt) || dt == ZORCH_BOOL)
    PUSH(zorch_masked_fill(a, mask, luaL_checknumber(L, 3)));
  int64_t v = lua_tointeger(L, 3);
  if (zorch_check_fill_i64("masked_fill", dt, &v)) return lz_fail(L);
  if (v >= -((int64_t)1 << 53) && v <= (int64_t)1 << 53) PUSH(zorch_masked_fill(a, mask, (double)v));
  zorch_tensor *s = zorch_full_i64(0, NULL, v, dt, zorch_tensor_device(a));
  zorch_tensor *r = s ? zorch_where(mask, s, a) : NULL;
  zorch_tensor_free(s);
  if (r && (zorch_tensor_ndim(r) != zorch_tensor_ndim(a) || zorch_tensor_numel(r) != zorch_tensor_numel(a))) {
    zorch_tensor_free(r);
    return luaL_error(L, "masked_fill: mask does not broadcast to the input's shape");
  }
  PUSH(r);
}

/* ---- reductions -------------------------------------------------------------------------- */
/* dims: nil (all), a number, or a table of numbers */
static int get_dims(lua_State *L, int idx, int *dims) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    dims[0] = lz_dim(L, idx);
    return 1;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)lz_len(L, idx);
  if (n > ZORCH_MAX_DIMS) luaL_argerror(L, idx, "too many dims (at most 8)");
  for (int i = 0; i < n; i++) {
    lz_geti(L, idx, i + 1);
    dims[i] = lz_dim(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  return n;
}
/* Pushes values and the 1-based form of the C indices idx (taking both
   references); raises the last error when either is missing. */
static int push_values_indices(lua_State *L, zorch_tensor *v, zorch_tensor *idx) {
  zorch_tensor *i1 = idx ? zorch_add_scalar(idx, 1) : NULL;
  zorch_tensor_free(idx);
  if (!i1) {
    zorch_tensor_free(v);
    v = NULL;
  }
  lz_push(L, v);
  lz_push(L, i1);
  return 2;
}
/* Pushes the 1-based form of the C indices idx (taking the reference). */
static int push_indices(lua_State *L, zorch_tensor *idx) {
  zorch_tensor *i1 = idx ? zorch_add_scalar(idx, 1) : NULL;
  zorch_tensor_free(idx);
  PUSH(i1);
}
/* norm's p: a number (math.huge for inf), "fro", "inf" or "-inf" (2 by
   default); "fro" takes at most 2 dims (argument i + 1) */
static double norm_p(lua_State *L, int i) {
  if (lua_type(L, i) != LUA_TSTRING) return luaL_optnumber(L, i, 2);
  const char *s = lua_tostring(L, i);
  if (strcmp(s, "inf") == 0) return INFINITY;
  if (strcmp(s, "-inf") == 0) return -INFINITY;
  if (strcmp(s, "fro") != 0)
    luaL_argerror(L, i, lua_pushfstring(L, "norm: p must be a number, 'fro', 'inf' or '-inf', got '%s'", s));
  lua_Integer n = lua_type(L, i + 1) == LUA_TTABLE ? lz_len(L, i + 1) : 0;
  if (n > 2) luaL_error(L, "norm: p 'fro' takes 1 or 2 dims (or none), got %d", (int)n);
  return 2;
}

/* ---- nn ------------------------------------------------------------------------------------ */
static int f_linear(lua_State *L) {
  static const char *const acts[] = {"none", "relu", "gelu", "gelu_tanh", NULL};
  zorch_activation act = (zorch_activation)luaL_checkoption(L, 4, "none", acts);
  PUSH(zorch_linear_act(T(1), T(2), lua_isnoneornil(L, 3) ? NULL : T(3), act));
}

static zorch_reduction get_reduction(lua_State *L, int idx) {
  static const char *const names[] = {"mean", "sum", "none", NULL};
  return (zorch_reduction)luaL_checkoption(L, idx, "mean", names);
}
static int f_l1_loss(lua_State *L) {
  zorch_reduction r = get_reduction(L, 3); /* everything that can raise comes first */
  zorch_tensor *d = zorch_sub(T(1), T(2));
  zorch_tensor *a = d ? zorch_abs(d) : NULL;
  zorch_tensor *o = !a ? NULL : r == ZORCH_REDUCE_NONE ? zorch_tensor_retain(a)
                    : r == ZORCH_REDUCE_SUM ? zorch_sum(a, 0, NULL, false) : zorch_mean(a, 0, NULL, false);
  zorch_tensor_free(d);
  zorch_tensor_free(a);
  if (!o) zorch_error_prefix("l1_loss");
  PUSH(o);
}
/* targets are 1-based class indices; ignore_index is too (default -100) */
typedef zorch_tensor *(*nll_fn)(zorch_tensor *, zorch_tensor *, zorch_reduction, int64_t);
static int nll_call(lua_State *L, nll_fn fn) {
  zorch_reduction r = ZORCH_REDUCE_MEAN;
  lua_Integer ignore = -100;
  if (lua_istable(L, 3)) {
    lz_getfield(L, 3, "reduction");
    if (!lua_isnil(L, -1)) r = get_reduction(L, lua_gettop(L));
    lz_getfield(L, 3, "ignore_index");
    if (!lua_isnil(L, -1)) ignore = luaL_checkinteger(L, -1);
    if (ignore == LUA_MININTEGER) return luaL_argerror(L, 3, "ignore_index out of range");
    lua_pop(L, 2);
  }
  zorch_tensor *x = T(1), *t = lz_index0(L, 2);
  zorch_tensor *o = fn(x, t, r, ignore - 1);
  zorch_tensor_free(t);
  PUSH(o);
}
static int f_cross_entropy(lua_State *L) { return nll_call(L, zorch_cross_entropy); }
/* on log-probabilities */
static int f_nll_loss(lua_State *L) { return nll_call(L, zorch_nll_loss); }

/* functions only, in a list of their own (lz_open_functions adds both lists) */
static const luaL_Reg more_functions[] = {
    {"zeros_like", f_zeros_like}, {"ones_like", f_ones_like}, {"full_like", f_full_like},
    {"rand_like", f_rand_like}, {"randn_like", f_randn_like}, {"nll_loss", f_nll_loss}, {"_assign", f_assign}, {NULL, NULL}};

/* ---- convolution and pooling: sizes are a number or a pair {h, w} -------------------- */
/* The value at idx as a pair of integers >= lo (a number stands for both). */
static void conv_pair(lua_State *L, int idx, const char *fn, const char *what, int64_t lo,
                      int64_t *v) {
  if (lua_isinteger(L, idx)) {
    v[0] = v[1] = (int64_t)lua_tointeger(L, idx);
  } else if (lua_istable(L, idx) && lz_len(L, idx) == 2) {
    for (int i = 0; i < 2; i++) {
      int isint;
      lz_geti(L, idx, i + 1);
      v[i] = (int64_t)lua_tointegerx(L, -1, &isint);
      lua_pop(L, 1);
      if (!isint) luaL_error(L, "%s: %s must be an integer or a pair {h, w} of integers", fn, what);
    }
  } else {
    luaL_error(L, "%s: %s must be an integer or a pair {h, w} of integers, got %s", fn, what,
               luaL_typename(L, idx));
  }
  if (v[0] < lo || v[1] < lo)
    luaL_error(L, "%s: %s (%I, %I) must be %s", fn, what, (lua_Integer)v[0], (lua_Integer)v[1],
               lo ? "positive" : "non-negative");
}

/* The options table at idx (or nil): only `allowed` keys. Pushes nothing. */
static void conv_opts_keys(lua_State *L, int idx, const char *fn, const char *const *allowed) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    bool ok = false;
    if (lua_type(L, -2) == LUA_TSTRING)
      for (int i = 0; allowed[i] && !ok; i++) ok = strcmp(lua_tostring(L, -2), allowed[i]) == 0;
    if (!ok) {
      char list[160] = "";
      for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", allowed[i]);
      luaL_error(L, "%s: unknown option '%s' (allowed: %s)", fn, luaL_tolstring(L, -2, NULL), list);
    }
    lua_pop(L, 1);
  }
}

/* Field `key` of the options at idx as a pair, when present. */
static void conv_opt_pair(lua_State *L, int idx, const char *fn, const char *key, int64_t lo,
                          int64_t *v) {
  if (lua_isnoneornil(L, idx)) return;
  if (lz_getfield(L, idx, key) != LUA_TNIL) conv_pair(L, lua_gettop(L), fn, key, lo, v);
  lua_pop(L, 1);
}

static bool conv_opt_bool(lua_State *L, int idx, const char *key, bool def) {
  if (lua_isnoneornil(L, idx)) return def;
  bool v = lz_getfield(L, idx, key) == LUA_TNIL ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* conv2d(x, w, b_or_nil, {stride, padding, dilation, groups}) */
static int f_conv2d(lua_State *L) {
  static const char *const keys[] = {"stride", "padding", "dilation", "groups", NULL};
  zorch_tensor *x = T(1), *w = T(2), *b = lua_isnoneornil(L, 3) ? NULL : T(3);
  zorch_conv2d_opts o = {{1, 1}, {0, 0}, {1, 1}, 1};
  conv_opts_keys(L, 4, "conv2d", keys);
  conv_opt_pair(L, 4, "conv2d", "stride", 1, o.stride);
  conv_opt_pair(L, 4, "conv2d", "padding", 0, o.padding);
  conv_opt_pair(L, 4, "conv2d", "dilation", 1, o.dilation);
  if (!lua_isnoneornil(L, 4) && lz_getfield(L, 4, "groups") != LUA_TNIL) {
    int isint;
    o.groups = (int64_t)lua_tointegerx(L, -1, &isint);
    if (!isint || o.groups < 1) return luaL_error(L, "conv2d: groups must be a positive integer");
  }
  PUSH(zorch_conv2d(x, w, b, &o));
}

/* max_pool2d(x, k, {stride, padding, dilation, ceil_mode}) and
   avg_pool2d(x, k, {stride, padding, count_include_pad, ceil_mode}) */
static int pool_call(lua_State *L, bool max) {
  static const char *const max_keys[] = {"stride", "padding", "dilation", "ceil_mode", NULL};
  static const char *const avg_keys[] = {"stride", "padding", "count_include_pad", "ceil_mode", NULL};
  const char *fn = max ? "max_pool2d" : "avg_pool2d";
  zorch_tensor *x = T(1);
  zorch_pool2d_opts o = {0};
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "%s: kernel_size is missing", fn);
  conv_pair(L, 2, fn, "kernel_size", 1, o.kernel);
  conv_opts_keys(L, 3, fn, max ? max_keys : avg_keys);
  o.stride[0] = o.kernel[0], o.stride[1] = o.kernel[1];
  conv_opt_pair(L, 3, fn, "stride", 1, o.stride);
  conv_opt_pair(L, 3, fn, "padding", 0, o.padding);
  if (max) conv_opt_pair(L, 3, fn, "dilation", 1, o.dilation);
  o.ceil_mode = conv_opt_bool(L, 3, "ceil_mode", false);
  o.exclude_pad = !max && !conv_opt_bool(L, 3, "count_include_pad", true);
  PUSH(max ? zorch_max_pool2d(x, &o, NULL) : zorch_avg_pool2d(x, &o));
}
static int f_max_pool2d(lua_State *L) { return pool_call(L, true); }
static int f_avg_pool2d(lua_State *L) { return pool_call(L, false); }
static int f_adaptive_avg_pool2d(lua_State *L) {
  zorch_tensor *x = T(1);
  int64_t s[2];
  conv_pair(L, 2, "adaptive_avg_pool2d", "output_size", 1, s);
  PUSH(zorch_adaptive_avg_pool2d(x, s[0], s[1]));
}
static const luaL_Reg conv_functions[] = {
    {"conv2d", f_conv2d}, {"max_pool2d", f_max_pool2d}, {"avg_pool2d", f_avg_pool2d},
    {"adaptive_avg_pool2d", f_adaptive_avg_pool2d}, {NULL, NULL}};

static int list_op(lua_State *L, bool stack) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  int n = (int)lz_len(L, 1);
  if (n < 1) return luaL_argerror(L, 1, "expected a non-empty list of tensors");
  zorch_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)n, 0);
  for (int i = 0; i < n; i++) {
    lz_geti(L, 1, i + 1);
    ts[i] = zorch_to_tensor(L, -1);
    if (!ts[i]) return luaL_error(L, "%s: entry %d of the list is a %s, not a tensor", stack ? "stack" : "cat",
                                  i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  int d = lua_isnoneornil(L, 2) ? 0 : lz_dim(L, 2);
  PUSH(stack ? zorch_stack(n, ts, d) : zorch_cat(n, ts, d));
}
static int f_cat(lua_State *L) { return list_op(L, false); }
static int f_stack(lua_State *L) { return list_op(L, true); }

/* ---- views ------------------------------------------------------------------------------------ */
static int f_t(lua_State *L) {
  zorch_tensor *x = T(1);
  if (zorch_tensor_ndim(x) > 2) return luaL_error(L, "t: expects a tensor with at most 2 dims, got %d", zorch_tensor_ndim(x));
  if (zorch_tensor_ndim(x) < 2) PUSH(zorch_tensor_retain(x));
  PUSH(zorch_transpose(x, 0, 1));
}
static int f_permute(lua_State *L) {
  zorch_tensor *x = T(1);
  int d[ZORCH_MAX_DIMS], n;
  if (lua_istable(L, 2)) {
    n = get_dims(L, 2, d);
  } else {
    n = lua_gettop(L) - 1;
    if (n > ZORCH_MAX_DIMS) return luaL_error(L, "permute: too many dims");
    for (int i = 0; i < n; i++) d[i] = lz_dim(L, i + 2);
  }
  if (n != zorch_tensor_ndim(x))
    return luaL_error(L, "permute: %d dims given for a %d-dimensional tensor", n, zorch_tensor_ndim(x));
  PUSH(zorch_permute(x, d));
}
static int f_squeeze(lua_State *L) {
  zorch_tensor *x = T(1);
  if (lua_isnoneornil(L, 2)) { /* every size-1 dim */
    zorch_tensor *r = zorch_tensor_retain(x);
    for (int d = zorch_tensor_ndim(x) - 1; d >= 0 && r; d--) {
      zorch_tensor *s = zorch_squeeze(r, d);
      zorch_tensor_free(r);
      r = s;
    }
    PUSH(r);
  }
  PUSH(zorch_squeeze(x, lz_dim(L, 2)));
}

static const luaL_Reg both[] = {
    {"gelu", f_gelu}, {"clamp", f_clamp}, {"round", f_round}, {"leaky_relu", f_leaky_relu},
    {"elu", f_elu}, {"celu", f_celu}, {"softplus", f_softplus}, {"hardtanh", f_hardtanh},
    {"clip", f_clamp}, {"lerp", f_lerp}, {"allclose", f_allclose}, {"equal", f_equal}, {"flatten", f_flatten},
    {"add", f_add2}, {"sub", f_sub}, {"mul", f_mul}, {"div", f_div}, {"pow", f_pow},
    {"eq", f_eq}, {"lt", f_lt}, {"gt", f_gt}, {"ne", f_ne}, {"le", f_le}, {"ge", f_ge},
    {"masked_fill", f_masked_fill},
    {"t", f_t}, {"permute", f_permute}, {"squeeze", f_squeeze}, {"item", m_item}, {"totable", m_totable},
    {"size", m_size}, {"dim", m_dim}, {"numel", m_numel}, {"dtype", m_dtype}, {"device", m_device},
    {"is_contiguous", m_is_contiguous}, {"to", m_to}, {"float", m_float}, {"double", m_double},
    {"long", m_long}, {"backward", m_backward}, {"requires_grad_", m_requires_grad_},
    {"detach", m_detach}, {"zero_grad", m_zero_grad}, {"copy_", m_copy_}, {"fill_", m_fill_},
    {"zero_", m_zero_}, {NULL, NULL}};

/* ---- attention and sampling ------------------------------------------------------------ */
/* Option `key` of the table at idx: a tensor or nil (NULL), borrowed from the table. */
static zorch_tensor *attention_opt_tensor(lua_State *L, int idx, const char *key, const char *what) {
  zorch_tensor *t = NULL;
  if (lz_getfield(L, idx, key) != LUA_TNIL && !(t = zorch_to_tensor(L, -1)))
    luaL_error(L, "attention: option '%s' must be %s, got %s", key, what, luaL_typename(L, -1));
  lua_pop(L, 1);
  return t;
}

/* attention(q, k, v, {causal = false, scale = 1/sqrt(D), window = nil, mask = nil,
   segments = nil, q_segments = nil}) */
static int f_attention(lua_State *L) {
  static const char *const keys[] = {"causal", "scale", "window", "mask", "segments", "q_segments", NULL};
  zorch_tensor *q = T(1), *k = T(2), *v = T(3);
  zorch_attention_opts o = {0};
  if (!lua_isnoneornil(L, 4)) {
    conv_opts_keys(L, 4, "attention", keys);
    int t = lz_getfield(L, 4, "causal");
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
      return luaL_error(L, "attention: option 'causal' must be a boolean, got %s", luaL_typename(L, -1));
    o.causal = lua_toboolean(L, -1);
    t = lz_getfield(L, 4, "scale");
    if (t != LUA_TNIL) {
      if (t != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0))
        return luaL_error(L, "attention: option 'scale' must be a positive number, got %s",
                          t == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
      o.scale = lua_tonumber(L, -1);
    }
    t = lz_getfield(L, 4, "window");
    if (t != LUA_TNIL) {
      int isint = 0;
      lua_Integer w = lua_tointegerx(L, -1, &isint);
      if (!isint || w < 1)
        return luaL_error(L, "attention: option 'window' must be a positive integer, got %s",
                          t == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
      o.window = (int64_t)w;
    }
    lua_pop(L, 3);
    o.mask = attention_opt_tensor(L, 4, "mask", "a bool or float tensor broadcast to (B, H, Tq, Tk)");
    o.segments = attention_opt_tensor(L, 4, "segments", "an int64 tensor (B, Tk)");
    o.q_segments = attention_opt_tensor(L, 4, "q_segments", "an int64 tensor (B, Tq)");
  }
  PUSH(zorch_attention(q, k, v, &o));
}

/* zorch.Generator(seed): a random stream of its own (Philox, counter based), for
   the functions that take a `generator` option. */
#define LZ_GENERATOR "zorch.Generator"
static zorch_generator **check_generator(lua_State *L, int idx) {
  zorch_generator **g = luaL_checkudata(L, idx, LZ_GENERATOR);
  if (!*g) luaL_argerror(L, idx, "the generator was closed");
  return g;
}
static int f_generator(lua_State *L) {
  lua_Integer seed = luaL_checkinteger(L, 1); /* seeds are explicit */
  zorch_generator **g = lua_newuserdatauv(L, sizeof *g, 0);
  *g = NULL;
  lz_setmetatable(L, LZ_GENERATOR);
  if (!(*g = zorch_generator_new((uint64_t)seed))) return luaL_error(L, "Generator: out of memory");
  return 1;
}
static int gen_manual_seed(lua_State *L) {
  zorch_generator **g = check_generator(L, 1);
  zorch_generator_seed(*g, (uint64_t)luaL_checkinteger(L, 2));
  lua_settop(L, 1);
  return 1;
}
static int gen_offset(lua_State *L) {
  return lua_pushinteger(L, (lua_Integer)zorch_generator_offset(*check_generator(L, 1))), 1;
}
static int gen_set_offset(lua_State *L) {
  zorch_generator **g = check_generator(L, 1);
  zorch_generator_set_offset(*g, (uint64_t)luaL_checkinteger(L, 2));
  lua_settop(L, 1);
  return 1;
}
static int gen_gc(lua_State *L) {
  zorch_generator **g = luaL_checkudata(L, 1, LZ_GENERATOR);
  zorch_generator_free(*g);
  *g = NULL;
  return 0;
}
static int gen_tostring(lua_State *L) {
  zorch_generator **g = luaL_checkudata(L, 1, LZ_GENERATOR);
  if (!*g) return lua_pushliteral(L, "zorch.Generator (closed)"), 1;
  return lua_pushfstring(L, "zorch.Generator (offset %I)", (lua_Integer)zorch_generator_offset(*g)), 1;
}
static const luaL_Reg generator_methods[] = {{"manual_seed", gen_manual_seed}, {"offset", gen_offset},
                                             {"set_offset", gen_set_offset}, {NULL, NULL}};

/* multinomial(probs, n, {replacement = false, generator = g}): 1-based int64 indices */
static int f_multinomial(lua_State *L) {
  zorch_tensor *p = T(1);
  lua_Integer n = luaL_checkinteger(L, 2);
  bool replacement = false;
  zorch_generator *gen = NULL;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    int t = lz_getfield(L, 3, "replacement");
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
      return luaL_error(L, "multinomial: option 'replacement' must be a boolean, got %s",
                        luaL_typename(L, -1));
    replacement = lua_toboolean(L, -1);
    if (lz_getfield(L, 3, "generator") != LUA_TNIL) {
      zorch_generator **g = luaL_testudata(L, -1, LZ_GENERATOR);
      if (!g || !*g)
        return luaL_error(L, "multinomial: option 'generator' must be a zorch.Generator, got %s",
                          luaL_typename(L, -1));
      gen = *g;
    }
    lua_pop(L, 2);
  }
  zorch_tensor *idx = zorch_multinomial(p, n, replacement, gen);
  zorch_tensor *i1 = idx ? zorch_add_scalar(idx, 1) : NULL;
  zorch_tensor_free(idx);
  PUSH(i1);
}
static const luaL_Reg sample_functions[] = {{"attention", f_attention}, {"multinomial", f_multinomial},
                                            {"Generator", f_generator}, {NULL, NULL}};
/* [-0, +0]: the Generator metatable */
static void open_generator(lua_State *L) {
  luaL_newmetatable(L, LZ_GENERATOR);
  luaL_newlib(L, generator_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gen_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, gen_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, gen_tostring);
  lua_setfield(L, -2, "__tostring");
  lz_protect_metatable(L);
  lua_pop(L, 1);
}

/* The LREAD readers of the rows: an int from argument i. */
/* layer_norm's normalized dims: a count, or a shape that must be the trailing
   dims of argument 1 */
static int read_norm_dims(lua_State *L, int i) {
  zorch_tensor *x = T(1);
  lua_Integer nn = lua_istable(L, i) ? lz_len(L, i) : luaL_checkinteger(L, i);
  if (nn < INT_MIN || nn > INT_MAX) return luaL_argerror(L, i, "too many dims");
  int n = (int)nn;
  if (lua_istable(L, i)) {
    int nd = zorch_tensor_ndim(x);
    const int64_t *xs = zorch_tensor_shape(x);
    bool ok = n >= 1 && n <= nd && n <= ZORCH_MAX_DIMS;
    int64_t ns[ZORCH_MAX_DIMS];
    for (int k = 0; k < n && k < ZORCH_MAX_DIMS; k++) {
      lz_geti(L, i, k + 1);
      ns[k] = (int64_t)luaL_checkinteger(L, -1);
      lua_pop(L, 1);
      if (ok && ns[k] != xs[nd - n + k]) ok = false;
    }
    if (!ok) {
      char a[ZORCH_SHAPE_BUF], b[ZORCH_SHAPE_BUF];
      zorch_shape_str(n < ZORCH_MAX_DIMS ? n : ZORCH_MAX_DIMS, ns, a, sizeof a);
      zorch_shape_str(nd, xs, b, sizeof b);
      return luaL_error(L, "layer_norm: normalized_shape %s does not match the last dims of the input's "
                        "shape %s", a, b);
    }
  }
  return n;
}
/* a loss's reduction: "mean" (absent), "sum" or "none" */
static int read_reduction(lua_State *L, int i) { return (int)get_reduction(L, i); }
/* dropout's training flag: true when absent, and a given nil is false */
static int read_training(lua_State *L, int i) { return lua_isnone(L, i) ? 1 : lua_toboolean(L, i); }

/* ---- the declared ops (include/zorch_ops.h): bindings and test cases, expanded ---- */
/* Each argument reader of a row becomes (KIND, args) and runs in phases: every
   check that can raise first (in argument order), then what allocates (the
   0-based copies of indices), the call, and the frees, so an error leaks nothing. */
#define LZA_MAX 10
typedef struct {
  zorch_tensor *t[LZA_MAX], *out;
  lua_Integer k[LZA_MAX];
  double n[LZA_MAX];
  int dims[LZA_MAX][ZORCH_MAX_DIMS];
  int64_t ints[LZA_MAX][ZORCH_MAX_DIMS];
} decl_args;
/* lz_index0's check without its copy *//* a 1-based index (negative from the end), 0-based */
static lua_Integer pos0(lua_State *L, int i) {
  lua_Integer v = luaL_checkinteger(L, i);
  if (v == 0) luaL_argerror(L, i, "indices are 1-based (0 is not an index)");
  return v > 0 ? v - 1 : v;
}

static void check_index(lua_State *L, int i) {
  zorch_tensor *t = T(i);
  if (zorch_tensor_dtype(t) != ZORCH_I64)
    luaL_argerror(L, i, lua_pushfstring(L, "int64 indices expected, got %s",
                                        zorch_dtype_name(zorch_tensor_dtype(t))));
}
#define LT(i) (LT, i)
#define LTN(i) (LTN, i)
#define LNUM(i, d) (LNUM, i, d)
#define LNUM_REQ(i) (LNUM_REQ, i)
#define LINT(i, d) (LINT, i, d)
#define LINT_REQ(i) (LINT_REQ, i)
#define LDIM(i) (LDIM, i)
#define LDIM_OR(i, d) (LDIM_OR, i, d)
#define LBOOL(i) (LBOOL, i)
#define LBOOL_OR(i, d) (LBOOL_OR, i, d)
#define LDIMS(i) (LDIMS, i)
#define LIDX(i) (LIDX, i)
#define LOUT (LOUT, 0)
#define LCONST(v) (LCONST, v)
#define LREAD(fn, i) (LREAD, i, fn)
#define LREADN(fn, i) (LREADN, i, fn)
#define LDIM_OPT(i) (LDIM_OPT, i)
#define LDIMS_REQ(i) (LDIMS_REQ, i)
#define LINTS(i) (LINTS, i)
#define LSIZES(i) (LSIZES, i)
#define LNUMP(i) (LNUMP, i)
#define LPOS(i) (LPOS, i)
/* the phases of each reader: CHECK (may raise), ALLOC, USE (the C arguments), FREE */
#define LT_CHECK(i) (a_.t[i] = T(i))
#define LTN_CHECK(i) (a_.t[i] = lua_isnoneornil(L, i) ? NULL : T(i))
#define LNUM_CHECK(i, d) (a_.n[i] = luaL_optnumber(L, i, d))
#define LNUM_REQ_CHECK(i) (a_.n[i] = luaL_checknumber(L, i))
#define LINT_CHECK(i, d) (a_.k[i] = luaL_optinteger(L, i, d))
#define LINT_REQ_CHECK(i) (a_.k[i] = luaL_checkinteger(L, i))
#define LDIM_CHECK(i) (a_.k[i] = lz_dim(L, i))
#define LDIM_OR_CHECK(i, d) (a_.k[i] = lua_isnoneornil(L, i) ? (d) : lz_dim(L, i))
#define LBOOL_CHECK(i) (a_.k[i] = lua_toboolean(L, i))
#define LBOOL_OR_CHECK(i, d) (a_.k[i] = lua_isnoneornil(L, i) ? (d) : lua_toboolean(L, i))
#define LDIMS_CHECK(i) (a_.k[i] = get_dims(L, i, a_.dims[i]))
#define LIDX_CHECK(i) check_index(L, i)
#define LOUT_CHECK(i) (void)0
#define LCONST_CHECK(v) (void)0
#define LREAD_CHECK(i, fn) (a_.k[i] = fn(L, i))
#define LREADN_CHECK(i, fn) (a_.n[i] = fn(L, i))
#define LDIM_OPT_CHECK(i) (a_.k[i] = lua_isnoneornil(L, i) ? 0 : (a_.dims[i][0] = lz_dim(L, i), 1))
#define LDIMS_REQ_CHECK(i)                                                                \
  (lua_isnoneornil(L, i) ? (void)luaL_argerror(L, i, "dims expected (a number or a table)") : (void)0, \
   a_.k[i] = get_dims(L, i, a_.dims[i]))
#define LINTS_CHECK(i) (a_.k[i] = lz_ints(L, i, a_.ints[i], ZORCH_MAX_DIMS))
#define LSIZES_CHECK(i) (a_.k[i] = lz_sizes(L, i, a_.ints[i]))
#define LNUMP_CHECK(i) (a_.k[i] = !lua_isnoneornil(L, i), a_.n[i] = a_.k[i] ? luaL_checknumber(L, i) : 0)
#define LPOS_CHECK(i) (a_.k[i] = pos0(L, i))
#define LIDX_ALLOC(i) (a_.t[i] = lz_index0(L, i))
#define LT_USE(i) a_.t[i]
#define LTN_USE(i) a_.t[i]
#define LNUM_USE(i, d) a_.n[i]
#define LNUM_REQ_USE(i) a_.n[i]
#define LINT_USE(i, d) a_.k[i]
#define LINT_REQ_USE(i) a_.k[i]
#define LDIM_USE(i) (int)a_.k[i]
#define LDIM_OR_USE(i, d) (int)a_.k[i]
#define LBOOL_USE(i) (a_.k[i] != 0)
#define LBOOL_OR_USE(i, d) (a_.k[i] != 0)
#define LDIMS_USE(i) (int)a_.k[i], a_.dims[i]
#define LIDX_USE(i) a_.t[i]
#define LOUT_USE(i) &a_.out
#define LCONST_USE(v) v
#define LREAD_USE(i, fn) (int)a_.k[i]
#define LREADN_USE(i, fn) a_.n[i]
#define LDIM_OPT_USE(i) (int)a_.k[i], a_.dims[i]
#define LDIMS_REQ_USE(i) (int)a_.k[i], a_.dims[i]
#define LINTS_USE(i) (int)a_.k[i], a_.ints[i]
#define LSIZES_USE(i) (int)a_.k[i], a_.ints[i]
#define LNUMP_USE(i) (a_.k[i] ? &a_.n[i] : NULL)
#define LPOS_USE(i) a_.k[i]
#define LIDX_FREE(i) zorch_tensor_free(a_.t[i])
#define LZ_NOP_(...) (void)0
#define LT_ALLOC LZ_NOP_
#define LTN_ALLOC LZ_NOP_
#define LNUM_ALLOC LZ_NOP_
#define LNUM_REQ_ALLOC LZ_NOP_
#define LINT_ALLOC LZ_NOP_
#define LINT_REQ_ALLOC LZ_NOP_
#define LDIM_ALLOC LZ_NOP_
#define LDIM_OR_ALLOC LZ_NOP_
#define LBOOL_ALLOC LZ_NOP_
#define LBOOL_OR_ALLOC LZ_NOP_
#define LDIMS_ALLOC LZ_NOP_
#define LOUT_ALLOC LZ_NOP_
#define LCONST_ALLOC LZ_NOP_
#define LREAD_ALLOC LZ_NOP_
#define LREADN_ALLOC LZ_NOP_
#define LDIM_OPT_ALLOC LZ_NOP_
#define LDIMS_REQ_ALLOC LZ_NOP_
#define LINTS_ALLOC LZ_NOP_
#define LSIZES_ALLOC LZ_NOP_
#define LNUMP_ALLOC LZ_NOP_
#define LPOS_ALLOC LZ_NOP_
#define LT_FREE LZ_NOP_
#define LTN_FREE LZ_NOP_
#define LNUM_FREE LZ_NOP_
#define LNUM_REQ_FREE LZ_NOP_
#define LINT_FREE LZ_NOP_
#define LINT_REQ_FREE LZ_NOP_
#define LDIM_FREE LZ_NOP_
#define LDIM_OR_FREE LZ_NOP_
#define LBOOL_FREE LZ_NOP_
#define LBOOL_OR_FREE LZ_NOP_
#define LDIMS_FREE LZ_NOP_
#define LOUT_FREE LZ_NOP_
#define LCONST_FREE LZ_NOP_
#define LREAD_FREE LZ_NOP_
#define LREADN_FREE LZ_NOP_
#define LDIM_OPT_FREE LZ_NOP_
#define LDIMS_REQ_FREE LZ_NOP_
#define LINTS_FREE LZ_NOP_
#define LSIZES_FREE LZ_NOP_
#define LNUMP_FREE LZ_NOP_
#define LPOS_FREE LZ_NOP_
#define LZ_CAT_(a, b) LZ_CAT2_(a, b)
#define LZ_CAT2_(a, b) a##b
#define LZ_PH_(ph, r) LZ_PH2_(ph, ZORCH_EXPAND_ r)
#define LZ_PH2_(ph, ...) LZ_PH3_(ph, __VA_ARGS__)
#define LZ_PH3_(ph, k, ...) k##_##ph(__VA_ARGS__)
#define LZ_N_(...) LZ_N2_(__VA_ARGS__, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define LZ_N2_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, n, ...) n
#define LZ_EACH_(ph, ...) LZ_CAT_(LZ_EACH, LZ_N_(__VA_ARGS__))(ph, __VA_ARGS__)
#define LZ_EACH1(ph, a) LZ_PH_(ph, a)
#define LZ_EACH2(ph, a, ...) LZ_PH_(ph, a), LZ_EACH1(ph, __VA_ARGS__)
#define LZ_EACH3(ph, a, ...) LZ_PH_(ph, a), LZ_EACH2(ph, __VA_ARGS__)
#define LZ_EACH4(ph, a, ...) LZ_PH_(ph, a), LZ_EACH3(ph, __VA_ARGS__)
#define LZ_EACH5(ph, a, ...) LZ_PH_(ph, a), LZ_EACH4(ph, __VA_ARGS__)
#define LZ_EACH6(ph, a, ...) LZ_PH_(ph, a), LZ_EACH5(ph, __VA_ARGS__)
#define LZ_EACH7(ph, a, ...) LZ_PH_(ph, a), LZ_EACH6(ph, __VA_ARGS__)
#define LZ_EACH8(ph, a, ...) LZ_PH_(ph, a), LZ_EACH7(ph, __VA_ARGS__)
#define LZ_EACH9(ph, a, ...) LZ_PH_(ph, a), LZ_EACH8(ph, __VA_ARGS__)
#define LZ_EACH10(ph, a, ...) LZ_PH_(ph, a), LZ_EACH9(ph, __VA_ARGS__)
#define LZ_ALL_(ph, conv) LZ_ALL2_(ph, ZORCH_EXPAND_ conv)
#define LZ_ALL2_(ph, ...) LZ_EACH_(ph, __VA_ARGS__)
/* The kinds: the style of the result, the readers and whether it is a method too.
   _VI: values and the 1-based indices of the LOUT argument; _I: 1-based indices. */
#define DECL_STYLE_LUA_NONE NONE
#define DECL_STYLE_LUA_FUNCTION(conv) ONE
#define DECL_STYLE_LUA_BOTH(conv) ONE
#define DECL_STYLE_LUA_FUNCTION_VI(conv) VI
#define DECL_STYLE_LUA_BOTH_VI(conv) VI
#define DECL_STYLE_LUA_FUNCTION_I(conv) IX
#define DECL_STYLE_LUA_BOTH_I(conv) IX
#define DECL_CONV_LUA_NONE ()
#define DECL_CONV_LUA_FUNCTION(conv) conv
#define DECL_CONV_LUA_BOTH(conv) conv
#define DECL_CONV_LUA_FUNCTION_VI(conv) conv
#define DECL_CONV_LUA_BOTH_VI(conv) conv
#define DECL_CONV_LUA_FUNCTION_I(conv) conv
#define DECL_CONV_LUA_BOTH_I(conv) conv
#define DECL_METHOD_LUA_FUNCTION(conv) false
#define DECL_METHOD_LUA_BOTH(conv) true
#define DECL_METHOD_LUA_FUNCTION_VI(conv) false
#define DECL_METHOD_LUA_BOTH_VI(conv) true
#define DECL_METHOD_LUA_FUNCTION_I(conv) false
#define DECL_METHOD_LUA_BOTH_I(conv) true
#define DECL_BODY_(name, conv)                \
  decl_args a_ = {0};                         \
  (void)(LZ_ALL_(CHECK, conv));               \
  (void)(LZ_ALL_(ALLOC, conv));               \
  zorch_tensor *r_ = zorch_##name(LZ_ALL_(USE, conv)); \
  (void)(LZ_ALL_(FREE, conv));
#define DECL_FN_NONE(name, conv)
#define DECL_FN_ONE(name, conv) \
  static int fdecl_##name(lua_State *L) { DECL_BODY_(name, conv) PUSH(r_); }
#define DECL_FN_VI(name, conv) \
  static int fdecl_##name(lua_State *L) { DECL_BODY_(name, conv) return push_values_indices(L, r_, a_.out); }
#define DECL_FN_IX(name, conv) \
  static int fdecl_##name(lua_State *L) { DECL_BODY_(name, conv) return push_indices(L, r_); }
#define DECL_FN2_(name, style, conv) DECL_FN3_(name, style, conv)
#define DECL_FN3_(name, style, conv) DECL_FN_##style(name, conv)
#define DECL_FN_(name, ret, params, args, lua, kernels, cases) \
  DECL_FN2_(name, DECL_STYLE_##lua, DECL_CONV_##lua)
ZORCH_OPS(DECL_FN_)
#undef DECL_FN_
static const struct {
  const char *name;
  lua_CFunction fn;
  bool method;
} declared[] = {
#define DECL_REG_NONE(name, method)
#define DECL_REG_ONE(name, method) {#name, fdecl_##name, method},
#define DECL_REG_VI DECL_REG_ONE
#define DECL_REG_IX DECL_REG_ONE
#define DECL_REG2_(name, style, method) DECL_REG3_(name, style, method)
#define DECL_REG3_(name, style, method) DECL_REG_##style(name, method)
#define DECL_METHOD_LUA_NONE false
#define DECL_REG_(name, ret, params, args, lua, kernels, cases) \
  DECL_REG2_(name, DECL_STYLE_##lua, DECL_METHOD_##lua)
    ZORCH_OPS(DECL_REG_)
#undef DECL_REG_
    {NULL, NULL, false}};
static void open_declared(lua_State *L, int module, int methods) {
  for (size_t i = 0; declared[i].name; i++) {
    lua_pushcfunction(L, declared[i].fn);
    if (declared[i].method) {
      lua_pushvalue(L, -1);
      lua_setfield(L, methods, declared[i].name);
    }
    lua_setfield(L, module, declared[i].name);
  }
}

/* zorch._op_cases(): the declared ops' Lua cases, {op, kind = "bad", code,
   message} and {op, kind = "device", code, a, b (shapes as "(d1, d2)"), rtol} */
typedef struct {
  const char *kind, *code, *message, *a, *b;
  double rtol;
} op_case;
#define GOLDEN(...)
#define NO_GOLDEN(...)
#define GRAD(...)
#define BAD(code, msg) {"bad", code, msg, NULL, NULL, 0},
#define DEVICE(code, a, b, rtol) {"device", code, NULL, #a, #b, rtol},
#define DECL_CASES_(name, ret, params, args, lua, kernels, cases) \
  static const op_case cases_##name[] = {ZORCH_EXPAND_ cases{NULL, NULL, NULL, NULL, NULL, 0}};
ZORCH_OPS(DECL_CASES_)
#undef DECL_CASES_
#undef GOLDEN
#undef NO_GOLDEN
#undef GRAD
#undef BAD
#undef DEVICE
static const struct {
  const char *op;
  const op_case *cases;
} op_cases[] = {
#define DECL_CASES_(name, ret, params, args, lua, kernels, cases) {#name, cases_##name},
    ZORCH_OPS(DECL_CASES_)
#undef DECL_CASES_
    {NULL, NULL}};
static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}
static int f_op_cases(lua_State *L) {
  lua_newtable(L);
  int n = 0;
  for (size_t i = 0; op_cases[i].op; i++)
    for (const op_case *c = op_cases[i].cases; c->kind; c++) {
      lua_newtable(L);
      set_str(L, "op", op_cases[i].op);
      set_str(L, "kind", c->kind);
      set_str(L, "code", c->code);
      set_str(L, "message", c->message);
      set_str(L, "a", c->a);
      set_str(L, "b", c->b);
      lua_pushnumber(L, c->rtol);
      lua_setfield(L, -2, "rtol");
      lua_rawseti(L, -2, ++n);
    }
  return 1;
}

static const luaL_Reg functions_only[] = {
    {"tensor", f_tensor}, {"zeros", f_zeros}, {"empty", f_empty}, {"ones", f_ones}, {"full", f_full},
    {"rand", f_rand}, {"randn", f_randn}, {"arange", f_arange}, {"where", f_where},
    {"randperm", f_randperm}, {"randint", f_randint},
    {"linear", f_linear}, {"l1_loss", f_l1_loss},
    {"cross_entropy", f_cross_entropy}, {"cat", f_cat}, {"stack", f_stack}, {"no_grad", f_no_grad},
    {"set_grad_enabled", f_set_grad_enabled}, {"is_grad_enabled", f_is_grad_enabled},
    {"manual_seed", f_manual_seed}, {"_pointwise_ops", f_pointwise_ops},
    {"_op_cases", f_op_cases}, {"_quantize", f_quantize},
    {"_pointwise", f_pointwise_call}, {NULL, NULL}};


/* [-0, +0]: adds the functions to the table on top, and the methods to tensors
   (the registry's ops first, so that a hand binding such as gelu's mode wins) */
void lz_open_functions(lua_State *L) {
  int module = lua_gettop(L);
  luaL_getmetatable(L, LZ_TENSOR);
  lz_getfield(L, -1, "__methods");
  lua_pushvalue(L, -1); /* zorch._tensor_methods: the Lua modules add methods */
  lua_setfield(L, module, "_tensor_methods");
  open_pointwise(L, module, lua_gettop(L));
  open_declared(L, module, lua_gettop(L));
  lua_pushvalue(L, module);
  luaL_setfuncs(L, both, 0);
  luaL_setfuncs(L, functions_only, 0);
  luaL_setfuncs(L, more_functions, 0);
  luaL_setfuncs(L, sample_functions, 0);
  open_generator(L);
  luaL_setfuncs(L, conv_functions, 0);
  lua_pop(L, 1);
  luaL_setfuncs(L, both, 0);
  lz_open_shape(L, module, lua_gettop(L));
  lua_pop(L, 2);
}
