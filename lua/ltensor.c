/* ltensor.c: the tensor userdata: creation, metamethods, fields, and the GC
   pressure that keeps tensor memory bounded in long loops. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lz.h"

/* A tensor box is known by its size and its tag, the address of box_tag,
   which only this file writes: two API calls, where comparing metatables took
   five (an eighth of a small op's instructions from a script). Other userdata
   never hold that address, and a script cannot write into a userdata. */
typedef struct {
  const char *tag;
  zorch_tensor *t;
} lz_box;
static const char box_tag = 'b';

/* The registry holds, under this light-userdata key (found without hashing a
   string), a table with the tensor metatable and one spare empty box in its
   array part: each result costs one hashed lookup. */
static const char state_key = 's';
enum { S_MT = 1, S_SPARE = 2 };

/* Lua's collector does not see tensor memory: each pushed tensor is charged
   to it as the bytes it holds (its elements, and LZ_HANDLE_BYTES for its
   handle, storage and block header), in steps of LZ_STEP_BYTES, so dropped
   tensors are reclaimed at the pace they come, a few hundred at a time (the
   core's caches take such a burst back without malloc). */
static _Thread_local size_t lz_debt;
#define LZ_HANDLE_BYTES 512u
#define LZ_STEP_BYTES (16u << 10)

/* In generational mode (the hosts' default) a step frees young garbage, but a
   result that lived through two minor collections (an activation the backward
   kept) turns old and waits for a major collection, which Lua starts only when
   its own heap has doubled: tensor memory does not count there. Such garbage
   piled up across steps, and each step's activations came as fresh pages
   (GPT-2 small: 5,800 page faults a step). So a full collection runs once the
   tensors pushed since the last one hold LZ_FULL_BYTES and LZ_FULL_HEAPS times
   the Lua heap: its cost, which grows with the heap, stays a small part of
   making that much tensor memory. Not while the script stopped the collector. */
static _Thread_local size_t lz_since_full;
#define LZ_FULL_BYTES ((size_t)64 << 20)
#define LZ_FULL_HEAPS 16

int lz_fail(lua_State *L) {
  char msg[1536]; /* the core's message, each marked number at most one digit longer */
  return luaL_error(L, "%s", zorch_last_error_based(1, msg, sizeof msg));
}

/* Pushes an empty tensor box; st is the state table's index. [-0, +1, m] */
static lz_box *new_box(lua_State *L, int st) {
  lz_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->tag = &box_tag, b->t = NULL; /* consistent before anything can raise */
  /* the table can be reached through the debug library: a slot that is not
     a table would be a crash in lua_setmetatable */
  if (lua_rawgeti(L, st, S_MT) != LUA_TTABLE) luaL_error(L, "zorch: the tensor metatable was replaced");
  lua_setmetatable(L, -2);
  return b;
}

/* The box at idx when it is a tensor's. */
static lz_box *to_box(lua_State *L, int idx) {
  lz_box *b = lua_touserdata(L, idx); /* a light userdata has length 0 */
  return b && lua_rawlen(L, idx) == sizeof *b && b->tag == &box_tag ? b : NULL;
}

/* A box and the next spare, run protected by lz_push when there is no spare. */
static int new_box_and_spare(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key);
  new_box(L, 1);
  new_box(L, 1);
  lua_rawseti(L, 1, S_SPARE);
  return 1;
}

/* Every result goes into the spare box, taken from the state table at st
   before anything is allocated; the next spare is made once the result has
   its box, so a memory error there loses nothing (the box, still in the
   table, keeps the tensor until the next push replaces it). Only when that
   failed (no spare) is the box made in a protected call, which frees the
   tensor on failure. */
