/* Tensors: creation, views and aliasing, broadcasting, promotion, printing,
   reference counting and errors. */
/* tensor.h for the storage calls; its SHAPE gives way to the tests' */
#include "tensor.h"
#undef SHAPE
#include "tap.h"

static int str_is(zorch_tensor *t, const char *want) {
  char *s = zorch_tensor_format(t);
  int r = s && strcmp(s, want) == 0;
  if (!r) printf("# got:  %s\n# want: %s\n", s ? s : "(null)", want);
  free(s);
  return r;
}

static int deleter_calls;
static void count_delete(void *data, void *ctx) {
  (void)data;
  (void)ctx;
  deleter_calls++;
}

static void test_creation(void) {
  zorch_tensor *a = zorch_arange(0, 6, 1, ZORCH_F32, CPU);
  ok(shape_is(a, SHAPE(6)) && at(a, 5) == 5, "arange gives 0..5");
  zorch_tensor *f = zorch_full(SHAPE(2, 2), 3.5, ZORCH_F64, CPU);
  ok(at(f, 3) == 3.5 && zorch_tensor_dtype(f) == ZORCH_F64, "full fills with the value and dtype");
  zorch_tensor *e = zorch_zeros(SHAPE(0, 3), ZORCH_F32, CPU);
  ok(e && zorch_tensor_numel(e) == 0, "zero-size tensors exist");
  zorch_tensor *s = zorch_sum(e, 0, NULL, false);
  ok(s && at(s, 0) == 0, "sum of an empty tensor is 0");
  zorch_tensor *big = zorch_ones(SHAPE(1, 2, 1, 2, 1, 2, 1, 2), ZORCH_F32, CPU);
  ok(big && zorch_tensor_numel(big) == 16, "8 dims are supported");
  ok(!zorch_ones(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, ZORCH_F32, CPU) &&
         zorch_last_status() == ZORCH_ERR_ARG,
     "9 dims are refused");
  ok(!zorch_zeros(SHAPE(1 << 30, 1 << 30, 1 << 20), ZORCH_F32, CPU) &&
         zorch_last_status() == ZORCH_ERR_OOM,
     "an impossible allocation is an out-of-memory error: %s", zorch_last_error());
  ok(!zorch_zeros(SHAPE(100000, 100000, 100000), ZORCH_F32, CPU) &&
         zorch_last_status() == ZORCH_ERR_OOM,
     "an allocation the system refuses is an out-of-memory error, not a crash");
  ok(!zorch_zeros(SHAPE(2, -1), ZORCH_F32, CPU) && error_has("negative"), "negative sizes are refused");
  float buf[6] = {1, 2, 3, 4, 5, 6};
  zorch_tensor *w = zorch_tensor_wrap_owned(buf, ZORCH_F32, SHAPE(2, 3), NULL, count_delete, NULL);
  zorch_tensor *wt = zorch_transpose(w, 0, 1);
  buf[4] = 50;
  ok(at(wt, 3) == 50, "a wrapped buffer is shared, not copied");
  zorch_tensor_free(w);
  ok(deleter_calls == 0, "the deleter waits for the last view");
  zorch_tensor_free(wt);
  ok(deleter_calls == 1, "the deleter runs once when the last view goes");
  zorch_tensor *r1 = zorch_randn(SHAPE(3), ZORCH_F32, CPU, NULL);
  ok(r1 && zorch_tensor_dtype(r1) == ZORCH_F32, "randn with the default generator");
  ok(!zorch_rand(SHAPE(3), ZORCH_I32, CPU, NULL) && zorch_last_status() == ZORCH_ERR_DTYPE,
     "rand refuses integer dtypes");
  zorch_tensor *bf = zorch_randn(SHAPE(64), ZORCH_BF16, CPU, NULL);
  ok(bf && zorch_tensor_dtype(bf) == ZORCH_BF16, "randn in bfloat16");
  zorch_device dev;
  ok(zorch_device_parse("cuda:1", &dev) == ZORCH_OK && dev.type == ZORCH_CUDA && dev.index == 1,
     "device names parse");
  ok(zorch_device_parse("tpu", &dev) != ZORCH_OK && error_has("tpu"), "unknown devices are named in the error");
  ok(!zorch_zeros(SHAPE(2), ZORCH_F32, (zorch_device){ZORCH_CUDA, 0}) &&
         zorch_last_status() == ZORCH_ERR_DEVICE,
     "tensors on a missing device are an error: %s", zorch_last_error());
  zorch_tensor *r[] = {a, f, e, s, big, r1, bf};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) zorch_tensor_free(r[i]);
}

