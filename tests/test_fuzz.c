/* test_fuzz.c: the file readers against mutated inputs. From valid seeds
   (files written here and the golden files), each reader gets inputs with bits
   flipped, bytes inserted and deleted, truncations, edited length fields and
   splices of two seeds; every one must load or fail with a message, and
   nothing may crash (`make check-asan` runs this under ASan and UBSan).
   Seeded, so a failure repeats: ZORCH_FUZZ_SEED picks another seed,
   ZORCH_FUZZ_N the inputs per reader (default 3000, 1000 when sanitized). */
#include <stdint.h>
#include <unistd.h>

#include "tap.h"

static uint64_t rng_state;

/* splitmix64 */
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

typedef struct {
  unsigned char *p;
  size_t n;
} buf;

#define MAX_SEEDS 8
typedef struct {
  buf seed[MAX_SEEDS];
  int nseed;
  size_t lenfield, lensize; /* where the format's length field is, and its bytes */
} corpus;

static void add_seed(corpus *c, const void *p, size_t n) {
  if (c->nseed == MAX_SEEDS) return;
  buf *b = &c->seed[c->nseed++];
  b->p = malloc(n ? n : 1);
  memcpy(b->p, p, n);
  b->n = n;
}

static void add_seed_file(corpus *c, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  static unsigned char tmp[1 << 20];
  size_t n = fread(tmp, 1, sizeof tmp, f);
  fclose(f);
  if (n < sizeof tmp) add_seed(c, tmp, n);
}

/* A mutation of a random seed: one to four edits of random kinds. */
static buf mutate(const corpus *c) {
  const buf *s = &c->seed[below((size_t)c->nseed)];
  size_t cap = s->n * 2 + 64, n = s->n;
  unsigned char *p = malloc(cap);
  memcpy(p, s->p, n);
  int edits = 1 + (int)below(4);
  for (int e = 0; e < edits; e++) {
    switch (below(8)) {
      case 0: /* bit flips */
        for (int k = 0, m = 1 + (int)below(8); k < m && n; k++) p[below(n)] ^= (unsigned char)(1u << below(8));
        break;
      case 1: { /* insert bytes */
        size_t at = below(n + 1), m = 1 + below(8);
        if (n + m > cap) break;
        memmove(p + at + m, p + at, n - at);
        for (size_t k = 0; k < m; k++) p[at + k] = below(4) ? (unsigned char)rnd() : (unsigned char)" {}\"0:,["[below(8)];
        n += m;
        break;
      }
      case 2: { /* delete bytes */
        if (!n) break;
        size_t at = below(n), m = 1 + below(8);
        if (m > n - at) m = n - at;
        memmove(p + at, p + at + m, n - at - m);
        n -= m;
        break;
      }
      case 3: /* truncate */
        n = below(n + 1);
        break;
      case 4: { /* edit the length field: small steps and wild values */
        if (n < c->lenfield + c->lensize) break;
        uint64_t v = 0;
        for (size_t b = 0; b < c->lensize; b++) v |= (uint64_t)p[c->lenfield + b] << (8 * b);
        uint64_t opts[] = {v + 1 + below(8), v - 1 - below(8), rnd(), 0, UINT64_MAX, v * 2, v / 2};
        v = opts[below(sizeof opts / sizeof opts[0])];
        for (size_t b = 0; b < c->lensize; b++) p[c->lenfield + b] = (unsigned char)(v >> (8 * b));
        break;
      }
      case 5: { /* splice: a prefix of this with a suffix of another seed */
        const buf *o = &c->seed[below((size_t)c->nseed)];
        size_t keep = below(n + 1), from = below(o->n + 1);
        if (keep + (o->n - from) > cap) break;
        memcpy(p + keep, o->p + from, o->n - from);
        n = keep + (o->n - from);
        break;
      }
      case 6: { /* rewrite a digit, where the numbers of a header are */
        for (int tries = 0; tries < 16 && n; tries++) {
          size_t at = below(n);
          if (p[at] >= '0' && p[at] <= '9') {
            p[at] = (unsigned char)("0123456789-.e"[below(13)]);
            break;
          }
        }
        break;
      }
      default: { /* overwrite a random run */
        if (!n) break;
        size_t at = below(n), m = 1 + below(4);
        for (size_t k = 0; k < m && at + k < n; k++) p[at + k] = (unsigned char)rnd();
        break;
      }
    }
  }
  return (buf){p, n};
}

