/* hostmem.c: host memory for tensor storage. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "device.h"
#include "tensor.h"

/* Blocks are 64-byte aligned, so vector loops start on a cache line, and carry
   a 64-byte header with their size class. Small blocks (up to 64 KiB, in powers
   of two) go back to a per-thread cache when freed: a training step of a small
   model makes and frees dozens of tensors, and malloc was a quarter of its time.
   ZORCH_ALLOC_CACHE=0 turns the cache off (for memory checkers); sanitizer
   builds never use it. A class keeps up to 256 KiB of blocks (at least 32,
   at most 1024): Lua's collector frees a script's temporaries hundreds at a
   time, and a burst that overflowed the cache went to malloc. */
#define HDR 64
#define MIN_CLASS 6  /* 64 bytes */
#define MAX_CLASS 16 /* 64 KiB */
#define CACHE_DEPTH 1024
#define CACHE_BYTES (256u << 10)
static int depth_of(int c) {
  size_t d = CACHE_BYTES >> c;
  return d < 32 ? 32 : d > CACHE_DEPTH ? CACHE_DEPTH : (int)d;
}

typedef struct {
  int n;
  void *blocks[CACHE_DEPTH];
} size_cache;
static _Thread_local size_cache cache[MAX_CLASS + 1];
#define cache_enabled alloc_cache_enabled

static int size_class(size_t n) {
  int c = MIN_CLASS;
  while (c <= MAX_CLASS && ((size_t)1 << c) < n) c++;
  return c; /* MAX_CLASS + 1: not cached */
}

static void *host_alloc(int index, size_t nbytes) {
  (void)index;
  int c = size_class(nbytes);
  if (c <= MAX_CLASS && cache_enabled() && cache[c].n > 0) return cache[c].blocks[--cache[c].n];
  size_t body = c <= MAX_CLASS ? (size_t)1 << c : (nbytes + 63) & ~(size_t)63;
  if (body < nbytes || body > SIZE_MAX - HDR) return NULL;
  char *base = aligned_alloc(64, HDR + body);
  if (!base) return NULL;
  *(int *)base = c;
  return base + HDR;
}

static void host_free(int index, void *p) {
  (void)index;
  if (!p) return;
  char *base = (char *)p - HDR;
  int c = *(int *)base;
  if (c <= MAX_CLASS && cache_enabled() && cache[c].n < depth_of(c)) {
    cache[c].blocks[cache[c].n++] = p;
    return;
  }
  free(base);
}

static int host_count(void) { return 1; }

const device_mem host_mem = {host_alloc, host_free, host_count};
