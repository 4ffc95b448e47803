/* safetensors.c: reading and writing the safetensors format: an 8-byte little
   endian header length, a JSON header {"__metadata__": {string: string},
   "name": {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw bytes.
   Every field of a file is checked before any byte of it is trusted. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../backend/math.h"
#include "../core/tensor.h"
#include "target.h"

static const struct {
  const char *name;
  zorch_dtype dt;
} st_types[] = {{"F32", ZORCH_F32}, {"F64", ZORCH_F64}, {"BF16", ZORCH_BF16}, {"F16", ZORCH_F16},
                {"I32", ZORCH_I32}, {"I64", ZORCH_I64}, {"U8", ZORCH_U8},     {"BOOL", ZORCH_BOOL},
                {"I8", ZORCH_I8}};

/* The format's dtypes zorch has no dtype for, read into the nearest wider one
   (as load_idx widens): the 16-bit integers to int32, U32 and U64 to int64 (a
   U64 value past int64's range is an error), both float8 kinds to float32
   (each of their values is exact there). Never written. */
typedef enum { W_NONE, W_I16, W_U16, W_U32, W_U64, W_E4M3, W_E5M2 } st_widen;
static const struct {
  const char *name;
  st_widen w;
  int size;
  zorch_dtype dt;
} st_wide[] = {{"I16", W_I16, 2, ZORCH_I32},          {"U16", W_U16, 2, ZORCH_I32},
               {"U32", W_U32, 4, ZORCH_I64},     {"U64", W_U64, 8, ZORCH_I64},          {"F8_E4M3", W_E4M3, 1, ZORCH_F32},
               {"F8_E5M2", W_E5M2, 1, ZORCH_F32}};

static float e4m3_to_f32(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  float v = e == 15 && m == 7 ? NAN : e ? ldexpf(1.0f + (float)m / 8, e - 7) : ldexpf((float)m / 8, -6);
  return b & 0x80 ? -v : v;
}

/* n raw values of `size` bytes at src into dst (the widened dtype's
   elements); false when a U64 value does not fit int64. */
static bool st_widen_values(st_widen w, size_t size, const unsigned char *src, void *dst, uint64_t n) {
  int32_t *i32 = dst;
  int64_t *i64 = dst;
  float *f = dst;
  for (uint64_t i = 0; i < n; i++) {
    const unsigned char *b = src + i * size;
    switch (w) {
    case W_I16: i32[i] = (int16_t)(uint16_t)(b[0] | b[1] << 8); break;
    case W_U16: i32[i] = (int32_t)(b[0] | b[1] << 8); break;
    case W_U32: i64[i] = (int64_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24); break;
    case W_U64: {
      uint64_t v = 0;
      for (int k = 7; k >= 0; k--) v = v << 8 | b[k];
      if (v > INT64_MAX) return false;
      i64[i] = (int64_t)v;
      break;
    }
    case W_E4M3: f[i] = e4m3_to_f32(b[0]); break;
    case W_E5M2: f[i] = zm_f16_to_f32((uint16_t)(b[0] << 8)); break;
    case W_NONE: break;
    }
  }
  return true;
}

static const char *st_name(zorch_dtype dt) {
  for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
    if (st_types[i].dt == dt) return st_types[i].name;
  return NULL;
}

static int by_name(const void *a, const void *b) {
  return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

static zorch_status write_all(int fd, const void *p, size_t n, const char *path) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return err_set(ZORCH_ERR_IO, "save: writing %s: %s", path, strerror(errno));
    c += k;
    n -= (size_t)k;
  }
  return ZORCH_OK;
}

zorch_status zorch_save_safetensors(const char *path, int n, const char *const *names,
                                    zorch_tensor *const *ts) {
  return zorch_save_safetensors_meta(path, n, names, ts, 0, NULL, NULL);
}

