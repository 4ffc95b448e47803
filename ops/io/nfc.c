/* nfc.c: Unicode Normalization Form C (UAX #15) for the NFC normalizer:
   canonical decomposition, canonical ordering by combining class, then
   canonical composition (Hangul by arithmetic), with the tables of
   nfc_tables.h. Most text is NFC already: the quick check finds the first
   code point that may change, everything before the starter preceding it is
   copied as it is, and only the rest is normalized. */
#include <stdlib.h>
#include <string.h>

#include "nfc_tables.h"
#include "tokenizer.h"

#define NR(t) (sizeof t / sizeof t[0])
#define RAW 0x110000u /* RAW + b: a byte that is not UTF-8, kept as it is */
enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28,
       NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

/* The code point at s[i] (RAW + byte when it is not UTF-8) and its length. */
static size_t next_cp(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  size_t k = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
  if (k == 1 && c < 0x80) return *cp = c, 1;
  if (k < 2 || i + k > n) return *cp = RAW + c, 1;
  uint32_t v = c & (0x7F >> k);
  for (size_t j = 1; j < k; j++) {
    if ((s[i + j] & 0xC0) != 0x80) return *cp = RAW + c, 1;
    v = v << 6 | (s[i + j] & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shorter forms are not UTF-8 */
  if (v < least[k] || v > 0x10FFFF) return *cp = RAW + c, 1;
  return *cp = v, k;
}

static int ccc_of(uint32_t cp) {
  if (cp < uc_ccc[0][0]) return 0;
  size_t lo = 0, hi = NR(uc_ccc);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < uc_ccc[mid][0]) hi = mid;
    else if (cp > uc_ccc[mid][1]) lo = mid + 1;
    else return (int)uc_ccc[mid][2];
  }
  return 0;
}

/* The quick check; *starter: the offset of the last code point of class 0
   before the answer (where normalizing has to start). */
static size_t quick_check(const unsigned char *s, size_t n, uint32_t *cp_out, size_t *starter) {
  int prev = 0;
  *starter = 0;
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) { /* ASCII: NFC, of class 0, composing with nothing */
      prev = 0;
      *starter = i++;
      continue;
    }
    uint32_t cp;
    size_t k = next_cp(s, n, i, &cp);
    if (cp < uc_nfc_maybe[0][0] && cp < uc_ccc[0][0]) { /* Latin-1 and the like: as ASCII */
      prev = 0;
      *starter = i;
      i += k;
      continue;
    }
    int cc = cp < RAW ? ccc_of(cp) : 0;
    if (cp < RAW && (in_ranges(uc_nfc_maybe, NR(uc_nfc_maybe), cp) || (cc && prev > cc))) {
      *cp_out = cp;
      return i;
    }
    if (!cc) *starter = i;
    prev = cc;
    i += k;
  }
  return n;
}

size_t nfc_first_change(const unsigned char *s, size_t n, uint32_t *cp) {
  size_t starter;
  return quick_check(s, n, cp, &starter);
}

/* code points with their class: ccc << 21 | cp */
typedef struct {
  uint32_t *p;
  size_t n, cap;
} cps;
#define CP(x) ((x) & 0x1FFFFFu)
#define CCC(x) ((int)((x) >> 21))

/* Appends cp, moving a mark back past marks of a higher class (a stable
   sort: canonical ordering). */
static int push(cps *v, uint32_t cp) {
  if (v->n == v->cap) {
    size_t c = v->cap ? v->cap * 2 : 64;
    uint32_t *q = realloc(v->p, c * sizeof *q);
    if (!q) return -1;
    v->p = q, v->cap = c;
  }
  int cc = cp < RAW ? ccc_of(cp) : 0;
  size_t i = v->n++;
  for (; cc && i > 0 && CCC(v->p[i - 1]) > cc; i--) v->p[i] = v->p[i - 1];
  v->p[i] = (uint32_t)cc << 21 | cp;
  return 0;
}

