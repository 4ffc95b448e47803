/* The public functions a language binding builds on: messages in either
   numbering, dims, scalar operands, item writes, the per-VM state, page-locked
   host tensors, collectives over a communicator (one local rank) and the
   optimizer state store on disk. */
#include <stdlib.h>
#include <unistd.h>

#include "tap.h"
#include "zorch_zero.h"

static void test_messages(void) {
  zorch_tensor *x = zorch_zeros(SHAPE(2, 3), ZORCH_F32, CPU);
  int d = 99;
  ok(zorch_wrap_dim("op", -1, 2, 0, &d) == ZORCH_OK && d == 1, "dim -1 of a 2-d tensor is 1");
  ok(zorch_wrap_dim("op", 2, 2, 1, &d) == ZORCH_OK && d == 2, "an insert position may be ndim");
  ok(zorch_wrap_dim("op", 0, 0, 0, &d) == ZORCH_OK && d == 0 && zorch_wrap_dim("op", -1, 0, 0, &d) == ZORCH_OK &&
         d == 0, "a 0-d tensor takes 0 and -1");
  ok(zorch_wrap_dim("frob", 2, 2, 0, &d) == ZORCH_ERR_ARG && strstr(zorch_last_error(), "frob: dim 2 out of range"),
     "out of range names the op and the dim: %s", zorch_last_error());
  char one[256];
  zorch_last_error_based(1, one, sizeof one);
  ok(strstr(one, "frob: dim 3 out of range") && strstr(one, "1..2"), "1-based the same message counts from 1: %s",
     one);
  char zero[256];
  ok(strcmp(zorch_last_error_based(0, zero, sizeof zero), zorch_last_error()) == 0,
     "0-based it is zorch_last_error()'s text");
  char tiny[8];
  zorch_last_error_based(1, tiny, sizeof tiny);
  ok(strlen(tiny) == 7 && strncmp(tiny, one, 7) == 0, "a short buffer gets the message cut");
  ok(zorch_wrap_dim("op", 0, 2, 0, NULL) == ZORCH_ERR_ARG, "a NULL out is an error, not a crash");
  zorch_error_prefix("swapaxes");
  ok(strncmp(zorch_last_error(), "swapaxes: ", 10) == 0, "a prefix goes in front: %s", zorch_last_error());
  zorch_error_prefix("swapaxes");
  ok(strncmp(zorch_last_error(), "swapaxes: op", 12) == 0, "but only once");
  ok(zorch_set_error(ZORCH_ERR_SHAPE, "mine: %d and %s", 3, "x") == ZORCH_ERR_SHAPE &&
         zorch_last_status() == ZORCH_ERR_SHAPE && strcmp(zorch_last_error(), "mine: 3 and x") == 0,
     "zorch_set_error sets status and message");
  zorch_clear_error();
  ok(zorch_last_error_based(1, one, sizeof one)[0] == 0, "no error: the empty text");
  zorch_tensor_free(x);
}

static void test_scalars(void) {
  zorch_tensor *s = zorch_scalar(3e9, ZORCH_I32, CPU);
  ok(s && zorch_tensor_ndim(s) == 0 && zorch_tensor_dtype(s) == ZORCH_I32, "a 0-d int32 scalar");
  ok(s && at(s, 0) == 2147483647.0, "a value past int32 saturates: %g", s ? at(s, 0) : NAN);
  zorch_tensor *f = zorch_full(0, NULL, 3e9, ZORCH_I32, CPU);
  ok(!f && zorch_last_status() == ZORCH_ERR_ARG, "where zorch_full refuses it: %s", zorch_last_error());
  zorch_tensor_free(s);
  s = zorch_scalar(-0.25, ZORCH_F64, CPU);
  ok(s && at(s, 0) == -0.25 && zorch_tensor_dtype(s) == ZORCH_F64, "a float64 scalar keeps its value");
  zorch_tensor_free(s);
}

