/* zorch_custom_node: a node whose backward the caller supplies, as PyTorch's
   autograd.Function. The gradients it returns reach the inputs, saved tensors
   are checked for in-place writes, errors reach zorch_backward, and ctx is
   released exactly once on every path. */
#include "tap.h"

typedef struct {
  int backwards, releases;
  int fail;           /* 1: return an error with a message, 2: without one */
  int64_t wrong_size; /* > 0: return a gradient of this many elements */
} counts;

/* d/dx x^3 = 3 x^2, from the saved x */
static zorch_status cube_backward(void *ctx, zorch_tensor *g, zorch_tensor *const *saved, int nin,
                                  zorch_tensor **gin) {
  counts *c = ctx;
  c->backwards++;
  if (c->fail == 1) return zorch_set_error(ZORCH_ERR_ARG, "cube: refused on purpose (%d)", 7);
  if (c->fail == 2) return ZORCH_ERR_INTERNAL;
  if (c->wrong_size) {
    gin[0] = zorch_ones(1, &c->wrong_size, ZORCH_F32, CPU);
    return ZORCH_OK;
  }
  zorch_tensor *sq = zorch_mul(saved[0], saved[0]);
  zorch_tensor *s3 = sq ? zorch_mul_scalar(sq, 3) : NULL;
  gin[0] = s3 ? zorch_mul(s3, g) : NULL;
  zorch_tensor_free(sq);
  zorch_tensor_free(s3);
  for (int i = 1; i < nin; i++) gin[i] = zorch_tensor_retain(g); /* other inputs: identity */
  return gin[0] ? ZORCH_OK : zorch_last_status();
}

static void release(void *ctx) { ((counts *)ctx)->releases++; }

static const zorch_custom_fn cube = {"CubeBackward", cube_backward, release};

/* x^3 recorded as one custom node over x (and extra, when not NULL) */
static zorch_tensor *cube_of(zorch_tensor *x, zorch_tensor *extra, counts *c) {
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *sq = zorch_mul(x, x), *out = zorch_mul(sq, x);
  zorch_set_grad_enabled(prev);
  zorch_tensor_free(sq);
  zorch_tensor *in[2] = {x, extra};
  zorch_tensor *y = zorch_custom_node(out, extra ? 2 : 1, in, 1, &x, &cube, c);
  zorch_tensor_free(out);
  return y;
}

static zorch_tensor *leaf(const double *v, int64_t n) {
  zorch_tensor *x = from_doubles(v, 1, &n, ZORCH_F32);
  zorch_set_requires_grad(x, true);
  return x;
}