static void test_views(void) {
  zorch_tensor *a = zorch_arange(0, 12, 1, ZORCH_F32, CPU);
  zorch_tensor *m = zorch_view(a, SHAPE(3, 4));
  zorch_tensor *t = zorch_transpose(m, 0, 1);
  ok(zorch_tensor_shares_storage(a, t) && !zorch_tensor_is_contiguous(t), "transpose is a view");
  ok(at(t, 1) == 4 && at(t, 3) == 1 && at(t, 4) == 5, "transpose reads through strides");
  ok(!zorch_view(t, SHAPE(12)) && error_has("reshape"), "view of a transposed tensor says to use reshape");
  zorch_tensor *r = zorch_reshape(t, SHAPE(12));
  ok(r && !zorch_tensor_shares_storage(r, a) && at(r, 1) == 4, "reshape copies when it must");
  zorch_tensor *r2 = zorch_reshape(m, SHAPE(2, -1));
  ok(r2 && zorch_tensor_shares_storage(r2, a) && shape_is(r2, SHAPE(2, 6)), "reshape views when it can, -1 inferred");
  zorch_tensor *n = zorch_narrow(m, 1, 1, 2);
  zorch_tensor *twos = zorch_full(SHAPE(3, 2), 2, ZORCH_F32, CPU);
  ok(zorch_copy_(n, twos) == ZORCH_OK && at(a, 1) == 2 && at(a, 2) == 2 && at(a, 3) == 3,
     "writing into a narrow view changes the base");
  zorch_tensor *s = zorch_select(m, 0, -1);
  ok(shape_is(s, SHAPE(4)) && at(s, 0) == 8, "select with a negative index");
  zorch_tensor *col = zorch_select(m, 1, 0);
  zorch_tensor *col1 = zorch_unsqueeze(col, 0);
  zorch_tensor *ex = zorch_expand(col1, SHAPE(2, 3));
  zorch_tensor_free(col1);
  ok(shape_is(ex, SHAPE(2, 3)) && zorch_tensor_strides(ex)[0] == 0 && at(ex, 5) == 8,
     "expand broadcasts with stride 0");
  zorch_tensor *a3 = zorch_view(a, SHAPE(2, 3, 2));
  zorch_tensor *p = zorch_permute(a3, (int[]){2, 0, 1});
  zorch_tensor_free(a3);
  ok(shape_is(p, SHAPE(2, 2, 3)) && at(p, 1) == 2, "permute reorders dims");
  zorch_tensor *c = zorch_contiguous(m);
  ok(c == m && zorch_tensor_refcount(m) == 2, "contiguous of a contiguous tensor is the same tensor");
  zorch_tensor_free(c);
  ok(!zorch_narrow(m, 1, 3, 2) && error_has("(3, 4)"), "narrow out of range names the shape: %s", zorch_last_error());
  ok(!zorch_permute(m, (int[]){0, 0}) && error_has("repeated"), "permute refuses a repeated dim");
  ok(!zorch_expand(m, SHAPE(3, 5)) && error_has("expand"), "expand refuses an incompatible size");
  zorch_tensor *v = zorch_view(a, SHAPE(3, 4));
  zorch_tensor_free(a);
  ok(at(v, 11) == 11, "a view keeps the storage alive after its base is freed");
  zorch_tensor *fr[] = {m, t, r, r2, n, twos, s, col, ex, p, v};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

static void test_broadcast_and_promotion(void) {
  zorch_tensor *a = zorch_arange(0, 3, 1, ZORCH_F32, CPU), *b = zorch_arange(0, 4, 1, ZORCH_F32, CPU);
  zorch_tensor *c = zorch_view(a, SHAPE(3, 1)), *d = zorch_view(b, SHAPE(1, 4));
  zorch_tensor *s = zorch_add(c, d);
  ok(shape_is(s, SHAPE(3, 4)) && at(s, 11) == 5, "(3,1) + (1,4) broadcasts to (3,4)");
  zorch_tensor *s2 = zorch_mul(s, b);
  ok(shape_is(s2, SHAPE(3, 4)) && at(s2, 7) == 4 * 3, "(3,4) * (4,) broadcasts");
  zorch_tensor *sc = zorch_full(0, NULL, 10, ZORCH_F32, CPU);
  zorch_tensor *s3 = zorch_sub(sc, s);
  ok(shape_is(s3, SHAPE(3, 4)) && at(s3, 0) == 10, "0-dim tensors broadcast");
  zorch_tensor *bad = zorch_add(s, a);
  ok(!bad && error_has("(3, 4)") && error_has("(3,)") && error_has("add"),
     "a broadcast error names the op and shapes: %s", zorch_last_error());
  /* aliasing: an op writing into a fresh tensor while reading a strided view of the same storage */
  zorch_tensor *tt = zorch_transpose(s, 0, 1);
  zorch_tensor *sum = zorch_add(tt, tt);
  ok(at(sum, 1) == 2 * at(s, 4), "ops read transposed views correctly");
  zorch_tensor *i32 = zorch_full(SHAPE(2), 7, ZORCH_I32, CPU), *i64 = zorch_full(SHAPE(2), 2, ZORCH_I64, CPU);
  zorch_tensor *ii = zorch_add(i32, i64);
  ok(zorch_tensor_dtype(ii) == ZORCH_I64 && at(ii, 0) == 9, "int32 + int64 is int64");
  zorch_tensor *q = zorch_div(i32, i64);
  ok(zorch_tensor_dtype(q) == ZORCH_F32 && at(q, 0) == 3.5, "integer division is true division");
  zorch_tensor *fi = zorch_add(i64, a);
  ok(fi == NULL && error_has("broadcast"), "(2,) + (3,) is refused");
  zorch_tensor *h = zorch_ones(SHAPE(2), ZORCH_BF16, CPU), *h2 = zorch_ones(SHAPE(2), ZORCH_F16, CPU);
  zorch_tensor *hh = zorch_add(h, h2);
  ok(zorch_tensor_dtype(hh) == ZORCH_F32 && at(hh, 1) == 2, "bfloat16 + float16 is float32");
  zorch_tensor *hb = zorch_mul(h, h);
  ok(zorch_tensor_dtype(hb) == ZORCH_BF16, "bfloat16 ops keep bfloat16");
  zorch_tensor *cmp = zorch_lt(a, sc);
  ok(zorch_tensor_dtype(cmp) == ZORCH_BOOL && at(cmp, 2) == 1, "comparisons give bool");
  zorch_tensor *is = zorch_sum(i32, 0, NULL, false);
  ok(zorch_tensor_dtype(is) == ZORCH_I64 && at(is, 0) == 14, "sum of int32 is int64");
  zorch_tensor *ie = zorch_exp(i64);
  ok(zorch_tensor_dtype(ie) == ZORCH_F32 && fabs(at(ie, 0) - exp(2)) < 1e-5, "exp of an integer tensor is float32");
  zorch_tensor *ineg = zorch_neg(i64);
  ok(zorch_tensor_dtype(ineg) == ZORCH_I64 && at(ineg, 0) == -2, "neg keeps integers");
  zorch_tensor *fr[] = {a, b, c, d, s, s2, sc, s3, tt, sum, i32, i64, ii, q, h, h2, hh, hb, cmp, is, ie, ineg};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) zorch_tensor_free(fr[i]);
}

