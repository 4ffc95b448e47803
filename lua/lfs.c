/* lfs.c: the file and JSON helpers: zorch.fs.mkdir(path [, parents]),
   zorch.fs.write_atomic(path, text), zorch.json.encode(value),
   zorch.json.decode(text [, strict]) for scripts and the embedded modules
   alike, and the private ones checkpoints use (file hashes, listing and
   removing a checkpoint's folder, the lock of a checkpoint folder). JSON goes
   through cJSON. Every function that touches a file asks the sandbox first
   (lz_check_path). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lz.h"

/* ---- JSON: tables with string keys are objects, sequences arrays ------------------ */
/* The tree being built hangs from a userdata whose __gc frees it, and every node
   joins its parent before it is filled: a Lua error raised part-way (a __len or
   __index metamethod, a table nested too deep) leaks nothing. */
typedef struct {
  cJSON *root;
} json_box;

static int json_box_gc(lua_State *L) {
  json_box *b = lua_touserdata(L, 1);
  cJSON_Delete(b->root);
  b->root = NULL;
  return 0;
}

/* A node for the value at idx: a scalar, or an empty array/object for a table. */
static cJSON *json_node(lua_State *L, int idx) {
  cJSON *j;
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: j = cJSON_CreateBool(lua_toboolean(L, idx)); break;
    case LUA_TNUMBER: j = cJSON_CreateNumber(lua_tonumber(L, idx)); break;
    case LUA_TSTRING: j = cJSON_CreateString(lua_tostring(L, idx)); break;
    case LUA_TTABLE: j = lz_len(L, idx) > 0 ? cJSON_CreateArray() : cJSON_CreateObject(); break;
    default: j = cJSON_CreateNull();
  }
  if (!j) luaL_error(L, "json: out of memory");
  return j;
}

static void json_fill(lua_State *L, int idx, cJSON *out, int depth);

/* Adds the value on top of the stack to out (under key when out is an object). */
static void json_add(lua_State *L, cJSON *out, const char *key, int depth) {
  cJSON *j = json_node(L, -1);
  if (!(key ? cJSON_AddItemToObject(out, key, j) : cJSON_AddItemToArray(out, j))) {
    cJSON_Delete(j);
    luaL_error(L, "json: out of memory");
  }
  if (lua_type(L, -1) == LUA_TTABLE) json_fill(L, -1, j, depth + 1);
}

static void json_fill(lua_State *L, int idx, cJSON *out, int depth) {
  if (depth > 32) luaL_error(L, "json: nested too deep");
  luaL_checkstack(L, 4, "json");
  idx = lua_absindex(L, idx);
  if (cJSON_IsArray(out)) {
    lua_Integer n = lz_len(L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
      lz_geti(L, idx, i);
      json_add(L, out, NULL, depth);
      lua_pop(L, 1);
    }
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING) json_add(L, out, lua_tostring(L, -2), depth);
    lua_pop(L, 1);
  }
}

/* json.encode(v [, {compact = true}]): compact is one line (server-sent events) */
static int l_json_encode(lua_State *L) {
  int compact = 0;
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "compact");
    compact = lua_toboolean(L, -1);
  }
  lua_settop(L, 1);
  json_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->root = NULL;
  if (luaL_newmetatable(L, "zorch.json_tree")) {
    lua_pushcfunction(L, json_box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  b->root = json_node(L, 1);
  if (lua_type(L, 1) == LUA_TTABLE) json_fill(L, 1, b->root, 0);
  char *s = compact ? cJSON_PrintUnformatted(b->root) : cJSON_Print(b->root);
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

/* Where the number starting at s[i] breaks JSON's grammar
   -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, or -1 when it does not (cJSON reads
   numbers with strtod, so "01" and "1." would pass it). Sets *end past the number. */
static long json_number_error(const char *s, size_t n, size_t i, size_t *end) {
  size_t k = i;
  if (k < n && s[k] == '-') k++;
  if (k < n && s[k] == '0') {
    k++;
    if (k < n && s[k] >= '0' && s[k] <= '9') return (long)k; /* a leading zero */
  } else if (k < n && s[k] >= '1' && s[k] <= '9') {
    while (k < n && s[k] >= '0' && s[k] <= '9') k++;
  } else return (long)k;
  if (k < n && s[k] == '.') {
    size_t d = ++k;
    while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    if (k == d) return (long)k;
  }
  if (k < n && (s[k] == 'e' || s[k] == 'E')) {
    k++;
    if (k < n && (s[k] == '+' || s[k] == '-')) k++;
    size_t d = k;
    while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    if (k == d) return (long)k;
  }
  *end = k;
  return -1;
}

/* The first byte of a number outside strings that breaks JSON's number grammar,
   or -1. A scan of the numbers only: cJSON parses the text. */
static long json_numbers_check(const char *s, size_t n) {
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
    } else if (c == '"') in_string = true;
    else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i + 1;
      long bad = json_number_error(s, n, i, &end);
      if (bad >= 0) return bad;
      i = end - 1;
    }
  }
  return -1;
}

