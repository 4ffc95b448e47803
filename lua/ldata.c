/* ldata.c: reading CSV and NumPy .npy files into tensors. Both parsers check
   every size against the file before trusting it. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lz.h"

/* zorch.data.read_csv(path, {header = true, delimiter = ","}) -> float32 (rows, cols) */
static int l_read_csv(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  int header = 0;
  char delim = ',';
  if (lua_istable(L, 2)) {
    lz_getfield(L, 2, "header");
    header = lua_toboolean(L, -1);
    lz_getfield(L, 2, "delimiter");
    if (lua_isstring(L, -1)) delim = lua_tostring(L, -1)[0];
    lua_pop(L, 2);
  }
  FILE *f = fopen(path, "r");
  if (!f) return luaL_error(L, "read_csv: cannot open %s: %s", path, strerror(errno));
  size_t cap = 1024, n = 0;
  long cols = -1, rows = 0, lineno = 0;
  float *v = malloc(cap * sizeof *v);
  char *line = NULL;
  size_t lcap = 0;
  ssize_t len;
  const char *err = NULL;
  char msg[256];
  while (v && (len = getline(&line, &lcap, f)) >= 0) {
    lineno++;
    if (header && lineno == 1) continue;
    char *p = line;
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) continue;
    long c = 0;
    for (;;) {
      char *end;
      errno = 0;
      float x = strtof(p, &end);
      if (end == p) {
        snprintf(msg, sizeof msg, "read_csv: %s line %ld field %ld is not a number", path, lineno, c + 1);
        err = msg;
        break;
      }
      if (n == cap) {
        float *nv = realloc(v, (cap *= 2) * sizeof *v);
        if (!nv) { err = "read_csv: out of memory"; break; }
        v = nv;
      }
      v[n++] = x;
      c++;
      p = end;
      while (*p == ' ' || *p == '\t') p++;
      if (*p == delim) { p++; continue; }
      if (*p == '\n' || *p == '\r' || !*p) break;
      snprintf(msg, sizeof msg, "read_csv: %s line %ld: unexpected '%c'", path, lineno, *p);
      err = msg;
      break;
    }
    if (err) break;
    if (cols >= 0 && c != cols) {
      snprintf(msg, sizeof msg, "read_csv: %s line %ld has %ld fields, earlier lines %ld", path, lineno, c, cols);
      err = msg;
      break;
    }
    cols = c;
    rows++;
  }
  free(line);
  if (!err && ferror(f)) { /* a folder opens, then reads fail (EISDIR) */
    snprintf(msg, sizeof msg, "read_csv: cannot read %s: %s", path, strerror(errno));
    err = msg;
  }
  fclose(f);
  if (!v) return luaL_error(L, "read_csv: out of memory");
  if (err) {
    free(v);
    return luaL_error(L, "%s", err);
  }
  int64_t shape[2] = {rows, cols < 0 ? 0 : cols};
  zorch_tensor *t = zorch_from_buffer(v, 2, shape, ZORCH_F32);
  free(v);
  return lz_push(L, t);
}