static void test_print(void) {
  zorch_tensor *a = zorch_arange(0, 6, 1, ZORCH_F32, CPU), *m = zorch_view(a, SHAPE(2, 3));
  ok(str_is(m, "tensor([[0., 1., 2.],\n        [3., 4., 5.]])"), "integral floats print like PyTorch");
  zorch_tensor *h = zorch_mul_scalar(m, -0.5);
  ok(str_is(h, "tensor([[-0.0000, -0.5000, -1.0000],\n        [-1.5000, -2.0000, -2.5000]])"),
     "fixed-point floats align");
  zorch_tensor *i = zorch_arange(0, 3, 1, ZORCH_I64, CPU);
  ok(str_is(i, "tensor([0, 1, 2])"), "int64 prints plainly");
  zorch_tensor *d = zorch_full(0, NULL, 1e-7, ZORCH_F64, CPU);
  ok(str_is(d, "tensor(1.0000e-07, dtype=float64)"), "small values use scientific notation");
  zorch_tensor *zero = zorch_full(0, NULL, 0, ZORCH_I64, CPU);
  zorch_tensor *b = zorch_gt(i, zero);
  zorch_tensor_free(zero);
  ok(str_is(b, "tensor([False,  True,  True])"), "bool prints True/False");
  zorch_tensor *big = zorch_arange(0, 2000, 1, ZORCH_F32, CPU);
  char *s = zorch_tensor_format(big);
  ok(s && strstr(s, "...") && strlen(s) < 200, "large tensors are summarised");
  free(s);
  zorch_set_requires_grad(a, true);
  zorch_tensor *sa = zorch_sum(a, 0, NULL, false);
  ok(str_is(sa, "tensor(15., grad_fn=<SumBackward>)"), "grad_fn is shown");
  zorch_tensor_free(sa);
  zorch_tensor *fr[] = {a, m, h, i, d, b, big};
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++) zorch_tensor_free(fr[k]);
}

static int hook_calls;
static double hook_seen;
static zorch_status count_hook(zorch_tensor *leaf, void *ud) {
  (void)ud;
  hook_calls++;
  hook_seen = at(zorch_grad(leaf), 0);
  return ZORCH_OK;
}
static zorch_status failing_hook(zorch_tensor *leaf, void *ud) {
  (void)leaf;
  (void)ud;
  return ZORCH_ERR_STATE;
}

