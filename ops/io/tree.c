/* tree.c: the format of zorch.save: a tree of tensors, numbers, strings,
   booleans and tables in one safetensors file. A table of tensors alone is
   written as it is (its keys are the tensor names, as PyTorch's writer makes
   them); any other tree as its tensors, named by their paths
   ("opt.state.1.exp_avg"), and a JSON tree of everything else in the header's
   __metadata__ under "zorch.values" (docs/api.md describes it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "tree.h"

#define TREE_KEY "zorch.values"
#define TREE_VERSION 1
#define TREE_DEPTH 64

/* ---- shared ---------------------------------------------------------------------- */
static bool is_open(zorch_tree_kind k) { return k == ZORCH_TREE_LIST || k == ZORCH_TREE_MAP || k == ZORCH_TREE_PAIRS; }
static bool is_scalar(zorch_tree_kind k) { return k <= ZORCH_TREE_STRING; }

/* The shortest "%.Ng" text that reads back as exactly x (inf, -inf, nan spelled so). */
static void float_text(double x, char *buf, size_t n) {
  if (x != x) {
    snprintf(buf, n, "nan");
    return;
  }
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) break;
  }
}

/* True when s[0..n) is UTF-8 text without NUL bytes: what a JSON string in a
   safetensors header (read as UTF-8 by every reader) can carry. */
static bool text_ok(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (c == 0 || len == 0 || i + len > n || (len == 2 && c < 0xC2)) return false;
    unsigned cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += len;
  }
  return true;
}

/* ---- writing ----------------------------------------------------------------------- */
typedef struct {
  const zorch_tree_item *items;
  size_t n;
  size_t *next;        /* next[i]: the index after item i's subtree */
  int ntensors, cap;
  char **names;        /* the tensors' names, in the order met */
  zorch_tensor **ts;
} tree_writer;

static size_t str_len(const char *s, size_t len) { return len ? len : strlen(s); }

/* A key's text in a path: strings as they are, numbers and booleans written out. */
static char *key_text(const zorch_tree_item *k) {
  char buf[64];
  switch (k->kind) {
    case ZORCH_TREE_STRING: return strndup(k->s, str_len(k->s, k->len));
    case ZORCH_TREE_BOOL: return strdup(k->b ? "true" : "false");
    case ZORCH_TREE_INT: snprintf(buf, sizeof buf, "%lld", (long long)k->i); return strdup(buf);
    default: float_text(k->f, buf, sizeof buf); return strdup(buf);
  }
}

static char *join(const char *path, const char *key) {
  size_t a = strlen(path), b = strlen(key);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  if (a) memcpy(p, path, a), p[a++] = '.';
  memcpy(p + a, key, b + 1);
  return p;
}

static zorch_status oom(void) { return err_set(ZORCH_ERR_OOM, "save: out of memory"); }

static zorch_status attach(cJSON *parent, const char *key, cJSON *item) {
  bool ok = item && (key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item));
  if (!ok) {
    cJSON_Delete(item);
    return oom();
  }
  return ZORCH_OK;
}

static zorch_status check_text(const char *s, size_t len, const char *what, const char *path) {
  if (text_ok((const unsigned char *)s, len)) return ZORCH_OK;
  return err_set(ZORCH_ERR_ARG, "save: %s %s is not UTF-8 text without NUL bytes (the values are stored as JSON)",
                 what, *path ? path : "of the table");
}

/* A scalar as a node: integers that a double holds exactly are JSON numbers,
   others {"int": "digits"}; floats {"float": "text"}. */
