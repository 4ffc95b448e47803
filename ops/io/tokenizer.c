/* tokenizer.c: tokenizer.json (BPE: byte-level or SentencePiece-style) and
   tiktoken rank files loaded into one model (bpe.c), and the encode/decode
   around it: added tokens first, then the normalizer, the pre-tokenizer's
   words (pretok.c), the merges, the post-processor's tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/error.h"
#include "tokenizer.h"
#include "zorch_tokenizer.h"

enum { NORM_NONE, NORM_SPM };

typedef struct {
  int32_t id;
  size_t off;   /* text in names */
  uint32_t len;
  int special;
} added_tok;

struct zorch_tokenizer {
  bpe m;                 /* model bytes: raw bytes (byte-level, tiktoken) or the vocab's strings */
  char *names;           /* the file's spelling of each id */
  size_t *name_off;
  uint32_t *name_len;
  str_map by_name;
  added_tok *added;
  int n_added;
  unsigned char first[256]; /* bytes an added token starts with */
  int norm;              /* NORM_SPM: Prepend "▁" and " " -> "▁" */
  int nfc;               /* the NFC normalizer */
  int metaspace;         /* the Metaspace pre-tokenizer: 0 none, else 1 + prepend scheme (0 always, 1 first, 2 never) */
  int add_prefix_space;  /* ByteLevel's */
  pretok_kind kind;
  int spm_decode;        /* "▁" -> " ", <0xNN> -> the byte, one leading space dropped */
  int strip_first_space;
  int32_t *pre, *post;   /* the post-processor's single template around the text */
  int n_pre, n_post;
  int tiktoken;
};

/* ---- errors ---- */
static zorch_status fail(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zorch_status fail(const char *path, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return err_set(ZORCH_ERR_IO, "tokenizer: %s: %s", path, msg);
}
#define OOM() err_set(ZORCH_ERR_OOM, "tokenizer: out of memory")

void zorch_tokenizer_free(zorch_tokenizer *t) {
  if (!t) return;
  bpe_free(&t->m);
  free(t->names), free(t->name_off), free(t->name_len);
  strmap_free(&t->by_name);
  free(t->added), free(t->pre), free(t->post);
  free(t);
}

static int read_file(const char *path, char **data, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(path, "cannot open: %s", strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(f);
    return fail(path, "not a regular file");
  }
  size_t size = (size_t)sb.st_size;
  char *buf = malloc(size + 1);
  if (!buf) {
    fclose(f);
    return OOM();
  }
  if (size && fread(buf, 1, size, f) != size) {
    free(buf);
    fclose(f);
    return fail(path, "short read");
  }
  fclose(f);
  buf[size] = 0;
  *data = buf;
  *n = size;
  return 0;
}

/* ---- the arenas: model bytes and names of n ids ---- */
typedef struct {
  char *p;
  size_t n, cap;
} buf_t;

static int buf_add(buf_t *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + n) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) return -1;
    b->p = q, b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 0;
}

static int alloc_ids(zorch_tokenizer *t, int32_t n) {
  t->m.n_ids = n;
  t->m.off = calloc((size_t)n + 1, sizeof *t->m.off);
  t->m.len = calloc((size_t)n + 1, sizeof *t->m.len);
  t->name_off = calloc((size_t)n + 1, sizeof *t->name_off);
  t->name_len = calloc((size_t)n + 1, sizeof *t->name_len);
  for (int i = 0; i < 256; i++) t->m.byte_ids[i] = -1;
  t->m.unk = -1;
  return t->m.off && t->m.len && t->name_off && t->name_len ? 0 : -1;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
   for U+0100 onwards in order. */
static void byte_map(uint32_t fwd[256], int16_t inv[324]) {
  int k = 0;
  for (int c = 0; c < 324; c++) inv[c] = -1;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    fwd[b] = keep ? (uint32_t)b : (uint32_t)(256 + k++);
    inv[fwd[b]] = (int16_t)b;
  }
}

/* The bytes a byte-level token string stands for into out (n bytes at most
   as many as s has); -1 when a character is not one of the 256. */
static long byte_level_bytes(const int16_t inv[324], const unsigned char *s, size_t n, unsigned char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (s[i] < 0x80) cp = s[i++];
    else if ((s[i] & 0xE0) == 0xC0 && i + 1 < n) cp = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F), i += 2;
    else return -1;
    if (cp >= 324 || inv[cp] < 0) return -1;
    out[o++] = (unsigned char)inv[cp];
  }
  return (long)o;
}