static void test_autograd(void) {
  zorch_tensor *x = zorch_full(SHAPE(3), 2, ZORCH_F32, CPU);
  zorch_set_requires_grad(x, true);
  zorch_tensor *y = zorch_mul(x, x), *l = zorch_sum(y, 0, NULL, false);
  ok(zorch_backward(l, NULL, false) == ZORCH_OK && at(zorch_grad(x), 0) == 4, "d(sum x^2) = 2x");
  ok(zorch_backward(l, NULL, false) == ZORCH_ERR_STATE && error_has("second time"),
     "a second backward through a freed graph is an error");
  zorch_tensor *y2 = zorch_mul(x, x), *l2 = zorch_sum(y2, 0, NULL, false);
  ok(zorch_backward(l2, NULL, true) == ZORCH_OK && zorch_backward(l2, NULL, false) == ZORCH_OK &&
         at(zorch_grad(x), 0) == 12,
     "retain_graph allows a second backward, and gradients accumulate");
  zorch_set_grad(x, NULL);
  ok(zorch_grad(x) == NULL, "set_grad(NULL) clears the gradient");
  bool prev = zorch_set_grad_enabled(false);
  zorch_tensor *ng = zorch_mul(x, x);
  zorch_set_grad_enabled(prev);
  ok(!zorch_requires_grad(ng) && zorch_grad_fn_name(ng) == NULL, "no-grad mode records nothing");
  zorch_tensor *dt = zorch_detach(x);
  ok(!zorch_requires_grad(dt) && zorch_tensor_shares_storage(dt, x), "detach shares storage without history");
  ok(zorch_backward(y, NULL, false) != ZORCH_OK && error_has("one-element"),
     "backward from a non-scalar needs a gradient");
  zorch_tensor *i = zorch_ones(SHAPE(2), ZORCH_I64, CPU);
  ok(zorch_set_requires_grad(i, true) == ZORCH_ERR_DTYPE, "integer tensors cannot require grad");
  ok(zorch_set_requires_grad(y, false) == ZORCH_ERR_STATE, "non-leaves cannot change requires_grad");
  /* the hook sees the final gradient once, though x is used three times */
  zorch_set_grad_hook(x, count_hook, NULL);
  zorch_tensor *a = zorch_mul(x, x), *b = zorch_add(a, x), *l3 = zorch_sum(b, 0, NULL, false);
  ok(zorch_backward(l3, NULL, false) == ZORCH_OK && hook_calls == 1 && hook_seen == 5,
     "the gradient-ready hook runs once, with the final gradient");
  zorch_set_grad_hook(x, failing_hook, NULL);
  zorch_tensor *l4 = zorch_sum(x, 0, NULL, false);
  ok(zorch_backward(l4, NULL, false) == ZORCH_ERR_STATE, "a failing hook stops backward with its status");
  zorch_set_grad_hook(x, NULL, NULL);
  /* a long chain frees without deep recursion */
  int refs = zorch_tensor_refcount(x);
  zorch_tensor *c = zorch_tensor_retain(x);
  for (int k = 0; k < 200000; k++) {
    zorch_tensor *n = zorch_add_scalar(c, 1e-6);
    zorch_tensor_free(c);
    c = n;
  }
  ok(zorch_grad_fn_name(c) != NULL, "a 200000-op chain records");
  zorch_tensor *lc = zorch_sum(c, 0, NULL, false);
  zorch_set_grad(x, NULL);
  ok(zorch_backward(lc, NULL, false) == ZORCH_OK && fabs(at(zorch_grad(x), 0) - 1) < 1e-6,
     "backward through a 200000-op chain");
  zorch_tensor_free(lc);
  zorch_tensor_free(c);
  ok(zorch_tensor_refcount(x) == refs, "freeing the chain releases every reference to the leaf");
  zorch_tensor *fr[] = {x, y, l, y2, l2, ng, dt, i, a, b, l3, l4};
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++) zorch_tensor_free(fr[k]);
}

static void test_errors(void) {
  zorch_tensor *a = zorch_ones(SHAPE(64, 10), ZORCH_F32, CPU), *w = zorch_ones(SHAPE(20, 2), ZORCH_F32, CPU);
  ok(!zorch_matmul(a, w) && strcmp(zorch_last_error(), "matmul: shapes (64, 10) and (20, 2) cannot be multiplied") == 0,
     "matmul names both shapes: %s", zorch_last_error());
  ok(!zorch_linear(a, w, NULL) && error_has("linear") && error_has("(64, 10)") && error_has("(20, 2)"),
     "linear names input and weight: %s", zorch_last_error());
  ok(!zorch_add(NULL, a) && zorch_last_status() == ZORCH_ERR_ARG && error_has("add"), "NULL arguments are errors");
  zorch_tensor *t = zorch_from_buffer((int64_t[]){0, 7}, SHAPE(2), ZORCH_I64);
  zorch_tensor *lg = zorch_zeros(SHAPE(2, 5), ZORCH_F32, CPU);
  ok(!zorch_cross_entropy(lg, t, ZORCH_REDUCE_MEAN, -100) && error_has("target 7"),
     "a class index out of range is an error: %s", zorch_last_error());
  zorch_tensor *t2 = zorch_from_buffer((int64_t[]){0, 70}, SHAPE(2), ZORCH_I64);
  ok(!zorch_index_select(a, 0, t2) && error_has("index 70"), "index_select checks indices");
  zorch_tensor_free(t2);
  ok(!zorch_mse_loss(a, lg, ZORCH_REDUCE_MEAN) && error_has("mse_loss"), "mse_loss checks shapes");
  ok(!zorch_sum(a, 1, (int[]){2}, false) && error_has("dim 2"), "a dim out of range is an error");
  ok(!zorch_softmax(a, 5) && error_has("softmax"), "softmax checks its dim");
  /* C counts dims and indices from 0, and so do its messages (Lua's count from 1) */
  ok(!zorch_sum(a, 1, (int[]){2}, false) &&
     strcmp(zorch_last_error(), "sum: dim 2 out of range for a 2-d tensor (expected 0..1 or -2..-1)") == 0,
     "a dim's message counts from 0: %s", zorch_last_error());
  ok(!zorch_select(a, 1, 10) &&
     strcmp(zorch_last_error(), "select: index 10 out of range for dim 1 of input (64, 10) (expected 0..9 or -10..-1)") == 0,
     "an index's message counts from 0: %s", zorch_last_error());
  ok(!zorch_cross_entropy(lg, t, ZORCH_REDUCE_MEAN, -100) &&
     strcmp(zorch_last_error(), "cross_entropy: target 7 at position 1 is out of range 0..4") == 0,
     "a target's message counts from 0: %s", zorch_last_error());
  zorch_tensor *tm = zorch_from_buffer((int64_t[]){-1, 0}, SHAPE(2), ZORCH_I64);
  ok(!zorch_cross_entropy(lg, tm, ZORCH_REDUCE_MEAN, -100) &&
     strcmp(zorch_last_error(), "cross_entropy: target -1 at position 0 is out of range 0..4") == 0,
     "the note for 1-based targets is not in C's message: %s", zorch_last_error());
  zorch_tensor_free(tm);
  ok(!zorch_cat(0, NULL, 0) && error_has("cat"), "cat of nothing is an error");
  ok(!zorch_layer_norm(a, 1, w, NULL, 1e-5) && error_has("weight"), "layer_norm checks the weight shape");
  ok(!zorch_clamp(a, 2, 1) && error_has("clamp"), "clamp checks min <= max");
  ok(!zorch_dropout(a, 1.5, true, NULL) && error_has("dropout"), "dropout checks p");
  zorch_adam_opts o = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  ok(zorch_adam_step(a, w, a, a, NULL, 1, &o) == ZORCH_ERR_SHAPE && error_has("grad"),
     "adam_step checks shapes: %s", zorch_last_error());
  o.beta1 = 1.5;
  ok(zorch_adam_step(a, a, lg, lg, NULL, 1, &o) != ZORCH_OK, "adam_step checks its state and options");
  zorch_tensor *fr[] = {a, w, t, lg};
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++) zorch_tensor_free(fr[k]);
}