static int push_with(lua_State *L, zorch_tensor *t, int st) {
  lua_rawgeti(L, st, S_SPARE);
  lz_box *b = to_box(L, -1);
  if (b && !b->t) {
    b->t = t;
    new_box(L, st);
    lua_rawseti(L, st, S_SPARE);
  } else {
    lua_pop(L, 1);
    lua_pushcfunction(L, new_box_and_spare);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
      zorch_tensor_free(t);
      return lua_error(L);
    }
    b = lua_touserdata(L, -1);
    b->t = t;
  }
  size_t bytes = (size_t)zorch_tensor_numel(t) * zorch_dtype_size(zorch_tensor_dtype(t)) + LZ_HANDLE_BYTES;
  lz_debt += bytes;
  lz_since_full += bytes;
  if (lz_since_full >= LZ_FULL_BYTES && lz_since_full / LZ_FULL_HEAPS >= (size_t)lua_gc(L, LUA_GCCOUNT) << 10 &&
      lua_gc(L, LUA_GCISRUNNING)) {
    lz_since_full = lz_debt = 0;
    lua_gc(L, LUA_GCCOLLECT);
  } else if (lz_debt >= LZ_STEP_BYTES) {
    size_t kb = lz_debt >> 10;
    if (kb > INT_MAX) kb = INT_MAX;
    lz_debt = 0;
    lua_gc(L, LUA_GCSTEP, (int)kb);
  }
  return 1;
}

int lz_push(lua_State *L, zorch_tensor *t) {
  if (!t) return lz_fail(L);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key) != LUA_TTABLE) { /* a host's state without luaopen_zorch */
    zorch_tensor_free(t);
    return luaL_error(L, "zorch: the zorch module is not open in this Lua state");
  }
  int st = lua_gettop(L);
  push_with(L, t, st);
  lua_replace(L, st); /* the result where the state table was */
  return 1;
}

/* The metamethods and the registry's unary functions hold the state table as
   an upvalue, which saves the registry lookup. Only the table is written, never
   the upvalue: a young box stored into an old closure's upvalue is aged by the
   write barrier and then waits for a major collection (it tripled the cost
   of the collections when the spare itself was the upvalue). */
int lz_push_up(lua_State *L, zorch_tensor *t, int up) {
  if (!t) return lz_fail(L);
  if (lua_type(L, lua_upvalueindex(up)) != LUA_TTABLE) return lz_push(L, t);
  return push_with(L, t, lua_upvalueindex(up));
}

void lz_push_state(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key) != LUA_TTABLE) luaL_error(L, "zorch: tensors are not set up");
}

void zorch_push_tensor(lua_State *L, zorch_tensor *t) { lz_push(L, t); }

zorch_tensor *zorch_to_tensor(lua_State *L, int idx) {
  lz_box *b = to_box(L, idx);
  return b ? b->t : NULL;
}

zorch_tensor *lz_check(lua_State *L, int idx) {
  lz_box *b = to_box(L, idx);
  if (!b) luaL_typeerror(L, idx, "tensor");
  if (!b->t) luaL_argerror(L, idx, "tensor was closed");
  return b->t;
}

zorch_tensor *zorch_check_tensor(lua_State *L, int idx) { return lz_check(L, idx); }

int lz_dim(lua_State *L, int idx) {
  lua_Integer d = luaL_checkinteger(L, idx);
  if (d == 0) luaL_argerror(L, idx, "dimensions are 1-based (0 is not a dimension)");
  if (d > INT_MAX || d < -INT_MAX) luaL_argerror(L, idx, "dimension out of range");
  return d > 0 ? (int)d - 1 : (int)d;
}

int lz_ints(lua_State *L, int idx, int64_t *out, int cap) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    out[0] = luaL_checkinteger(L, idx);
    return 1;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer n = lz_len(L, idx);
  if (n > cap) luaL_argerror(L, idx, lua_pushfstring(L, "too many entries (at most %d)", cap));
  for (int i = 0; i < (int)n; i++) {
    lz_geti(L, idx, i + 1);
    int ok;
    out[i] = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_argerror(L, idx, "expected integers");
    lua_pop(L, 1);
  }
  return (int)n;
}

