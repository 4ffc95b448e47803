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
zorch_status cpu_max_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *idx,
                         int64_t outer, int64_t r, int64_t inner);
zorch_status cpu_gemm(const gemm_args *g);
zorch_status cpu_random(zorch_tensor *out, uint64_t seed, uint64_t offset, bool normal);
zorch_status cpu_randint(zorch_tensor *out, uint64_t seed, uint64_t offset, int64_t low,
                         uint64_t range);
zorch_status cpu_adam(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,
                      zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o);
zorch_status cpu_sgd(zorch_tensor *p, const zorch_tensor *g, zorch_tensor *buf, bool first,
                     const zorch_sgd_opts *o);
zorch_status cpu_im2col(zorch_tensor *col, const zorch_tensor *x, const conv_geom *g, int64_t n0,
                        int64_t nb);
zorch_status cpu_col2im(zorch_tensor *gx, const zorch_tensor *col, const conv_geom *g, int64_t n0,
                        int64_t nb);
zorch_status cpu_conv2d(zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *w,
                        const zorch_tensor *b, const conv_geom *g);
zorch_status cpu_conv2d_bwd(zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *gout,
                            const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g);
zorch_status cpu_pool2d(pool_kind k, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *x,
                        const conv_geom *g);
zorch_status cpu_pool2d_bwd(pool_kind k, zorch_tensor *gx, const zorch_tensor *gout,
                            const zorch_tensor *idx, const conv_geom *g);
/* the declared ops' kernels (include/zorch_ops.h) */
#define KERNEL(slot, params) zorch_status cpu_##slot params;
#define KERNEL_OPT KERNEL
ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
#endif