/* Memory released under its views (ZeRO stage 3 on a GPU): ops refuse the
   views by name, and they work again once the memory is back. */
static void test_released(void) {
  zorch_tensor *buf = zorch_ones(SHAPE(8), ZORCH_F32, CPU);
  zorch_tensor *v = zorch_narrow(buf, 0, 2, 4);
  storage_drop_data(buf->st);
  zorch_tensor *r = zorch_add(v, v);
  ok(!r && zorch_last_status() == ZORCH_ERR_STATE && error_has("add") && error_has("released"),
     "an op on released memory is refused by name: %s", zorch_last_error());
  ok(!zorch_linear(v, v, NULL) && error_has("linear"), "so is linear");
  ok(storage_restore_data(buf->st) == ZORCH_OK && zorch_fill_(buf, 2) == ZORCH_OK, "the memory comes back");
  r = zorch_add(v, v);
  ok(r && at(r, 3) == 4, "and the views work again");
  zorch_tensor_free(r);
  zorch_tensor_free(v);
  zorch_tensor_free(buf);
}

/* The CUDA entry points answer without a device (and without a CUDA build). */
static void test_cuda_api(void) {
  int n = zorch_cuda_device_count();
  ok(n >= 0 && (zorch_cuda_built() || n == 0), "cuda device count %d (CUDA %s)", n,
     zorch_cuda_built() ? "built" : "not built");
  zorch_cuda_memory m;
  if (n == 0) {
    ok(zorch_cuda_memory_stats(0, &m) == ZORCH_ERR_DEVICE && error_has("cuda"),
       "memory stats without a device is an error: %s", zorch_last_error());
    ok(!zorch_ones(SHAPE(2), ZORCH_F32, (zorch_device){ZORCH_CUDA, 0}) && zorch_last_status() == ZORCH_ERR_DEVICE,
       "a cuda tensor without a device is an error: %s", zorch_last_error());
  } else {
    ok(zorch_cuda_memory_stats(0, &m) == ZORCH_OK, "memory stats of cuda:0");
    ok(zorch_cuda_memory_stats(n, &m) == ZORCH_ERR_DEVICE, "no device %d", n);
  }
  bool was = zorch_cuda_tf32();
  zorch_cuda_set_tf32(true);
  ok(zorch_cuda_tf32() == zorch_cuda_built(), "TF32 switches on in a CUDA build only");
  zorch_cuda_set_tf32(was);
}

/* Large tensors take the threaded paths; results must equal the serial math. */
static void test_large(void) {
  int64_t n = 1 << 20;
  zorch_tensor *a = zorch_arange(0, (double)n, 1, ZORCH_F32, CPU);
  zorch_tensor *s = zorch_sum(a, 0, NULL, false);
  ok(at(s, 0) == (double)n * (n - 1) / 2, "sum of 2^20 floats is exact (double accumulation)");
  zorch_tensor *m = zorch_view(a, SHAPE(1024, 1024));
  zorch_tensor *cs = zorch_sum(m, 1, (int[]){0}, false);
  ok(at(cs, 3) == 1024.0 * 3 + 1024.0 * 1023 / 2 * 1024, "column sums over a large matrix");
  zorch_tensor *row = zorch_arange(0, 1024, 1, ZORCH_F32, CPU);
  zorch_tensor *b = zorch_add(m, row);
  ok(at(b, n - 1) == (n - 1) + 1023 && at(b, 1025) == 1025 + 1, "threaded broadcast add");
  zorch_tensor *t = zorch_transpose(m, 0, 1);
  zorch_tensor *tc = zorch_contiguous(t);
  ok(at(tc, 1) == 1024 && at(tc, n - 1) == n - 1, "threaded strided copy");
  zorch_tensor *fr[] = {a, s, m, cs, row, b, t, tc};
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++) zorch_tensor_free(fr[k]);
}

