/* lfiles.c: zorch.save and zorch.load, and what checkpoints need from C: JSON
   through cJSON, file hashes, atomic small writes, directories, and the default
   generator's state. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ops/io/target.h"
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
  lua_Integer n = lz_len(L, idx);
  cJSON *out = n > 0 ? cJSON_CreateArray() : cJSON_CreateObject();
  if (!out) return NULL;
  if (n > 0) {
    for (lua_Integer i = 1; i <= n; i++) {
      lz_geti(L, idx, i);
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

/* zorch._json_decode(text [, strict]): the value of a JSON text. Strict (for
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
  char target[PATH_MAX];
  if (io_write_target("write", path, target)) return lz_fail(L);
  path = target;
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  char tmp[IO_TMP_MAX];
  int fd = io_create_temp("write", path, tmp);
  if (fd < 0) return lz_fail(L);
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

/* zorch._mkdir(path [, parents]): with parents, the missing folders above it
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

/* The default generator's offset (its seed is the run's), to resume a stream. */
static int l_rng_state(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)zorch_generator_offset(zorch_default_generator()));
  return 1;
}

static int l_rng_set_offset(lua_State *L) {
  zorch_generator_set_offset(zorch_default_generator(), (uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

/* ---- zorch.save / zorch.load: tensors and the values beside them ------------------
   A table of tensors alone is written as it is: its keys are the tensor names, as
   PyTorch's writer makes them. Any other table (numbers, strings, booleans,
   nested tables, tensors anywhere in it) is written as its tensors, named by
   their paths ("opt.state.1.exp_avg"), and a JSON tree of everything else, in
   the header's __metadata__ under "zorch.values" (docs/api.md describes it). */
#define LZ_VALUES_KEY "zorch.values"
#define LZ_VALUES_VERSION 1
#define LZ_JSON_BOX "zorch.cJSON"
#define LZ_TREE_DEPTH 64

/* A userdata owning a cJSON tree, so a Lua error while building or reading one
   leaves nothing behind: its __gc deletes the tree. */
static cJSON **json_box(lua_State *L) {
  cJSON **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  lz_setmetatable(L, LZ_JSON_BOX);
  return box;
}

static int json_box_gc(lua_State *L) {
  cJSON **box = luaL_checkudata(L, 1, LZ_JSON_BOX);
  cJSON_Delete(*box);
  *box = NULL;
  return 0;
}

/* The shortest "%.Ng" text that reads back as exactly x (inf, -inf, nan spelled so). */
static void float_text(double x, char *buf, size_t n) {
  if (x != x) {
    snprintf(buf, n, "nan");
    return;
  }
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) break;
  }
}

/* True when s[0..n) is UTF-8 text without NUL bytes: what a JSON string in a
   safetensors header (read as UTF-8 by every reader) can carry. */
static bool json_text_ok(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (c == 0 || len == 0 || i + len > n || (len == 2 && c < 0xC2)) return false;
    unsigned cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += len;
  }
  return true;
}

static void check_text(lua_State *L, int idx, const char *what, const char *path) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  if (!json_text_ok((const unsigned char *)s, n))
    luaL_error(L, "save: %s %s is not UTF-8 text without NUL bytes (the values are stored as JSON)", what,
               *path ? path : "of the table");
}

typedef struct {
  lua_State *L;
  int names;   /* stack index: the tensors' names, in order */
  int tensors; /* stack index: the tensors, in order */
  int used;    /* stack index: the set of names given so far */
} tree_writer;

/* Adds item to parent (an object under key, or an array), deleting it when
   that fails; raises on out of memory. */
static cJSON *tree_attach(lua_State *L, cJSON *parent, const char *key, cJSON *item) {
  bool ok = item && (key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item));
  if (!ok) {
    cJSON_Delete(item);
    luaL_error(L, "save: out of memory");
  }
  return item;
}

/* Pushes the text a key adds to a path: strings as they are, numbers and
   booleans written out; other keys are an error. */
