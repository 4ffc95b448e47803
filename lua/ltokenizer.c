/* ltokenizer.c: zorch.tokenizer, the tokenizers of include/zorch_tokenizer.h.
   Ids are the tokenizer's own, 0-based as in Hugging Face's tokenizers and
   tiktoken (not 1-based positions): they go unchanged into an embedding's
   index tensor built with them. */
#include <stdlib.h>
#include <sys/stat.h>

#include "lz.h"
#include "zorch_tokenizer.h"

#define LZ_TOKENIZER "zorch.Tokenizer"

typedef struct {
  zorch_tokenizer *t;
} ltok;

static zorch_tokenizer *check_tok(lua_State *L, int idx) {
  ltok *b = luaL_checkudata(L, idx, LZ_TOKENIZER);
  if (!b->t) luaL_error(L, "tokenizer: the tokenizer is closed");
  return b->t;
}

static int tok_gc(lua_State *L) {
  ltok *b = luaL_checkudata(L, 1, LZ_TOKENIZER);
  zorch_tokenizer_free(b->t);
  b->t = NULL;
  return 0;
}

/* zorch.tokenizer.load(path [, {pattern = "cl100k"|"gpt2", specials = {[text] = id, ...}}]):
   a tokenizer.json or a tiktoken file (by its first byte), or a folder's
   tokenizer.json; a tiktoken file with specials (or pattern) given loads with
   those. The chat template and special tokens of a tokenizer_config.json
   beside the file (zorch._chat_config) are the user value. */
static int l_load(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lz_check_path(L, path, "read");
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    lua_pushfstring(L, "%s/tokenizer.json", path);
    lua_replace(L, 1);
    path = lua_tostring(L, 1);
  }
  ltok *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->t = NULL;
  lz_setmetatable(L, LZ_TOKENIZER);
  int ud = lua_gettop(L);
  int custom = 0;
  zorch_tokenizer_pattern pat = ZORCH_PATTERN_CL100K;
  if (lua_istable(L, 2)) {
    if (lz_getfield(L, 2, "pattern") != LUA_TNIL) {
      const char *p = lua_tostring(L, -1);
      if (!p || (strcmp(p, "cl100k") != 0 && strcmp(p, "gpt2") != 0))
        return luaL_error(L, "tokenizer.load: opts.pattern must be \"cl100k\" or \"gpt2\", got %s", luaL_tolstring(L, -1, NULL));
      pat = strcmp(p, "gpt2") == 0 ? ZORCH_PATTERN_GPT2 : ZORCH_PATTERN_CL100K;
      custom = 1;
    }
    lua_pop(L, 1);
    if (lz_getfield(L, 2, "specials") != LUA_TNIL) {
      if (!lua_istable(L, -1)) return luaL_error(L, "tokenizer.load: opts.specials must be a table of text = id");
      custom = 1;
    }
  } else lua_pushnil(L);
  int sp = lua_gettop(L);
  zorch_status st;
  if (!custom) st = zorch_tokenizer_load(path, &b->t);
  else {
    size_t n = 0;
    if (lua_istable(L, sp))
      for (lua_pushnil(L); lua_next(L, sp); lua_pop(L, 1)) n++;
    zorch_special_token *v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0);
    n = 0;
    if (lua_istable(L, sp))
      for (lua_pushnil(L); lua_next(L, sp); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > 0x7FFFFFFF)
          return luaL_error(L, "tokenizer.load: opts.specials must map texts to ids >= 0");
        v[n].text = lua_tostring(L, -2);
        v[n++].id = (int32_t)lua_tointeger(L, -1);
      }
    st = zorch_tokenizer_load_tiktoken(path, pat, v, n, &b->t);
  }
  if (st) return lz_fail(L);
  lua_settop(L, ud);
  lz_push_private(L, "_chat_config");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  lua_setiuservalue(L, ud, 1);
  return 1;
}

/* tok:apply_chat_template(messages [, opts]): zorch.text.chat's, with the
   template and tokens the tokenizer loaded with */
