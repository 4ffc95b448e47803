/* dtype.c: dtype sizes, names and promotion. */
#include <string.h>

#include "tensor.h"

const size_t dtype_sizes[ZORCH_NDTYPES] = {4, 8, 2, 2, 4, 8, 1, 1, 1};
static const char *const dtype_names[ZORCH_NDTYPES] = {
    "float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8", "bool", "int8"};

size_t zorch_dtype_size(zorch_dtype dt) {
  return (unsigned)dt < ZORCH_NDTYPES ? dtype_sizes[dt] : 0;
}

const char *zorch_dtype_name(zorch_dtype dt) {
  return (unsigned)dt < ZORCH_NDTYPES ? dtype_names[dt] : "invalid";
}

zorch_status zorch_dtype_parse(const char *name, zorch_dtype *out) {
  static const struct {
    const char *name;
    zorch_dtype dt;
  } aliases[] = {{"f32", ZORCH_F32},  {"float", ZORCH_F32}, {"f64", ZORCH_F64},
                 {"double", ZORCH_F64}, {"bf16", ZORCH_BF16}, {"f16", ZORCH_F16},
                 {"half", ZORCH_F16}, {"i32", ZORCH_I32},   {"int", ZORCH_I32},
                 {"i64", ZORCH_I64},  {"long", ZORCH_I64},  {"u8", ZORCH_U8},  {"i8", ZORCH_I8}};
  if (!name) return err_set(ZORCH_ERR_ARG, "dtype: name is NULL");
  for (int i = 0; i < ZORCH_NDTYPES; i++)
    if (strcmp(name, dtype_names[i]) == 0) {
      *out = (zorch_dtype)i;
      return ZORCH_OK;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(name, aliases[i].name) == 0) {
      *out = aliases[i].dt;
      return ZORCH_OK;
    }
  return err_set(ZORCH_ERR_ARG,
                 "dtype: unknown dtype '%s' (expected float32, float64, bfloat16, float16, "
                 "int32, int64, uint8, int8 or bool)",
                 name);
}

bool zorch_dtype_is_float(zorch_dtype dt) { return dt <= ZORCH_F16; }

/* Category order bool < integers < floats; within floats the wider wins, and
   bfloat16 with float16 gives float32, as in PyTorch. */
zorch_dtype dtype_promote(zorch_dtype a, zorch_dtype b) {
  if (a == b) return a;
  bool fa = zorch_dtype_is_float(a), fb = zorch_dtype_is_float(b);
  if (fa && fb) {
    if (a == ZORCH_F64 || b == ZORCH_F64) return ZORCH_F64;
    return ZORCH_F32; /* f32 with a 16-bit type, or bf16 with f16 */
  }
  if (fa) return a;
  if (fb) return b;
  if (a == ZORCH_BOOL) return b;
  if (b == ZORCH_BOOL) return a;
  if (a == ZORCH_I64 || b == ZORCH_I64) return ZORCH_I64;
  if (a == ZORCH_I32 || b == ZORCH_I32) return ZORCH_I32;
  /* uint8 with int8: PyTorch gives int16, which zorch lacks; int32 holds both */
  if (a == ZORCH_I8 || b == ZORCH_I8) return ZORCH_I32;
  return ZORCH_U8;
}

zorch_dtype dtype_to_float(zorch_dtype dt) { return zorch_dtype_is_float(dt) ? dt : ZORCH_F32; }