static cJSON *scalar_node(const zorch_tree_item *it) {
  char buf[64];
  switch (it->kind) {
    case ZORCH_TREE_BOOL: return cJSON_CreateBool(it->b);
    case ZORCH_TREE_STRING: {
      char *s = strndup(it->s, str_len(it->s, it->len));
      cJSON *j = s ? cJSON_CreateString(s) : NULL;
      free(s);
      return j;
    }
    case ZORCH_TREE_INT:
      if (it->i >= -(1LL << 53) && it->i <= (1LL << 53)) return cJSON_CreateNumber((double)it->i);
      snprintf(buf, sizeof buf, "%lld", (long long)it->i);
      break;
    default: float_text(it->f, buf, sizeof buf);
  }
  cJSON *o = cJSON_CreateObject();
  if (o && !cJSON_AddStringToObject(o, it->kind == ZORCH_TREE_INT ? "int" : "float", buf)) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* Records tensor t under its path (a name taken already gets #2, #3, ...). */
static zorch_status add_tensor(tree_writer *w, const char *path, zorch_tensor *t, char **name_out) {
  const char *base = *path ? path : "tensor";
  size_t n = strlen(base) + 16;
  char *name = malloc(n);
  if (!name) return oom();
  snprintf(name, n, "%s", base);
  for (int k = 2;; k++) {
    bool taken = false;
    for (int i = 0; i < w->ntensors && !taken; i++) taken = strcmp(w->names[i], name) == 0;
    if (!taken) break;
    snprintf(name, n, "%s#%d", base, k);
  }
  if (w->ntensors == w->cap) {
    int cap = w->cap ? 2 * w->cap : 16;
    char **nn = realloc(w->names, sizeof *nn * (size_t)cap);
    if (nn) w->names = nn;
    zorch_tensor **nt = nn ? realloc(w->ts, sizeof *nt * (size_t)cap) : NULL;
    if (!nt) {
      free(name);
      return oom();
    }
    w->ts = nt, w->cap = cap;
  }
  w->names[w->ntensors] = name;
  w->ts[w->ntensors++] = t;
  *name_out = name;
  return ZORCH_OK;
}

/* The order children are written in, so one tree always gives one file:
   map keys sorted; pair keys by kind (booleans, numbers, strings) and text. */
typedef struct {
  size_t at; /* the child's first item (a pair's key) */
  int rank;
  char *text;
} tree_child;

static int by_child(const void *a, const void *b) {
  const tree_child *x = a, *y = b;
  return x->rank != y->rank ? x->rank - y->rank : strcmp(x->text, y->text);
}

static zorch_status write_value(tree_writer *w, size_t i, const char *path, cJSON *parent, const char *key);

static zorch_status write_children(tree_writer *w, size_t i, const char *path, cJSON *parent) {
  const zorch_tree_item *open = &w->items[i];
  size_t count = 0;
  for (size_t c = i + 1; w->items[c].kind != ZORCH_TREE_END; c = w->next[c], count++)
    if (open->kind == ZORCH_TREE_PAIRS) c = w->next[c]; /* past the key to its value */
  tree_child *kids = calloc(count ? count : 1, sizeof *kids);
  if (!kids) return oom();
  zorch_status st = ZORCH_OK;
  size_t k = 0;
  for (size_t c = i + 1; w->items[c].kind != ZORCH_TREE_END; c = w->next[c], k++) {
    const zorch_tree_item *it = &w->items[c];
    kids[k].at = c;
    if (open->kind == ZORCH_TREE_LIST) {
      char buf[32];
      snprintf(buf, sizeof buf, "%zu", k + 1);
      kids[k].text = strdup(buf);
    } else if (open->kind == ZORCH_TREE_MAP) {
      size_t kl = str_len(it->key, it->key_len);
      if ((st = check_text(it->key, kl, "a key in", path))) break;
      kids[k].text = strndup(it->key, kl);
    } else {
      if (it->kind == ZORCH_TREE_STRING && (st = check_text(it->s, str_len(it->s, it->len), "a key in", path))) break;
      kids[k].rank = it->kind == ZORCH_TREE_BOOL ? 0 : it->kind == ZORCH_TREE_STRING ? 2 : 1;
      kids[k].text = key_text(it);
      c = w->next[c]; /* the value */
    }
    if (!kids[k].text) {
      st = oom();
      break;
    }
  }
  if (!st && open->kind != ZORCH_TREE_LIST) {
    qsort(kids, count, sizeof *kids, by_child);
    for (k = 1; k < count && !st; k++)
      if (kids[k].rank == kids[k - 1].rank && strcmp(kids[k].text, kids[k - 1].text) == 0)
        st = err_set(ZORCH_ERR_ARG, "save: the key '%s' appears twice in %s", kids[k].text, *path ? path : "the table");
  }
  for (k = 0; k < count && !st; k++) {
    char *sub = join(path, kids[k].text);
    if (!sub) {
      st = oom();
      break;
    }
    if (open->kind == ZORCH_TREE_PAIRS) {
      cJSON *pair = cJSON_CreateArray();
      if (!(st = attach(parent, NULL, pair)) && !(st = attach(pair, NULL, scalar_node(&w->items[kids[k].at]))))
        st = write_value(w, w->next[kids[k].at], sub, pair, NULL);
    } else {
      st = write_value(w, kids[k].at, sub, parent, open->kind == ZORCH_TREE_MAP ? kids[k].text : NULL);
    }
    free(sub);
  }
  for (k = 0; k < count; k++) free(kids[k].text);
  free(kids);
  return st;
}

/* Writes item i (and its subtree) under parent, at key or appended. */
static zorch_status write_value(tree_writer *w, size_t i, const char *path, cJSON *parent, const char *key) {
  const zorch_tree_item *it = &w->items[i];
  zorch_status st;
  if (it->kind == ZORCH_TREE_TENSOR) {
    char *name = NULL;
    if ((st = add_tensor(w, path, it->t, &name))) return st;
    cJSON *o = cJSON_CreateObject();
    if ((st = attach(parent, key, o))) return st;
    return attach(o, "tensor", cJSON_CreateString(name));
  }
  if (is_scalar(it->kind)) {
    if (it->kind == ZORCH_TREE_STRING && (st = check_text(it->s, str_len(it->s, it->len), "the string at", path)))
      return st;
    return attach(parent, key, scalar_node(it));
  }
  cJSON *o = it->kind == ZORCH_TREE_LIST ? cJSON_CreateArray() : cJSON_CreateObject();
  if ((st = attach(parent, key, o))) return st;
  if (it->kind == ZORCH_TREE_LIST) return write_children(w, i, path, o);
  cJSON *inner = it->kind == ZORCH_TREE_MAP ? cJSON_CreateObject() : cJSON_CreateArray();
  if ((st = attach(o, it->kind == ZORCH_TREE_MAP ? "map" : "pairs", inner))) return st;
  return write_children(w, i, path, inner);
}

/* Checks the item list's shape and fills next[]: one table, every open
   item closed, map entries keyed, pairs keyed by scalars, not too deep. */
static zorch_status check_items(size_t n, const zorch_tree_item *items, size_t *next) {
  size_t stack[TREE_DEPTH + 1], count[TREE_DEPTH + 1];
  int depth = -1;
  if (!n || !is_open(items[0].kind))
    return err_set(ZORCH_ERR_ARG, "save: the tree must be one table (a LIST, MAP or PAIRS item first)");
  for (size_t i = 0; i < n; i++) {
    const zorch_tree_item *it = &items[i];
    if ((unsigned)it->kind > ZORCH_TREE_END) return err_set(ZORCH_ERR_ARG, "save: item %zu has an unknown kind", i);
    if (depth < 0 && i > 0) return err_set(ZORCH_ERR_ARG, "save: item %zu follows the end of the tree", i);
    if (it->kind != ZORCH_TREE_END && depth + 1 > TREE_DEPTH)
      return err_set(ZORCH_ERR_ARG, "save: item %zu is nested more than %d tables deep", i, TREE_DEPTH);
    if (it->kind == ZORCH_TREE_END) {
      if (depth < 0) return err_set(ZORCH_ERR_ARG, "save: item %zu closes nothing", i);
      if (items[stack[depth]].kind == ZORCH_TREE_PAIRS && count[depth] % 2)
        return err_set(ZORCH_ERR_ARG, "save: item %zu closes a PAIRS table after a key without its value", i);
      next[stack[depth--]] = i + 1;
      next[i] = i + 1;
      continue;
    }
    if (depth >= 0) {
      zorch_tree_kind pk = items[stack[depth]].kind;
      if (pk == ZORCH_TREE_MAP && !it->key) return err_set(ZORCH_ERR_ARG, "save: item %zu, in a MAP, has no key", i);
      if (pk == ZORCH_TREE_PAIRS && count[depth] % 2 == 0) {
        if (!is_scalar(it->kind) || (it->kind == ZORCH_TREE_FLOAT && isnan(it->f)))
          return err_set(ZORCH_ERR_ARG, "save: item %zu, a key in a PAIRS table, is not a string, number or boolean", i);
      }
      count[depth]++;
    }
    if ((it->kind == ZORCH_TREE_STRING && !it->s) || (it->kind == ZORCH_TREE_TENSOR && !it->t))
      return err_set(ZORCH_ERR_ARG, "save: item %zu has no string or tensor", i);
    if (is_open(it->kind)) {
      stack[++depth] = i;
      count[depth] = 0;
    } else {
      next[i] = i + 1;
    }
  }
  if (depth >= 0) return err_set(ZORCH_ERR_ARG, "save: the tree ends before its tables are closed");
  return ZORCH_OK;
}

zorch_status zorch_tree_save(const char *path, size_t n, const zorch_tree_item *items) {
  if (!path || (n && !items)) return err_set(ZORCH_ERR_ARG, "save: bad arguments");
  size_t *next = malloc(sizeof *next * (n ? n : 1));
  if (!next) return oom();
  zorch_status st = check_items(n, items, next);
  tree_writer w = {items, n, next, 0, 0, NULL, NULL};
  cJSON *root = NULL;
  char *text = NULL;
  /* a map of tensors alone: the tensors as they are */
  bool flat = !st && items[0].kind == ZORCH_TREE_MAP;
  for (size_t i = 1; flat && i + 1 < n; i++) flat = items[i].kind == ZORCH_TREE_TENSOR;
  if (st) goto done;
  if (flat) {
    const char **names = malloc(sizeof *names * n);
    zorch_tensor **ts = malloc(sizeof *ts * n);
    int k = 0;
    st = names && ts ? ZORCH_OK : oom();
    for (size_t i = 1; !st && i + 1 < n; i++, k++) {
      names[k] = items[i].key;
      ts[k] = items[i].t;
      st = check_text(items[i].key, str_len(items[i].key, items[i].key_len), "a key in", "");
    }
    if (!st) st = zorch_save_safetensors(path, k, names, ts);
    free(names);
    free(ts);
    goto done;
  }
  root = cJSON_CreateObject();
  if (!root || (st = attach(root, "version", cJSON_CreateNumber(TREE_VERSION)))) {
    st = oom();
    goto done;
  }
  if ((st = write_value(&w, 0, "", root, "value"))) goto done;
  if (!(text = cJSON_PrintUnformatted(root))) {
    st = oom();
    goto done;
  }
  const char *key = TREE_KEY, *value = text;
  st = zorch_save_safetensors_meta(path, w.ntensors, (const char *const *)w.names, w.ts, 1, &key, &value);
done:
  for (int i = 0; i < w.ntensors; i++) free(w.names[i]);
  free(w.names);
  free(w.ts);
  free(next);
  cJSON_free(text);
  cJSON_Delete(root);
  return st;
}

/* ---- reading ----------------------------------------------------------------------- */
/* The tree as loaded: the public part first, then what its strings point into. */
typedef struct {
  zorch_tree pub;
  size_t cap;
  cJSON *json;
  int nfile;
  char **file_names; /* the file's tensors */
  zorch_tensor **file_ts;
  bool *referenced;
  char **strs; /* strings tree_push copied (another reader's tree) */
  size_t nstrs, strs_cap;
} tree_owned;

typedef struct {
  tree_owned *o;
  const char *path;
} tree_reader;

#define MALFORMED "load: %s: malformed __metadata__ \"" TREE_KEY "\": "

static zorch_status bad(tree_reader *r, const char *what) {
  return err_set(ZORCH_ERR_IO, MALFORMED "%s", r->path, what);
}

static zorch_status tree_append(zorch_tree *tree, zorch_tree_item it);
static zorch_status push(tree_reader *r, zorch_tree_item it) {
  tree_owned *o = r->o;
  return tree_append(&o->pub, it);
}

zorch_tree *tree_new(void) {
  tree_owned *o = calloc(1, sizeof *o);
  return o ? &o->pub : err_null(ZORCH_ERR_OOM, "load: out of memory");
}

/* A copy of s[0..n) that the tree frees. */
static const char *keep(tree_owned *o, const char *s, size_t n) {
  if (o->nstrs == o->strs_cap) {
    size_t cap = o->strs_cap ? 2 * o->strs_cap : 64;
    char **p = realloc(o->strs, sizeof *p * cap);
    if (!p) return NULL;
    o->strs = p, o->strs_cap = cap;
  }
  char *c = malloc(n + 1);
  if (!c) return NULL;
  memcpy(c, s, n);
  c[n] = 0;
  return o->strs[o->nstrs++] = c;
}

zorch_status tree_push(zorch_tree *tree, zorch_tree_item it) {
  tree_owned *o = (tree_owned *)tree;
  if ((it.key && !(it.key = keep(o, it.key, it.key_len))) ||
      (it.kind == ZORCH_TREE_STRING && !(it.s = keep(o, it.s, it.len))))
    return err_set(ZORCH_ERR_OOM, "load: out of memory");
  return tree_append(tree, it);
}

static zorch_status tree_append(zorch_tree *tree, zorch_tree_item it) {
  tree_owned *o = (tree_owned *)tree;
  if (o->pub.n == o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 64;
    zorch_tree_item *items = realloc(o->pub.items, sizeof *items * cap);
    if (!items) return err_set(ZORCH_ERR_OOM, "load: out of memory");
    o->pub.items = items, o->cap = cap;
  }
  if (it.kind == ZORCH_TREE_TENSOR) zorch_tensor_retain(it.t);
  o->pub.items[o->pub.n++] = it;
  return ZORCH_OK;
}

/* The one child of a tagged node {"kind": ...}, or NULL when j is not one. */
static const cJSON *tag(const cJSON *j, const char *kind) {
  return cJSON_IsObject(j) && j->child && !j->child->next && strcmp(j->child->string, kind) == 0 ? j->child : NULL;
}

static zorch_status read_node(tree_reader *r, const cJSON *j, const char *key, int depth) {
  zorch_tree_item it = {.key = key, .key_len = key ? strlen(key) : 0};
  zorch_status st;
  const cJSON *c;
  if (depth > TREE_DEPTH) return bad(r, "nested too deep");
  if (cJSON_IsString(j)) {
    it.kind = ZORCH_TREE_STRING, it.s = j->valuestring, it.len = strlen(j->valuestring);
  } else if (cJSON_IsBool(j)) {
    it.kind = ZORCH_TREE_BOOL, it.b = cJSON_IsTrue(j);
  } else if (cJSON_IsNumber(j)) {
    double v = j->valuedouble;
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != (double)(long long)v)
      return bad(r, "a number that is not an integer (floats are {\"float\": text})");
    it.kind = ZORCH_TREE_INT, it.i = (int64_t)v;
  } else if ((c = tag(j, "int")) || (c = tag(j, "float"))) {
    if (!cJSON_IsString(c) || !*c->valuestring) return bad(r, "an int or float node without its text");
    char *end;
    errno = 0;
    if (c->string[0] == 'i') {
      long long v = strtoll(c->valuestring, &end, 10);
      if (*end || errno) return bad(r, "an int node that is not a 64-bit integer");
      it.kind = ZORCH_TREE_INT, it.i = v;
    } else {
      it.f = strtod(c->valuestring, &end);
      if (*end) return bad(r, "a float node that is not a number");
      it.kind = ZORCH_TREE_FLOAT;
    }
  } else if ((c = tag(j, "tensor"))) {
    if (!cJSON_IsString(c)) return bad(r, "a tensor node without a name");
    int k = 0;
    while (k < r->o->nfile && strcmp(r->o->file_names[k], c->valuestring) != 0) k++;
    if (k == r->o->nfile)
      return err_set(ZORCH_ERR_IO, "load: %s: __metadata__ \"" TREE_KEY "\" refers to tensor '%s', which the file does not hold",
                     r->path, c->valuestring);
    r->o->referenced[k] = true;
    it.kind = ZORCH_TREE_TENSOR, it.t = r->o->file_ts[k];
  } else if (cJSON_IsArray(j) || (c = tag(j, "map")) || (c = tag(j, "pairs"))) {
    it.kind = cJSON_IsArray(j) ? ZORCH_TREE_LIST : c->string[0] == 'm' ? ZORCH_TREE_MAP : ZORCH_TREE_PAIRS;
    if (it.kind == ZORCH_TREE_MAP && !cJSON_IsObject(c)) return bad(r, "a map node that is not an object");
    if (it.kind == ZORCH_TREE_PAIRS && !cJSON_IsArray(c)) return bad(r, "a pairs node that is not an array");
    if ((st = push(r, it))) return st;
    for (const cJSON *e = it.kind == ZORCH_TREE_LIST ? j->child : c->child; e; e = e->next) {
      if (it.kind == ZORCH_TREE_PAIRS) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) return bad(r, "a pair that is not [key, value]");
        size_t at = r->o->pub.n;
        if (cJSON_IsArray(e->child) || tag(e->child, "map") || tag(e->child, "pairs") || tag(e->child, "tensor"))
          return bad(r, "a key that is not a string, number or boolean");
        if ((st = read_node(r, e->child, NULL, depth + 1))) return st;
        const zorch_tree_item *k = &r->o->pub.items[at];
        if (k->kind == ZORCH_TREE_FLOAT && isnan(k->f)) return bad(r, "a key that is not a string, number or boolean");
        if ((st = read_node(r, e->child->next, NULL, depth + 1))) return st;
      } else if ((st = read_node(r, e, it.kind == ZORCH_TREE_MAP ? e->string : NULL, depth + 1))) {
        return st;
      }
    }
    return push(r, (zorch_tree_item){.kind = ZORCH_TREE_END});
  } else {
    return bad(r, "a node that is not a string, boolean, integer, array or one of int, float, tensor, map, pairs");
  }
  return push(r, it);
}

