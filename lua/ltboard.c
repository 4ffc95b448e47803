/* ltboard.c: the TensorBoard event records metrics.lua writes; the encoding
   is ops/io/events.c's, through the public API. */
#include <math.h>
#include <stdlib.h>

#include "lz.h"

/* zorch._tb_event(step, values|nil, file_version|nil [, wall_time]) -> the framed
   record (a string). values maps tags to numbers (other entries are skipped);
   wall_time defaults to now (seconds since the epoch). */
static int l_tb_event(lua_State *L) {
  lua_Integer step = luaL_checkinteger(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  const char *version = luaL_optstring(L, 3, NULL);
  double wall = lua_isnoneornil(L, 4) ? NAN : luaL_checknumber(L, 4);
  int n = 0;
  if (lua_istable(L, 2))
    for (lua_pushnil(L); lua_next(L, 2); lua_pop(L, 1)) n++;
  /* the tags (kept alive by the table), their lengths and values */
  const char **tags = lua_newuserdatauv(L, sizeof *tags * (size_t)(n ? n : 1), 0);
  size_t *lens = lua_newuserdatauv(L, sizeof *lens * (size_t)(n ? n : 1), 0);
  double *values = lua_newuserdatauv(L, sizeof *values * (size_t)(n ? n : 1), 0);
  n = 0;
  if (lua_istable(L, 2)) {
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TNUMBER) {
        tags[n] = lua_tolstring(L, -2, &lens[n]);
        values[n++] = lua_tonumber(L, -1);
      }
      lua_pop(L, 1);
    }
  }
  void *rec;
  size_t len;
  if (zorch_event_encode(step, wall, version, n, tags, lens, values, &rec, &len)) return lz_fail(L);
  return lz_push_owned(L, rec, len);
}

/* zorch._crc32c(s) -> the CRC-32C of s; zorch._crc32c(s, true) -> its masked form */
static int l_crc32c(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_pushinteger(L, (lua_Integer)zorch_crc32c(s, n, lua_toboolean(L, 2)));
  return 1;
}

/* zorch._tb_filename(dir) -> dir/events.out.tfevents.<seconds>.<host>.<pid> */
static int l_tb_filename(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  luaL_Buffer b;
  char *buf = luaL_buffinitsize(L, &b, 4096);
  if (zorch_events_filename(dir, buf, 4096)) return lz_fail(L);
  luaL_pushresultsize(&b, strlen(buf));
  return 1;
}

void lz_open_tboard(lua_State *L) {
  static const luaL_Reg fns[] = {{"_tb_event", l_tb_event}, {"_crc32c", l_crc32c}, {"_tb_filename", l_tb_filename},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
