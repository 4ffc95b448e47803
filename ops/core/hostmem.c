/* hostmem.c: host memory for tensor storage. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* Blocks of 2 MiB and more are mapped on their own, the body starting on a
   2 MiB boundary and advised as transparent huge pages (where the kernel's
   setting is "madvise", the default here): one TLB entry then covers 2 MiB
   instead of 4 KiB, the pages are physically contiguous, and a first touch
   is one fault per 2 MiB. A sum of 10^7 floats went from 1.61 to 0.75 ms on
   one thread (docs/performance.md, "Huge pages"). The header sits at the end
   of the 4 KiB page before the body. ZORCH_HUGEPAGES=0 keeps such blocks on
   malloc, as do the memory checkers' runs (with the caches off). */
#define HUGE_MIN ((size_t)2 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
#define MAPPED (MAX_CLASS + 2) /* the class of a mapped block */
static bool huge_enabled(void) {
#ifdef MADV_HUGEPAGE
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("ZORCH_HUGEPAGES");
    on = !(v && v[0] == '0');
  }
  return on && cache_enabled();
#else
  return false;
#endif
}

/* A mapped block: header page, then the body on a 2 MiB boundary; what the
   alignment left over on either side is unmapped again. */
static char *map_block(size_t body) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), used = page + ((body + page - 1) & ~(page - 1));
  if (used > SIZE_MAX - HUGE_ALIGN) return NULL;
  size_t len = used + HUGE_ALIGN;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  char *body_at = (char *)(((uintptr_t)m + page + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
  char *start = body_at - page;
  if (start > m) munmap(m, (size_t)(start - m));
  if (m + len > start + used) munmap(start + used, (size_t)(m + len - (start + used)));
#ifdef MADV_HUGEPAGE
  madvise(body_at, used - page, MADV_HUGEPAGE); /* advice only: small pages if refused */
#endif
  char *base = body_at - HDR;
  *(int *)base = MAPPED;
  *(size_t *)(base + 8) = body;
  *(char **)(base + 16) = start;
  *(size_t *)(base + 24) = used;
  return base;
}

/* Gives a block's memory back, mapped or from malloc. */
static void release_block(char *base) {
  if (*(int *)base == MAPPED) {
    char *start = *(char **)(base + 16);
    munmap(start, *(size_t *)(base + 24));
  } else {
    free(base);
  }
}

/* Large blocks (above 64 KiB, up to 64 MiB) go back to one process-wide cache of
   at most 256 MiB and 128 blocks, and an allocation takes the smallest cached
   block that holds it with at most an eighth to spare. A training step frees
   and makes the same activation sizes every time, and memory given back to the
   kernel returns as fresh pages, each a fault and a clearing: 12% of a float32
   transformer block's forward and backward went there (docs/performance.md).
   A full collection from Lua frees a whole step's activations at once (GPT-2
   small: over a hundred blocks); with room for 32, most went back to the
   kernel (650 page faults a step against 100). The oldest blocks are freed
   first when the cache is full. */
#define LARGE_MAX ((size_t)64 << 20)
#define LARGE_BYTES ((size_t)256 << 20)
#define LARGE_N 128
typedef struct {
  char *base;
  size_t body;
} large_block;
static large_block large[LARGE_N]; /* oldest first */
static int nlarge;
static size_t large_bytes;
static pthread_mutex_t large_lock = PTHREAD_MUTEX_INITIALIZER;

static char *large_take(size_t nbytes) {
  char *base = NULL;
  pthread_mutex_lock(&large_lock);
  int best = -1;
  for (int i = 0; i < nlarge; i++)
    if (large[i].body >= nbytes && large[i].body - nbytes <= nbytes / 8 &&
        (best < 0 || large[i].body < large[best].body))
      best = i;
  if (best >= 0) {
    base = large[best].base;
    large_bytes -= large[best].body;
    for (int i = best; i + 1 < nlarge; i++) large[i] = large[i + 1];
    nlarge--;
  }
  pthread_mutex_unlock(&large_lock);
  return base;
}

/* Keeps the block; false when it is too large to keep. */
static bool large_keep(char *base, size_t body) {
  if (body > LARGE_MAX) return false;
  char *drop[LARGE_N];
  int ndrop = 0;
  pthread_mutex_lock(&large_lock);
  while (nlarge > 0 && (nlarge == LARGE_N || large_bytes + body > LARGE_BYTES)) {
    drop[ndrop++] = large[0].base;
    large_bytes -= large[0].body;
    for (int i = 0; i + 1 < nlarge; i++) large[i] = large[i + 1];
    nlarge--;
  }
  large[nlarge++] = (large_block){base, body};
  large_bytes += body;
  pthread_mutex_unlock(&large_lock);
  for (int i = 0; i < ndrop; i++) release_block(drop[i]);
  return true;
}

/* The header: the size class, and the body's size for large blocks. */
static void *host_alloc(int index, size_t nbytes) {
  (void)index;
  int c = size_class(nbytes);
  if (c <= MAX_CLASS && cache_enabled() && cache[c].n > 0) return cache[c].blocks[--cache[c].n];
  size_t body = c <= MAX_CLASS ? (size_t)1 << c : (nbytes + 63) & ~(size_t)63;
  if (body < nbytes || body > SIZE_MAX - HDR) return NULL;
  char *base = c > MAX_CLASS && body <= LARGE_MAX && cache_enabled() ? large_take(body) : NULL;
  if (base) return base + HDR;
  if (c > MAX_CLASS && body >= HUGE_MIN && huge_enabled()) {
    base = map_block(body);
    if (base) return base + HDR;
  }
  base = aligned_alloc(64, HDR + body);
  if (!base) return NULL;
  *(int *)base = c;
  *(size_t *)(base + 8) = body;
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
  if (c > MAX_CLASS && cache_enabled() && large_keep(base, *(size_t *)(base + 8))) return;
  release_block(base);
}

static int host_count(void) { return 1; }

const device_mem host_mem = {host_alloc, host_free, host_count};
