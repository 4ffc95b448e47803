/* cancel.c: the interrupt flag and the deadline look of long kernels (cancel.h). */
#include "cancel.h"

#include <signal.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "state.h"

static volatile sig_atomic_t interrupted;

void zorch_interrupt(void) { interrupted = 1; }
void zorch_interrupt_clear(void) { interrupted = 0; }

zorch_status zcancel_poll(const char *op) {
  if (!op) op = "tensor op";
  if (interrupted) return err_set(ZORCH_ERR_TIMEOUT, "%s: interrupted", op);
  double deadline = zstate_get()->deadline;
  if (deadline <= 0) return ZORCH_OK;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  if ((double)t.tv_sec + (double)t.tv_nsec * 1e-9 <= deadline) return ZORCH_OK;
  return err_set(ZORCH_ERR_TIMEOUT, "%s: stopped: the time limit passed", op);
}

zorch_status zcancel_fread(void *p, size_t n, FILE *f, const char *op) {
  const size_t piece = (size_t)16 << 20;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < piece ? n - done : piece;
    zorch_status st = n > piece ? zcancel_poll(op) : ZORCH_OK;
    if (st) return st;
    if (fread((uint8_t *)p + done, 1, k, f) != k) return ZORCH_ERR_IO;
    done += k;
  }
  return ZORCH_OK;
}
