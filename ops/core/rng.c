/* rng.c: counter-based generators. A generator is a seed (the Philox key) and
   an offset (the next unused counter block); drawing n numbers advances the
   offset, so any device reproduces a stream from (seed, offset). The default
   generator belongs to the current state (state.h). */
#include <stdlib.h>

#include "rng.h"
#include "state.h"
#include "tensor.h"

#define default_gen (zstate_get()->gen)

zorch_generator *zorch_generator_new(uint64_t seed) {
  zorch_generator *g = malloc(sizeof *g);
  if (!g) return err_null(ZORCH_ERR_OOM, "generator: out of memory");
  g->seed = seed;
  g->offset = 0;
  g->in_state = false;
  return g;
}

void zorch_generator_free(zorch_generator *g) {
  if (g && !g->in_state) free(g);
}
void zorch_generator_seed(zorch_generator *g, uint64_t seed) {
  g->seed = seed;
  g->offset = 0;
}
uint64_t zorch_generator_offset(const zorch_generator *g) { return g->offset; }
uint64_t zorch_generator_initial_seed(const zorch_generator *g) { return g->seed; }
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