zorch_status zorch_save_safetensors_meta(const char *path, int n, const char *const *names,
                                         zorch_tensor *const *ts, int nmeta, const char *const *meta_keys,
                                         const char *const *meta_values) {
  if (!path || n < 0 || (n && (!names || !ts)) || nmeta < 0 || (nmeta && (!meta_keys || !meta_values)))
    return err_set(ZORCH_ERR_ARG, "save: bad arguments");
  char target[PATH_MAX];
  zorch_status st = io_write_target("save", path, target);
  if (st) return st;
  path = target;
  /* sorted order, as PyTorch's writer does, so files are reproducible */
  const char ***order = malloc(sizeof *order * (size_t)(n ? n : 1));
  zorch_tensor **host = calloc((size_t)(n ? n : 1), sizeof *host);
  cJSON *root = cJSON_CreateObject();
  char *json = NULL, tmp[IO_TMP_MAX];
  int fd = -1;
  if (!order || !host || !root) {
    st = err_set(ZORCH_ERR_OOM, "save: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    if (!names[i] || !ts[i]) {
      st = err_set(ZORCH_ERR_ARG, "save: entry %d has no name or tensor", i);
      goto done;
    }
    order[i] = (const char **)&names[i];
  }
  qsort(order, (size_t)n, sizeof *order, by_name);
  /* the metadata first, as PyTorch's writer puts it */
  cJSON *meta = nmeta ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
  if (nmeta && !meta) {
    st = err_set(ZORCH_ERR_OOM, "save: out of memory");
    goto done;
  }
  for (int i = 0; i < nmeta; i++) {
    if (!meta_keys[i] || !meta_values[i]) {
      st = err_set(ZORCH_ERR_ARG, "save: metadata entry %d has no key or value", i);
      goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(meta, meta_keys[i])) {
      st = err_set(ZORCH_ERR_ARG, "save: metadata key '%s' appears twice", meta_keys[i]);
      goto done;
    }
    if (!cJSON_AddStringToObject(meta, meta_keys[i], meta_values[i])) {
      st = err_set(ZORCH_ERR_OOM, "save: out of memory");
      goto done;
    }
  }
  uint64_t off = 0;
  for (int k = 0; k < n; k++) {
    int i = (int)(order[k] - (const char **)names);
    if (k && strcmp(*order[k], *order[k - 1]) == 0) {
      st = err_set(ZORCH_ERR_ARG, "save: name '%s' appears twice", *order[k]);
      goto done;
    }
    if (strcmp(*order[k], "__metadata__") == 0) {
      st = err_set(ZORCH_ERR_ARG, "save: a tensor cannot be called __metadata__ (the format's metadata key)");
      goto done;
    }
    zorch_tensor *c = zorch_to_device(ts[i], (zorch_device){ZORCH_CPU, 0});
    host[i] = c ? zorch_contiguous(c) : NULL;
    zorch_tensor_free(c);
    if (!host[i]) {
      st = zorch_last_status();
      goto done;
    }
    uint64_t bytes = (uint64_t)zorch_tensor_numel(host[i]) * dtype_sizes[host[i]->dtype];
    cJSON *e = cJSON_AddObjectToObject(root, *order[k]);
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *offs = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    if (!offs || !cJSON_AddStringToObject(e, "dtype", st_name(host[i]->dtype))) {
      st = err_set(ZORCH_ERR_OOM, "save: out of memory");
      goto done;
    }
    for (int d = 0; d < host[i]->ndim; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)host[i]->shape[d]));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
  }
  json = cJSON_PrintUnformatted(root);
  if (!json) {
    st = err_set(ZORCH_ERR_OOM, "save: out of memory");
    goto done;
  }
  if ((fd = io_create_temp("save", path, tmp)) < 0) {
    st = zorch_last_status();
    goto done;
  }
  /* header padded with spaces to a multiple of 8, so the data is aligned */
  size_t hlen = strlen(json), padded = (hlen + 7) & ~(size_t)7;
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
  st = write_all(fd, len8, 8, path);
  if (!st) st = write_all(fd, json, hlen, path);
  for (size_t p = hlen; !st && p < padded; p++) st = write_all(fd, " ", 1, path);
  for (int k = 0; k < n && !st; k++) {
    zorch_tensor *h = host[order[k] - (const char **)names];
    st = write_all(fd, tensor_ptr(h), (size_t)zorch_tensor_numel(h) * dtype_sizes[h->dtype], path);
  }
  if (!st && fsync(fd) != 0) st = err_set(ZORCH_ERR_IO, "save: fsync %s: %s", path, strerror(errno));
  if (close(fd) != 0 && !st) st = err_set(ZORCH_ERR_IO, "save: closing %s: %s", path, strerror(errno));
  fd = -1;
  if (!st && rename(tmp, path) != 0)
    st = err_set(ZORCH_ERR_IO, "save: renaming onto %s: %s", path, strerror(errno));
  if (st) unlink(tmp);
