/* tokens.c: files of token ids without a header (llm.c's .bin token files
   are little-endian uint16; width 1 reads bytes of text) into int64. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/error.h"

zorch_status zorch_tokens_load(const char *path, int width, zorch_tensor **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "load_tokens: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "load_tokens: path is NULL");
  if (width != 1 && width != 2) return err_set(ZORCH_ERR_ARG, "load_tokens: token width must be 1 (bytes) or 2 (uint16)");
  FILE *f = fopen(path, "rb");
  if (!f) return err_set(ZORCH_ERR_IO, "load_tokens: cannot open %s: %s", path, strerror(errno));
  const char *err = NULL;
  char why[256];
  zorch_status st = ZORCH_ERR_IO;
  zorch_tensor *t = NULL;
  long size = -1;
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0) err = strerror(errno);
  else if (!S_ISREG(sb.st_mode)) err = "not a regular file";
  else if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) err = strerror(errno);
  else if (size % width != 0) err = "the size is not a whole number of uint16 tokens";
  int64_t n = size / width;
  unsigned char *buf = NULL;
  if (!err && !(buf = malloc(size ? (size_t)size : 1))) err = "out of memory", st = ZORCH_ERR_OOM;
  if (!err && size && fread(buf, 1, (size_t)size, f) != (size_t)size) err = "short read";
  if (!err && !(t = zorch_empty(1, &n, ZORCH_I64, (zorch_device){ZORCH_CPU, 0}))) {
    st = zorch_last_status();
    snprintf(why, sizeof why, "%s", zorch_last_error());
    err = why;
  }
  if (!err) {
    int64_t *d = zorch_tensor_data(t);
    for (int64_t i = 0; i < n; i++) d[i] = width == 1 ? buf[i] : (int64_t)(buf[2 * i] | buf[2 * i + 1] << 8);
  }
  free(buf);
  fclose(f);
  if (err) {
    zorch_tensor_free(t);
    return err_set(st, "load_tokens: %s: %s", path, err);
  }
  *out = t;
  return ZORCH_OK;
}

