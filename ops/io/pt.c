/* pt.c: PyTorch's torch.save files, read as torch.load(weights_only=True)
   reads them: a zip archive of one pickle (<dir>/data.pkl) and its storages
   (<dir>/data/<key>, raw little-endian bytes), or the format before it (a
   run of pickles, then each storage's element count and bytes). The pickle
   runs on a machine of our own that knows the opcodes of plain data and a
   few globals (the tensor rebuilders, OrderedDict, the storage types); any
   other global, callable or opcode is refused before anything is built from
   it, so a file never runs code. Every length, index and offset is checked
   against the bytes that are there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/tensor.h"
#include "tree.h"

#define PT_DEPTH 64            /* tables nested in the result, as zorch.save's */
#define PT_MAX_ITEMS (1 << 22) /* values in the result (a pickle can share one container many times) */
#define PT_MAX_PICKLE (1ull << 30)
#define PT_MAX_CD (1ull << 28)
#define BAD(...) err_set(ZORCH_ERR_IO, __VA_ARGS__)

bool pt_is_torch_file(const unsigned char *h, size_t n) {
  if (n >= 4 && h[0] == 'P' && h[1] == 'K' && h[2] == 3 && h[3] == 4) return true;
  /* the old format opens with a pickled magic number: PROTO 2, LONG1 of 10 bytes */
  return n >= 4 && h[0] == 0x80 && h[1] == 2 && h[2] == 0x8a && h[3] == 10;
}

/* ---- the values of the pickle --------------------------------------------------------- */
typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_TUPLE, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR } vkind;
static const char *const vnames[] = {"None", "bool", "int", "float", "str", "list", "tuple", "dict", "global",
                                     "storage", "tensor"};

typedef struct pv pv;
struct pv {
  vkind kind;
  uint8_t counting; /* 1: being counted, 2: counted */
  uint64_t count;   /* the items it expands to, shared containers counted each time */
  union {
    bool b;
    int64_t i;
    double f;
    struct {
      const char *s;
      size_t n;
    } str;
    struct {
      pv **a;
      size_t n, cap;
    } seq; /* a list's or tuple's entries; a dict's keys and values, alternately */
    int g;
    int storage;
    zorch_tensor *t;
  };
};

/* The globals a file may name. */
enum { G_REBUILD_V2, G_REBUILD, G_PARAM, G_ODICT, G_STORAGE };
static const struct {
  const char *mod, *name;
  int id;
  zorch_dtype dt;
  int fsize; /* bytes an element in the file */
} globals[] = {
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2, 0, 0},
    {"torch._utils", "_rebuild_tensor", G_REBUILD, 0, 0},
    {"torch._utils", "_rebuild_parameter", G_PARAM, 0, 0},
    {"collections", "OrderedDict", G_ODICT, 0, 0},
    {"torch", "FloatStorage", G_STORAGE, ZORCH_F32, 4},
    {"torch", "DoubleStorage", G_STORAGE, ZORCH_F64, 8},
    {"torch", "HalfStorage", G_STORAGE, ZORCH_F16, 2},
    {"torch", "BFloat16Storage", G_STORAGE, ZORCH_BF16, 2},
    {"torch", "LongStorage", G_STORAGE, ZORCH_I64, 8},
    {"torch", "IntStorage", G_STORAGE, ZORCH_I32, 4},
    {"torch", "ShortStorage", G_STORAGE, ZORCH_I32, 2}, /* int16 widens to int32, as safetensors' I16 */
    {"torch", "CharStorage", G_STORAGE, ZORCH_I8, 1},
    {"torch", "ByteStorage", G_STORAGE, ZORCH_U8, 1},
    {"torch", "BoolStorage", G_STORAGE, ZORCH_BOOL, 1},
};
#define NGLOBALS (int)(sizeof globals / sizeof globals[0])

typedef struct {
  char *key;
  int g;              /* its storage type */
  int64_t numel;
  zorch_tensor *flat; /* (numel) of the dtype, holding the bytes once read */
  bool filled;
} pt_storage;

typedef struct {
  const char *name;
  size_t name_len;
  uint64_t size, offset; /* stored size; the local header's offset */
  unsigned method;
} zip_entry;

typedef struct {
  const char *path;
  FILE *f;
  uint64_t fsize;
  bool legacy;
  /* zip */
  unsigned char *cd;
  zip_entry *entries;
  size_t nentries;
  char *prefix; /* "<dir>/" */
  /* the pickle machine */
  const unsigned char *p, *start, *end;
  pv **stack;
  size_t sp, scap;
  size_t *marks;
  size_t nmarks, mcap;
  pv **memo;
  size_t memo_cap;
  pv **all;
  size_t nall, allcap;
  pt_storage *st;
  int nst, stcap;
  uint64_t storage_bytes; /* all storages', at most the file's size (no two share bytes) */
  size_t memo_len;        /* entries stored, MEMOIZE's next index */
} pt;

static zorch_status oom(void) { return err_set(ZORCH_ERR_OOM, "load: out of memory"); }

static bool grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return false;
  *p = q, *cap = c;
  return true;
}

static pv *new_value(pt *r, vkind kind) {
  if (!grow((void **)&r->all, &r->allcap, r->nall + 1, sizeof *r->all)) return NULL;
  pv *v = calloc(1, sizeof *v);
  if (v) v->kind = kind, r->all[r->nall++] = v;
  return v;
}

static bool seq_add(pv *s, pv *v) {
  if (!grow((void **)&s->seq.a, &s->seq.cap, s->seq.n + 1, sizeof *s->seq.a)) return false;
  s->seq.a[s->seq.n++] = v;
  return true;
}