done:
  if (fd >= 0) {
    close(fd);
    unlink(tmp);
  }
  for (int i = 0; host && i < n; i++) zorch_tensor_free(host[i]);
  free(host);
  free(order);
  cJSON_free(json);
  cJSON_Delete(root);
  return st;
}

void zorch_safetensors_free(int n, char **names, zorch_tensor **ts) {
  for (int i = 0; i < n; i++) {
    if (names) free(names[i]);
    if (ts) zorch_tensor_free(ts[i]);
  }
  free(names);
  free(ts);
}

void zorch_safetensors_meta_free(int n, char **keys, char **values) {
  zorch_safetensors_free(n, keys, NULL);
  zorch_safetensors_free(n, values, NULL);
}

/* The header's __metadata__ (absent: none) as *n key and value copies; it must
   map strings to strings, as the format says. */
static zorch_status st_meta(const char *path, const cJSON *root, int *n_out, char ***keys_out, char ***values_out) {
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  *n_out = 0;
  *keys_out = *values_out = NULL;
  if (!meta) return ZORCH_OK;
  if (!cJSON_IsObject(meta))
    return err_set(ZORCH_ERR_IO, "load: %s: __metadata__ is not an object of strings", path);
  int count = cJSON_GetArraySize(meta), n = 0;
  char **keys = calloc((size_t)(count ? count : 1), sizeof *keys);
  char **values = calloc((size_t)(count ? count : 1), sizeof *values);
  if (!keys || !values) {
    free(keys);
    free(values);
    return err_set(ZORCH_ERR_OOM, "load: out of memory");
  }
  for (const cJSON *c = meta->child; c; c = c->next) {
    if (cJSON_GetObjectItemCaseSensitive(meta, c->string) != c) {
      zorch_safetensors_meta_free(n, keys, values);
      return err_set(ZORCH_ERR_IO, "load: %s: __metadata__ entry '%s' appears twice", path, c->string);
    }
    if (!cJSON_IsString(c)) {
      zorch_safetensors_meta_free(n, keys, values);
      return err_set(ZORCH_ERR_IO, "load: %s: __metadata__ entry '%s' is not a string", path, c->string);
    }
    keys[n] = strdup(c->string);
    values[n++] = strdup(c->valuestring);
    if (!keys[n - 1] || !values[n - 1]) {
      zorch_safetensors_meta_free(n, keys, values);
      return err_set(ZORCH_ERR_OOM, "load: out of memory");
    }
  }
  *n_out = n;
  *keys_out = keys;
  *values_out = values;
  return ZORCH_OK;
}

/* A non-negative integer JSON number that a double holds exactly. */
static bool json_u64(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
      v->valuedouble != (double)(uint64_t)v->valuedouble)
    return false;
  *out = (uint64_t)v->valuedouble;
  return true;
}

/* True when s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
   code points above U+10FFFF). */
static bool st_utf8_valid(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t k;
    unsigned cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      k = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      k = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      k = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (n - i <= k) return false;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += k + 1;
  }
  return true;
}

/* Checks the raw header text: it is UTF-8, opens with '{', carries no NUL
   (raw or escaped as \u0000, which would cut a name or dtype short once
   decoded), and after the JSON object (ending at `end`) has only the spaces
   the format allows as padding. */
static zorch_status st_check_text(const char *path, const char *hdr, size_t hlen, const char *end) {
  const unsigned char *u = (const unsigned char *)hdr;
  if (hdr[0] != '{') return err_set(ZORCH_ERR_IO, "load: %s: the header does not begin with '{'", path);
  if (!st_utf8_valid(u, hlen)) return err_set(ZORCH_ERR_IO, "load: %s: the header is not valid UTF-8", path);
  for (size_t i = 0; i < hlen; i++) {
    if (hdr[i] == 0) return err_set(ZORCH_ERR_IO, "load: %s: the header holds a NUL byte at %zu", path, i);
    if (hdr[i] == '\\' && i + 1 < hlen) {
      if (hdr[i + 1] == 'u' && i + 5 < hlen && memcmp(hdr + i + 2, "0000", 4) == 0)
        return err_set(ZORCH_ERR_IO, "load: %s: the header holds an escaped NUL (\\u0000) at %zu", path, i);
      i++; /* the escaped character */
    }
  }
  /* the format pads with spaces; other JSON white space (a writer's final
     newline) is read as its reference reader reads it */
  for (const char *p = end; p < hdr + hlen; p++)
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t')
      return err_set(ZORCH_ERR_IO, "load: %s: byte %zu of the header, after its JSON object, is 0x%02x (only "
                     "white space may pad the header)", path, (size_t)(p - hdr), (unsigned char)*p);
  return ZORCH_OK;
}