static void tree_key_text(lua_State *L, int k, const char *path) {
  char buf[64];
  switch (lua_type(L, k)) {
    case LUA_TSTRING:
      check_text(L, k, "a key in", path);
      lua_pushvalue(L, k);
      return;
    case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, k) ? "true" : "false"); return;
    case LUA_TNUMBER:
      if (lua_isinteger(L, k)) lua_pushfstring(L, "%I", lua_tointeger(L, k));
      else {
        float_text(lua_tonumber(L, k), buf, sizeof buf);
        lua_pushstring(L, buf);
      }
      return;
    default:
      luaL_error(L, "save: a key of %s is a %s (keys are strings, numbers or booleans)", *path ? path : "the table",
                 luaL_typename(L, k));
  }
}

/* A scalar (number, string, boolean) as a node: integers that a double holds
   exactly are JSON numbers, others {"int": "digits"}; floats {"float": "text"}. */
static cJSON *tree_scalar(lua_State *L, int idx) {
  char buf[64];
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TSTRING: return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TNUMBER: break;
    default: return NULL;
  }
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  const char *kind = "float";
  if (lua_isinteger(L, idx)) {
    lua_Integer v = lua_tointeger(L, idx);
    if (v >= -(1LL << 53) && v <= (1LL << 53)) {
      cJSON_Delete(o);
      return cJSON_CreateNumber((double)v);
    }
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    kind = "int";
  } else {
    float_text(lua_tonumber(L, idx), buf, sizeof buf);
  }
  if (!cJSON_AddStringToObject(o, kind, buf)) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static int by_cstring(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A key of a table written as pairs: its Lua type, its text, where it is kept. */
typedef struct {
  int type;
  const char *text;
  lua_Integer index;
} tree_pair;

static int by_pair(const void *a, const void *b) {
  const tree_pair *x = a, *y = b;
  return x->type != y->type ? x->type - y->type : strcmp(x->text, y->text);
}

static void tree_value(tree_writer *w, int idx, const char *path, int depth, cJSON *parent, const char *key);

/* The value at key k (stack index) of the table at t, as a child of parent. */
static void tree_child(tree_writer *w, int t, int k, const char *path, int depth, cJSON *parent, const char *key) {
  lua_State *L = w->L;
  tree_key_text(L, k, path);
  const char *sub = *path ? lua_pushfstring(L, "%s.%s", path, lua_tostring(L, -1)) : lua_tostring(L, -1);
  lua_pushvalue(L, k);
  lua_rawget(L, t);
  tree_value(w, lua_gettop(L), sub, depth + 1, parent, key);
  lua_settop(L, k);
}

/* Writes the value at idx under parent (at key, or appended): a tensor is
   recorded and referenced by name, a table walked, a scalar written. */
static void tree_value(tree_writer *w, int idx, const char *path, int depth, cJSON *parent, const char *key) {
  lua_State *L = w->L;
  luaL_checkstack(L, 8, "save");
  if (depth > LZ_TREE_DEPTH)
    luaL_error(L, "save: %s is nested more than %d tables deep (a cycle?)", path, LZ_TREE_DEPTH);
  idx = lua_absindex(L, idx);
  if (zorch_to_tensor(L, idx)) {
    /* named by its path; a name taken already gets #2, #3, ... */
    const char *name = lua_pushstring(L, *path ? path : "tensor");
    for (int k = 2; lz_getfield(L, w->used, name) != LUA_TNIL; k++) {
      lua_pop(L, 2);
      name = lua_pushfstring(L, "%s#%d", *path ? path : "tensor", k);
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
    lua_setfield(L, w->used, name);
    lua_Integer n = (lua_Integer)lua_rawlen(L, w->names) + 1;
    lua_pushvalue(L, -1);
    lua_rawseti(L, w->names, n);
    lua_pushvalue(L, idx);
    lua_rawseti(L, w->tensors, n);
    cJSON *o = tree_attach(L, parent, key, cJSON_CreateObject());
    tree_attach(L, o, "tensor", cJSON_CreateString(name));
    lua_pop(L, 1);
    return;
  }
  if (lua_type(L, idx) != LUA_TTABLE) {
    if (lua_type(L, idx) == LUA_TSTRING) check_text(L, idx, "the string at", path);
    cJSON *item = tree_scalar(L, idx);
    if (!item && lua_type(L, idx) != LUA_TNUMBER && lua_type(L, idx) != LUA_TSTRING &&
        lua_type(L, idx) != LUA_TBOOLEAN)
      luaL_error(L, "save: %s is a %s (save keeps tensors, numbers, strings, booleans and tables of them)",
                 *path ? path : "the value", luaL_typename(L, idx));
    tree_attach(L, parent, key, item);
    return;
  }
  /* a table: a sequence 1..n, a table of string keys, or any other as pairs */
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
  bool seq = n > 0, strings = true;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    count++;
    if (lua_type(L, -1) != LUA_TSTRING) strings = false;
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n) seq = false;
  }
  seq = seq && count == n;
  int top = lua_gettop(L);
  if (seq) {
    cJSON *arr = tree_attach(L, parent, key, cJSON_CreateArray());
    for (lua_Integer i = 1; i <= n; i++) {
      lua_pushinteger(L, i);
      tree_child(w, idx, top + 1, path, depth, arr, NULL);
      lua_settop(L, top);
    }
  } else if (strings) {
    /* keys in sorted order, so the same table always gives the same file */
    const char **keys = lua_newuserdatauv(L, sizeof *keys * (size_t)(count ? count : 1), 0);
    lua_Integer k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      keys[k++] = lua_tostring(L, -1);
    }
    qsort(keys, (size_t)count, sizeof *keys, by_cstring);
    cJSON *o = tree_attach(L, parent, key, cJSON_CreateObject());
    cJSON *map = tree_attach(L, o, "map", cJSON_CreateObject());
    for (k = 0; k < count; k++) {
      lua_pushstring(L, keys[k]);
      tree_child(w, idx, top + 2, path, depth, map, keys[k]);
      lua_settop(L, top + 1);
    }
  } else {
    /* keys sorted by type and text, so the same table always gives the same file */
    lua_createtable(L, (int)count, 0); /* top + 1: the keys */
    lua_createtable(L, (int)count, 0); /* top + 2: their texts */
    tree_pair *keys = lua_newuserdatauv(L, sizeof *keys * (size_t)(count ? count : 1), 0);
    lua_Integer k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_rawseti(L, top + 1, k + 1);
      tree_key_text(L, lua_gettop(L), path); /* checks the key's type */
      keys[k] = (tree_pair){lua_type(L, -2), lua_tostring(L, -1), k + 1};
      lua_rawseti(L, top + 2, ++k);
    }
    qsort(keys, (size_t)count, sizeof *keys, by_pair);
    cJSON *o = tree_attach(L, parent, key, cJSON_CreateObject());
    cJSON *pairs = tree_attach(L, o, "pairs", cJSON_CreateArray());
    for (k = 0; k < count; k++) {
      lua_rawgeti(L, top + 1, keys[k].index);
      cJSON *pair = tree_attach(L, pairs, NULL, cJSON_CreateArray());
      tree_attach(L, pair, NULL, tree_scalar(L, top + 4));
      tree_child(w, idx, top + 4, path, depth, pair, NULL);
      lua_settop(L, top + 3);
    }
  }
  lua_settop(L, top);
}