static int m_apply_chat_template(lua_State *L) {
  check_tok(L, 1);
  lua_settop(L, 3);
  lz_push_private(L, "_chat_apply");
  lua_pushvalue(L, 1);
  lua_getiuservalue(L, 1, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  lua_call(L, 4, 1);
  return 1;
}

/* The encode options at idx: {add_special = true, allowed_special = "all"|"none"|{texts}, tensor = false}.
   The texts stay on the stack (at the returned top) while o is used. */
static int get_opts(lua_State *L, int idx, zorch_encode_opts *o, const char ***allowed) {
  *o = (zorch_encode_opts){true, ZORCH_SPECIAL_DEFAULT, NULL, 0};
  int tensor = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  if (lz_getfield(L, idx, "add_special") != LUA_TNIL) o->add_special = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lz_getfield(L, idx, "tensor") != LUA_TNIL) tensor = lua_toboolean(L, -1);
  lua_pop(L, 1);
  int t = lz_getfield(L, idx, "allowed_special");
  if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "all") == 0) o->special = ZORCH_SPECIAL_ALL;
  else if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "none") == 0) o->special = ZORCH_SPECIAL_NONE;
  else if (t == LUA_TTABLE) {
    size_t n = lua_rawlen(L, -1);
    *allowed = lua_newuserdatauv(L, (n ? n : 1) * sizeof **allowed, 0);
    lua_insert(L, -2); /* the userdata below the table: both stay */
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "encode: allowed_special[%d] is not a string", (int)i + 1);
      (*allowed)[i] = lua_tostring(L, -1); /* kept alive by the table */
      lua_pop(L, 1);
    }
    o->special = ZORCH_SPECIAL_LIST, o->allowed = *allowed, o->n_allowed = n;
  } else if (t != LUA_TNIL) return luaL_error(L, "encode: allowed_special must be \"all\", \"none\" or a list of texts");
  return tensor;
}

/* Pushes the ids at light userdata 1 (count at 2) as a table; run protected. */
static int push_ids(lua_State *L) {
  const int32_t *ids = lua_touserdata(L, 1);
  lua_Integer n = lua_tointeger(L, 2);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 0; i < n; i++) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* Encodes the string at idx and pushes its ids (a table, or an int64 tensor). */
static void encode_one(lua_State *L, zorch_tokenizer *t, int idx, const zorch_encode_opts *o, int tensor) {
  size_t len;
  const char *s = luaL_checklstring(L, idx, &len);
  int32_t *ids;
  size_t n;
  if (zorch_tokenizer_encode(t, s, len, o, &ids, &n)) lz_fail(L);
  if (tensor) {
    int64_t shape = (int64_t)n;
    zorch_tensor *x = zorch_empty(1, &shape, ZORCH_I64, (zorch_device){ZORCH_CPU, 0});
    if (x) {
      int64_t *d = zorch_tensor_data(x);
      for (size_t i = 0; i < n; i++) d[i] = ids[i];
    }
    free(ids);
    lz_push(L, x);
    return;
  }
  lua_pushcfunction(L, push_ids);
  lua_pushlightuserdata(L, ids);
  lua_pushinteger(L, (lua_Integer)n);
  int st = lua_pcall(L, 2, 1, 0);
  free(ids);
  if (st != LUA_OK) lua_error(L);
}

/* tok:encode(text [, opts]) -> {ids} (0-based ids), or an int64 tensor with opts.tensor */
static int m_encode(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  luaL_checkstring(L, 2);
  zorch_encode_opts o;
  const char **allowed = NULL;
  int tensor = get_opts(L, 3, &o, &allowed);
  encode_one(L, t, 2, &o, tensor);
  return 1;
}

/* tok:encode_batch({texts} [, opts]) -> {{ids}, ...} */
static int m_encode_batch(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  zorch_encode_opts o;
  const char **allowed = NULL;
  int tensor = get_opts(L, 3, &o, &allowed);
  size_t n = lua_rawlen(L, 2);
  lua_createtable(L, (int)n, 0);
  int out = lua_gettop(L);
  for (size_t i = 0; i < n; i++) {
    if (lua_rawgeti(L, 2, (lua_Integer)i + 1) != LUA_TSTRING)
      return luaL_error(L, "encode_batch: texts[%d] is a %s, not a string", (int)i + 1, luaL_typename(L, -1));
    encode_one(L, t, lua_gettop(L), &o, tensor);
    lua_rawseti(L, out, (lua_Integer)i + 1);
    lua_pop(L, 1);
  }
  return 1;
}

