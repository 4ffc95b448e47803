/* state.h: the state a VM owns, as Lua's global_State owns a Lua universe's:
   the default generator, grad mode and the last error. Each thread has a
   state of its own; a VM makes its state current while it runs (vm/embed.c
   swaps it in around every entry), so two VMs never share a generator, a grad
   mode or an error, even on one thread. What stays process-wide is listed in
   docs/architecture.md (MPI, NCCL, BLAS, the backend registry). */
#ifndef ZORCH_VM_CORE_STATE_H
#define ZORCH_VM_CORE_STATE_H
#include <stdbool.h>
#include <stdint.h>

#include "zorch.h"

struct zorch_generator {
  uint64_t seed, offset;
  bool in_state; /* a state's default generator: never freed on its own */
};

/* A byte budget for tensor storage (a VM's tensor_limit). Each storage charged
   to it keeps a reference, so the account outlives a VM whose tensors the host
   still holds. */
typedef struct zmem_account {
  _Atomic size_t used;
  size_t limit;
  _Atomic int refs;
  /* called once when a charge would pass the limit, then the charge is tried
     again: the VM runs a full collection, so tensors a script dropped (whose
     memory waits for Lua's collector) do not refuse its next one. NULL once
     the VM is gone; called only on the thread whose state holds the account. */
  void (*reclaim)(void *ud);
  void *reclaim_ud;
  bool reclaiming;
} zmem_account;

/* A new account of `limit` bytes with one reference; NULL when out of memory. */
zmem_account *zmem_account_new(size_t limit);
void zmem_account_release(zmem_account *a);
/* Charges nbytes to the current state's account, if it has one: *acct gets
   the account (with a reference) or NULL. false, with the error set, past the
   limit. Tensor handles and graph nodes are charged too, not only storage: a
   script's chain of views costs host memory though it owns no storage. */
bool zmem_charge_current(size_t nbytes, zmem_account **acct);
void zmem_uncharge(zmem_account *a, size_t nbytes);

#define ZSTATE_MSG 1024
typedef struct zstate {
  zorch_generator gen; /* the default generator */
  bool grad_enabled;
  zorch_status err_code;
  char err_msg[ZSTATE_MSG]; /* the message, 0-based (zorch_last_error) */
  char err_raw[ZSTATE_MSG]; /* the same with its numbers marked (error.h) */
  zmem_account *mem;        /* tensor storage allocated while current is charged here (NULL: none) */
  double deadline;          /* CLOCK_MONOTONIC seconds past which long ops stop (0: none; cancel.h) */
} zstate;

/* The current state of this thread (its own unless a VM swapped one in). */
zstate *zstate_get(void);
/* Makes s current on this thread (NULL: the thread's own); returns the
   previous one, to be swapped back. */
zstate *zstate_swap(zstate *s);
/* A fresh state: default seed, grad mode on, no error. NULL when out of memory. */
zstate *zstate_new(void);
void zstate_free(zstate *s);
#endif