/* True when the table at idx holds tensors under string keys and nothing else. */
static bool flat_tensors(lua_State *L, int idx) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    bool ok = lua_type(L, -2) == LUA_TSTRING && zorch_to_tensor(L, -1);
    lua_pop(L, 1);
    if (!ok) {
      lua_pop(L, 1);
      return false;
    }
  }
  return true;
}

/* zorch.save(tbl, path): tensors, and the numbers, strings, booleans and tables
   beside them. */
static int l_save(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *path = lz_checkpath(L, 2);
  lz_check_path(L, path, "write");
  lua_settop(L, 2);
  lua_newtable(L); /* 3: names */
  lua_newtable(L); /* 4: tensors */
  lua_newtable(L); /* 5: names used */
  const char *values = NULL;
  if (flat_tensors(L, 1)) {
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
      lua_rawseti(L, 4, ++n);
      lua_pushvalue(L, -1);
      lua_rawseti(L, 3, n);
    }
  } else {
    tree_writer w = {L, 3, 4, 5};
    cJSON **box = json_box(L); /* 6 */
    *box = cJSON_CreateObject();
    if (!*box) return luaL_error(L, "save: out of memory");
    tree_attach(L, *box, "version", cJSON_CreateNumber(LZ_VALUES_VERSION));
    tree_value(&w, 1, "", 0, *box, "value");
    char *text = cJSON_PrintUnformatted(*box);
    if (!text) return luaL_error(L, "save: out of memory");
    values = lua_pushstring(L, text); /* 7 */
    cJSON_free(text);
  }
  int n = (int)lua_rawlen(L, 4);
  const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)(n ? n : 1), 0);
  zorch_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 3, i + 1);
    names[i] = lua_tostring(L, -1); /* the names table keeps the string */
    lua_rawgeti(L, 4, i + 1);
    ts[i] = zorch_to_tensor(L, -1);
    lua_pop(L, 2);
  }
  const char *key = LZ_VALUES_KEY;
  if (zorch_save_safetensors_meta(path, n, names, ts, values ? 1 : 0, &key, &values)) return lz_fail(L);
  return 0;
}

