/* test_io.c: the file formats of ops/io through the public API: npy, IDX
   (plain and gzip), CSV, token files, the zorch.save tree and TensorBoard
   event files round-trip over dtypes and shapes, and corrupt, truncated or
   hostile files are refused with ZORCH_ERR_IO and a message naming the file
   and the fault. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tap.h"

static char dir[256];

static const char *file(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(p, 1, n, f);
    fclose(f);
  }
}

static void write_gz(const char *path, const void *p, size_t n) {
  gzFile f = gzopen(path, "wb");
  if (f) {
    gzwrite(f, p, (unsigned)n);
    gzclose(f);
  }
}

/* The file's bytes (malloc'd; *n its size), or NULL. */
static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(size > 0 ? (size_t)size : 1);
  *n = p ? fread(p, 1, (size_t)size, f) : 0;
  fclose(f);
  return p;
}

/* The last error is `st`, names path and holds text. */
static int refused_with(zorch_status got, zorch_status st, const char *path, const char *text) {
  const char *m = zorch_last_error();
  int good = got == st && zorch_last_status() == st && (!path || strstr(m, path)) && (!text || strstr(m, text));
  if (!good) printf("#   status %d (want %d), message: %s\n", (int)got, (int)st, m);
  return good;
}

/* Element-wise equality of two tensors of one dtype and shape. */
static int same_tensor(zorch_tensor *a, zorch_tensor *b) {
  if (!a || !b || zorch_tensor_dtype(a) != zorch_tensor_dtype(b) || zorch_tensor_ndim(a) != zorch_tensor_ndim(b))
    return 0;
  for (int d = 0; d < zorch_tensor_ndim(a); d++)
    if (zorch_tensor_shape(a)[d] != zorch_tensor_shape(b)[d]) return 0;
  int64_t n = zorch_tensor_numel(a);
  double *x = malloc(sizeof *x * (size_t)(n ? n : 1)), *y = malloc(sizeof *y * (size_t)(n ? n : 1));
  int good = x && y && !zorch_tensor_to_doubles(a, x, n) && !zorch_tensor_to_doubles(b, y, n);
  for (int64_t i = 0; good && i < n; i++) good = x[i] == y[i] || (isnan(x[i]) && isnan(y[i]));
  free(x);
  free(y);
  return good;
}

/* ---- npy -------------------------------------------------------------------- */
/* A version-1.0 file of the header dict, framed as NumPy frames it (spaces and
   a newline to a multiple of 64), no data; its length. */
static size_t npy_frame(unsigned char *f, const char *dict) {
  size_t d = strlen(dict), total = (10 + d + 1 + 63) & ~(size_t)63;
  memcpy(f, "\x93NUMPY\x01\x00", 8);
  f[8] = (unsigned char)((total - 10) & 0xff), f[9] = (unsigned char)((total - 10) >> 8);
  memset(f + 10, ' ', total - 10);
  memcpy(f + 10, dict, d);
  f[total - 1] = '\n';
  return total;
}

