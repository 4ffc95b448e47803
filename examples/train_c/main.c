/* train_c: models/simple_net.lua's SimpleNet (Linear, ReLU, Linear, MSE)
   trained with Adam under ZeRO stages 0-3 from C alone (zorch.h and
   zorch_zero.h), on one rank or N under mpirun. With the same --load and
   --data it saves the weights models/simple_net.lua --no-shuffle saves, bit
   for bit. Run: build/examples/train_c --help */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zorch.h"
#include "zorch_zero.h"

static const zorch_device CPU = {ZORCH_CPU, 0};

typedef struct {
  long in, hidden, out, stage, accum, batch, steps, epochs, samples, seed, ckevery;
  double clip, lr;
  const char *load, *data, *save, *ckdir, *resume;
} flags;

static const char *USAGE =
    "usage: train_c [flags]\n"
    "  --in N --hidden N --out N   SimpleNet's sizes (10, 20, 2)\n"
    "  --zero-stage S              ZeRO stage 0-3 (2)\n"
    "  --clip X                    max global gradient norm, 0: off (1.0)\n"
    "  --accum K                   gradient accumulation steps (1)\n"
    "  --batch-size B --lr X       per-rank batch (64), Adam's learning rate (0.00015)\n"
    "  --steps N --epochs N        stop after N optimizer steps (0: none), or N epochs (1000)\n"
    "  --samples N --seed N        random data and weights without --data / --load (10000, 0)\n"
    "  --load FILE                 a state dict to start from (fc1.weight, fc1.bias, fc2.weight, fc2.bias)\n"
    "  --data FILE                 a safetensors file with X and Y, read in order\n"
    "  --save FILE                 where rank 0 saves the final state dict (model.safetensors; \"\": none)\n"
    "  --checkpoint-dir DIR        save each rank's shard there at the end (and every --checkpoint-every steps)\n"
    "  --resume DIR                continue from the shards in DIR (--steps counts the total)\n";

static int rank0 = 1; /* only rank 0 speaks */

static int fail(const char *fmt, const char *a, const char *b) {
  if (rank0) {
    fprintf(stderr, "train_c: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
  }
  return 2;
}

static int parse_long(const char *name, const char *v, long lo, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo) {
    char b[32];
    snprintf(b, sizeof b, "%ld", lo);
    return fail("%s must be an integer >= %s", name, b);
  }
  *out = x;
  return 0;
}

static int parse_double(const char *name, const char *v, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= 0) || !isfinite(x)) return fail("%s must be a number >= 0, got %s", name, v);
  *out = x;
  return 0;
}

static int parse(int argc, char **argv, flags *f) {
  *f = (flags){.in = 10, .hidden = 20, .out = 2, .stage = 2, .accum = 1, .batch = 64, .steps = 0, .epochs = 1000,
               .samples = 10000, .seed = 0, .clip = 1.0, .lr = 0.00015, .load = "", .data = "",
               .save = "model.safetensors", .ckdir = "", .resume = ""};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    char name[64];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (rank0) fputs(USAGE, stdout);
      return -1;
    }
    if (strncmp(a, "--", 2)) return fail("unexpected argument '%s' (flags start with --; see --help)", a, "");
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name) return fail("unknown flag '%s' (see --help)", a, "");
    memcpy(name, a, len), name[len] = 0;
    if (eq) v = eq + 1;
    else if (i + 1 < argc) v = argv[++i];
    else return fail("%s needs a value", name, "");
    int r;
    if (!strcmp(name, "--in")) r = parse_long(name, v, 1, &f->in);
    else if (!strcmp(name, "--hidden")) r = parse_long(name, v, 1, &f->hidden);
    else if (!strcmp(name, "--out")) r = parse_long(name, v, 1, &f->out);
    else if (!strcmp(name, "--zero-stage")) {
      r = parse_long(name, v, 0, &f->stage);
      if (!r && f->stage > 3) r = fail("--zero-stage must be 0, 1, 2 or 3, got %s", v, "");
    } else if (!strcmp(name, "--accum")) r = parse_long(name, v, 1, &f->accum);
    else if (!strcmp(name, "--batch-size")) r = parse_long(name, v, 1, &f->batch);
    else if (!strcmp(name, "--steps")) r = parse_long(name, v, 0, &f->steps);
    else if (!strcmp(name, "--epochs")) r = parse_long(name, v, 0, &f->epochs);
    else if (!strcmp(name, "--samples")) r = parse_long(name, v, 1, &f->samples);
    else if (!strcmp(name, "--seed")) r = parse_long(name, v, 0, &f->seed);
    else if (!strcmp(name, "--checkpoint-every")) r = parse_long(name, v, 0, &f->ckevery);
    else if (!strcmp(name, "--clip")) r = parse_double(name, v, &f->clip);
    else if (!strcmp(name, "--lr")) r = parse_double(name, v, &f->lr);
    else if (!strcmp(name, "--load")) f->load = v, r = 0;
    else if (!strcmp(name, "--data")) f->data = v, r = 0;
    else if (!strcmp(name, "--save")) f->save = v, r = 0;
    else if (!strcmp(name, "--checkpoint-dir")) f->ckdir = v, r = 0;
    else if (!strcmp(name, "--resume")) f->resume = v, r = 0;
    else r = fail("unknown flag '%s' (see --help)", name, "");
    if (r) return r;
  }
  return 0;
}

