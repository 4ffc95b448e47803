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
     1 (negative from the end), LDIM_OR(i, cdim) the same or the C dim cdim when
     absent, LINT(i, default) an integer, LBOOL(i) a boolean, LBOOL_OR(i,
     default) one with a default, LDIMS(i) nil, a dim or a table of dims (the C
     count and array), LIDX(i) an int64 tensor of 1-based indices (passed
     0-based), LOUT the address of an out tensor (an op's indices), LCONST(v) a
     C value, LREAD(fn, i) an int from `static int fn(lua_State *, int)` of
     lua/lfuncs.c. LUA_FUNCTION_VI and LUA_BOTH_VI return the values and the
     1-based LOUT indices; LUA_FUNCTION_I and LUA_BOTH_I the result + 1.
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
   The signatures hold only the library's public types; a kernel's parameters
   may name the backend's (ops/backend/backend.h: index_geom, red_op, ...),
   since only the library expands them. The backend's other slots (copies,
   elementwise ops, GEMM, ...) are listed in ops/backend/backend.h.
     GRAD's inputs may also be INDEX((dims...), (values...)), an int64 tensor. */
#ifndef ZORCH_OPS_H
#define ZORCH_OPS_H

/* a parenthesised list without its parentheses: ZORCH_EXPAND_ (a b) is a b */
#define ZORCH_EXPAND_(...) __VA_ARGS__

#define ZORCH_OPS(OP)                                                                              \
  /* ---- index ops: indices are int64, 0-based in C and 1-based in Lua ---- */                      \
  /* out (outer, nidx, inner) = a (outer, n, inner) at idx (int64, nidx);                          \
     index_add, its backward: out (outer, n, inner) += src (outer, nidx, inner) at idx,           \
     in index order. */                                                                            \
  OP(index_select, zorch_tensor *, (zorch_tensor *a, int dim, zorch_tensor *idx), (a, dim, idx),   \
     LUA_BOTH((LT(1), LDIM(2), LIDX(3))),                                                          \
     (KERNEL(index_select, (zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx,     \
                            int64_t outer, int64_t n, int64_t inner))                              \
      KERNEL(index_add, (zorch_tensor *out, const zorch_tensor *src, const zorch_tensor *idx,      \
                         int64_t outer, int64_t n, int64_t inner))),                               \
     (GOLDEN(index_select, zorch_index_select(x[0], 1, x[1]), 2e-5, 1e-6)                          \
      GRAD(index_select, zorch_index_select(in[0], 1, in[1]),                                      \
           (LEAF(2, 4, 3), INDEX((5), (3, 0, 3, 1, 3))))                                           \
      BAD("zorch.index_select(zorch.ones(2, 3), 2, zorch.ones(2))", "int64")                       \
      BAD("zorch.index_select(zorch.ones(2, 3), 3, zorch.tensor{1})", "index_select")              \
      DEVICE("zorch.index_select(a, 2, zorch.tensor{3, 1, 3}:to(a:device()))", (4, 5), (1), 1e-6))) \
  /* out[i][j][k] = a[i][idx[i][j][k]][k] for dim 1 (likewise for any dim): idx is                 \
     int64 with a's dims, no larger than a outside dim; out has idx's shape.                       \
     gather: out (the index's shape) = a at idx along g->dim; any dtype. */                       \
  OP(gather, zorch_tensor *, (zorch_tensor *a, int dim, zorch_tensor *idx), (a, dim, idx),         \
     LUA_BOTH((LT(1), LDIM(2), LIDX(3))),                                                          \
     (KERNEL(gather, (zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx,           \
                      const index_geom *g))),                                                      \
     (GOLDEN(gather, zorch_gather(x[0], 1, x[1]), 2e-5, 1e-6)                                      \
      /* the index smaller than the input outside the gathered dim, with repeats */               \
      GRAD(gather, zorch_gather(in[0], 1, in[1]),                                                  \
           (LEAF(3, 4), INDEX((2, 5), (3, 0, 0, 2, 3, 1, 1, 1, 0, 2))))                            \
      DEVICE("zorch.gather(a, 2, zorch.tensor{{1, 3, 3}, {2, 2, 1}}:to(a:device()))", (2, 4), (1), 1e-6))) \
  /* A copy of a with src (idx's shape, a's dtype) written at idx along dim:                       \
     out[i][idx[i][j][k]][k] = src[i][j][k] for dim 1. Where indices repeat, the                   \
     last in row-major order wins. scatter_add adds instead (deterministically, in                 \
     index order). Out of place.                                                                   \
     scatter: out (g->ashape) at idx along g->dim = src (the index's shape), in                    \
     index order (the last write wins), or += src when `add` (float32, float64,                    \
     int64); any dtype otherwise. */                                                               \
  OP(scatter, zorch_tensor *, (zorch_tensor *a, int dim, zorch_tensor *idx, zorch_tensor *src),    \
     (a, dim, idx, src), LUA_BOTH((LT(1), LDIM(2), LIDX(3), LT(4))),                               \
     (KERNEL(scatter, (zorch_tensor *out, const zorch_tensor *idx, const zorch_tensor *src,        \
                       const index_geom *g, bool add))),                                           \
     (GOLDEN(scatter, zorch_scatter(x[0], 1, x[1], x[2]), 2e-5, 1e-6)                              \
      /* distinct indices per row (a repeated one makes the gradient ambiguous) */                \
      GRAD(scatter, zorch_scatter(in[0], 1, in[2], in[1]),                                         \
           (LEAF(3, 5), LEAF(2, 3), INDEX((2, 3), (4, 0, 2, 1, 3, 0))))                            \
      DEVICE("zorch.scatter(a, 2, zorch.tensor{{1, 3}, {2, 4}}:to(a:device()), b)", (2, 4), (2, 2), 1e-6))) \
  OP(scatter_add, zorch_tensor *, (zorch_tensor *a, int dim, zorch_tensor *idx, zorch_tensor *src), \
     (a, dim, idx, src), LUA_BOTH((LT(1), LDIM(2), LIDX(3), LT(4))), (),                           \
     (GOLDEN(scatter_add, zorch_scatter_add(x[0], 0, x[1], x[2]), 2e-5, 1e-6)                      \
      GRAD(scatter_add, zorch_scatter_add(in[0], 0, in[2], in[1]),                                 \
           (LEAF(3, 4), LEAF(4, 2), INDEX((4, 2), (0, 2, 0, 2, 1, 1, 0, 0))))                      \
      DEVICE("zorch.scatter_add(a, 2, zorch.tensor{{1, 1}, {4, 4}}:to(a:device()), b)", (2, 4), (2, 2), 1e-6))) \
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
