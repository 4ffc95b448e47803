/* tokens.c: files of token ids into int64: llm.c's token files (a 1,024-byte
   header: int32 magic 20240520, version 1 for uint16 ids or 2 for uint32, the
   count; then the little-endian ids), and files without a header of `width`
   bytes a token (1: bytes of text, 2: uint16, 4: uint32). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/error.h"

static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

zorch_status zorch_tokens_load(const char *path, int width, zorch_tensor **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "load_tokens: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "load_tokens: path is NULL");
  if (width != 1 && width != 2 && width != 4)
    return err_set(ZORCH_ERR_ARG, "load_tokens: token width must be 1 (bytes), 2 (uint16) or 4 (uint32)");
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
  unsigned char *buf = NULL;
  if (!err && !(buf = malloc(size ? (size_t)size : 1))) err = "out of memory", st = ZORCH_ERR_OOM;
  if (!err && size && fread(buf, 1, (size_t)size, f) != (size_t)size) err = "short read";
  long skip = 0;
  if (!err && size >= 1024 && rd32(buf) == 20240520) { /* llm.c's header */
    uint32_t version = rd32(buf + 4), count = rd32(buf + 8);
    if (version != 1 && version != 2) {
      snprintf(why, sizeof why, "llm.c header version %u (1: uint16, 2: uint32) is not supported", version);
      err = why;
    } else {
      width = version == 1 ? 2 : 4, skip = 1024;
      if ((uint64_t)(size - 1024) != (uint64_t)count * (uint64_t)width) {
        snprintf(why, sizeof why, "the header says %u tokens, the file holds %ld bytes of them", count, size - 1024);
        err = why;
      }
    }
  }
  if (!err && (size - skip) % width != 0)
    err = width == 2 ? "the size is not a whole number of uint16 tokens" : "the size is not a whole number of uint32 tokens";
  int64_t n = (size - skip) / width;
  if (!err && !(t = zorch_empty(1, &n, ZORCH_I64, (zorch_device){ZORCH_CPU, 0}))) {
    st = zorch_last_status();
    snprintf(why, sizeof why, "%s", zorch_last_error());
    err = why;
  }
  if (!err) {
    int64_t *d = zorch_tensor_data(t);
    const unsigned char *b = buf + skip;
    for (int64_t i = 0; i < n; i++)
      d[i] = width == 1 ? b[i] : width == 2 ? (int64_t)(b[2 * i] | b[2 * i + 1] << 8) : (int64_t)rd32(b + 4 * i);
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