int lz_sizes(lua_State *L, int idx, int64_t *shape) {
  int n = 0;
  if (lua_istable(L, idx)) {
    n = (int)lz_len(L, idx);
    if (n > ZORCH_MAX_DIMS) luaL_argerror(L, idx, "too many dimensions (at most 8)");
    for (int i = 0; i < n; i++) {
      lz_geti(L, idx, i + 1);
      int ok;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok) luaL_argerror(L, idx, "sizes must be integers");
      shape[i] = v;
      lua_pop(L, 1);
    }
    return n;
  }
  int top = lua_gettop(L);
  for (int i = idx; i <= top && lua_type(L, i) == LUA_TNUMBER; i++) {
    if (n == ZORCH_MAX_DIMS) luaL_argerror(L, i, "too many dimensions (at most 8)");
    shape[n++] = luaL_checkinteger(L, i);
  }
  return n;
}

void lz_get_opts(lua_State *L, int idx, lz_opts *o, zorch_dtype def) {
  o->dtype = def;
  o->device = (zorch_device){ZORCH_CPU, 0};
  o->requires_grad = 0;
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (strcmp(k, "dtype") == 0) {
      if (zorch_dtype_parse(luaL_checkstring(L, -1), &o->dtype)) lz_fail(L);
    } else if (strcmp(k, "device") == 0) {
      if (zorch_device_parse(luaL_checkstring(L, -1), &o->device)) lz_fail(L);
    } else if (strcmp(k, "requires_grad") == 0) {
      o->requires_grad = lua_toboolean(L, -1);
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      luaL_argerror(L, idx, lua_pushfstring(L, "unknown option '%s' (expected dtype, device or requires_grad)", k));
    }
    lua_pop(L, 1);
  }
}

zorch_tensor *lz_index0(lua_State *L, int idx) {
  zorch_tensor *t = lz_check(L, idx);
  if (zorch_tensor_dtype(t) != ZORCH_I64) {
    luaL_argerror(L, idx, lua_pushfstring(L, "int64 indices expected, got %s",
                                          zorch_dtype_name(zorch_tensor_dtype(t))));
  }
  zorch_tensor *r = zorch_add_scalar(t, -1);
  if (!r) lz_fail(L);
  return r;
}

/* ---- shapes ------------------------------------------------------------------------ */
int lz_push_shape(lua_State *L, const zorch_tensor *t) {
  lua_createtable(L, zorch_tensor_ndim(t), 0);
  for (int d = 0; d < zorch_tensor_ndim(t); d++) {
    lua_pushinteger(L, zorch_tensor_shape(t)[d]);
    lua_rawseti(L, -2, d + 1);
  }
  lz_setmetatable(L, LZ_SHAPE);
  return 1;
}

/* (2, 3), (3,) or (), as the core's messages write shapes */
static int shape_tostring(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = lz_len(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '(');
  for (lua_Integer i = 1; i <= n; i++) {
    if (i > 1) luaL_addstring(&b, ", ");
    lz_geti(L, 1, i);
    luaL_tolstring(L, -1, NULL);
    lua_remove(L, -2); /* the string goes right above the buffer */
    luaL_addvalue(&b);
  }
  if (n == 1) luaL_addchar(&b, ',');
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return 1;
}

/* ---- metamethods ------------------------------------------------------------------ */
static int t_gc(lua_State *L) {
  lz_box *b = to_box(L, 1);
  if (!b) return luaL_typeerror(L, 1, "tensor");
  zorch_tensor_free(b->t);
  b->t = NULL;
  return 0;
}

static int t_tostring(lua_State *L) {
  lz_box *b = to_box(L, 1);
  if (b && !b->t) return lua_pushliteral(L, "tensor(closed)"), 1; /* printing one is not an error */
  char *s = zorch_tensor_format(lz_check(L, 1));
  if (!s) return lz_fail(L);
  lua_pushstring(L, s);
  free(s);
  return 1;
}

static int t_len(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  if (zorch_tensor_ndim(t) == 0) return luaL_error(L, "len: a 0-dimensional tensor has no length");
  lua_pushinteger(L, zorch_tensor_shape(t)[0]);
  return 1;
}