/* ---- tokenizer.json ---- */
static const char *jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jtrue(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }
static const cJSON *jget(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static int jnull(const cJSON *v) { return !v || cJSON_IsNull(v); }

static int is_id(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483647.0 && v->valuedouble == (double)(int32_t)v->valuedouble;
}

/* The normalizer: none, or Llama 2's Prepend "▁" + Replace " " -> "▁" (a
   Sequence of the two, either order of listing). */
static zorch_status load_normalizer(zorch_tokenizer *t, const char *path, const cJSON *n) {
  if (jnull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return fail(path, "normalizer.type is missing");
  if (strcmp(type, "NFC") == 0) {
    t->nfc = 1;
    return 0;
  }
  if (strcmp(type, "Sequence") != 0) return fail(path, "normalizer.type \"%s\" is not supported", type);
  const cJSON *list = jget(n, "normalizers");
  if (!cJSON_IsArray(list)) return fail(path, "normalizer.normalizers is missing");
  int prepend = 0, replace = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    const char *et = jstr(e, "type");
    if (!et) return fail(path, "normalizer.normalizers[].type is missing");
    if (strcmp(et, "Prepend") == 0 && jstr(e, "prepend") && strcmp(jstr(e, "prepend"), "\xE2\x96\x81") == 0) prepend = 1;
    else if (strcmp(et, "Replace") == 0 && jstr(jget(e, "pattern"), "String") && strcmp(jstr(jget(e, "pattern"), "String"), " ") == 0 &&
             jstr(e, "content") && strcmp(jstr(e, "content"), "\xE2\x96\x81") == 0)
      replace = 1;
    else return fail(path, "normalizer.normalizers[].type \"%s\" (with these settings) is not supported", et);
  }
  if (!prepend || !replace) return fail(path, "normalizer: only Prepend \"\xE2\x96\x81\" with Replace \" \" -> \"\xE2\x96\x81\" is supported");
  t->norm = NORM_SPM;
  t->strip_first_space = 1;
  return 0;
}

static zorch_status load_one_pretok(zorch_tokenizer *t, const char *path, const cJSON *p, int in_seq) {
  const char *type = jstr(p, "type");
  if (!type) return fail(path, "pre_tokenizer.type is missing");
  if (strcmp(type, "ByteLevel") == 0) {
    t->m.byte_level = 1;
    t->add_prefix_space = jtrue(p, "add_prefix_space");
    const cJSON *re = jget(p, "use_regex");
    if (jnull(re) || cJSON_IsTrue(re)) {
      if (t->kind != PRETOK_NONE) return fail(path, "pre_tokenizer: ByteLevel with use_regex after a Split is not supported");
      t->kind = PRETOK_GPT2;
    }
    return 0;
  }
  if (strcmp(type, "Split") == 0) {
    const char *re = jstr(jget(p, "pattern"), "Regex");
    if (!re) return fail(path, "pre_tokenizer.pattern: only a Regex pattern is supported");
    int k = pretok_of_regex(re);
    if (k < 0) return fail(path, "pre_tokenizer.pattern.Regex \"%.200s\" is not supported", re);
    const char *beh = jstr(p, "behavior");
    if (!beh || strcmp(beh, "Isolated") != 0) return fail(path, "pre_tokenizer.behavior \"%s\" is not supported", beh ? beh : "(missing)");
    if (jtrue(p, "invert")) return fail(path, "pre_tokenizer.invert true is not supported");
    if (t->kind != PRETOK_NONE) return fail(path, "pre_tokenizer: two splitting pre-tokenizers are not supported");
    t->kind = (pretok_kind)k;
    return 0;
  }
  if (strcmp(type, "Metaspace") == 0) {
    const char *rep = jstr(p, "replacement");
    if (!rep || strcmp(rep, "\xE2\x96\x81") != 0) return fail(path, "pre_tokenizer.replacement: only \"\xE2\x96\x81\" is supported");
    const char *sch = jstr(p, "prepend_scheme");
    int scheme = !sch ? (jget(p, "add_prefix_space") && !jtrue(p, "add_prefix_space") ? 2 : 0)
                      : strcmp(sch, "always") == 0 ? 0 : strcmp(sch, "first") == 0 ? 1 : strcmp(sch, "never") == 0 ? 2 : -1;
    if (scheme < 0) return fail(path, "pre_tokenizer.prepend_scheme \"%s\" is not supported", sch);
    t->metaspace = 1 + scheme;
    if (!jget(p, "split") || jtrue(p, "split")) t->kind = PRETOK_METASPACE;
    t->strip_first_space = scheme != 2;
    return 0;
  }
  (void)in_seq;
  return fail(path, "pre_tokenizer.type \"%s\" is not supported", type);
}

static zorch_status load_pretok(zorch_tokenizer *t, const char *path, const cJSON *p) {
  if (jnull(p)) return 0;
  const char *type = jstr(p, "type");
  if (type && strcmp(type, "Sequence") == 0) {
    const cJSON *list = jget(p, "pretokenizers"), *e;
    if (!cJSON_IsArray(list)) return fail(path, "pre_tokenizer.pretokenizers is missing");
    cJSON_ArrayForEach(e, list) {
      zorch_status st = load_one_pretok(t, path, e, 1);
      if (st) return st;
    }
    return 0;
  }
  return load_one_pretok(t, path, p, 0);
}

static zorch_status load_decoder(zorch_tokenizer *t, const char *path, const cJSON *d) {
  if (jnull(d)) return 0;
  const char *type = jstr(d, "type");
  if (!type) return fail(path, "decoder.type is missing");
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = jget(d, "decoders"), *e;
    if (!cJSON_IsArray(list)) return fail(path, "decoder.decoders is missing");
    cJSON_ArrayForEach(e, list) {
      zorch_status st = load_decoder(t, path, e);
      if (st) return st;
    }
    return 0;
  }
  static const char *ok[] = {"ByteLevel", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (strcmp(type, ok[i]) == 0) {
      if (strcmp(type, "Replace") == 0 || strcmp(type, "Metaspace") == 0 || strcmp(type, "ByteFallback") == 0) t->spm_decode = 1;
      return 0;
    }
  return fail(path, "decoder.type \"%s\" is not supported", type);
}

/* The single template of a TemplateProcessing: the ids before and after $A. */
static zorch_status load_post(zorch_tokenizer *t, const char *path, const cJSON *p) {
  if (jnull(p)) return 0;
  const char *type = jstr(p, "type");
  if (!type) return fail(path, "post_processor.type is missing");
  if (strcmp(type, "ByteLevel") == 0) return 0;
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = jget(p, "processors"), *e;
    if (!cJSON_IsArray(list)) return fail(path, "post_processor.processors is missing");
    cJSON_ArrayForEach(e, list) {
      zorch_status st = load_post(t, path, e);
      if (st) return st;
    }
    return 0;
  }
  if (strcmp(type, "TemplateProcessing") != 0) return fail(path, "post_processor.type \"%s\" is not supported", type);
  const cJSON *single = jget(p, "single"), *specials = jget(p, "special_tokens"), *e;
  if (!cJSON_IsArray(single)) return fail(path, "post_processor.single is missing");
  int seen_a = 0;
  cJSON_ArrayForEach(e, single) {
    const cJSON *sp = jget(e, "SpecialToken");
    if (jget(e, "Sequence")) {
      if (seen_a) return fail(path, "post_processor.single: two sequences");
      seen_a = 1;
      continue;
    }
    const char *name = jstr(sp, "id");
    if (!name) return fail(path, "post_processor.single: an item is neither SpecialToken nor Sequence");
    const cJSON *ids = jget(jget(specials, name), "ids"), *v;
    if (!cJSON_IsArray(ids)) return fail(path, "post_processor.special_tokens[\"%s\"].ids is missing", name);
    cJSON_ArrayForEach(v, ids) {
      if (!is_id(v) || v->valueint >= t->m.n_ids) return fail(path, "post_processor.special_tokens[\"%s\"].ids: a bad id", name);
      int32_t **arr = seen_a ? &t->post : &t->pre;
      int *n = seen_a ? &t->n_post : &t->n_pre;
      int32_t *q = realloc(*arr, (size_t)(*n + 1) * sizeof *q);
      if (!q) return OOM();
      q[(*n)++] = v->valueint;
      *arr = q;
    }
  }
  return 0;
}

