/* safetensors.c: reading and writing the safetensors format: an 8-byte little
   endian header length, a JSON header {"__metadata__": {string: string},
   "name": {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw bytes.
   Every field of a file is checked before any byte of it is trusted. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/tensor.h"

static const struct {
  const char *name;
  zorch_dtype dt;
} st_types[] = {{"F32", ZORCH_F32}, {"F64", ZORCH_F64}, {"BF16", ZORCH_BF16}, {"F16", ZORCH_F16},
                {"I32", ZORCH_I32}, {"I64", ZORCH_I64}, {"U8", ZORCH_U8},     {"BOOL", ZORCH_BOOL}};

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
  zorch_status st = ZORCH_OK;
  /* sorted order, as PyTorch's writer does, so files are reproducible */
  const char ***order = malloc(sizeof *order * (size_t)(n ? n : 1));
  zorch_tensor **host = calloc((size_t)(n ? n : 1), sizeof *host);
  cJSON *root = cJSON_CreateObject();
  char *json = NULL, *tmp = NULL;
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
  size_t plen = strlen(path);
  tmp = malloc(plen + 48);
  if (!json || !tmp) {
    st = err_set(ZORCH_ERR_OOM, "save: out of memory");
    goto done;
  }
  /* a unique name beside the target; created with 0666 so the umask applies */
  static _Atomic unsigned counter;
  for (int tries = 0; tries < 100 && fd < 0; tries++) {
    snprintf(tmp, plen + 48, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    st = err_set(ZORCH_ERR_IO, "save: cannot create a temporary file beside %s: %s", path, strerror(errno));
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
  free(tmp);
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

#define BAD(...) (st = err_set(ZORCH_ERR_IO, __VA_ARGS__))

/* Loads every tensor of the file, or only the one called `only` (so a large
   file can be read a tensor at a time); with meta, the metadata too. */
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
  cJSON *root = NULL;
  int n = 0;
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
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
    BAD("load: %s: truncated header", path);
    goto done;
  }
  hdr[hlen] = 0;
  root = cJSON_ParseWithLength(hdr, hlen);
  if (!cJSON_IsObject(root)) {
    BAD("load: %s: the header is not a JSON object", path);
    goto done;
  }
  if (meta && (st = st_meta(path, root, &meta->n, &meta->keys, &meta->values))) goto done;
  uint64_t data_len = fsize - 8 - hlen;
  int count = cJSON_GetArraySize(root);
  names = calloc((size_t)(count ? count : 1), sizeof *names);
  ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!names || !ts) {
    st = err_set(ZORCH_ERR_OOM, "load: out of memory");
    goto done;
  }
  for (cJSON *e = root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) continue;
    if (only && strcmp(e->string, only) != 0) continue;
    const char *nm = e->string;
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2) {
      BAD("load: %s: tensor '%s' needs dtype, shape and data_offsets", path, nm);
      goto done;
    }
    zorch_dtype zdt = ZORCH_NDTYPES;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
      if (strcmp(dt->valuestring, st_types[i].name) == 0) zdt = st_types[i].dt;
    if (zdt == ZORCH_NDTYPES) {
      BAD("load: %s: tensor '%s' has unsupported dtype %s", path, nm, dt->valuestring);
      goto done;
    }
    int nd = cJSON_GetArraySize(shape);
    if (nd > ZORCH_MAX_DIMS) {
      BAD("load: %s: tensor '%s' has %d dims (at most %d)", path, nm, nd, ZORCH_MAX_DIMS);
      goto done;
    }
    int64_t sh[ZORCH_MAX_DIMS];
    uint64_t numel = 1, b0, b1;
    int d = 0;
    for (cJSON *v = shape->child; v; v = v->next, d++) {
      uint64_t x;
      if (!json_u64(v, &x) || (x && numel > UINT64_MAX / 16 / x)) {
        BAD("load: %s: tensor '%s' has an invalid shape", path, nm);
        goto done;
      }
      sh[d] = (int64_t)x;
      numel *= x;
    }
    if (!json_u64(offs->child, &b0) || !json_u64(offs->child->next, &b1) || b0 > b1 ||
        b1 > data_len || b1 - b0 != numel * dtype_sizes[zdt]) {
      BAD("load: %s: tensor '%s' has data_offsets that do not match its shape and the file "
          "(%llu data bytes)", path, nm, (unsigned long long)data_len);
      goto done;
    }
    zorch_tensor *t = tensor_new(nd, sh, zdt, (zorch_device){ZORCH_CPU, 0});
    if (!t) {
      st = zorch_last_status();
      goto done;
    }
    names[n] = strdup(nm);
    ts[n++] = t;
    if (!names[n - 1]) {
      st = err_set(ZORCH_ERR_OOM, "load: out of memory");
      goto done;
    }
    if (b1 > b0 && (fseeko(f, (off_t)(8 + hlen + b0), SEEK_SET) != 0 ||
                    fread(tensor_ptr(t), 1, b1 - b0, f) != b1 - b0)) {
      BAD("load: %s: truncated data for tensor '%s'", path, nm);
      goto done;
    }
  }
done:
  if (f) fclose(f);
  free(hdr);
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
