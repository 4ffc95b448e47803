/* The Lua allocator's small-block pool (vm/lalloc.c): blocks keep their
   contents across size changes, pooled and unpooled; a freed block is reused
   by its class; a drained pool starts again; and a Lua state runs on it. */
#include <lauxlib.h>
#include <lualib.h>

#include "../vm/lalloc.h"
#include "tap.h"

bool alloc_cache_enabled(void); /* ops/core/tensor.h, whose SHAPE tap.h has too */

static void fill(unsigned char *p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i);
}
static int same(const unsigned char *p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i)) return 0;
  return 1;
}

int main(void) {
  lz_pool pool = {0};
  /* growth and shrinking across the pooled and unpooled sizes keep the bytes */
  size_t sizes[] = {1, 16, 17, 100, 128, 129, 4000, 64, 8, 300, 20};
  unsigned char *p = lz_pool_realloc(&pool, NULL, 5 /* an object kind, not a size */, sizes[0]);
  fill(p, sizes[0], 7);
  for (size_t i = 1; i < sizeof sizes / sizeof *sizes; i++) {
    size_t keep = sizes[i - 1] < sizes[i] ? sizes[i - 1] : sizes[i];
    p = lz_pool_realloc(&pool, p, sizes[i - 1], sizes[i]);
    ok(p && same(p, keep, 7), "%zu -> %zu bytes keeps the first %zu", sizes[i - 1], sizes[i], keep);
    fill(p, sizes[i], 7);
  }
  ok(lz_pool_realloc(&pool, p, 20, 0) == NULL, "freeing returns NULL");
  /* a freed block of a class is the next one of that class; other classes are not served from it
     (the pool is off where the allocation caches are: sanitizers, ZORCH_ALLOC_CACHE=0) */
  bool on = alloc_cache_enabled();
  void *a = lz_pool_realloc(&pool, NULL, 0, 56);
  lz_pool_realloc(&pool, a, 56, 0);
  void *b = lz_pool_realloc(&pool, NULL, 0, 120);
  void *c = lz_pool_realloc(&pool, NULL, 0, 60);
  ok(!on || (c == a && b != a), "a freed 56-byte block serves the next 60-byte one, not a 120-byte one");
  ok(pool.count[3] == 0, "the class's list is empty again");
  lz_pool_realloc(&pool, b, 120, 0);
  lz_pool_realloc(&pool, c, 60, 0);
  /* many frees: the lists hold a bounded number, the rest go back to malloc */
  enum { N = 10000 };
  static void *blocks[N];
  for (int i = 0; i < N; i++) blocks[i] = lz_pool_realloc(&pool, NULL, 0, 40);
  for (int i = 0; i < N; i++) lz_pool_realloc(&pool, blocks[i], 40, 0);
  ok(on ? pool.count[2] > 0 && pool.count[2] < N : pool.count[2] == 0, "a list keeps %u of %d freed blocks",
     pool.count[2], N);
  lz_pool_drain(&pool);
  int empty = 1;
  for (int k = 0; k < LZ_POOL_CLASSES; k++) empty &= pool.head[k] == NULL && pool.count[k] == 0;
  ok(empty, "a drained pool is empty");
  /* a Lua state on the pool: tables, strings and tensors, closed, then drained */
  lua_State *L = lua_newstate(lz_pool_lua_alloc, &pool);
  ok(L != NULL, "a Lua state on the pool");
  luaL_openlibs(L);
  luaL_requiref(L, "zorch", luaopen_zorch, 1);
  lua_pop(L, 1);
  int st = luaL_dostring(L,
                         "local t, s = {}, zorch.zeros(8)\n"
                         "for i = 1, 20000 do t[i] = ('x'):rep(i % 200); s = s + zorch.ones(8) end\n"
                         "collectgarbage()\n"
                         "assert(#t[199] == 199 and s:sum():item() == 8 * 20000)");
  ok(st == LUA_OK, "a script runs: %s", st ? lua_tostring(L, -1) : "ok");
  lua_close(L);
  lz_pool_drain(&pool);
  return done_testing();
}
