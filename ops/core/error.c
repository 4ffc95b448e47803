/* error.c: the status and message of the last failure, kept in the current
   state (state.h: the thread's own, or the running VM's). */
#include "error.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

/* The marks of error.h */
enum { MARK_IX = 1, MARK_IXV = 2, MARK_END = 3, MARK_NOTE1 = 4 };

/* Writes raw into out (n >= 1 bytes) without its marks, with the marked
   numbers counted from base. A mark that does not enclose a number (a message
   cut at the buffer's end) is dropped. */
static void render(const char *raw, int base, char *out, size_t n) {
  size_t k = 0;
  for (const char *p = raw; *p && k + 1 < n;) {
    if (*p == MARK_IX || *p == MARK_IXV) {
      char *end;
      long long v = strtoll(p + 1, &end, 10);
      if (end == p + 1 || *end != MARK_END) {
        p++;
        continue;
      }
      if ((*p == MARK_IXV || v >= 0) && v < LLONG_MAX) v += base;
      int w = snprintf(out + k, n - k, "%lld", v);
      k += w > 0 && (size_t)w < n - k ? (size_t)w : n - k - 1;
      p = end + 1;
    } else if (*p == MARK_NOTE1) {
      const char *end = strchr(p + 1, MARK_END);
      size_t len = end ? (size_t)(end - p - 1) : strlen(p + 1);
      if (base == 1) {
        size_t m = len < n - k - 1 ? len : n - k - 1;
        memcpy(out + k, p + 1, m);
        k += m;
      }
      p += 1 + len + (end ? 1 : 0);
    } else if (*p == MARK_END) {
      p++;
    } else {
      out[k++] = *p++;
    }
  }
  out[k] = 0;
}

static void err_vset(zorch_status code, const char *fmt, va_list ap) {
  zstate *s = zstate_get();
  s->err_code = code;
  vsnprintf(s->err_raw, sizeof s->err_raw, fmt, ap);
  render(s->err_raw, 0, s->err_msg, sizeof s->err_msg);
}

const char *err_render(int base, char *out, size_t n) {
  zstate *s = zstate_get();
  render(s->err_code == ZORCH_OK ? "" : s->err_raw, base, out, n);
  return out;
}

zorch_status err_set(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(code, fmt, ap);
  va_end(ap);
  return code;
}

zorch_status err_setv(zorch_status code, const char *fmt, va_list ap) {
  err_vset(code, fmt, ap);
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
  zstate *s = zstate_get();
  char *msg = s->err_raw;
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
  render(s->err_raw, 0, s->err_msg, sizeof s->err_msg);
}

const char *err_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (ndim == 1 && used < n) used += (size_t)snprintf(buf + used, n - used, ",");
  if (used < n) snprintf(buf + used, n - used, ")");
  return buf;
}

const char *zorch_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  if (!shape || ndim < 0) ndim = 0;
  if (ndim > ZORCH_MAX_DIMS) ndim = ZORCH_MAX_DIMS; /* no tensor has more */
  return err_shape_str(ndim, shape, buf, n);
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
  s->err_raw[0] = 0;
}

/* ---- public: for language bindings ---- */
const char *zorch_last_error_based(int base, char *out, size_t n) {
  if (!out || n == 0) return out;
  return err_render(base, out, n);
}

void zorch_error_prefix(const char *op) {
  if (op) err_prefix(op);
}

zorch_status zorch_set_error(zorch_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(code, fmt ? fmt : "", ap);
  va_end(ap);
  return code;
}
