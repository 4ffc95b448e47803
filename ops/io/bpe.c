/* bpe.c: byte-pair merging of one word: the symbols in a linked list, the
   candidate pairs in a heap by (rank, position), so that the lowest-ranked
   pair, the leftmost of equals, merges first (Hugging Face's BPE and
   tiktoken alike); merged words are cached by their bytes. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

uint32_t bpe_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return (uint32_t)(h ^ h >> 32);
}

static int strmap_grow(str_map *m, size_t cap) {
  uint64_t *s = calloc(cap, sizeof *s);
  if (!s) return -1;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i]) {
      size_t j = (size_t)(m->slots[i] >> 32) & (cap - 1);
      while (s[j]) j = (j + 1) & (cap - 1);
      s[j] = m->slots[i];
    }
  free(m->slots);
  m->slots = s;
  m->cap = cap;
  return 0;
}

int32_t strmap_get(const str_map *m, const char *arena, const size_t *off, const uint32_t *len, const void *s, size_t n) {
  if (!m->cap) return -1;
  uint32_t h = bpe_hash(s, n);
  for (size_t j = h & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
    uint64_t v = m->slots[j];
    if (!v) return -1;
    if ((uint32_t)(v >> 32) != h) continue;
    int32_t id = (int32_t)(uint32_t)v - 1;
    if (len[id] == n && memcmp(arena + off[id], s, n) == 0) return id;
  }
}

int strmap_put(str_map *m, const char *arena, const size_t *off, const uint32_t *len, int32_t id) {
  if ((m->n + 1) * 2 > m->cap && strmap_grow(m, m->cap ? m->cap * 2 : 1024)) return -1;
  const char *s = arena + off[id];
  uint32_t h = bpe_hash(s, len[id]);
  size_t j = h & (m->cap - 1);
  for (; m->slots[j]; j = (j + 1) & (m->cap - 1)) {
    uint64_t v = m->slots[j];
    int32_t o = (int32_t)(uint32_t)v - 1;
    if ((uint32_t)(v >> 32) == h && len[o] == len[id] && memcmp(arena + off[o], s, len[id]) == 0) return 0;
  }
  m->slots[j] = (uint64_t)h << 32 | (uint32_t)(id + 1);
  m->n++;
  return 0;
}

void strmap_free(str_map *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static size_t pair_slot(uint64_t k, size_t cap) {
  k *= 0x9E3779B97F4A7C15ull;
  return (size_t)(k >> 20) & (cap - 1);
}

int pairmap_put(pair_map *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k), *v = malloc(cap * sizeof *v);
    if (!k || !v) {
      free(k), free(v);
      return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = pair_slot(m->keys[i], cap);
        while (k[j]) j = (j + 1) & (cap - 1);
        k[j] = m->keys[i], v[j] = m->vals[i];
      }
    free(m->keys), free(m->vals);
    m->keys = k, m->vals = v, m->cap = cap;
  }
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  size_t j = pair_slot(key, m->cap);
  for (; m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (m->keys[j] == key) return 0; /* a repeated merge: the first rank stays */
  m->keys[j] = key;
  m->vals[j] = (uint64_t)rank << 32 | (uint32_t)id;
  m->n++;
  return 0;
}

