/* backend.c: the CPU backend table and its allocator. */
#include <stdlib.h>

#include "cpu.h"
#include "kernels.h"

/* 64-byte aligned, so vector loops start on a cache line. */
static void *cpu_alloc(int index, size_t nbytes) {
  (void)index;
  size_t n = (nbytes + 63) & ~(size_t)63;
  if (n < nbytes) return NULL;
  return aligned_alloc(64, n ? n : 64);
}

static void cpu_free(int index, void *p) {
  (void)index;
  free(p);
}

const backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .where = cpu_where,
    .reduce = cpu_reduce,
    .max_bwd = cpu_max_bwd,
    .softmax = cpu_softmax,
    .gemm = cpu_gemm,
    .index_select = cpu_index_select,
    .index_add = cpu_index_add,
    .nll = cpu_nll,
    .nll_bwd = cpu_nll_bwd,
    .layer_norm = cpu_layer_norm,
    .layer_norm_bwd = cpu_layer_norm_bwd,
    .random = cpu_random,
    .adam = cpu_adam,
    .sgd = cpu_sgd,
};