static int add_name(zorch_tokenizer *t, buf_t *names, int32_t id, const char *s, size_t n) {
  t->name_off[id] = names->n;
  t->name_len[id] = (uint32_t)n;
  return buf_add(names, s, n);
}
static int add_bytes(zorch_tokenizer *t, buf_t *bytes, int32_t id, const void *s, size_t n) {
  t->m.off[id] = bytes->n;
  t->m.len[id] = (uint32_t)n;
  return buf_add(bytes, s, n);
}

/* The index of the first byte of every added token, for the scan. */
static void index_added(zorch_tokenizer *t) {
  memset(t->first, 0, sizeof t->first);
  for (int i = 0; i < t->n_added; i++)
    if (t->added[i].len) t->first[(unsigned char)t->names[t->added[i].off]] = 1;
}

static int names_done(zorch_tokenizer *t) {
  for (int32_t id = 0; id < t->m.n_ids; id++)
    if (t->name_len[id] || t->m.len[id])
      if (strmap_put(&t->by_name, t->names, t->name_off, t->name_len, id)) return -1;
  return 0;
}

/* merges[i]: "a b", or ["a", "b"] */
static zorch_status load_merges(zorch_tokenizer *t, const char *path, const cJSON *merges) {
  const cJSON *e;
  uint32_t rank = 0;
  char tmp[1024];
  cJSON_ArrayForEach(e, merges) {
    const char *a, *b;
    size_t la, lb;
    if (cJSON_IsString(e)) {
      const char *sp = strchr(e->valuestring, ' ');
      if (!sp) return fail(path, "model.merges[%u] \"%.100s\" is not two tokens", rank, e->valuestring);
      a = e->valuestring, la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
      a = cJSON_GetArrayItem(e, 0)->valuestring, b = cJSON_GetArrayItem(e, 1)->valuestring, la = strlen(a), lb = strlen(b);
    } else return fail(path, "model.merges[%u] is neither \"a b\" nor [a, b]", rank);
    int32_t ia = strmap_get(&t->by_name, t->names, t->name_off, t->name_len, a, la);
    int32_t ib = strmap_get(&t->by_name, t->names, t->name_off, t->name_len, b, lb);
    if (ia < 0 || ib < 0) return fail(path, "model.merges[%u]: \"%.*s\" is not in model.vocab", rank, (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
    if (la + lb > sizeof tmp) return fail(path, "model.merges[%u]: a token too long", rank);
    memcpy(tmp, a, la);
    memcpy(tmp + la, b, lb);
    int32_t im = strmap_get(&t->by_name, t->names, t->name_off, t->name_len, tmp, la + lb);
    if (im < 0) return fail(path, "model.merges[%u]: the merged \"%.*s\" is not in model.vocab", rank, (int)(la + lb), tmp);
    if (pairmap_put(&t->m.merges, ia, ib, rank, im)) return OOM();
    rank++;
  }
  return 0;
}

static zorch_status load_json(zorch_tokenizer *t, const char *path, const char *text, size_t size) {
  cJSON *root = cJSON_ParseWithLength(text, size);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    return fail(path, "not valid JSON (at byte %ld)", at && at >= text && at <= text + size ? (long)(at - text) : -1L);
  }
  zorch_status st = 0;
  buf_t names = {0}, bytes = {0};
  const cJSON *model = jget(root, "model"), *vocab = jget(model, "vocab"), *merges = jget(model, "merges");
  const cJSON *added = jget(root, "added_tokens"), *e;
  const char *mtype = jstr(model, "type");
#define CHECK(x)    \
  do {              \
    if ((st = (x))) \
      goto out;     \
  } while (0)
  if (!cJSON_IsObject(model)) CHECK(fail(path, "model is missing"));
  if (mtype && strcmp(mtype, "BPE") != 0) CHECK(fail(path, "model.type \"%s\" is not supported", mtype));
  if (!cJSON_IsObject(vocab)) CHECK(fail(path, "model.vocab is missing"));
  if (!cJSON_IsArray(merges)) CHECK(fail(path, "model.merges is missing"));
  if (!jnull(jget(model, "dropout"))) CHECK(fail(path, "model.dropout is not supported"));
  static const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const char *s = jstr(model, affix[i]);
    if ((s && *s) || (!s && !jnull(jget(model, affix[i])))) CHECK(fail(path, "model.%s is not supported", affix[i]));
  }
  if (!jnull(jget(root, "truncation"))) CHECK(fail(path, "truncation is not supported"));
  if (!jnull(jget(root, "padding"))) CHECK(fail(path, "padding is not supported"));
  if (!jnull(added) && !cJSON_IsArray(added)) CHECK(fail(path, "added_tokens is not a list"));
  /* the ids */
  int32_t max = -1;
  cJSON_ArrayForEach(e, vocab) {
    if (!is_id(e)) CHECK(fail(path, "model.vocab[\"%.100s\"] is not an id", e->string));
    if (e->valueint > max) max = e->valueint;
  }
  cJSON_ArrayForEach(e, added) {
    const cJSON *id = jget(e, "id");
    if (!is_id(id) || !jstr(e, "content") || !*jstr(e, "content")) CHECK(fail(path, "added_tokens[]: id or content is missing"));
    if (id->valueint > max) max = id->valueint;
    static const char *flags[] = {"single_word", "lstrip", "rstrip"};
    for (int i = 0; i < 3; i++)
      if (jtrue(e, flags[i])) CHECK(fail(path, "added_tokens[\"%.100s\"].%s true is not supported", jstr(e, "content"), flags[i]));
  }
  if (max < 0) CHECK(fail(path, "model.vocab is empty"));
  if (alloc_ids(t, max + 1)) CHECK(OOM());
  CHECK(load_normalizer(t, path, jget(root, "normalizer")));
  CHECK(load_pretok(t, path, jget(root, "pre_tokenizer")));
  CHECK(load_decoder(t, path, jget(root, "decoder")));
  const char *dt = jstr(jget(root, "decoder"), "type");
  if (dt && strcmp(dt, "ByteLevel") == 0) t->m.byte_level = 1;
  t->m.byte_fallback = jtrue(model, "byte_fallback");
  t->m.ignore_merges = jtrue(model, "ignore_merges");
  t->m.fuse_unk = jtrue(model, "fuse_unk");
  uint32_t fwd[256];
  int16_t inv[324];
  byte_map(fwd, inv);
  unsigned char *raw = malloc(size + 1);
  if (!raw) CHECK(OOM());
  cJSON_ArrayForEach(e, vocab) {
    int32_t id = e->valueint;
    size_t n = strlen(e->string);
    long b = t->m.byte_level ? byte_level_bytes(inv, (const unsigned char *)e->string, n, raw) : -1;
    if (add_name(t, &names, id, e->string, n) ||
        (b >= 0 ? add_bytes(t, &bytes, id, raw, (size_t)b) : add_bytes(t, &bytes, id, e->string, n))) {
      free(raw);
      CHECK(OOM());
    }
    if (t->m.byte_level && b == 1) t->m.byte_ids[raw[0]] = id;
    unsigned v;
    if (!t->m.byte_level && n == 6 && sscanf(e->string, "<0x%2X>", &v) == 1 && e->string[5] == '>') t->m.byte_ids[v] = id;
  }
  free(raw);
  /* the model's map: vocab only (an added token is never merged into) */
  t->m.bytes = bytes.p, bytes.p = NULL;
  t->names = names.p, names.p = NULL;
  for (int32_t id = 0; id < t->m.n_ids; id++)
    if (t->m.len[id] && strmap_put(&t->m.by_bytes, t->m.bytes, t->m.off, t->m.len, id)) CHECK(OOM());
  if (names_done(t)) CHECK(OOM());
  const char *unk = jstr(model, "unk_token");
  if (unk && (t->m.unk = strmap_get(&t->by_name, t->names, t->name_off, t->name_len, unk, strlen(unk))) < 0)
    CHECK(fail(path, "model.unk_token \"%.100s\" is not in model.vocab", unk));
  CHECK(load_merges(t, path, merges));
  if (t->m.byte_level)
    for (int b = 0; b < 256; b++)
      if (t->m.byte_ids[b] < 0 && !t->m.byte_fallback && t->m.unk < 0)
        CHECK(fail(path, "model.vocab: byte-level, but byte 0x%02X has no token", b));
  /* added tokens: their content is their name and their bytes */
  int na = cJSON_GetArraySize(added);
  if (na > 0 && !(t->added = calloc((size_t)na, sizeof *t->added))) CHECK(OOM());
  buf_t nb = {t->names, names.n, names.cap}, bb = {t->m.bytes, bytes.n, bytes.cap};
  cJSON_ArrayForEach(e, added) {
    int32_t id = jget(e, "id")->valueint;
    const char *c = jstr(e, "content");
    size_t n = strlen(c);
    int r = add_name(t, &nb, id, c, n);
    t->names = nb.p;
    if (!r && !t->m.len[id]) r = add_bytes(t, &bb, id, c, n);
    t->m.bytes = bb.p;
    if (r) CHECK(OOM());
    t->added[t->n_added++] = (added_tok){id, t->name_off[id], (uint32_t)n, jtrue(e, "special")};
  }
  /* names moved: the map is rebuilt over the final arena */
  strmap_free(&t->by_name);
  if (names_done(t)) CHECK(OOM());
  index_added(t);
  CHECK(load_post(t, path, jget(root, "post_processor")));
  if (t->m.byte_level && (t->norm || t->metaspace)) CHECK(fail(path, "a ByteLevel tokenizer with a \"\xE2\x96\x81\" normalizer is not supported"));
  if (!t->m.byte_level && !t->norm && !t->metaspace)
    CHECK(fail(path, "pre_tokenizer: neither ByteLevel nor Metaspace (nor a \"\xE2\x96\x81\" normalizer): not supported"));
out:
#undef CHECK
  free(names.p);
  free(bytes.p);
  cJSON_Delete(root);
  return st;
}