/* One tensor entry of the header, checked. */
typedef struct {
  const char *name;
  zorch_dtype dt;
  st_widen widen; /* how the stored values become dt's (W_NONE: they are dt's) */
  size_t esize;   /* bytes of one stored value */
  int ndim;
  int64_t shape[ZORCH_MAX_DIMS];
  uint64_t begin, end; /* byte range in the data section */
} st_entry;

static int by_entry_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int by_entry_begin(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

#define BAD(...) (st = err_set(ZORCH_ERR_IO, __VA_ARGS__))

/* Checks entry `e` (a tensor) of the header into *out: dtype, shape and
   data_offsets present once each and nothing else; the dtype one of the
   format's names exactly; the shape non-negative integers; the byte range as
   long as the shape's elements, computed without overflow. */
static zorch_status st_check_entry(const char *path, const cJSON *e, st_entry *out) {
  zorch_status st = ZORCH_OK;
  const char *nm = e->string;
  if (!st_utf8_valid((const unsigned char *)nm, strlen(nm)))
    return BAD("load: %s: a tensor name is not valid UTF-8", path);
  if (!cJSON_IsObject(e)) return BAD("load: %s: tensor '%s' is not an object", path, nm);
  const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
  for (const cJSON *c = e->child; c; c = c->next) {
    const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dt
                         : strcmp(c->string, "shape") == 0        ? &shape
                         : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                  : NULL;
    if (!slot) return BAD("load: %s: tensor '%s' has an unknown field '%s'", path, nm, c->string);
    if (*slot) return BAD("load: %s: tensor '%s' has the field '%s' twice", path, nm, c->string);
    *slot = c;
  }
  if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
    return BAD("load: %s: tensor '%s' needs dtype (a string), shape (an array) and data_offsets "
               "([begin, end])", path, nm);
  out->name = nm;
  out->dt = ZORCH_NDTYPES;
  out->widen = W_NONE;
  for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
    if (strcmp(dt->valuestring, st_types[i].name) == 0) out->dt = st_types[i].dt, out->esize = dtype_sizes[out->dt];
  for (size_t i = 0; i < sizeof st_wide / sizeof st_wide[0]; i++)
    if (strcmp(dt->valuestring, st_wide[i].name) == 0)
      out->dt = st_wide[i].dt, out->widen = st_wide[i].w, out->esize = (size_t)st_wide[i].size;
  if (out->dt == ZORCH_NDTYPES)
    return BAD("load: %s: tensor '%s' has unsupported dtype '%s'", path, nm, dt->valuestring);
  int nd = cJSON_GetArraySize(shape);
  if (nd > ZORCH_MAX_DIMS)
    return BAD("load: %s: tensor '%s' has %d dims (at most %d)", path, nm, nd, ZORCH_MAX_DIMS);
  out->ndim = nd;
  uint64_t numel = 1, nbytes;
  bool overflow = false;
  int d = 0;
  for (const cJSON *v = shape->child; v; v = v->next, d++) {
    uint64_t x;
    if (!json_u64(v, &x))
      return BAD("load: %s: tensor '%s': shape entry %d is not a non-negative integer", path, nm, d);
    out->shape[d] = (int64_t)x;
    overflow |= __builtin_mul_overflow(numel, x, &numel);
  }
  if (overflow || __builtin_mul_overflow(numel, (uint64_t)out->esize, &nbytes))
    return BAD("load: %s: tensor '%s': its shape has too many elements", path, nm);
  if (!json_u64(offs->child, &out->begin) || !json_u64(offs->child->next, &out->end))
    return BAD("load: %s: tensor '%s': data_offsets are not non-negative integers", path, nm);
  if (out->begin > out->end || out->end - out->begin != nbytes)
    return BAD("load: %s: tensor '%s': data_offsets [%llu, %llu] do not hold its shape's %llu bytes", path, nm,
               (unsigned long long)out->begin, (unsigned long long)out->end, (unsigned long long)nbytes);
  return ZORCH_OK;
}

/* Checks that no two entries share a name and that the byte ranges tile the
   data section [0, data_len) exactly: no overlap, no gap, nothing after the
   last one. Sorts `es`. */
static zorch_status st_check_layout(const char *path, st_entry *es, int n, uint64_t data_len) {
  zorch_status st = ZORCH_OK;
  qsort(es, (size_t)n, sizeof *es, by_entry_name);
  for (int i = 1; i < n; i++)
    if (strcmp(es[i].name, es[i - 1].name) == 0)
      return BAD("load: %s: tensor '%s' appears twice in the header", path, es[i].name);
  qsort(es, (size_t)n, sizeof *es, by_entry_begin);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (es[i].begin < at)
      return BAD("load: %s: tensor '%s' (bytes %llu to %llu) overlaps tensor '%s' (which ends at %llu)", path,
                 es[i].name, (unsigned long long)es[i].begin, (unsigned long long)es[i].end, es[i - 1].name,
                 (unsigned long long)at);
    if (es[i].begin > at)
      return BAD("load: %s: tensor '%s' begins at byte %llu of the data, leaving bytes %llu to %llu unused", path,
                 es[i].name, (unsigned long long)es[i].begin, (unsigned long long)at,
                 (unsigned long long)es[i].begin);
    at = es[i].end;
  }
  if (at > data_len)
    return BAD("load: %s: tensor '%s' ends at byte %llu, past the %llu data bytes of the file (truncated?)",
               path, es[n - 1].name, (unsigned long long)at, (unsigned long long)data_len);
  if (at < data_len) {
    if (n) return BAD("load: %s: %llu bytes follow the data of the last tensor, '%s' (ending at %llu of %llu)",
                      path, (unsigned long long)(data_len - at), es[n - 1].name, (unsigned long long)at,
                      (unsigned long long)data_len);
    return BAD("load: %s: %llu data bytes follow a header with no tensors", path, (unsigned long long)data_len);
  }
  return ZORCH_OK;
}