int main(void) {
  const double xv[3] = {1, -2, 0.5};
  zorch_tensor *x = leaf(xv, 3);
  counts c = {0};
  zorch_tensor *y = cube_of(x, NULL, &c);
  ok(y && zorch_requires_grad(y) && !zorch_is_leaf(y) && strcmp(zorch_grad_fn_name(y), "CubeBackward") == 0,
     "the result has the custom node as its grad_fn");
  ok(y && fabs(at(y, 1) + 8) < 1e-6, "and the forward's values (-2)^3 = %g", y ? at(y, 1) : NAN);
  zorch_tensor *s = zorch_sum(y, 0, NULL, false);
  ok(zorch_backward(s, NULL, false) == ZORCH_OK, "backward through it runs");
  zorch_tensor *g = zorch_grad(x);
  ok(g && fabs(at(g, 0) - 3) < 1e-6 && fabs(at(g, 1) - 12) < 1e-6 && fabs(at(g, 2) - 0.75) < 1e-6,
     "x.grad is 3 x^2 from the saved x: %g %g %g", g ? at(g, 0) : NAN, g ? at(g, 1) : NAN, g ? at(g, 2) : NAN);
  ok(c.backwards == 1 && c.releases == 1, "backward ran once, ctx released after it (%d, %d)", c.backwards,
     c.releases);
  ok(zorch_backward(s, NULL, false) == ZORCH_ERR_STATE && c.backwards == 1,
     "a second backward after the saved state went is refused: %s", zorch_last_error());
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  ok(c.releases == 1, "freeing the graph releases nothing twice");

  /* retained graph: two backwards, one release when the graph goes */
  counts r = {0};
  zorch_set_grad(x, NULL);
  y = cube_of(x, NULL, &r);
  s = zorch_sum(y, 0, NULL, false);
  ok(zorch_backward(s, NULL, true) == ZORCH_OK && zorch_backward(s, NULL, true) == ZORCH_OK && r.backwards == 2 &&
         r.releases == 0, "with retain_graph backward runs twice and ctx stays");
  g = zorch_grad(x);
  ok(g && fabs(at(g, 1) - 24) < 1e-5, "the gradients add up: %g", g ? at(g, 1) : NAN);
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  ok(r.releases == 1, "ctx released once the graph is freed");

  /* nothing to record */
  counts n = {0};
  zorch_tensor *c3 = zorch_ones(SHAPE(2), ZORCH_F32, CPU);
  y = cube_of(c3, NULL, &n);
  ok(y && !zorch_requires_grad(y) && !zorch_grad_fn_name(y) && n.releases == 1,
     "no input requires grad: a detached result, ctx released at once");
  ok(!zorch_grad_needed(1, &c3) && zorch_grad_needed(1, &x), "zorch_grad_needed says the same");
  zorch_tensor_free(y);
  bool prev = zorch_set_grad_enabled(false);
  counts ng = {0};
  y = cube_of(x, NULL, &ng);
  bool needed_off = zorch_grad_needed(1, &x);
  zorch_set_grad_enabled(prev);
  ok(y && !zorch_requires_grad(y) && ng.releases == 1 && !needed_off,
     "without grad mode: nothing recorded");
  zorch_tensor_free(y);

  /* an input that needs no gradient gets none, the other one does */
  counts two = {0};
  zorch_set_grad(x, NULL);
  y = cube_of(x, c3, &two);
  s = y ? zorch_sum(y, 0, NULL, false) : NULL;
  ok(s && zorch_backward(s, NULL, false) == ZORCH_OK && zorch_grad(x) && !zorch_grad(c3),
     "two inputs: the one without requires_grad gets no gradient");
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  ok(two.releases == 1, "released once");

  /* errors from the backward */
  counts e = {.fail = 1};
  y = cube_of(x, NULL, &e);
  s = zorch_sum(y, 0, NULL, false);
  zorch_status st = zorch_backward(s, NULL, false);
  ok(st == ZORCH_ERR_ARG && strstr(zorch_last_error(), "CubeBackward") &&
         strstr(zorch_last_error(), "refused on purpose (7)"),
     "the backward's error reaches zorch_backward, named: %s", zorch_last_error());
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  ok(e.releases == 1, "and ctx is released once");
  counts e2 = {.fail = 2};
  zorch_set_error(ZORCH_ERR_IO, "an older error");
  y = cube_of(x, NULL, &e2);
  s = zorch_sum(y, 0, NULL, false);
  st = zorch_backward(s, NULL, false);
  ok(st == ZORCH_ERR_INTERNAL && strstr(zorch_last_error(), "without a message") &&
         !strstr(zorch_last_error(), "older"),
     "an error without a message gets one: %s", zorch_last_error());
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  counts w = {.wrong_size = 5};
  y = cube_of(x, NULL, &w);
  s = zorch_sum(y, 0, NULL, false);
  ok(zorch_backward(s, NULL, false) != ZORCH_OK && w.backwards == 1,
     "a gradient of the wrong shape is an error: %s", zorch_last_error());
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  ok(w.releases == 1, "released once");

  /* a saved tensor written in place: refused before the backward runs */
  counts v = {0};
  zorch_tensor *x2 = leaf(xv, 3), *xc = zorch_mul_scalar(x2, 1); /* a non-leaf that can be written */
  uint32_t v0 = zorch_tensor_version(xc);
  y = cube_of(xc, NULL, &v);
  prev = zorch_set_grad_enabled(false);
  ok(zorch_fill_(xc, 2) == ZORCH_OK && zorch_tensor_version(xc) == v0 + 1, "an in-place write bumps the version");
  zorch_set_grad_enabled(prev);
  s = zorch_sum(y, 0, NULL, false);
  ok(zorch_backward(s, NULL, false) == ZORCH_ERR_STATE && v.backwards == 0 && strstr(zorch_last_error(), "inplace"),
     "the saved tensor's write is caught before backward: %s", zorch_last_error());
  zorch_tensor_free(s);
  zorch_tensor_free(y);
  zorch_tensor_free(xc);
  zorch_tensor_free(x2);
  ok(v.releases == 1, "released once");

  /* bad arguments: refused, ctx still released */
  counts b = {0};
  zorch_custom_fn nameless = {NULL, cube_backward, release};
  ok(!zorch_custom_node(x, 1, &x, 0, NULL, &nameless, &b) && zorch_last_status() == ZORCH_ERR_ARG &&
         b.releases == 1, "a fn without a name: ZORCH_ERR_ARG, ctx released: %s", zorch_last_error());
  ok(!zorch_custom_node(x, 1, &x, ZORCH_CUSTOM_MAX_SAVED + 1, (zorch_tensor *[6]){x, x, x, x, x, x}, &cube, &b) &&
         b.releases == 2, "too many saved tensors refused: %s", zorch_last_error());
  ok(!zorch_custom_node(NULL, 1, &x, 0, NULL, &cube, &b) && b.releases == 3, "a NULL out refused");
  ok(!zorch_custom_node(x, 1, &x, 0, NULL, NULL, &b) && zorch_last_status() == ZORCH_ERR_ARG, "a NULL fn refused");

  /* the generator's seed back */
  zorch_generator *gen = zorch_generator_new(1234);
  zorch_tensor *d = zorch_rand(SHAPE(4), ZORCH_F32, CPU, gen);
  ok(zorch_generator_initial_seed(gen) == 1234 && zorch_generator_offset(gen) > 0,
     "initial_seed gives the seed, the offset moved on");
  zorch_generator_seed(gen, 99);
  ok(zorch_generator_initial_seed(gen) == 99, "and follows a reseed");
  zorch_tensor_free(d);
  zorch_generator_free(gen);
  zorch_tensor_free(c3);
  zorch_tensor_free(x);
  return done_testing();
}
