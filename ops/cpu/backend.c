/* backend.c: the CPU backend table (host memory is the core's, vm/core/hostmem.c). */
#include "cpu.h"
#include "kernels.h"

const backend cpu_backend = {
    .name = "cpu",
    .copy = cpu_copy,
    .fill = cpu_fill,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .where = cpu_where,
    .reduce = cpu_reduce,
    .max_bwd = cpu_max_bwd,
    .cumsum = cpu_cumsum,
    .sort = cpu_sort,
    .gather = cpu_gather,
    .scatter = cpu_scatter,
    .softmax = cpu_softmax,
    .gemm = cpu_gemm,
    .index_select = cpu_index_select,
    .index_add = cpu_index_add,
    .nll = cpu_nll,
    .nll_bwd = cpu_nll_bwd,
    .layer_norm = cpu_layer_norm,
    .layer_norm_bwd = cpu_layer_norm_bwd,
    .batch_norm = cpu_batch_norm,
    .batch_norm_bwd = cpu_batch_norm_bwd,
    .random = cpu_random,
    .randint = cpu_randint,
    .adam = cpu_adam,
    .sgd = cpu_sgd,
};