/* Loads every tensor of the file, or only the one called `only` (so a large
   file can be read a tensor at a time); with meta, the metadata too. The
   whole header is checked either way. */
typedef struct {
  int n;
  char **keys, **values;
} st_metadata;

static zorch_status st_load(const char *path, const char *only, int *n_out, char ***names_out,
                            zorch_tensor ***ts_out, st_metadata *meta) {
  if (!path || !n_out || !names_out || !ts_out) return err_set(ZORCH_ERR_ARG, "load: bad arguments");
  *n_out = 0;
  *names_out = NULL;
  *ts_out = NULL;
  zorch_status st = ZORCH_OK;
  FILE *f = fopen(path, "rb");
  if (!f) return err_set(ZORCH_ERR_IO, "load: cannot open %s: %s", path, strerror(errno));
  char *hdr = NULL, **names = NULL;
  zorch_tensor **ts = NULL;
  st_entry *es = NULL;
  cJSON *root = NULL;
  int n = 0, ne = 0;
  struct stat sb;
  unsigned char len8[8];
  if (fstat(fileno(f), &sb) != 0 || fread(len8, 1, 8, f) != 8) {
    BAD("load: %s is not a safetensors file (shorter than its 8-byte header length)", path);
    goto done;
  }
  uint64_t hlen = 0;
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)len8[b] << (8 * b);
  uint64_t fsize = (uint64_t)sb.st_size;
  if (hlen < 2 || hlen > 100000000 || hlen > fsize - 8) {
    BAD("load: %s: header length %llu does not fit a file of %llu bytes", path,
        (unsigned long long)hlen, (unsigned long long)fsize);
    goto done;
  }
  hdr = malloc(hlen + 1);
  if (!hdr) {
    st = err_set(ZORCH_ERR_OOM, "load: out of memory for the %llu-byte header of %s", (unsigned long long)hlen,
                 path);
    goto done;
  }
  if (fread(hdr, 1, hlen, f) != hlen) {
    BAD("load: %s: truncated header", path);
    goto done;
  }
  hdr[hlen] = 0;
  const char *json_end = NULL;
  root = cJSON_ParseWithLengthOpts(hdr, hlen, &json_end, false);
  if (!cJSON_IsObject(root)) {
    BAD("load: %s: the header is not a JSON object", path);
    goto done;
  }
  if ((st = st_check_text(path, hdr, hlen, json_end))) goto done;
  if (meta && (st = st_meta(path, root, &meta->n, &meta->keys, &meta->values))) goto done;
  uint64_t data_len = fsize - 8 - hlen;
  int count = cJSON_GetArraySize(root), nmeta = 0;
  es = calloc((size_t)(count ? count : 1), sizeof *es);
  names = calloc((size_t)(count ? count : 1), sizeof *names);
  ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!es || !names || !ts) {
    st = err_set(ZORCH_ERR_OOM, "load: out of memory");
    goto done;
  }
  for (cJSON *e = root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (nmeta++) {
        BAD("load: %s: __metadata__ appears twice in the header", path);
        goto done;
      }
      continue;
    }
    if ((st = st_check_entry(path, e, &es[ne]))) goto done;
    ne++;
  }
  if ((st = st_check_layout(path, es, ne, data_len))) goto done;
  /* in file order, so reading moves forward */
  for (int i = 0; i < ne; i++) {
    const st_entry *x = &es[i];
    if (only && strcmp(x->name, only) != 0) continue;
    zorch_tensor *t = tensor_new(x->ndim, x->shape, x->dt, (zorch_device){ZORCH_CPU, 0});
    if (!t) {
      char why[256];
      snprintf(why, sizeof why, "%s", zorch_last_error());
      st = err_set(zorch_last_status(), "load: %s: tensor '%s': %s", path, x->name, why);
      goto done;
    }
    names[n] = strdup(x->name);
    ts[n++] = t;
    if (!names[n - 1]) {
      st = err_set(ZORCH_ERR_OOM, "load: out of memory");
      goto done;
    }
    uint64_t nb = x->end - x->begin;
    void *raw = x->widen == W_NONE ? tensor_ptr(t) : malloc(nb ? nb : 1);
    if (!raw) {
      st = err_set(ZORCH_ERR_OOM, "load: out of memory");
      goto done;
    }
    bool read_ok = !nb || (fseeko(f, (off_t)(8 + hlen + x->begin), SEEK_SET) == 0 && fread(raw, 1, nb, f) == nb);
    bool fits = !read_ok || x->widen == W_NONE ||
                st_widen_values(x->widen, x->esize, raw, tensor_ptr(t), (uint64_t)zorch_tensor_numel(t));
    if (raw != tensor_ptr(t)) free(raw);
    if (!read_ok) {
      BAD("load: %s: truncated data for tensor '%s'", path, x->name);
      goto done;
    }
    if (!fits) {
      BAD("load: %s: tensor '%s' (U64) holds a value past int64's range", path, x->name);
      goto done;
    }
  }
