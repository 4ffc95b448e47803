/* test_nfc.c: zorch_nfc against Python's unicodedata.normalize("NFC")
   (tests/tokenizer/golden_nfc.tsv, written by gen_tokenizer.py): every row
   of the golden, and every other code point, which must be its own NFC. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "zorch_tokenizer.h"

static int hexv(int c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static size_t unhex(const char *h, size_t n, char *out) {
  for (size_t i = 0; i < n / 2; i++) out[i] = (char)(hexv(h[2 * i]) * 16 + hexv(h[2 * i + 1]));
  return n / 2;
}

static size_t utf8(uint32_t c, char *d) {
  if (c < 0x80) return d[0] = (char)c, 1;
  if (c < 0x800) return d[0] = (char)(0xC0 | c >> 6), d[1] = (char)(0x80 | (c & 0x3F)), 2;
  if (c < 0x10000) return d[0] = (char)(0xE0 | c >> 12), d[1] = (char)(0x80 | (c >> 6 & 0x3F)), d[2] = (char)(0x80 | (c & 0x3F)), 3;
  d[0] = (char)(0xF0 | c >> 18), d[1] = (char)(0x80 | (c >> 12 & 0x3F)), d[2] = (char)(0x80 | (c >> 6 & 0x3F));
  d[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

static int nfc_is(const char *s, size_t n, const char *want, size_t wn) {
  char *out = NULL;
  size_t on = 0;
  int good = !zorch_nfc(s, n, &out, &on) && on == wn && memcmp(out, want, wn) == 0 && out[on] == 0;
  free(out);
  return good;
}

int main(void) {
  FILE *f = fopen("tokenizer/golden_nfc.tsv", "rb");
  if (!ok(f != NULL, "golden_nfc.tsv opens")) return done_testing();
  static unsigned char listed[0x110000];
  static char line[4096];
  char in[1024], want[1024];
  int rows = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    if (!tab) break;
    size_t a = (size_t)(tab - line), b = strcspn(tab + 1, "\r\n");
    size_t n = unhex(line, a, in), wn = unhex(tab + 1, b, want);
    unsigned c = n ? (unsigned char)in[0] : 0;
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (n == len) { /* one code point: marked, the loop below skips it */
      uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
      for (size_t j = 1; j < len; j++) cp = cp << 6 | ((unsigned char)in[j] & 0x3F);
      if (cp < 0x110000) listed[cp] = 1;
    }
    if (!nfc_is(in, n, want, wn) && bad++ < 5) printf("#   NFC of %.*s differs\n", (int)a, line);
    rows++;
  }
  fclose(f);
  ok(rows > 4000 && !bad, "NFC equals unicodedata's on the golden's %d texts (%d differ)", rows, bad);
  int same = 0, moved = 0;
  for (uint32_t c = 0; c < 0x110000; c++) {
    if (listed[c] || (c >= 0xD800 && c <= 0xDFFF)) continue;
    char s[4];
    size_t n = utf8(c, s);
    if (nfc_is(s, n, s, n)) same++;
    else if (moved++ < 5) printf("#   U+%04X is changed\n", (unsigned)c);
  }
  ok(!moved && same > 1000000, "every other code point is its own NFC (%d, %d changed)", same, moved);
  /* not UTF-8: kept, and it blocks composition */
  ok(nfc_is("e\xFF\xCC\x81", 4, "e\xFF\xCC\x81", 4), "a byte that is not UTF-8 is kept and blocks composition");
  ok(nfc_is("\xC0\x80" "e\xCC\x81", 5, "\xC0\x80\xC3\xA9", 4), "an overlong form is kept as bytes");
  ok(nfc_is("e\xCC", 2, "e\xCC", 2), "a cut sequence is kept");
  ok(nfc_is("", 0, "", 0), "the empty text");
  char *out;
  size_t on;
  ok(zorch_nfc(NULL, 1, &out, &on) == ZORCH_ERR_ARG && out == NULL, "NULL text is refused");
  ok(zorch_nfc("a", 1, NULL, &on) == ZORCH_ERR_ARG, "NULL out is refused");
  return done_testing();
}
