/* transpose.c: copies whose source runs across the destination's rows (a
   transposed matrix made contiguous), in tiles.

   Element by element, such a copy reads the source with a stride of a whole
   row: every read touches a new cache line and, past a few rows, a new page
   (6.5 ns an element for a 4096 x 1024 float32 matrix). A tile of TILE x TILE
   elements reads TILE lines that stay in L1 while the tile's rows are
   written. */
#include <stdint.h>
#include <string.h>

#include "cpu.h"

#define TILE 32

/* dst (16 rows, ldd apart) = the transpose of the 16 x 16 block at src (rows
   lds apart), in registers: four butterfly stages, each swapping the
   off-diagonal blocks of size 8, 4, 2 and 1 between row pairs (a two-source
   permute per row each). Shuffles move bits: any 4-byte type goes through. */
typedef float t16_v __attribute__((vector_size(64)));
typedef int32_t t16_i __attribute__((vector_size(64)));
#define T16_STAGE(S, LO, HI)                                  \
  for (int i = 0; i < 16; i++)                                \
    if (!(i & (S))) {                                         \
      t16_v a = r[i], b = r[i + (S)];                         \
      r[i] = __builtin_shuffle(a, b, (t16_i)LO);              \
      r[i + (S)] = __builtin_shuffle(a, b, (t16_i)HI);        \
    }
CPU_CLONES void cpu_t16_f32(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds) {
  t16_v r[16];
  for (int i = 0; i < 16; i++) memcpy(&r[i], src + i * lds, sizeof r[i]);
  T16_STAGE(8, ((t16_i){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}),
            ((t16_i){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}))
  T16_STAGE(4, ((t16_i){0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}),
            ((t16_i){4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}))
  T16_STAGE(2, ((t16_i){0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}),
            ((t16_i){2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}))
  T16_STAGE(1, ((t16_i){0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}),
            ((t16_i){1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}))
  for (int i = 0; i < 16; i++) memcpy(dst + i * ldd, &r[i], sizeof r[i]);
}
#undef T16_STAGE

/* One tile: rows [a0, a1) of the destination (source stride es along a),
   columns [b0, b1) (destination stride es along b). */
#define TILE_COPY(NAME, T)                                                                  \
  CPU_CLONES static void NAME(char *d, int64_t dsa, const char *s, int64_t ssb, int64_t na, \
                              int64_t nb) {                                                 \
    for (int64_t a = 0; a < na; a++) {                                                      \
      T *o = (T *)(d + a * dsa);                                                            \
      const char *in = s + a * (int64_t)sizeof(T);                                          \
      for (int64_t b = 0; b < nb; b++) memcpy(&o[b], in + b * ssb, sizeof(T));               \
    }                                                                                       \
  }
TILE_COPY(tile_1, uint8_t)
TILE_COPY(tile_2, uint16_t)
TILE_COPY(tile_4s, uint32_t)
TILE_COPY(tile_8, uint64_t)

/* 4-byte elements: the tile's whole 16 x 16 blocks in registers */
static void tile_4(char *d, int64_t dsa, const char *s, int64_t ssb, int64_t na, int64_t nb) {
  if (na < TILE || nb < TILE || dsa % 4 || ssb % 4) {
    tile_4s(d, dsa, s, ssb, na, nb);
    return;
  }
  for (int64_t a0 = 0; a0 < TILE; a0 += 16)
    for (int64_t b0 = 0; b0 < TILE; b0 += 16)
      cpu_t16_f32((float *)(d + a0 * dsa) + b0, dsa / 4, (const float *)(s + b0 * ssb) + a0, ssb / 4);
}

/* 2-byte elements: a whole 32 x 32 tile through two 16 x 16 transposes of
   4-byte pairs. The source's even rows, read as pairs (s[2B][2A], s[2B][2A+1]),
   form one 16 x 16 matrix E, its odd rows another, O; transposed, E and O hold
   at [A][B] the four elements the destination's rows 2A and 2A+1 need at
   pair B: row 2A takes the low halves of E and O, row 2A+1 the high ones. */
