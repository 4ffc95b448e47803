/* zorch_ops.h: the declared ops, one row each. zorch.h expands the public
   prototypes from it; the library expands the backend's kernel slots and their
   registrations (ops/backend/backend.h, ops/cpu/kernels.h, ops/cuda/cuda.h) and
   the Lua bindings (lua/lfuncs.c); the tests expand their cases (the golden,
   gradient-check, bad-argument and GPU-against-CPU tests). docs/adding-an-op.md
   explains the steps.

   OP(name, ret, params, args, lua, kernels, cases)
   - name: the public function is zorch_NAME, the Lua one zorch.NAME.
   - ret, params: the C signature; args: the parameter names, in order.
   - lua: LUA_FUNCTION(conv) for zorch.NAME(...), LUA_BOTH(conv) for the
     function and the method x:NAME(...), or LUA_NONE. conv lists how each
     argument is read from the Lua stack, in order: LT(i) a tensor, LTN(i) a
     tensor or nil (NULL), LNUM(i, default) a number, LDIM(i) a dim counted from
     1 (negative from the end), LINT(i, default) an integer, LBOOL(i) a boolean.
   - kernels: the backend slots the op's definition calls, KERNEL(slot,
     params) each (a kernel returns a status); every backend gets cpu_SLOT and
     cuda_SLOT, declared for it. Contracts are the comment above the row.
   - cases: the tests' samples.
     GOLDEN(case, call, rtol, atol): tests/golden/gen_golden.py's case `case`
       (PyTorch's values), run as `call` on inputs x[0..] (float32); an op
       without one does not build (tests/test_golden.c).
     GRAD(case, call, inputs): the float64 gradient against central finite
       differences (tests/test_gradcheck.c), `call` on in[0..], from inputs
       (LEAF(dims...) normal numbers, LEAF_POS(dims...) positive ones, both
       requiring grad).
     BAD(lua, message): a Lua chunk that must raise an error containing
       `message` (tests/lua/test_badargs.lua).
     DEVICE(lua, ashape, bshape, rtol): on CUDA, the chunk's tensor, from
       random inputs a and b of those shapes made on the device, against the
       same on the CPU, and the gradients of a and b (tests/gpu/test_cuda.lua).
   The rows hold only the library's public types; the backend's other slots
   (copies, elementwise ops, GEMM, ...) are listed in ops/backend/backend.h. */
#ifndef ZORCH_OPS_H
#define ZORCH_OPS_H

/* a parenthesised list without its parentheses: ZORCH_EXPAND_ (a b) is a b */
#define ZORCH_EXPAND_(...) __VA_ARGS__

#define ZORCH_OPS(OP)                                                                              \
  /* RMSNorm over the last dim, computed in float32 (float64 for float64):                        \
     y = x * rsqrt(mean(x^2) + eps) * weight; weight (the last dim) may be NULL.                  \
     rms_norm: y, and rstd (rows, float32 or float64) from x (rows, cols) and w                   \
     (cols, may be NULL), all contiguous, y and x of one dtype, w of x's.                         \
     rms_norm_bwd: gx (rows, cols) and gw (cols, float32 or float64 as rstd,                      \
     may be NULL: not wanted) from g and the forward's x, w, rstd. */                             \
  OP(fused_rms_norm, zorch_tensor *, (zorch_tensor *x, zorch_tensor *weight, double eps),               \
     (x, weight, eps), LUA_FUNCTION((LT(1), LTN(2), LNUM(3, 1e-6))),                              \
     (KERNEL(rms_norm, (zorch_tensor *y, zorch_tensor *rstd, const zorch_tensor *x,                \
                        const zorch_tensor *w, int64_t rows, int64_t cols, double eps))           \
      KERNEL(rms_norm_bwd, (zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *g,             \
                            const zorch_tensor *x, const zorch_tensor *w,                         \
                            const zorch_tensor *rstd, int64_t rows, int64_t cols))),              \
     (GOLDEN(fused_rms_norm, zorch_fused_rms_norm(x[0], x[1], 1e-5), 2e-5, 1e-6)                               \
      GOLDEN(fused_rms_norm_noweight, zorch_fused_rms_norm(x[0], NULL, 1e-6), 2e-5, 1e-6)                      \
      GRAD(fused_rms_norm, zorch_fused_rms_norm(in[0], in[1], 1e-5), (LEAF(3, 5), LEAF(5)))                    \
      GRAD(fused_rms_norm_3d, zorch_fused_rms_norm(in[0], NULL, 1e-3), (LEAF(2, 3, 4)))                        \
      BAD("zorch.fused_rms_norm(zorch.ones(2, 3), zorch.ones(4))", "fused_rms_norm: weight")                   \
      BAD("zorch.fused_rms_norm(zorch.ones(2, 3), nil, -1)", "fused_rms_norm: eps")                            \
      BAD("zorch.fused_rms_norm(zorch.ones(2, 3, {dtype = 'int64'}))", "fused_rms_norm: x")                    \
      BAD("zorch.fused_rms_norm(zorch.ones(2, 3), zorch.ones(3, {dtype = 'float64'}))", "fused_rms_norm: weight") \
      BAD("zorch.fused_rms_norm(zorch.tensor(1))", "fused_rms_norm: x")                                        \
      DEVICE("zorch.fused_rms_norm(a, b, 1e-5)", (4, 33), (33), 1e-5)                                    \
      DEVICE("zorch.fused_rms_norm(a, nil, 1e-6)", (2, 3, 1000), (1), 1e-5)))

#endif
