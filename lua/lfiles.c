/* lfiles.c: zorch.save and zorch.load (the format is ops/io/tree.c's; torch.save
   files are read through it too, by ops/io/pt.c). */
#include <stdlib.h>
#include <string.h>

#include "lz.h"

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
  /* a module (torch.save(model) habit): its fields are not its weights' names */
  if (lua_getmetatable(L, 1)) {
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "state_dict") == LUA_TFUNCTION) {
      const char *name = luaL_typename(L, 1);
      if (luaL_getmetafield(L, 1, "__name") == LUA_TSTRING) name = lua_tostring(L, -1);
      return luaL_error(L, "save: got a module (%s), not its weights; save model:state_dict() instead", name);
    }
    lua_pop(L, 1);
  }
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
  if (!tr->n) lua_pushnil(L); /* a torch.save file of None */
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
  static const luaL_Reg fns[] = {{"save", l_save}, {"load", l_load}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  if (luaL_newmetatable(L, LZ_BOX)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
}