/* ---- reading the file ----------------------------------------------------------------- */
static zorch_status read_at(pt *r, uint64_t off, void *buf, uint64_t n, const char *what) {
  if (off > r->fsize || n > r->fsize - off)
    return BAD("load: %s: %s (bytes %llu to %llu) lies past the end of the file (%llu bytes; truncated?)", r->path,
               what, (unsigned long long)off, (unsigned long long)(off + n), (unsigned long long)r->fsize);
  if (n && (fseeko(r->f, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, n, r->f) != n))
    return BAD("load: %s: cannot read %s: %s", r->path, what, strerror(errno));
  return ZORCH_OK;
}

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; k--) v = v << 8 | p[k];
  return v;
}

/* ---- the zip archive ------------------------------------------------------------------ */
/* The central directory's place and entry count, from the end record (and
   its zip64 form, which files over 4 GiB need). */
static zorch_status zip_directory(pt *r, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count) {
  unsigned char tail[65557];
  uint64_t n = r->fsize < sizeof tail ? r->fsize : sizeof tail;
  zorch_status st = read_at(r, r->fsize - n, tail, n, "the end of the zip archive");
  if (st) return st;
  int64_t at = -1;
  for (int64_t i = (int64_t)n - 22; i >= 0 && at < 0; i--)
    if (le(tail + i, 4) == 0x06054b50) at = i;
  if (at < 0) return BAD("load: %s: a zip archive without its end record (truncated?)", r->path);
  const unsigned char *e = tail + at;
  *count = le(e + 10, 2), *cd_size = le(e + 12, 4), *cd_off = le(e + 16, 4);
  if (*count == 0xFFFF || *cd_size == 0xFFFFFFFF || *cd_off == 0xFFFFFFFF) {
    uint64_t eocd = r->fsize - n + (uint64_t)at;
    unsigned char loc[20], z[56];
    if (eocd < 20) return BAD("load: %s: no zip64 locator before the end record", r->path);
    if ((st = read_at(r, eocd - 20, loc, 20, "the zip64 locator"))) return st;
    if (le(loc, 4) != 0x07064b50) return BAD("load: %s: the zip64 end record's locator is missing", r->path);
    if ((st = read_at(r, le(loc + 8, 8), z, 56, "the zip64 end record"))) return st;
    if (le(z, 4) != 0x06064b50) return BAD("load: %s: a bad zip64 end record", r->path);
    *count = le(z + 32, 8), *cd_size = le(z + 40, 8), *cd_off = le(z + 48, 8);
  }
  if (*cd_size > PT_MAX_CD || *count > *cd_size / 46)
    return BAD("load: %s: the zip directory claims %llu entries in %llu bytes", r->path, (unsigned long long)*count,
               (unsigned long long)*cd_size);
  return ZORCH_OK;
}

static zorch_status zip_open(pt *r) {
  uint64_t cd_off, cd_size, count;
  zorch_status st = zip_directory(r, &cd_off, &cd_size, &count);
  if (st) return st;
  r->cd = malloc(cd_size ? cd_size : 1);
  r->entries = calloc(count ? count : 1, sizeof *r->entries);
  if (!r->cd || !r->entries) return oom();
  if ((st = read_at(r, cd_off, r->cd, cd_size, "the zip directory"))) return st;
  const unsigned char *p = r->cd, *end = r->cd + cd_size;
  for (uint64_t i = 0; i < count; i++) {
    if (end - p < 46 || le(p, 4) != 0x02014b50)
      return BAD("load: %s: zip directory entry %llu is damaged", r->path, (unsigned long long)i);
    zip_entry *z = &r->entries[r->nentries++];
    size_t nl = le(p + 28, 2), xl = le(p + 30, 2), cl = le(p + 32, 2);
    if ((size_t)(end - p) < 46 + nl + xl + cl)
      return BAD("load: %s: zip directory entry %llu runs past the directory", r->path, (unsigned long long)i);
    uint64_t csize = le(p + 20, 4);
    z->method = (unsigned)le(p + 10, 2), z->size = le(p + 24, 4), z->offset = le(p + 42, 4);
    z->name = (const char *)p + 46, z->name_len = nl;
    /* zip64: the fields that are all ones follow in the extra field, in this order */
    for (const unsigned char *x = p + 46 + nl, *xe = x + xl; xe - x >= 4;) {
      size_t id = le(x, 2), len = le(x + 2, 2);
      if ((size_t)(xe - x) < 4 + len) break;
      if (id == 1) {
        const unsigned char *q = x + 4, *qe = q + len;
        uint64_t *fields[] = {&z->size, &csize, &z->offset};
        for (int k = 0; k < 3; k++) {
          bool wide = k == 0 ? z->size == 0xFFFFFFFF : k == 1 ? csize == 0xFFFFFFFF : z->offset == 0xFFFFFFFF;
          if (!wide) continue;
          if (qe - q < 8) return BAD("load: %s: a short zip64 field in entry %llu", r->path, (unsigned long long)i);
          *fields[k] = le(q, 8), q += 8;
        }
      }
      x += 4 + len;
    }
    if (z->method == 0 && csize != z->size)
      return BAD("load: %s: zip entry %llu is stored with two sizes", r->path, (unsigned long long)i);
    p += 46 + nl + xl + cl;
  }
  /* the archive's folder: the one holding data.pkl */
  for (size_t i = 0; i < r->nentries && !r->prefix; i++) {
    const zip_entry *z = &r->entries[i];
    if (z->name_len < 9 || memcmp(z->name + z->name_len - 9, "/data.pkl", 9) != 0) continue;
    if (memchr(z->name, '/', z->name_len - 9)) continue;
    r->prefix = strndup(z->name, z->name_len - 8);
    if (!r->prefix) return oom();
  }
  if (!r->prefix) return BAD("load: %s: a zip archive without <folder>/data.pkl (not a torch.save file)", r->path);
  return ZORCH_OK;
}

