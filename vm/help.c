/* help.c: the global help(x) of the zorch command. Its Lua source (help.lua)
   and the table of docs/api.md it reads are generated into the binary by
   scripts/gen_help.lua, so the text cannot drift from the documentation. */
#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>

#include "../lua/lz.h"
#include "repl.h"

extern const char help_doc_lua[], help_src_lua[];
extern const size_t help_doc_lua_len, help_src_lua_len;

/* Returns the documentation table; help() calls this once, at its first use. */
static int help_load_doc(lua_State *L) {
  if (luaL_loadbuffer(L, help_doc_lua, help_doc_lua_len, "=api.md") != LUA_OK) return lua_error(L);
  lua_call(L, 0, 1);
  return 1;
}

void help_open(lua_State *L) {
  if (luaL_loadbuffer(L, help_src_lua, help_src_lua_len, "=help.lua") != LUA_OK) lua_error(L);
  lua_pushcfunction(L, help_load_doc);
  /* the tensor methods, so help() can name them (the metatable's __methods) */
  if (luaL_getmetatable(L, LZ_TENSOR) == LUA_TTABLE) {
    lua_getfield(L, -1, "__methods");
    lua_remove(L, -2);
  }
  lua_call(L, 2, 1);
  lua_setglobal(L, "help");
}
