/* Philox: known answers, reproducibility, stream layout and distributions. */
#include "../ops/backend/math.h"
#include "tap.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  zm_u32x4 c = {{c0, c1, c2, c3}};
  zm_u32x4 r = zm_philox4x32(c, k0, k1);
  ok(r.v[0] == r0 && r.v[1] == r1 && r.v[2] == r2 && r.v[3] == r3,
     "philox4x32-10 known answer for key %08x %08x", k0, k1);
}

static void moments(zorch_tensor *t, double *mean, double *var) {
  int64_t n = zorch_tensor_numel(t);
  double *v = malloc((size_t)n * sizeof(double));
  zorch_tensor_to_doubles(t, v, n);
  double s = 0, ss = 0;
  for (int64_t i = 0; i < n; i++) s += v[i];
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
  *var = ss / (double)n;
  free(v);
}

int main(void) {
  /* Random123's kat_vectors */
  kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  kat(~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
      0x94fdcceb, 0x5001e420, 0x24126ea1);

  zorch_generator *g = zorch_generator_new(42);
  zorch_tensor *a = zorch_randn(SHAPE(1000), ZORCH_F32, CPU, g);
  zorch_generator_seed(g, 42);
  zorch_tensor *b = zorch_randn(SHAPE(1000), ZORCH_F32, CPU, g);
  double va[1000], vb[1000];
  zorch_tensor_to_doubles(a, va, 1000);
  zorch_tensor_to_doubles(b, vb, 1000);
  ok(memcmp(va, vb, sizeof va) == 0, "the same seed gives the same numbers");
  ok(zorch_generator_offset(g) == 500, "randn of 1000 uses 500 counter blocks");
  zorch_tensor *c = zorch_randn(SHAPE(1000), ZORCH_F32, CPU, g);
  ok(at(c, 0) != va[0], "the next draw continues the stream");
  zorch_generator_set_offset(g, 250);
  zorch_tensor *d = zorch_randn(SHAPE(10), ZORCH_F32, CPU, g);
  ok(at(d, 0) == va[500] && at(d, 9) == va[509], "a stream can be resumed from its offset");
  /* float64 draws use the same blocks, so float32 is float64 rounded */
  zorch_generator_seed(g, 42);
  zorch_tensor *a64 = zorch_randn(SHAPE(1000), ZORCH_F64, CPU, g);
  ok(at(a64, 17) != va[17] && (float)at(a64, 17) == (float)va[17], "float32 normals are rounded float64 ones");
  /* element i depends on (seed, offset, i) alone: the threaded path equals the formula */
  zorch_generator_seed(g, 7);
  zorch_tensor *big = zorch_rand(SHAPE(1 << 18), ZORCH_F32, CPU, g);
  int64_t idx[] = {0, 3, 4, 100001, (1 << 18) - 1};
  int same = 1;
  for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)
    same &= at(big, idx[i]) == (double)zm_random_unit_f32(7, 0, idx[i]);
  ok(same, "threaded rand equals the per-element formula");
  double mean, var;
  moments(big, &mean, &var);
  ok(fabs(mean - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.002, "uniform moments (mean %.4f, var %.4f)", mean, var);
  zorch_tensor *nb = zorch_randn(SHAPE(1 << 18), ZORCH_F64, CPU, g);
  moments(nb, &mean, &var);
  ok(fabs(mean) < 0.01 && fabs(var - 1) < 0.01, "normal moments (mean %.4f, var %.4f)", mean, var);
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < 4096; i++) {
    double u = at(big, i);
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
  }
  ok(lo >= 0 && hi < 1, "uniform values lie in [0, 1)");
  zorch_manual_seed(5);
  zorch_tensor *e = zorch_rand(SHAPE(3), ZORCH_F32, CPU, NULL);
  zorch_manual_seed(5);
  zorch_tensor *f = zorch_rand(SHAPE(3), ZORCH_F32, CPU, NULL);
  ok(at(e, 2) == at(f, 2), "manual_seed reseeds the default generator");
  /* randint: element i is zm_random_int of (seed, offset, i), in [low, high) */
  zorch_generator_seed(g, 11);
  zorch_tensor *ri = zorch_randint(-3, 4, SHAPE(5000), ZORCH_I64, CPU, g);
  ok(zorch_generator_offset(g) == 2500, "randint of 5000 uses 2500 counter blocks");
  int in_range = 1, counts[7] = {0};
  for (int64_t i = 0; i < 5000; i++) {
    double v = at(ri, i);
    in_range &= v >= -3 && v < 4 && v == (double)zm_random_int(11, 0, i, -3, 7);
    if (v >= -3 && v < 4) counts[(int)v + 3]++;
  }
  ok(in_range, "randint values lie in [low, high) and follow the per-element formula");
  int flat = 1;
  for (int k = 0; k < 7; k++) flat &= counts[k] > 600 && counts[k] < 830;
  ok(flat, "randint is uniform over its range (%d .. %d of 5000 per value)", counts[0], counts[6]);
  zorch_tensor *rbad = zorch_randint(2, 2, SHAPE(3), ZORCH_I64, CPU, g);
  ok(!rbad && strstr(zorch_last_error(), "randint"), "randint refuses high <= low: %s", zorch_last_error());
  /* randperm: every value once; the same seed, the same permutation */
  zorch_generator_seed(g, 12);
  zorch_tensor *p1 = zorch_randperm(1000, ZORCH_I64, CPU, g);
  zorch_generator_seed(g, 12);
  zorch_tensor *p2 = zorch_randperm(1000, ZORCH_I64, CPU, g);
  int seen[1000] = {0}, perm = 1, same_p = 1, moved = 0;
  for (int64_t i = 0; i < 1000; i++) {
    int64_t v = (int64_t)at(p1, i);
    perm &= v >= 0 && v < 1000 && !seen[v];
    if (v >= 0 && v < 1000) seen[v] = 1;
    same_p &= at(p2, i) == (double)v;
    moved += v != i;
  }
  ok(perm && moved > 900, "randperm(1000) holds 0..999 once each, shuffled (%d moved)", moved);
  ok(same_p && zorch_generator_offset(g) == 500, "randperm repeats for a seed and uses n/2 blocks");
  zorch_tensor *p0 = zorch_randperm(0, ZORCH_I64, CPU, g);
  ok(p0 && zorch_tensor_numel(p0) == 0, "randperm(0) is empty");
  zorch_tensor *fr2[] = {ri, p1, p2, p0};
  for (size_t i = 0; i < sizeof fr2 / sizeof fr2[0]; i++) zorch_tensor_free(fr2[i]);
  zorch_tensor *fr[] = {a, b, c, d, a64, big, nb, e, f};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
  zorch_generator_free(g);
  return done_testing();
}