done:
  if (f) fclose(f);
  free(hdr);
  free(es);
  cJSON_Delete(root);
  if (st) {
    zorch_safetensors_free(n, names, ts);
    if (meta) {
      zorch_safetensors_meta_free(meta->n, meta->keys, meta->values);
      *meta = (st_metadata){0, NULL, NULL};
    }
    return st;
  }
  *n_out = n;
  *names_out = names;
  *ts_out = ts;
  return ZORCH_OK;
}

zorch_status zorch_load_safetensors(const char *path, int *n, char ***names, zorch_tensor ***ts) {
  return st_load(path, NULL, n, names, ts, NULL);
}

zorch_status zorch_load_safetensors_meta(const char *path, int *n, char ***names, zorch_tensor ***ts, int *nmeta,
                                         char ***meta_keys, char ***meta_values) {
  if (!nmeta || !meta_keys || !meta_values) return err_set(ZORCH_ERR_ARG, "load: bad arguments");
  st_metadata m = {0, NULL, NULL};
  zorch_status st = st_load(path, NULL, n, names, ts, &m);
  *nmeta = m.n;
  *meta_keys = m.keys;
  *meta_values = m.values;
  return st;
}

zorch_tensor *zorch_load_safetensors_one(const char *path, const char *name) {
  int n;
  char **names;
  zorch_tensor **ts;
  if (!name) return err_null(ZORCH_ERR_ARG, "load: name is NULL");
  if (st_load(path, name, &n, &names, &ts, NULL)) return NULL;
  zorch_tensor *t = n ? ts[0] : NULL;
  if (n) ts[0] = NULL;
  zorch_safetensors_free(n, names, ts);
  if (!t) return err_null(ZORCH_ERR_ARG, "load: %s has no tensor '%s'", path, name);
  return t;
}
