/* lfiles.c: zorch.save and zorch.load (the format is ops/io/tree.c's), and what
   checkpoints need from C: JSON through cJSON, file hashes, atomic small
   writes, directories, and the default generator's state. */
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

/* ---- zorch.save / zorch.load: the tree format of ops/io/tree.c ----------------------
   A table becomes the format's item list (a LIST for a sequence 1..n, a MAP for
   string keys, PAIRS for any other keys) and back. */
#define LZ_BOX "zorch.cbox"
#define LZ_TREE_DEPTH 64

/* A userdata owning C memory (free_fn(p) at __gc), so a Lua error while a
   binding holds it leaves nothing behind. */
typedef struct {
  void *p;
  void (*free_fn)(void *);
} lz_box;

static lz_box *box_new(lua_State *L, void (*free_fn)(void *)) {
  lz_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  *b = (lz_box){NULL, free_fn};
  lz_setmetatable(L, LZ_BOX);
  return b;
}

static int box_gc(lua_State *L) {
  lz_box *b = luaL_checkudata(L, 1, LZ_BOX);
  if (b->p) b->free_fn(b->p);
  b->p = NULL;
  return 0;
}

/* The items being built: a growable array in a box. */
typedef struct {
  zorch_tree_item *items;
  size_t n, cap;
} tree_items;

static void items_free(void *p) {
  tree_items *ti = p;
  free(ti->items);
  free(ti);
}

static zorch_tree_item *item_add(lua_State *L, tree_items *ti, zorch_tree_kind kind) {
  if (ti->n == ti->cap) {
    size_t cap = ti->cap ? 2 * ti->cap : 64;
    zorch_tree_item *p = realloc(ti->items, sizeof *p * cap);
    if (!p) luaL_error(L, "save: out of memory");
    ti->items = p, ti->cap = cap;
  }
  zorch_tree_item *it = &ti->items[ti->n++];
  *it = (zorch_tree_item){.kind = kind};
  return it;
}

/* A scalar at idx (a value or a PAIRS key) as an item; false for other types. */
static bool tree_scalar(lua_State *L, tree_items *ti, int idx) {
  zorch_tree_item *it;
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: item_add(L, ti, ZORCH_TREE_BOOL)->b = lua_toboolean(L, idx); return true;
    case LUA_TSTRING: it = item_add(L, ti, ZORCH_TREE_STRING), it->s = lua_tolstring(L, idx, &it->len); return true;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) item_add(L, ti, ZORCH_TREE_INT)->i = lua_tointeger(L, idx);
      else item_add(L, ti, ZORCH_TREE_FLOAT)->f = lua_tonumber(L, idx);
      return true;
    default: return false;
  }
}

static void tree_walk(lua_State *L, tree_items *ti, int idx, const char *path, int depth, int key);

/* The entry of a table of kind `in` whose key is at top + 1 and value at top + 2. */
static void tree_child(lua_State *L, tree_items *ti, int top, const char *path, int depth, zorch_tree_kind in) {
  int k = top + 1, kt = lua_type(L, k);
  if (kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN)
    luaL_error(L, "save: a key of %s is a %s (keys are strings, numbers or booleans)", *path ? path : "the table",
               luaL_typename(L, k));
  if (in == ZORCH_TREE_PAIRS) tree_scalar(L, ti, k);
  lua_pushvalue(L, k);
  const char *name = luaL_tolstring(L, -1, NULL); /* of a copy: the key itself stays as it is */
  const char *sub = *path ? lua_pushfstring(L, "%s.%s", path, name) : name;
  tree_walk(L, ti, top + 2, sub, depth + 1, in == ZORCH_TREE_MAP ? k : 0);
}

/* Appends the value at idx, found at path (for messages); `key`: the stack
   index of its key in a MAP, else 0. */
static void tree_walk(lua_State *L, tree_items *ti, int idx, const char *path, int depth, int key) {
  luaL_checkstack(L, 8, "save");
  if (depth > LZ_TREE_DEPTH) luaL_error(L, "save: %s is nested more than %d tables deep (a cycle?)", path, LZ_TREE_DEPTH);
  size_t first = ti->n;
  zorch_tensor *t = zorch_to_tensor(L, idx);
  if (t) item_add(L, ti, ZORCH_TREE_TENSOR)->t = t;
  else if (lua_type(L, idx) != LUA_TTABLE && !tree_scalar(L, ti, idx))
    luaL_error(L, "save: %s is a %s (save keeps tensors, numbers, strings, booleans and tables of them)",
               *path ? path : "the value", luaL_typename(L, idx));
  if (!t && lua_type(L, idx) == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
    bool seq = n > 0, strings = true;
    for (lua_pushnil(L); lua_next(L, idx); count++) {
      lua_pop(L, 1);
      if (lua_type(L, -1) != LUA_TSTRING) strings = false;
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n) seq = false;
    }
    zorch_tree_kind kind = seq && count == n ? ZORCH_TREE_LIST : strings ? ZORCH_TREE_MAP : ZORCH_TREE_PAIRS;
    item_add(L, ti, kind);
    int top = lua_gettop(L);
    if (kind == ZORCH_TREE_LIST) { /* in order; the format sorts other keys */
      for (lua_Integer i = 1; i <= n; lua_settop(L, top), i++) {
        lua_pushinteger(L, i);
        lua_rawgeti(L, idx, i);
        tree_child(L, ti, top, path, depth, kind);
      }
    } else {
      for (lua_pushnil(L); lua_next(L, idx); lua_settop(L, top + 1)) tree_child(L, ti, top, path, depth, kind);
    }
    item_add(L, ti, ZORCH_TREE_END);
  }
  if (key) ti->items[first].key = lua_tolstring(L, key, &ti->items[first].key_len);
}