static char dir[256];

static void write_file(const char *path, const buf *b) {
  FILE *f = fopen(path, "wb");
  fwrite(b->p, 1, b->n, f);
  fclose(f);
}

/* The C safetensors reader: success (all freed) or an error with a message. */
static int fuzz_safetensors_c(const char *path) {
  int n, nm;
  char **names, **keys, **values;
  zorch_tensor **ts;
  if (zorch_load_safetensors_meta(path, &n, &names, &ts, &nm, &keys, &values) == ZORCH_OK) {
    for (int i = 0; i < n; i++)
      if (!ts[i] || !names[i]) return 0;
    zorch_safetensors_free(n, names, ts);
    zorch_safetensors_meta_free(nm, keys, values);
    return 1;
  }
  return zorch_last_error()[0] != 0;
}

/* Runs `call` (a Lua expression of the global P, the input's path) in the VM
   under pcall: it must return or raise a string; a crash ends the program. */
static int fuzz_lua(zorch_vm *vm, const char *call, const char *path) {
  char chunk[1024];
  snprintf(chunk, sizeof chunk,
           "P = %s%s%s\n"
           "local ok, err = pcall(function() return %s end)\n"
           "if not ok and type(err) ~= 'string' then error('a non-string error: ' .. tostring(err)) end\n"
           "if not ok and #err == 0 then error('an empty error message') end",
           "'", path, "'", call);
  if (zorch_vm_dostring(vm, chunk, "fuzz") != ZORCH_OK) {
    printf("#   %s on %s: %s\n", call, path, zorch_vm_error(vm));
    return 0;
  }
  return 1;
}

typedef int (*reader_fn)(zorch_vm *vm, const char *path);

static int read_st(zorch_vm *vm, const char *path) {
  return fuzz_safetensors_c(path) && fuzz_lua(vm, "zorch.load(P)", path);
}
/* torch.save files: the tree reader in C (all freed) and zorch.load */
static int read_pt(zorch_vm *vm, const char *path) {
  zorch_tree *tree;
  if (zorch_tree_load(path, &tree) == ZORCH_OK) zorch_tree_free(tree);
  else if (!zorch_last_error()[0]) return 0;
  return fuzz_lua(vm, "zorch.load(P)", path);
}
static int read_npy(zorch_vm *vm, const char *path) { return fuzz_lua(vm, "zorch.data.load_npy(P)", path); }
/* The checkpoint-manifest reader that load_checkpoint uses (JSON, then every
   field checked), and the DeepSpeed config reader behind zorch.Engine(json):
   both return false and a message for bad input; neither may raise. */
static int read_manifest(zorch_vm *vm, const char *path) {
  return fuzz_lua(vm, "assert(select('#', debug.getregistry()['zorch.private']._read_manifest_text(io.open(P, 'rb'):read('a'))) >= 1)", path);
}
static int read_ds(zorch_vm *vm, const char *path) {
  return fuzz_lua(vm, "assert(select('#', debug.getregistry()['zorch.private']._read_ds_config_text(io.open(P, 'rb'):read('a'), 1)) >= 1)", path);
}

/* Feeds `count` mutations of the corpus to the reader; returns how many
   passed (all of them, or the first failure stops it). */
