/* ltboard.c: TensorBoard event files, encoded by hand: CRC32C, the record
   framing, and the few protobuf fields of a scalar Event.

   A record is  uint64 length (LE) | uint32 masked crc32c(length) | data |
   uint32 masked crc32c(data),  masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
   data is an Event { double wall_time = 1; int64 step = 2; string file_version = 3;
   Summary summary = 5 }, Summary { repeated Value value = 1 },
   Value { string tag = 1; float simple_value = 2 }. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lz.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit: records are small. */
static uint32_t tb_crc32c(const uint8_t *p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xffffffffu;
}

static uint32_t tb_masked_crc(const uint8_t *p, size_t n) {
  uint32_t c = tb_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A growable byte buffer; a failed write marks it failed and writes nothing more. */
typedef struct {
  uint8_t *p;
  size_t len, cap;
  int failed;
} tb_buf;

#define TB_MAX_BYTES ((size_t)1 << 26) /* one event's limit: 64 MiB */

static void tb_put(tb_buf *b, const void *src, size_t n) {
  if (b->failed) return;
  if (n > TB_MAX_BYTES - b->len) {
    b->failed = 1;
    return;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->failed = 1;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}

static void tb_varint(tb_buf *b, uint64_t v) {
  uint8_t out[10];
  size_t n = 0;
  do {
    out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  tb_put(b, out, n);
}

static void tb_le(tb_buf *b, uint64_t v, int bytes) {
  uint8_t out[8];
  for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
  tb_put(b, out, (size_t)bytes);
}

/* protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void tb_key(tb_buf *b, int field, int wire) { tb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void tb_bytes_field(tb_buf *b, int field, const void *p, size_t n) {
  tb_key(b, field, 2);
  tb_varint(b, n);
  tb_put(b, p, n);
}

static void tb_double_field(tb_buf *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  tb_key(b, field, 1);
  tb_le(b, u, 8);
}

static void tb_float_field(tb_buf *b, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  tb_key(b, field, 5);
  tb_le(b, u, 4);
}

/* One Summary.Value { tag, simple_value } appended to a Summary being built. */
static void tb_summary_value(tb_buf *summary, const char *tag, size_t tag_len, float v) {
  tb_buf val = {0};
  tb_bytes_field(&val, 1, tag, tag_len);
  tb_float_field(&val, 2, v);
  if (val.failed) summary->failed = 1;
  else tb_bytes_field(summary, 1, val.p, val.len);
  free(val.p);
}

/* The framed record of an Event into out; 0 on success. */
static int tb_frame(tb_buf *out, const tb_buf *event) {
  if (event->failed) return -1;
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)event->len >> (8 * i));
  tb_put(out, len, 8);
  tb_le(out, tb_masked_crc(len, 8), 4);
  tb_put(out, event->p, event->len);
  tb_le(out, tb_masked_crc(event->p, event->len), 4);
  return out->failed ? -1 : 0;
}

static double tb_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Pushes the bytes of the tb_buf at index 1 as a string (run protected). */
static int tb_push_bytes(lua_State *L) {
  const tb_buf *b = lua_touserdata(L, 1);
  lua_pushlstring(L, (const char *)b->p, b->len);
  return 1;
}

/* zorch._tb_event(step, values|nil, file_version|nil [, wall_time]) -> the framed
   record (a string). values maps tags to numbers (other entries are skipped);
   wall_time defaults to now (seconds since the epoch). */
static int l_tb_event(lua_State *L) {
  lua_Integer step = luaL_checkinteger(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  size_t vlen = 0;
  const char *version = luaL_optlstring(L, 3, NULL, &vlen);
  double wall = luaL_optnumber(L, 4, tb_now());
  tb_buf summary = {0}, event = {0}, out = {0};
  int nvalues = 0;
  if (lua_istable(L, 2)) {
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TNUMBER) {
        size_t tl;
        const char *tag = lua_tolstring(L, -2, &tl);
        tb_summary_value(&summary, tag, tl, (float)lua_tonumber(L, -1));
        nvalues++;
      }
      lua_pop(L, 1);
    }
  }
  tb_double_field(&event, 1, wall);
  tb_key(&event, 2, 0);
  tb_varint(&event, (uint64_t)step); /* int64: negatives take ten bytes */
  if (version) tb_bytes_field(&event, 3, version, vlen);
  if (nvalues) {
    if (summary.failed) event.failed = 1;
    else tb_bytes_field(&event, 5, summary.p, summary.len);
  }
  int rc = tb_frame(&out, &event), st = LUA_OK;
  free(summary.p);
  free(event.p);
  if (rc == 0) { /* the string is made in a protected call, so a memory error cannot leak out.p */
    lua_pushcfunction(L, tb_push_bytes);
    lua_pushlightuserdata(L, &out);
    st = lua_pcall(L, 1, 1, 0);
  }
  free(out.p);
  if (st != LUA_OK) return lua_error(L);
  if (rc) return luaL_error(L, "tensorboard: cannot encode an event of %d values (out of memory or over 64 MiB)", nvalues);
  return 1;
}

/* zorch._crc32c(s) -> the CRC-32C of s; zorch._crc32c(s, true) -> its masked form */
static int l_crc32c(lua_State *L) {
  size_t n;
  const uint8_t *s = (const uint8_t *)luaL_checklstring(L, 1, &n);
  lua_pushinteger(L, (lua_Integer)(lua_toboolean(L, 2) ? tb_masked_crc(s, n) : tb_crc32c(s, n)));
  return 1;
}

/* zorch._tb_filename(dir) -> dir/events.out.tfevents.<seconds>.<host>.<pid>, the
   name TensorBoard's own writer uses. */
static int l_tb_filename(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
  host[sizeof host - 1] = 0;
  char tail[320];
  snprintf(tail, sizeof tail, "events.out.tfevents.%010lld.%s.%d", (long long)time(NULL), host, (int)getpid());
  lua_pushfstring(L, "%s/%s", dir, tail);
  return 1;
}

void lz_open_tboard(lua_State *L) {
  static const luaL_Reg fns[] = {{"_tb_event", l_tb_event}, {"_crc32c", l_crc32c}, {"_tb_filename", l_tb_filename},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