typedef struct {
  lua_State *L;
  const char *path; /* the file, for messages */
  int tensors;      /* stack index: name -> tensor */
  int referenced;   /* stack index: the names the tree refers to */
} tree_reader;

static int tree_bad(tree_reader *r, const char *what) {
  return luaL_error(r->L, "load: %s: malformed __metadata__ \"" LZ_VALUES_KEY "\": %s", r->path, what);
}

/* The one child of a tagged node {"kind": ...}, or NULL when j is not one. */
static const cJSON *tree_tag(const cJSON *j, const char *kind) {
  return cJSON_IsObject(j) && j->child && !j->child->next && strcmp(j->child->string, kind) == 0 ? j->child : NULL;
}

/* Pushes the value of node j. */
static void tree_read(tree_reader *r, const cJSON *j, int depth) {
  lua_State *L = r->L;
  luaL_checkstack(L, 6, "load");
  if (depth > LZ_TREE_DEPTH) tree_bad(r, "nested too deep");
  const cJSON *c;
  if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
  else if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
  else if (cJSON_IsNumber(j)) {
    double v = j->valuedouble;
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != (double)(long long)v)
      tree_bad(r, "a number that is not an integer (floats are {\"float\": text})");
    lua_pushinteger(L, (lua_Integer)v);
  } else if (cJSON_IsArray(j)) {
    lua_createtable(L, cJSON_GetArraySize(j), 0);
    lua_Integer i = 1;
    for (c = j->child; c; c = c->next, i++) {
      tree_read(r, c, depth + 1);
      lua_rawseti(L, -2, i);
    }
  } else if ((c = tree_tag(j, "int")) || (c = tree_tag(j, "float"))) {
    const char *kind = c->string;
    if (!cJSON_IsString(c) || !*c->valuestring) tree_bad(r, "an int or float node without its text");
    char *end;
    errno = 0;
    if (kind[0] == 'i') {
      long long v = strtoll(c->valuestring, &end, 10);
      if (*end || errno) tree_bad(r, "an int node that is not a 64-bit integer");
      lua_pushinteger(L, (lua_Integer)v);
    } else {
      double v = strtod(c->valuestring, &end);
      if (*end) tree_bad(r, "a float node that is not a number");
      lua_pushnumber(L, v);
    }
  } else if ((c = tree_tag(j, "tensor"))) {
    if (!cJSON_IsString(c)) tree_bad(r, "a tensor node without a name");
    if (lz_getfield(L, r->tensors, c->valuestring) == LUA_TNIL)
      luaL_error(L, "load: %s: __metadata__ \"" LZ_VALUES_KEY "\" refers to tensor '%s', which the file does not hold",
                 r->path, c->valuestring);
    lua_pushboolean(L, 1);
    lua_setfield(L, r->referenced, c->valuestring);
  } else if ((c = tree_tag(j, "map"))) {
    if (!cJSON_IsObject(c)) tree_bad(r, "a map node that is not an object");
    lua_createtable(L, 0, cJSON_GetArraySize(c));
    for (const cJSON *e = c->child; e; e = e->next) {
      tree_read(r, e, depth + 1);
      lua_setfield(L, -2, e->string);
    }
  } else if ((c = tree_tag(j, "pairs"))) {
    if (!cJSON_IsArray(c)) tree_bad(r, "a pairs node that is not an array");
    lua_newtable(L);
    for (const cJSON *e = c->child; e; e = e->next) {
      if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) tree_bad(r, "a pair that is not [key, value]");
      tree_read(r, e->child, depth + 1);
      int kt = lua_type(L, -1);
      if ((kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN) ||
          (kt == LUA_TNUMBER && lua_tonumber(L, -1) != lua_tonumber(L, -1)))
        tree_bad(r, "a key that is not a string, number or boolean");
      tree_read(r, e->child->next, depth + 1);
      lua_rawset(L, -3);
    }
  } else {
    tree_bad(r, "a node that is not a string, boolean, integer, array or one of int, float, tensor, map, pairs");
  }
}

