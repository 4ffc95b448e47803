/* lgradfn.c: autograd nodes whose backward is a Lua function (activation
   checkpointing recomputes its segment there), the default generator's state
   as Lua values, and the host memory counters.

   A node keeps its Lua function in the registry and calls it on a Lua thread of
   its own making, inside a protected call: an error in the Lua backward becomes
   the backward pass's error, with its message, and never unwinds through C. */
#include <stdlib.h>
#include <string.h>

#include "lz.h"

#define GRADFN_MAX_IN ZORCH_CUSTOM_MAX_IN

/* The Lua state the nodes call into, shared by them and the state: a node can
   outlive the state (a host holding a tensor after closing its VM), and then
   neither calls nor unrefs. */
typedef struct {
  int refs;     /* the state's (until it closes) and each node's */
  bool closed;
  lua_State *T; /* the thread the backwards run on (anchored in the registry) */
} gradfn_home;

static void home_release(gradfn_home *h) {
  if (--h->refs == 0) free(h);
}

typedef struct {
  gradfn_home *home;
  int ref; /* the backward function, in the registry */
} gradfn_args;

/* What one call of the Lua backward gets and gives, across the protected call. */
typedef struct {
  int ref, nin;
  zorch_tensor *g;
  zorch_tensor **gin;
} gradfn_call;

static int gradfn_call_lua(lua_State *L) {
  gradfn_call *c = lua_touserdata(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
  lz_push(L, zorch_tensor_retain(c->g));
  lua_call(L, 1, c->nin);
  int base = lua_gettop(L) - c->nin;
  for (int i = 0; i < c->nin; i++) {
    int idx = base + 1 + i;
    if (lua_isnil(L, idx)) continue;
    if (!luaL_testudata(L, idx, LZ_TENSOR))
      return luaL_error(L, "backward function: result %d must be a tensor or nil, got %s", i + 1,
                        luaL_typename(L, idx));
    c->gin[i] = zorch_tensor_retain(lz_check(L, idx));
  }
  return 0;
}

static zorch_status gradfn_backward(void *ctx, zorch_tensor *g, zorch_tensor *const *saved, int nin,
                                    zorch_tensor **gin) {
  (void)saved;
  const gradfn_args *a = ctx;
  if (a->home->closed) return zorch_set_error(ZORCH_ERR_STATE, "the Lua state that recorded this node was closed");
  lua_State *T = a->home->T;
  gradfn_call c = {a->ref, nin, g, gin};
  int top = lua_gettop(T);
  if (!lua_checkstack(T, nin + 8)) return zorch_set_error(ZORCH_ERR_OOM, "out of Lua stack");
  lz_vm_hook_thread(T, T); /* made in an earlier entry, it runs under this one's budget */
  lua_pushcfunction(T, gradfn_call_lua);
  lua_pushlightuserdata(T, &c);
  zorch_status st = ZORCH_OK;
  if (lua_pcall(T, 1, 0, 0) != LUA_OK) {
    const char *msg = lua_tostring(T, -1);
    st = zorch_set_error(ZORCH_ERR_STATE, "%s", msg ? msg : "error in the Lua backward function");
    for (int i = 0; i < nin; i++) {
      zorch_tensor_free(gin[i]);
      gin[i] = NULL;
    }
  }
  lua_settop(T, top);
  return st;
}

static void gradfn_free(void *ctx) {
  gradfn_args *a = ctx;
  if (!a->home->closed) luaL_unref(a->home->T, LUA_REGISTRYINDEX, a->ref);
  home_release(a->home);
  free(a);
}

static const zorch_custom_fn gradfn_fn = {"CheckpointBackward", gradfn_backward, gradfn_free};

/* The registry's box of the home (tagged: see lz_tagged). */
typedef struct {
  const void *tag;
  gradfn_home *h;
} home_box;
static const char home_tag;

static int home_gc(lua_State *L) {
  home_box *b = lz_tagged(L, 1, &home_tag, sizeof *b);
  if (b && b->h) {
    b->h->closed = true;
    home_release(b->h);
    b->h = NULL;
  }
  return 0;
}

/* The state's home: made on first use, with the thread the backwards run on
   (the registry's "zorch.gradfn" holds a box whose finalizer marks it closed,
   and the thread). */
static gradfn_home *gradfn_home_get(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "zorch.gradfn");
  home_box *old = lz_tagged(L, -1, &home_tag, sizeof *old);
  if (old && old->h) {
    gradfn_home *h = old->h;
    lua_pop(L, 1);
    return h;
  }
  lua_pop(L, 1);
  home_box *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->tag = &home_tag, b->h = NULL;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, home_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  gradfn_home *h = calloc(1, sizeof *h);
  if (!h) luaL_error(L, "out of memory");
  b->h = h;
  h->refs = 1;
  h->T = lua_newthread(L);
  lua_setiuservalue(L, -2, 1); /* the box keeps the thread */
  lua_setfield(L, LUA_REGISTRYINDEX, "zorch.gradfn");
  return h;
}

