/* ldata.c: zorch.data's file readers (CSV, .npy, IDX, token files); the
   formats are ops/io's, through the public API. */
#include "lz.h"

/* Pushes the tensor a reader made into *t, or raises its error. */
static int pushed(lua_State *L, zorch_status st, zorch_tensor *const *t) {
  if (st) return lz_fail(L);
  return lz_push(L, *t);
}

/* zorch.data.read_csv(path, {header = true, delimiter = ","}) -> float32 (rows, cols) */
static int l_read_csv(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  zorch_csv_opts o = {false, ','};
  if (lua_istable(L, 2)) {
    lz_getfield(L, 2, "header");
    o.header = lua_toboolean(L, -1);
    lz_getfield(L, 2, "delimiter");
    if (lua_isstring(L, -1)) o.delimiter = lua_tostring(L, -1)[0];
    lua_pop(L, 2);
  }
  zorch_tensor *t;
  return pushed(L, zorch_csv_load(path, &o, &t), &t);
}

/* zorch.data.load_npy(path) */
static int l_load_npy(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  zorch_tensor *t;
  return pushed(L, zorch_npy_load(path, &t), &t);
}

/* zorch.data.load_idx(path) -> a tensor of the stored shape */
static int l_load_idx(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  zorch_tensor *t;
  return pushed(L, zorch_idx_load(path, &t), &t);
}

/* zorch.data.load_tokens(path, width) -> int64 (n,) */
static int l_load_tokens(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lua_Integer width = luaL_optinteger(L, 2, 1);
  if (width != 1 && width != 2 && width != 4) return luaL_argerror(L, 2, "token width must be 1 (bytes), 2 (uint16) or 4 (uint32)");
  lz_check_path(L, path, "read");
  zorch_tensor *t;
  return pushed(L, zorch_tokens_load(path, (int)width, &t), &t);
}

void lz_open_data(lua_State *L) {
  static const luaL_Reg fns[] = {{"_read_csv", l_read_csv},
                                 {"_load_npy", l_load_npy},
                                 {"_load_tokens", l_load_tokens},
                                 {"_load_idx", l_load_idx},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