CPU_CLONES static void combine16(uint32_t *restrict even, uint32_t *restrict odd, const uint32_t *restrict e,
                                 const uint32_t *restrict o) {
  for (int b = 0; b < 16; b++) {
    even[b] = (e[b] & 0xffffu) | (o[b] << 16);
    odd[b] = (e[b] >> 16) | (o[b] & 0xffff0000u);
  }
}

static void tile_2v(char *d, int64_t dsa, const char *s, int64_t ssb, int64_t na, int64_t nb) {
  if (na < TILE || nb < TILE || dsa % 4 || ssb % 4 || (uintptr_t)d % 4 || (uintptr_t)s % 4) {
    tile_2(d, dsa, s, ssb, na, nb);
    return;
  }
  float e[256], o[256];
  cpu_t16_f32(e, 16, (const float *)s, 2 * ssb / 4);
  cpu_t16_f32(o, 16, (const float *)(s + ssb), 2 * ssb / 4);
  for (int a = 0; a < 16; a++) {
    uint32_t ev[16], od[16];
    combine16(ev, od, (const uint32_t *)(const void *)(e + 16 * a), (const uint32_t *)(const void *)(o + 16 * a));
    memcpy(d + 2 * a * dsa, ev, sizeof ev);
    memcpy(d + (2 * a + 1) * dsa, od, sizeof od);
  }
}

typedef void (*tile_fn)(char *, int64_t, const char *, int64_t, int64_t, int64_t);

/* Runs tile t of the copy: outer index, then the tile row and column. */
static void run_tile(const cpu_iter *it, tile_fn fn, int64_t t, int64_t tiles_a, int64_t tiles_b) {
  int last = it->ndim - 1, la = last - 1;
  int64_t tb = t % tiles_b, ta = (t / tiles_b) % tiles_a, outer = t / tiles_b / tiles_a;
  int64_t doff = 0, soff = 0;
  for (int i = la - 1; i >= 0; i--) {
    int64_t ix = outer % it->shape[i];
    outer /= it->shape[i];
    doff += ix * it->st[0][i];
    soff += ix * it->st[1][i];
  }
  int64_t a0 = ta * TILE, b0 = tb * TILE;
  int64_t na = it->shape[la] - a0 < TILE ? it->shape[la] - a0 : TILE;
  int64_t nb = it->shape[last] - b0 < TILE ? it->shape[last] - b0 : TILE;
  char *d = it->base[0] + doff + a0 * it->st[0][la] + b0 * it->st[0][last];
  const char *s = it->base[1] + soff + a0 * it->st[1][la] + b0 * it->st[1][last];
  fn(d, it->st[0][la], s, it->st[1][last], na, nb);
}

bool cpu_copy_transposed(const cpu_iter *it, size_t es) {
  int last = it->ndim - 1, la = last - 1;
  /* the destination runs along its last dim, the source along the one before */
  if (it->ndim < 2 || it->st[0][last] != (int64_t)es || it->st[1][la] != (int64_t)es ||
      it->st[1][last] == (int64_t)es || it->shape[la] < TILE / 2 || it->shape[last] < TILE / 2)
    return false;
  tile_fn fn = es == 1 ? tile_1 : es == 2 ? tile_2v : es == 4 ? tile_4 : es == 8 ? tile_8 : NULL;
  if (!fn) return false;
  int64_t tiles_a = (it->shape[la] + TILE - 1) / TILE, tiles_b = (it->shape[last] + TILE - 1) / TILE;
  int64_t outer = it->numel / (it->shape[la] * it->shape[last]), n = outer * tiles_a * tiles_b;
  int nt = it->numel < CPU_GRAIN_MEM ? 1 : cpu_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t t = 0; t < n; t++) run_tile(it, fn, t, tiles_a, tiles_b);
  return true;
}