zorch_status zorch_tokenizer_load_json(const char *path, zorch_tokenizer **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "tokenizer: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "tokenizer: path is NULL");
  char *text;
  size_t n;
  zorch_status st = read_file(path, &text, &n);
  if (st) return st;
  zorch_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    free(text);
    return OOM();
  }
  st = load_json(t, path, text, n);
  free(text);
  if (st) {
    zorch_tokenizer_free(t);
    return st;
  }
  *out = t;
  return 0;
}

/* ---- tiktoken ---- */
static int b64(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes n base64 characters (with '=' padding) into out; the length, or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out) {
  if (n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      if (s[i + k] == '=' && i + 4 == n && k >= 2) v[k] = 0, pad++;
      else if (pad || (v[k] = b64((unsigned char)s[i + k])) < 0) return -1;
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[o++] = (unsigned char)(w >> 16);
    if (pad < 2) out[o++] = (unsigned char)(w >> 8);
    if (pad < 1) out[o++] = (unsigned char)w;
  }
  return (long)o;
}

static zorch_status load_tiktoken(zorch_tokenizer *t, const char *path, char *text, size_t size, const zorch_special_token *sp,
                                  size_t nsp) {
  /* first pass: the largest rank */
  int32_t max = -1;
  size_t line = 0;
  for (size_t i = 0; i < size;) {
    size_t e = i;
    while (e < size && text[e] != '\n') e++;
    line++;
    if (e > i) {
      char *space = memchr(text + i, ' ', e - i);
      char *end = NULL;
      long r = space && space[1] >= '0' && space[1] <= '9' ? strtol(space + 1, &end, 10) : -1;
      if (r < 0 || end == space + 1 || (end != text + e && !(*end == '\r' && end + 1 == text + e)) || r < 0 || r >= 2147483647L)
        return fail(path, "line %zu: not \"base64 rank\"", line);
      if (r > max) max = (int32_t)r;
    }
    i = e + 1;
  }
  for (size_t k = 0; k < nsp; k++) {
    if (!sp[k].text || !*sp[k].text || sp[k].id < 0) return err_set(ZORCH_ERR_ARG, "tokenizer: special token %zu: no text or a negative id", k);
    if (sp[k].id > max) max = sp[k].id;
  }
  if (max < 0) return fail(path, "no tokens");
  if (alloc_ids(t, max + 1)) return OOM();
  buf_t bytes = {0};
  unsigned char *raw = malloc(size + 1);
  if (!raw) return OOM();
  line = 0;
  zorch_status st = 0;
  for (size_t i = 0; i < size && !st;) {
    size_t e = i;
    while (e < size && text[e] != '\n') e++;
    line++;
    if (e > i) {
      char *space = memchr(text + i, ' ', e - i);
      int32_t r = (int32_t)strtol(space + 1, NULL, 10);
      long n = b64_decode(text + i, (size_t)(space - (text + i)), raw);
      if (n <= 0) st = fail(path, "line %zu: bad base64", line);
      else if (t->m.len[r]) st = fail(path, "line %zu: rank %d given twice", line, r);
      else if (add_bytes(t, &bytes, r, raw, (size_t)n)) st = OOM();
      else if (n == 1) t->m.byte_ids[raw[0]] = r;
    }
    i = e + 1;
  }
  free(raw);
  for (size_t k = 0; k < nsp && !st; k++) {
    if (t->m.len[sp[k].id]) st = err_set(ZORCH_ERR_ARG, "tokenizer: special token %s: id %d is a token of %s", sp[k].text, sp[k].id, path);
    else if (add_bytes(t, &bytes, sp[k].id, sp[k].text, strlen(sp[k].text))) st = OOM();
  }
  t->m.bytes = bytes.p;
  if (st) return st;
  for (int b = 0; b < 256; b++)
    if (t->m.byte_ids[b] < 0) return fail(path, "byte 0x%02X has no token", b);
  for (int32_t id = 0; id < t->m.n_ids; id++)
    if (t->m.len[id] && (size_t)id < (size_t)t->m.n_ids) {
      int special = 0;
      for (size_t k = 0; k < nsp; k++) special |= sp[k].id == id;
      if (!special && strmap_put(&t->m.by_bytes, t->m.bytes, t->m.off, t->m.len, id)) return OOM();
    }
  /* names are the bytes */
  if (!(t->names = malloc(bytes.n ? bytes.n : 1))) return OOM();
  memcpy(t->names, t->m.bytes, bytes.n);
  memcpy(t->name_off, t->m.off, (size_t)t->m.n_ids * sizeof *t->name_off);
  memcpy(t->name_len, t->m.len, (size_t)t->m.n_ids * sizeof *t->name_len);
  if (names_done(t)) return OOM();
  if (nsp && !(t->added = calloc(nsp, sizeof *t->added))) return OOM();
  for (size_t k = 0; k < nsp; k++) t->added[t->n_added++] = (added_tok){sp[k].id, t->name_off[sp[k].id], t->name_len[sp[k].id], 1};
  index_added(t);
  t->m.tiktoken = 1;
  t->tiktoken = 1;
  return 0;
}

