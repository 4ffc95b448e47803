/* Long ops stop at their next look at the deadline or the interrupt flag
   (ops/core/cancel.h): fills, conversions, pointwise ops, large matmuls and
   file reads fail with ZORCH_ERR_TIMEOUT; small ops never look; once the
   flag is cleared and the deadline removed, everything runs again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"

#define BIG ((int64_t)1 << 25) /* two chunks of a pointwise kernel */
#define FILE_NUMEL ((int64_t)1 << 23) /* 32 MiB: two pieces of a read */

/* Whether a NULL result came with a stop naming `what`. */
static bool stopped(zorch_tensor *t, const char *what) {
  bool yes = !t && zorch_last_status() == ZORCH_ERR_TIMEOUT && strstr(zorch_last_error(), what);
  zorch_tensor_free(t);
  return yes;
}

/* Runs the long ops; each must stop with `what` in its message. */
static void check_long_ops(const char *why, const char *what, zorch_tensor *big, zorch_tensor *sq, const char *npy,
                           const char *st) {
  ok(stopped(zorch_full(SHAPE(BIG), 1.5, ZORCH_F32, CPU), what), "%s: a fill of 2^25 stops: %s", why, zorch_last_error());
  ok(stopped(zorch_to_dtype(big, ZORCH_F64), what), "%s: a conversion stops: %s", why, zorch_last_error());
  ok(stopped(zorch_add_scalar(big, 1), what), "%s: a pointwise op stops: %s", why, zorch_last_error());
  ok(stopped(zorch_matmul(sq, sq), what), "%s: a 3000^3 matmul stops: %s", why, zorch_last_error());
  zorch_tensor *t = NULL;
  ok(zorch_npy_load(npy, &t) == ZORCH_ERR_TIMEOUT && !t && strstr(zorch_last_error(), what),
     "%s: a 32 MiB .npy read stops: %s", why, zorch_last_error());
  int n = 0;
  char **names = NULL;
  zorch_tensor **ts = NULL;
  ok(zorch_load_safetensors(st, &n, &names, &ts) == ZORCH_ERR_TIMEOUT && strstr(zorch_last_error(), what),
     "%s: a 32 MiB safetensors read stops: %s", why, zorch_last_error());
  zorch_tensor *mid = zorch_full(SHAPE(128, 128), 1, ZORCH_F32, CPU);
  ok(stopped(zorch_matmul(mid, mid), what), "%s: a 128^3 matmul (one piece) stops before it starts: %s", why,
     zorch_last_error());
  zorch_tensor_free(mid);
  zorch_tensor *small = zorch_full(SHAPE(1000), 2, ZORCH_F32, CPU);
  ok(small && at(small, 999) == 2, "%s: a small op does not look", why);
  zorch_tensor_free(small);
}

int main(void) {
  char dir[] = "/tmp/zorch-cancel-XXXXXX";
  if (!mkdtemp(dir)) return printf("Bail out! no temporary folder\n"), 1;
  char npy[64], st[64];
  snprintf(npy, sizeof npy, "%s/big.npy", dir);
  snprintf(st, sizeof st, "%s/big.safetensors", dir);
  zorch_tensor *big = zorch_full(SHAPE(BIG), 1, ZORCH_F32, CPU);
  zorch_tensor *sq = zorch_full(SHAPE(3000, 3000), 1, ZORCH_F32, CPU);
  zorch_tensor *saved = zorch_full(SHAPE(FILE_NUMEL), 1, ZORCH_F32, CPU);
  const char *name = "w";
  ok(big && sq && saved && zorch_npy_save(npy, saved) == ZORCH_OK && zorch_save_safetensors(st, 1, &name, &saved) == ZORCH_OK,
     "a 32 MiB tensor saved as .npy and safetensors");
  zorch_tensor_free(saved);

  zorch_interrupt();
  check_long_ops("interrupted", "interrupted", big, sq, npy, st);
  zorch_interrupt_clear();

  zorch_state *s = zorch_state_new();
  zorch_state *prev = zorch_state_swap(s);
  zorch_state_set_deadline(s, 1e-9);
  check_long_ops("past the deadline", "time limit", big, sq, npy, st);
  zorch_state_set_deadline(s, 0);
  zorch_tensor *c = zorch_matmul(sq, sq);
  ok(c && at(c, 0) == 3000 && at(c, 3000 * 3000 - 1) == 3000, "without a deadline the matmul runs (panels give the whole product: %g)", c ? at(c, 0) : -1);
  zorch_tensor *y = zorch_add_scalar(big, 1);
  ok(y && at(y, 0) == 2 && at(y, BIG - 1) == 2, "and the pointwise op, every chunk");
  zorch_tensor *t = NULL;
  ok(zorch_npy_load(npy, &t) == ZORCH_OK && t && at(t, FILE_NUMEL - 1) == 1, "and the file read");
  zorch_tensor_free(t);
  zorch_tensor_free(y);
  zorch_tensor_free(c);
  zorch_state_swap(prev);
  zorch_state_free(s);

  zorch_tensor_free(big);
  zorch_tensor_free(sq);
  unlink(npy);
  unlink(st);
  rmdir(dir);
  return done_testing();
}
