/* tokenizer.h: the parts of the tokenizers (tokenizer.c loads and encodes,
   bpe.c merges, pretok.c splits text into words). */
#ifndef ZORCH_IO_TOKENIZER_H
#define ZORCH_IO_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

/* ---- pretok.c ---- */
typedef enum {
  PRETOK_NONE = 0,     /* the whole segment is one word */
  PRETOK_GPT2,         /* GPT-2's pattern */
  PRETOK_CL100K,       /* Llama 3's (the first cl100k_base pattern) */
  PRETOK_CL100K_TIK,   /* tiktoken's cl100k_base (\s++$ before \s*[\r\n]) */
  PRETOK_QWEN2,        /* Llama 3's with \p{N} one at a time */
  PRETOK_METASPACE,    /* a word before each "▁" (Metaspace with split) */
} pretok_kind;
/* The end of the word that starts at pos < n. */
size_t pretok_next(pretok_kind k, const unsigned char *s, size_t n, size_t pos);
/* Whether cp is in one of n sorted inclusive ranges. */
int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp);
/* The kind whose regex is pattern, or -1. */
int pretok_of_regex(const char *pattern);

/* ---- nfc.c: Unicode NFC (bytes that are not UTF-8 stay as they are) ---- */
/* The offset of the first code point NFC may change (*cp set), or n when
   NFC leaves s as it is (its quick check). */
size_t nfc_first_change(const unsigned char *s, size_t n, uint32_t *cp);
/* The NFC of s[0..n) into *out (grown as needed, *cap its size), *len bytes;
   0, or -1 out of memory. */
int nfc_normalize(const unsigned char *s, size_t n, char **out, size_t *len, size_t *cap);

/* ---- bpe.c: maps of byte strings and of id pairs ---- */
typedef struct {
  uint64_t *slots; /* hash << 32 | (id + 1); 0: empty */
  size_t cap;      /* a power of two */
  size_t n;
} str_map;
typedef struct {
  uint64_t *keys;  /* a << 32 | b, +1 so that 0 is empty */
  uint64_t *vals;  /* rank << 32 | merged id */
  size_t cap, n;
} pair_map;

typedef struct bpe {
  /* the token bytes the model merges into (byte-level: raw bytes) */
  char *bytes;
  size_t *off; /* off[id], len[id]: NULL len for an id without a token */
  uint32_t *len;
  int32_t n_ids;
  str_map by_bytes;
  pair_map merges;     /* tokenizer.json; tiktoken merges by the bytes' rank */
  int tiktoken;
  int ignore_merges;   /* a word that is a token is that token */
  int byte_level;      /* the symbols start as bytes, else as UTF-8 characters */
  int byte_fallback;   /* a character without a token becomes <0xNN> tokens */
  int32_t byte_ids[256]; /* byte_fallback's or byte-level's token per byte, -1 none */
  int32_t unk;         /* -1: none */
  int fuse_unk;
  struct bpe_cache *cache; /* words already merged */
  /* scratch */
  void *sym; size_t sym_cap;
  void *heap; size_t heap_cap;
} bpe;

uint32_t bpe_hash(const void *p, size_t n);
/* Finds s in m, with the strings' arena to compare against: -1 when absent. */
int32_t strmap_get(const str_map *m, const char *arena, const size_t *off, const uint32_t *len, const void *s, size_t n);
/* Adds id (its bytes at arena + off[id]); 0, or -1 out of memory. An id whose
   string is there already is not added (the first stays). */
int strmap_put(str_map *m, const char *arena, const size_t *off, const uint32_t *len, int32_t id);
void strmap_free(str_map *m);
int pairmap_put(pair_map *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
int pairmap_get(const pair_map *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);
void pairmap_free(pair_map *m);
/* Appends the ids of one word to *ids (grown as needed); 0, or -1 out of memory. */
int bpe_word(bpe *b, const unsigned char *w, size_t n, int32_t **ids, size_t *nids, size_t *cap);
void bpe_free(bpe *b);
#endif