zorch_status zorch_tokenizer_load_tiktoken(const char *path, zorch_tokenizer_pattern pattern, const zorch_special_token *specials,
                                           size_t n, zorch_tokenizer **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "tokenizer: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "tokenizer: path is NULL");
  if (pattern != ZORCH_PATTERN_CL100K && pattern != ZORCH_PATTERN_GPT2) return err_set(ZORCH_ERR_ARG, "tokenizer: unknown pattern %d", (int)pattern);
  if (n && !specials) return err_set(ZORCH_ERR_ARG, "tokenizer: specials is NULL");
  char *text;
  size_t size;
  zorch_status st = read_file(path, &text, &size);
  if (st) return st;
  zorch_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    free(text);
    return OOM();
  }
  t->kind = pattern == ZORCH_PATTERN_GPT2 ? PRETOK_GPT2 : PRETOK_CL100K_TIK;
  st = load_tiktoken(t, path, text, size, specials, n);
  free(text);
  if (st) {
    zorch_tokenizer_free(t);
    return st;
  }
  *out = t;
  return 0;
}

static const zorch_special_token cl100k_specials[] = {{"<|endoftext|>", 100257},
                                                      {"<|fim_prefix|>", 100258},
                                                      {"<|fim_middle|>", 100259},
                                                      {"<|fim_suffix|>", 100260},
                                                      {"<|endofprompt|>", 100276}};