/* In-place writes against autograd and aliasing: version counters, overlapping
   copies, stride-0 destinations, gradients of the wrong kind. */
static void test_inplace(void) {
  zorch_tensor *x = zorch_full(SHAPE(2, 3), 2, ZORCH_F32, CPU), *y = zorch_full(SHAPE(2, 3), 3, ZORCH_F32, CPU);
  zorch_set_requires_grad(x, true);
  zorch_tensor *z = zorch_mul(x, y), *l = zorch_sum(z, 0, NULL, false);
  ok(zorch_fill_(y, 5) == ZORCH_OK, "fill_ a saved tensor");
  ok(zorch_backward(l, NULL, false) == ZORCH_ERR_STATE &&
         error_has("modified by an inplace operation: [MulBackward] saved tensor 1 of shape (2, 3) is at "
                   "version 1; expected version 0"),
     "backward through a saved tensor written since fails, naming node, tensor and versions");
  zorch_tensor *gx = zorch_full(SHAPE(2, 3), 1, ZORCH_F32, CPU);
  zorch_tensor *z2 = zorch_mul(x, y), *l2 = zorch_sum(z2, 0, NULL, false);
  ok(zorch_backward(l2, NULL, true) == ZORCH_OK && zorch_backward(l2, NULL, false) == ZORCH_OK &&
         at(zorch_grad(x), 0) == 10,
     "gradient accumulation into .grad does not trip the check");
  ok(zorch_set_grad(x, gx) == ZORCH_OK, "set_grad with a matching gradient");
  zorch_tensor *g64 = zorch_zeros(SHAPE(2, 3), ZORCH_F64, CPU);
  ok(zorch_set_grad(x, g64) == ZORCH_ERR_DTYPE && error_has("gradient dtype float64 does not match tensor dtype float32"),
     "set_grad refuses another dtype");
  zorch_tensor *row = zorch_zeros(SHAPE(1, 3), ZORCH_F32, CPU), *e = zorch_expand(row, 2, (int64_t[]){4, 3});
  ok(zorch_fill_(e, 1) == ZORCH_ERR_ARG && error_has("more than one element of the written-to tensor refers to "
                                                     "a single memory location"),
     "fill_ into an expanded view is an error");
  zorch_tensor *r3 = zorch_ones(SHAPE(3), ZORCH_F32, CPU);
  ok(zorch_copy_(e, r3) != ZORCH_OK && error_has("single memory location"), "copy_ into an expanded view is an error");
  zorch_tensor *a = zorch_arange(1, 7, 1, ZORCH_F32, CPU);
  zorch_tensor *dst = zorch_narrow(a, 0, 1, 5), *src = zorch_narrow(a, 0, 0, 5);
  ok(zorch_copy_(dst, src) == ZORCH_OK && at(a, 0) == 1 && at(a, 1) == 1 && at(a, 2) == 2 && at(a, 5) == 5,
     "copy_ between overlapping views copies the old values");
  zorch_tensor *ts[] = {x, y, z, l, gx, z2, l2, g64, row, e, r3, a, dst, src};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) zorch_tensor_free(ts[i]);
}

/* In-place writes and autograd: fill_ and copy_ are recorded on the tensor
   written; a read through another handle to a storage written since refuses
   the backward; a leaf that requires grad takes constants as data. */
static void test_inplace_history(void) {
  zorch_tensor *x = zorch_ones(SHAPE(3), ZORCH_F32, CPU);
  zorch_set_requires_grad(x, true);
  zorch_tensor *y = zorch_mul_scalar(x, 2), *early = zorch_mul_scalar(y, 3);
  ok(zorch_fill_(y, 7) == ZORCH_OK && zorch_grad_fn_name(y) && strcmp(zorch_grad_fn_name(y), "FillBackward") == 0,
     "fill_ of a computed tensor records FillBackward on it");
  zorch_tensor *late = zorch_sum(y, 0, NULL, false), *le = zorch_sum(early, 0, NULL, false);
  ok(zorch_backward(late, NULL, false) == ZORCH_OK && at(zorch_grad(x), 0) == 0,
     "backward through the filled tensor: zeros for x");
  ok(zorch_backward(le, NULL, false) == ZORCH_OK && at(zorch_grad(x), 2) == 6,
     "a reader from before the write keeps its gradient");
  zorch_tensor *y2 = zorch_mul_scalar(x, 2), *al = zorch_detach(y2);
  ok(zorch_fill_(al, 1) == ZORCH_OK, "fill_ through detach() is a data write");
  ok(zorch_backward(y2, zorch_grad(x), false) == ZORCH_ERR_STATE &&
         error_has("[MulBackward] made was written in place before backward read it"),
     "then a backward from the tensor it aliases fails");
  zorch_tensor *buf = zorch_zeros(SHAPE(3), ZORCH_F32, CPU);
  ok(zorch_copy_(buf, y2) == ZORCH_OK && zorch_requires_grad(buf) &&
         strcmp(zorch_grad_fn_name(buf), "CopyBackwards") == 0,
     "copy_ of a value that requires grad records CopyBackwards");
  ok(zorch_fill_(x, 5) == ZORCH_OK && at(x, 0) == 5 && zorch_is_leaf(x), "a leaf takes a constant as data");
  ok(zorch_copy_(x, y) == ZORCH_ERR_STATE && error_has("a leaf tensor of shape (3,) that requires grad") &&
         at(x, 0) == 5,
     "but not a value that requires grad, and nothing is written");
  bool prev = zorch_set_grad_enabled(false);
  ok(zorch_copy_(x, y) == ZORCH_OK && at(x, 0) == 7 && zorch_is_leaf(x), "under no_grad it takes the values");
  zorch_set_grad_enabled(prev);
  zorch_tensor *ts[] = {x, y, early, late, le, y2, al, buf};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) zorch_tensor_free(ts[i]);
}