static void test_setitem(void) {
  zorch_tensor *t = zorch_zeros(SHAPE(3, 2), ZORCH_F32, CPU);
  zorch_tensor *row = zorch_full(SHAPE(2), 5, ZORCH_F32, CPU);
  ok(zorch_setitem_(t, -1, row) == ZORCH_OK && at(t, 4) == 5 && at(t, 5) == 5 && at(t, 0) == 0,
     "t[-1] = row writes the last entry");
  ok(zorch_setitem_fill_(t, 0, 1.5) == ZORCH_OK && at(t, 0) == 1.5 && at(t, 1) == 1.5 && at(t, 2) == 0,
     "t[0] = 1.5 fills the first");
  ok(zorch_setitem_(t, 3, row) != ZORCH_OK, "an index past the end is an error: %s", zorch_last_error());
  ok(zorch_setitem_(t, 0, NULL) == ZORCH_ERR_ARG, "a NULL value is an error");
  zorch_tensor *i = zorch_zeros(SHAPE(2), ZORCH_I64, CPU);
  int64_t big = (INT64_C(1) << 60) + 1, back[2];
  ok(zorch_setitem_fill_i64_(i, 1, big) == ZORCH_OK && zorch_tensor_to_i64s(i, back, 2) == ZORCH_OK &&
         back[1] == big && back[0] == 0, "an int64 constant is kept exact");
  zorch_tensor *u = zorch_zeros(SHAPE(2), ZORCH_I32, CPU);
  ok(zorch_setitem_fill_(u, 0, 3e9) == ZORCH_ERR_ARG, "a constant out of range is refused as the fills refuse it");
  /* autograd sees the write */
  zorch_tensor *x = zorch_ones(SHAPE(2), ZORCH_F32, CPU);
  zorch_set_requires_grad(x, true);
  zorch_tensor *y = zorch_mul_scalar(t, 1), *xs = zorch_mul_scalar(x, 2);
  ok(zorch_setitem_(y, 1, xs) == ZORCH_OK && zorch_requires_grad(y), "writing a value that requires grad records it");
  zorch_tensor *s = zorch_sum(y, 0, NULL, false);
  ok(s && zorch_backward(s, NULL, false) == ZORCH_OK && zorch_grad(x) && at(zorch_grad(x), 0) == 2,
     "and the gradient reaches it: %g", zorch_grad(x) ? at(zorch_grad(x), 0) : NAN);
  zorch_tensor_free(s);
  zorch_tensor_free(xs);
  zorch_tensor_free(y);
  zorch_tensor_free(x);
  zorch_tensor_free(u);
  zorch_tensor_free(i);
  zorch_tensor_free(row);
  zorch_tensor_free(t);
}

static void test_state(void) {
  zorch_state *a = zorch_state_new();
  ok(a != NULL, "a new state");
  zorch_manual_seed(7);
  zorch_set_error(ZORCH_ERR_IO, "outer error");
  zorch_state *prev = zorch_state_swap(a);
  ok(zorch_last_status() == ZORCH_OK && zorch_is_grad_enabled(), "inside it: no error, grad mode on");
  zorch_set_grad_enabled(false);
  zorch_manual_seed(11);
  zorch_set_error(ZORCH_ERR_ARG, "inner error");
  ok(zorch_state_swap(prev) == a, "swapping back returns it");
  ok(zorch_last_status() == ZORCH_ERR_IO && strcmp(zorch_last_error(), "outer error") == 0 && zorch_is_grad_enabled() &&
         zorch_generator_initial_seed(zorch_default_generator()) == 7,
     "outside: its own error, grad mode and seed");
  prev = zorch_state_swap(a);
  ok(!zorch_is_grad_enabled() && strcmp(zorch_last_error(), "inner error") == 0 &&
         zorch_generator_initial_seed(zorch_default_generator()) == 11, "and the VM's are kept for the next entry");
  zorch_state_swap(prev);
  zorch_state_free(a);
  zorch_state_free(NULL);
  zorch_clear_error();
}