static const zip_entry *zip_find(pt *r, const char *name) {
  size_t pl = strlen(r->prefix), nl = strlen(name);
  for (size_t i = 0; i < r->nentries; i++) {
    const zip_entry *z = &r->entries[i];
    if (z->name_len == pl + nl && memcmp(z->name, r->prefix, pl) == 0 && memcmp(z->name + pl, name, nl) == 0)
      return z;
  }
  return NULL;
}

/* Where an entry's bytes begin, past its local header. */
static zorch_status zip_data(pt *r, const zip_entry *z, const char *name, uint64_t *off) {
  unsigned char h[30];
  zorch_status st = read_at(r, z->offset, h, 30, "a zip entry's header");
  if (st) return st;
  if (le(h, 4) != 0x04034b50) return BAD("load: %s: the zip entry %s has a damaged header", r->path, name);
  if (z->method != 0)
    return BAD("load: %s: the zip entry %s is compressed (method %u); torch.save stores its entries", r->path, name,
               z->method);
  *off = z->offset + 30 + le(h + 26, 2) + le(h + 28, 2);
  if (*off > r->fsize || z->size > r->fsize - *off)
    return BAD("load: %s: the zip entry %s (%llu bytes) runs past the end of the file (truncated?)", r->path, name,
               (unsigned long long)z->size);
  return ZORCH_OK;
}

/* ---- storages ------------------------------------------------------------------------- */
/* Reads n elements of the file's storage type at off into s->flat. */
static zorch_status fill_storage(pt *r, pt_storage *s, uint64_t off) {
  int fs = globals[s->g].fsize;
  uint64_t nb = (uint64_t)s->numel * (uint64_t)fs;
  zorch_dtype dt = globals[s->g].dt;
  bool widen = (size_t)fs != dtype_sizes[dt];
  void *raw = widen ? malloc(nb ? nb : 1) : tensor_ptr(s->flat);
  if (!raw) return oom();
  zorch_status st = read_at(r, off, raw, nb, "a storage's bytes");
  if (!st && widen) { /* int16 to int32 */
    int32_t *d = (int32_t *)tensor_ptr(s->flat);
    for (int64_t i = 0; i < s->numel; i++) d[i] = (int16_t)(uint16_t)le((unsigned char *)raw + 2 * i, 2);
  }
  if (widen) free(raw);
  s->filled = !st;
  return st;
}

/* persistent_load(('storage', type, key, location, numel[, view])): the
   storage of that key, made (and, in a zip, read) the first time. */
static zorch_status load_storage(pt *r, const pv *pid, pv **out) {
  const char *why = NULL;
  if (pid->kind != V_TUPLE || pid->seq.n < 5 || pid->seq.n > 6) why = "is not a 5-tuple";
  else if (pid->seq.a[0]->kind != V_STR || pid->seq.a[0]->str.n != 7 || memcmp(pid->seq.a[0]->str.s, "storage", 7))
    why = "is not ('storage', ...)";
  else if (pid->seq.a[1]->kind != V_GLOBAL || globals[pid->seq.a[1]->g].id != G_STORAGE)
    why = "does not name a storage type";
  else if (pid->seq.a[2]->kind != V_STR || pid->seq.a[2]->str.n == 0 || pid->seq.a[2]->str.n > 64 ||
           memchr(pid->seq.a[2]->str.s, 0, pid->seq.a[2]->str.n))
    why = "has no key";
  else if (pid->seq.a[4]->kind != V_INT || pid->seq.a[4]->i < 0 || pid->seq.a[4]->i > (INT64_C(1) << 60))
    why = "has no element count";
  else if (pid->seq.n == 6 && pid->seq.a[5]->kind != V_NONE)
    why = "is a view of another storage (which zorch.load does not read)";
  if (why) return BAD("load: %s: a persistent id %s", r->path, why);
  const pv *k = pid->seq.a[2];
  int g = pid->seq.a[1]->g;
  int64_t numel = pid->seq.a[4]->i;
  int i = 0;
  while (i < r->nst && !(strlen(r->st[i].key) == k->str.n && memcmp(r->st[i].key, k->str.s, k->str.n) == 0)) i++;
  if (i < r->nst) {
    if (r->st[i].g != g || r->st[i].numel != numel)
      return BAD("load: %s: storage %s is named with two types or sizes", r->path, r->st[i].key);
  } else {
    size_t cap = (size_t)r->stcap;
    if (!grow((void **)&r->st, &cap, (size_t)r->nst + 1, sizeof *r->st)) return oom();
    r->stcap = (int)cap;
    pt_storage *s = &r->st[r->nst];
    *s = (pt_storage){.key = strndup(k->str.s, k->str.n), .g = g, .numel = numel};
    if (!s->key) return oom();
    r->nst++;
    uint64_t off = 0, nb = (uint64_t)numel * (uint64_t)globals[g].fsize;
    if (nb > r->fsize - r->storage_bytes)
      return BAD("load: %s: storage %s (%lld elements) and those before it hold more bytes than the file", r->path,
                 s->key, (long long)numel);
    r->storage_bytes += nb;
    const zip_entry *z = NULL;
    char name[80];
    snprintf(name, sizeof name, "data/%s", s->key);
    if (!r->legacy) {
      if (!(z = zip_find(r, name))) return BAD("load: %s: the archive lacks the storage %s%s", r->path, r->prefix, name);
      zorch_status st = zip_data(r, z, name, &off);
      if (st) return st;
      if (z->size != nb)
        return BAD("load: %s: storage %s holds %llu bytes, not the %llu of %lld %s elements", r->path, s->key,
                   (unsigned long long)z->size, (unsigned long long)nb, (long long)numel, globals[g].name);
    }
    s->flat = tensor_new(1, &numel, globals[g].dt, (zorch_device){ZORCH_CPU, 0});
    if (!s->flat) return zorch_last_status();
    if (z) {
      zorch_status st = fill_storage(r, s, off);
      if (st) return st;
    }
  }
  pv *v = new_value(r, V_STORAGE);
  if (!v) return oom();
  v->storage = i;
  *out = v;
  return ZORCH_OK;
}