int pairmap_get(const pair_map *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
  if (!m->cap) return 0;
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  for (size_t j = pair_slot(key, m->cap); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (m->keys[j] == key) {
      *rank = (uint32_t)(m->vals[j] >> 32);
      *id = (int32_t)(uint32_t)m->vals[j];
      return 1;
    }
  return 0;
}

void pairmap_free(pair_map *m) {
  free(m->keys), free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---- the cache: words of up to CACHE_WORD bytes, dropped whole when full ---- */
enum { CACHE_WORD = 64, CACHE_MAX = 1 << 18 };
struct bpe_cache {
  str_map map;        /* entry index by the word's bytes */
  char *keys;         /* the words */
  size_t *koff;
  uint32_t *klen;
  size_t *ioff;       /* their ids in ids */
  uint32_t *icnt;
  int32_t *ids;
  size_t n, cap, keys_n, keys_cap, ids_n, ids_cap;
};

static void cache_clear(struct bpe_cache *c) {
  strmap_free(&c->map);
  c->n = c->keys_n = c->ids_n = 0;
}

static void cache_free(struct bpe_cache *c) {
  if (!c) return;
  strmap_free(&c->map);
  free(c->keys), free(c->koff), free(c->klen), free(c->ioff), free(c->icnt), free(c->ids);
  free(c);
}

static int grow(void **p, size_t *cap, size_t need, size_t el) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * el);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* Remembers the ids of word w; a failure only leaves it out. */
static void cache_put(struct bpe_cache *c, const unsigned char *w, size_t n, const int32_t *ids, size_t k) {
  if (c->n >= CACHE_MAX) cache_clear(c);
  if (c->n == c->cap) {
    size_t nc = c->cap ? c->cap * 2 : 1024;
    size_t *ko = realloc(c->koff, nc * sizeof *ko);
    if (ko) c->koff = ko;
    uint32_t *kl = realloc(c->klen, nc * sizeof *kl);
    if (kl) c->klen = kl;
    size_t *io = realloc(c->ioff, nc * sizeof *io);
    if (io) c->ioff = io;
    uint32_t *ic = realloc(c->icnt, nc * sizeof *ic);
    if (ic) c->icnt = ic;
    if (!ko || !kl || !io || !ic) return;
    c->cap = nc;
  }
  if (grow((void **)&c->keys, &c->keys_cap, c->keys_n + n, 1) ||
      grow((void **)&c->ids, &c->ids_cap, c->ids_n + k, sizeof *c->ids))
    return;
  size_t e = c->n;
  memcpy(c->keys + c->keys_n, w, n);
  c->koff[e] = c->keys_n, c->klen[e] = (uint32_t)n;
  memcpy(c->ids + c->ids_n, ids, k * sizeof *ids);
  c->ioff[e] = c->ids_n, c->icnt[e] = (uint32_t)k;
  if (strmap_put(&c->map, c->keys, c->koff, c->klen, (int32_t)e)) return;
  c->n++, c->keys_n += n, c->ids_n += k;
}

/* ---- merging ---- */
typedef struct {
  size_t start;
  uint32_t len;
  int32_t id;
  int32_t prev, next; /* -1: none */
} sym;
typedef struct {
  uint32_t rank;
  int32_t left, right;
  uint32_t len;   /* the pair's bytes when pushed: a changed pair is stale */
  int32_t id;     /* the merged token */
} cand;

static int cand_less(const cand *a, const cand *b, const sym *s) {
  return a->rank != b->rank ? a->rank < b->rank : s[a->left].start < s[b->left].start;
}

static void heap_push(cand *h, size_t *n, cand c, const sym *s) {
  size_t i = (*n)++;
  while (i) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&c, &h[p], s)) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = c;
}

static cand heap_pop(cand *h, size_t *n, const sym *s) {
  cand top = h[0], last = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, b = i;
    const cand *bv = &last;
    if (l < m && cand_less(&h[l], bv, s)) b = l, bv = &h[l];
    if (r < m && cand_less(&h[r], bv, s)) b = r;
    if (b == i) break;
    h[i] = h[b];
    i = b;
  }
  if (m) h[i] = last;
  return top;
}

/* The rank and merged id of the pair of symbols a, b, or 0 when they do not merge. */
static int pair_rank(const bpe *b, const unsigned char *w, const sym *x, const sym *y, uint32_t *rank, int32_t *id) {
  if (b->tiktoken) {
    int32_t t = strmap_get(&b->by_bytes, b->bytes, b->off, b->len, w + x->start, x->len + y->len);
    if (t < 0) return 0;
    *rank = (uint32_t)t, *id = t;
    return 1;
  }
  if (x->id < 0 || y->id < 0) return 0;
  return pairmap_get(&b->merges, x->id, y->id, rank, id);
}

static int push_ids(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
  if (*n == *cap && grow((void **)ids, cap, *n + 1, sizeof **ids)) return -1;
  (*ids)[(*n)++] = id;
  return 0;
}

static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (k > n) return 1;
  for (size_t j = 1; j < k; j++)
    if ((s[j] & 0xC0) != 0x80) return 1;
  return k;
}