/* zorch.data.load_npy(path): little-endian f4, f8, i4, i8, u1, b1; C order */
static int l_load_npy(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lz_check_path(L, path, "read");
  FILE *f = fopen(path, "rb");
  if (!f) return luaL_error(L, "load_npy: cannot open %s: %s", path, strerror(errno));
  unsigned char pre[12];
  char hdr[4096];
  const char *err = NULL;
  zorch_tensor *t = NULL;
  size_t hlen = 0, plen = 10;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    err = "not a .npy file (bad magic)";
  } else if (pre[6] == 1) {
    hlen = pre[8] | (size_t)pre[9] << 8;
  } else if ((pre[6] == 2 || pre[6] == 3) && fread(pre + 10, 1, 2, f) == 2) {
    hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    plen = 12;
  } else {
    err = "unsupported .npy version";
  }
  if (!err && (hlen == 0 || hlen >= sizeof hdr || fread(hdr, 1, hlen, f) != hlen)) err = "bad or truncated header";
  zorch_dtype dt = ZORCH_F32;
  int64_t shape[ZORCH_MAX_DIMS];
  int nd = 0;
  if (!err) {
    hdr[hlen] = 0;
    const char *d = strstr(hdr, "'descr':"), *fo = strstr(hdr, "'fortran_order':"), *sh = strstr(hdr, "'shape':");
    if (!d || !fo || !sh) err = "header lacks descr, fortran_order or shape";
    else if (strncmp(fo + 16, " False", 6) != 0 && strncmp(fo + 16, "False", 5) != 0) err = "Fortran order is not supported";
    if (!err) {
      const char *q = strchr(d + 8, '\'');
      static const struct { const char *s; zorch_dtype dt; } types[] = {
          {"'<f4'", ZORCH_F32}, {"'<f8'", ZORCH_F64}, {"'<i4'", ZORCH_I32}, {"'<i8'", ZORCH_I64},
          {"'|u1'", ZORCH_U8}, {"'|b1'", ZORCH_BOOL}, {"'<f2'", ZORCH_F16}};
      err = "unsupported dtype (expected <f4, <f8, <f2, <i4, <i8, |u1 or |b1)";
      for (size_t i = 0; q && i < sizeof types / sizeof types[0]; i++)
        if (strncmp(q, types[i].s, strlen(types[i].s)) == 0) dt = types[i].dt, err = NULL;
    }
    if (!err) {
      const char *p = strchr(sh, '(');
      if (!p) err = "bad shape";
      for (p = p ? p + 1 : p; !err && p && *p != ')';) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 0 || nd == ZORCH_MAX_DIMS) { err = "bad shape"; break; }
        shape[nd++] = x;
        p = end;
      }
    }
  }
  if (!err) {
    t = zorch_empty(nd, shape, dt, (zorch_device){ZORCH_CPU, 0});
    size_t bytes = t ? (size_t)zorch_tensor_numel(t) * zorch_dtype_size(dt) : 0;
    if (!t) err = zorch_last_error();
    else if (bytes && fread(zorch_tensor_data(t), 1, bytes, f) != bytes) err = "truncated data";
  }
  (void)plen;
  fclose(f);
  if (err) {
    zorch_tensor_free(t);
    return luaL_error(L, "load_npy: %s: %s", path, err);
  }
  return lz_push(L, t);
}

/* zorch.data.load_tokens(path, width): a file of token ids without a header,
   each `width` bytes (1: bytes of text; 2: little-endian uint16, llm.c's .bin
   token files) -> int64 (n,). Read in C: a Lua loop over a large corpus is slow. */
static int l_load_tokens(lua_State *L) {
  const char *path = lz_checkpath(L, 1);
  lua_Integer width = luaL_optinteger(L, 2, 1);
  if (width != 1 && width != 2) return luaL_argerror(L, 2, "token width must be 1 (bytes) or 2 (uint16)");
  lz_check_path(L, path, "read");
  FILE *f = fopen(path, "rb");
  if (!f) return luaL_error(L, "load_tokens: cannot open %s: %s", path, strerror(errno));
  const char *err = NULL;
  zorch_tensor *t = NULL;
  long size = -1;
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0) err = strerror(errno);
  else if (!S_ISREG(sb.st_mode)) err = "not a regular file";
  else if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) err = strerror(errno);
  else if (size % width != 0) err = "the size is not a whole number of uint16 tokens";
  int64_t n = size / width;
  unsigned char *buf = NULL;
  if (!err && !(buf = malloc(size ? (size_t)size : 1))) err = "out of memory";
  if (!err && size && fread(buf, 1, (size_t)size, f) != (size_t)size) err = "short read";
  if (!err && !(t = zorch_empty(1, &n, ZORCH_I64, (zorch_device){ZORCH_CPU, 0}))) err = zorch_last_error();
  if (!err) {
    int64_t *d = zorch_tensor_data(t);
    for (int64_t i = 0; i < n; i++) d[i] = width == 1 ? buf[i] : (int64_t)(buf[2 * i] | buf[2 * i + 1] << 8);
  }
  free(buf);
  fclose(f);
  if (err) {
    zorch_tensor_free(t);
    return luaL_error(L, "load_tokens: %s: %s", path, err);
  }
  return lz_push(L, t);
}

void lz_open_data(lua_State *L) {
  lua_pushcfunction(L, l_read_csv);
  lua_setfield(L, -2, "_read_csv");
  lua_pushcfunction(L, l_load_npy);
  lua_setfield(L, -2, "_load_npy");
  lua_pushcfunction(L, l_load_tokens);
  lua_setfield(L, -2, "_load_tokens");
  lua_pushcfunction(L, lz_load_idx);
  lua_setfield(L, -2, "_load_idx");
}
