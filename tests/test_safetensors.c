/* test_safetensors.c: the safetensors reader accepts the files PyTorch and
   zorch write and refuses, with the file, the tensor and the fault named, every
   header whose data offsets do not tile the data section exactly or whose
   text is malformed. */
#include <stdint.h>
#include <unistd.h>

#include "tap.h"

static char path[256];

/* Writes an 8-byte header length `hlen` (the JSON's own length when 0), the
   header text and `data` bytes of 0x11 .. */
static void write_raw(const char *json, size_t jlen, uint64_t hlen, size_t data) {
  FILE *f = fopen(path, "wb");
  if (!hlen) hlen = jlen;
  for (int b = 0; b < 8; b++) fputc((int)(hlen >> (8 * b)) & 0xff, f);
  fwrite(json, 1, jlen, f);
  for (size_t i = 0; i < data; i++) fputc((int)(0x11 + i) & 0xff, f);
  fclose(f);
}

static void write_st(const char *json, size_t data) { write_raw(json, strlen(json), 0, data); }

static int loads(void) {
  int n;
  char **names;
  zorch_tensor **ts;
  if (zorch_load_safetensors(path, &n, &names, &ts)) return 0;
  zorch_safetensors_free(n, names, ts);
  return 1;
}

/* The load fails and its message names the file and holds each of the texts. */
static int refused(const char *a, const char *b) {
  if (loads()) return 0;
  const char *m = zorch_last_error();
  int good = strstr(m, path) && strstr(m, a) && (!b || strstr(m, b));
  if (!good) printf("#   message: %s\n", m);
  return good;
}

#define E(name, dt, shape, b0, b1) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b0 "," #b1 "]}"