/* PyTorch's dtype for a Python number beside a tensor of dtype dt: an integer
   takes dt (int64 beside bool), a float takes dt when it is a float, else
   float32; so the number never widens the tensor's dtype. */
static zorch_dtype number_dtype(lua_State *L, int idx, zorch_dtype dt) {
  if (zorch_dtype_is_float(dt)) return dt;
  if (!lua_isinteger(L, idx)) return ZORCH_F32;
  return dt == ZORCH_BOOL ? ZORCH_I64 : dt;
}

/* f(a, b), or op's call when f is NULL */
static zorch_tensor *call2(zorch_tensor *(*f)(zorch_tensor *, zorch_tensor *), const zorch_pointwise_op *op,
                           zorch_tensor *a, zorch_tensor *b) {
  return f ? f(a, b) : op->call((zorch_tensor *[]){a, b}, NULL);
}

static int binary(lua_State *L, const char *name, zorch_tensor *(*f)(zorch_tensor *, zorch_tensor *),
                  const zorch_pointwise_op *op) {
  bool na = lua_type(L, 1) == LUA_TNUMBER, nb = lua_type(L, 2) == LUA_TNUMBER;
  if (na && nb) return luaL_error(L, "%s: expected a tensor operand, got two numbers", name);
  zorch_tensor *a = na ? NULL : lz_check(L, 1), *b = nb ? NULL : lz_check(L, 2);
  if (!na && !nb) return lz_push(L, call2(f, op, a, b));
  zorch_tensor *t = na ? b : a;
  int ni = na ? 1 : 2;
  zorch_dtype sdt = number_dtype(L, ni, zorch_tensor_dtype(t));
  double v = lua_tonumber(L, ni);
  if (lua_isinteger(L, ni) && sdt == ZORCH_I32) v = (int32_t)(uint32_t)lua_tointeger(L, ni); /* wraps, */
  if (lua_isinteger(L, ni) && sdt == ZORCH_U8) v = (uint8_t)lua_tointeger(L, ni); /* as PyTorch's */
  if (lua_isinteger(L, ni) && sdt == ZORCH_I8) v = (int8_t)(uint8_t)lua_tointeger(L, ni);
  zorch_tensor *s = zorch_scalar(v, sdt, zorch_tensor_device(t));
  if (s && lua_isinteger(L, ni) && zorch_tensor_dtype(s) == ZORCH_I64 && zorch_fill_i64_(s, lua_tointeger(L, ni))) {
    zorch_tensor_free(s); /* an int64 number past 2^53 is kept exact */
    s = NULL;
  }
  if (!s) return lz_fail(L);
  zorch_tensor *r = na ? call2(f, op, s, b) : call2(f, op, a, s);
  zorch_tensor_free(s);
  return lz_push(L, r);
}

static int push_bytes(lua_State *L) {
  lua_pushlstring(L, lua_touserdata(L, 1), (size_t)lua_tointeger(L, 2));
  return 1;
}

int lz_push_owned(lua_State *L, void *p, size_t n) {
  lua_pushcfunction(L, push_bytes);
  lua_pushlightuserdata(L, p);
  lua_pushinteger(L, (lua_Integer)n);
  int st = lua_pcall(L, 2, 1, 0); /* a memory error is caught, so p is freed */
  free(p);
  return st == LUA_OK ? 1 : lua_error(L);
}

int lz_binary(lua_State *L, const char *name, zorch_tensor *(*f)(zorch_tensor *, zorch_tensor *)) {
  return binary(L, name, f, NULL);
}
int lz_binary_op(lua_State *L, const zorch_pointwise_op *op) { return binary(L, op->name, NULL, op); }

typedef zorch_tensor *(*bin_fn)(zorch_tensor *, zorch_tensor *);

/* The scalar kernels take a double and convert it to the tensor's dtype: an
   int64 past 2^53 would be rounded, and a value past an int32 or uint8 range
   has no defined conversion. */