void zorch_tree_free(zorch_tree *tree) {
  tree_owned *o = (tree_owned *)tree;
  if (!o) return;
  for (size_t i = 0; i < o->pub.n; i++)
    if (o->pub.items[i].kind == ZORCH_TREE_TENSOR) zorch_tensor_free(o->pub.items[i].t);
  for (int i = 0; i < o->pub.nextra; i++) zorch_tensor_free(o->pub.extra[i]);
  free(o->pub.items);
  free(o->pub.extra_names);
  free(o->pub.extra);
  free(o->referenced);
  for (size_t i = 0; i < o->nstrs; i++) free(o->strs[i]);
  free(o->strs);
  zorch_safetensors_free(o->nfile, o->file_names, o->file_ts);
  cJSON_Delete(o->json);
  free(o);
}

zorch_status zorch_tree_load(const char *path, zorch_tree **out) {
  if (!path || !out) return err_set(ZORCH_ERR_ARG, "load: bad arguments");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  unsigned char head[8];
  size_t nhead = f ? fread(head, 1, sizeof head, f) : 0;
  if (f) fclose(f);
  if (pt_is_torch_file(head, nhead)) return pt_load(path, out);
  tree_owned *o = calloc(1, sizeof *o);
  if (!o) return err_set(ZORCH_ERR_OOM, "load: out of memory");
  int nmeta;
  char **keys, **values;
  zorch_status st = zorch_load_safetensors_meta(path, &o->nfile, &o->file_names, &o->file_ts, &nmeta, &keys, &values);
  if (st) {
    free(o);
    return st;
  }
  const char *text = NULL;
  for (int i = 0; i < nmeta && !text; i++)
    if (strcmp(keys[i], TREE_KEY) == 0) text = values[i];
  if (text) o->json = cJSON_Parse(text);
  zorch_safetensors_meta_free(nmeta, keys, values);
  tree_reader r = {o, path};
  o->referenced = calloc((size_t)(o->nfile ? o->nfile : 1), sizeof *o->referenced);
  o->pub.extra_names = malloc(sizeof *o->pub.extra_names * (size_t)(o->nfile ? o->nfile : 1));
  o->pub.extra = malloc(sizeof *o->pub.extra * (size_t)(o->nfile ? o->nfile : 1));
  if (!o->referenced || !o->pub.extra_names || !o->pub.extra) {
    st = err_set(ZORCH_ERR_OOM, "load: out of memory");
  } else if (!text) { /* a file of tensors alone (PyTorch's, or zorch's) */
    st = push(&r, (zorch_tree_item){.kind = ZORCH_TREE_MAP});
    for (int i = 0; !st && i < o->nfile; i++) {
      o->referenced[i] = true;
      st = push(&r, (zorch_tree_item){.kind = ZORCH_TREE_TENSOR, .key = o->file_names[i],
                                      .key_len = strlen(o->file_names[i]), .t = o->file_ts[i]});
    }
    if (!st) st = push(&r, (zorch_tree_item){.kind = ZORCH_TREE_END});
  } else {
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(o->json, "version");
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(o->json, "value");
    if (!o->json) st = bad(&r, "not valid JSON");
    else if (!cJSON_IsObject(o->json) || !cJSON_IsNumber(version) || !value)
      st = bad(&r, "expected {\"version\": 1, \"value\": ...}");
    else if (version->valuedouble != TREE_VERSION)
      st = err_set(ZORCH_ERR_IO, "load: %s: __metadata__ \"" TREE_KEY "\" has version %g; this zorch reads version %d", path,
                   version->valuedouble, TREE_VERSION);
    else if (!(st = read_node(&r, value, NULL, 0)) && !is_open(o->pub.items[0].kind))
      st = bad(&r, "the value is not a table");
  }
  /* tensors the tree does not name go beside it, under their own names */
  for (int i = 0; !st && i < o->nfile; i++) {
    if (o->referenced[i]) continue;
    o->pub.extra_names[o->pub.nextra] = o->file_names[i];
    o->pub.extra[o->pub.nextra++] = zorch_tensor_retain(o->file_ts[i]);
  }
  if (st) {
    zorch_tree_free(&o->pub);
    return st;
  }
  *out = &o->pub;
  return ZORCH_OK;
}
