/* lfs.c: the public names of the file and JSON helpers scripts use:
   zorch.fs.mkdir(path [, parents]), zorch.fs.write_atomic(path, text),
   zorch.json.encode(value), zorch.json.decode(text [, strict]). The
   functions are lfiles.c's, which the embedded modules call by their private
   names; here they get the names a script may use. */
#include "lz.h"

/* t.name = z[from], with z the module table at index z */
static void alias(lua_State *L, int z, const char *name, const char *from) {
  lua_pushstring(L, from);
  lua_rawget(L, z);
  if (!lua_iscfunction(L, -1)) luaL_error(L, "zorch: %s is missing (open the file helpers first)", from);
  lua_setfield(L, -2, name);
}

/* [-0, +0]: zorch.fs and zorch.json into the module table on top, after lz_open_files */
void lz_open_fs(lua_State *L) {
  int z = lua_gettop(L);
  lua_createtable(L, 0, 2);
  alias(L, z, "mkdir", "_mkdir");
  alias(L, z, "write_atomic", "_write_atomic");
  lua_setfield(L, z, "fs");
  lua_createtable(L, 0, 2);
  alias(L, z, "encode", "_json_encode");
  alias(L, z, "decode", "_json_decode");
  lua_setfield(L, z, "json");
}