/* ---- tensors -------------------------------------------------------------------------- */
static bool ints_of(const pv *t, int64_t *out, int *n) {
  if (t->kind != V_TUPLE || t->seq.n > ZORCH_MAX_DIMS) return false;
  for (size_t i = 0; i < t->seq.n; i++) {
    if (t->seq.a[i]->kind != V_INT) return false;
    out[i] = t->seq.a[i]->i;
  }
  *n = (int)t->seq.n;
  return true;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
   and _rebuild_tensor(storage, offset, size, stride): a view of the storage,
   checked to lie inside it. */
static zorch_status rebuild(pt *r, int id, const pv *args, pv **out) {
  const pv *const *a = (const pv *const *)args->seq.a;
  size_t n = args->seq.n;
  int64_t shape[ZORCH_MAX_DIMS], strides[ZORCH_MAX_DIMS];
  int nd = 0, ns = 0;
  bool ok = id == G_REBUILD ? n == 4 : n == 6 || n == 7;
  ok = ok && a[0]->kind == V_STORAGE && a[1]->kind == V_INT && ints_of(a[2], shape, &nd) && ints_of(a[3], strides, &ns) &&
       nd == ns;
  if (ok && id == G_REBUILD_V2) ok = a[4]->kind == V_BOOL && a[5]->kind == V_DICT;
  if (!ok)
    return BAD("load: %s: %s called with arguments that are not (storage, offset, size, stride%s) of at most %d dims",
               r->path, globals[id].name, id == G_REBUILD ? "" : ", requires_grad, hooks", ZORCH_MAX_DIMS);
  if (id == G_REBUILD_V2 && a[5]->seq.n)
    return BAD("load: %s: a tensor with backward hooks (which zorch.load does not restore)", r->path);
  pt_storage *s = &r->st[a[0]->storage];
  int64_t offset = a[1]->i, last = offset, numel = 1;
  bool bad = offset < 0;
  for (int d = 0; d < nd && !bad; d++) {
    bad = shape[d] < 0 || strides[d] < 0;
    if (bad) break;
    numel = shape[d] == 0 || numel == 0 ? 0 : numel;
    int64_t reach;
    if (shape[d] > 0 && (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) ||
                         __builtin_add_overflow(last, reach, &last)))
      bad = true;
  }
  char buf[ERR_SHAPE_BUF];
  if (bad || (numel && last >= s->numel) || offset > s->numel)
    return BAD("load: %s: a tensor of size %s, stride %s and offset %lld reaches past its storage %s (%lld elements)",
               r->path, err_shape_str(nd, shape, buf, sizeof buf), err_shape_str(ns, strides, buf, sizeof buf),
               (long long)offset, s->key, (long long)s->numel);
  zorch_tensor *t = tensor_alias(s->flat, nd, shape, strides, numel ? offset : 0);
  if (!t) return zorch_last_status();
  pv *v = new_value(r, V_TENSOR);
  if (!v) {
    zorch_tensor_free(t);
    return oom();
  }
  v->t = t;
  if (id == G_REBUILD_V2 && a[4]->b && zorch_dtype_is_float(t->dtype)) zorch_set_requires_grad(t, true);
  *out = v;
  return ZORCH_OK;
}

/* ---- the pickle machine --------------------------------------------------------------- */
static zorch_status push(pt *r, pv *v) {
  if (!v) return oom();
  if (!grow((void **)&r->stack, &r->scap, r->sp + 1, sizeof *r->stack)) return oom();
  r->stack[r->sp++] = v;
  return ZORCH_OK;
}

static size_t at(const pt *r) { return (size_t)(r->p - r->start) - 1; }

/* The opcode's argument of n bytes, or NULL past the end. */
static const unsigned char *take(pt *r, uint64_t n) {
  if (n > (uint64_t)(r->end - r->p)) return NULL;
  const unsigned char *q = r->p;
  r->p += n;
  return q;
}

static const char *opname(unsigned c) {
  switch (c) {
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 0x82: case 0x83: case 0x84: return "EXT";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'I': case 'L': case 'F': case 'S': case 'V': return "a protocol 0 literal";
    case 'g': case 'p': return "a protocol 0 memo opcode";
    case 'l': case 'd': return "a protocol 0 container";
    default: return "an unknown opcode";
  }
}

static zorch_status global(pt *r, const char *mod, size_t ml, const char *name, size_t nl) {
  for (int g = 0; g < NGLOBALS; g++)
    if (strlen(globals[g].mod) == ml && strlen(globals[g].name) == nl && memcmp(globals[g].mod, mod, ml) == 0 &&
        memcmp(globals[g].name, name, nl) == 0) {
      pv *v = new_value(r, V_GLOBAL);
      if (v) v->g = g;
      return push(r, v);
    }
  return BAD("load: %s: the pickle names the global %.*s.%.*s, which zorch.load refuses: it loads tensors, storages "
             "and plain containers only, as torch.load(weights_only=True) does; nothing was run",
             r->path, (int)(ml > 100 ? 100 : ml), mod, (int)(nl > 100 ? 100 : nl), name);
}