/* ---- the model ---- */
enum { W1, B1, W2, B2, NPARAM };
static const char *const NAMES[NPARAM] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

typedef struct {
  zorch_tensor *p[NPARAM];
  int mod[2]; /* stage 3: fc1's and fc2's module ids */
} simple_net;

/* U(-1/sqrt(in), 1/sqrt(in)), as nn.Linear starts (the values differ from a
   script's: --load gives both the same start) */
static zorch_tensor *uniform(int ndim, const int64_t *shape, double bound) {
  zorch_tensor *u = zorch_rand(ndim, shape, ZORCH_F32, CPU, NULL);
  zorch_tensor *s = u ? zorch_mul_scalar(u, 2 * bound) : NULL;
  zorch_tensor *p = s ? zorch_add_scalar(s, -bound) : NULL;
  zorch_tensor_free(u);
  zorch_tensor_free(s);
  return p;
}

/* The parameters, fresh or from --load (names and shapes checked). */
static int make_params(const flags *f, simple_net *m) {
  int64_t shapes[NPARAM][2] = {{f->hidden, f->in}, {f->hidden, 0}, {f->out, f->hidden}, {f->out, 0}};
  int nd[NPARAM] = {2, 1, 2, 1};
  double bound[NPARAM] = {1 / sqrt((double)f->in), 1 / sqrt((double)f->in), 1 / sqrt((double)f->hidden),
                          1 / sqrt((double)f->hidden)};
  for (int i = 0; i < NPARAM; i++) {
    if (*f->load) {
      zorch_tensor *t = zorch_load_safetensors_one(f->load, NAMES[i]);
      if (!t) return fail("--load: %s", zorch_last_error(), "");
      int64_t n = nd[i] == 2 ? shapes[i][0] * shapes[i][1] : shapes[i][0];
      bool ok = zorch_tensor_ndim(t) == nd[i] && zorch_tensor_numel(t) == n &&
                zorch_tensor_shape(t)[0] == shapes[i][0] && zorch_tensor_dtype(t) == ZORCH_F32;
      if (!ok) {
        zorch_tensor_free(t);
        return fail("--load: %s does not fit --in/--hidden/--out (or is not float32)", NAMES[i], "");
      }
      m->p[i] = zorch_contiguous(t);
      zorch_tensor_free(t);
    } else {
      m->p[i] = uniform(nd[i], shapes[i], bound[i]);
    }
    if (!m->p[i] || zorch_set_requires_grad(m->p[i], true)) return fail("%s", zorch_last_error(), "");
  }
  return 0;
}

/* One linear layer; at stage 3 inside its module's gather. */
static zorch_tensor *layer(zorch_zero *e, int stage, int mod, zorch_tensor *x, zorch_tensor *w, zorch_tensor *b) {
  if (stage == 3 && zorch_zero_module_begin(e, mod)) return NULL;
  zorch_tensor *y = zorch_linear_act(x, w, b, ZORCH_ACT_NONE);
  if (stage == 3 && y && zorch_zero_module_end(e, mod, y)) zorch_tensor_free(y), y = NULL;
  return y;
}

static zorch_tensor *loss_of(zorch_zero *e, int stage, simple_net *m, zorch_tensor *x, zorch_tensor *y) {
  zorch_tensor *h = layer(e, stage, m->mod[0], x, m->p[W1], m->p[B1]);
  zorch_tensor *r = h ? zorch_relu(h) : NULL;
  zorch_tensor *o = r ? layer(e, stage, m->mod[1], r, m->p[W2], m->p[B2]) : NULL;
  zorch_tensor *l = o ? zorch_mse_loss(o, y, ZORCH_REDUCE_MEAN) : NULL;
  zorch_tensor_free(h);
  zorch_tensor_free(r);
  zorch_tensor_free(o);
  return l;
}