/* What makes a parsed tree unfit for strict reading: a number out of range, an
   object that repeats a key (written into msg), or a tree nested too deep. */
static bool json_strict_ok(lua_State *L, const cJSON *j, int depth, char *msg, size_t n) {
  if (depth > 64) return snprintf(msg, n, "nested too deep"), false;
  if (cJSON_IsNumber(j) && !(j->valuedouble - j->valuedouble == 0))
    return snprintf(msg, n, "a number is out of range"), false;
  if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return true;
  luaL_checkstack(L, 4, "json");
  lua_newtable(L); /* the keys seen in this object */
  for (const cJSON *c = j->child; c; c = c->next) {
    if (cJSON_IsObject(j)) {
      if (lz_getfield(L, -1, c->string) != LUA_TNIL) {
        lua_pop(L, 2);
        return snprintf(msg, n, "the key \"%.200s\" appears twice in one object", c->string), false;
      }
      lua_pop(L, 1);
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, c->string);
    }
    if (!json_strict_ok(L, c, depth + 1, msg, n)) {
      lua_pop(L, 1);
      return false;
    }
  }
  lua_pop(L, 1);
  return true;
}

/* zorch.json.decode(text [, strict]): the value of a JSON text. Strict (for
   manifests and configuration files): the text is one JSON object with nothing
   after it but white space, its numbers follow JSON's grammar (no leading zeros)
   and are finite, and no object repeats a key. */
static int l_json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  bool strict = lua_toboolean(L, 2);
  const char *end = NULL;
  cJSON *j = strict ? cJSON_ParseWithLengthOpts(s, n + 1, &end, 1) : cJSON_ParseWithLength(s, n);
  if (!j) return luaL_error(L, "json: not valid JSON (near byte %d)", (int)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - s : 0));
  if (strict) {
    char msg[300] = "";
    long at = -1;
    if (!cJSON_IsObject(j)) snprintf(msg, sizeof msg, "the text is not a JSON object");
    else if (end != s + n) snprintf(msg, sizeof msg, "something follows the JSON object (byte %ld)", (long)(end - s));
    else if ((at = json_numbers_check(s, n)) >= 0)
      snprintf(msg, sizeof msg, "a number is not written as JSON writes numbers (byte %ld)", at);
    else json_strict_ok(L, j, 0, msg, sizeof msg);
    if (*msg) {
      cJSON_Delete(j);
      return luaL_error(L, "json: %s", msg);
    }
  }
  from_json(L, j, 0);
  cJSON_Delete(j);
  return 1;
}

/* FNV-1a (64 bits) of a file, as 16 hex digits; nil and a message when unreadable. */
static int l_file_hash(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
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
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "write");
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  if (zorch_write_file_atomic(path, text, n)) return lz_fail(L);
  return 0;
}

/* Removes a flat folder (a checkpoint) and the files in it; a missing folder is fine. */
static int l_remove_dir(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "write");
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

/* zorch._lock_dir(dir): takes DIR/lock for this process, for its whole life
   (flock: the kernel drops it when the process dies, so a dead holder's lock
   is free again; the file's "host pid" is only for the message). Returns
   true (also when this process holds it already), or nil, a message and the
   holder's "host pid" when another process holds it; nil and a message (and
   false) when the file cannot be made (a read-only folder). */