static zorch_status reduce(pt *r) {
  pv *args = r->stack[--r->sp], *fn = r->stack[r->sp - 1];
  if (fn->kind != V_GLOBAL)
    return BAD("load: %s: REDUCE at byte %zu calls a %s, which zorch.load refuses", r->path, at(r), vnames[fn->kind]);
  if (args->kind != V_TUPLE) return BAD("load: %s: REDUCE at byte %zu without an argument tuple", r->path, at(r));
  int id = globals[fn->g].id;
  pv *out = NULL;
  zorch_status st = ZORCH_OK;
  if (id == G_ODICT) {
    if (args->seq.n) return BAD("load: %s: OrderedDict called with arguments (zorch.load takes OrderedDict())", r->path);
    out = new_value(r, V_DICT);
    st = out ? ZORCH_OK : oom();
  } else if (id == G_PARAM) {
    if (args->seq.n != 3 || args->seq.a[0]->kind != V_TENSOR || args->seq.a[1]->kind != V_BOOL)
      return BAD("load: %s: _rebuild_parameter called with arguments that are not (tensor, requires_grad, hooks)",
                 r->path);
    out = args->seq.a[0];
    if (args->seq.a[1]->b && zorch_dtype_is_float(out->t->dtype)) zorch_set_requires_grad(out->t, true);
  } else if (id == G_REBUILD_V2 || id == G_REBUILD) {
    st = rebuild(r, id, args, &out);
  } else {
    return BAD("load: %s: REDUCE at byte %zu calls torch.%s, which zorch.load refuses", r->path, at(r),
               globals[fn->g].name);
  }
  if (!st) r->stack[r->sp - 1] = out;
  return st;
}

