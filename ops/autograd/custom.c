/* custom.c: nodes whose backward the caller supplies (zorch_custom_node), as
   PyTorch's autograd.Function: the forward is already computed, the node only
   routes the output's gradient through the caller's backward. */
#include <stdlib.h>

#include "../core/error.h"
#include "../core/node.h"

typedef struct {
  zorch_custom_fn fn;
  void *ctx;
} custom_args;

static zorch_status custom_backward(ag_node *n, zorch_tensor *g, zorch_tensor **gin) {
  const custom_args *a = AG_ARGS(n, custom_args);
  zorch_clear_error(); /* so that a backward failing without a message is seen */
  zorch_status st = a->fn.backward(a->ctx, g, n->saved, n->nin, gin);
  if (st && zorch_last_status() == ZORCH_OK)
    err_set(st, "%s: the backward function failed without a message", n->name);
  return st;
}

static void custom_free(void *args) {
  const custom_args *a = args;
  if (a->fn.release) a->fn.release(a->ctx);
}

bool zorch_grad_needed(int n, zorch_tensor *const *ts) { return n > 0 && ts && ag_needed(n, ts); }

zorch_tensor *zorch_custom_node(zorch_tensor *out, int nin, zorch_tensor *const *inputs, int nsave,
                                zorch_tensor *const *save, const zorch_custom_fn *fn, void *ctx) {
  const char *bad = !fn || !fn->backward || !fn->name ? "fn needs a name and a backward"
                    : !out                            ? "out is NULL"
                    : nin < 0 || nin > ZORCH_CUSTOM_MAX_IN || (nin && !inputs) ? "nin must be 0..64, with inputs"
                    : nsave < 0 || nsave > ZORCH_CUSTOM_MAX_SAVED || (nsave && !save) ? "nsave must be 0..5, with save"
                                                                           : NULL;
  for (int i = 0; !bad && i < nin; i++)
    if (!inputs[i]) bad = "an input is NULL";
  for (int i = 0; !bad && i < nsave; i++)
    if (!save[i]) bad = "a saved tensor is NULL";
  if (bad) {
    if (fn && fn->release) fn->release(ctx);
    return err_null(ZORCH_ERR_ARG, "zorch_custom_node: %s", bad);
  }
  zorch_tensor *d = zorch_detach(out);
  if (!d || !ag_needed(nin, inputs)) {
    if (fn->release) fn->release(ctx);
    return d;
  }
  custom_args a = {*fn, ctx};
  zorch_tensor *r = ag_record(d, fn->name, custom_backward, nin, inputs, nsave, save, &a, sizeof a);
  if (!r) {
    if (fn->release) fn->release(ctx);
    return NULL;
  }
  r->grad_fn->free_args = custom_free;
  return r;
}