/* zorch.save(tbl, path): tensors, and the numbers, strings, booleans and tables
   beside them. */
static int l_save(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *path = lz_checkpath(L, 2);
  lz_check_path(L, path, "write");
  lua_settop(L, 2);
  lz_box *b = box_new(L, items_free);
  tree_items *ti = b->p = calloc(1, sizeof *ti);
  if (!ti) return luaL_error(L, "save: out of memory");
  tree_walk(L, ti, 1, "", 0, 0);
  if (zorch_tree_save(path, ti->n, ti->items)) return lz_fail(L);
  return 0;
}

static void tree_free(void *p) { zorch_tree_free(p); }

/* zorch.load(path) -> the saved table; zorch.load(path, name) -> that tensor */
static int l_load(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  if (!lua_isnoneornil(L, 2)) return lz_push(L, zorch_load_safetensors_one(path, luaL_checkstring(L, 2)));
  lua_settop(L, 1);
  lz_box *b = box_new(L, tree_free); /* 2 */
  zorch_tree *tr;
  if (zorch_tree_load(path, &tr)) return lz_fail(L);
  b->p = tr;
  /* the open tables are on the stack; count[d]: the entries of the one at depth d so far */
  size_t open[LZ_TREE_DEPTH + 2], count[LZ_TREE_DEPTH + 2];
  int d = -1;
  luaL_checkstack(L, 2 * LZ_TREE_DEPTH + 8, "load");
  for (size_t i = 0; i < tr->n; i++) {
    const zorch_tree_item *it = &tr->items[i];
    switch (it->kind) {
      case ZORCH_TREE_BOOL: lua_pushboolean(L, it->b); break;
      case ZORCH_TREE_INT: lua_pushinteger(L, (lua_Integer)it->i); break;
      case ZORCH_TREE_FLOAT: lua_pushnumber(L, it->f); break;
      case ZORCH_TREE_STRING: lua_pushlstring(L, it->s, it->len); break;
      case ZORCH_TREE_TENSOR: lz_push(L, zorch_tensor_retain(it->t)); break;
      case ZORCH_TREE_END: it = &tr->items[open[d--]]; break;
      default: /* a table opens */
        lua_newtable(L);
        open[++d] = i, count[d] = 0;
        continue;
    }
    if (d < 0) break; /* the root closed */
    zorch_tree_kind in = tr->items[open[d]].kind;
    if (in == ZORCH_TREE_LIST) lua_rawseti(L, -2, (lua_Integer)++count[d]);
    else if (in == ZORCH_TREE_MAP) {
      lua_pushlstring(L, it->key, it->key_len);
      lua_insert(L, -2);
      lua_rawset(L, -3);
    } else if (++count[d] % 2 == 0) lua_rawset(L, -3); /* PAIRS: the key waits for its value */
  }
  /* tensors the tree does not name go beside it, under their own names */
  for (int i = 0; i < tr->nextra; lua_settop(L, 3), i++) {
    if (lz_getfield(L, 3, tr->extra_names[i]) != LUA_TNIL) continue;
    lz_push(L, zorch_tensor_retain(tr->extra[i]));
    lua_setfield(L, 3, tr->extra_names[i]);
  }
  return 1;
}

void lz_open_files(lua_State *L) {
  static const luaL_Reg fns[] = {{"_json_encode", l_json_encode}, {"_json_decode", l_json_decode},
                                 {"_file_hash", l_file_hash},     {"_write_atomic", l_write_atomic},
                                 {"_mkdir", l_mkdir},             {"_remove_dir", l_remove_dir},             {"_list_dir", l_list_dir},             {"_rng_offset", l_rng_state},
                                 {"_rng_set_offset", l_rng_set_offset}, {"save", l_save},
                                 {"load", l_load},                {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  if (luaL_newmetatable(L, LZ_BOX)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
}
