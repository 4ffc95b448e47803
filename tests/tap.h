/* tap.h: a small TAP producer for the C tests, plus tensor helpers shared by
   them. `prove` reads the output. */
#ifndef ZORCH_TESTS_TAP_H
#define ZORCH_TESTS_TAP_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zorch.h"

static int tap_count, tap_failed;

__attribute__((format(printf, 4, 5))) static int tap_ok(int cond, const char *file, int line,
                                                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_count++;
  printf("%s %d - ", cond ? "ok" : "not ok", tap_count);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (!cond) {
    tap_failed++;
    printf("#   failed at %s:%d\n", file, line);
    if (zorch_last_status() != ZORCH_OK) printf("#   last error: %s\n", zorch_last_error());
  }
  fflush(stdout);
  return cond;
}
#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* A test not run here, counted in the plan: "ok N # skip why". */
static inline void skip(const char *why) {
  printf("ok %d # skip %s\n", ++tap_count, why);
  fflush(stdout);
}
static int done_testing(void) {
  printf("1..%d\n", tap_count);
  return tap_failed ? 1 : 0;
}

static const zorch_device CPU = {ZORCH_CPU, 0};
#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* A tensor of dtype dt from doubles. */
static inline zorch_tensor *from_doubles(const double *v, int ndim, const int64_t *shape,
                                         zorch_dtype dt) {
  zorch_tensor *d = zorch_from_buffer(v, ndim, shape, ZORCH_F64);
  if (!d) return NULL;
  zorch_tensor *t = zorch_to_dtype(d, dt);
  zorch_tensor_free(d);
  return t;
}

/* Element i (row-major) of t as a double. */
static inline double at(const zorch_tensor *t, int64_t i) {
  int64_t n = zorch_tensor_numel(t);
  double *v = malloc((size_t)n * sizeof(double));
  double r = NAN;
  if (v && zorch_tensor_to_doubles(t, v, n) == ZORCH_OK && i < n) r = v[i];
  free(v);
  return r;
}

/* Largest |a - b| / (atol + rtol |b|) over t and expected values; <= 1 passes. */
static inline double close_ratio(const zorch_tensor *t, const double *want, int64_t n, double rtol,
                                 double atol) {
  if (!t || zorch_tensor_numel(t) != n) return INFINITY;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!v || zorch_tensor_to_doubles(t, v, n)) {
    free(v);
    return INFINITY;
  }
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double r = fabs(v[i] - want[i]) / (atol + rtol * fabs(want[i]));
    if (isnan(v[i]) != isnan(want[i])) r = INFINITY;
    if (isnan(v[i]) && isnan(want[i])) r = 0;
    if (r > worst) worst = r;
  }
  free(v);
  return worst;
}

static inline int shape_is(const zorch_tensor *t, int ndim, const int64_t *shape) {
  if (!t || zorch_tensor_ndim(t) != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (zorch_tensor_shape(t)[i] != shape[i]) return 0;
  return 1;
}

static inline int error_has(const char *needle) {
  return zorch_last_status() != ZORCH_OK && strstr(zorch_last_error(), needle) != NULL;
}
#endif
