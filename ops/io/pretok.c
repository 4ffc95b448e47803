/* pretok.c: the pre-tokenizers' regexes as scanners over UTF-8 code points
   (each the leftmost alternative that matches, as the regex engines pick),
   with the classes of unicode_tables.h. Bytes that are not UTF-8 are one
   code point each of no class (as punctuation). */
#include <string.h>

#include "tokenizer.h"
#include "unicode_tables.h"

enum { C_OTHER = 0, C_L = 1, C_N = 2, C_WS = 4, C_NL = 8 | 4 };

int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}
#define NR(t) (sizeof t / sizeof t[0])

static unsigned char ascii_class[128];
static int ascii_ready;

static void ascii_init(void) {
  for (int c = 0; c < 128; c++) {
    int k = C_OTHER;
    if (in_ranges(uc_letter, NR(uc_letter), (uint32_t)c)) k = C_L;
    else if (in_ranges(uc_number, NR(uc_number), (uint32_t)c)) k = C_N;
    else if (in_ranges(uc_space, NR(uc_space), (uint32_t)c)) k = C_WS;
    if (c == '\r' || c == '\n') k = C_NL;
    ascii_class[c] = (unsigned char)k;
  }
  __atomic_store_n(&ascii_ready, 1, __ATOMIC_RELEASE);
}

/* The class of the code point at s[i] and its length in bytes. */
static int cp_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
  unsigned c = s[i];
  if (c < 0x80) {
    *len = 1;
    return ascii_class[c];
  }
  uint32_t cp;
  size_t k;
  if (c >= 0xC2 && c <= 0xDF) cp = c & 0x1F, k = 2;
  else if (c >= 0xE0 && c <= 0xEF) cp = c & 0x0F, k = 3;
  else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07, k = 4;
  else {
    *len = 1;
    return C_OTHER;
  }
  if (i + k > n) {
    *len = 1;
    return C_OTHER;
  }
  for (size_t j = 1; j < k; j++) {
    if ((s[i + j] & 0xC0) != 0x80) {
      *len = 1;
      return C_OTHER;
    }
    cp = cp << 6 | (s[i + j] & 0x3F);
  }
  if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    *len = 1;
    return C_OTHER;
  }
  *len = k;
  if (in_ranges(uc_letter, NR(uc_letter), cp)) return C_L;
  if (in_ranges(uc_number, NR(uc_number), cp)) return C_N;
  if (in_ranges(uc_space, NR(uc_space), cp)) return C_WS;
  return C_OTHER;
}

/* The end of a run of code points of class mask (any bit, or none for
   mask 0: of no class), from i; *count gets how many (up to max). */
static size_t run(const unsigned char *s, size_t n, size_t i, int want, size_t max, size_t *count) {
  size_t c = 0, l;
  while (i < n && c < max) {
    int k = cp_at(s, n, i, &l);
    if (want ? !(k & want) : k != C_OTHER) break;
    i += l;
    c++;
  }
  if (count) *count = c;
  return i;
}

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's 't 're 've 'm 'll 'd (case-blind when icase): the end, or 0. */
static size_t contraction(const unsigned char *s, size_t n, size_t i, int icase) {
  if (s[i] != '\'' || i + 1 >= n) return 0;
  int a = icase ? lower(s[i + 1]) : s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= n) return 0;
  int b = icase ? lower(s[i + 2]) : s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

/* \s+(?!\S)|\s+ from i (a white space): the run, less its last code point
   when a non-space follows and the run has two or more. */
static size_t spaces(const unsigned char *s, size_t n, size_t i) {
  size_t e = i, last = i, l;
  while (e < n && (cp_at(s, n, e, &l) & C_WS)) last = e, e += l;
  if (e < n && last > i) return last;
  return e;
}

static size_t gpt2(const unsigned char *s, size_t n, size_t i) {
  size_t e, l;
  if ((e = contraction(s, n, i, 0))) return e;
  size_t j = i + (s[i] == ' ' && i + 1 < n);
  int k = cp_at(s, n, j, &l);
  if (k == C_L) return run(s, n, j, C_L, (size_t)-1, NULL);
  if (k == C_N) return run(s, n, j, C_N, (size_t)-1, NULL);
  if (k == C_OTHER) return run(s, n, j, 0, (size_t)-1, NULL);
  return spaces(s, n, i);
}

static size_t cl100k(const unsigned char *s, size_t n, size_t i, int digits, int tik) {
  size_t e, l;
  if ((e = contraction(s, n, i, 1))) return e;
  int k = cp_at(s, n, i, &l);
  if (k == C_L) return run(s, n, i, C_L, (size_t)-1, NULL);
  if (k != C_NL && k != C_N && i + l < n) { /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t l2;
    if (cp_at(s, n, i + l, &l2) == C_L) return run(s, n, i + l, C_L, (size_t)-1, NULL);
  }
  if (k == C_N) return run(s, n, i, C_N, (size_t)digits, NULL);
  size_t j = i + (s[i] == ' ' && i + 1 < n);
  if (cp_at(s, n, j, &l) == C_OTHER) { /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    e = run(s, n, j, 0, (size_t)-1, NULL);
    while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
    return e;
  }
  /* white space from i */
  size_t end = i, nl = 0;
  int has_nl = 0;
  while (end < n && ((k = cp_at(s, n, end, &l)) & C_WS)) {
    if (k == C_NL) nl = end, has_nl = 1;
    end += l;
  }
  if (tik && end == n) return n;       /* \s++$ */
  if (has_nl) return nl + 1;           /* \s*[\r\n]+ */
  return spaces(s, n, i);
}

/* A word is "▁" and what follows up to the next "▁". */
static size_t metaspace(const unsigned char *s, size_t n, size_t i) {
  size_t e = i;
  if (n - e >= 3 && memcmp(s + e, "\xE2\x96\x81", 3) == 0) e += 3;
  while (e < n && !(n - e >= 3 && memcmp(s + e, "\xE2\x96\x81", 3) == 0)) e++;
  return e > i ? e : n;
}

size_t pretok_next(pretok_kind kind, const unsigned char *s, size_t n, size_t pos) {
  if (!__atomic_load_n(&ascii_ready, __ATOMIC_ACQUIRE)) ascii_init();
  switch (kind) {
  case PRETOK_GPT2: return gpt2(s, n, pos);
  case PRETOK_CL100K: return cl100k(s, n, pos, 3, 0);
  case PRETOK_CL100K_TIK: return cl100k(s, n, pos, 3, 1);
  case PRETOK_QWEN2: return cl100k(s, n, pos, 1, 0);
  case PRETOK_METASPACE: return metaspace(s, n, pos);
  default: return n;
  }
}

static const struct {
  const char *re;
  pretok_kind kind;
} known[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", PRETOK_GPT2},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PRETOK_CL100K},
    {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s",
     PRETOK_CL100K_TIK},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PRETOK_QWEN2},
};

int pretok_of_regex(const char *pattern) {
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(known[i].re, pattern) == 0) return (int)known[i].kind;
  return -1;
}
