/* testhook.c: zorch_test_hook, the one place library code reads a switch meant
   only for tests (ZORCH_TEST_HOOKS). */
#include <stdlib.h>
#include <string.h>

#include "zorch.h"

const char *zorch_test_hook(const char *name) {
  const char *s = getenv("ZORCH_TEST_HOOKS");
  size_t n = name ? strlen(name) : 0;
  if (!s || !n) return NULL;
  for (const char *p = s; *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len >= n && strncmp(p, name, n) == 0 && (len == n || p[n] == '=')) {
      if (len == n) return "";
      /* the value runs to the next ':'; a copy per thread keeps it NUL-terminated */
      static _Thread_local char value[256];
      size_t k = len - n - 1 < sizeof value - 1 ? len - n - 1 : sizeof value - 1;
      memcpy(value, p + n + 1, k);
      value[k] = 0;
      return value;
    }
    p += len + (end != NULL);
  }
  return NULL;
}
