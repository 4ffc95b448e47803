/* lalloc.c: every result a script makes is a new userdata of a few dozen
   bytes, freed by the collector a few hundred results later. Through
   realloc and free that round trip was about 120 instructions of a small
   op's 3,370; here a freed block goes on a list of its size class and the
   next allocation of that class takes it back. Each list keeps at most
   LZ_POOL_KEEP blocks; the rest go back to malloc. Off, like the core's
   caches, in sanitizer builds and with ZORCH_ALLOC_CACHE=0, so that memory
   checkers see every block. */
#include "lalloc.h"

#include <stdlib.h>
#include <string.h>

#include "../ops/core/tensor.h"

#define LZ_POOL_GRAIN 16u
#define LZ_POOL_KEEP 4096u

static int size_class(size_t n) {
  return n && n <= LZ_POOL_GRAIN * LZ_POOL_CLASSES ? (int)((n - 1) / LZ_POOL_GRAIN) : -1;
}

static void *take(lz_pool *p, int c) {
  void *b = p->head[c];
  if (b) {
    memcpy(&p->head[c], b, sizeof(void *));
    p->count[c]--;
    return b;
  }
  return malloc((size_t)(c + 1) * LZ_POOL_GRAIN);
}

static void give(lz_pool *p, void *b, int c) {
  if (p->count[c] >= LZ_POOL_KEEP) {
    free(b);
    return;
  }
  memcpy(b, &p->head[c], sizeof(void *));
  p->head[c] = b;
  p->count[c]++;
}

void *lz_pool_realloc(lz_pool *p, void *ptr, size_t osize, size_t nsize) {
  if (!alloc_cache_enabled()) {
    if (nsize) return realloc(ptr, nsize);
    free(ptr);
    return NULL;
  }
  size_t old = ptr ? osize : 0; /* without a block, osize is the object's kind */
  int oc = ptr ? size_class(old) : -1, nc = size_class(nsize);
  if (nsize == 0) {
    if (oc >= 0) give(p, ptr, oc);
    else free(ptr);
    return NULL;
  }
  if (!ptr) return nc >= 0 ? take(p, nc) : malloc(nsize);
  if (oc >= 0 && oc == nc) return ptr;
  if (oc < 0 && nc < 0) return realloc(ptr, nsize);
  void *q = nc >= 0 ? take(p, nc) : malloc(nsize); /* a block changes between pooled and not */
  if (!q) return NULL;
  memcpy(q, ptr, old < nsize ? old : nsize);
  if (oc >= 0) give(p, ptr, oc);
  else free(ptr);
  return q;
}

void lz_pool_drain(lz_pool *p) {
  for (int c = 0; c < LZ_POOL_CLASSES; c++) {
    while (p->head[c]) free(take(p, c));
    p->count[c] = 0;
  }
}

void *lz_pool_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  return lz_pool_realloc(ud, ptr, osize, nsize);
}
