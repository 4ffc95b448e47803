/* state.c: per-thread and per-VM state (state.h). */
#include "state.h"

#include <stdatomic.h>
#include <stdlib.h>

/* The default seed is fixed: runs are reproducible unless asked otherwise. */
#define RNG_DEFAULT_SEED 20240229u
#define ZSTATE_INIT {{RNG_DEFAULT_SEED, 0, true}, true, ZORCH_OK, "", "", NULL, 0}

static _Thread_local zstate thread_state = ZSTATE_INIT;
static _Thread_local zstate *current;

zstate *zstate_get(void) { return current ? current : &thread_state; }

zstate *zstate_swap(zstate *s) {
  zstate *prev = zstate_get();
  current = s;
  return prev == &thread_state ? NULL : prev;
}

zstate *zstate_new(void) {
  zstate *s = malloc(sizeof *s);
  if (s) *s = (zstate)ZSTATE_INIT;
  return s;
}

void zstate_free(zstate *s) {
  if (s && current == s) current = NULL;
  free(s);
}

zmem_account *zmem_account_new(size_t limit) {
  zmem_account *a = malloc(sizeof *a);
  if (!a) return NULL;
  atomic_init(&a->used, 0);
  a->limit = limit;
  atomic_init(&a->refs, 1);
  a->reclaim = NULL, a->reclaim_ud = NULL, a->reclaiming = false;
  return a;
}

void zmem_account_release(zmem_account *a) {
  if (a && atomic_fetch_sub(&a->refs, 1) == 1) free(a);
}

/* ---- public: the state a VM runs under ---- */
zorch_state *zorch_state_new(void) { return zstate_new(); }
void zorch_state_free(zorch_state *s) { zstate_free(s); }
zorch_state *zorch_state_swap(zorch_state *s) { return zstate_swap(s); }
void zorch_state_set_deadline(zorch_state *s, double t) {
  if (s) s->deadline = t > 0 ? t : 0;
}
