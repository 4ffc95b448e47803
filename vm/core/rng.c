/* rng.c: counter-based generators. A generator is a seed (the Philox key) and
   an offset (the next unused counter block); drawing n numbers advances the
   offset, so any device reproduces a stream from (seed, offset). */
#include <stdlib.h>

#include "rng.h"
#include "tensor.h"

struct zorch_generator {
  uint64_t seed, offset;
};

/* The default seed is fixed: runs are reproducible unless asked otherwise. */
#define RNG_DEFAULT_SEED 20240229u
static zorch_generator default_gen = {RNG_DEFAULT_SEED, 0};

zorch_generator *zorch_generator_new(uint64_t seed) {
  zorch_generator *g = malloc(sizeof *g);
  if (!g) return err_null(ZORCH_ERR_OOM, "generator: out of memory");
  g->seed = seed;
  g->offset = 0;
  return g;
}

void zorch_generator_free(zorch_generator *g) {
  if (g != &default_gen) free(g);
}
void zorch_generator_seed(zorch_generator *g, uint64_t seed) {
  g->seed = seed;
  g->offset = 0;
}
uint64_t zorch_generator_offset(const zorch_generator *g) { return g->offset; }
void zorch_generator_set_offset(zorch_generator *g, uint64_t offset) { g->offset = offset; }
zorch_generator *zorch_default_generator(void) { return &default_gen; }
void zorch_manual_seed(uint64_t seed) { zorch_generator_seed(&default_gen, seed); }

uint64_t rng_reserve(zorch_generator *g, uint64_t blocks, uint64_t *seed) {
  if (!g) g = &default_gen;
  uint64_t first = g->offset;
  g->offset += blocks;
  *seed = g->seed;
  return first;
}