/* t op v for an int64 t and such a v: v as an exact int64 0-d tensor (the
   integer kernels of +, -, * and pow take any int64). */
static int i64_arith(lua_State *L, zorch_tensor *t, bool t_first, bin_fn f, lua_Integer v) {
  zorch_tensor *s = zorch_full(0, NULL, 0, ZORCH_I64, zorch_tensor_device(t)), *r = NULL;
  if (s && !zorch_fill_i64_(s, v)) r = t_first ? f(t, s) : f(s, t);
  zorch_tensor_free(s);
  return lz_push_up(L, r, 1);
}

/* v beside an int32, int8 or uint8 tensor brought into its range with the same
   result: wrapped for +, - and * (two's complement arithmetic), and a power
   past the dtype's width reduced as zorch_pow_scalar reduces it; a negative
   power is kept for its error. */
static lua_Integer narrow_int(lua_Integer v, zorch_dtype dt, int op) {
  int w = dt == ZORCH_U8 || dt == ZORCH_I8 ? 8 : 32;
  if (op == '^') return v > w ? w + (v - w) % (INT64_C(1) << (w - 2)) : v;
  if (dt == ZORCH_I8) return (lua_Integer)(int8_t)(uint8_t)v;
  return dt == ZORCH_U8 ? (lua_Integer)(uint8_t)v : (lua_Integer)(int32_t)(uint32_t)v;
}
/* a op b where either side may be a number */
static int arith(lua_State *L, const char *name, bin_fn f, int op) {
  lz_box *ba = to_box(L, 1), *bb = to_box(L, 2);
  zorch_tensor *a = ba ? ba->t : NULL, *b = bb ? bb->t : NULL;
  if (a && b) return lz_push_up(L, f(a, b), 1);
  int ti = a ? 1 : 2, ni = a ? 2 : 1;
  if ((ba && !a) || (bb && !b)) return luaL_error(L, "%s: operand %d is a closed tensor", name, ba && !a ? 1 : 2);
  if (!a && !b) return luaL_error(L, "%s: expected a tensor operand", name);
  if (lua_type(L, ni) != LUA_TNUMBER)
    return luaL_error(L, "%s: cannot combine a tensor with a %s", name, luaL_typename(L, ni));
  zorch_tensor *t = zorch_check_tensor(L, ti);
  if (op != '/' && lua_isinteger(L, ni)) {
    lua_Integer v = lua_tointeger(L, ni);
    zorch_dtype dt = zorch_tensor_dtype(t);
    if (dt == ZORCH_I64 && (v < -(INT64_C(1) << 53) || v > INT64_C(1) << 53) && !(op == '^' && v < 0))
      return i64_arith(L, t, a != NULL, f, v);
    if (dt == ZORCH_I32 || dt == ZORCH_U8 || dt == ZORCH_I8) {
      lua_pushinteger(L, narrow_int(v, dt, op));
      lua_replace(L, ni);
    }
  }
  /* a float number (2.0 too: Lua keeps the subtype) beside an integer or bool
     tensor gives float32, as PyTorch's Python float does */
  if (!lua_isinteger(L, ni) && !zorch_dtype_is_float(zorch_tensor_dtype(t))) return lz_binary(L, name, f);
  double s = lua_tonumber(L, ni);
  switch (op) {
    case '+': return lz_push_up(L, zorch_add_scalar(t, s), 1);
    case '*': return lz_push_up(L, zorch_mul_scalar(t, s), 1);
    case '-':
      if (zorch_tensor_dtype(t) == ZORCH_BOOL) /* as zorch_sub refuses it */
        return luaL_error(L, "sub: subtraction with a bool tensor is not supported; for the xor of two masks use ne");
      return lz_push_up(L, a ? zorch_add_scalar(t, -s) : zorch_rsub_scalar(t, s), 1);
    case '/': return lz_push_up(L, a ? zorch_mul_scalar(t, 1.0 / s) : zorch_rdiv_scalar(t, s), 1);
    default: return lz_push_up(L, a ? zorch_pow_scalar(t, s) : NULL, 1);
  }
}
static int t_add(lua_State *L) { return arith(L, "add", zorch_add, '+'); }
static int t_sub(lua_State *L) { return arith(L, "sub", zorch_sub, '-'); }
static int t_mul(lua_State *L) { return arith(L, "mul", zorch_mul, '*'); }
static int t_div(lua_State *L) { return arith(L, "div", zorch_div, '/'); }
static int t_pow(lua_State *L) {
  zorch_tensor *e = zorch_to_tensor(L, 2);
  if (!zorch_to_tensor(L, 1) && e && lua_type(L, 1) == LUA_TNUMBER) { /* s ^ t: a 0-d base, as PyTorch's */
    double s = lua_tonumber(L, 1);
    zorch_dtype dt = zorch_tensor_dtype(e);
    if (!zorch_dtype_is_float(dt)) dt = lua_isinteger(L, 1) ? ZORCH_I64 : ZORCH_F32;
    zorch_tensor *base = zorch_scalar(s, dt, zorch_tensor_device(e));
    if (!base) return lz_fail(L);
    zorch_tensor *r = zorch_pow(base, e);
    zorch_tensor_free(base);
    return lz_push_up(L, r, 1);
  }
  return arith(L, "pow", zorch_pow, '^');
}
/* a // b and a % b: floor_divide and remainder, as Python's // and % */
static int t_idiv(lua_State *L) { return lz_binary(L, "floor_divide", zorch_floor_divide); }
static int t_mod(lua_State *L) { return lz_binary(L, "remainder", zorch_remainder); }
static int t_unm(lua_State *L) { return lz_push_up(L, zorch_neg(lz_check(L, 1)), 1); }
/* a .. b concatenates along the first dim */
static int t_concat(lua_State *L) {
  zorch_tensor *ts[2] = {lz_check(L, 1), lz_check(L, 2)};
  return lz_push(L, zorch_cat(2, ts, 0));
}

