/* npy.c: NumPy's .npy format: the magic "\x93NUMPY", a version, a header
   length, a Python dict {'descr', 'fortran_order', 'shape'} padded with
   spaces and ended by a newline so that the data starts at a multiple of 64
   bytes, then the raw elements. The whole header, its framing, and the
   file's size against it, is checked before anything is allocated. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "target.h"

#define NPY_MAX_HEADER 4096

static const struct {
  const char *descr;
  zorch_dtype dt;
} npy_types[] = {{"<f4", ZORCH_F32}, {"<f8", ZORCH_F64}, {"<f2", ZORCH_F16}, {"<i4", ZORCH_I32},
                 {"<i8", ZORCH_I64}, {"|u1", ZORCH_U8},  {"|b1", ZORCH_BOOL},
                 {"|i1", ZORCH_I8}};

/* The value text after 'key': in the header dict, or NULL. */
static const char *npy_field(const char *hdr, const char *key) {
  const char *p = strstr(hdr, key);
  if (!p) return NULL;
  p += strlen(key);
  while (*p == ' ') p++;
  return *p == ':' ? p + 1 : NULL;
}

/* Parses the header dict into dtype and shape; a message into why when it is not one zorch reads. */
static const char *npy_parse(const char *hdr, zorch_dtype *dt, int *nd, int64_t *shape) {
  const char *d = npy_field(hdr, "'descr'"), *fo = npy_field(hdr, "'fortran_order'"), *sh = npy_field(hdr, "'shape'");
  if (!d || !fo || !sh) return "the header lacks descr, fortran_order or shape";
  while (*fo == ' ') fo++;
  if (strncmp(fo, "False", 5) != 0) return "Fortran order is not supported";
  while (*d == ' ') d++;
  bool found = false;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
    size_t n = strlen(npy_types[i].descr);
    if (*d == '\'' && strncmp(d + 1, npy_types[i].descr, n) == 0 && d[1 + n] == '\'') *dt = npy_types[i].dt, found = true;
  }
  if (!found) return "unsupported dtype (expected <f4, <f8, <f2, <i4, <i8, |u1 or |b1)";
  while (*sh == ' ') sh++;
  if (*sh != '(') return "bad shape";
  *nd = 0;
  for (const char *p = sh + 1;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (end == p || x < 0 || errno) return "bad shape";
    if (*nd == ZORCH_MAX_DIMS) return "more dims than zorch holds (8)";
    shape[(*nd)++] = x;
    p = end;
    if (*p != ',' && *p != ')' && *p != ' ') return "bad shape";
  }
  return NULL;
}

zorch_status zorch_npy_load(const char *path, zorch_tensor **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "load_npy: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "load_npy: path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) return err_set(ZORCH_ERR_IO, "load_npy: cannot open %s: %s", path, strerror(errno));
  unsigned char pre[12];
  char hdr[NPY_MAX_HEADER];
  char msg[160];
  const char *err = NULL;
  zorch_tensor *t = NULL;
  size_t hlen = 0, plen = 10;
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) err = "not a regular file";
  else if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) err = "not a .npy file (bad magic)";
  else if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
  else if ((pre[6] == 2 || pre[6] == 3) && fread(pre + 10, 1, 2, f) == 2) {
    hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    plen = 12;
  } else err = "unsupported .npy version (expected 1, 2 or 3)";
  if (!err && (hlen == 0 || hlen >= sizeof hdr)) {
    snprintf(msg, sizeof msg, "bad header length %zu (1 to %d)", hlen, NPY_MAX_HEADER - 1);
    err = msg;
  } else if (!err && fread(hdr, 1, hlen, f) != hlen) err = "bad or truncated header";
  zorch_dtype dt = ZORCH_F32;
  int64_t shape[ZORCH_MAX_DIMS];
  int nd = 0;
  if (!err) {
    hdr[hlen] = 0;
    if (strlen(hdr) != hlen) err = "the header holds a NUL byte";
    else err = npy_parse(hdr, &dt, &nd, shape);
    /* the format's framing: a header length off by a few bytes would
       otherwise move the data's offset without a word */
    if (!err && hdr[hlen - 1] != '\n') {
      snprintf(msg, sizeof msg, "the header (length %zu) does not end with a newline: a wrong header length?", hlen);
      err = msg;
    } else if (!err && (plen + hlen) % 64 != 0) {
      snprintf(msg, sizeof msg, "the header ends at byte %zu, not at a multiple of 64 as the format requires: "
               "a wrong header length?", plen + hlen);
      err = msg;
    }
  }
  uint64_t bytes = zorch_dtype_size(dt), have = (uint64_t)sb.st_size - (uint64_t)(plen + hlen);
  for (int i = 0; !err && i < nd; i++)
    if (__builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes)) err = "the shape has too many elements";
  if (!err && bytes != have) {
    snprintf(msg, sizeof msg, "%s data: the shape needs %llu bytes, the file holds %llu",
             bytes > have ? "truncated" : "more than the shape's", (unsigned long long)bytes, (unsigned long long)have);
    err = msg;
  }
  zorch_status st = ZORCH_ERR_IO;
  if (!err && !(t = zorch_empty(nd, shape, dt, (zorch_device){ZORCH_CPU, 0}))) {
    st = zorch_last_status();
    snprintf(msg, sizeof msg, "%s", zorch_last_error());
    err = msg;
  } else if (!err && bytes && fread(zorch_tensor_data(t), 1, (size_t)bytes, f) != bytes) err = "truncated data";
  fclose(f);
  if (err) {
    zorch_tensor_free(t);
    return err_set(st, "load_npy: %s: %s", path, err);
  }
  *out = t;
  return ZORCH_OK;
}

