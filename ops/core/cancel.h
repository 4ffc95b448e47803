/* cancel.h: where long C work stops early. A kernel that runs long (a fill,
   a copy or a pointwise op over many elements, a large matmul, a file read)
   calls zcancel_poll between chunks of its work, on the thread that called
   the op; past the current state's deadline or after zorch_interrupt (a
   signal handler's Ctrl-C) it fails, and the op returns the error. */
#ifndef ZORCH_OPS_CORE_CANCEL_H
#define ZORCH_OPS_CORE_CANCEL_H
#include <stdio.h>

#include "zorch.h"

/* Elements between two polls of a pointwise kernel (a few milliseconds of work). */
#define ZCANCEL_CHUNK ((int64_t)1 << 24)
/* Work from this many elements (or multiply-adds, for a GEMM) polls once
   before it starts: past the deadline, a script's loop of such ops gets each
   back at once, since the budget's hook looks only every 1000 instructions. */
#define ZCANCEL_MIN ((int64_t)1 << 20)

/* ZORCH_OK, or ZORCH_ERR_TIMEOUT with "<op>: interrupted" or "<op>: stopped:
   the time limit passed" set. */
zorch_status zcancel_poll(const char *op);
/* fread of n bytes in pieces of 16 MiB with a poll before each (n past one piece): ZORCH_OK when
   all were read, the poll's error when it stopped, ZORCH_ERR_IO (no message
   set: the caller names the file) when the file ended first or failed. */
zorch_status zcancel_fread(void *p, size_t n, FILE *f, const char *op);
#endif