int main(void) {
  snprintf(path, sizeof path, "/tmp/zorch_test_st_%d.safetensors", (int)getpid());

  /* what readers and writers produce */
  int n;
  char **names;
  zorch_tensor **ts;
  ok(zorch_load_safetensors("golden/from_torch.safetensors", &n, &names, &ts) == ZORCH_OK && n > 0,
     "PyTorch's file loads");
  if (n > 0) zorch_safetensors_free(n, names, ts);
  write_st("{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[1]", 8, 12) "}", 12);
  ok(loads(), "two tensors tiling the data load");
  write_st("{" E("a", "F32", "[2]", 4, 12) "," E("b", "I32", "[1]", 0, 4) "}", 12);
  ok(loads(), "offsets in another order than the names load");
  write_st("{" E("a", "F32", "[2]", 0, 8) "," E("z", "F32", "[0,3]", 8, 8) "}      ", 8);
  ok(loads(), "a header padded with spaces and a zero-size tensor load");
  write_st("{\"__metadata__\":{\"zorch.values\":\"{}\"}," E("a", "U8", "[3]", 0, 3) "}", 3);
  int nm;
  char **keys, **values;
  ok(zorch_load_safetensors_meta(path, &n, &names, &ts, &nm, &keys, &values) == ZORCH_OK && n == 1 && nm == 1,
     "a header with __metadata__ loads");
  if (!zorch_last_status()) {
    zorch_safetensors_free(n, names, ts);
    zorch_safetensors_meta_free(nm, keys, values);
  }
  write_st("{}", 0);
  ok(loads(), "an empty file loads");

  /* the data section, tiled exactly */
  const char *two = "{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[1]", 8, 12) "}    ";
  write_raw(two, strlen(two), strlen(two) - 4, 12);
  ok(refused("bytes follow the data of the last tensor", "'b'"),
     "a header length lowered into the padding is refused, not read shifted");
  write_st("{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[1]", 4, 8) "}", 8);
  ok(refused("overlaps", "'b'"), "overlapping tensors are refused");
  write_st("{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[1]", 12, 16) "}", 16);
  ok(refused("'b' begins at byte 12", "bytes 8 to 12 unused"), "a gap between tensors is refused");
  write_st("{" E("a", "F32", "[2]", 4, 12) "," E("b", "F32", "[1]", 16, 20) "}", 20);
  ok(refused("'a' begins at byte 4", NULL), "offsets out of order leaving holes are refused");
  write_st("{" E("a", "F32", "[2]", 0, 8) "}", 12);
  ok(refused("4 bytes follow the data of the last tensor, 'a'", NULL), "trailing data is refused");
  write_st("{}", 4);
  ok(refused("data bytes follow a header with no tensors", NULL), "data without tensors is refused");
  write_st("{" E("a", "F32", "[2]", 0, 8) "}", 4);
  ok(refused("'a' ends at byte 8, past the 4 data bytes", NULL), "a truncated file is refused");
  write_st("{" E("a", "F32", "[1]", 0, 4) "," E("a", "F32", "[1]", 4, 8) "}", 8);
  ok(refused("'a' appears twice", NULL), "a duplicate name is refused");
  write_st("{\"__metadata__\":{},\"__metadata__\":{}," E("a", "F32", "[1]", 0, 4) "}", 4);
  ok(refused("__metadata__ appears twice", NULL), "a duplicate __metadata__ is refused");
  write_st("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," E("a", "F32", "[1]", 0, 4) "}", 4);
  ok(zorch_load_safetensors_meta(path, &n, &names, &ts, &nm, &keys, &values) != ZORCH_OK &&
     strstr(zorch_last_error(), "'k' appears twice"), "a duplicate metadata key is refused");

  /* dtypes, names and the text around the JSON */
  write_st("{" E("a", "F32x", "[1]", 0, 4) "}", 4);
  ok(refused("'a' has unsupported dtype 'F32x'", NULL), "a dtype with trailing bytes is refused");
  write_st("{" E("a", "F32\\u0000x", "[1]", 0, 4) "}", 4);
  ok(refused("escaped NUL", NULL), "a dtype cut short by an escaped NUL is refused");
  write_st("{" E("a\\u0000b", "F32", "[1]", 0, 4) "}", 4);
  ok(refused("escaped NUL", NULL), "a name with an escaped NUL is refused");
  write_st("{\"a\\\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  ok(loads(), "an escaped backslash before u0000 is not a NUL");
  write_st("{" E("a\xff", "F32", "[1]", 0, 4) "}", 4);
  ok(refused("not valid UTF-8", NULL), "a name that is not UTF-8 is refused");
  write_st("{" E("a\xc0\xaf", "F32", "[1]", 0, 4) "}", 4);
  ok(refused("not valid UTF-8", NULL), "an overlong UTF-8 form is refused");
  write_st("{" E("a\\ud800", "F32", "[1]", 0, 4) "}", 4);
  ok(!loads(), "a lone surrogate escape in a name is refused");
  write_st("{" E("a", "F32", "[1]", 0, 4) "}x", 4);
  ok(refused("after its JSON object, is 0x78", NULL), "a byte after the JSON object is refused");
  write_st("{" E("a", "F32", "[1]", 0, 4) "}\n\t\r", 4);
  ok(loads(), "JSON white space after the object (a writer's final newline) pads, as the reference reader reads it");
  write_st("{" E("a", "F32", "[1]", 0, 4) "}{}", 4);
  ok(refused("only white space may pad", NULL), "a second JSON object is refused");
  write_st(" {" E("a", "F32", "[1]", 0, 4) "}", 4);
  ok(refused("does not begin with '{'", NULL), "a space before the JSON object is refused");
  write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4);
  ok(refused("'a' has an unknown field 'x'", NULL), "an unknown field is refused");
  write_st("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  ok(refused("'a' has the field 'dtype' twice", NULL), "a repeated field is refused");

  /* shapes against offsets */
  write_st("{" E("a", "F32", "[3]", 0, 8) "}", 8);
  ok(refused("'a': data_offsets [0, 8] do not hold its shape's 12 bytes", NULL), "a shape/offset mismatch is refused");
  write_st("{" E("a", "F32", "[-1]", 0, 4) "}", 4);
  ok(refused("'a': shape entry 0 is not a non-negative integer", NULL), "a negative shape entry is refused");
  write_st("{" E("a", "F32", "[1, 1.5]", 0, 4) "}", 4);
  ok(refused("'a': shape entry 1 is not a non-negative integer", NULL), "a fractional shape entry is refused");
  write_st("{" E("a", "F32", "[\"1\"]", 0, 4) "}", 4);
  ok(refused("'a': shape entry 0", NULL), "a string shape entry is refused");
  write_st("{" E("a", "F32", "[4294967296,4294967296]", 0, 0) "}", 0);
  ok(refused("'a': its shape has too many elements", NULL), "a shape whose element count overflows is refused");
  write_st("{" E("a", "F64", "[4503599627370496,1024]", 0, 0) "}", 0);
  ok(refused("'a': its shape has too many elements", NULL), "a shape whose byte count overflows is refused");
  write_st("{" E("a", "F32", "[0,1099511627776,1099511627776]", 0, 0) "}", 0);
  ok(refused("'a'", "too large"), "a zero-size shape whose strides overflow is refused");
  write_st("{" E("a", "F32", "[1]", 4, 0) "}", 4);
  ok(refused("'a': data_offsets [4, 0]", NULL), "reversed offsets are refused");
  unlink(path);
  return done_testing();
}
