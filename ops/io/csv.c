/* csv.c: numbers separated by a delimiter, one row a line, into a float32
   (rows, cols) tensor; every row must have the first row's field count. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

zorch_status zorch_csv_load(const char *path, const zorch_csv_opts *opts, zorch_tensor **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "read_csv: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "read_csv: path is NULL");
  zorch_csv_opts o = opts ? *opts : (zorch_csv_opts){false, ','};
  if (!o.delimiter) o.delimiter = ',';
  if (o.delimiter == '\n' || o.delimiter == '\r' || o.delimiter == '.' || o.delimiter == '-' || o.delimiter == '+' ||
      (o.delimiter >= '0' && o.delimiter <= '9'))
    return err_set(ZORCH_ERR_ARG, "read_csv: the delimiter '%c' is part of a number or a line end", o.delimiter);
  FILE *f = fopen(path, "r");
  if (!f) return err_set(ZORCH_ERR_IO, "read_csv: cannot open %s: %s", path, strerror(errno));
  size_t cap = 1024, n = 0;
  long cols = -1, rows = 0, lineno = 0;
  float *v = malloc(cap * sizeof *v);
  char *line = NULL;
  size_t lcap = 0;
  ssize_t len;
  const char *err = NULL;
  bool oom = false;
  char msg[256];
  while (v && (len = getline(&line, &lcap, f)) >= 0) {
    lineno++;
    if (o.header && lineno == 1) continue;
    char *p = line;
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) continue;
    long c = 0;
    for (;;) {
      char *end;
      errno = 0;
      float x = strtof(p, &end);
      if (end == p) {
        snprintf(msg, sizeof msg, "read_csv: %s line %ld field %ld is not a number", path, lineno, c + 1);
        err = msg;
        break;
      }
      if (n == cap) {
        float *nv = realloc(v, (cap *= 2) * sizeof *v);
        if (!nv) {
          err = "read_csv: out of memory";
          oom = true;
          break;
        }
        v = nv;
      }
      v[n++] = x;
      c++;
      p = end;
      while (*p == ' ' || *p == '\t') p++;
      if (*p == o.delimiter) { p++; continue; }
      if (*p == '\n' || *p == '\r' || !*p) break;
      snprintf(msg, sizeof msg, "read_csv: %s line %ld: unexpected '%c'", path, lineno, *p);
      err = msg;
      break;
    }
    if (err) break;
    if (cols >= 0 && c != cols) {
      snprintf(msg, sizeof msg, "read_csv: %s line %ld has %ld fields, earlier lines %ld", path, lineno, c, cols);
      err = msg;
      break;
    }
    cols = c;
    rows++;
  }
  free(line);
  if (!err && ferror(f)) { /* a folder opens, then reads fail (EISDIR) */
    snprintf(msg, sizeof msg, "read_csv: cannot read %s: %s", path, strerror(errno));
    err = msg;
  }
  fclose(f);
  if (!v) return err_set(ZORCH_ERR_OOM, "read_csv: out of memory");
  if (err) {
    free(v);
    return err_set(oom ? ZORCH_ERR_OOM : ZORCH_ERR_IO, "%s", err);
  }
  int64_t shape[2] = {rows, cols < 0 ? 0 : cols};
  *out = zorch_from_buffer(v, 2, shape, ZORCH_F32);
  free(v);
  return *out ? ZORCH_OK : zorch_last_status();
}

