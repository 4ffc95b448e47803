/* lalloc.h: the Lua allocator of zorch's states: small blocks kept for reuse. */
#ifndef ZORCH_LALLOC_H
#define ZORCH_LALLOC_H
#include <stddef.h>

#define LZ_POOL_CLASSES 8 /* blocks of 16, 32, ... 128 bytes */
typedef struct {
  void *head[LZ_POOL_CLASSES];
  unsigned count[LZ_POOL_CLASSES];
} lz_pool;

/* lua_Alloc's contract (nsize 0 frees; NULL on failure, the old block kept) */
void *lz_pool_realloc(lz_pool *p, void *ptr, size_t osize, size_t nsize);
/* Gives the kept blocks back to malloc; the pool is empty and usable after. */
void lz_pool_drain(lz_pool *p);
/* a lua_Alloc over a pool given as ud */
void *lz_pool_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
#endif