static int fuzz(zorch_vm *vm, const char *name, corpus *c, reader_fn fn, int count, const char *ext) {
  char path[512];
  snprintf(path, sizeof path, "%s/in.%s", dir, ext);
  int i;
  for (i = 0; i < count; i++) {
    buf b = mutate(c);
    write_file(path, &b);
    int good = fn(vm, path);
    if (!good) {
      char keep[600];
      snprintf(keep, sizeof keep, "/tmp/zorch_fuzz_fail.%s", ext);
      write_file(keep, &b);
      printf("#   %s input %d failed; kept as %s\n", name, i, keep);
    }
    free(b.p);
    if (!good) break;
  }
  for (int s = 0; s < c->nseed; s++) free(c->seed[s].p);
  unlink(path);
  return i;
}

/* A version-1 .npy file of the given descr and shape text, with data bytes. */
static void npy_seed(corpus *c, const char *descr, const char *shape, size_t data) {
  char hdr[128];
  int h = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  int pad = 64 - (10 + h + 1) % 64;
  unsigned char file[512];
  size_t n = 0;
  memcpy(file, "\x93NUMPY\x01\x00", 8);
  int hl = h + pad % 64 + 1;
  file[8] = (unsigned char)(hl & 0xff);
  file[9] = (unsigned char)(hl >> 8);
  n = 10;
  memcpy(file + n, hdr, (size_t)h);
  n += (size_t)h;
  for (int k = 0; k < pad % 64; k++) file[n++] = ' ';
  file[n++] = '\n';
  for (size_t k = 0; k < data && n < sizeof file; k++) file[n++] = (unsigned char)(k * 37);
  add_seed(c, file, n);
}