static void test_host_zeros(void) {
  bool pinned = true;
  zorch_tensor *t = zorch_host_zeros(SHAPE(3, 4), ZORCH_F64, false, &pinned);
  ok(t && !pinned && zorch_tensor_numel(t) == 12 && zorch_tensor_dtype(t) == ZORCH_F64 && at(t, 11) == 0,
     "ordinary zeros without pin");
  zorch_tensor_free(t);
  t = zorch_host_zeros(SHAPE(5), ZORCH_F32, true, &pinned);
  ok(t && at(t, 4) == 0 && zorch_tensor_device(t).type == ZORCH_CPU && pinned == (zorch_cuda_device_count() > 0),
     "with pin: zeros on the CPU, page-locked only where a GPU is (%s)", pinned ? "pinned" : "not pinned");
  zorch_tensor_free(t);
  ok(!zorch_host_zeros(SHAPE(-1), ZORCH_F32, true, NULL) && zorch_last_status() != ZORCH_OK,
     "a negative size is an error: %s", zorch_last_error());
}

static void test_groups(void) {
  zorch_zero_comm *c = zorch_zero_local();
  zorch_tensor *t = from_doubles((double[]){1, 5, 3}, SHAPE(3), ZORCH_F32);
  ok(zorch_zero_allreduce_max(c, t) == ZORCH_OK && at(t, 1) == 5, "max over one rank keeps the values");
  zorch_tensor *all = zorch_zeros(SHAPE(3), ZORCH_F32, CPU);
  ok(zorch_zero_allgather(c, t, all) == ZORCH_OK && at(all, 2) == 3, "allgather of one rank copies");
  zorch_tensor *part = zorch_zeros(SHAPE(3), ZORCH_F32, CPU);
  ok(zorch_zero_reduce_scatter(c, t, part, NULL) == ZORCH_OK && at(part, 0) == 1,
     "reduce_scatter with equal parts");
  ok(zorch_zero_reduce_scatter(c, t, part, (int64_t[]){3}) == ZORCH_OK, "and with counts");
  ok(zorch_zero_broadcast(c, t, 0) == ZORCH_OK && zorch_zero_broadcast(c, t, 1) != ZORCH_OK,
     "broadcast from rank 0; rank 1 is not in the group: %s", zorch_last_error());
  uint64_t sent = 1, recv = 1;
  zorch_zero_comm_bytes(c, NULL, NULL, true);
  zorch_tensor *got = zorch_zeros(SHAPE(3), ZORCH_F32, CPU);
  ok(zorch_zero_sendrecv(c, t, 0, got, 0) == ZORCH_OK && at(got, 1) == 5, "sendrecv to itself copies");
  zorch_zero_comm_bytes(c, &sent, &recv, false);
  ok(sent == 0 && recv == 0, "on one rank nothing crosses: no bytes counted (%llu, %llu)",
     (unsigned long long)sent, (unsigned long long)recv);
  ok(zorch_zero_sendrecv(c, t, 2, NULL, 0) != ZORCH_OK, "a peer outside the group is an error: %s",
     zorch_last_error());
  ok(zorch_zero_barrier(c) == ZORCH_OK, "a barrier of one rank");
  ok(zorch_zero_comm_world_rank(c, 0) == 0 && zorch_zero_comm_world_rank(c, 1) == -1 &&
         zorch_zero_comm_world_rank(NULL, 0) == -1, "world ranks, -1 out of range");
  ok(zorch_zero_barrier(NULL) == ZORCH_ERR_ARG && zorch_zero_allgather(c, NULL, all) == ZORCH_ERR_ARG,
     "NULL arguments are errors: %s", zorch_last_error());
  zorch_tensor_free(got);
  zorch_tensor_free(part);
  zorch_tensor_free(all);
  zorch_tensor_free(t);
}

