/* timing.h: what bench/'s small timing programs share. Each defines
   BENCH_NAME (its name, for its error messages) before including it. */
#ifndef ZORCH_BENCH_TIMING_H
#define ZORCH_BENCH_TIMING_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zorch.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* Seconds on a clock: CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID. */
static inline double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A benchmark that cannot set up ends with zorch's message. */
static inline void check(const void *p) {
  if (!p) {
    fprintf(stderr, "%s: %s\n", BENCH_NAME, zorch_last_error());
    exit(1);
  }
}
#endif