/* tok:decode(ids) -> text; ids a table of integers or a 1-d integer tensor */
static int m_decode(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  size_t n;
  int32_t *ids;
  if (lua_istable(L, 2)) {
    n = lua_rawlen(L, 2);
    ids = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ids, 0);
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, 2, (lua_Integer)i + 1);
      int isint;
      lua_Integer v = lua_tointegerx(L, -1, &isint);
      if (!isint || v < INT32_MIN || v > INT32_MAX) return luaL_error(L, "decode: ids[%d] is not an integer id", (int)i + 1);
      ids[i] = (int32_t)v;
      lua_pop(L, 1);
    }
  } else {
    zorch_tensor *x = lz_check(L, 2);
    zorch_dtype dt = zorch_tensor_dtype(x);
    if (zorch_tensor_ndim(x) > 1 || (dt != ZORCH_I64 && dt != ZORCH_I32))
      return luaL_error(L, "decode: ids must be a table or a 1-d int64/int32 tensor");
    zorch_tensor *c = zorch_to_device(x, (zorch_device){ZORCH_CPU, 0});
    zorch_tensor *cc = c ? zorch_contiguous(c) : NULL;
    zorch_tensor_free(c);
    if (!cc) return lz_fail(L);
    n = (size_t)zorch_tensor_numel(cc);
    ids = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ids, 0);
    const void *d = zorch_tensor_data(cc);
    for (size_t i = 0; i < n; i++) {
      int64_t v = dt == ZORCH_I64 ? ((const int64_t *)d)[i] : ((const int32_t *)d)[i];
      ids[i] = v < INT32_MIN || v > INT32_MAX ? -1 : (int32_t)v;
    }
    zorch_tensor_free(cc);
  }
  char *s;
  size_t len;
  if (zorch_tokenizer_decode(t, ids, n, &s, &len)) return lz_fail(L);
  return lz_push_owned(L, s, len);
}

static int m_vocab_size(lua_State *L) {
  lua_pushinteger(L, zorch_tokenizer_vocab_size(check_tok(L, 1)));
  return 1;
}

/* tok:token_to_id(s) -> id, or nil */
static int m_token_to_id(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  int32_t id = zorch_tokenizer_token_to_id(t, s, n);
  if (id < 0) lua_pushnil(L);
  else lua_pushinteger(L, id);
  return 1;
}

/* tok:id_to_token(id) -> the token as the file spells it, or nil */
static int m_id_to_token(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  size_t n;
  const char *s = id < 0 || id > INT32_MAX ? NULL : zorch_tokenizer_id_to_token(t, (int32_t)id, &n);
  if (!s) lua_pushnil(L);
  else lua_pushlstring(L, s, n);
  return 1;
}

/* tok:special_id(text) -> the id of a special (added) token, or nil */
static int m_special_id(lua_State *L) {
  int32_t id = zorch_tokenizer_special_id(check_tok(L, 1), luaL_checkstring(L, 2));
  if (id < 0) lua_pushnil(L);
  else lua_pushinteger(L, id);
  return 1;
}

/* zorch.tokenizer.nfc(s): the Unicode NFC of s */
static int l_nfc(lua_State *L) {
  size_t n, on;
  const char *s = luaL_checklstring(L, 1, &n);
  char *out;
  if (zorch_nfc(s, n, &out, &on)) return lz_fail(L);
  lua_pushlstring(L, out, on);
  free(out);
  return 1;
}

/* tok:encode_file(in, out [, opts]) -> the count: an llm.c token file */
static int m_encode_file(lua_State *L) {
  zorch_tokenizer *t = check_tok(L, 1);
  const char *in = lz_checkpath(L, 2), *out = lz_checkpath(L, 3);
  lz_check_path(L, in, "read");
  lz_check_path(L, out, "write");
  zorch_encode_opts o;
  const char **allowed = NULL;
  get_opts(L, 4, &o, &allowed);
  size_t count;
  if (zorch_tokenizer_encode_file(t, in, out, &o, &count)) return lz_fail(L);
  lua_pushinteger(L, (lua_Integer)count);
  return 1;
}

static int tok_tostring(lua_State *L) {
  ltok *b = luaL_checkudata(L, 1, LZ_TOKENIZER);
  if (b->t) lua_pushfstring(L, "zorch.Tokenizer(vocab_size=%d)", (int)zorch_tokenizer_vocab_size(b->t));
  else lua_pushliteral(L, "zorch.Tokenizer(closed)");
  return 1;
}

void lz_open_tokenizer(lua_State *L) {
  static const luaL_Reg methods[] = {{"encode", m_encode},           {"encode_batch", m_encode_batch}, {"decode", m_decode},
                                     {"vocab_size", m_vocab_size},   {"token_to_id", m_token_to_id},   {"id_to_token", m_id_to_token},
                                     {"special_id", m_special_id},   {"encode_file", m_encode_file},
                                     {"apply_chat_template", m_apply_chat_template}, {NULL, NULL}};
  if (luaL_newmetatable(L, LZ_TOKENIZER)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tok_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tok_gc);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, tok_tostring);
    lua_setfield(L, -2, "__tostring");
    lz_protect_metatable(L);
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"load", l_load}, {"nfc", l_nfc}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_setfield(L, -2, "tokenizer");
}