static void test_offload(void) {
  char dir[] = "/tmp/zorch-offload-XXXXXX";
  ok(mkdtemp(dir) != NULL, "a scratch folder");
  int64_t n = 3000;
  zorch_offload *o = zorch_offload_open(dir, n, 1024, 2);
  ok(o != NULL, "a store of 3000 elements in chunks of 1024: %s", o ? "" : zorch_last_error());
  if (!o) return;
  zorch_tensor *p = zorch_randn(1, &n, ZORCH_F32, CPU, NULL), *g = zorch_randn(1, &n, ZORCH_F32, CPU, NULL);
  zorch_tensor *p2 = zorch_clone(p), *m = zorch_zeros(1, &n, ZORCH_F32, CPU), *v = zorch_zeros(1, &n, ZORCH_F32, CPU);
  zorch_adam_opts k = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .decoupled = true};
  zorch_offload_run run = {0, n, k, 0};
  bool same = true;
  for (int step = 1; step <= 2; step++) {
    same = same && zorch_offload_adam(o, p, g, step, 1, &run) == ZORCH_OK &&
           zorch_adam_step(p2, g, m, v, NULL, step, &k) == ZORCH_OK;
  }
  zorch_tensor *d = zorch_sub(p, p2), *dm = zorch_abs(d), *mx = zorch_amax(dm, 0, NULL, false);
  ok(same && mx && at(mx, 0) == 0, "two steps through the store equal zorch_adam_step's exactly (%g)",
     mx ? at(mx, 0) : NAN);
  zorch_tensor *m2 = zorch_zeros(1, &n, ZORCH_F32, CPU), *v2 = zorch_zeros(1, &n, ZORCH_F32, CPU);
  ok(zorch_offload_get(o, m2, v2) == ZORCH_OK && at(m2, 2999) == at(m, 2999) && at(v2, 7) == at(v, 7),
     "get gives the moments");
  ok(zorch_offload_zero(o) == ZORCH_OK && zorch_offload_get(o, m2, v2) == ZORCH_OK && at(m2, 5) == 0,
     "zero clears them");
  ok(zorch_offload_put(o, m, v) == ZORCH_OK && zorch_offload_get(o, m2, v2) == ZORCH_OK && at(v2, 100) == at(v, 100),
     "put writes them back");
  zorch_offload_stats st;
  zorch_offload_get_stats(o, &st);
  ok(st.file_bytes >= 2 * n * 4 && st.buffer_bytes > 0, "stats: %lld bytes on disk, %lld in buffers",
     (long long)st.file_bytes, (long long)st.buffer_bytes);
  zorch_tensor *small = zorch_zeros(SHAPE(5), ZORCH_F32, CPU);
  ok(zorch_offload_get(o, small, small) != ZORCH_OK, "a tensor of the wrong size is an error: %s",
     zorch_last_error());
  ok(zorch_offload_adam(NULL, p, g, 1, 1, &run) == ZORCH_ERR_ARG && zorch_offload_zero(NULL) == ZORCH_ERR_ARG &&
         zorch_offload_adam(o, p, g, 1, 1, NULL) == ZORCH_ERR_ARG, "NULL store or runs: errors");
  zorch_offload_set_grad_scale(NULL, 2);
  zorch_offload_close(o);
  zorch_offload_close(NULL);
  double w = 0, r = 0;
  bool direct;
  ok(zorch_offload_probe(dir, 1 << 20, &w, &r, &direct) == ZORCH_OK && w > 0 && r > 0, "the probe measures the disk");
  ok(!zorch_offload_open("/nonexistent/dir", n, 1024, 2) && zorch_last_status() != ZORCH_OK,
     "a missing folder: %s", zorch_last_error());
  zorch_tensor *all[] = {small, m2, v2, d, dm, mx, p, g, p2, m, v};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) zorch_tensor_free(all[i]);
  rmdir(dir);
}

int main(void) {
  test_messages();
  test_scalars();
  test_setitem();
  test_state();
  test_host_zeros();
  test_groups();
  test_offload();
  return done_testing();
}
