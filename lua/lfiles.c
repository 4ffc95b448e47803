/* lfiles.c: what checkpoints need from C: JSON through cJSON, file hashes,
   atomic small writes, directories, and the default generator's state. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lz.h"

/* ---- JSON: tables with string keys are objects, sequences arrays ------------------ */
static cJSON *to_json(lua_State *L, int idx, int depth) {
  if (depth > 32) luaL_error(L, "json: nested too deep");
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: return cJSON_CreateNumber(lua_tonumber(L, idx));
    case LUA_TSTRING: return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TTABLE: break;
    default: return cJSON_CreateNull();
  }
  idx = lua_absindex(L, idx);
  lua_Integer n = luaL_len(L, idx);
  cJSON *out = n > 0 ? cJSON_CreateArray() : cJSON_CreateObject();
  if (!out) return NULL;
  if (n > 0) {
    for (lua_Integer i = 1; i <= n; i++) {
      lua_geti(L, idx, i);
      cJSON_AddItemToArray(out, to_json(L, -1, depth + 1));
      lua_pop(L, 1);
    }
    return out;
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING) cJSON_AddItemToObject(out, lua_tostring(L, -2), to_json(L, -1, depth + 1));
    lua_pop(L, 1);
  }
  return out;
}

static int l_json_encode(lua_State *L) {
  cJSON *j = to_json(L, 1, 0);
  char *s = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  if (!s) return luaL_error(L, "json: out of memory");
  lua_pushstring(L, s);
  cJSON_free(s);
  return 1;
}

static void from_json(lua_State *L, const cJSON *j, int depth) {
  luaL_checkstack(L, 4, "json");
  if (depth > 64) luaL_error(L, "json: nested too deep");
  if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
  else if (cJSON_IsNumber(j)) {
    double v = j->valuedouble;
    if (v == (double)(lua_Integer)v && v > -9e15 && v < 9e15) lua_pushinteger(L, (lua_Integer)v);
    else lua_pushnumber(L, v);
  } else if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
  else if (cJSON_IsArray(j)) {
    lua_newtable(L);
    int i = 1;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
      from_json(L, c, depth + 1);
      lua_rawseti(L, -2, i);
    }
  } else if (cJSON_IsObject(j)) {
    lua_newtable(L);
    for (const cJSON *c = j->child; c; c = c->next) {
      from_json(L, c, depth + 1);
      lua_setfield(L, -2, c->string);
    }
  } else lua_pushnil(L);
}

static int l_json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  cJSON *j = cJSON_ParseWithLength(s, n);
  if (!j) return luaL_error(L, "json: not valid JSON (near byte %d)", (int)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - s : 0));
  from_json(L, j, 0);
  cJSON_Delete(j);
  return 1;
}

/* FNV-1a (64 bits) of a file, as 16 hex digits; nil and a message when unreadable. */
static int l_file_hash(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  FILE *f = fopen(path, "rb");
  if (!f) {
    lua_pushnil(L);
    lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
    return 2;
  }
  uint64_t h = 0xcbf29ce484222325ull;
  unsigned char buf[1 << 16];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < k; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
  fclose(f);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  lua_pushstring(L, hex);
  return 1;
}

/* Writes text to path atomically: a temporary file, fsync, rename. */
static int l_write_atomic(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return luaL_error(L, "write: path too long");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return luaL_error(L, "write: cannot create %s: %s", tmp, strerror(errno));
  bool ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return luaL_error(L, "write: %s: %s", path, strerror(e));
  }
  return 0;
}

/* Removes a flat folder (a checkpoint) and the files in it; a missing folder is fine. */
static int l_remove_dir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (!d) {
    if (errno == ENOENT) return 0;
    return luaL_error(L, "remove %s: %s", path, strerror(errno));
  }
  struct dirent *e;
  char full[4096];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (snprintf(full, sizeof full, "%s/%s", path, e->d_name) >= (int)sizeof full) continue;
    unlink(full);
  }
  closedir(d);
  if (rmdir(path) != 0 && errno != ENOENT) return luaL_error(L, "remove %s: %s", path, strerror(errno));
  return 0;
}

static int l_mkdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) return luaL_error(L, "mkdir %s: %s", path, strerror(errno));
  return 0;
}

/* The default generator's offset (its seed is the run's), to resume a stream. */
static int l_rng_state(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)zorch_generator_offset(zorch_default_generator()));
  return 1;
}

static int l_rng_set_offset(lua_State *L) {
  zorch_generator_set_offset(zorch_default_generator(), (uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

void lz_open_files(lua_State *L) {
  static const luaL_Reg fns[] = {{"_json_encode", l_json_encode}, {"_json_decode", l_json_decode},
                                 {"_file_hash", l_file_hash},     {"_write_atomic", l_write_atomic},
                                 {"_mkdir", l_mkdir},             {"_remove_dir", l_remove_dir},             {"_rng_offset", l_rng_state},
                                 {"_rng_set_offset", l_rng_set_offset}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