/* ---- the data: data.DataLoader's batches in order ---- */
typedef struct {
  zorch_tensor *X, *Y;
  int64_t n, batch;
  int rank, world;
} loader;

static int64_t num_batches(const loader *d) {
  int64_t global = d->batch * d->world, rest = d->n % global;
  if (rest > 0 && rest < d->world) return d->n / global;
  return (d->n + global - 1) / global;
}

/* This rank's rows [*first, *first + *len) of batch b (0-based); false past the end. */
static bool batch_rows(const loader *d, int64_t b, int64_t *first, int64_t *len) {
  int64_t global = d->batch * d->world, gfirst = b * global;
  int64_t size = d->n - gfirst < global ? d->n - gfirst : global;
  if (size == global) {
    *first = gfirst + d->rank * d->batch, *len = d->batch;
  } else { /* the short last batch, split evenly */
    int64_t per = size / d->world, extra = size % d->world;
    *first = gfirst + d->rank * per + (d->rank < extra ? d->rank : extra);
    *len = per + (d->rank < extra ? 1 : 0);
  }
  return *len > 0;
}

static int load_data(const flags *f, loader *d) {
  if (*f->data) {
    d->X = zorch_load_safetensors_one(f->data, "X");
    d->Y = d->X ? zorch_load_safetensors_one(f->data, "Y") : NULL;
    if (!d->X || !d->Y) return fail("--data: %s (expected tensors named X and Y)", zorch_last_error(), "");
  } else {
    int64_t xs[2] = {f->samples, f->in}, ys[2] = {f->samples, f->out};
    d->X = zorch_randn(2, xs, ZORCH_F32, CPU, NULL);
    d->Y = d->X ? zorch_randn(2, ys, ZORCH_F32, CPU, NULL) : NULL;
    if (!d->Y) return fail("%s", zorch_last_error(), "");
  }
  int64_t n = zorch_tensor_shape(d->X)[0];
  if (zorch_tensor_ndim(d->X) != 2 || zorch_tensor_ndim(d->Y) != 2 || zorch_tensor_shape(d->Y)[0] != n ||
      zorch_tensor_shape(d->X)[1] != f->in || zorch_tensor_shape(d->Y)[1] != f->out)
    return fail("--data: X must be (samples, --in) and Y (samples, --out) with the same samples", "", "");
  d->n = n;
  d->batch = f->batch;
  return 0;
}

static void shard_path(char *buf, size_t n, const char *dir, int rank, int world) {
  snprintf(buf, n, "%s/zero-rank%d-of-%d.safetensors", dir, rank, world);
}

static int save_model(zorch_zero *e, int stage, simple_net *m, const char *path) {
  zorch_status st = stage == 3 ? zorch_zero_gather(e) : ZORCH_OK;
  if (!st && rank0) st = zorch_save_safetensors(path, NPARAM, NAMES, m->p);
  if (stage == 3) {
    zorch_status st2 = zorch_zero_release(e);
    if (!st) st = st2;
  }
  return st ? fail("--save: %s", zorch_last_error(), "") : 0;
}

static int checkpoint(zorch_zero *e, const flags *f, int rank, int world) {
  char path[4096];
  if (rank == 0 && mkdir(f->ckdir, 0777) && errno != EEXIST)
    return fail("--checkpoint-dir %s: %s", f->ckdir, strerror(errno));
  zorch_zero_comm *w = zorch_zero_world();
  int64_t one = 1;
  zorch_tensor *bar = zorch_zeros(1, &one, ZORCH_F32, CPU); /* a barrier: the folder exists */
  zorch_status st = bar ? zorch_zero_allreduce(w, bar) : zorch_last_status();
  zorch_tensor_free(bar);
  shard_path(path, sizeof path, f->ckdir, rank, world);
  if (!st) st = zorch_zero_save(e, path);
  return st ? fail("checkpoint: %s", zorch_last_error(), "") : 0;
}

