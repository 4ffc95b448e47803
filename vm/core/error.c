/* error.c: per-thread error status and message. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local zorch_status err_code = ZORCH_OK;
static _Thread_local char err_msg[1024];

static void err_vset(zorch_status code, const char *fmt, va_list ap) {
  err_code = code;
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
}

zorch_status err_set(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(code, fmt, ap);
  va_end(ap);
  return code;
}

void *err_null(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(code, fmt, ap);
  va_end(ap);
  return NULL;
}

void err_prefix(const char *op) {
  size_t n = strlen(op);
  if (strncmp(err_msg, op, n) == 0 && err_msg[n] == ':') return;
  size_t len = strlen(err_msg), room = sizeof err_msg - 1;
  if (n + 2 >= room) return;
  if (len > room - n - 2) len = room - n - 2;
  memmove(err_msg + n + 2, err_msg, len);
  memcpy(err_msg, op, n);
  err_msg[n] = ':';
  err_msg[n + 1] = ' ';
  err_msg[n + 2 + len] = 0;
}

const char *err_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (ndim == 1 && used < n) used += (size_t)snprintf(buf + used, n - used, ",");
  if (used < n) snprintf(buf + used, n - used, ")");
  return buf;
}

zorch_status zorch_last_status(void) { return err_code; }
const char *zorch_last_error(void) { return err_code == ZORCH_OK ? "" : err_msg; }
void zorch_clear_error(void) {
  err_code = ZORCH_OK;
  err_msg[0] = 0;
}