/* A write through a view rebases its base's history (PyTorch's CopySlices)
   from C too: z = zeros(3, 3); z.t()[1].copy_(w); sum(z * z) + sum(w) gives
   w 2w + 1; a view of a leaf that requires grad is refused, naming the op. */
static void test_view_write(void) {
  double wv[3] = {1, -2, 3}, got[3] = {0};
  zorch_tensor *w = from_doubles(wv, SHAPE(3), ZORCH_F64);
  zorch_set_requires_grad(w, true);
  zorch_tensor *z = zorch_zeros(SHAPE(3, 3), ZORCH_F64, CPU), *zt = zorch_transpose(z, 0, 1),
               *col = zorch_select(zt, 0, 1);
  ok(zorch_copy_(col, w) == ZORCH_OK && strcmp(zorch_grad_fn_name(z), "CopySlices") == 0 &&
         strcmp(zorch_grad_fn_name(col), "AsStridedBackward") == 0,
     "copy_ into a column of a constant: the base records CopySlices, the view follows");
  zorch_tensor *zz = zorch_mul(z, z), *s1 = zorch_sum(zz, 0, NULL, false), *s2 = zorch_sum(w, 0, NULL, false),
               *l = zorch_add(s1, s2);
  ok(zorch_backward(l, NULL, false) == ZORCH_OK && zorch_tensor_to_doubles(zorch_grad(w), got, 3) == ZORCH_OK &&
         got[0] == 3 && got[1] == -3 && got[2] == 7,
     "and w's gradient is 2w + 1 (%g %g %g)", got[0], got[1], got[2]);
  zorch_tensor *row = zorch_select(w, 0, 0);
  ok(zorch_fill_(row, 0) == ZORCH_ERR_STATE && error_has("fill_: a view of a leaf tensor that requires grad") &&
         at(w, 0) == 1,
     "a view of a leaf that requires grad is refused, and nothing is written");
  zorch_tensor *ts[] = {w, z, zt, col, zz, s1, s2, l, row};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) zorch_tensor_free(ts[i]);
}

/* Freed buffers of 64 KiB to 64 MiB come back to the next allocation that
   fits them within an eighth (hostmem.c); a much smaller or larger one gets
   another. Off where the allocation caches are (sanitizers, ZORCH_ALLOC_CACHE=0). */
static void test_large_reuse(void) {
  if (!alloc_cache_enabled()) {
    ok(1, "# SKIP large-block reuse: allocation caches off");
    return;
  }
  /* a size no other test frees */
  zorch_tensor *a = zorch_zeros(SHAPE(1234567), ZORCH_F32, CPU);
  void *pa = a ? zorch_tensor_data(a) : NULL;
  zorch_tensor_free(a);
  zorch_tensor *b = zorch_empty(SHAPE(1234567 - 1000), ZORCH_F32, CPU);
  ok(b && zorch_tensor_data(b) == pa, "a freed 4.9 MB buffer serves the next allocation of nearly its size");
  void *pb = b ? zorch_tensor_data(b) : NULL;
  zorch_tensor_free(b);
  zorch_tensor *c = zorch_empty(SHAPE(1234567 / 2), ZORCH_F32, CPU);
  ok(c && zorch_tensor_data(c) != pb, "but not one of half its size");
  zorch_tensor *d = zorch_zeros(SHAPE(1234567), ZORCH_F32, CPU);
  bool zero = d != NULL;
  for (int64_t i = 0; zero && i < 1234567; i += 4099) zero = ((float *)zorch_tensor_data(d))[i] == 0;
  ok(zero, "zeros() on a reused buffer is zeros");
  zorch_tensor_free(c), zorch_tensor_free(d);
}

/* Blocks of 2 MiB and more start on a 2 MiB boundary (mapped for huge
   pages, hostmem.c) unless ZORCH_HUGEPAGES=0 or the caches are off; every
   byte up to the end is theirs, whatever the size. */