/* x.T: the dims reversed (PyTorch's T); x.mT: the last two swapped. Views. */
static int push_transposed(lua_State *L, zorch_tensor *t, bool last_two) {
  int nd = zorch_tensor_ndim(t);
  if (last_two) {
    if (nd < 2) return luaL_error(L, "mT: the tensor must have at least 2 dims, got %d", nd);
    return lz_push(L, zorch_transpose(t, nd - 2, nd - 1));
  }
  int dims[ZORCH_MAX_DIMS];
  for (int i = 0; i < nd; i++) dims[i] = nd - 1 - i;
  return lz_push(L, zorch_permute(t, dims));
}

/* x[i] selects along the first dim (1-based); other keys are methods and fields */
#define TENSOR_KEY                                                                                      \
  "index: a tensor as an index is not supported: use index_select, gather, masked_fill or zorch.where"

/* x[{i, {a, b}, {a}, {}}]: Torch7's table indexing, one entry per dim from
   the first (dims left out stay whole). A number selects (the dim goes); {a, b}
   keeps a..b, inclusive, negatives counting from the end; {a} keeps a alone;
   {} the whole dim; {a, a - 1} is empty. The result is a view that autograd records as narrow and
   select. NULL with the message in err when an entry is wrong. */
static zorch_tensor *table_view(lua_State *L, zorch_tensor *t, int key, char *err, size_t errsz) {
  int nd = zorch_tensor_ndim(t), n = (int)lua_rawlen(L, key), dim = 0;
  if (n > nd) {
    snprintf(err, errsz, "index: %d entries for a %d-d tensor", n, nd);
    return NULL;
  }
  zorch_tensor *v = zorch_tensor_retain(t);
  for (int i = 1; i <= n && v; i++) {
    int ty = lua_rawgeti(L, key, i);
    int64_t size = zorch_tensor_shape(v)[dim], b[2] = {1, size};
    int nb = ty == LUA_TTABLE ? (int)lua_rawlen(L, -1) : 0;
    bool bad = !(lua_isinteger(L, -1) || ty == LUA_TTABLE) || nb > 2;
    for (int j = 0; j < nb && !bad; j++) {
      bad = lua_rawgeti(L, -1, j + 1) != LUA_TNUMBER || !lua_isinteger(L, -1);
      b[j] = bad ? 0 : lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
    if (nb == 1) b[1] = b[0];
    int64_t k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
    int64_t lo = b[0] < 0 ? b[0] + size + 1 : b[0], hi = b[1] < 0 ? b[1] + size + 1 : b[1];
    zorch_tensor *nv = NULL;
    if (bad)
      snprintf(err, errsz, "index: entry %d must be an integer, {}, {a} or {a, b} of integers (got %s%s)", i,
               luaL_typename(L, -1), nb > 2 ? " of more than 2 entries: steps are not supported" : "");
    else if (ty != LUA_TTABLE && (k == 0 || k > size || k < -size))
      snprintf(err, errsz, "index: entry %d (%lld) is out of range for dim %d of size %lld", i, (long long)k, i,
               (long long)size);
    else if (ty == LUA_TTABLE && nb > 0 && (b[0] == 0 || b[1] == 0 || lo < 1 || hi > size || lo > hi + 1))
      snprintf(err, errsz, "index: entry %d ({%lld, %lld}) is not a range within dim %d of size %lld", i,
               (long long)b[0], (long long)b[1], i, (long long)size);
    else if (ty != LUA_TTABLE) nv = zorch_select(v, dim, k > 0 ? k - 1 : k);
    else nv = zorch_narrow(v, dim++, lo - 1, hi - lo + 1);
    if (!nv && !err[0]) snprintf(err, errsz, "%s", zorch_last_error());
    lua_pop(L, 1);
    zorch_tensor_free(v);
    v = nv;
  }
  return v;
}

static int t_index(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  if (lua_type(L, 2) == LUA_TTABLE) {
    char err[256] = "";
    zorch_tensor *v = table_view(L, t, 2, err, sizeof err);
    if (!v) return luaL_error(L, "%s", err);
    return lz_push(L, v);
  }
  if (zorch_to_tensor(L, 2)) return luaL_error(L, "%s", TENSOR_KEY);
  if (lua_type(L, 2) == LUA_TNUMBER) {
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i == 0) return luaL_error(L, "index: indices are 1-based (0 is not an index)");
    if (zorch_tensor_ndim(t) == 0) return luaL_error(L, "index: cannot index a 0-dimensional tensor");
    return lz_push(L, zorch_select(t, 0, i > 0 ? i - 1 : i));
  }
  /* methods first: they are the common case (the table is upvalue 1) */
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  const char *k = luaL_checkstring(L, 2);
  if (strcmp(k, "shape") == 0) return lz_push_shape(L, t);
  if (strcmp(k, "grad") == 0) {
    zorch_tensor *g = zorch_grad(t);
    if (!g) return lua_pushnil(L), 1;
    return lz_push(L, zorch_tensor_retain(g));
  }
  if (strcmp(k, "requires_grad") == 0) return lua_pushboolean(L, zorch_requires_grad(t)), 1;
  if (strcmp(k, "T") == 0 || strcmp(k, "mT") == 0) return push_transposed(L, t, k[0] == 'm');
  if (strcmp(k, "is_leaf") == 0) return lua_pushboolean(L, zorch_is_leaf(t)), 1;
  if (strcmp(k, "grad_fn") == 0) {
    const char *n = zorch_grad_fn_name(t);
    if (n) lua_pushstring(L, n);
    else lua_pushnil(L);
    return 1;
  }
  lua_pushnil(L);
  return 1;
}