static int l_lock_dir(lua_State *L) {
  const char *dir = lz_checkpath(L, 1);
  lz_check_path(L, dir, "write");
  char path[4200];
  if (snprintf(path, sizeof path, "%s/lock", dir) >= (int)sizeof path) return luaL_error(L, "lock %s: path too long", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
    lua_pushboolean(L, 0);
    return 3;
  }
  struct stat st;
  char key[64] = "";
  if (fstat(fd, &st) == 0) snprintf(key, sizeof key, "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
  /* the locks this process holds, by file: a second Engine of the same job is no other job */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, "zorch.dir_locks");
  if (lz_getfield(L, -1, key) != LUA_TNIL) {
    close(fd);
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pop(L, 1);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char holder[256] = "";
    ssize_t k = pread(fd, holder, sizeof holder - 1, 0);
    holder[k > 0 ? k : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    close(fd);
    lua_pushnil(L);
    if (e == EWOULDBLOCK) lua_pushfstring(L, "%s is held by another process", path);
    else lua_pushfstring(L, "cannot lock %s: %s", path, strerror(e));
    lua_pushstring(L, holder);
    return 3;
  }
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  char text[320];
  int n = snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
  bool wrote = ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n;
  (void)wrote; /* without it only the holder's message lacks its name */
  lua_pushinteger(L, fd); /* kept open (and locked) until the process ends */
  lua_setfield(L, -2, key);
  lua_pushboolean(L, 1);
  return 1;
}

/* The names in a folder (not . and ..), in no order; nil and a message when unreadable. */
static int l_list_dir(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  DIR *d = opendir(path);
  if (!d) {
    lua_pushnil(L);
    lua_pushfstring(L, "cannot list %s: %s", path, strerror(errno));
    return 2;
  }
  lua_newtable(L);
  int i = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++i);
  }
  closedir(d);
  return 1;
}

/* zorch.fs.mkdir(path [, parents]): with parents, the missing folders above it
   too. Only the missing ones are checked against the sandbox (the folders
   above an allowed one exist anyway), and every refusal names the whole path,
   so no answer tells which folders exist. */
static int l_mkdir(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  if (lua_toboolean(L, 2)) {
    size_t n = strlen(path);
    char *p = lua_newuserdatauv(L, n + 1, 0);
    memcpy(p, path, n + 1);
    for (size_t i = 1; i < n; i++) {
      if (p[i] != '/' || p[i - 1] == '/') continue;
      p[i] = 0;
      struct stat st;
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (!lz_path_allowed(L, p, 1)) {
          lz_check_path(L, path, "write"); /* refuses: its folder is missing */
          return luaL_error(L, "mkdir %s: not allowed in this sandbox", path);
        }
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return luaL_error(L, "mkdir %s: %s", p, strerror(errno));
      }
      p[i] = '/';
    }
  }
  lz_check_path(L, path, "write");
  if (mkdir(path, 0777) != 0 && errno != EEXIST) return luaL_error(L, "mkdir %s: %s", path, strerror(errno));
  return 0;
}

/* [-0, +0]: zorch.fs, zorch.json and the private helpers into the module table on top */
void lz_open_fs(lua_State *L) {
  static const luaL_Reg fs[] = {{"mkdir", l_mkdir}, {"write_atomic", l_write_atomic}, {NULL, NULL}};
  static const luaL_Reg json[] = {{"encode", l_json_encode}, {"decode", l_json_decode}, {NULL, NULL}};
  static const luaL_Reg private[] = {{"_file_hash", l_file_hash}, {"_remove_dir", l_remove_dir},
                                     {"_list_dir", l_list_dir}, {"_lock_dir", l_lock_dir},
                                     {NULL, NULL}};
  luaL_newlib(L, fs);
  lua_setfield(L, -2, "fs");
  luaL_newlib(L, json);
  lua_setfield(L, -2, "json");
  luaL_setfuncs(L, private, 0);
}