zorch_status zorch_tokenizer_load(const char *path, zorch_tokenizer **out) {
  if (!out) return err_set(ZORCH_ERR_ARG, "tokenizer: out is NULL");
  *out = NULL;
  if (!path) return err_set(ZORCH_ERR_ARG, "tokenizer: path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) return fail(path, "cannot open: %s", strerror(errno));
  int c;
  while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {}
  fclose(f);
  if (c == '{') return zorch_tokenizer_load_json(path, out);
  return zorch_tokenizer_load_tiktoken(path, ZORCH_PATTERN_CL100K, cl100k_specials,
                                       sizeof cl100k_specials / sizeof cl100k_specials[0], out);
}

/* ---- encode ---- */
typedef struct {
  int32_t *ids;
  size_t n, cap;
} ids_t;

static int ids_push(ids_t *v, int32_t id) {
  if (v->n == v->cap) {
    size_t c = v->cap ? v->cap * 2 : 256;
    int32_t *q = realloc(v->ids, c * sizeof *q);
    if (!q) return -1;
    v->ids = q, v->cap = c;
  }
  v->ids[v->n++] = id;
  return 0;
}

/* The words of one segment of text (no added token in it) into v. */
static int encode_segment(zorch_tokenizer *t, const unsigned char *s, size_t n, int first, ids_t *v, buf_t *scratch, buf_t *nfc) {
  if (!n) return 0;
  uint32_t cp;
  if (t->nfc && nfc_first_change(s, n, &cp) < n) {
    if (nfc_normalize(s, n, &nfc->p, &nfc->n, &nfc->cap)) return -1;
    s = (const unsigned char *)nfc->p;
    n = nfc->n;
  }
  int spm = t->norm == NORM_SPM || t->metaspace;
  int prefix = t->norm == NORM_SPM || (t->metaspace == 1) || (t->metaspace == 2 && first);
  if (spm || (t->add_prefix_space && s[0] != ' ')) {
    scratch->n = 0;
    if (spm) {
      if (prefix && buf_add(scratch, "\xE2\x96\x81", 3)) return -1;
      for (size_t i = 0; i < n; i++)
        if (s[i] == ' ' ? buf_add(scratch, "\xE2\x96\x81", 3) : buf_add(scratch, s + i, 1)) return -1;
    } else if (buf_add(scratch, " ", 1) || buf_add(scratch, s, n)) return -1;
    s = (const unsigned char *)scratch->p;
    n = scratch->n;
  }
  for (size_t i = 0; i < n;) {
    size_t e = pretok_next(t->kind, s, n, i);
    if (e <= i) e = n; /* never: every scanner takes a code point at least */
    if (bpe_word(&t->m, s + i, e - i, &v->ids, &v->n, &v->cap)) return -1;
    i = e;
  }
  return 0;
}

static int special_allowed(const zorch_tokenizer *t, const added_tok *a, const zorch_encode_opts *o) {
  if (!a->special) return 1;
  zorch_special_mode m = o->special;
  if (m == ZORCH_SPECIAL_DEFAULT) m = t->tiktoken ? ZORCH_SPECIAL_NONE : ZORCH_SPECIAL_ALL;
  if (m == ZORCH_SPECIAL_ALL) return 1;
  if (m == ZORCH_SPECIAL_NONE) return 0;
  for (size_t k = 0; k < o->n_allowed; k++)
    if (o->allowed[k] && strlen(o->allowed[k]) == a->len && memcmp(o->allowed[k], t->names + a->off, a->len) == 0) return 1;
  return 0;
}

static zorch_status encode(zorch_tokenizer *t, const char *text, size_t len, const zorch_encode_opts *opts, ids_t *v) {
  zorch_encode_opts def = {true, ZORCH_SPECIAL_DEFAULT, NULL, 0};
  const zorch_encode_opts *o = opts ? opts : &def;
  if (o->special == ZORCH_SPECIAL_LIST && o->n_allowed && !o->allowed) return err_set(ZORCH_ERR_ARG, "tokenizer: encode: allowed is NULL");
  if ((unsigned)o->special > ZORCH_SPECIAL_LIST) return err_set(ZORCH_ERR_ARG, "tokenizer: encode: unknown special mode %d", (int)o->special);
  const unsigned char *s = (const unsigned char *)text;
  buf_t scratch = {0}, nfc = {0};
  int r = 0;
  if (o->add_special)
    for (int i = 0; i < t->n_pre && !r; i++) r = ids_push(v, t->pre[i]);
  size_t seg = 0;
  for (size_t i = 0; i < len && !r;) {
    const added_tok *best = NULL;
    if (t->first[s[i]])
      for (int k = 0; k < t->n_added; k++) {
        const added_tok *a = &t->added[k];
        if (a->len <= len - i && (!best || a->len > best->len) && memcmp(t->names + a->off, s + i, a->len) == 0 &&
            special_allowed(t, a, o))
          best = a;
      }
    if (!best) {
      i++;
      continue;
    }
    r = encode_segment(t, s + seg, i - seg, seg == 0, v, &scratch, &nfc);
    if (!r) r = ids_push(v, best->id);
    i += best->len;
    seg = i;
  }
  if (!r) r = encode_segment(t, s + seg, len - seg, seg == 0, v, &scratch, &nfc);
  if (o->add_special)
    for (int i = 0; i < t->n_post && !r; i++) r = ids_push(v, t->post[i]);
  free(scratch.p);
  free(nfc.p);
  return r ? OOM() : 0;
}

zorch_status zorch_tokenizer_encode(zorch_tokenizer *t, const char *text, size_t len, const zorch_encode_opts *opts, int32_t **ids,
                                    size_t *n) {
  if (!ids || !n) return err_set(ZORCH_ERR_ARG, "tokenizer: encode: ids or n is NULL");
  *ids = NULL, *n = 0;
  if (!t) return err_set(ZORCH_ERR_ARG, "tokenizer: encode: tokenizer is NULL");
  if (!text && len) return err_set(ZORCH_ERR_ARG, "tokenizer: encode: text is NULL");
  ids_t v = {0};
  zorch_status st = encode(t, text ? text : "", len, opts, &v);
  if (st) {
    free(v.ids);
    return st;
  }
  *ids = v.ids, *n = v.n;
  return 0;
}

/* ---- decode ---- */
static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

zorch_status zorch_tokenizer_decode(const zorch_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
  if (!out || !len) return err_set(ZORCH_ERR_ARG, "tokenizer: decode: out or len is NULL");
  *out = NULL, *len = 0;
  if (!t) return err_set(ZORCH_ERR_ARG, "tokenizer: decode: tokenizer is NULL");
  if (n && !ids) return err_set(ZORCH_ERR_ARG, "tokenizer: decode: ids is NULL");
  buf_t b = {0};
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->m.n_ids || (!t->m.len[id] && !t->name_len[id])) {
      free(b.p);
      return err_set(ZORCH_ERR_ARG, "tokenizer: decode: id %d (entry " ERR_IX("%zu") ") is not a token (vocabulary size %d)", id, i,
                     t->m.n_ids);
    }
    const unsigned char *s = (const unsigned char *)t->m.bytes + t->m.off[id];
    size_t l = t->m.len[id];
    int r = 0;
    if (t->spm_decode || t->norm || t->metaspace) {
      if (l == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
        unsigned char c = (unsigned char)(hexval(s[3]) * 16 + hexval(s[4]));
        r = buf_add(&b, &c, 1);
      } else
        for (size_t k = 0; k < l && !r;) {
          if (l - k >= 3 && memcmp(s + k, "\xE2\x96\x81", 3) == 0) r = buf_add(&b, " ", 1), k += 3;
          else r = buf_add(&b, s + k, 1), k++;
        }
    } else r = buf_add(&b, s, l);
    if (r) {
      free(b.p);
      return OOM();
    }
  }
  size_t skip = (t->norm || t->metaspace) && t->strip_first_space && b.n && b.p[0] == ' ' ? 1 : 0;
  char *o = malloc(b.n - skip + 1);
  if (!o) {
    free(b.p);
    return OOM();
  }
  if (b.n - skip) memcpy(o, b.p + skip, b.n - skip);
  o[b.n - skip] = 0;
  free(b.p);
  *out = o, *len = b.n - skip;
  return 0;
}

