/* ldist.c: process groups for Lua (zorch.dist). A group is a set of ranks with
   its own communicator: the collectives and the point-to-point exchange of
   include/zorch_zero.h run over it. lua/dist.lua builds the data x pipeline x
   tensor layout from these. */
#include <string.h>

#include "lz.h"

#define LZ_GROUP "zorch.Group"

typedef struct {
  zorch_zero_comm *c;
} lz_group;

static zorch_zero_comm *world_comm(lua_State *L) {
  zorch_zero_comm *c = lz_sandboxed(L) ? zorch_zero_local() : zorch_zero_world();
  if (!c) lz_fail(L);
  return c;
}

static void push_group(lua_State *L, zorch_zero_comm *c) {
  lz_group *g = lua_newuserdatauv(L, sizeof *g, 0);
  g->c = c;
  lz_setmetatable(L, LZ_GROUP);
}

static zorch_zero_comm *lz_check_group(lua_State *L, int idx) {
  return ((lz_group *)luaL_checkudata(L, idx, LZ_GROUP))->c;
}

/* A group argument that may be absent: the world's. */
zorch_zero_comm *lz_opt_group(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? world_comm(L) : lz_check_group(L, idx);
}

/* zorch.dist.world() -> the group of every rank */
static int l_world(lua_State *L) {
  push_group(L, world_comm(L));
  return 1;
}

/* group:split(color, key) -> the group of the ranks that passed this color */
static int g_split(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1), *out;
  lua_Integer color = luaL_checkinteger(L, 2), key = luaL_optinteger(L, 3, zorch_zero_comm_rank(c));
  if (color < 0 || color > 1 << 30) return luaL_argerror(L, 2, "color must be a small integer >= 0");
  if (zorch_zero_comm_split(c, (int)color, (int)key, &out)) return lz_fail(L);
  push_group(L, out);
  return 1;
}

static int g_rank(lua_State *L) {
  lua_pushinteger(L, zorch_zero_comm_rank(lz_check_group(L, 1)));
  return 1;
}

static int g_size(lua_State *L) {
  lua_pushinteger(L, zorch_zero_comm_size(lz_check_group(L, 1)));
  return 1;
}

/* group:ranks() -> the world rank of each of the group's ranks, in order */
static int g_ranks(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  lua_createtable(L, zorch_zero_comm_size(c), 0);
  for (int r = 0; r < zorch_zero_comm_size(c); r++) {
    lua_pushinteger(L, zorch_zero_comm_world_rank(c, r));
    lua_rawseti(L, -2, r + 1);
  }
  return 1;
}

/* A rank of the group, as given in Lua (0-based, like rank()). */
static int check_peer(lua_State *L, zorch_zero_comm *c, int idx, const char *fn, const char *what) {
  lua_Integer r = luaL_checkinteger(L, idx);
  if (r < 0 || r >= zorch_zero_comm_size(c))
    return luaL_error(L, "%s: %s rank %d is outside the group of %d ranks (ranks count from 0)", fn, what, (int)r,
                      zorch_zero_comm_size(c));
  return (int)r;
}

static int g_allreduce(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *t = lz_check(L, 2);
  const char *op = luaL_optstring(L, 3, "sum");
  if (strcmp(op, "sum") && strcmp(op, "max"))
    return luaL_error(L, "Group:allreduce: op must be \"sum\" or \"max\", got \"%s\"", op);
  if (op[0] == 'm' ? zorch_zero_allreduce_max(c, t) : zorch_zero_allreduce(c, t)) return lz_fail(L);
  lua_settop(L, 2);
  return 1;
}

static int g_allgather(lua_State *L) {
  if (zorch_zero_allgather(lz_check_group(L, 1), lz_check(L, 2), lz_check(L, 3))) return lz_fail(L);
  lua_settop(L, 3);
  return 1;
}

/* group:reduce_scatter(send, recv[, {count per rank}]): equal parts without counts */
static int g_reduce_scatter(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *send = lz_check(L, 2), *recv = lz_check(L, 3);
  int64_t *counts = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)zorch_zero_comm_size(c), 0);
  for (int r = 0; r < zorch_zero_comm_size(c); r++) {
    if (lua_istable(L, 4)) {
      lz_geti(L, 4, r + 1);
      counts[r] = luaL_checkinteger(L, -1);
      lua_pop(L, 1);
    } else {
      counts[r] = zorch_tensor_numel(recv);
    }
  }
  if (zorch_zero_reduce_scatter(c, send, recv, counts)) return lz_fail(L);
  lua_settop(L, 3);
  return 1;
}

