/* idx.c: IDX files (the format of MNIST and Fashion-MNIST), plain or
   gzip-compressed. The header is checked before anything is allocated, and the
   data is read in chunks as it arrives, so a header that claims more than the
   file holds costs no more memory than the file's real contents. A gzip
   stream must be whole: zlib checks its trailer's CRC32 and length, and a
   stream that ends before them is refused. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../core/error.h"

#define IDX_CHUNK (1 << 20)
/* The largest payload accepted: 2^40 bytes. */
#define IDX_MAX_BYTES ((uint64_t)1 << 40)

/* What each IDX type byte holds, and the zorch dtype it is read into (int8
   and int16 widen to int32: zorch has no narrower signed integers). */
typedef struct {
  unsigned code;
  int size;
  zorch_dtype dt;
  const char *name;
} idx_type;
static const idx_type idx_types[] = {
    {0x08, 1, ZORCH_U8, "uint8"},   {0x09, 1, ZORCH_I32, "int8"},     {0x0B, 2, ZORCH_I32, "int16"},
    {0x0C, 4, ZORCH_I32, "int32"},  {0x0D, 4, ZORCH_F32, "float32"},  {0x0E, 8, ZORCH_F64, "float64"}};

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads up to n bytes; -1 on a read error (message in *err). */
static int64_t read_some(gzFile f, void *buf, size_t n, const char **err) {
  size_t got = 0;
  while (got < n) {
    unsigned want = (unsigned)(n - got < IDX_CHUNK ? n - got : IDX_CHUNK);
    int r = gzread(f, (char *)buf + got, want);
    if (r < 0) {
      int code;
      const char *m = gzerror(f, &code);
      *err = code == Z_ERRNO ? strerror(errno) : m;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

/* Big-endian elements of `size` bytes (count of them) into dtype dt, in place
   into out. */
static void convert(const unsigned char *in, void *out, int64_t count, const idx_type *t) {
  for (int64_t i = 0; i < count; i++) {
    const unsigned char *p = in + i * t->size;
    switch (t->code) {
      case 0x09: ((int32_t *)out)[i] = (int8_t)p[0]; break;
      case 0x0B: ((int32_t *)out)[i] = (int16_t)(uint16_t)(p[0] << 8 | p[1]); break;
      case 0x0C: ((int32_t *)out)[i] = (int32_t)be32(p); break;
      case 0x0D: {
        uint32_t u = be32(p);
        memcpy((float *)out + i, &u, 4);
        break;
      }
      case 0x0E: {
        uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
        memcpy((double *)out + i, &u, 8);
        break;
      }
    }
  }
}

zorch_status zorch_idx_load(const char *path, zorch_tensor **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "load_idx: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "load_idx: path is NULL");
  errno = 0;
  gzFile f = gzopen(path, "rb"); /* reads a file that is not gzip as it is */
  if (!f)
    return err_set(errno ? ZORCH_ERR_IO : ZORCH_ERR_OOM, "load_idx: cannot open %s: %s", path,
                   errno ? strerror(errno) : "out of memory");
  zorch_status st = ZORCH_ERR_IO;
  const char *err = NULL;
  char msg[160];
  unsigned char head[4 + 4 * ZORCH_MAX_DIMS];
  unsigned char *raw = NULL;
  zorch_tensor *t = NULL;
  const idx_type *type = NULL;
  int64_t shape[ZORCH_MAX_DIMS], count = 1;
  int nd = 0;
  uint64_t bytes = 0;
  int64_t got = read_some(f, head, 4, &err);
  if (got < 0) goto done;
  if (got < 4) { err = "truncated header (fewer than 4 bytes)"; goto done; }
  if (head[0] != 0 || head[1] != 0) {
    snprintf(msg, sizeof msg, "not an IDX file (magic %02x %02x %02x %02x; expected 00 00 TYPE NDIMS)",
             head[0], head[1], head[2], head[3]);
    err = msg;
    goto done;
  }
  for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
    if (idx_types[i].code == head[2]) type = &idx_types[i];
  if (!type) {
    snprintf(msg, sizeof msg, "unknown IDX type byte 0x%02x (expected 08, 09, 0b, 0c, 0d or 0e)", head[2]);
    err = msg;
    goto done;
  }
  nd = head[3];
  if (nd < 1 || nd > ZORCH_MAX_DIMS) {
    snprintf(msg, sizeof msg, "%d dims (expected 1 to %d)", nd, ZORCH_MAX_DIMS);
    err = msg;
    goto done;
  }
  got = read_some(f, head + 4, 4 * (size_t)nd, &err);
  if (got < 0) goto done;
  if (got < 4 * nd) { err = "truncated header (the dims)"; goto done; }
  bytes = (uint64_t)type->size;
  for (int i = 0; i < nd; i++) {
    shape[i] = be32(head + 4 + 4 * i);
    /* each factor < 2^32 and the product so far <= 2^40: no overflow */
    bytes *= shape[i] ? (uint64_t)shape[i] : 1;
    if (bytes > IDX_MAX_BYTES) {
      err = "dims too large (more than 2^40 bytes of data)";
      goto done;
    }
  }
  for (int i = 0; i < nd; i++) count *= shape[i];
  if (count == 0) bytes = 0;
  /* the data, as it arrives: a chunk at a time */
  size_t cap = 0, have = 0;
  while (have < bytes) {
    size_t want = bytes - have < IDX_CHUNK ? (size_t)(bytes - have) : IDX_CHUNK;
    if (have + want > cap) {
      size_t ncap = cap ? cap * 2 : IDX_CHUNK;
      if (ncap < have + want) ncap = have + want;
      if (ncap > bytes) ncap = (size_t)bytes;
      unsigned char *nr = realloc(raw, ncap);
      if (!nr) {
        st = ZORCH_ERR_OOM;
        err = "out of memory";
        goto done;
      }
      raw = nr, cap = ncap;
    }
    got = read_some(f, raw + have, want, &err);
    if (got < 0) goto done;
    have += (size_t)got;
    if ((size_t)got < want) {
      snprintf(msg, sizeof msg, "truncated data: the dims need %llu bytes, the file holds %llu",
               (unsigned long long)bytes, (unsigned long long)have);
      err = msg;
      goto done;
    }
  }
  unsigned char extra;
  got = read_some(f, &extra, 1, &err);
  if (got < 0) goto done;
  if (got > 0) { err = "more data than the dims say (a corrupt header?)"; goto done; }
  /* gzread ends a stream cut short without an error (a file still being
     written), with Z_BUF_ERROR in its state: the gzip trailer (CRC32 and
     length, which inflate checks once it has them) never arrived */
  int zcode = Z_OK;
  gzerror(f, &zcode);
  if (zcode == Z_BUF_ERROR) {
    err = "the gzip stream is cut short (its CRC32 and length trailer are missing or incomplete)";
    goto done;
  }
  if (!(t = zorch_empty(nd, shape, type->dt, (zorch_device){ZORCH_CPU, 0}))) {
    st = zorch_last_status();
    err = zorch_last_error();
    goto done;
  }
  if (type->size == 1 && type->dt == ZORCH_U8) {
    if (bytes) memcpy(zorch_tensor_data(t), raw, (size_t)bytes);
  } else {
    convert(raw, zorch_tensor_data(t), count, type);
  }
done:
  free(raw);
  /* gzerror's text lives in the stream: copy it before gzclose frees it */
  char why[200];
  if (err) snprintf(why, sizeof why, "%s", err);
  gzclose(f);
  if (err) {
    zorch_tensor_free(t);
    return err_set(st, "load_idx: %s: %s", path, why);
  }
  *out = t;
  return ZORCH_OK;
}