int bpe_word(bpe *b, const unsigned char *w, size_t n, int32_t **ids, size_t *nids, size_t *cap) {
  if (!n) return 0;
  if (!b->cache && !(b->cache = calloc(1, sizeof *b->cache))) return -1;
  struct bpe_cache *c = b->cache;
  if (n <= CACHE_WORD) {
    int32_t e = strmap_get(&c->map, c->keys, c->koff, c->klen, w, n);
    if (e >= 0) {
      if (grow((void **)ids, cap, *nids + c->icnt[e], sizeof **ids)) return -1;
      memcpy(*ids + *nids, c->ids + c->ioff[e], c->icnt[e] * sizeof **ids);
      *nids += c->icnt[e];
      return 0;
    }
  }
  size_t first = *nids;
  if (b->ignore_merges || b->tiktoken) {
    int32_t t = strmap_get(&b->by_bytes, b->bytes, b->off, b->len, w, n);
    if (t >= 0) {
      if (push_ids(ids, nids, cap, t)) return -1;
      goto done;
    }
  }
  /* the symbols: bytes, or characters */
  if (grow(&b->sym, &b->sym_cap, n, sizeof(sym))) return -1;
  sym *s = b->sym;
  int32_t m = 0;
  for (size_t i = 0; i < n;) {
    size_t l = b->byte_level || b->tiktoken ? 1 : utf8_len(w + i, n - i);
    int32_t id = b->byte_level || b->tiktoken ? b->byte_ids[w[i]]
                                             : strmap_get(&b->by_bytes, b->bytes, b->off, b->len, w + i, l);
    s[m] = (sym){i, (uint32_t)l, id, m - 1, -1};
    if (m) s[m - 1].next = m;
    m++;
    i += l;
  }
  if (grow(&b->heap, &b->heap_cap, (size_t)m + 1, sizeof(cand))) return -1;
  cand *h = b->heap;
  size_t hn = 0;
  for (int32_t i = 0; i + 1 < m; i++) {
    uint32_t r;
    int32_t id;
    if (pair_rank(b, w, &s[i], &s[i + 1], &r, &id)) heap_push(h, &hn, (cand){r, i, i + 1, s[i].len + s[i + 1].len, id}, s);
  }
  while (hn) {
    cand top = heap_pop(h, &hn, s);
    sym *x = &s[top.left];
    if (!x->len || x->next != top.right || x->len + s[top.right].len != top.len) continue;
    sym *y = &s[top.right];
    x->len += y->len;
    x->id = top.id;
    x->next = y->next;
    if (y->next >= 0) s[y->next].prev = top.left;
    y->len = 0;
    /* at most two new pairs for one removed: the heap keeps its bound of m */
    uint32_t r;
    int32_t id;
    if (x->prev >= 0 && pair_rank(b, w, &s[x->prev], x, &r, &id)) {
      if (grow(&b->heap, &b->heap_cap, hn + 1, sizeof(cand))) return -1;
      h = b->heap;
      heap_push(h, &hn, (cand){r, x->prev, top.left, s[x->prev].len + x->len, id}, s);
    }
    if (x->next >= 0 && pair_rank(b, w, x, &s[x->next], &r, &id)) {
      if (grow(&b->heap, &b->heap_cap, hn + 1, sizeof(cand))) return -1;
      h = b->heap;
      heap_push(h, &hn, (cand){r, top.left, x->next, x->len + s[x->next].len, id}, s);
    }
  }
  for (int32_t i = 0; i >= 0 && m; i = s[i].next) {
    if (s[i].id >= 0) {
      if (push_ids(ids, nids, cap, s[i].id)) return -1;
      continue;
    }
    /* a character without a token */
    if (b->byte_fallback) {
      int all = 1;
      for (uint32_t k = 0; k < s[i].len; k++) all &= b->byte_ids[w[s[i].start + k]] >= 0;
      if (all) {
        for (uint32_t k = 0; k < s[i].len; k++)
          if (push_ids(ids, nids, cap, b->byte_ids[w[s[i].start + k]])) return -1;
        continue;
      }
    }
    if (b->unk >= 0) {
      if (b->fuse_unk && *nids > first && (*ids)[*nids - 1] == b->unk) continue;
      if (push_ids(ids, nids, cap, b->unk)) return -1;
    }
  }
done:
  if (n <= CACHE_WORD) cache_put(c, w, n, *ids + first, *nids - first);
  return 0;
}

void bpe_free(bpe *b) {
  free(b->bytes), free(b->off), free(b->len);
  strmap_free(&b->by_bytes);
  pairmap_free(&b->merges);
  cache_free(b->cache);
  free(b->sym), free(b->heap);
  memset(b, 0, sizeof *b);
}