int32_t zorch_tokenizer_vocab_size(const zorch_tokenizer *t) { return t ? t->m.n_ids : 0; }

const char *zorch_tokenizer_id_to_token(const zorch_tokenizer *t, int32_t id, size_t *len) {
  if (len) *len = 0;
  if (!t || id < 0 || id >= t->m.n_ids || (!t->name_len[id] && !t->m.len[id])) return NULL;
  if (len) *len = t->name_len[id];
  return t->names + t->name_off[id];
}

int32_t zorch_tokenizer_token_to_id(const zorch_tokenizer *t, const char *token, size_t len) {
  if (!t || !token) return -1;
  return strmap_get(&t->by_name, t->names, t->name_off, t->name_len, token, len);
}

int32_t zorch_tokenizer_special_id(const zorch_tokenizer *t, const char *text) {
  if (!t || !text) return -1;
  size_t n = strlen(text);
  for (int k = 0; k < t->n_added; k++)
    if (t->added[k].len == n && memcmp(t->names + t->added[k].off, text, n) == 0) return t->added[k].id;
  return -1;
}

zorch_status zorch_nfc(const char *text, size_t len, char **out, size_t *out_len) {
  if (!out || !out_len) return err_set(ZORCH_ERR_ARG, "nfc: out or out_len is NULL");
  *out = NULL, *out_len = 0;
  if (!text && len) return err_set(ZORCH_ERR_ARG, "nfc: text is NULL");
  size_t cap = 0;
  if (nfc_normalize((const unsigned char *)text, len, out, out_len, &cap)) {
    free(*out);
    *out = NULL;
    return err_set(ZORCH_ERR_OOM, "nfc: out of memory");
  }
  (*out)[*out_len] = 0;
  return 0;
}

