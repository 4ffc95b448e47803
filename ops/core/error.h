/* error.h: the per-thread status and message behind zorch_last_error(). */
#ifndef ZORCH_VM_ERROR_H
#define ZORCH_VM_ERROR_H
#include <stdarg.h>

#include "zorch.h"

/* Records a failure and returns `code`, so callers can write
   `return err_set(ZORCH_ERR_SHAPE, "add: ...")`. */
zorch_status err_set(zorch_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, with the arguments as a va_list (the CUDA module's err_set forwards here). */
zorch_status err_setv(zorch_status code, const char *fmt, va_list ap);
/* Same, for functions returning a pointer: returns NULL. */
void *err_null(zorch_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "op: " context when it does not have it yet. */
void err_prefix(const char *op);
/* Numbers that count from 0 in C and from 1 in Lua (dims, indices, class
   targets, list entries) are marked in messages, so that one message reads
   right in either numbering: zorch_last_error() gives the 0-based text, and
   err_render(1, ...) the 1-based one for the Lua bindings. Wrap the number's
   conversion: "dim " ERR_IX("%d") " out of range".
   - ERR_IX: a dim or index where negative ones count from the end; 1-based
     text adds 1 to the non-negative ones only.
   - ERR_IXV: a value read from an index tensor, or a class target (never
     counted from the end; the Lua layer subtracted 1 from each): 1-based text
     adds 1 to it.
   - ERR_NOTE1: text shown in 1-based messages only. */
#define ERR_IX(conv) "\x01" conv "\x03"
#define ERR_IXV(conv) "\x02" conv "\x03"
#define ERR_NOTE1(text) "\x04" text "\x03"
/* Writes the last error's message with numbers counted from base (0 or 1)
   into out (n bytes, at least 1); returns out. */
const char *err_render(int base, char *out, size_t n);
/* Writes "(2, 3)" into buf. */
const char *err_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
#define ERR_SHAPE_BUF 160
#endif