/* x[{...}] = v: a copy of v (broadcast) or a fill into the view, which
   autograd follows as a write through any view. */
static int table_assign(lua_State *L, zorch_tensor *t) {
  zorch_tensor *src = lua_type(L, 3) == LUA_TNUMBER ? NULL : lz_check(L, 3);
  char err[256] = "";
  zorch_tensor *v = table_view(L, t, 2, err, sizeof err);
  if (!v) return luaL_error(L, "%s", err);
  zorch_status st = src                   ? zorch_copy_(v, src)
                    : lua_isinteger(L, 3) ? zorch_fill_i64_(v, lua_tointeger(L, 3))
                                          : zorch_fill_(v, lua_tonumber(L, 3));
  zorch_tensor_free(v);
  return st ? lz_fail(L) : 0;
}

static int t_newindex(lua_State *L) {
  zorch_tensor *t = lz_check(L, 1);
  if (lua_type(L, 2) == LUA_TNUMBER) {
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i == 0) return luaL_error(L, "index: indices are 1-based (0 is not an index)");
    zorch_tensor *src = lua_type(L, 3) == LUA_TNUMBER ? NULL : lz_check(L, 3);
    bool integer = !src && lua_isinteger(L, 3);
    int64_t at = i > 0 ? i - 1 : i;
    if (src ? zorch_setitem_(t, at, src)
            : integer ? zorch_setitem_fill_i64_(t, at, lua_tointeger(L, 3)) : zorch_setitem_fill_(t, at, lua_tonumber(L, 3)))
      return lz_fail(L);
    return 0;
  }
  if (lua_type(L, 2) == LUA_TTABLE) return table_assign(L, t);
  if (zorch_to_tensor(L, 2)) return luaL_error(L, "%s", TENSOR_KEY);
  const char *k = luaL_checkstring(L, 2);
  if (strcmp(k, "grad") == 0) {
    if (zorch_set_grad(t, lua_isnil(L, 3) ? NULL : lz_check(L, 3))) return lz_fail(L);
    return 0;
  }
  if (strcmp(k, "requires_grad") == 0) {
    if (zorch_set_requires_grad(t, lua_toboolean(L, 3))) return lz_fail(L);
    return 0;
  }
  return luaL_error(L, "tensor: cannot set field '%s'", k);
}