/* zorch._grad_fn(out, inputs, backward, name?) -> a tensor with out's values
   whose gradient g, in backward, goes to backward(g), which returns one
   gradient (or nil) per tensor of the list inputs. Without grad mode, or when
   no input requires grad, the result is out detached. */
static int l_grad_fn(lua_State *L) {
  zorch_tensor *out = lz_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  int nin = (int)lz_len(L, 2);
  if (nin > GRADFN_MAX_IN) luaL_argerror(L, 2, "at most 64 tensors");
  zorch_tensor *in[GRADFN_MAX_IN];
  for (int i = 0; i < nin; i++) {
    lz_geti(L, 2, i + 1);
    if (!luaL_testudata(L, -1, LZ_TENSOR))
      return luaL_error(L, "_grad_fn: inputs[%d] must be a tensor, got %s", i + 1, luaL_typename(L, -1));
    in[i] = lz_check(L, -1);
    lua_pop(L, 1);
  }
  if (!zorch_grad_needed(nin, in)) return lz_push(L, zorch_detach(out));
  gradfn_home *home = gradfn_home_get(L);
  lua_pushvalue(L, 3);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  gradfn_args *a = malloc(sizeof *a);
  if (!a) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    return luaL_error(L, "_grad_fn: out of memory");
  }
  *a = (gradfn_args){home, ref};
  home->refs++; /* the node's, dropped by gradfn_free (also when recording fails) */
  return lz_push(L, zorch_custom_node(out, nin, in, 0, NULL, &gradfn_fn, a));
}

/* zorch._rng_state() -> seed, offset of the default generator */
static int l_rng_state(lua_State *L) {
  const zorch_generator *g = zorch_default_generator();
  lua_pushinteger(L, (lua_Integer)zorch_generator_initial_seed(g));
  lua_pushinteger(L, (lua_Integer)zorch_generator_offset(g));
  return 2;
}

/* zorch._set_rng_state(seed, offset) */
static int l_set_rng_state(lua_State *L) {
  uint64_t seed = (uint64_t)luaL_checkinteger(L, 1), off = (uint64_t)luaL_checkinteger(L, 2);
  zorch_generator *g = zorch_default_generator();
  zorch_generator_seed(g, seed);
  zorch_generator_set_offset(g, off);
  return 0;
}

/* zorch._rng_offset() -> the default generator's offset (its seed is the run's), to resume a stream. */
static int l_rng_offset(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)zorch_generator_offset(zorch_default_generator()));
  return 1;
}

static int l_rng_set_offset(lua_State *L) {
  zorch_generator_set_offset(zorch_default_generator(), (uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

/* zorch._version(t) -> the count of in-place writes to t's storage */
static int l_version(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)zorch_tensor_version(lz_check(L, 1)));
  return 1;
}

/* zorch.host_memory() -> {in_use, peak}: bytes of host tensor storage */
static int l_host_memory(lua_State *L) {
  size_t in_use, peak;
  zorch_host_memory_stats(&in_use, &peak);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)in_use), lua_setfield(L, -2, "in_use");
  lua_pushinteger(L, (lua_Integer)peak), lua_setfield(L, -2, "peak");
  return 1;
}

static int l_reset_peak(lua_State *L) {
  (void)L;
  zorch_host_memory_reset_peak();
  return 0;
}

static const luaL_Reg gradfn_fns[] = {{"_grad_fn", l_grad_fn},
                                      {"_rng_state", l_rng_state},
                                      {"_set_rng_state", l_set_rng_state},
                                      {"_rng_offset", l_rng_offset},
                                      {"_rng_set_offset", l_rng_set_offset},
                                      {"_version", l_version},
                                      {"host_memory", l_host_memory},
                                      {"reset_peak_host_memory", l_reset_peak},
                                      {NULL, NULL}};

/* [-0, +0]: adds the functions to the module table on top. */
void lz_open_gradfn(lua_State *L) { luaL_setfuncs(L, gradfn_fns, 0); }