static int g_broadcast(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *t = lz_check(L, 2);
  int root = lua_isnoneornil(L, 3) ? 0 : check_peer(L, c, 3, "Group:broadcast", "root");
  if (zorch_zero_broadcast(c, t, root)) return lz_fail(L);
  lua_settop(L, 2);
  return 1;
}

/* group:sendrecv(send, dst, recv, src): either half may be nil */
static int g_sendrecv(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *send = lua_isnil(L, 2) ? NULL : lz_check(L, 2);
  int dst = send ? check_peer(L, c, 3, "Group:sendrecv", "destination") : 0;
  zorch_tensor *recv = lua_isnoneornil(L, 4) ? NULL : lz_check(L, 4);
  int src = recv ? check_peer(L, c, 5, "Group:sendrecv", "source") : 0;
  if (zorch_zero_sendrecv(c, send, dst, recv, src)) return lz_fail(L);
  if (!recv) return 0;
  lua_settop(L, 4);
  return 1;
}

static int g_send(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *t = lz_check(L, 2);
  if (zorch_zero_sendrecv(c, t, check_peer(L, c, 3, "Group:send", "destination"), NULL, 0)) return lz_fail(L);
  return 0;
}

static int g_recv(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  zorch_tensor *t = lz_check(L, 2);
  if (zorch_zero_sendrecv(c, NULL, 0, t, check_peer(L, c, 3, "Group:recv", "source"))) return lz_fail(L);
  lua_settop(L, 2);
  return 1;
}

/* group:compressed_allreduce(buf, worker_error, server_error) -> buf, now the
   mean over the group through 1-bit compression with error feedback */
static int g_compressed_allreduce(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  if (zorch_zero_compressed_allreduce(c, lz_check(L, 2), lz_check(L, 3), lz_check(L, 4))) return lz_fail(L);
  lua_settop(L, 2);
  return 1;
}

/* group:onebit_sizes(n) -> the worker and server error buffers' sizes for n elements */
static int g_onebit_sizes(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 0) return luaL_argerror(L, 2, "Group:onebit_sizes: a number of elements >= 0");
  int64_t p = zorch_zero_onebit_padded(c, n);
  lua_pushinteger(L, p);
  lua_pushinteger(L, p / zorch_zero_comm_size(c));
  return 2;
}

static int g_barrier(lua_State *L) {
  if (zorch_zero_barrier(lz_check_group(L, 1))) return lz_fail(L);
  return 0;
}

/* group:bytes([reset]) -> sent, received since the last reset */
static int g_bytes(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  uint64_t sent, recv;
  zorch_zero_comm_bytes(c, &sent, &recv, lua_toboolean(L, 2));
  lua_pushinteger(L, (lua_Integer)sent);
  lua_pushinteger(L, (lua_Integer)recv);
  return 2;
}

static int g_tostring(lua_State *L) {
  zorch_zero_comm *c = lz_check_group(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushfstring(L, "zorch.Group(rank %d of %d, world ranks ", zorch_zero_comm_rank(c), zorch_zero_comm_size(c));
  luaL_addvalue(&b);
  for (int r = 0; r < zorch_zero_comm_size(c); r++) {
    lua_pushfstring(L, r ? ",%d" : "%d", zorch_zero_comm_world_rank(c, r));
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return 1;
}

static int g_eq(lua_State *L) {
  lua_pushboolean(L, lz_check_group(L, 1) == lz_check_group(L, 2));
  return 1;
}

void lz_open_dist(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"split", g_split},         {"rank", g_rank},         {"size", g_size},
      {"ranks", g_ranks},         {"allreduce", g_allreduce}, {"allgather", g_allgather},
      {"reduce_scatter", g_reduce_scatter}, {"broadcast", g_broadcast}, {"sendrecv", g_sendrecv},
      {"send", g_send},           {"recv", g_recv},         {"barrier", g_barrier},
      {"bytes", g_bytes},         {"compressed_allreduce", g_compressed_allreduce},
      {"onebit_sizes", g_onebit_sizes}, {NULL, NULL}};
  if (luaL_newmetatable(L, LZ_GROUP)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, g_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, g_eq);
    lua_setfield(L, -2, "__eq");
    lua_pushliteral(L, "zorch.Group");
    lua_setfield(L, -2, "__name");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_world);
  lua_setfield(L, -2, "_group_world");
}