/* ---- llm.c token files ---- */
zorch_status zorch_tokenizer_encode_file(zorch_tokenizer *t, const char *in_path, const char *out_path, const zorch_encode_opts *opts,
                                         size_t *count) {
  if (count) *count = 0;
  if (!t || !in_path || !out_path) return err_set(ZORCH_ERR_ARG, "tokenizer: encode_file: a NULL argument");
  char *text;
  size_t n;
  zorch_status st = read_file(in_path, &text, &n);
  if (st) return st;
  ids_t v = {0};
  st = encode(t, text, n, opts, &v);
  free(text);
  if (st) {
    free(v.ids);
    return st;
  }
  if (v.n > 0x7FFFFFFF) {
    free(v.ids);
    return err_set(ZORCH_ERR_ARG, "tokenizer: encode_file: %zu tokens do not fit the header's int32 count", v.n);
  }
  int wide = t->m.n_ids > 65536;
  size_t w = wide ? 4 : 2, total = 1024 + v.n * w;
  unsigned char *o = calloc(total, 1);
  if (!o) {
    free(v.ids);
    return OOM();
  }
  int32_t hdr[3] = {20240520, wide ? 2 : 1, (int32_t)v.n};
  for (int k = 0; k < 3; k++)
    for (int b = 0; b < 4; b++) o[4 * k + b] = (unsigned char)((uint32_t)hdr[k] >> (8 * b));
  for (size_t i = 0; i < v.n; i++)
    for (size_t b = 0; b < w; b++) o[1024 + i * w + b] = (unsigned char)((uint32_t)v.ids[i] >> (8 * b));
  st = zorch_write_file_atomic(out_path, o, total);
  free(o);
  free(v.ids);
  if (!st && count) *count = v.n;
  return st;
}
