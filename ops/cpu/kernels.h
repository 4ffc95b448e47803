/* kernels.h: the CPU kernels that fill the backend table (see ops/backend/backend.h for
   what each one promises). */
#ifndef ZORCH_OPS_CPU_KERNELS_H
#define ZORCH_OPS_CPU_KERNELS_H
#include "cpu.h"

zorch_status cpu_copy(zorch_tensor *dst, const zorch_tensor *src);
zorch_status cpu_fill(zorch_tensor *dst, double v);
zorch_status cpu_unary(uop op, zorch_tensor *out, const zorch_tensor *a, double p0, double p1);
zorch_status cpu_binary(bop op, zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b,
                        double p0, double p1);
zorch_status cpu_where(zorch_tensor *out, const zorch_tensor *cond, const zorch_tensor *a,
                       const zorch_tensor *b);
/* the declared ops' kernels (include/zorch_ops.h) */
#define KERNEL(slot, params) zorch_status cpu_##slot params;
#define KERNEL_OPT KERNEL
ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
#endif
