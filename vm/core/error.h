/* error.h: the per-thread status and message behind zorch_last_error(). */
#ifndef ZORCH_VM_ERROR_H
#define ZORCH_VM_ERROR_H
#include "zorch.h"

/* Records a failure and returns `code`, so callers can write
   `return err_set(ZORCH_ERR_SHAPE, "add: ...")`. */
zorch_status err_set(zorch_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, for functions returning a pointer: returns NULL. */
void *err_null(zorch_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "op: " context when it does not have it yet. */
void err_prefix(const char *op);
/* Writes "(2, 3)" into buf. */
const char *err_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
#define ERR_SHAPE_BUF 160
#endif