void lz_protect_metatable(lua_State *L) {
  lua_createtable(L, 0, 1);
  lua_getfield(L, -2, "__name");
  lua_setfield(L, -2, "__name");
  lua_setfield(L, -2, "__metatable");
}

void lz_open_tensor(lua_State *L) {
  static const luaL_Reg meta[] = {{"__gc", t_gc},     {"__close", t_gc},     {"__tostring", t_tostring},
                                  {"__len", t_len},   {"__concat", t_concat}, {"__newindex", t_newindex},
                                  {NULL, NULL}};
  static const luaL_Reg arith_meta[] = {{"__add", t_add}, {"__sub", t_sub}, {"__mul", t_mul}, {"__div", t_div},
                                        {"__pow", t_pow}, {"__unm", t_unm}, {"__idiv", t_idiv},
                                        {"__mod", t_mod}, {NULL, NULL}};
  luaL_newmetatable(L, LZ_TENSOR);
  luaL_setfuncs(L, meta, 0);
  lua_createtable(L, 2, 0); /* the state table: the metatable and a spare box (once __gc is set: */
  lua_pushvalue(L, -2);     /* Lua finalises only what had its __gc when the metatable was set) */
  lua_rawseti(L, -2, S_MT);
  new_box(L, lua_gettop(L));
  lua_rawseti(L, -2, S_SPARE);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
  lz_push_state(L);
  luaL_setfuncs(L, arith_meta, 1); /* upvalue 1: the state table, for lz_push_up */
  lua_newtable(L); /* the methods: metatable.__methods, and upvalue of __index */
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__methods");
  lua_pushcclosure(L, t_index, 1);
  lua_setfield(L, -2, "__index");
  lz_protect_metatable(L);
  lua_pop(L, 1);
  luaL_newmetatable(L, LZ_SHAPE);
  lua_pushcfunction(L, shape_tostring);
  lua_setfield(L, -2, "__tostring");
  lz_protect_metatable(L);
  lua_pop(L, 1);
}
