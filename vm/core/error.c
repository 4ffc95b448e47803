/* error.c: the status and message of the last failure, kept in the current
   state (state.h: the thread's own, or the running VM's). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "state.h"

static void err_vset(zorch_status code, const char *fmt, va_list ap) {
  zstate *s = zstate_get();
  s->err_code = code;
  vsnprintf(s->err_msg, sizeof s->err_msg, fmt, ap);
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
  char *msg = zstate_get()->err_msg;
  size_t n = strlen(op);
  if (strncmp(msg, op, n) == 0 && msg[n] == ':') return;
  size_t len = strlen(msg), room = ZSTATE_MSG - 1;
  if (n + 2 >= room) return;
  if (len > room - n - 2) len = room - n - 2;
  memmove(msg + n + 2, msg, len);
  memcpy(msg, op, n);
  msg[n] = ':';
  msg[n + 1] = ' ';
  msg[n + 2 + len] = 0;
}

const char *err_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (ndim == 1 && used < n) used += (size_t)snprintf(buf + used, n - used, ",");
  if (used < n) snprintf(buf + used, n - used, ")");
  return buf;
}

zorch_status zorch_last_status(void) { return zstate_get()->err_code; }
const char *zorch_last_error(void) {
  zstate *s = zstate_get();
  return s->err_code == ZORCH_OK ? "" : s->err_msg;
}
void zorch_clear_error(void) {
  zstate *s = zstate_get();
  s->err_code = ZORCH_OK;
  s->err_msg[0] = 0;
}