static void test_npy(void) {
  static const zorch_dtype dts[] = {ZORCH_F32, ZORCH_F64, ZORCH_F16, ZORCH_I32, ZORCH_I64, ZORCH_U8, ZORCH_I8, ZORCH_BOOL};
  static const int64_t shapes[][8] = {{0}, {5}, {2, 3}, {0, 4}, {1, 2, 1, 2, 1, 2, 1, 2}};
  static const int ndims[] = {0, 1, 2, 2, 8};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
      zorch_tensor *r = zorch_randn(ndims[s], shapes[s], ZORCH_F64, CPU, NULL);
      zorch_tensor *m = r ? zorch_mul_scalar(r, 50) : NULL;
      zorch_tensor *t = m ? zorch_to_dtype(m, dts[i]) : NULL, *back = NULL;
      const char *p = file("a.npy");
      zorch_status st = zorch_npy_save(p, t);
      zorch_status lt = st ? st : zorch_npy_load(p, &back);
      ok(!st && !lt && same_tensor(t, back), "npy round trip of %s, %d dims", zorch_dtype_name(dts[i]), ndims[s]);
      zorch_tensor_free(back);
      zorch_tensor_free(t);
      zorch_tensor_free(m);
      zorch_tensor_free(r);
    }
  }
  /* the header NumPy writes: version 1.0, a 64-byte multiple, "(3,)" for one dim */
  zorch_tensor *v = zorch_arange(0, 3, 1, ZORCH_F32, CPU), *back = NULL;
  zorch_npy_save(file("v.npy"), v);
  size_t n = 0;
  unsigned char *raw = read_bytes(file("v.npy"), &n);
  size_t hl = raw && n > 10 ? (size_t)(raw[8] | raw[9] << 8) : 0;
  ok(raw && memcmp(raw, "\x93NUMPY\x01\x00", 8) == 0 && (10 + hl) % 64 == 0 && n == 10 + hl + 12 &&
         memmem(raw, n, "'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 55) && raw[9 + hl] == '\n',
     "npy header as NumPy writes it (%zu bytes)", hl);
  /* a view that is not contiguous is written in its logical order */
  zorch_tensor *m = zorch_arange(0, 6, 1, ZORCH_I64, CPU), *m2 = zorch_view(m, SHAPE(2, 3)), *tr = zorch_transpose(m2, 0, 1);
  ok(!zorch_npy_save(file("t.npy"), tr) && !zorch_npy_load(file("t.npy"), &back) && same_tensor(tr, back),
     "a transposed view round-trips in its logical order");
  zorch_tensor_free(back);
  back = NULL;
  zorch_tensor *bf = zorch_to_dtype(v, ZORCH_BF16);
  ok(refused_with(zorch_npy_save(file("bf.npy"), bf), ZORCH_ERR_DTYPE, NULL, "bfloat16"), "bfloat16 is refused");
  ok(access(file("bf.npy"), F_OK) != 0, "a refused save leaves no file");
  zorch_tensor_free(bf);
  zorch_tensor_free(tr);
  zorch_tensor_free(m2);
  zorch_tensor_free(m);
  zorch_tensor_free(v);

  /* hostile files: each refused, naming the file and the fault */
  unsigned char good[256];
  memcpy(good, raw, n);
  free(raw);
  struct {
    const char *desc, *text;
    size_t len;
    const char *want;
  } cases[] = {
      {"bad magic", "\x93NUMPX\x01\x00\x10\x00{}", 12, "bad magic"},
      {"an empty file", "", 0, "bad magic"},
      {"version 9", "\x93NUMPY\x09\x00\x10\x00{}", 12, "unsupported .npy version"},
      {"a header length past the limit", "\x93NUMPY\x02\x00\xff\xff\xff\x7f{}", 14, "bad header length"},
      {"a header cut short", "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4'", 25, "truncated header"},
      {"Fortran order", "\x93NUMPY\x01\x00\x38\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 66,
       "Fortran order"},
      {"big-endian floats", "\x93NUMPY\x01\x00\x39\x00{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 67,
       "unsupported dtype"},
      {"a negative dim", "\x93NUMPY\x01\x00\x3a\x00{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 68,
       "bad shape"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *p = file("bad.npy");
    write_bytes(p, cases[i].text, cases[i].len);
    back = (zorch_tensor *)1;
    ok(refused_with(zorch_npy_load(p, &back), ZORCH_ERR_IO, p, cases[i].want) && back == NULL,
       "npy: %s is refused", cases[i].desc);
  }
  /* well-framed headers (newline, 64-byte multiple) whose shapes do not fit */
  struct {
    const char *desc, *dict, *want;
  } shapes_bad[] = {
      {"a huge shape", "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 8), }", "too many elements"},
      {"a shape far past the data", "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,), }", "truncated data"},
  };
  for (size_t i = 0; i < sizeof shapes_bad / sizeof shapes_bad[0]; i++) {
    unsigned char f[256];
    size_t len = npy_frame(f, shapes_bad[i].dict);
    write_bytes(file("bad.npy"), f, len);
    ok(refused_with(zorch_npy_load(file("bad.npy"), &back), ZORCH_ERR_IO, NULL, shapes_bad[i].want),
       "npy: %s is refused", shapes_bad[i].desc);
  }
  /* a header length a few bytes short, the file as long as the shape then
     needs: the data would be read from the wrong offset */
  for (int d = 0; d < 3; d++) {
    int by = (int[]){1, 8, 64}[d];
    unsigned char f[256];
    memcpy(f, good, n);
    size_t hl = (size_t)(f[8] | f[9] << 8) - (size_t)by;
    f[8] = (unsigned char)(hl & 0xff), f[9] = (unsigned char)(hl >> 8);
    write_bytes(file("hlen.npy"), f, n - (size_t)by);
    ok(refused_with(zorch_npy_load(file("hlen.npy"), &back), ZORCH_ERR_IO, file("hlen.npy"), "a wrong header length?"),
       "npy: a header length %d bytes short is refused", by);
    write_bytes(file("hlen.npy"), f, n);
    ok(refused_with(zorch_npy_load(file("hlen.npy"), &back), ZORCH_ERR_IO, NULL, "a wrong header length?"),
       "npy: ... also with the file whole");
  }
  {
    /* ended by a newline, but at byte 80 (a multiple of 16, as NumPy before 64-byte padding wrote) */
    unsigned char f[128];
    static const char dict[] = "{'descr':'<f4','fortran_order':False,'shape':(3,)}";
    size_t h = 80 - 10;
    memcpy(f, "\x93NUMPY\x01\x00", 8);
    f[8] = (unsigned char)h, f[9] = 0;
    memset(f + 10, ' ', h);
    memcpy(f + 10, dict, strlen(dict));
    f[10 + h - 1] = '\n';
    memset(f + 10 + h, 0, 12);
    write_bytes(file("align.npy"), f, 10 + h + 12);
    ok(refused_with(zorch_npy_load(file("align.npy"), &back), ZORCH_ERR_IO, NULL, "not at a multiple of 64"),
       "npy: a header not padded to 64 bytes is refused");
  }
  write_bytes(file("short.npy"), good, n - 1);
  ok(refused_with(zorch_npy_load(file("short.npy"), &back), ZORCH_ERR_IO, file("short.npy"), "truncated data"),
     "npy: data one byte short is refused");
  good[n] = 0;
  write_bytes(file("long.npy"), good, n + 1);
  ok(refused_with(zorch_npy_load(file("long.npy"), &back), ZORCH_ERR_IO, NULL, "more than the shape's"),
     "npy: a byte past the data is refused");
  ok(refused_with(zorch_npy_load(file("none.npy"), &back), ZORCH_ERR_IO, "none.npy", "cannot open"),
     "npy: a missing file");
  ok(refused_with(zorch_npy_load(dir, &back), ZORCH_ERR_IO, dir, "not a regular file"), "npy: a folder");
  ok(zorch_npy_load(NULL, &back) == ZORCH_ERR_ARG && zorch_npy_load(file("v.npy"), NULL) == ZORCH_ERR_ARG,
     "npy: NULL arguments are ZORCH_ERR_ARG");
}

/* ---- IDX -------------------------------------------------------------------- */
/* An IDX header of type `type` and the given dims into buf; its length. */
static size_t idx_header(unsigned char *buf, int type, int nd, const uint32_t *dims) {
  buf[0] = buf[1] = 0;
  buf[2] = (unsigned char)type;
  buf[3] = (unsigned char)nd;
  for (int i = 0; i < nd; i++)
    for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
  return 4 + 4 * (size_t)nd;
}

static void test_idx(void) {
  /* each type's big-endian values of (2, 3), plain and gzip */
  static const struct {
    int type, size;
    zorch_dtype dt;
    double v[6];
  } types[] = {{0x08, 1, ZORCH_U8, {0, 1, 127, 128, 200, 255}},
               {0x09, 1, ZORCH_I32, {0, 1, -1, 127, -128, 5}},
               {0x0B, 2, ZORCH_I32, {0, 300, -300, 32767, -32768, 7}},
               {0x0C, 4, ZORCH_I32, {0, 70000, -70000, 2147483647, -2147483647.0 - 1, 9}},
               {0x0D, 4, ZORCH_F32, {0, 1.5, -2.25, 1e30, -1e-30, 3}},
               {0x0E, 8, ZORCH_F64, {0, 1.5, -2.25, 1e300, -1e-300, 3.14159265358979}}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    unsigned char buf[128];
    size_t n = idx_header(buf, types[i].type, 2, (const uint32_t[]){2, 3});
    for (int k = 0; k < 6; k++) {
      double x = types[i].v[k];
      uint64_t u = 0;
      if (types[i].type == 0x0D) {
        float f = (float)x;
        uint32_t w;
        memcpy(&w, &f, 4);
        u = w;
      } else if (types[i].type == 0x0E) {
        memcpy(&u, &x, 8);
      } else {
        u = (uint64_t)(int64_t)x;
      }
      for (int b = 0; b < types[i].size; b++) buf[n++] = (unsigned char)(u >> (8 * (types[i].size - 1 - b)));
    }
    for (int gz = 0; gz < 2; gz++) {
      const char *p = file(gz ? "t.idx.gz" : "t.idx");
      (gz ? write_gz : write_bytes)(p, buf, n);
      zorch_tensor *t = NULL;
      zorch_status st = zorch_idx_load(p, &t);
      int good = !st && zorch_tensor_dtype(t) == types[i].dt && zorch_tensor_ndim(t) == 2 &&
                 zorch_tensor_shape(t)[0] == 2 && zorch_tensor_shape(t)[1] == 3;
      for (int k = 0; good && k < 6; k++)
        good = types[i].type == 0x0D ? at(t, k) == (double)(float)types[i].v[k] : at(t, k) == types[i].v[k];
      ok(good, "IDX type 0x%02x (%s) read as %s (2, 3)", types[i].type, gz ? "gzip" : "plain",
         zorch_dtype_name(types[i].dt));
      zorch_tensor_free(t);
    }
  }
  unsigned char buf[4200];
  zorch_tensor *t = NULL;
  size_t n = idx_header(buf, 0x08, 2, (const uint32_t[]){0, 28});
  write_bytes(file("empty.idx"), buf, n);
  ok(!zorch_idx_load(file("empty.idx"), &t) && zorch_tensor_numel(t) == 0 && zorch_tensor_shape(t)[1] == 28,
     "an IDX file of 0 items has shape (0, 28)");
  zorch_tensor_free(t);

  struct {
    const char *desc;
    int type, nd;
    uint32_t dims[9];
    size_t data;
    const char *want;
  } cases[] = {
      {"an unknown type byte", 0x0A, 1, {2}, 2, "unknown IDX type byte 0x0a"},
      {"0 dims", 0x08, 0, {0}, 0, "0 dims"},
      {"9 dims", 0x08, 9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, "9 dims"},
      {"truncated data", 0x08, 2, {10, 10}, 57, "the dims need 100 bytes, the file holds 57"},
      {"dims overflowing", 0x0E, 3, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, 3, "dims too large"},
      {"dims far past the data", 0x08, 3, {60000, 28, 28}, 1000, "truncated data"},
      {"more data than the dims", 0x08, 2, {2, 2}, 6, "more data than the dims"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    n = idx_header(buf, cases[i].type, cases[i].nd, cases[i].dims);
    memset(buf + n, 'z', cases[i].data);
    for (int gz = 0; gz < 2; gz++) {
      const char *p = file(gz ? "bad.idx.gz" : "bad.idx");
      (gz ? write_gz : write_bytes)(p, buf, n + cases[i].data);
      t = (zorch_tensor *)1;
      ok(refused_with(zorch_idx_load(p, &t), ZORCH_ERR_IO, p, cases[i].want) && !t, "IDX: %s (%s) is refused",
         cases[i].desc, gz ? "gzip" : "plain");
    }
  }
  write_bytes(file("zero.idx"), "", 0);
  ok(refused_with(zorch_idx_load(file("zero.idx"), &t), ZORCH_ERR_IO, "zero.idx", "truncated header"), "IDX: an empty file");
  write_bytes(file("magic.idx"), "\1\2\3\4xxxxxxxx", 12);
  ok(refused_with(zorch_idx_load(file("magic.idx"), &t), ZORCH_ERR_IO, NULL, "not an IDX file (magic 01 02 03 04"),
     "IDX: the wrong magic");
  write_bytes(file("dims.idx"), "\0\0\x08\x03\0\0\0\x05", 8);
  ok(refused_with(zorch_idx_load(file("dims.idx"), &t), ZORCH_ERR_IO, NULL, "truncated header (the dims)"),
     "IDX: dims cut short");
  static const unsigned char garbage[] = "\x1f\x8b\x08\0\0\0\0\0\0\x03\xff\0\x11\xff\0\x11\xff\0\x11\xff\0\x11";
  write_bytes(file("garbage.gz"), garbage, sizeof garbage - 1);
  ok(refused_with(zorch_idx_load(file("garbage.gz"), &t), ZORCH_ERR_IO, "garbage.gz", "load_idx"), "IDX: bad gzip data");
  n = idx_header(buf, 0x08, 2, (const uint32_t[]){64, 64});
  for (size_t i = 0; i < 4096; i++) buf[n + i] = (unsigned char)(i * 7);
  write_gz(file("good.gz"), buf, n + 4096);
  size_t gn = 0;
  unsigned char *gz = read_bytes(file("good.gz"), &gn);
  write_bytes(file("half.gz"), gz, gn / 2);
  ok(refused_with(zorch_idx_load(file("half.gz"), &t), ZORCH_ERR_IO, "half.gz", "load_idx"), "IDX: a gzip stream cut in half");
  /* cut inside its 8-byte trailer (CRC32, length), or with either changed */
  for (size_t cut = 1; cut <= 8; cut++) {
    write_bytes(file("trail.gz"), gz, gn - cut);
    t = (zorch_tensor *)1;
    ok(refused_with(zorch_idx_load(file("trail.gz"), &t), ZORCH_ERR_IO, "trail.gz", "cut short") && !t,
       "IDX: a gzip stream missing the last %zu bytes of its trailer is refused", cut);
  }
  for (int which = 0; which < 2; which++) {
    gz[gn - 8 + 4 * which] ^= 1; /* CRC32, then ISIZE */
    write_bytes(file("trail.gz"), gz, gn);
    gz[gn - 8 + 4 * which] ^= 1;
    ok(refused_with(zorch_idx_load(file("trail.gz"), &t), ZORCH_ERR_IO, "trail.gz", which ? "length" : "check"),
       "IDX: a gzip trailer with a wrong %s is refused", which ? "length" : "CRC32");
  }
  write_bytes(file("trail.gz"), gz, gn);
  ok(!zorch_idx_load(file("trail.gz"), &t) && zorch_tensor_numel(t) == 4096, "IDX: the whole stream loads");
  zorch_tensor_free(t);
  free(gz);
  ok(refused_with(zorch_idx_load(file("nope.idx"), &t), ZORCH_ERR_IO, "nope.idx", "cannot open"), "IDX: a missing file");
}

/* ---- CSV and token files ---------------------------------------------------------- */
static void test_csv_tokens(void) {
  const char *p = file("a.csv");
  const char *text = "x;y;z\n1;2.5;-3\n\n4 ; 5e2;6\r\n";
  write_bytes(p, text, strlen(text));
  zorch_tensor *t = NULL;
  zorch_csv_opts o = {true, ';'};
  ok(!zorch_csv_load(p, &o, &t) && zorch_tensor_dtype(t) == ZORCH_F32 && zorch_tensor_shape(t)[0] == 2 &&
         zorch_tensor_shape(t)[1] == 3 && at(t, 1) == 2.5 && at(t, 2) == -3 && at(t, 4) == 500 && at(t, 5) == 6,
     "CSV with a header and ';' reads as float32 (2, 3)");
  zorch_tensor_free(t);
  write_bytes(p, "1,2\n3\n", 6);
  ok(refused_with(zorch_csv_load(p, NULL, &t), ZORCH_ERR_IO, p, "line 2 has 1 fields, earlier lines 2") && !t,
     "CSV: a ragged row is refused");
  write_bytes(p, "1,abc\n", 6);
  ok(refused_with(zorch_csv_load(p, NULL, &t), ZORCH_ERR_IO, p, "line 1 field 2 is not a number"),
     "CSV: a field that is not a number");
  write_bytes(p, "1,2x\n", 5);
  ok(refused_with(zorch_csv_load(p, NULL, &t), ZORCH_ERR_IO, p, "unexpected 'x'"), "CSV: junk after a number");
  write_bytes(p, "", 0);
  ok(!zorch_csv_load(p, NULL, &t) && zorch_tensor_numel(t) == 0, "CSV: an empty file is (0, 0)");
  zorch_tensor_free(t);
  ok(refused_with(zorch_csv_load(dir, NULL, &t), ZORCH_ERR_IO, dir, "cannot read"), "CSV: a folder");
  o = (zorch_csv_opts){false, '.'};
  ok(zorch_csv_load(p, &o, &t) == ZORCH_ERR_ARG, "CSV: a delimiter that is part of numbers is refused");

  p = file("tok.bin");
  write_bytes(p, "\x01\x00\xff\xff\x34\x12", 6);
  ok(!zorch_tokens_load(p, 2, &t) && zorch_tensor_dtype(t) == ZORCH_I64 && zorch_tensor_numel(t) == 3 &&
         at(t, 0) == 1 && at(t, 1) == 65535 && at(t, 2) == 0x1234,
     "uint16 tokens read as int64");
  zorch_tensor_free(t);
  ok(!zorch_tokens_load(p, 1, &t) && zorch_tensor_numel(t) == 6 && at(t, 2) == 255, "byte tokens read as int64");
  zorch_tensor_free(t);
  write_bytes(p, "abc", 3);
  ok(refused_with(zorch_tokens_load(p, 2, &t), ZORCH_ERR_IO, p, "not a whole number"), "tokens: an odd size for uint16");
  ok(zorch_tokens_load(p, 3, &t) == ZORCH_ERR_ARG, "tokens: a width of 3 is refused");
}

/* ---- the zorch.save tree ---------------------------------------------------------- */
#define ITEM(k, ...) ((zorch_tree_item){.kind = ZORCH_TREE_##k, __VA_ARGS__})

static const zorch_tree_item *find_key(const zorch_tree *tr, const char *key) {
  for (size_t i = 0; i < tr->n; i++)
    if (tr->items[i].key && strcmp(tr->items[i].key, key) == 0) return &tr->items[i];
  return NULL;
}

static void test_tree(void) {
  zorch_tensor *w = zorch_randn(SHAPE(3, 2), ZORCH_F32, CPU, NULL);
  zorch_tensor *ids = zorch_arange_i64(0, 5, 1, ZORCH_I64, CPU);
  zorch_tree_item items[] = {
      ITEM(MAP),
      ITEM(INT, .key = "epoch", .i = 3),
      ITEM(INT, .key = "big", .i = (int64_t)1 << 60),
      ITEM(FLOAT, .key = "lr", .f = 1e-3),
      ITEM(FLOAT, .key = "whole", .f = 2.0),
      ITEM(STRING, .key = "name", .s = "run \xc3\xa9t\xc3\xa9"),
      ITEM(BOOL, .key = "flag", .b = true),
      ITEM(TENSOR, .key = "w", .t = w),
      ITEM(LIST, .key = "list"),
      ITEM(INT, .i = -7),
      ITEM(TENSOR, .t = ids),
      ITEM(LIST),
      ITEM(END),
      ITEM(END),
      ITEM(PAIRS, .key = "pairs"),
      ITEM(INT, .i = 2),
      ITEM(STRING, .s = "two"),
      ITEM(BOOL, .b = false),
      ITEM(FLOAT, .f = 0.5),
      ITEM(FLOAT, .f = 2.5),
      ITEM(TENSOR, .t = w),
      ITEM(END),
      ITEM(END),
  };
  size_t n = sizeof items / sizeof items[0];
  const char *p = file("tree.safetensors");
  zorch_tree *tr = NULL;
  ok(!zorch_tree_save(p, n, items) && !zorch_tree_load(p, &tr), "a tree of values and tensors saves and loads");
  const zorch_tree_item *it;
  ok(tr && tr->n == n && tr->items[0].kind == ZORCH_TREE_MAP && tr->items[n - 1].kind == ZORCH_TREE_END &&
         tr->nextra == 0,
     "the loaded tree has every item");
  ok(tr && (it = find_key(tr, "epoch")) && it->kind == ZORCH_TREE_INT && it->i == 3, "an integer stays an integer");
  ok(tr && (it = find_key(tr, "big")) && it->kind == ZORCH_TREE_INT && it->i == (int64_t)1 << 60,
     "an integer past 2^53 keeps its 64 bits");
  ok(tr && (it = find_key(tr, "lr")) && it->kind == ZORCH_TREE_FLOAT && it->f == 1e-3, "a float stays exact");
  ok(tr && (it = find_key(tr, "whole")) && it->kind == ZORCH_TREE_FLOAT && it->f == 2.0, "a whole float stays a float");
  ok(tr && (it = find_key(tr, "name")) && it->kind == ZORCH_TREE_STRING && strcmp(it->s, "run \xc3\xa9t\xc3\xa9") == 0,
     "a UTF-8 string round-trips");
  ok(tr && (it = find_key(tr, "flag")) && it->kind == ZORCH_TREE_BOOL && it->b, "a boolean round-trips");
  ok(tr && (it = find_key(tr, "w")) && it->kind == ZORCH_TREE_TENSOR && same_tensor(it->t, w), "a tensor round-trips");
  it = tr ? find_key(tr, "list") : NULL;
  ok(it && it->kind == ZORCH_TREE_LIST && it[1].kind == ZORCH_TREE_INT && it[1].i == -7 &&
         it[2].kind == ZORCH_TREE_TENSOR && same_tensor(it[2].t, ids) && it[3].kind == ZORCH_TREE_LIST &&
         it[4].kind == ZORCH_TREE_END && it[5].kind == ZORCH_TREE_END,
     "a list keeps its order, a tensor and an empty list in it");
  /* pair keys come back sorted: booleans, numbers by text, strings */
  it = tr ? find_key(tr, "pairs") : NULL;
  ok(it && it->kind == ZORCH_TREE_PAIRS && it[1].kind == ZORCH_TREE_BOOL && !it[1].b && it[2].f == 0.5 &&
         it[3].kind == ZORCH_TREE_INT && it[3].i == 2 && it[4].kind == ZORCH_TREE_STRING && it[5].kind == ZORCH_TREE_FLOAT &&
         it[5].f == 2.5 && it[6].kind == ZORCH_TREE_TENSOR && same_tensor(it[6].t, w),
     "pairs keep their keys and values, sorted by key");
  zorch_tree_free(tr);
  tr = NULL;
  /* the tensors are named by their paths; the same tree gives the same file */
  int nt = 0, nmeta = 0;
  char **names = NULL, **keys = NULL, **values = NULL;
  zorch_tensor **ts = NULL;
  ok(!zorch_load_safetensors_meta(p, &nt, &names, &ts, &nmeta, &keys, &values) && nt == 3 && nmeta == 1 &&
         strcmp(names[0], "list.2") == 0 && strcmp(names[1], "pairs.2.5") == 0 && strcmp(names[2], "w") == 0 &&
         strcmp(keys[0], "zorch.values") == 0,
     "tensors are named by their paths (%s, %s, %s)", nt > 0 ? names[0] : "", nt > 1 ? names[1] : "",
     nt > 2 ? names[2] : "");
  zorch_safetensors_free(nt, names, ts);
  zorch_safetensors_meta_free(nmeta, keys, values);
  size_t n1 = 0, n2 = 0;
  unsigned char *f1 = read_bytes(p, &n1);
  zorch_tree_item swapped[sizeof items / sizeof items[0]];
  memcpy(swapped, items, sizeof items);
  swapped[1] = items[2], swapped[2] = items[1];
  zorch_tree_save(p, n, swapped);
  unsigned char *f2 = read_bytes(p, &n2);
  ok(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0, "map keys in another order give the same file");
  free(f1);
  free(f2);

  /* a map of tensors alone is a plain safetensors file */
  zorch_tree_item flat[] = {ITEM(MAP), ITEM(TENSOR, .key = "b", .t = w), ITEM(TENSOR, .key = "a", .t = ids), ITEM(END)};
  ok(!zorch_tree_save(p, 4, flat) && !zorch_load_safetensors_meta(p, &nt, &names, &ts, &nmeta, &keys, &values) &&
         nt == 2 && nmeta == 0,
     "a map of tensors alone is written without metadata");
  zorch_safetensors_free(nt, names, ts);
  zorch_safetensors_meta_free(nmeta, keys, values);
  ok(!zorch_tree_load(p, &tr) && tr->n == 4 && tr->items[0].kind == ZORCH_TREE_MAP && find_key(tr, "a") &&
         same_tensor(find_key(tr, "a")->t, ids) && same_tensor(find_key(tr, "b")->t, w),
     "a file of tensors alone loads as a map of them");
  zorch_tree_free(tr);
  tr = NULL;
  /* colliding paths get a suffix */
  zorch_tree_item coll[] = {ITEM(MAP), ITEM(TENSOR, .key = "a.b", .t = w), ITEM(MAP, .key = "a"),
                            ITEM(TENSOR, .key = "b", .t = ids), ITEM(END), ITEM(INT, .key = "n", .i = 1), ITEM(END)};
  ok(!zorch_tree_save(p, 7, coll) && !zorch_load_safetensors_meta(p, &nt, &names, &ts, &nmeta, &keys, &values) &&
         nt == 2 && strcmp(names[0], "a.b") == 0 && strcmp(names[1], "a.b#2") == 0,
     "tensors whose paths collide get #2");
  zorch_safetensors_free(nt, names, ts);
  zorch_safetensors_meta_free(nmeta, keys, values);

  /* malformed item lists write nothing */
  zorch_tree_item deep[70];
  for (int i = 0; i < 66; i++) deep[i] = ITEM(LIST);
  struct {
    const char *desc;
    size_t n;
    const zorch_tree_item *items;
    const char *want;
  } bad[] = {
      {"an unclosed table", 2, (zorch_tree_item[]){ITEM(MAP), ITEM(INT, .key = "a")}, "before its tables are closed"},
      {"a scalar root", 1, (zorch_tree_item[]){ITEM(INT, .i = 1)}, "one table"},
      {"a map entry without a key", 3, (zorch_tree_item[]){ITEM(MAP), ITEM(INT, .i = 1), ITEM(END)}, "has no key"},
      {"a repeated key", 4, (zorch_tree_item[]){ITEM(MAP), ITEM(INT, .key = "a"), ITEM(INT, .key = "a"), ITEM(END)},
       "appears twice"},
      {"a table as a pair key", 5, (zorch_tree_item[]){ITEM(PAIRS), ITEM(LIST), ITEM(END), ITEM(INT), ITEM(END)},
       "not a string, number or boolean"},
      {"a NaN pair key", 4, (zorch_tree_item[]){ITEM(PAIRS), ITEM(FLOAT, .f = NAN), ITEM(INT), ITEM(END)},
       "not a string, number or boolean"},
      {"a key without its value", 3, (zorch_tree_item[]){ITEM(PAIRS), ITEM(INT), ITEM(END)}, "without its value"},
      {"a string with a NUL byte", 3,
       (zorch_tree_item[]){ITEM(MAP), ITEM(STRING, .key = "s", .s = "x\0y", .len = 3), ITEM(END)},
       "the string at s is not UTF-8 text"},
      {"a key that is not UTF-8", 3, (zorch_tree_item[]){ITEM(MAP), ITEM(INT, .key = "\xff"), ITEM(END)},
       "a key in of the table is not UTF-8"},
      {"a tensor item without a tensor", 3, (zorch_tree_item[]){ITEM(LIST), ITEM(TENSOR), ITEM(END)}, "no string or tensor"},
      {"items after the root", 3, (zorch_tree_item[]){ITEM(LIST), ITEM(END), ITEM(END)}, "follows the end"},
      {"66 tables deep", 66, deep, "nested more than 64 tables deep"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *q = file("bad.safetensors");
    ok(refused_with(zorch_tree_save(q, bad[i].n, bad[i].items), ZORCH_ERR_ARG, NULL, bad[i].want) &&
           access(q, F_OK) != 0,
       "tree: %s is refused and writes nothing", bad[i].desc);
  }

  /* malformed values in a file are refused, naming the file */
  struct {
    const char *json, *want;
  } meta[] = {
      {"{not json", "not valid JSON"},
      {"{\"value\":{\"map\":{}}}", "expected {\"version\": 1"},
      {"{\"version\":2,\"value\":{\"map\":{}}}", "has version 2; this zorch reads version 1"},
      {"{\"version\":1,\"value\":3}", "the value is not a table"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":1.5}}}", "a number that is not an integer"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":{\"float\":\"x1\"}}}}", "a float node that is not a number"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":{\"int\":\"99999999999999999999\"}}}}", "not a 64-bit integer"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":{\"tensor\":\"nope\"}}}}", "refers to tensor 'nope'"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":null}}}", "a node that is not"},
      {"{\"version\":1,\"value\":{\"pairs\":[[1]]}}", "a pair that is not [key, value]"},
      {"{\"version\":1,\"value\":{\"pairs\":[[{\"float\":\"nan\"},1]]}}", "a key that is not a string"},
      {"{\"version\":1,\"value\":{\"map\":{\"a\":{\"map\":[]}}}}", "a map node that is not an object"},
      {"{\"version\":1,\"value\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
       "nested too deep"},
  };
  const char *mk = "zorch.values", *names1[] = {"w"};
  for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
    const char *q = file("meta.safetensors");
    zorch_save_safetensors_meta(q, 1, names1, &w, 1, &mk, &meta[i].json);
    tr = (zorch_tree *)1;
    ok(refused_with(zorch_tree_load(q, &tr), ZORCH_ERR_IO, q, meta[i].want) && !tr, "tree: a file with %s is refused",
       meta[i].want);
  }
  /* a tensor the values do not name comes back beside them */
  const char *json = "{\"version\":1,\"value\":{\"map\":{\"epoch\":2}}}";
  zorch_save_safetensors_meta(p, 1, names1, &w, 1, &mk, &json);
  ok(!zorch_tree_load(p, &tr) && tr->nextra == 1 && strcmp(tr->extra_names[0], "w") == 0 &&
         same_tensor(tr->extra[0], w) && find_key(tr, "epoch")->i == 2,
     "a tensor the values do not name is returned beside them");
  zorch_tree_free(tr);
  zorch_tree_free(NULL);
  ok(refused_with(zorch_tree_load(file("missing"), &tr), ZORCH_ERR_IO, "missing", "cannot open"), "tree: a missing file");
  zorch_tensor_free(w);
  zorch_tensor_free(ids);
}

/* ---- TensorBoard events ---------------------------------------------------------- */
static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* The number of well-framed records in buf (both CRCs check), or -1. */
static int records(const unsigned char *buf, size_t n) {
  int count = 0;
  for (size_t at = 0; at < n; count++) {
    if (n - at < 16) return -1;
    uint64_t len = le(buf + at, 8);
    if (len > n - at - 16 || le(buf + at + 8, 4) != zorch_crc32c(buf + at, 8, true) ||
        le(buf + at + 12 + len, 4) != zorch_crc32c(buf + at + 12, len, true))
      return -1;
    at += 16 + len;
  }
  return count;
}

static void test_events(void) {
  ok(zorch_crc32c("123456789", 9, false) == 0xE3069283u, "crc32c('123456789') = 0xE3069283");
  ok(zorch_crc32c("123456789", 9, true) == 0xc78ab0e5u, "masked crc32c('123456789') = 0xc78ab0e5");
  ok(zorch_crc32c("", 0, false) == 0, "crc32c of nothing is 0");
  void *rec = NULL;
  size_t len = 0;
  const char *tags[] = {"loss", "lr"};
  double vals[] = {0.5, 1e-3};
  ok(!zorch_event_encode(7, 1234.5, NULL, 2, tags, NULL, vals, &rec, &len) && records(rec, len) == 1 &&
         memmem(rec, len, "loss", 4) && memmem(rec, len, "lr", 2),
     "an event of two scalars is one framed record (%zu bytes)", len);
  /* wall_time is field 1, a double: its bytes follow the key 0x09 */
  double wall = 0;
  if (rec && len > 21) memcpy(&wall, (unsigned char *)rec + 13, 8);
  ok(len > 21 && ((unsigned char *)rec)[12] == 0x09 && wall == 1234.5, "the wall time is written as given");
  free(rec);
  ok(!zorch_event_encode(-3, NAN, "brain.Event:2", 0, NULL, NULL, NULL, &rec, &len) && records(rec, len) == 1 &&
         memmem(rec, len, "brain.Event:2", 13),
     "a file-version event with a negative step");
  free(rec);
  ok(zorch_event_encode(1, 0, NULL, 1, NULL, NULL, vals, &rec, &len) == ZORCH_ERR_ARG, "NULL tags are refused");

  zorch_events *ev = NULL;
  ok(!zorch_events_open(dir, &ev) && zorch_events_path(ev) && strncmp(zorch_events_path(ev), dir, strlen(dir)) == 0 &&
         strstr(zorch_events_path(ev), "/events.out.tfevents."),
     "an event writer opens a file named as TensorBoard names them");
  char path[4096] = "";
  if (ev) snprintf(path, sizeof path, "%s", zorch_events_path(ev));
  for (int s = 0; ev && s < 3; s++) zorch_events_add_scalar(ev, "train/loss", 1.0 / (s + 1), s);
  ok(ev && !zorch_events_flush(ev) && !zorch_events_close(ev), "scalars are added, flushed and the file closed");
  size_t n = 0;
  unsigned char *buf = read_bytes(path, &n);
  ok(buf && records(buf, n) == 4 && memmem(buf, n, "brain.Event:2", 13) && memmem(buf, n, "train/loss", 10),
     "the file holds the version record and three scalar records");
  free(buf);
  unlink(path);
  ok(refused_with(zorch_events_open(file("no/such"), &ev), ZORCH_ERR_IO, "no/such", "cannot create") && !ev,
     "an event writer in a missing folder is refused");
  char small[16];
  ok(zorch_events_filename(dir, small, sizeof small) == ZORCH_ERR_ARG, "a buffer too short for the name is refused");
  ok(zorch_events_close(NULL) == ZORCH_OK, "closing NULL is fine");
}

static void test_atomic(void) {
  const char *p = file("text.txt");
  ok(!zorch_write_file_atomic(p, "hello", 5), "an atomic write");
  size_t n = 0;
  unsigned char *b = read_bytes(p, &n);
  ok(b && n == 5 && memcmp(b, "hello", 5) == 0, "writes the bytes");
  free(b);
  ok(!zorch_write_file_atomic(p, "", 0) && (b = read_bytes(p, &n)) && n == 0, "an empty write replaces the file");
  free(b);
  mkdir(file("sub"), 0777);
  ok(refused_with(zorch_write_file_atomic(file("sub"), "x", 1), ZORCH_ERR_IO, "sub", "not a regular file"),
     "a folder is never replaced");
  rmdir(file("sub"));
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/zorch_test_io_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  zorch_manual_seed(5);
  test_npy();
  test_idx();
  test_csv_tokens();
  test_tree();
  test_events();
  test_atomic();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  return done_testing();
}