static long find_decomp(uint32_t cp) {
  size_t lo = 0, hi = NR(uc_decomp);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < uc_decomp[mid][0]) hi = mid;
    else if (cp > uc_decomp[mid][0]) lo = mid + 1;
    else return (long)mid;
  }
  return -1;
}

static int decompose(cps *v, uint32_t cp) {
  if (cp - SBASE < SCOUNT) {
    uint32_t s = cp - SBASE, t = s % TCOUNT;
    if (push(v, LBASE + s / NCOUNT) || push(v, VBASE + s % NCOUNT / TCOUNT)) return -1;
    return t ? push(v, TBASE + t) : 0;
  }
  long d = cp < 0xC0 || cp >= RAW ? -1 : find_decomp(cp);
  if (d < 0) return push(v, cp);
  if (decompose(v, uc_decomp[d][1])) return -1;
  return uc_decomp[d][2] ? decompose(v, uc_decomp[d][2]) : 0;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
  if (a - LBASE < LCOUNT && b - VBASE < VCOUNT) return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
  if (a - SBASE < SCOUNT && (a - SBASE) % TCOUNT == 0 && b - TBASE - 1 < TCOUNT - 1) return a + (b - TBASE);
  size_t lo = 0, hi = NR(uc_comp);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *r = uc_decomp[uc_comp[mid]];
    if (a < r[1] || (a == r[1] && b < r[2])) hi = mid;
    else if (a > r[1] || b > r[2]) lo = mid + 1;
    else return r[0];
  }
  return 0;
}

/* Canonical composition in place: a mark or starter joins the last starter
   unless a code point between blocks it (one of its class or higher, or any
   for a starter). */
static void compose_all(cps *v) {
  size_t w = 0;
  long st = -1;
  int last = 0;
  for (size_t r = 0; r < v->n; r++) {
    uint32_t x = v->p[r];
    int cc = CCC(x);
    if (st >= 0 && (last < cc || last == 0)) {
      uint32_t c = compose(CP(v->p[st]), CP(x));
      if (c) {
        v->p[st] = c; /* a composite is of class 0 */
        continue;
      }
    }
    if (!cc) st = (long)w;
    last = cc;
    v->p[w++] = x;
  }
  v->n = w;
}

static int reserve(char **out, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  char *q = realloc(*out, c);
  if (!q) return -1;
  *out = q, *cap = c;
  return 0;
}

int nfc_normalize(const unsigned char *s, size_t n, char **out, size_t *len, size_t *cap) {
  uint32_t cp;
  size_t start, at = quick_check(s, n, &cp, &start);
  if (at == n) start = n;
  cps v = {0};
  for (size_t i = start; i < n;) {
    uint32_t c;
    i += next_cp(s, n, i, &c);
    if (decompose(&v, c)) goto oom;
  }
  compose_all(&v);
  if (reserve(out, cap, start + 4 * v.n + 1)) goto oom;
  if (start) memcpy(*out, s, start);
  size_t o = start;
  for (size_t i = 0; i < v.n; i++) {
    uint32_t c = CP(v.p[i]);
    unsigned char *d = (unsigned char *)*out + o;
    if (c >= RAW) d[0] = (unsigned char)(c - RAW), o += 1;
    else if (c < 0x80) d[0] = (unsigned char)c, o += 1;
    else if (c < 0x800) d[0] = (unsigned char)(0xC0 | c >> 6), d[1] = (unsigned char)(0x80 | (c & 0x3F)), o += 2;
    else if (c < 0x10000)
      d[0] = (unsigned char)(0xE0 | c >> 12), d[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F)),
      d[2] = (unsigned char)(0x80 | (c & 0x3F)), o += 3;
    else
      d[0] = (unsigned char)(0xF0 | c >> 18), d[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F)),
      d[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F)), d[3] = (unsigned char)(0x80 | (c & 0x3F)), o += 4;
  }
  free(v.p);
  *len = o;
  return 0;
oom:
  free(v.p);
  return -1;
}