/* Runs one pickle from r->p to its STOP; *out is its value. */
static zorch_status unpickle(pt *r, pv **out) {
  r->sp = 0;
  r->nmarks = 0;
  for (size_t i = 0; i < r->memo_cap; i++) r->memo[i] = NULL;
  r->memo_len = 0;
  for (;;) {
    if (r->p >= r->end) return BAD("load: %s: the pickle ends without STOP (truncated?)", r->path);
    unsigned op = *r->p++;
    const unsigned char *q = NULL;
    zorch_status st = ZORCH_OK;
    /* how many stack values the opcode pops, checked once here */
    size_t need = 0;
    switch (op) {
      case 't': case 'e': case 'u': case '1': break; /* above the mark */
      case 'a': case 'R': case 'b': need = 2; break;
      case 's': need = 3; break;
      case 0x86: case 0x93: need = 2; break;
      case 0x87: need = 3; break;
      case 0x85: case 'Q': case '0': case '2': case 'q': case 'r': case 0x94: need = 1; break;
    }
    size_t base = r->nmarks ? r->marks[r->nmarks - 1] : 0;
    if (r->sp < base + need)
      return BAD("load: %s: opcode 0x%02x at byte %zu finds too few values on the stack", r->path, op, at(r));
    switch (op) {
      case 0x80: /* PROTO */
        if (!(q = take(r, 1))) goto truncated;
        if (*q < 2 || *q > 5) return BAD("load: %s: pickle protocol %u (zorch.load reads 2 to 5)", r->path, *q);
        break;
      case 0x95: /* FRAME */
        if (!take(r, 8)) goto truncated;
        break;
      case '.': /* STOP */
        if (r->sp != 1 || r->nmarks) return BAD("load: %s: the pickle stops with %zu values on its stack", r->path, r->sp);
        *out = r->stack[0];
        return ZORCH_OK;
      case '(': /* MARK */
        if (!grow((void **)&r->marks, &r->mcap, r->nmarks + 1, sizeof *r->marks)) return oom();
        r->marks[r->nmarks++] = r->sp;
        break;
      case '}': st = push(r, new_value(r, V_DICT)); break;
      case ']': st = push(r, new_value(r, V_LIST)); break;
      case ')': st = push(r, new_value(r, V_TUPLE)); break;
      case 'N': st = push(r, new_value(r, V_NONE)); break;
      case 0x88: case 0x89: {
        pv *v = new_value(r, V_BOOL);
        if (v) v->b = op == 0x88;
        st = push(r, v);
        break;
      }
      case 'J': case 'K': case 'M': case 0x8a: case 0x8b: { /* BININT, BININT1, BININT2, LONG1, LONG4 */
        uint64_t n = op == 'J' ? 4 : op == 'K' ? 1 : op == 'M' ? 2 : 0;
        if (op == 0x8a || op == 0x8b) {
          if (!(q = take(r, op == 0x8a ? 1 : 4))) goto truncated;
          n = le(q, op == 0x8a ? 1 : 4);
          if (n > 8) return BAD("load: %s: an integer of %llu bytes at byte %zu (zorch.load reads up to 64 bits)",
                                r->path, (unsigned long long)n, at(r));
        }
        if (!(q = take(r, n))) goto truncated;
        pv *v = new_value(r, V_INT);
        if (v) {
          uint64_t u = le(q, (int)n);
          bool sign = (op == 'J' || op == 0x8a || op == 0x8b) && n && (q[n - 1] & 0x80);
          if (sign && n < 8) u |= ~UINT64_C(0) << (8 * n);
          v->i = (int64_t)u;
        }
        st = push(r, v);
        break;
      }
      case 'G': { /* BINFLOAT, big-endian */
        if (!(q = take(r, 8))) goto truncated;
        uint64_t u = 0;
        for (int k = 0; k < 8; k++) u = u << 8 | q[k];
        pv *v = new_value(r, V_FLOAT);
        if (v) memcpy(&v->f, &u, 8);
        st = push(r, v);
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'U': case 'T': case 'C': case 'B': case 0x8e: { /* strings and bytes */
        int w = op == 0x8c || op == 'U' || op == 'C' ? 1 : op == 0x8d || op == 0x8e ? 8 : 4;
        if (!(q = take(r, (uint64_t)w))) goto truncated;
        uint64_t n = le(q, w);
        if (!(q = take(r, n)))
          return BAD("load: %s: a string of %llu bytes at byte %zu runs past the pickle's end", r->path,
                     (unsigned long long)n, at(r));
        pv *v = new_value(r, V_STR);
        if (v) v->str.s = (const char *)q, v->str.n = (size_t)n;
        st = push(r, v);
        break;
      }
      case 'q': case 'r': case 0x94: { /* BINPUT, LONG_BINPUT, MEMOIZE */
        uint64_t i = r->memo_len;
        if (op != 0x94) {
          if (!(q = take(r, op == 'q' ? 1 : 4))) goto truncated;
          i = le(q, op == 'q' ? 1 : 4);
        }
        /* a pickler numbers its entries from 0, so none is past the values made */
        if (i > r->nall) return BAD("load: %s: memo index %llu at byte %zu is out of range", r->path, (unsigned long long)i, at(r));
        size_t cap = r->memo_cap;
        if (!grow((void **)&r->memo, &r->memo_cap, (size_t)i + 1, sizeof *r->memo)) return oom();
        for (size_t k = cap; k < r->memo_cap; k++) r->memo[k] = NULL;
        r->memo_len += !r->memo[i];
        r->memo[i] = r->stack[r->sp - 1];
        break;
      }
      case 'h': case 'j': { /* BINGET, LONG_BINGET */
        if (!(q = take(r, op == 'h' ? 1 : 4))) goto truncated;
        uint64_t i = le(q, op == 'h' ? 1 : 4);
        if (i >= r->memo_cap || !r->memo[i])
          return BAD("load: %s: memo index %llu at byte %zu was never stored", r->path, (unsigned long long)i, at(r));
        st = push(r, r->memo[i]);
        break;
      }
      case '0': r->sp--; break; /* POP */
      case '2': st = push(r, r->stack[r->sp - 1]); break; /* DUP */
      case '1': /* POP_MARK */
        if (!r->nmarks) return BAD("load: %s: POP_MARK at byte %zu without a MARK", r->path, at(r));
        r->sp = base, r->nmarks--;
        break;
      case 't': case 0x85: case 0x86: case 0x87: { /* TUPLE, TUPLE1-3 */
        size_t from = op == 't' ? base : r->sp - (op - 0x84);
        if (op == 't') {
          if (!r->nmarks) return BAD("load: %s: TUPLE at byte %zu without a MARK", r->path, at(r));
          r->nmarks--;
        }
        pv *v = new_value(r, V_TUPLE);
        if (!v) return oom();
        for (size_t k = from; k < r->sp; k++)
          if (!seq_add(v, r->stack[k])) return oom();
        r->sp = from;
        st = push(r, v);
        break;
      }
      case 'a': case 'e': case 's': case 'u': { /* APPEND, APPENDS, SETITEM, SETITEMS */
        bool many = op == 'e' || op == 'u', dict = op == 's' || op == 'u';
        size_t from = many ? base : r->sp - (dict ? 2 : 1);
        if (many && (!r->nmarks || base == 0 || (dict && (r->sp - base) % 2)))
          return BAD("load: %s: %s at byte %zu without a MARK above a %s", r->path, dict ? "SETITEMS" : "APPENDS",
                     at(r), dict ? "dict and pairs" : "list");
        pv *into = r->stack[from - 1];
        if (into->kind != (dict ? V_DICT : V_LIST))
          return BAD("load: %s: %s at byte %zu on a %s (zorch.load %s)", r->path, dict ? "SETITEM" : "APPEND", at(r),
                     vnames[into->kind], dict ? "sets items of dicts only" : "appends to lists only");
        for (size_t k = from; k < r->sp; k++)
          if (!seq_add(into, r->stack[k])) return oom();
        r->sp = from;
        if (many) r->nmarks--;
        break;
      }
      case 'c': { /* GLOBAL "module\nname\n" */
        const unsigned char *m = r->p, *nl1 = memchr(m, '\n', (size_t)(r->end - m));
        const unsigned char *nm = nl1 ? nl1 + 1 : NULL, *nl2 = nm ? memchr(nm, '\n', (size_t)(r->end - nm)) : NULL;
        if (!nl2) goto truncated;
        r->p = nl2 + 1;
        st = global(r, (const char *)m, (size_t)(nl1 - m), (const char *)nm, (size_t)(nl2 - nm));
        break;
      }
      case 0x93: { /* STACK_GLOBAL */
        pv *m = r->stack[r->sp - 2], *nm = r->stack[r->sp - 1];
        if (m->kind != V_STR || nm->kind != V_STR)
          return BAD("load: %s: STACK_GLOBAL at byte %zu without two strings", r->path, at(r));
        r->sp -= 2;
        st = global(r, m->str.s, m->str.n, nm->str.s, nm->str.n);
        break;
      }
      case 'R': st = reduce(r); break;
      case 'b': { /* BUILD: an OrderedDict's attributes (a state dict's _metadata), dropped */
        pv *inst = r->stack[r->sp - 2];
        if (inst->kind != V_DICT)
          return BAD("load: %s: BUILD at byte %zu on a %s, which zorch.load refuses", r->path, at(r), vnames[inst->kind]);
        r->sp--;
        break;
      }
      case 'Q': { /* BINPERSID */
        pv *v = NULL;
        if ((st = load_storage(r, r->stack[r->sp - 1], &v))) return st;
        r->stack[r->sp - 1] = v;
        break;
      }
      default:
        return BAD("load: %s: pickle opcode 0x%02x (%s) at byte %zu, which zorch.load refuses", r->path, op,
                   opname(op), at(r));
    }
    if (st) return st;
    continue;
  truncated:
    return BAD("load: %s: the pickle ends inside the opcode at byte %zu (truncated?)", r->path, at(r));
  }
}

/* ---- the result as a tree ------------------------------------------------------------- */
/* How many items v expands to (saturating), refusing cycles and deep
   nesting before anything is emitted. */
static zorch_status count_items(pt *r, pv *v, int depth) {
  if (depth > PT_DEPTH) return BAD("load: %s: containers nested more than %d deep", r->path, PT_DEPTH);
  if (v->counting == 1) return BAD("load: %s: a container that holds itself (a cycle)", r->path);
  if (v->counting == 2) return ZORCH_OK;
  v->count = 1;
  if (v->kind == V_LIST || v->kind == V_TUPLE || v->kind == V_DICT) {
    v->counting = 1;
    v->count = 2; /* its open and END items */
    for (size_t k = 0; k < v->seq.n; k++) {
      zorch_status st = count_items(r, v->seq.a[k], depth + 1);
      if (st) return st;
      v->count += v->seq.a[k]->count + (v->kind != V_DICT); /* a list's index key, at most */
      if (v->count > PT_MAX_ITEMS) v->count = PT_MAX_ITEMS + 1;
    }
  }
  v->counting = 2;
  return ZORCH_OK;
}

/* ---- emitting ------------------------------------------------------------- */
static bool is_key(const pv *k) { return k->kind == V_STR || k->kind == V_INT || k->kind == V_BOOL || (k->kind == V_FLOAT && k->f == k->f); }

static zorch_status emit(pt *r, zorch_tree *tr, const pv *v, zorch_tree_item it);

static zorch_status emit_scalar(pt *r, zorch_tree *tr, const pv *v, zorch_tree_item it) {
  switch (v->kind) {
    case V_BOOL: it.kind = ZORCH_TREE_BOOL, it.b = v->b; break;
    case V_INT: it.kind = ZORCH_TREE_INT, it.i = v->i; break;
    case V_FLOAT: it.kind = ZORCH_TREE_FLOAT, it.f = v->f; break;
    case V_STR: it.kind = ZORCH_TREE_STRING, it.s = v->str.s, it.len = v->str.n; break;
    default: return BAD("load: %s: a %s as a value (zorch.load returns tensors, numbers, strings and tables)", r->path, vnames[v->kind]);
  }
  return tree_push(tr, it);
}

static zorch_status emit(pt *r, zorch_tree *tr, const pv *v, zorch_tree_item it) {
  if (v->kind == V_TENSOR) {
    it.kind = ZORCH_TREE_TENSOR, it.t = v->t;
    return tree_push(tr, it);
  }
  if (v->kind != V_LIST && v->kind != V_TUPLE && v->kind != V_DICT) return emit_scalar(r, tr, v, it);
  bool dict = v->kind == V_DICT, strings = true, holes = false;
  for (size_t k = 0; k < v->seq.n; k++) {
    const pv *e = v->seq.a[k];
    if (dict && k % 2 == 0) {
      if (!is_key(e))
        return BAD("load: %s: a dict key that is a %s (zorch.load takes strings, numbers and booleans)", r->path,
                   vnames[e->kind]);
      strings &= e->kind == V_STR;
    }
    holes |= e->kind == V_NONE;
  }
  /* None is Lua's nil: a dict entry of None is left out, a list with one
     becomes a table of the other entries under their indices */
  it.kind = dict ? (strings ? ZORCH_TREE_MAP : ZORCH_TREE_PAIRS) : holes ? ZORCH_TREE_PAIRS : ZORCH_TREE_LIST;
  zorch_status st = tree_push(tr, it);
  size_t step = dict ? 2 : 1;
  for (size_t k = 0; !st && k < v->seq.n; k += step) {
    const pv *val = v->seq.a[k + step - 1];
    if (val->kind == V_NONE) continue;
    zorch_tree_item sub = {0};
    if (it.kind == ZORCH_TREE_MAP) {
      sub.key = v->seq.a[k]->str.s, sub.key_len = v->seq.a[k]->str.n;
    } else if (it.kind == ZORCH_TREE_PAIRS) {
      pv index = {.kind = V_INT, .i = (int64_t)k + 1};
      st = emit_scalar(r, tr, dict ? v->seq.a[k] : &index, (zorch_tree_item){0});
    }
    if (!st) st = emit(r, tr, val, sub);
  }
  return st ? st : tree_push(tr, (zorch_tree_item){.kind = ZORCH_TREE_END});
}

/* ---- the two formats ------------------------------------------------------------------ */
static zorch_status read_pickle(pt *r, unsigned char *buf, uint64_t off, uint64_t n) {
  zorch_status st = read_at(r, off, buf, n, "the pickle");
  r->start = r->p = buf, r->end = buf + n;
  return st;
}

static zorch_status load_zip(pt *r, unsigned char **buf, pv **root) {
  zorch_status st = zip_open(r);
  if (st) return st;
  const zip_entry *bo = zip_find(r, "byteorder");
  if (bo) {
    uint64_t off;
    char text[8] = {0};
    if ((st = zip_data(r, bo, "byteorder", &off))) return st;
    if (bo->size > 7 || (st = read_at(r, off, text, bo->size, "byteorder"))) return st ? st : BAD("load: %s: a bad byteorder record", r->path);
    if (strcmp(text, "little") != 0) return BAD("load: %s: a %s-endian file (zorch.load reads little-endian ones)", r->path, text);
  }
  const zip_entry *pk = zip_find(r, "data.pkl");
  uint64_t off;
  if ((st = zip_data(r, pk, "data.pkl", &off))) return st;
  if (pk->size > PT_MAX_PICKLE) return BAD("load: %s: a pickle of %llu bytes", r->path, (unsigned long long)pk->size);
  if (!(*buf = malloc(pk->size ? pk->size : 1))) return oom();
  if ((st = read_pickle(r, *buf, off, pk->size))) return st;
  return unpickle(r, root);
}

/* The old format: the magic number, the protocol version, the system's
   sizes, the object, the storage keys in the order their bytes follow, then
   each storage as its element count (int64) and bytes. */
static zorch_status load_legacy(pt *r, unsigned char **buf, pv **root) {
  static const unsigned char magic[15] = {0x80, 2, 0x8a, 10, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};
  r->legacy = true;
  uint64_t n = r->fsize < PT_MAX_PICKLE ? r->fsize : PT_MAX_PICKLE;
  if (!(*buf = malloc(n ? n : 1))) return oom();
  zorch_status st = read_pickle(r, *buf, 0, n);
  if (st) return st;
  if (n < sizeof magic || memcmp(*buf, magic, sizeof magic) != 0)
    return BAD("load: %s: a pickle without torch.save's magic number (not a torch.save file)", r->path);
  r->p += sizeof magic;
  pv *version, *info, *keys;
  if ((st = unpickle(r, &version))) return st;
  if (version->kind != V_INT || version->i != 1001)
    return BAD("load: %s: torch.save's old format with protocol version %s (zorch.load reads 1001)", r->path,
               version->kind == V_INT ? "other than 1001" : "missing");
  if ((st = unpickle(r, &info)) || (st = unpickle(r, root)) || (st = unpickle(r, &keys))) return st;
  if (keys->kind != V_LIST) return BAD("load: %s: the storage keys are not a list", r->path);
  uint64_t off = (uint64_t)(r->p - r->start);
  for (size_t k = 0; k < keys->seq.n; k++) {
    const pv *key = keys->seq.a[k];
    int i = 0;
    while (i < r->nst && !(key->kind == V_STR && strlen(r->st[i].key) == key->str.n &&
                           memcmp(r->st[i].key, key->str.s, key->str.n) == 0))
      i++;
    if (i == r->nst || r->st[i].filled) return BAD("load: %s: storage key %zu names no storage, or one twice", r->path, k);
    unsigned char count[8];
    if ((st = read_at(r, off, count, 8, "a storage's element count"))) return st;
    if (le(count, 8) != (uint64_t)r->st[i].numel)
      return BAD("load: %s: storage %s has %llu elements in the file, %lld in the pickle", r->path, r->st[i].key,
                 (unsigned long long)le(count, 8), (long long)r->st[i].numel);
    if ((st = fill_storage(r, &r->st[i], off + 8))) return st;
    off += 8 + (uint64_t)r->st[i].numel * (uint64_t)globals[r->st[i].g].fsize;
  }
  return ZORCH_OK;
}

static void pt_free(pt *r) {
  for (size_t i = 0; i < r->nall; i++) {
    pv *v = r->all[i];
    if (v->kind == V_TENSOR) zorch_tensor_free(v->t);
    if (v->kind == V_LIST || v->kind == V_TUPLE || v->kind == V_DICT) free(v->seq.a);
    free(v);
  }
  for (int i = 0; i < r->nst; i++) {
    free(r->st[i].key);
    zorch_tensor_free(r->st[i].flat);
  }
  free(r->st);
  free(r->all);
  free(r->stack);
  free(r->marks);
  free(r->memo);
  free(r->cd);
  free(r->entries);
  free(r->prefix);
  if (r->f) fclose(r->f);
}

zorch_status pt_load(const char *path, zorch_tree **out) {
  pt r = {.path = path};
  unsigned char *buf = NULL, head[4] = {0};
  zorch_tree *tr = NULL;
  pv *root = NULL;
  struct stat sb;
  zorch_status st = ZORCH_OK;
  if (!(r.f = fopen(path, "rb")) || fstat(fileno(r.f), &sb) != 0)
    st = BAD("load: cannot open %s: %s", path, strerror(errno));
  if (!st) {
    r.fsize = (uint64_t)sb.st_size;
    st = read_at(&r, 0, head, 4, "the file's first bytes");
  }
  if (!st) st = head[0] == 'P' ? load_zip(&r, &buf, &root) : load_legacy(&r, &buf, &root);
  for (int i = 0; !st && i < r.nst; i++)
    if (!r.st[i].filled) st = BAD("load: %s: storage %s has no bytes in the file", path, r.st[i].key);
  if (!st && !(tr = tree_new())) st = zorch_last_status();
  if (!st && (st = count_items(&r, root, 0)) == ZORCH_OK && root->count > PT_MAX_ITEMS)
    st = BAD("load: %s: the value expands to more than %d items (a container shared many times?)", path, PT_MAX_ITEMS);
  if (!st && root->kind != V_NONE) st = emit(&r, tr, root, (zorch_tree_item){0});
  free(buf);
  pt_free(&r);
  if (st) {
    zorch_tree_free(tr);
    return st;
  }
  *out = tr;
  return ZORCH_OK;
}