static int run(const flags *f, zorch_zero_comm *world) {
  int rank = zorch_zero_comm_rank(world), nranks = zorch_zero_comm_size(world);
  zorch_manual_seed((uint64_t)f->seed);
  /* everything that can be wrong with the inputs is found before any step or write */
  if (*f->resume) {
    char path[4096];
    struct stat sb;
    shard_path(path, sizeof path, f->resume, rank, nranks);
    if (stat(path, &sb)) return fail("--resume: no checkpoint %s (%s)", path, strerror(errno));
  }
  loader d = {.rank = rank, .world = nranks};
  simple_net m = {0};
  int rc = load_data(f, &d);
  if (!rc) rc = make_params(f, &m);
  if (!rc && num_batches(&d) == 0) rc = fail("the data set is smaller than the ranks: no batch would run", "", "");
  zorch_zero *e = NULL;
  if (!rc) {
    zorch_zero_options o;
    zorch_zero_options_init(&o);
    int groups[2] = {2, 2}; /* stage 3: each Linear's weight and bias, gathered together */
    o.stage = (int)f->stage, o.clip = f->clip, o.accumulation = (int)f->accum, o.data = world;
    o.ngroups = 2, o.group_sizes = groups;
    if (zorch_zero_new(&o, NPARAM, m.p, &e)) rc = fail("%s", zorch_last_error(), "");
  }
  for (int k = 0; !rc && f->stage == 3 && k < 2; k++)
    if (zorch_zero_module_register(e, 1, &k, &m.mod[k])) rc = fail("%s", zorch_last_error(), "");
  int64_t steps = 0, micro = 0;
  if (!rc && *f->resume) {
    char path[4096];
    shard_path(path, sizeof path, f->resume, rank, nranks);
    if (zorch_zero_load(e, path)) rc = fail("--resume: %s", zorch_last_error(), "");
    else zorch_zero_counts(e, &micro, &steps);
  }
  zorch_zero_update u = {.kind = ZORCH_ZERO_ADAM,
                         .adam = {.lr = f->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0}};
  int64_t nb = rc ? 1 : num_batches(&d);
  int64_t epoch = micro / nb, skip = micro % nb;
  double last = NAN;
  bool done = f->steps > 0 && steps >= f->steps;
  for (; !rc && !done && epoch < f->epochs; epoch++, skip = 0) {
    for (int64_t b = skip; !rc && b < nb; b++) {
      int64_t first, len;
      if (!batch_rows(&d, b, &first, &len)) break;
      zorch_tensor *x = zorch_narrow(d.X, 0, first, len), *y = zorch_narrow(d.Y, 0, first, len);
      zorch_tensor *l = x && y ? loss_of(e, (int)f->stage, &m, x, y) : NULL;
      zorch_zero_step_info info;
      zorch_status st = l ? ZORCH_OK : zorch_last_status();
      if (!st && micro % f->accum == 0) st = zorch_zero_zero_grad(e);
      if (!st) st = zorch_zero_backward(e, l);
      micro++;
      if (!st) st = zorch_zero_step(e, &u, &info);
      if (!st) zorch_tensor_item(l, &last);
      zorch_tensor_free(x), zorch_tensor_free(y), zorch_tensor_free(l);
      if (st) {
        rc = fail("step %s: %s", "", zorch_last_error());
        break;
      }
      if (info.stepped) {
        steps++;
        if (*f->ckdir && f->ckevery > 0 && steps % f->ckevery == 0) rc = checkpoint(e, f, rank, nranks);
      }
      if (f->steps > 0 && steps >= f->steps) {
        done = true;
        break;
      }
    }
  }
  if (!rc && *f->ckdir) rc = checkpoint(e, f, rank, nranks);
  if (!rc && *f->save) rc = save_model(e, (int)f->stage, &m, f->save);
  if (!rc && rank0)
    printf("done: %lld steps on %d rank%s at ZeRO stage %ld, last loss %.6f, saved %s\n", (long long)steps, nranks,
           nranks == 1 ? "" : "s", f->stage, last, *f->save ? f->save : "nothing");
  zorch_zero_free(e);
  for (int i = 0; i < NPARAM; i++) zorch_tensor_free(m.p[i]);
  zorch_tensor_free(d.X), zorch_tensor_free(d.Y);
  return rc;
}

int main(int argc, char **argv) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK"); /* (before MPI starts: flag errors print once) */
  if (!r) r = getenv("PMI_RANK");
  rank0 = !r || atoi(r) == 0;
  flags f;
  int rc = parse(argc, argv, &f);
  if (rc) return rc < 0 ? 0 : rc;
  zorch_zero_comm *world = zorch_zero_world();
  if (!world) return fail("%s", zorch_last_error(), "");
  rank0 = zorch_zero_comm_rank(world) == 0;
  rc = run(&f, world);
  zorch_zero_finalize();
  return rc;
}