static void test_huge_blocks(void) {
  const char *v = getenv("ZORCH_HUGEPAGES");
  bool on = alloc_cache_enabled() && !(v && v[0] == '0');
  int64_t sizes[] = {(2 << 20) / 4, (2 << 20) / 4 + 25, 3333333};
  for (int i = 0; i < 3; i++) {
    zorch_tensor *t = zorch_empty(SHAPE(sizes[i]), ZORCH_F32, CPU);
    float *p = t ? zorch_tensor_data(t) : NULL;
    bool aligned = p && (on ? (uintptr_t)p % (2u << 20) == 0 : (uintptr_t)p % 64 == 0);
    ok(aligned, "a %lld-float block starts on a %s boundary", (long long)sizes[i], on ? "2 MiB" : "64-byte");
    bool kept = p != NULL;
    for (int64_t j = 0; kept && j < sizes[i]; j++) p[j] = (float)j;
    for (int64_t j = 0; kept && j < sizes[i]; j += 977) kept = p[j] == (float)j;
    ok(kept && p[sizes[i] - 1] == (float)(sizes[i] - 1), "every float of it holds what was written");
    zorch_tensor_free(t);
  }
  if (on) { /* beyond the cache's 64 MiB: mapped, and unmapped when freed */
    zorch_tensor *t = zorch_ones(SHAPE(17 << 20), ZORCH_F32, CPU);
    float *p = t ? zorch_tensor_data(t) : NULL;
    ok(p && (uintptr_t)p % (2u << 20) == 0 && p[(17 << 20) - 1] == 1, "a 68 MiB block too");
    zorch_tensor_free(t);
  }
}

/* The helpers bindings use (public so a C host has them too): the registry,
   the fill checks, the shape printer and the in-place write, with NULLs. */
static void test_binding_helpers(void) {
  int n = 0;
  const zorch_pointwise_op *ops = zorch_pointwise_ops(&n);
  bool named = n > 20;
  for (int i = 0; i < n; i++) named = named && ops[i].name && ops[i].call && (ops[i].nin == 1 || ops[i].nin == 2);
  ok(named, "zorch_pointwise_ops: %d ops, each named with a call", n);
  double nan = NAN, two = 2;
  int64_t big = (int64_t)1 << 40, small = 7;
  ok(zorch_check_fill("fill", ZORCH_I32, &nan) == ZORCH_ERR_ARG && strstr(zorch_last_error(), "fill:"),
     "check_fill refuses NaN for int32, naming the op");
  ok(zorch_check_fill("fill", ZORCH_F32, &two) == ZORCH_OK && zorch_check_fill_i64("fill", ZORCH_I64, &big) == ZORCH_OK,
     "check_fill takes what fits");
  ok(zorch_check_fill_i64("fill", ZORCH_I32, &big) == ZORCH_ERR_ARG && zorch_check_fill_i64(NULL, ZORCH_I32, &small) == ZORCH_OK,
     "check_fill_i64 refuses what int32 cannot hold; a NULL op name is fine");
  ok(zorch_check_fill("fill", ZORCH_F32, NULL) == ZORCH_ERR_ARG && zorch_check_fill_i64(NULL, ZORCH_I64, NULL) == ZORCH_ERR_ARG,
     "check_fill: a NULL value is an error, not a crash");
  char buf[ZORCH_SHAPE_BUF];
  ok(strcmp(zorch_shape_str(SHAPE(2, 3), buf, sizeof buf), "(2, 3)") == 0 &&
         strcmp(zorch_shape_str(SHAPE(4), buf, sizeof buf), "(4,)") == 0 &&
         strcmp(zorch_shape_str(0, NULL, buf, sizeof buf), "()") == 0,
     "zorch_shape_str prints shapes as the messages do");
  ok(zorch_shape_str(SHAPE(2), NULL, 0) == NULL && strcmp(zorch_shape_str(-1, NULL, buf, sizeof buf), "()") == 0,
     "zorch_shape_str: no buffer or no shape is not a crash");
  zorch_tensor *a = zorch_zeros(SHAPE(2, 2), ZORCH_F32, CPU), *b = zorch_ones(SHAPE(2), ZORCH_F32, CPU);
  zorch_tensor *i = zorch_zeros(SHAPE(2), ZORCH_I64, CPU);
  double v[4];
  ok(zorch_assign_(NULL, a, b) == ZORCH_OK && zorch_tensor_to_doubles(a, v, 4) == ZORCH_OK && v[0] == 1 && v[3] == 1,
     "zorch_assign_ writes a broadcast result (a NULL op name is fine)");
  ok(zorch_assign_("add_", i, b) != ZORCH_OK && strstr(zorch_last_error(), "add_"),
     "zorch_assign_ refuses a float result into an int64 tensor, naming the op");
  ok(zorch_assign_("add_", NULL, b) != ZORCH_OK, "zorch_assign_: a NULL tensor is an error");
  zorch_tensor_free(a);
  zorch_tensor_free(b);
  zorch_tensor_free(i);
}

int main(void) {
  test_released();
  test_cuda_api();
  test_creation();
  test_views();
  test_broadcast_and_promotion();
  test_print();
  test_autograd();
  test_errors();
  test_inplace();
  test_inplace_history();
  test_view_write();
  test_large();
  test_large_reuse();
  test_huge_blocks();
  test_binding_helpers();
  zorch_clear_error();
  return done_testing();
}