/* zorch.load(path) -> the saved table; zorch.load(path, name) -> that tensor */
static int l_load(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  if (!lua_isnoneornil(L, 2)) return lz_push(L, zorch_load_safetensors_one(path, luaL_checkstring(L, 2)));
  lua_settop(L, 1);
  int n, nmeta;
  char **names, **keys, **values;
  zorch_tensor **ts;
  if (zorch_load_safetensors_meta(path, &n, &names, &ts, &nmeta, &keys, &values)) return lz_fail(L);
  /* into Lua values first, so nothing is left to free when an error is raised */
  lua_createtable(L, 0, n); /* 2: name -> tensor */
  for (int i = 0; i < n; i++) {
    zorch_tensor *t = ts[i];
    ts[i] = NULL;
    lz_push(L, t);
    lua_setfield(L, 2, names[i]);
  }
  int has_values = 0;
  for (int i = 0; i < nmeta && !has_values; i++) {
    if (strcmp(keys[i], LZ_VALUES_KEY) == 0) {
      lua_pushstring(L, values[i]); /* 3 */
      has_values = 1;
    }
  }
  zorch_safetensors_free(n, names, ts);
  zorch_safetensors_meta_free(nmeta, keys, values);
  if (!has_values) { /* a file of tensors alone (PyTorch's, or zorch's) */
    lua_settop(L, 2);
    return 1;
  }
  size_t len;
  const char *text = lua_tolstring(L, 3, &len);
  cJSON **box = json_box(L); /* 4 */
  *box = cJSON_ParseWithLength(text, len);
  lua_newtable(L); /* 5: names referenced */
  tree_reader r = {L, path, 2, 5};
  if (!*box) tree_bad(&r, "not valid JSON");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(*box, "version");
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(*box, "value");
  if (!cJSON_IsObject(*box) || !cJSON_IsNumber(version) || !value) tree_bad(&r, "expected {\"version\": 1, \"value\": ...}");
  if (version->valuedouble != LZ_VALUES_VERSION) {
    char v[32];
    snprintf(v, sizeof v, "%g", version->valuedouble);
    return luaL_error(L, "load: %s: __metadata__ \"" LZ_VALUES_KEY "\" has version %s; this zorch reads version %d",
                      path, v, LZ_VALUES_VERSION);
  }
  tree_read(&r, value, 0); /* 6 */
  if (!lua_istable(L, 6)) tree_bad(&r, "the value is not a table");
  /* tensors the tree does not name go beside it, under their own names */
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lz_getfield(L, 5, lua_tostring(L, -2)) == LUA_TNIL) {
      lua_pushvalue(L, -3);
      if (lua_rawget(L, 6) == LUA_TNIL) {
        lua_pushvalue(L, -4);
        lua_pushvalue(L, -4);
        lua_rawset(L, 6);
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  lua_settop(L, 6);
  return 1;
}

void lz_open_files(lua_State *L) {
  static const luaL_Reg fns[] = {{"_json_encode", l_json_encode}, {"_json_decode", l_json_decode},
                                 {"_file_hash", l_file_hash},     {"_write_atomic", l_write_atomic},
                                 {"_mkdir", l_mkdir},             {"_remove_dir", l_remove_dir},             {"_list_dir", l_list_dir},             {"_rng_offset", l_rng_state},
                                 {"_rng_set_offset", l_rng_set_offset}, {"save", l_save},
                                 {"load", l_load},                {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  if (luaL_newmetatable(L, LZ_JSON_BOX)) {
    lua_pushcfunction(L, json_box_gc);
    lua_setfield(L, -2, "__gc");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
}