int main(void) {
  const char *e = getenv("ZORCH_FUZZ_N");
  int count = e ? atoi(e) : getenv("ZORCH_TEST_SANITIZED") ? 1000 : 3000;
  e = getenv("ZORCH_FUZZ_SEED");
  uint64_t seed = e ? strtoull(e, NULL, 10) : 20240601;
  snprintf(dir, sizeof dir, "/tmp/zorch_fuzz_%d", (int)getpid());
  char cmd[300];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
  if (system(cmd) != 0) return 1;
  zorch_vm *vm = zorch_vm_new(NULL);
  ok(vm != NULL, "a VM starts");
  if (!vm) return done_testing();
  printf("# %d inputs per reader, seed %llu\n", count, (unsigned long long)seed);

  /* safetensors: files zorch writes (tensors of several dtypes, values in the
     metadata) and the golden files PyTorch wrote */
  rng_state = seed;
  char p[512];
  snprintf(p, sizeof p, "%s/seed.safetensors", dir);
  corpus st = {.lenfield = 0, .lensize = 8};
  char chunk[700];
  snprintf(chunk, sizeof chunk,
           "zorch.save({w = zorch.arange(6):view(2, 3):float(), b = zorch.ones(3, {dtype = 'float64'}), "
           "i = zorch.tensor({1, 2}), e = zorch.zeros(0, 3), step = 7, name = 'x', opt = {lr = 0.5}}, '%s')",
           p);
  ok(zorch_vm_dostring(vm, chunk, "seed") == ZORCH_OK, "a safetensors seed with values is written");
  add_seed_file(&st, p);
  const char *names[] = {"w"};
  zorch_tensor *w = zorch_ones(2, (int64_t[]){2, 2}, ZORCH_BF16, CPU);
  zorch_save_safetensors(p, 1, names, &w);
  zorch_tensor_free(w);
  add_seed_file(&st, p);
  add_seed_file(&st, "golden/from_torch.safetensors");
  add_seed_file(&st, "golden/simplenet_init.safetensors");
  ok(st.nseed == 4, "four safetensors seeds");
  int got = fuzz(vm, "safetensors", &st, read_st, count, "safetensors");
  ok(got == count, "safetensors: %d of %d mutated files load or fail cleanly (C and zorch.load)", got, count);

  /* .npy */
  rng_state = seed + 1;
  corpus npy = {.lenfield = 8, .lensize = 2};
  npy_seed(&npy, "<f4", "(2, 3)", 24);
  npy_seed(&npy, "<i8", "(3,)", 24);
  npy_seed(&npy, "|b1", "(2, 2)", 4);
  npy_seed(&npy, "<f8", "()", 8);
  add_seed_file(&npy, "golden/small.npy");
  got = fuzz(vm, "npy", &npy, read_npy, count, "npy");
  ok(got == count, "npy: %d of %d mutated files load or fail cleanly", got, count);

  /* torch.save files (zip and the format before it): PyTorch's own, from golden/gen_pt.py */
  rng_state = seed + 4;
  corpus pt = {.lenfield = 0, .lensize = 0};
  const char *pts[] = {"dtypes", "views", "nested", "legacy", "proto4", "state_fp32", "evil_system"};
  for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
    snprintf(p, sizeof p, "golden/pt/%s.pt", pts[i]);
    add_seed_file(&pt, p);
  }
  ok(pt.nseed == 7, "seven torch.save seeds");
  got = fuzz(vm, "torch.save", &pt, read_pt, count, "pt");
  ok(got == count, "torch.save files: %d of %d mutated files load or fail cleanly", got, count);

  /* the checkpoint manifest */
  rng_state = seed + 2;
  corpus man = {.lenfield = 0, .lensize = 0};
  const char *m1 =
      "{\"format\":\"zorch-checkpoint\",\"version\":1,\"world\":2,\"stage\":3,\"micro\":4,\"lr\":0.001,"
      "\"params\":[{\"name\":\"fc1.weight\",\"shape\":[20,10],\"offset\":0,\"numel\":200},"
      "{\"name\":\"fc1.bias\",\"shape\":[20],\"offset\":200,\"numel\":20}],"
      "\"files\":[{\"path\":\"rank0.safetensors\",\"fnv1a64\":\"0123456789abcdef\",\"bytes\":1024}],"
      "\"optimizer_state\":{\"step\":12},\"rng\":{\"seed\":42,\"offset\":1000},\"scheduler_step\":12}";
  add_seed(&man, m1, strlen(m1));
  const char *m2 = "{\"a\":[1,2.5,-3e10,true,false,null,\"s\\u00e9\\n\"],\"b\":{\"c\":{}}}";
  add_seed(&man, m2, strlen(m2));
  got = fuzz(vm, "manifest", &man, read_manifest, count, "json");
  ok(got == count, "manifest JSON: %d of %d mutated texts decode or fail cleanly", got, count);

  /* the DeepSpeed config */
  rng_state = seed + 3;
  corpus ds = {.lenfield = 0, .lensize = 0};
  const char *d1 =
      "{\"train_batch_size\":64,\"train_micro_batch_size_per_gpu\":16,\"gradient_accumulation_steps\":4,"
      "\"gradient_clipping\":1.0,\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":0.001,\"betas\":[0.9,0.999],"
      "\"eps\":1e-8,\"weight_decay\":0}},\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"warmup_min_lr\":0,"
      "\"warmup_max_lr\":0.001,\"warmup_num_steps\":100}},\"zero_optimization\":{\"stage\":2,"
      "\"reduce_bucket_size\":500000000,\"overlap_comm\":true},\"bf16\":{\"enabled\":false},\"steps_per_print\":10}";
  add_seed(&ds, d1, strlen(d1));
  const char *d2 = "{\"train_batch_size\":8,\"zero_optimization\":{\"stage\":3},\"fp16\":{\"enabled\":true},"
                   "\"scheduler\":{\"type\":\"WarmupCosineLR\",\"params\":{\"total_num_steps\":1000}}}";
  add_seed(&ds, d2, strlen(d2));
  got = fuzz(vm, "ds_config", &ds, read_ds, count, "json");
  ok(got == count, "DeepSpeed config: %d of %d mutated files load or fail cleanly", got, count);

  zorch_vm_free(vm);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  return done_testing();
}
