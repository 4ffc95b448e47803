/* backend.c: the CPU backend table (host memory is the core's, ops/core/hostmem.c). */
#include "cpu.h"
#include "kernels.h"

void *cpu_scratch(size_t bytes) { return host_mem.alloc(0, bytes); }
void cpu_scratch_free(void *p) { host_mem.free(0, p); }

const backend cpu_backend = {
    .name = "cpu",
    .native16 = true, /* unary and binary a block at a time (elementwise.c) */
    .gemm16 = true,
    .rows16 = true, /* sums, softmax, layer norm and nll read 16-bit in place */
    .copy = cpu_copy,
    .fill = cpu_fill,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .where = cpu_where,
    .attention_strided = true,
#define KERNEL(slot, params) .slot = cpu_##slot,
#define KERNEL_OPT KERNEL
    ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
};
