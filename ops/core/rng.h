/* rng.h: generator internals the ops use. */
#ifndef ZORCH_VM_CORE_RNG_H
#define ZORCH_VM_CORE_RNG_H
#include <stdint.h>

#include "zorch.h"

/* Reserves `blocks` counter blocks of g (the default generator when NULL);
   returns the first and sets *seed. */
uint64_t rng_reserve(zorch_generator *g, uint64_t blocks, uint64_t *seed);
#endif