zorch_status zorch_npy_save(const char *path, zorch_tensor *t) {
  if (!path || !t) return err_set(ZORCH_ERR_ARG, "save_npy: path or tensor is NULL");
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (npy_types[i].dt == zorch_tensor_dtype(t)) descr = npy_types[i].descr;
  if (!descr)
    return err_set(ZORCH_ERR_DTYPE, "save_npy: NumPy has no %s (convert the tensor first)",
                   zorch_dtype_name(zorch_tensor_dtype(t)));
  char target[PATH_MAX], tmp[IO_TMP_MAX];
  zorch_status st = io_write_target("save_npy", path, target);
  if (st) return st;
  /* the header NumPy writes: the dict, spaces and a newline to a multiple of 64 */
  char hdr[NPY_MAX_HEADER];
  int n = snprintf(hdr + 10, 400, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  const int64_t *shape = zorch_tensor_shape(t);
  for (int d = 0; d < zorch_tensor_ndim(t); d++)
    n += snprintf(hdr + 10 + n, 40, "%lld%s", (long long)shape[d],
                  d + 1 < zorch_tensor_ndim(t) ? ", " : zorch_tensor_ndim(t) == 1 ? "," : "");
  n += snprintf(hdr + 10 + n, 8, "), }");
  size_t total = (10 + (size_t)n + 1 + 63) & ~(size_t)63;
  memset(hdr + 10 + n, ' ', total - 10 - (size_t)n);
  hdr[total - 1] = '\n';
  memcpy(hdr, "\x93NUMPY\x01\x00", 8);
  hdr[8] = (char)((total - 10) & 0xff), hdr[9] = (char)((total - 10) >> 8);
  zorch_tensor *h = zorch_to_device(t, (zorch_device){ZORCH_CPU, 0});
  zorch_tensor *c = h ? zorch_contiguous(h) : NULL;
  zorch_tensor_free(h);
  if (!c) return zorch_last_status();
  int fd = io_create_temp("save_npy", target, tmp);
  if (fd < 0) {
    zorch_tensor_free(c);
    return zorch_last_status();
  }
  st = io_write_all(fd, hdr, total, "save_npy", target);
  if (!st) st = io_write_all(fd, zorch_tensor_data(c), (size_t)zorch_tensor_numel(c) * zorch_dtype_size(zorch_tensor_dtype(c)),
                                "save_npy", target);
  zorch_tensor_free(c);
  if (!st && fsync(fd) != 0) st = err_set(ZORCH_ERR_IO, "save_npy: fsync %s: %s", target, strerror(errno));
  if (close(fd) != 0 && !st) st = err_set(ZORCH_ERR_IO, "save_npy: closing %s: %s", target, strerror(errno));
  if (!st && rename(tmp, target) != 0) st = err_set(ZORCH_ERR_IO, "save_npy: renaming onto %s: %s", target, strerror(errno));
  if (st) unlink(tmp);
  return st;
}
