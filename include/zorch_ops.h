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
     tensor or nil (NULL), LNUM(i, default) a number, LNUM_REQ(i) one that must
     be given, LDIM(i) a dim counted from 1 (negative from the end), LDIM_OR(i,
     cdim) the same or the C dim cdim when absent, LINT(i, default) an integer,
     LINT_REQ(i) one that must be given, LBOOL(i) a boolean, LBOOL_OR(i,
     default) one with a default, LDIMS(i) nil, a dim or a table of dims (the C
     count and array), LIDX(i) an int64 tensor of 1-based indices (passed
     0-based), LDIM_OPT(i) nil or one dim (the C count, 0 or 1, and array),
     LDIMS_REQ(i) as LDIMS but nil is an error, LINTS(i) a number or a table of
     integers (the C count and int64 array), LSIZES(i) sizes as zorch.zeros
     takes them, numbers from i on or one table (the C count and int64 array),
     LNUMP(i) nil (NULL) or a number (its address), LPOS(i) an index counted
     from 1 (negative from the end; 0 is an error), passed 0-based,
     LOUT the address of an out tensor (an op's indices), LCONST(v) a C value,
     LREAD(fn, i) an int from `static int fn(lua_State *, int)` of
     lua/lfuncs.c (read_norm_dims: a count of dims or the trailing shape of
     argument 1; read_reduction: "mean", "sum" or "none"; read_training: a
     boolean, true when absent), LREADN(fn, i) a double from `static double
     fn(lua_State *, int)` there. LUA_FUNCTION_VI and LUA_BOTH_VI return the
     values and the 1-based LOUT indices; LUA_FUNCTION_I and LUA_BOTH_I the
     result + 1. LUA_NONE keeps a hand binding, a comment beside it saying why
     (an options table, 1-based values, ...).
   - kernels: the backend slots the op's definition calls, KERNEL(slot,
     params) each (a kernel returns a status); every backend gets cpu_SLOT and
     cuda_SLOT, declared for it. KERNEL_OPT(slot, params): a slot only the CPU
     fills (cpu_SLOT); the op layer does without it elsewhere. A slot that
     several ops call is in the row of one of them. Contracts are the comment above the row.
   - cases: the tests' samples.
     GOLDEN(case, call, rtol, atol): tests/golden/gen_golden.py's case `case`
       (PyTorch's values), run as `call` on inputs x[0..] (float32; NULL past
       the case's last) and the case line's parameters p[0..1]; an op without
       one (nor NO_GOLDEN) does not build (tests/test_golden.c). Set-up a call
       needs is a static helper of tests/test_golden.c (batch_norm_case, ...).
     NO_GOLDEN(why): an op PyTorch cannot check (its random draws differ),
       `why` saying so.
     GRAD(case, call, inputs): the float64 gradient against central finite
       differences (tests/test_gradcheck.c), `call` on in[0..], from inputs
       (LEAF(dims...) normal numbers, LEAF_POS(dims...) positive ones, both
       requiring grad; NOGRAD(input) one of them held fixed; INDEX((dims...),
       (values...)) an int64 tensor; MASK(dims...) a bool tensor, about half
       true).
     BAD(lua, message): a Lua chunk that must raise an error containing
       `message` (tests/lua/test_badargs.lua).
     DEVICE(lua, ashape, bshape, rtol): on CUDA, the chunk's tensor, from
       random inputs a and b of those shapes made on the device, against the
       same on the CPU, and the gradients of a and b (tests/gpu/test_cuda.lua).
   The signatures hold only the library's public types; a kernel's parameters
   may name the backend's (ops/backend/backend.h: index_geom, red_op, ...),
   since only the library expands them. The backend's other slots (copies,
   elementwise ops, GEMM, ...) are listed in ops/backend/backend.h. */
#ifndef ZORCH_OPS_H
#define ZORCH_OPS_H

/* a parenthesised list without its parentheses: ZORCH_EXPAND_ (a b) is a b */
#define ZORCH_EXPAND_(...) __VA_ARGS__

/* attention's test cases: zorch_attention of t[0..2] with the options given */
#define ZORCH_ATT_CASE_(t, ...) \
  zorch_attention((t)[0], (t)[1], (t)[2], &(zorch_attention_opts){__VA_ARGS__})

#define ZORCH_OPS(OP)                                                                              \
  /* ---- elementwise ops made of the registry's (ops/backend/pointwise_ops.h), broadcast ---- */   \
  /* start + weight * (end - start), PyTorch's lerp: one float dtype for all;                       \
     differentiable in start, end and a weight tensor.                                              \
     Lua: the hand binding (zorch.lerp: the weight a number or a tensor). */                        \
  OP(lerp, zorch_tensor *, (zorch_tensor *start, zorch_tensor *end, zorch_tensor *weight),          \
     (start, end, weight), LUA_NONE, (),                                                            \
     (GOLDEN(lerp, zorch_lerp(x[0], x[1], x[2]), 2e-5, 1e-6)                                        \
      GRAD(lerp, zorch_lerp(in[0], in[1], in[2]), (LEAF(3, 4), LEAF(4), LEAF(3, 1)))                \
      BAD("zorch.lerp(zorch.ones(2), zorch.ones(2):double(), 0.5)", "lerp: end is float64, start is float32"))) \
  OP(lerp_scalar, zorch_tensor *, (zorch_tensor *start, zorch_tensor *end, double weight),          \
     (start, end, weight), LUA_NONE /* zorch.lerp's */, (),                                         \
     (GOLDEN(lerp_scalar, zorch_lerp_scalar(x[0], x[1], p[0]), 2e-5, 1e-6)                          \
      GOLDEN(lerp_scalar_small, zorch_lerp_scalar(x[0], x[1], p[0]), 2e-5, 1e-6)                    \
      GRAD(lerp_scalar, zorch_lerp_scalar(in[0], in[1], 0.7), (LEAF(3, 4), LEAF(4)))))              \
  /* t + value * a * b and t + value * a / b (addcdiv refuses two integer tensors). */              \
  OP(addcmul, zorch_tensor *, (zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value),    \
     (t, a, b, value), LUA_BOTH((LT(1), LT(2), LT(3), LNUM(4, 1))), (),                             \
     (GOLDEN(addcmul, zorch_addcmul(x[0], x[1], x[2], p[0]), 2e-5, 1e-6)                            \
      GRAD(addcmul, zorch_addcmul(in[0], in[1], in[2], 0.5), (LEAF(3, 4), LEAF(4), LEAF(3, 1)))     \
      BAD("zorch.addcmul(zorch.ones(2), zorch.ones(2))", "tensor expected, got no value")))          \
  OP(addcdiv, zorch_tensor *, (zorch_tensor *t, zorch_tensor *a, zorch_tensor *b, double value),    \
     (t, a, b, value), LUA_BOTH((LT(1), LT(2), LT(3), LNUM(4, 1))), (),                             \
     (GOLDEN(addcdiv, zorch_addcdiv(x[0], x[1], x[2], p[0]), 2e-5, 1e-6)                            \
      GRAD(addcdiv, zorch_addcdiv(in[0], in[1], in[2], -2), (LEAF(3, 4), LEAF(3, 1), LEAF_POS(4)))  \
      BAD("zorch.addcdiv(zorch.ones(2), zorch.tensor{1, 2}, zorch.tensor{3, 4})",                   \
          "addcdiv: integer division is not supported")))                                           \
  OP(clamp_min, zorch_tensor *, (zorch_tensor *a, double min), (a, min),                            \
     LUA_BOTH((LT(1), LNUM_REQ(2))), (),                                                            \
     (GOLDEN(clamp_min, zorch_clamp_min(x[0], p[0]), 2e-5, 1e-6)                                    \
      GRAD(clamp_min, zorch_clamp_min(in[0], 0.2), (LEAF(3, 4)))                                    \
      BAD("zorch.clamp_min(zorch.ones(2))", "number expected")                                      \
      BAD("zorch.clamp_min(zorch.ones(2), 0 / 0)", "clamp_min: min is NaN")))                       \
  OP(clamp_max, zorch_tensor *, (zorch_tensor *a, double max), (a, max),                            \
     LUA_BOTH((LT(1), LNUM_REQ(2))), (),                                                            \
     (GOLDEN(clamp_max, zorch_clamp_max(x[0], p[0]), 2e-5, 1e-6)                                    \
      GRAD(clamp_max, zorch_clamp_max(in[0], -0.3), (LEAF(3, 4)))                                   \
      BAD("zorch.clamp_max(zorch.ones(2), 0 / 0)", "clamp_max: max is NaN")))                       \
  /* |a - b| <= atol + rtol * |b| (or a == b; two NaNs too with equal_nan), a bool                  \
     tensor; a and b of one dtype, broadcast. allclose: all of them. equal: the                     \
     same shape and values. No gradient. */                                                         \
  OP(isclose, zorch_tensor *,                                                                       \
     (zorch_tensor *a, zorch_tensor *b, double rtol, double atol, bool equal_nan),                  \
     (a, b, rtol, atol, equal_nan), LUA_BOTH((LT(1), LT(2), LNUM(3, 1e-5), LNUM(4, 1e-8), LBOOL(5))), (), \
     (GOLDEN(isclose, zorch_isclose(x[0], x[1], p[0], p[1], false), 0, 0)                           \
      GOLDEN(isclose_nan, zorch_isclose(x[0], x[1], p[0], p[1], true), 0, 0)                        \
      BAD("zorch.isclose(zorch.ones(2), zorch.ones(2), -1)", "isclose: rtol (-1) and atol (1e-08) must be at least 0") \
      BAD("zorch.isclose(zorch.ones(2), zorch.ones(2):double())", "isclose: a is float32 and b is float64"))) \
  /* Lua: the hand bindings (Lua booleans). */                                                      \
  OP(allclose, zorch_status,                                                                        \
     (zorch_tensor *a, zorch_tensor *b, double rtol, double atol, bool equal_nan, bool *out),       \
     (a, b, rtol, atol, equal_nan, out), LUA_NONE, (),                                              \
     (GOLDEN(allclose, allclose_case(x[0], x[1], p[0], p[1]), 0, 0)                                 \
      GOLDEN(allclose_true, allclose_case(x[0], x[1], p[0], p[1]), 0, 0)))                          \
  OP(equal, zorch_status, (zorch_tensor *a, zorch_tensor *b, bool *out), (a, b, out), LUA_NONE, (), \
     (GOLDEN(equal, equal_case(x[0], x[1]), 0, 0)                                                   \
      GOLDEN(equal_values, equal_case(x[0], x[1]), 0, 0)                                            \
      GOLDEN(equal_shapes, equal_case(x[0], x[1]), 0, 0)))                                          \
  /* ---- reductions (dims: list of ndims entries; ndims 0 means all) ---- */                         \
  /* reduce: out (outer, inner) = reduce over r of a (outer, r, inner); idx (int64,                 \
     may be NULL) gets the argmax for RED_MAX, the argmin for RED_MIN (the first                   \
     one; NaN wins). */                                                                            \
  OP(sum, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),             \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))),                             \
     (KERNEL(reduce, (red_op op, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *a,      \
                      int64_t outer, int64_t r, int64_t inner))),                                  \
     (GOLDEN(sum_dims, zorch_sum(x[0], 2, (int[]){0, 2}, true), 2e-5, 1e-6)                         \
      GOLDEN(sum_all, zorch_sum(x[0], 0, NULL, false), 2e-5, 1e-6)                                 \
      GRAD(sum_all, zorch_sum(in[0], 0, NULL, false), (LEAF(2, 3)))                                \
      GRAD(sum_dims, zorch_sum(in[0], 2, (int[]){0, 2}, true), (LEAF(2, 3, 4)))                    \
      BAD("zorch.sum(zorch.ones(2, 3), 3)", "sum")                                                 \
      DEVICE("zorch.sum(a, {1, 3}, true)", (3, 4, 5), (1), 1e-5)))                                  \
  OP(mean, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),            \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                         \
     (GOLDEN(mean_dim, zorch_mean(x[0], 1, (int[]){1}, false), 2e-5, 1e-6)                         \
      GRAD(mean_dim, zorch_mean(in[0], 1, (int[]){1}, false), (LEAF(2, 3, 4)))                     \
      DEVICE("zorch.mean(a, 2)", (3, 4, 5), (1), 1e-5)))                                            \
  /* Variance and standard deviation over dims: sum((a - mean)^2) / (count -                       \
     correction); correction 1 is PyTorch's unbiased default (count <= correction                  \
     gives inf or nan, as PyTorch). Floating-point inputs. */                                      \
  OP(var, zorch_tensor *,                                                                          \
     (zorch_tensor *a, int ndims, const int *dims, bool keepdim, double correction),               \
     (a, ndims, dims, keepdim, correction), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3), LNUM(4, 1))), (), \
     (GOLDEN(var_dim, zorch_var(x[0], 1, (int[]){1}, false, 1), 2e-5, 1e-6)                        \
      GOLDEN(var_all_corr0, zorch_var(x[0], 0, NULL, false, 0), 2e-5, 1e-6)                        \
      GRAD(var_dim, zorch_var(in[0], 1, (int[]){1}, false, 1), (LEAF(2, 5, 3)))                    \
      GRAD(var_all0, zorch_var(in[0], 0, NULL, false, 0), (LEAF(3, 4)))                            \
      DEVICE("zorch.var(a, 2)", (3, 40), (1), 1e-4)))                                               \
  OP(std, zorch_tensor *,                                                                          \
     (zorch_tensor *a, int ndims, const int *dims, bool keepdim, double correction),               \
     (a, ndims, dims, keepdim, correction), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3), LNUM(4, 1))), (), \
     (GOLDEN(std_dims, zorch_std(x[0], 2, (int[]){0, 2}, true, 1), 2e-5, 1e-6)                     \
      GRAD(std_dims, zorch_std(in[0], 2, (int[]){0, 2}, true, 1), (LEAF(2, 3, 4)))                 \
      BAD("zorch.std(zorch.ones(2, 3), 1, false, -2)", "std")))                                    \
  /* Running sum along dim (integers and bool give int64).                                         \
     cumsum: out (outer, n, inner) = the inclusive running sum of a along n (from                  \
     the end when `reverse`); float32/float64 accumulate in double, int64 in int64. */            \
  OP(cumsum, zorch_tensor *, (zorch_tensor *a, int dim), (a, dim), LUA_BOTH((LT(1), LDIM(2))),     \
     (KERNEL(cumsum, (zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t n,          \
                      int64_t inner, bool reverse))),                                              \
     (GOLDEN(cumsum, zorch_cumsum(x[0], 1), 2e-5, 1e-6)                                            \
      GOLDEN(cumsum_int, zorch_cumsum(x[0], 0), 2e-5, 1e-6)                                        \
      GRAD(cumsum0, zorch_cumsum(in[0], 0), (LEAF(4, 3)))                                          \
      GRAD(cumsum1, zorch_cumsum(in[0], -1), (LEAF(2, 3, 5)))                                      \
      DEVICE("zorch.cumsum(a, 2)", (3, 70), (1), 1e-5)))                                           \
  /* Values sorted along dim (stable: equal values keep their order; NaN counts as                 \
     the largest); `indices` (optional out, int64) gets where each came from.                      \
     sort: values and idx (int64), both (outer, n, inner) = a (outer, n, inner)                    \
     sorted along n, stably; NaN is larger than every number (PyTorch's order). */                \
  OP(sort, zorch_tensor *, (zorch_tensor *a, int dim, bool descending, zorch_tensor **indices),    \
     (a, dim, descending, indices), LUA_BOTH_VI((LT(1), LDIM_OR(2, -1), LBOOL(3), LOUT)),          \
     (KERNEL(sort, (zorch_tensor *values, zorch_tensor *idx, const zorch_tensor *a,                \
                    int64_t outer, int64_t n, int64_t inner, bool descending))),                   \
     (GOLDEN(sort_desc, zorch_sort(x[0], 1, true, NULL), 2e-5, 1e-6)                               \
      GOLDEN(sort_stable_indices, sort_indices(x[0], -1, false), 2e-5, 1e-6)                       \
      GRAD(sort, zorch_sort(in[0], -1, false, NULL), (LEAF(3, 6)))                                 \
      GRAD(sort_desc0, zorch_sort(in[0], 0, true, NULL), (LEAF(5, 2, 3)))                          \
      DEVICE("zorch.sort(a, 2, true)", (3, 50), (1), 0)))                                          \
  /* The k largest (or smallest) values along dim, 0 <= k <= size, and their                       \
     indices (optional out). They always come sorted, whatever `sorted` says. */                   \
  OP(topk, zorch_tensor *,                                                                         \
     (zorch_tensor *a, int64_t k, int dim, bool largest, bool sorted, zorch_tensor **indices),     \
     (a, k, dim, largest, sorted, indices),                                                        \
     LUA_BOTH_VI((LT(1), LINT_REQ(2), LDIM_OR(3, -1), LBOOL_OR(4, true), LBOOL_OR(5, true), LOUT)), \
     (), (GOLDEN(topk, zorch_topk(x[0], 3, 1, true, true, NULL), 2e-5, 1e-6)                       \
          GOLDEN(topk_smallest, zorch_topk(x[0], 2, 0, false, true, NULL), 2e-5, 1e-6)             \
          GOLDEN(topk_indices, topk_indices(x[0], 3, -1), 2e-5, 1e-6)                              \
          GRAD(topk, zorch_topk(in[0], 2, 1, true, true, NULL), (LEAF(3, 5, 2)))                   \
          GRAD(topk_smallest, zorch_topk(in[0], 3, 0, false, true, NULL), (LEAF(4, 3)))            \
          BAD("zorch.topk(zorch.ones(3, 4))", "number expected")                                   \
          DEVICE("zorch.topk(a, 3, 1, false)", (6, 5), (1), 0)))                                   \
  /* Values of the maximum; `indices` (optional out, int64, flat index within the reduced           \
     dims) gets the first position of each maximum.                                                 \
     max_bwd: gin (outer, r, inner), zero-filled, gets g (outer, inner) at idx. */                  \
  OP(max, zorch_tensor *,                                                                           \
     (zorch_tensor *a, int ndims, const int *dims, bool keepdim, zorch_tensor **indices),           \
     (a, ndims, dims, keepdim, indices), LUA_BOTH_VI((LT(1), LDIMS(2), LBOOL(3), LOUT)),            \
     (KERNEL(max_bwd, (zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *idx,           \
                       int64_t outer, int64_t r, int64_t inner))),                                  \
     (GOLDEN(max_dim, zorch_max(x[0], 1, (int[]){-1}, false, NULL), 2e-5, 1e-6)                     \
      GRAD(max_dim, zorch_max(in[0], 1, (int[]){-1}, false, NULL), (LEAF(3, 5)))                    \
      GRAD(max_dims, zorch_max(in[0], 2, (int[]){0, 2}, true, NULL), (LEAF(2, 3, 4)))               \
      GRAD(max_all, zorch_max(in[0], 0, NULL, false, NULL), (LEAF(2, 3)))                           \
      DEVICE("zorch.max(a, 2)", (3, 70), (1), 0)))                                                  \
  /* The same for the minimum. */                                                                   \
  OP(min, zorch_tensor *,                                                                           \
     (zorch_tensor *a, int ndims, const int *dims, bool keepdim, zorch_tensor **indices),           \
     (a, ndims, dims, keepdim, indices), LUA_BOTH_VI((LT(1), LDIMS(2), LBOOL(3), LOUT)), (),        \
     (GOLDEN(min_dim, zorch_min(x[0], 1, (int[]){-1}, false, NULL), 2e-5, 1e-6)                     \
      GOLDEN(min_indices, min_indices(x[0], 0, true), 2e-5, 1e-6)                                   \
      GRAD(min_dim, zorch_min(in[0], 1, (int[]){-1}, false, NULL), (LEAF(3, 5)))                    \
      GRAD(min_dims, zorch_min(in[0], 2, (int[]){0, 2}, true, NULL), (LEAF(2, 3, 4)))               \
      BAD("zorch.min(zorch.randn(3, 4), -3)", "min: dim -3 out of range for a 2-d tensor")                                          \
      DEVICE("zorch.min(a, {1, 2}, true)", (4, 5, 3), (1), 0)))                                     \
  /* Only the indices (int64) of zorch_max / zorch_min; no gradient. */                             \
  OP(argmax, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),           \
     (a, ndims, dims, keepdim), LUA_BOTH_I((LT(1), LDIMS(2), LBOOL(3))), (),                        \
     (GOLDEN(argmax_dim, zorch_argmax(x[0], 1, (int[]){1}, false), 2e-5, 1e-6)                      \
      BAD("zorch.argmax(zorch.ones(0, 3), 1)", "argmax: cannot take the max over an empty dimension")))                                  \
  OP(argmin, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),           \
     (a, ndims, dims, keepdim), LUA_BOTH_I((LT(1), LDIMS(2), LBOOL(3))), (),                        \
     (GOLDEN(argmin_all, zorch_argmin(x[0], 0, NULL, false), 2e-5, 1e-6)))                          \
  /* Max and min over dims with the gradient shared evenly among ties, even over one dim. */        \
  OP(amax, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),             \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                          \
     (GOLDEN(amax_dims, zorch_amax(x[0], 2, (int[]){0, 2}, true), 2e-5, 1e-6)                       \
      GRAD(amax_dim, zorch_amax(in[0], 1, (int[]){0}, true), (LEAF(3, 4)))                          \
      DEVICE("zorch.amax(a, {1, 3})", (3, 4, 5), (1), 0)))                                          \
  OP(amin, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),             \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                          \
     (GOLDEN(amin_dim, zorch_amin(x[0], 1, (int[]){1}, false), 2e-5, 1e-6)                          \
      GRAD(amin_all, zorch_amin(in[0], 0, NULL, false), (LEAF(3, 4)))))                             \
  /* log(sum(exp(x))) over dims, computed with the max subtracted (stable; -inf                     \
     where every element is -inf) */                                                                \
  OP(logsumexp, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),        \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                          \
     (GOLDEN(logsumexp_dim, zorch_logsumexp(x[0], 1, (int[]){1}, false), 2e-5, 1e-6)                \
      GRAD(logsumexp_dims, zorch_logsumexp(in[0], 2, (int[]){0, -1}, true), (LEAF(2, 3, 4)))        \
      DEVICE("zorch.logsumexp(a, 2)", (3, 40), (1), 1e-5)))                                         \
  /* Product over one dim (ndims 1) or all (ndims 0); integers and bool give int64. */              \
  OP(prod, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),             \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIM_OPT(2), LBOOL(3))), (),                       \
     (GOLDEN(prod_dim, zorch_prod(x[0], 1, (int[]){1}, false), 2e-5, 1e-6)                          \
      GOLDEN(prod_all, zorch_prod(x[0], 0, NULL, false), 2e-5, 1e-6)                                \
      GRAD(prod_dim, zorch_prod(in[0], 1, (int[]){-1}, false), (LEAF(3, 5)))                        \
      GRAD(prod_all, zorch_prod(in[0], 0, NULL, true), (LEAF(2, 3)))                                \
      BAD("zorch.prod(zorch.ones(2, 3), {1, 2})", "number expected")                                \
      DEVICE("zorch.prod(a, 2)", (3, 6), (1), 1e-5)))                                               \
  /* Running product along dim (integers and bool give int64). */                                   \
  OP(cumprod, zorch_tensor *, (zorch_tensor *a, int dim), (a, dim), LUA_BOTH((LT(1), LDIM(2))), (), \
     (GOLDEN(cumprod, zorch_cumprod(x[0], 1), 2e-5, 1e-6)                                           \
      GRAD(cumprod, zorch_cumprod(in[0], 1), (LEAF(2, 4)))                                          \
      DEVICE("zorch.cumprod(a, 1)", (5, 3), (1), 1e-5)))                                            \
  /* Vector norm over dims: p = 2, 1, INFINITY, -INFINITY, 0 (the count of                          \
     nonzeros) or any other number: sum(|a|^p)^(1/p). Floating-point inputs. */                     \
  OP(norm, zorch_tensor *, (zorch_tensor *a, double p, int ndims, const int *dims, bool keepdim),   \
     (a, p, ndims, dims, keepdim), LUA_BOTH((LT(1), LREADN(norm_p, 2), LDIMS(3), LBOOL(4))), (),    \
     (GOLDEN(norm_dim, zorch_norm(x[0], 2, 1, (int[]){1}, false), 2e-5, 1e-6)                       \
      GOLDEN(norm_p3_all, zorch_norm(x[0], 3, 0, NULL, false), 2e-5, 1e-6)                          \
      GOLDEN(norm_inf, zorch_norm(x[0], INFINITY, 1, (int[]){-1}, true), 2e-5, 1e-6)                \
      GRAD(norm2, zorch_norm(in[0], 2, 1, (int[]){1}, false), (LEAF(3, 4)))                         \
      GRAD(norm3, zorch_norm(in[0], 3, 0, NULL, false), (LEAF(2, 3)))                               \
      GRAD(norm_inf, zorch_norm(in[0], INFINITY, 1, (int[]){-1}, false), (LEAF(3, 4)))              \
      BAD("zorch.norm(zorch.ones(2, 2, 2), 'fro', {1, 2, 3})", "norm: p 'fro' takes 1 or 2 dims (or none), got 3") \
      BAD("zorch.norm(zorch.ones(2, 3), 'nuc')", "norm: p must be a number, 'fro', 'inf' or '-inf', got 'nuc'") \
      DEVICE("zorch.norm(a, 3, 2)", (4, 30), (1), 1e-5)))                                           \
  /* Whether any (all) elements are nonzero: bool (uint8 for a uint8 input). */                     \
  OP(any, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),              \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                          \
     (GOLDEN(any_dim, zorch_any(x[0], 1, (int[]){1}, false), 0, 0)))                                \
  OP(all, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims, bool keepdim),              \
     (a, ndims, dims, keepdim), LUA_BOTH((LT(1), LDIMS(2), LBOOL(3))), (),                          \
     (GOLDEN(all_dims, zorch_all(x[0], 1, (int[]){0}, false), 0, 0)))                               \
  /* int64 */                                                                                       \
  OP(count_nonzero, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims),                  \
     (a, ndims, dims), LUA_BOTH((LT(1), LDIMS(2))), (),                                             \
     (GOLDEN(count_nonzero_dims, zorch_count_nonzero(x[0], 2, (int[]){0, 2}), 0, 0)))               \
  /* softmax: over c of a (outer, c, inner), or its log. softmax_bwd (optional):                   \
     gx = y * (g - sum(g * y)), or for log_softmax gx = g - exp(y) * sum(g), over                 \
     rows of c (inner 1); gx, g and y of one dtype; where a backend has none the                   \
     op layer composes it from other ops. */                                                       \
  OP(softmax, zorch_tensor *, (zorch_tensor *a, int dim), (a, dim), LUA_BOTH((LT(1), LDIM(2))),    \
     (KERNEL(softmax, (zorch_tensor *out, const zorch_tensor *a, int64_t outer, int64_t c,         \
                       int64_t inner, bool log))                                                   \
      KERNEL_OPT(softmax_bwd, (zorch_tensor *gx, const zorch_tensor *g, const zorch_tensor *y,     \
                               int64_t outer, int64_t c, bool log))),                              \
     (GOLDEN(softmax, zorch_softmax(x[0], 1), 2e-5, 1e-6)                                          \
      GRAD(softmax0, zorch_softmax(in[0], 0), (LEAF(3, 4)))                                        \
      GRAD(softmax1, zorch_softmax(in[0], -1), (LEAF(2, 3, 4)))                                    \
      BAD("zorch.softmax(zorch.ones(2, 3), 3)", "softmax")                                         \
      DEVICE("zorch.softmax(a, 2)", (3, 100), (1), 1e-5)))                                         \
  OP(log_softmax, zorch_tensor *, (zorch_tensor *a, int dim), (a, dim),                            \
     LUA_BOTH((LT(1), LDIM(2))), (),                                                               \
     (GOLDEN(log_softmax, zorch_log_softmax(x[0], 0), 2e-5, 1e-6)                                  \
      GRAD(log_softmax, zorch_log_softmax(in[0], 1), (LEAF(2, 5, 3)))                              \
      DEVICE("zorch.log_softmax(a, 1)", (30, 4), (1), 1e-5)))                                      \
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
  /* ---- linear algebra ---- */                                                                    \
  /* PyTorch's matmul: vectors, matrices and broadcast batches of matrices.                         \
     gemm: row-major C (m, n) = epilogue(alpha * op(A) op(B) + beta * C) on device                  \
     pointers of device g->dev (gemm_args, ops/backend/backend.h); the epilogue adds                \
     `bias` (n, may be NULL) to every row, then applies relu when asked. */                         \
  OP(matmul, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b),                            \
     LUA_BOTH((LT(1), LT(2))), (KERNEL(gemm, (const gemm_args *g))),                                \
     (GOLDEN(matmul, zorch_matmul(x[0], x[1]), 2e-5, 1e-6)                                          \
      GOLDEN(matmul_vec, zorch_matmul(x[0], x[1]), 2e-5, 1e-6)                                      \
      GRAD(matmul, zorch_matmul(in[0], in[1]), (LEAF(3, 4), LEAF(4, 2)))                            \
      GRAD(matmul_3d_2d, zorch_matmul(in[0], in[1]), (LEAF(2, 3, 4), LEAF(4, 5)))                   \
      GRAD(matmul_broadcast, zorch_matmul(in[0], in[1]), (LEAF(2, 1, 3, 4), LEAF(3, 4, 2)))         \
      GRAD(matmul_vec_mat, zorch_matmul(in[0], in[1]), (LEAF(4), LEAF(4, 3)))                       \
      GRAD(matmul_3d_vec, zorch_matmul(in[0], in[1]), (LEAF(2, 3, 4), LEAF(4)))                     \
      GRAD(matmul_vec_vec, zorch_matmul(in[0], in[1]), (LEAF(4), LEAF(4)))                          \
      BAD("zorch.matmul(zorch.ones(64, 10), zorch.ones(20, 2))", "matmul: shapes (64, 10) and (20, 2) cannot be multiplied")                        \
      DEVICE("zorch.matmul(a, b)", (2, 3, 5), (5, 4), 1e-5)))                                       \
  /* Matrix products with PyTorch's strict shapes: (n,k)(k,m), (b,n,k)(b,k,m), (n,k)(k), (k)(k). */ \
  OP(mm, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b), LUA_BOTH((LT(1), LT(2))), (),  \
     (GOLDEN(mm, zorch_mm(x[0], x[1]), 2e-5, 1e-6)                                                  \
      DEVICE("zorch.mm(a, b)", (3, 7), (7, 2), 1e-5)))                                              \
  OP(bmm, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b), LUA_BOTH((LT(1), LT(2))), (), \
     (GOLDEN(bmm, zorch_bmm(x[0], x[1]), 2e-5, 1e-6)                                                \
      DEVICE("zorch.bmm(a, b)", (2, 3, 4), (2, 4, 5), 1e-5)))                                       \
  OP(mv, zorch_tensor *, (zorch_tensor *a, zorch_tensor *v), (a, v), LUA_BOTH((LT(1), LT(2))), (),  \
     (GOLDEN(mv, zorch_mv(x[0], x[1]), 2e-5, 1e-6)))                                                \
  OP(dot, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b), LUA_BOTH((LT(1), LT(2))), (), \
     (GOLDEN(dot, zorch_dot(x[0], x[1]), 2e-5, 1e-6)                                                \
      GRAD(dot, zorch_dot(in[0], in[1]), (LEAF(5), LEAF(5)))))                                      \
  OP(outer, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b), LUA_BOTH((LT(1), LT(2))), (), \
     (GOLDEN(outer, zorch_outer(x[0], x[1]), 2e-5, 1e-6)                                            \
      GRAD(outer, zorch_outer(in[0], in[1]), (LEAF(3), LEAF(4)))))                                  \
  /* beta * c + alpha * mm(a, b) (bmm for baddbmm); c broadcasts to the product. */                 \
  OP(addmm, zorch_tensor *,                                                                         \
     (zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha),                \
     (c, a, b, beta, alpha), LUA_BOTH((LT(1), LT(2), LT(3), LNUM(4, 1), LNUM(5, 1))), (),           \
     (GOLDEN(addmm, zorch_addmm(x[0], x[1], x[2], 0.5, 2), 2e-5, 1e-6)                              \
      GRAD(addmm, zorch_addmm(in[0], in[1], in[2], 0.5, 2), (LEAF(3), LEAF(2, 4), LEAF(4, 3)))))    \
  OP(baddbmm, zorch_tensor *,                                                                       \
     (zorch_tensor *c, zorch_tensor *a, zorch_tensor *b, double beta, double alpha),                \
     (c, a, b, beta, alpha), LUA_BOTH((LT(1), LT(2), LT(3), LNUM(4, 1), LNUM(5, 1))), (),           \
     (GOLDEN(baddbmm, zorch_baddbmm(x[0], x[1], x[2], 1, -1), 2e-5, 1e-6)                           \
      GRAD(baddbmm, zorch_baddbmm(in[0], in[1], in[2], 1, -1),                                      \
           (LEAF(2, 1, 3), LEAF(2, 2, 4), LEAF(2, 4, 3)))))                                         \
  /* The view of diagonal `offset` over dim1 and dim2, appended as the last dim. */                 \
  OP(diagonal, zorch_tensor *, (zorch_tensor *t, int64_t offset, int dim1, int dim2),               \
     (t, offset, dim1, dim2), LUA_BOTH((LT(1), LINT(2, 0), LDIM_OR(3, 0), LDIM_OR(4, 1))), (),      \
     (GOLDEN(diagonal, zorch_diagonal(x[0], 1, 0, 2), 2e-5, 1e-6)                                   \
      GRAD(diagonal, zorch_diagonal(in[0], 1, 0, 2), (LEAF(3, 2, 4)))))                             \
  /* A vector to a square matrix with it on diagonal offset, or a matrix's diagonal (a copy). */    \
  OP(diag, zorch_tensor *, (zorch_tensor *t, int64_t offset), (t, offset),                          \
     LUA_BOTH((LT(1), LINT(2, 0))), (),                                                             \
     (GOLDEN(diag_embed, zorch_diag(x[0], -1), 2e-5, 1e-6)                                          \
      GOLDEN(diag_mat, zorch_diag(x[0], 1), 2e-5, 1e-6)                                             \
      GRAD(diag_embed, zorch_diag(in[0], -1), (LEAF(3)))                                            \
      GRAD(diag_mat, zorch_diag(in[0], 1), (LEAF(3, 4)))))                                          \
  OP(trace, zorch_tensor *, (zorch_tensor *t), (t), LUA_BOTH((LT(1))), (),                          \
     (GOLDEN(trace, zorch_trace(x[0]), 2e-5, 1e-6)                                                  \
      GRAD(trace, zorch_trace(in[0]), (LEAF(3, 3)))))                                               \
  /* x with the elements above (tril) or below (triu) diagonal k of the last two                    \
     dims set to 0 (k > 0: above the main diagonal) */                                              \
  OP(tril, zorch_tensor *, (zorch_tensor *x, int64_t k), (x, k), LUA_BOTH((LT(1), LINT(2, 0))), (), \
     (GOLDEN(tril, zorch_tril(x[0], -1), 2e-5, 1e-6)                                                \
      GRAD(tril, zorch_tril(in[0], -1), (LEAF(4, 5)))                                               \
      DEVICE("zorch.tril(a, 1)", (3, 5, 4), (1), 0)))                                               \
  OP(triu, zorch_tensor *, (zorch_tensor *x, int64_t k), (x, k), LUA_BOTH((LT(1), LINT(2, 0))), (), \
     (GOLDEN(triu, zorch_triu(x[0], 1), 2e-5, 1e-6)                                                 \
      GRAD(triu, zorch_triu(in[0], 1), (LEAF(2, 3, 4)))))                                           \
  /* ---- selection, joining and rearranging ---- */                                                \
  /* Lua: the hand binding (a number for either branch, at the other's dtype). */                   \
  OP(where, zorch_tensor *, (zorch_tensor *cond, zorch_tensor *a, zorch_tensor *b), (cond, a, b),   \
     LUA_NONE, (),                                                                                  \
     (GOLDEN(where, zorch_where(x[2], x[0], x[1]), 2e-5, 1e-6)                                      \
      GRAD(where, zorch_where(in[2], in[0], in[1]), (LEAF(3, 4), LEAF(4), MASK(3, 4)))              \
      DEVICE("zorch.where(a:gt(0), a, b)", (3, 4), (4), 0)))                                        \
  /* Lua: the hand binding (an integer fill of an integer tensor stays exact past 2^53). */         \
  OP(masked_fill, zorch_tensor *, (zorch_tensor *a, zorch_tensor *mask, double value),              \
     (a, mask, value), LUA_NONE, (),                                                                \
     (GOLDEN(masked_fill, zorch_masked_fill(x[0], x[1], 2.0), 2e-5, 1e-6)                           \
      GRAD(masked_fill, zorch_masked_fill(in[0], in[1], 2.0), (LEAF(3, 4), MASK(3, 4)))))           \
  /* Lua: the hand bindings (a list of tensors, its entries named in the messages). */              \
  OP(cat, zorch_tensor *, (int n, zorch_tensor *const *ts, int dim), (n, ts, dim), LUA_NONE, (),    \
     (GOLDEN(cat, zorch_cat(2, x, 1), 2e-5, 1e-6)                                                   \
      GRAD(cat, zorch_cat(3, in, 1), (LEAF(2, 1, 3), LEAF(2, 4, 3), LEAF(2, 2, 3)))                 \
      DEVICE("zorch.cat({a, b}, 1)", (2, 3), (4, 3), 0)))                                           \
  OP(stack, zorch_tensor *, (int n, zorch_tensor *const *ts, int dim), (n, ts, dim), LUA_NONE, (),  \
     (GOLDEN(stack, zorch_stack(2, x, 1), 2e-5, 1e-6)                                               \
      GRAD(stack, zorch_stack(2, in, 1), (LEAF(2, 3), LEAF(2, 3)))))                                \
  /* A copy with the order of dims reversed. */                                                     \
  OP(flip, zorch_tensor *, (zorch_tensor *a, int ndims, const int *dims), (a, ndims, dims),         \
     LUA_BOTH((LT(1), LDIMS_REQ(2))), (),                                                           \
     (GOLDEN(flip, zorch_flip(x[0], 2, (int[]){0, 2}), 2e-5, 1e-6)                                  \
      GRAD(flip, zorch_flip(in[0], 2, (int[]){0, 2}), (LEAF(2, 3, 4)))                              \
      BAD("zorch.flip(zorch.ones(2, 3))", "dims expected (a number or a table)")                    \
      DEVICE("zorch.flip(a, {1, 3})", (3, 4, 5), (1), 0)))                                          \
  /* Elements shifted along dims (the flattened tensor when ndims is 0, with one shift). */         \
  OP(roll, zorch_tensor *,                                                                          \
     (zorch_tensor *a, int nshifts, const int64_t *shifts, int ndims, const int *dims),             \
     (a, nshifts, shifts, ndims, dims), LUA_BOTH((LT(1), LINTS(2), LDIMS(3))), (),                  \
     (GOLDEN(roll, zorch_roll(x[0], 2, (int64_t[]){1, -2}, 2, (int[]){0, 1}), 2e-5, 1e-6)           \
      GOLDEN(roll_flat, zorch_roll(x[0], 1, (int64_t[]){2}, 0, NULL), 2e-5, 1e-6)                   \
      GRAD(roll, zorch_roll(in[0], 2, (int64_t[]){1, -2}, 2, (int[]){0, 1}), (LEAF(3, 4)))          \
      BAD("zorch.roll(zorch.ones(2, 3), {1, 'a'})", "expected integers")                            \
      DEVICE("zorch.roll(a, {2, -1}, {1, 2})", (4, 5), (1), 0)))                                    \
  /* PyTorch's repeat (n >= a's dims, leading reps add dims) and tile (fewer reps: 1s in front). */ \
  OP(repeat, zorch_tensor *, (zorch_tensor *a, int n, const int64_t *reps), (a, n, reps),           \
     LUA_BOTH((LT(1), LSIZES(2))), (),                                                              \
     (GOLDEN(repeat, zorch_repeat(x[0], 3, (int64_t[]){2, 1, 3}), 2e-5, 1e-6)                       \
      DEVICE("zorch['repeat'](a, 2, 1, 3)", (2, 3), (1), 0)))                                                 \
  OP(tile, zorch_tensor *, (zorch_tensor *a, int n, const int64_t *reps), (a, n, reps),             \
     LUA_BOTH((LT(1), LSIZES(2))), (),                                                              \
     (GOLDEN(tile, zorch_tile(x[0], 1, (int64_t[]){2}), 2e-5, 1e-6)                                 \
      GRAD(tile, zorch_tile(in[0], 3, (int64_t[]){2, 1, 3}), (LEAF(2, 3)))))                        \
  /* Each element repeated `repeats` times along *dim (the flattened input when dim is NULL).       \
     Lua: the hand binding, one function for a count or a tensor of counts. */                      \
  OP(repeat_interleave, zorch_tensor *, (zorch_tensor *a, int64_t repeats, const int *dim),         \
     (a, repeats, dim), LUA_NONE, (),                                                               \
     (GOLDEN(repeat_interleave, zorch_repeat_interleave(x[0], 2, (int[]){1}), 2e-5, 1e-6)           \
      GRAD(repeat_interleave, zorch_repeat_interleave(in[0], 2, (int[]){1}), (LEAF(2, 3)))))        \
  /* The same with a count per element of dim (an int64 vector of its size, or of one count). */    \
  OP(repeat_interleave_tensor, zorch_tensor *, (zorch_tensor *a, zorch_tensor *repeats, const int *dim), \
     (a, repeats, dim), LUA_NONE, (),                                                               \
     (GOLDEN(repeat_interleave_tensor, zorch_repeat_interleave_tensor(x[0], x[1], (int[]){0}), 2e-5, 1e-6) \
      GRAD(repeat_interleave_tensor, zorch_repeat_interleave_tensor(in[0], in[1], (int[]){0}),      \
           (LEAF(3, 2), INDEX((3), (1, 0, 3))))))                                                   \
  /* A view with dims src[i] moved to dst[i], the others in their order.                            \
     Lua: the hand binding (moveaxis too; the two lists' lengths checked). */                       \
  OP(movedim, zorch_tensor *, (zorch_tensor *a, int n, const int *src, const int *dst),             \
     (a, n, src, dst), LUA_NONE, (),                                                                \
     (GOLDEN(movedim, zorch_movedim(x[0], 2, (int[]){0, 1}, (int[]){2, 0}), 2e-5, 1e-6)))           \
  /* dim split into sizes (one may be -1). Lua: the hand binding (sizes a table only). */           \
  OP(unflatten, zorch_tensor *, (zorch_tensor *a, int dim, int nsizes, const int64_t *sizes),       \
     (a, dim, nsizes, sizes), LUA_NONE, (),                                                         \
     (GOLDEN(unflatten, zorch_unflatten(x[0], 1, 2, (int64_t[]){2, -1}), 2e-5, 1e-6)))              \
  /* torch.nn.functional.pad: pads = (before, after) pairs for the last dims, the                   \
     last dim first; negative pads crop (constant and circular modes).                              \
     Lua: the hand binding (the mode by name; a value only for 'constant'). */                      \
  OP(pad, zorch_tensor *,                                                                           \
     (zorch_tensor *a, int npads, const int64_t *pads, zorch_pad_mode mode, double value),          \
     (a, npads, pads, mode, value), LUA_NONE, (),                                                   \
     (GOLDEN(pad_const, zorch_pad(x[0], 4, (int64_t[]){1, -1, 2, 0}, ZORCH_PAD_CONSTANT, 0.5), 2e-5, 1e-6) \
      GOLDEN(pad_reflect, zorch_pad(x[0], 2, (int64_t[]){2, 1}, ZORCH_PAD_REFLECT, 0), 2e-5, 1e-6)  \
      GOLDEN(pad_replicate, zorch_pad(x[0], 2, (int64_t[]){1, 2}, ZORCH_PAD_REPLICATE, 0), 2e-5, 1e-6) \
      GOLDEN(pad_circular, zorch_pad(x[0], 2, (int64_t[]){2, 1}, ZORCH_PAD_CIRCULAR, 0), 2e-5, 1e-6) \
      GRAD(pad_const, zorch_pad(in[0], 4, (int64_t[]){1, -1, 2, 0}, ZORCH_PAD_CONSTANT, 0.5), (LEAF(3, 4))) \
      GRAD(pad_reflect, zorch_pad(in[0], 2, (int64_t[]){2, 1}, ZORCH_PAD_REFLECT, 0), (LEAF(2, 4))) \
      GRAD(pad_replicate, zorch_pad(in[0], 2, (int64_t[]){1, 2}, ZORCH_PAD_REPLICATE, 0), (LEAF(2, 3))) \
      GRAD(pad_circular, zorch_pad(in[0], 2, (int64_t[]){2, 1}, ZORCH_PAD_CIRCULAR, 0), (LEAF(1, 2, 3))) \
      DEVICE("zorch.pad(a, {2, 1, 1, 0}, 'reflect')", (2, 3, 4), (1), 0)))                          \
  /* int64 classes (0-based) to int64 one-hot rows; num_classes -1: the largest class + 1. */       \
  OP(one_hot, zorch_tensor *, (zorch_tensor *idx, int64_t num_classes), (idx, num_classes),         \
     LUA_BOTH((LIDX(1), LINT(2, -1))), (),                                                          \
     (GOLDEN(one_hot, zorch_one_hot(x[0], 5), 0, 0)                                                 \
      BAD("zorch.one_hot(zorch.tensor{1.5})", "int64 indices expected, got float32")))              \
  /* Predicates: ZORCH_BOOL tensors, no gradient (integer inputs: never NaN or                      \
     infinite). */                                                                                  \
  OP(isnan, zorch_tensor *, (zorch_tensor *a), (a), LUA_BOTH((LT(1))), (),                          \
     (GOLDEN(isnan, zorch_isnan(x[0]), 0, 0)))                                                      \
  OP(isinf, zorch_tensor *, (zorch_tensor *a), (a), LUA_BOTH((LT(1))), (),                          \
     (GOLDEN(isinf, zorch_isinf(x[0]), 0, 0)))                                                      \
  OP(isposinf, zorch_tensor *, (zorch_tensor *a), (a), LUA_BOTH((LT(1))), (),                       \
     (GOLDEN(isposinf, zorch_isposinf(x[0]), 0, 0)))                                                \
  OP(isneginf, zorch_tensor *, (zorch_tensor *a), (a), LUA_BOTH((LT(1))), (),                       \
     (GOLDEN(isneginf, zorch_isneginf(x[0]), 0, 0)))                                                \
  OP(isfinite, zorch_tensor *, (zorch_tensor *a), (a), LUA_BOTH((LT(1))), (),                       \
     (GOLDEN(isfinite, zorch_isfinite(x[0]), 0, 0)))                                                \
  /* NaN to `nan`, +inf to *posinf and -inf to *neginf (NULL: the largest and                       \
     the lowest finite value of a's dtype); the gradient passes where a is                          \
     finite. Integer inputs come back as a copy. */                                                 \
  OP(nan_to_num, zorch_tensor *,                                                                    \
     (zorch_tensor *a, double nan, const double *posinf, const double *neginf),                     \
     (a, nan, posinf, neginf), LUA_BOTH((LT(1), LNUM(2, 0), LNUMP(3), LNUMP(4))), (),               \
     (GOLDEN(nan_to_num, zorch_nan_to_num(x[0], 0, NULL, NULL), 2e-5, 1e-6)                         \
      GOLDEN(nan_to_num_values, zorch_nan_to_num(x[0], 1.5, &(double){100}, &(double){-7}), 2e-5, 1e-6) \
      BAD("zorch.nan_to_num(zorch.ones(2), 0, 'x')", "number expected")))                           \
  /* ---- views (share storage; differentiable) and copies ---- */                                  \
  /* -1 infers */                                                                                   \
  OP(view, zorch_tensor *, (zorch_tensor *t, int ndim, const int64_t *shape), (t, ndim, shape),     \
     LUA_BOTH((LT(1), LSIZES(2))), (),                                                              \
     (GOLDEN(view, zorch_view(x[0], SHAPE(4, 3)), 0, 0)                                             \
      GRAD(view, zorch_view(in[0], SHAPE(4, 3)), (LEAF(2, 6)))                                      \
      BAD("zorch.ones(2, 3):view(4, 4)", "view: shape (4, 4) is invalid for input of shape (2, 3)"))) \
  OP(reshape, zorch_tensor *, (zorch_tensor *t, int ndim, const int64_t *shape), (t, ndim, shape),  \
     LUA_BOTH((LT(1), LSIZES(2))), (),                                                              \
     (GOLDEN(reshape, zorch_reshape(x[0], SHAPE(3, -1)), 0, 0)                                      \
      GRAD(reshape_t, transposed_reshape(in[0]), (LEAF(3, 4)))))                                    \
  OP(transpose, zorch_tensor *, (zorch_tensor *t, int d0, int d1), (t, d0, d1),                     \
     LUA_BOTH((LT(1), LDIM(2), LDIM(3))), (),                                                       \
     (GOLDEN(transpose, zorch_transpose(x[0], 0, 2), 0, 0)))                                        \
  /* Lua: the hand binding (dims as numbers or one table, one per dim). */                          \
  OP(permute, zorch_tensor *, (zorch_tensor *t, const int *dims), (t, dims), LUA_NONE, (),          \
     (GOLDEN(permute, zorch_permute(x[0], (int[]){2, 0, 1}), 0, 0)                                  \
      GRAD(permute, zorch_permute(in[0], (int[]){2, 0, 1}), (LEAF(2, 3, 4)))))                      \
  OP(narrow, zorch_tensor *, (zorch_tensor *t, int dim, int64_t start, int64_t length),             \
     (t, dim, start, length), LUA_BOTH((LT(1), LDIM(2), LPOS(3), LINT_REQ(4))), (),                 \
     (GOLDEN(narrow, zorch_narrow(x[0], 1, 1, 2), 0, 0)                                             \
      GRAD(narrow, zorch_narrow(in[0], 1, 1, 2), (LEAF(3, 4)))                                      \
      BAD("zorch.narrow(zorch.ones(2, 3), 1, 0, 1)", "indices are 1-based (0 is not an index)")))   \
  OP(select, zorch_tensor *, (zorch_tensor *t, int dim, int64_t index), (t, dim, index),            \
     LUA_BOTH((LT(1), LDIM(2), LPOS(3))), (),                                                       \
     (GOLDEN(select, zorch_select(x[0], 0, -1), 0, 0)                                               \
      GRAD(select, zorch_select(in[0], 0, -1), (LEAF(3, 4)))))                                      \
  /* -1 keeps */                                                                                    \
  OP(expand, zorch_tensor *, (zorch_tensor *t, int ndim, const int64_t *shape), (t, ndim, shape),   \
     LUA_BOTH((LT(1), LSIZES(2))), (),                                                              \
     (GOLDEN(expand, zorch_expand(x[0], SHAPE(2, 3, 4)), 0, 0)                                      \
      GRAD(expand, zorch_expand(in[0], SHAPE(2, 3, 4)), (LEAF(3, 1)))))                             \
  OP(unsqueeze, zorch_tensor *, (zorch_tensor *t, int dim), (t, dim), LUA_BOTH((LT(1), LDIM(2))), (), \
     (GOLDEN(unsqueeze, zorch_unsqueeze(x[0], 1), 0, 0)                                             \
      GRAD(unsqueeze, zorch_unsqueeze(in[0], 1), (LEAF(3, 4)))))                                    \
  /* Lua: the hand binding (without a dim, every dim of size 1). */                                 \
  OP(squeeze, zorch_tensor *, (zorch_tensor *t, int dim), (t, dim), LUA_NONE, (),                   \
     (GOLDEN(squeeze, zorch_squeeze(x[0], 1), 0, 0)                                                 \
      GRAD(squeeze, zorch_squeeze(in[0], 1), (LEAF(3, 1, 4)))))                                     \
  /* Lua: the hand binding (start_dim and end_dim, made of view). */                                \
  OP(flatten, zorch_tensor *, (zorch_tensor *t), (t), LUA_NONE, (),                                 \
     (GOLDEN(flatten, zorch_flatten(x[0]), 0, 0)))                                                  \
  /* t itself (retained) when contiguous */                                                         \
  OP(contiguous, zorch_tensor *, (zorch_tensor *t), (t), LUA_BOTH((LT(1))), (),                     \
     (GOLDEN(contiguous, transposed_contiguous(x[0]), 0, 0)                                         \
      GRAD(contiguous, transposed_contiguous(in[0]), (LEAF(3, 4)))                                  \
      DEVICE("a:t():contiguous()", (5, 7), (1), 0)))                                                \
  OP(clone, zorch_tensor *, (zorch_tensor *t), (t), LUA_BOTH((LT(1))), (),                          \
     (GOLDEN(clone, zorch_clone(x[0]), 0, 0)                                                        \
      GRAD(clone, zorch_clone(in[0]), (LEAF(3, 4)))))                                               \
  /* Conversions: t itself (retained) when already of dt or on dev. to_dtype is                     \
     differentiable for floats (the gradient comes back in t's dtype), to_device                    \
     too (the gradient goes back to t's device).                                                    \
     Lua: the hand bindings (x:to(...), x:float(), x:double(), x:long(), x:type_as(y)). */          \
  OP(to_dtype, zorch_tensor *, (zorch_tensor *t, zorch_dtype dt), (t, dt), LUA_NONE, (),            \
     (GOLDEN(to_bf16, to_and_back(x[0], ZORCH_BF16), 0, 0)                                          \
      GOLDEN(to_f16, to_and_back(x[0], ZORCH_F16), 0, 0)                                            \
      GOLDEN(to_int64, zorch_to_dtype(x[0], ZORCH_I64), 0, 0)))                                     \
  OP(to_device, zorch_tensor *, (zorch_tensor *t, zorch_device dev), (t, dev), LUA_NONE, (),        \
     (GOLDEN(to_device, zorch_to_device(x[0], CPU), 0, 0)))                                         \
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
      DEVICE("zorch.fused_rms_norm(a, nil, 1e-6)", (2, 3, 1000), (1), 1e-5)))                       \
  /* ---- nn: normalisation, losses, embedding, attention, dropout ---- */                          \
  /* Normalises over the last `nnorm` dims; weight and bias (their shape) may be NULL.              \
     layer_norm: y, mean, rstd over rows of cols; w, b (cols) may be NULL.                          \
     layer_norm_bwd: gx; gw, gb (cols) may be NULL (then not computed). */                          \
  OP(layer_norm, zorch_tensor *,                                                                    \
     (zorch_tensor *x, int nnorm, zorch_tensor *weight, zorch_tensor *bias, double eps),            \
     (x, nnorm, weight, bias, eps),                                                                 \
     LUA_FUNCTION((LT(1), LREAD(read_norm_dims, 2), LTN(3), LTN(4), LNUM(5, 1e-5))),                \
     (KERNEL(layer_norm, (zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,                  \
                          const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b,      \
                          int64_t rows, int64_t cols, double eps))                                  \
      KERNEL(layer_norm_bwd, (zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,                 \
                              const zorch_tensor *g, const zorch_tensor *x,                         \
                              const zorch_tensor *mean, const zorch_tensor *rstd,                   \
                              const zorch_tensor *w, int64_t rows, int64_t cols))),                 \
     (GOLDEN(layer_norm, zorch_layer_norm(x[0], 1, x[1], x[2], 1e-5), 2e-5, 1e-6)                   \
      GRAD(layer_norm, zorch_layer_norm(in[0], 1, in[1], in[2], 1e-5), (LEAF(3, 5), LEAF(5), LEAF(5))) \
      GRAD(layer_norm2, zorch_layer_norm(in[0], 2, NULL, NULL, 1e-5), (LEAF(2, 3, 4)))              \
      BAD("zorch.layer_norm(zorch.ones(2, 3), (1 << 32) + 1)", "too many dims")                     \
      DEVICE("zorch.layer_norm(a, 1)", (67, 129), (1), 1e-5)                                        \
      DEVICE("zorch.layer_norm(a, 1, b, b * 0.5)", (67, 129), (129), 1e-5)))                        \
  /* Batch normalisation of x (N, C), (N, C, L) or (N, C, H, W) over all dims but                   \
     C, as torch.nn.functional.batch_norm. training: the batch's statistics, and                    \
     running_mean/running_var (C, may be NULL) updated in place with `momentum`                     \
     (unbiased variance); otherwise the running stats. weight, bias may be NULL.                    \
     batch_norm: of x (n, c, inner): y, and mean, rstd (c) get the statistics                       \
     used: the batch's (biased variance) when `training`, else rm and rv's. In                      \
     training, rm and rv (c, may be NULL) are updated in place with the                             \
     unbiased variance: r = (1 - momentum) r + momentum stat. w, b (c) may be                       \
     NULL; every tensor contiguous, in x's dtype; n * inner > 1 in training.                        \
     batch_norm_bwd: gx (may be NULL), gw, gb (c, may be NULL) from g and the                       \
     forward's x, mean, rstd and w (may be NULL); `training` as in the forward. */                  \
  OP(batch_norm, zorch_tensor *,                                                                    \
     (zorch_tensor *x, zorch_tensor *running_mean, zorch_tensor *running_var, zorch_tensor *weight, \
      zorch_tensor *bias, bool training, double momentum, double eps),                              \
     (x, running_mean, running_var, weight, bias, training, momentum, eps),                         \
     LUA_FUNCTION((LT(1), LTN(2), LTN(3), LTN(4), LTN(5), LBOOL(6), LNUM(7, 0.1), LNUM(8, 1e-5))),  \
     (KERNEL(batch_norm, (zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd,                  \
                          const zorch_tensor *x, const zorch_tensor *w, const zorch_tensor *b,      \
                          zorch_tensor *rm, zorch_tensor *rv, int64_t n, int64_t c,                 \
                          int64_t inner, bool training, double momentum, double eps))               \
      KERNEL(batch_norm_bwd, (zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb,                 \
                              const zorch_tensor *g, const zorch_tensor *x,                         \
                              const zorch_tensor *mean, const zorch_tensor *rstd,                   \
                              const zorch_tensor *w, int64_t n, int64_t c, int64_t inner,           \
                              bool training))),                                                     \
     (GOLDEN(batch_norm_train, batch_norm_case(x, true, false), 2e-5, 1e-6)                         \
      GOLDEN(batch_norm_train_2d, batch_norm_case(x, true, false), 2e-5, 1e-6)                      \
      GOLDEN(batch_norm_eval, batch_norm_case(x, false, false), 2e-5, 1e-6)                         \
      GOLDEN(batch_norm_eval_4d, batch_norm_case(x, false, false), 2e-5, 1e-6)                      \
      GOLDEN(batch_norm_running, batch_norm_case(x, true, true), 2e-5, 1e-6)                        \
      /* training (batch statistics, no running stats; with them, the output is                     \
         the same), and eval with fixed running stats in[2], in[3] */                               \
      GRAD(batch_norm_train, zorch_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5),    \
           (LEAF(4, 3), LEAF(3), LEAF(3)))                                                          \
      GRAD(batch_norm_train_3d, zorch_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5), \
           (LEAF(2, 3, 4), LEAF(3), LEAF(3)))                                                       \
      GRAD(batch_norm_train_noaffine, zorch_batch_norm(in[0], NULL, NULL, NULL, NULL, true, 0.1, 1e-5), \
           (LEAF(2, 2, 3, 2)))                                                                      \
      GRAD(batch_norm_eval, zorch_batch_norm(in[0], in[2], in[3], in[1], NULL, false, 0.1, 1e-5),   \
           (LEAF(2, 3, 2), LEAF(3), NOGRAD(LEAF(3)), NOGRAD(LEAF_POS(3))))                          \
      BAD("zorch.batch_norm(zorch.ones(3), zorch.zeros(3), zorch.ones(3))",                         \
          "batch_norm: input must be (N, C), (N, C, L) or (N, C, H, W), got (3,)")                  \
      BAD("zorch.batch_norm(zorch.randn(4, 3), zorch.zeros(4), zorch.ones(3), nil, nil, true)",     \
          "batch_norm: running_mean (4,) must have one element per channel of the input (4, 3)")    \
      BAD("zorch.batch_norm(zorch.randn(4, 3), zorch.zeros(3), zorch.ones(3), zorch.ones(2))",      \
          "batch_norm: weight (2,)")                                                                \
      BAD("zorch.batch_norm(zorch.randn(4, 3), nil, nil, nil, nil, false)",                         \
          "batch_norm: eval mode needs running_mean")                                               \
      BAD("zorch.batch_norm(zorch.ones(1, 3), nil, nil, nil, nil, true)",                           \
          "batch_norm: expected more than 1 value per channel when training, got input (1, 3)")     \
      BAD("zorch.batch_norm(zorch.tensor{{1, 2}, {3, 4}}, nil, nil, nil, nil, true)",               \
          "batch_norm: needs a floating-point input, got int64")                                    \
      BAD("zorch.batch_norm(zorch.randn(4, 3), zorch.zeros(3):requires_grad_(true), zorch.ones(3), nil, nil, true)", \
          "batch_norm: running_mean is updated in place and must not require grad")                 \
      BAD("zorch.batch_norm(zorch.randn(4, 3), zorch.zeros(3), zorch.ones(3), nil, nil, true, 2)",  \
          "batch_norm: momentum must be in [0, 1], got 2")                                          \
      BAD("zorch.batch_norm(zorch.randn(4, 3), zorch.zeros(3), zorch.ones(3), nil, nil, true, 0.1, -1)", \
          "batch_norm: eps must be a positive number, got -1")))                                    \
  /* logits (N, C) or (C); target int64 (N) or () of class indices in [0, C);                       \
     entries equal to ignore_index add nothing. */                                                  \
  OP(cross_entropy, zorch_tensor *,                                                                 \
     (zorch_tensor *logits, zorch_tensor *target, zorch_reduction r, int64_t ignore_index),         \
     (logits, target, r, ignore_index), LUA_NONE /* the options table {reduction, ignore_index} */, (), \
     (GOLDEN(cross_entropy, zorch_cross_entropy(x[0], x[1], ZORCH_REDUCE_MEAN, 1), 2e-5, 1e-6)      \
      GRAD(cross_entropy, zorch_cross_entropy(in[0], in[1], ZORCH_REDUCE_MEAN, 1),                  \
           (LEAF(4, 5), INDEX((4), (0, 1, 4, 2))))                                                  \
      GRAD(cross_entropy_none, zorch_cross_entropy(in[0], in[1], ZORCH_REDUCE_NONE, -100),          \
           (LEAF(3, 4), INDEX((3), (3, 0, 1))))                                                     \
      GRAD(cross_entropy_1d, zorch_cross_entropy(in[0], in[1], ZORCH_REDUCE_MEAN, 1),               \
           (LEAF(5), INDEX((), (2))))                                                               \
      BAD("zorch.cross_entropy(zorch.randn(2, 3), zorch.tensor{1, 2}, "                             \
          "{ignore_index = -9223372036854775807 - 1})", "ignore_index out of range")                \
      BAD("zorch.cross_entropy(zorch.ones(2, 3), zorch.tensor{1, 9})",                              \
          "cross_entropy: target 9 at position 2 is out of range 1..3")                             \
      BAD("zorch.cross_entropy(zorch.ones(2, 3), zorch.ones(2))", "int64 indices expected, got float32") \
      DEVICE("zorch.cross_entropy(a:narrow(1, 1, 4), zorch.tensor{1, 5, 3, 2}:to(a:device()))",     \
             (67, 129), (1), 1e-5)                                                                  \
      DEVICE("zorch.cross_entropy(a:narrow(1, 1, 4), zorch.tensor{1, 0, 3, 0}:to(a:device()), "     \
             "{ignore_index = 0})", (67, 129), (1), 1e-5)))                                         \
  /* The same on log-probabilities logp (N, C) or (C): -logp[target], reduced.                      \
     nll: loss (n) = -logp[i, t[i]] (0 where t[i] == ignore); logp (n, c).                          \
     nll_bwd: gin (n, c), zero-filled: gin[i, t[i]] = -g[i]. */                                     \
  OP(nll_loss, zorch_tensor *,                                                                      \
     (zorch_tensor *logp, zorch_tensor *target, zorch_reduction r, int64_t ignore_index),           \
     (logp, target, r, ignore_index), LUA_NONE /* as cross_entropy */,                              \
     (KERNEL(nll, (zorch_tensor *loss, const zorch_tensor *logp, const zorch_tensor *t,             \
                   int64_t n, int64_t c, int64_t ignore))                                           \
      KERNEL(nll_bwd, (zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *t,             \
                       int64_t n, int64_t c, int64_t ignore))),                                     \
     (GOLDEN(nll_loss, zorch_nll_loss(x[0], x[1], ZORCH_REDUCE_MEAN, 1), 2e-5, 1e-6)                \
      GOLDEN(nll_loss_sum, zorch_nll_loss(x[0], x[1], ZORCH_REDUCE_SUM, -100), 2e-5, 1e-6)          \
      GRAD(nll_loss, zorch_nll_loss(in[0], in[1], ZORCH_REDUCE_MEAN, 1),                            \
           (LEAF(4, 5), INDEX((4), (0, 1, 4, 2))))                                                  \
      GRAD(nll_loss_sum, zorch_nll_loss(in[0], in[1], ZORCH_REDUCE_SUM, -100),                      \
           (LEAF(3, 4), INDEX((3), (3, 0, 1))))                                                     \
      BAD("zorch.nll_loss(zorch.ones(2, 3), zorch.tensor{1, 4})",                                   \
          "nll_loss: target 4 at position 2 is out of range 1..3")                                  \
      BAD("zorch.nll_loss(zorch.ones(2, 3), zorch.tensor{1})", "nll_loss: input (2, 3) and target (1,)"))) \
  OP(mse_loss, zorch_tensor *, (zorch_tensor *input, zorch_tensor *target, zorch_reduction r),      \
     (input, target, r), LUA_FUNCTION((LT(1), LT(2), LREAD(read_reduction, 3))), (),                 \
     (GOLDEN(mse_loss, zorch_mse_loss(x[0], x[1], ZORCH_REDUCE_MEAN), 2e-5, 1e-6)                   \
      GRAD(mse, zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_MEAN), (LEAF(4, 3), LEAF(4, 3)))          \
      GRAD(mse_sum, zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_SUM), (LEAF(4, 3), LEAF(4, 3)))       \
      GRAD(mse_none, zorch_mse_loss(in[0], in[1], ZORCH_REDUCE_NONE), (LEAF(4, 3), LEAF(4, 3)))     \
      DEVICE("zorch.mse_loss(a, a * 0.5)", (67, 129), (1), 1e-6)))                                  \
  /* weight (V, D), idx int64 of any shape -> (*idx.shape, D). */                                   \
  OP(embedding, zorch_tensor *, (zorch_tensor *weight, zorch_tensor *idx), (weight, idx),           \
     LUA_FUNCTION((LT(1), LIDX(2))), (),                                                            \
     (GOLDEN(embedding, zorch_embedding(x[0], x[1]), 2e-5, 1e-6)                                    \
      GRAD(embedding, zorch_embedding(in[0], in[1]), (LEAF(5, 3), INDEX((2, 3), (0, 4, 4, 1, 0, 2)))) \
      DEVICE("zorch.embedding(a, zorch.tensor{1, 5, 3, 2}:to(a:device()))", (67, 129), (1), 0)))    \
  /* Scaled dot-product attention, softmax(scale q k^T + mask) v, fused: q (B, H, Tq, D),           \
     k and v (B, Hkv, Tk, D) with Hkv dividing H (grouped-query attention: query                    \
     head h reads key/value head h / (H / Hkv), not repeated in memory), or 3-d                     \
     (BH, T, D) and (BHkv, T, D); one float dtype -> (B, H, Tq, D). opts (NULL: none,               \
     include/zorch.h): causal, scale, a sliding window, a bool or additive mask                     \
     broadcast to (B, H, Tq, Tk), and int64 segment ids (B, Tk) (queries: the last                  \
     Tq, or q_segments (B, Tq)); a query sees a key only when every rule given                      \
     allows it, a query that sees no key gets zeros. Memory beyond the output is                    \
     O(B H Tq): no (Tq, Tk) mask is made. Differentiable in q, k and v.                             \
     attention: out (bh, tq, d) = softmax(scale q k^T + mask) v and lse (bh, tq)                    \
     the log-sum-exp of each row's scores over the keys it sees, from q (bh, tq,                    \
     d), k and v (bh / group, tk, d), as g (ops/backend/backend.h) says; all                        \
     contiguous, float32 or float64; a row that sees no key gets 0 and lse -inf.                    \
     attention_bwd: dq, dk, dv (q's, k's, v's shapes; overwritten; dk and dv sum                    \
     over the group's query heads) from g = dL/dout (bh, tq, d) and the forward's                   \
     out and lse. Where the backend's attention_strided is set, both also take q,                   \
     k, v, out, g and the gradients as strided views whose last dim is contiguous. */               \
  OP(attention, zorch_tensor *,                                                                     \
     (zorch_tensor *q, zorch_tensor *k, zorch_tensor *v, const zorch_attention_opts *opts),         \
     (q, k, v, opts), LUA_NONE /* the options table {causal, scale, window, mask, segments, ...} */, \
     (KERNEL(attention, (zorch_tensor *out, zorch_tensor *lse, const zorch_tensor *q,               \
                         const zorch_tensor *k, const zorch_tensor *v, const att_geom *g))          \
      KERNEL(attention_bwd, (zorch_tensor *dq, zorch_tensor *dk, zorch_tensor *dv,                  \
                             const zorch_tensor *dout, const zorch_tensor *q,                       \
                             const zorch_tensor *k, const zorch_tensor *v,                          \
                             const zorch_tensor *out, const zorch_tensor *lse,                      \
                             const att_geom *g))),                                                  \
     (GOLDEN(attention, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .scale = p[1]), 2e-5, 1e-6)         \
      GOLDEN(attention_causal, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .scale = p[1]), 2e-5, 1e-6)  \
      GOLDEN(attention_causal_kv, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .scale = p[1]), 2e-5, 1e-6) \
      GOLDEN(attention_long, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .scale = p[1]), 2e-5, 1e-6)    \
      GOLDEN(attention_gqa, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .scale = p[1]), 2e-5, 1e-6)     \
      GOLDEN(attention_bool_mask, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .mask = x[3]), 2e-5, 1e-6) \
      GOLDEN(attention_add_mask, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .mask = x[3]), 2e-5, 1e-6) \
      GOLDEN(attention_segments, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .segments = x[3]), 2e-5, 1e-6) \
      GOLDEN(attention_q_segments,                                                                  \
             ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .segments = x[3], .q_segments = x[4]), 2e-5, 1e-6) \
      GOLDEN(attention_window, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .window = (int64_t)p[1]), 2e-5, 1e-6) \
      GOLDEN(attention_window_kv, ZORCH_ATT_CASE_(x, .causal = p[0] != 0, .window = (int64_t)p[1]), 2e-5, 1e-6) \
      /* causal and not, Tq != Tk (both ways), odd head dims, (BH, T, D) inputs,                    \
         and 70 keys and queries, which the 64-wide blocks do not divide; then                      \
         each rule: grouped heads, masks, segments, the window */                                   \
      GRAD(attention, ZORCH_ATT_CASE_(in, 0), (LEAF(2, 2, 4, 3), LEAF(2, 2, 6, 3), LEAF(2, 2, 6, 3))) \
      GRAD(attention_causal, ZORCH_ATT_CASE_(in, .causal = true),                                   \
           (LEAF(1, 2, 5, 5), LEAF(1, 2, 5, 5), LEAF(1, 2, 5, 5)))                                  \
      GRAD(attention_causal_3d, ZORCH_ATT_CASE_(in, .causal = true),                                \
           (LEAF(3, 3, 7), LEAF(3, 8, 7), LEAF(3, 8, 7)))                                           \
      GRAD(attention_causal_kv, ZORCH_ATT_CASE_(in, .causal = true),                                \
           (LEAF(1, 1, 1, 4), LEAF(1, 1, 6, 4), LEAF(1, 1, 6, 4)))                                  \
      GRAD(attention_scaled, ZORCH_ATT_CASE_(in, .causal = true, .scale = 0.7),                     \
           (LEAF(2, 5, 2), LEAF(2, 5, 2), LEAF(2, 5, 2)))                                           \
      GRAD(attention_causal_70, ZORCH_ATT_CASE_(in, .causal = true),                                \
           (LEAF(1, 70, 3), LEAF(1, 70, 3), LEAF(1, 70, 3)))                                        \
      GRAD(attention_67_130, ZORCH_ATT_CASE_(in, 0),                                                \
           (LEAF(1, 1, 67, 3), LEAF(1, 1, 130, 3), LEAF(1, 1, 130, 3)))                             \
      GRAD(attention_gqa, ZORCH_ATT_CASE_(in, .causal = true),                                      \
           (LEAF(2, 4, 5, 3), LEAF(2, 2, 5, 3), LEAF(2, 2, 5, 3)))                                  \
      GRAD(attention_gqa_3d_kv, ZORCH_ATT_CASE_(in, 0), (LEAF(6, 3, 2), LEAF(2, 4, 2), LEAF(2, 4, 2))) \
      GRAD(attention_bool_mask, ZORCH_ATT_CASE_(in, .mask = in[3]),                                 \
           (LEAF(2, 2, 4, 3), LEAF(2, 2, 6, 3), LEAF(2, 2, 6, 3), MASK(2, 1, 1, 6)))                \
      GRAD(attention_bool_mask_causal, ZORCH_ATT_CASE_(in, .causal = true, .mask = in[3]),          \
           (LEAF(1, 2, 5, 3), LEAF(1, 2, 5, 3), LEAF(1, 2, 5, 3), MASK(5, 5)))                      \
      GRAD(attention_add_mask, ZORCH_ATT_CASE_(in, .causal = true, .mask = in[3]),                  \
           (LEAF(2, 2, 4, 3), LEAF(2, 1, 6, 3), LEAF(2, 1, 6, 3), NOGRAD(LEAF(2, 1, 4, 6))))        \
      GRAD(attention_segments, ZORCH_ATT_CASE_(in, .causal = true, .segments = in[3]),              \
           (LEAF(2, 2, 6, 3), LEAF(2, 1, 6, 3), LEAF(2, 1, 6, 3),                                   \
            INDEX((2, 6), (0, 0, 1, 1, 1, 2, 0, 1, 1, 1, 1, 1))))                                   \
      GRAD(attention_segments_kv, ZORCH_ATT_CASE_(in, .causal = true, .segments = in[3]),           \
           (LEAF(1, 2, 3, 3), LEAF(1, 2, 7, 3), LEAF(1, 2, 7, 3), INDEX((1, 7), (0, 0, 1, 1, 2, 2, 2)))) \
      GRAD(attention_q_segments, ZORCH_ATT_CASE_(in, .segments = in[3], .q_segments = in[4]),       \
           (LEAF(2, 1, 4, 3), LEAF(2, 1, 5, 3), LEAF(2, 1, 5, 3),                                   \
            INDEX((2, 5), (0, 0, 1, 1, 1, 3, 3, 3, 4, 4)), INDEX((2, 4), (1, 0, 1, 2, 4, 3, 3, 4)))) \
      GRAD(attention_segments_70, ZORCH_ATT_CASE_(in, .causal = true, .segments = in[3]),           \
           (LEAF(1, 2, 70, 3), LEAF(1, 1, 70, 3), LEAF(1, 1, 70, 3),                                \
            INDEX((1, 70), (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,             \
                            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,             \
                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,             \
                            2, 2, 2, 2, 2, 2, 2, 2, 2, 2))))                                        \
      GRAD(attention_window, ZORCH_ATT_CASE_(in, .causal = true, .window = 3),                      \
           (LEAF(1, 2, 6, 3), LEAF(1, 1, 6, 3), LEAF(1, 1, 6, 3)))                                  \
      GRAD(attention_window_kv, ZORCH_ATT_CASE_(in, .causal = true, .window = 4),                   \
           (LEAF(1, 1, 3, 3), LEAF(1, 1, 9, 3), LEAF(1, 1, 9, 3)))                                  \
      GRAD(attention_window_70, ZORCH_ATT_CASE_(in, .causal = true, .window = 20),                  \
           (LEAF(1, 70, 3), LEAF(1, 70, 3), LEAF(1, 70, 3)))                                        \
      GRAD(attention_window_open, ZORCH_ATT_CASE_(in, .window = 2),                                 \
           (LEAF(1, 1, 5, 2), LEAF(1, 1, 5, 2), LEAF(1, 1, 5, 2)))                                  \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 7))", \
          "attention: q (2, 3, 4, 8), k (2, 3, 5, 8) and v (2, 3, 5, 7)")                           \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 6), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8))", \
          "attention: q (2, 3, 4, 6), k (2, 3, 5, 8)")                                              \
      BAD("zorch.attention(zorch.ones(1, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8))", \
          "attention: q (1, 3, 4, 8)")                                                              \
      BAD("zorch.attention(zorch.ones(2, 3), zorch.ones(2, 3), zorch.ones(2, 3))",                  \
          "attention: q (2, 3), k (2, 3) and v (2, 3) do not fit (expected q (B, H, Tq, D)")        \
      BAD("zorch.attention(zorch.ones(6, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8))",   \
          "attention: q (6, 4, 8)")                                                                 \
      BAD("zorch.attention(zorch.ones(2, 4, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8))", \
          "attention: q (2, 4, 4, 8), k (2, 3, 5, 8) and v (2, 3, 5, 8) do not fit")                \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8):double(), zorch.ones(2, 3, 5, 8))", \
          "attention: q, k and v must have one floating-point dtype, got float32, float64")         \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8):long(), zorch.ones(2, 3, 5, 8):long(), "          \
          "zorch.ones(2, 3, 5, 8):long())", "attention: q, k and v must have one floating-point dtype, got int64") \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), {causal = 1})", \
          "attention: option 'causal' must be a boolean")                                           \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), {scale = -1})", \
          "attention: option 'scale' must be a positive number")                                    \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), {window = 0})", \
          "attention: option 'window' must be a positive integer, got 0")                           \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), {casual = true})", \
          "attention: unknown option 'casual'")                                                     \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{mask = zorch.ones(2, 1, 4, 4):gt(0)})",                                                 \
          "attention: mask (2, 1, 4, 4) does not broadcast to (B, H, Tq, Tk) = (2, 3, 4, 5)")       \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{mask = zorch.ones(5):long()})", "attention: mask must be bool (true: attend) or floating point")   \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{segments = zorch.ones(2, 4):long()})",                                                  \
          "attention: segments (2, 4) must be (B, Tk) = (2, 5)")                                    \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{segments = zorch.ones(2, 5)})", "attention: segments must be int64, got float32")       \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{segments = zorch.ones(2, 5):long(), q_segments = zorch.ones(2, 5):long()})",            \
          "attention: q_segments (2, 5) must be (B, Tq) = (2, 4)")                                  \
      BAD("zorch.attention(zorch.ones(2, 3, 6, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{segments = zorch.ones(2, 5):long()})",                                                  \
          "attention: segments (2, 5) give no ids to the 6 queries (Tq > Tk): pass q_segments (B, Tq)") \
      BAD("zorch.attention(zorch.ones(2, 3, 4, 8), zorch.ones(2, 3, 5, 8), zorch.ones(2, 3, 5, 8), " \
          "{q_segments = zorch.ones(2, 4):long()})", "attention: q_segments needs segments")        \
      BAD("zorch.attention(zorch.ones(6, 4, 8), zorch.ones(6, 5, 8), zorch.ones(6, 5, 8), "         \
          "{segments = zorch.ones(6, 5):long()})", "attention: segments need 4-d q (B, H, Tq, D), got q (6, 4, 8)") \
      DEVICE("zorch.attention(a, b, b, {causal = true, window = 5})", (2, 4, 9, 8), (2, 2, 9, 8), 1e-4) \
      DEVICE("zorch.attention(a, b, b, {causal = true, segments = "                                 \
             "zorch.tensor{{1, 1, 1, 2, 2, 2, 2, 3, 3}, {1, 2, 2, 2, 2, 2, 3, 3, 3}}:to(a:device())})", \
             (2, 4, 9, 8), (2, 1, 9, 8), 1e-4)                                                      \
      DEVICE("zorch.attention(a, b, b, {mask = zorch.randn(2, 1, 1, 9):to(a:device()):gt(0)})",     \
             (2, 2, 5, 8), (2, 2, 9, 8), 1e-4)                                                      \
      DEVICE("zorch.attention(a, b, b, {causal = true, mask = zorch.randn(5, 9):to(a:device())})",  \
             (2, 2, 5, 8), (2, 2, 9, 8), 1e-4)))                                                    \
  /* With `training`, each element zeroed with probability p (0 <= p <= 1), the                     \
     others scaled by 1 / (1 - p); x itself otherwise. gen NULL: the default                         \
     generator. */                                                                                  \
  OP(dropout, zorch_tensor *, (zorch_tensor *x, double p, bool training, zorch_generator *gen),     \
     (x, p, training, gen),                                                                         \
     LUA_FUNCTION((LT(1), LNUM(2, 0.5), LREAD(read_training, 3), LCONST(NULL))), (),                 \
     (NO_GOLDEN("random: PyTorch's generator draws other masks")                                    \
      GRAD(dropout, dropout_seeded(in[0]), (LEAF(4, 5)))                                            \
      DEVICE("(function() zorch.manual_seed(4) return zorch.dropout(a, 0.3, true) end)()",          \
             (67, 129), (1), 1e-6)))                                                                \
  /* ---- nn: linear layers, convolution and pooling ---- */                                        \
  /* x (..., in) · w (out, in)ᵀ + b (out); b may be NULL. */                                        \
  OP(linear, zorch_tensor *, (zorch_tensor *x, zorch_tensor *w, zorch_tensor *b), (x, w, b),        \
     LUA_NONE /* zorch.linear(x, w, b, act) is linear_act, its activation named by a string */, (), \
     (GOLDEN(linear, zorch_linear(x[0], x[1], x[2]), 2e-5, 1e-6)                                    \
      GOLDEN(mlp, mlp_case(x), 2e-5, 1e-6)                                                          \
      GRAD(linear, zorch_linear(in[0], in[1], in[2]), (LEAF(5, 3), LEAF(4, 3), LEAF(4)))            \
      GRAD(linear_3d, zorch_linear(in[0], in[1], in[2]), (LEAF(2, 5, 3), LEAF(4, 3), LEAF(4)))      \
      GRAD(linear_nobias, zorch_linear(in[0], in[1], NULL), (LEAF(5, 3), LEAF(2, 3)))               \
      BAD("zorch.linear(zorch.ones(2, 3), zorch.ones(4, 5))", "linear: input (2, 3) and weight (4, 5)"))) \
  /* linear followed by an activation, fused into the GEMM where the device can                     \
     (cuBLASLt's bias and relu epilogues); GELU (erf form, or the tanh form) runs                   \
     right after the GEMM and is one autograd node with it. */                                      \
  OP(linear_act, zorch_tensor *, (zorch_tensor *x, zorch_tensor *w, zorch_tensor *b, zorch_activation act), \
     (x, w, b, act), LUA_NONE /* as linear */, (),                                                  \
     (GOLDEN(linear_relu, zorch_linear_act(x[0], x[1], x[2], ZORCH_ACT_RELU), 2e-5, 1e-6)           \
      GOLDEN(linear_gelu, zorch_linear_act(x[0], x[1], x[2], ZORCH_ACT_GELU), 2e-5, 1e-6)           \
      GOLDEN(linear_gelu_tanh, zorch_linear_act(x[0], x[1], NULL, ZORCH_ACT_GELU_TANH), 2e-5, 1e-6) \
      GRAD(linear_relu, zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_RELU),                      \
           (LEAF(6, 3), LEAF(4, 3), LEAF(4)))                                                       \
      GRAD(linear_relu_3d, zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_RELU),                   \
           (LEAF(2, 5, 3), LEAF(4, 3), LEAF(4)))                                                    \
      GRAD(linear_gelu, zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_GELU),                      \
           (LEAF(2, 5, 3), LEAF(4, 3), LEAF(4)))                                                    \
      GRAD(linear_gelu_tanh, zorch_linear_act(in[0], in[1], in[2], ZORCH_ACT_GELU_TANH),            \
           (LEAF(6, 3), LEAF(4, 3), LEAF(4)))                                                       \
      GRAD(linear_relu_nobias, zorch_linear_act(in[0], in[1], NULL, ZORCH_ACT_RELU),                \
           (LEAF(5, 3), LEAF(2, 3)))))                                                              \
  /* ---- quantised weights (docs/quantization.md; layouts in ops/backend/quant.h) ---- */       \
  /* w (out, in) float -> q and scales. bits 8: q int8 (out, in), scales float16 (out),             \
     w ~ q * scale per output row (group must be 0). bits 4: q uint8 (out, in / 2), two inputs a     \
     byte, scales float16 (out, in / group), group a multiple of 32 dividing in. quantize: q and     \
     scales (contiguous, on the CPU) from w (float32, contiguous); the op layer goes through the     \
     CPU on other devices. Lua: zorch.quantize(w, {bits, group}) (an options table, two results). */ \
  OP(quantize, zorch_status,                                                                        \
     (zorch_tensor *w, int bits, int64_t group, zorch_tensor **q, zorch_tensor **scales),           \
     (w, bits, group, q, scales), LUA_NONE /* options table, two results */,                        \
     (KERNEL_OPT(quantize, (zorch_tensor *q, zorch_tensor *scales, const zorch_tensor *w, int64_t group))), \
     (GOLDEN(quantize_int8, quant_case(x[0], 8, 0, false), 0, 0)                                    \
      GOLDEN(quantize_int4, quant_case(x[0], 4, 32, false), 0, 0)                                   \
      BAD("zorch.quantize(zorch.ones(4, 48), {bits = 4, group = 32})",                              \
          "quantize: in_features 48 is not a multiple of the group 32")                             \
      BAD("zorch.quantize(zorch.ones(4, 64), {bits = 3})", "quantize: bits must be 8 or 4, got 3"))) \
  /* The float32 weight (out, in) of a quantised one (the format told by q's dtype).                \
     dequantize: w (out, in) float32 from q and scales (contiguous); group 0: int8. */             \
  OP(dequantize, zorch_tensor *, (zorch_tensor *q, zorch_tensor *scales), (q, scales),              \
     LUA_FUNCTION((LT(1), LT(2))),                                                                  \
     (KERNEL(dequantize, (zorch_tensor *w, const zorch_tensor *q, const zorch_tensor *scales, int64_t group))), \
     (GOLDEN(dequantize_int8, quant_case(x[0], 8, 0, true), 0, 0)                                   \
      GOLDEN(dequantize_int4_g128, quant_case(x[0], 4, 128, true), 0, 0)                            \
      BAD("zorch.dequantize(zorch.ones(4, 8):char(), zorch.ones(4))",                               \
          "dequantize: scales must be float16, got float32")                                        \
      DEVICE("(function() local q, s = zorch.quantize(b:detach(), {bits = 4, group = 32}) return zorch.dequantize(q, s) end)()", \
             (1), (33, 96), 0)))                                                                    \
  /* y (..., out) = x (..., in) · dequantize(q, scales)ᵀ + b: the weights read once and widened in \
     registers. x float (computed in float32, y in x's dtype); b (out) float32 or NULL. No          \
     gradient: inference only (a backward through it is an error). qlinear: y (rows, out) float32    \
     from x (rows, in) float32, q, scales, b (contiguous); group 0: int8. */                        \
  OP(qlinear, zorch_tensor *, (zorch_tensor *x, zorch_tensor *q, zorch_tensor *scales, zorch_tensor *b), \
     (x, q, scales, b), LUA_FUNCTION((LT(1), LT(2), LT(3), LTN(4))),                                \
     (KERNEL(qlinear, (zorch_tensor *y, const zorch_tensor *x, const zorch_tensor *q,              \
                       const zorch_tensor *scales, const zorch_tensor *b, int64_t rows, int64_t group))), \
     (GOLDEN(qlinear_int8, qlinear_case(x[0], x[1], x[2], 8, 0), 1e-5, 1e-5)                        \
      GOLDEN(qlinear_int8_rows, qlinear_case(x[0], x[1], x[2], 8, 0), 1e-5, 1e-5)                   \
      GOLDEN(qlinear_int4_g32, qlinear_case(x[0], x[1], x[2], 4, 32), 1e-5, 1e-5)                   \
      GOLDEN(qlinear_int4_g128_rows, qlinear_case(x[0], x[1], NULL, 4, 128), 1e-5, 1e-5)            \
      BAD("zorch.qlinear(zorch.ones(2, 5), zorch.ones(4, 3):char(), zorch.ones(4):half())",         \
          "qlinear: input (2, 5) does not fit the quantised weight's 3 inputs")                     \
      BAD("zorch.qlinear(zorch.ones(2, 64), zorch.ones(4, 32, {dtype = 'uint8'}), zorch.ones(4, 3):half())", \
          "qlinear: scales (4, 3) do not divide the 64 inputs into groups of a multiple of 32")     \
      DEVICE("(function() local q, s = zorch.quantize(b:detach(), {bits = 8}) return zorch.qlinear(a:detach(), q, s) end)()", \
             (3, 70), (33, 70), 1e-5)                                                               \
      DEVICE("(function() local q, s = zorch.quantize(b:detach(), {bits = 4, group = 32}) return zorch.qlinear(a:detach(), q, s) end)()", \
             (9, 64), (7, 64), 1e-5)))                                                              \
  /* w (out, C / groups, kh, kw), b (out) or NULL -> (N, out, OH, OW); o may be NULL.               \
     Float32 and float64, contiguous. im2col: col (c * kh * kw, nb * oh * ow),                      \
     row (ci, ki, kj), column (image, oy, ox), = x (n, c, h, w) of images n0 ..                     \
     n0 + nb - 1 at each window position (0 in the padding). col2im: the adjoint,                   \
     images n0 .. n0 + nb - 1 of gx (overwritten) = the sum of col's entries that                   \
     read each pixel. conv2d: the whole convolution with one group, out (n, o,                      \
     oh, ow) = x * w + b (b may be NULL); conv2d_bwd writes gx and gw (either may                   \
     be NULL: not wanted) from gout. The op layer takes them only where the                         \
     backend's conv2d_takes (NULL: always) says so; otherwise it runs im2col and                    \
     the GEMM (CUDA: cuDNN absent, or sizes beyond its int descriptors). */                         \
  OP(conv2d, zorch_tensor *, (zorch_tensor *x, zorch_tensor *w, zorch_tensor *b, const zorch_conv2d_opts *o), \
     (x, w, b, o), LUA_NONE /* the options table {stride, padding, dilation, groups} */,            \
     (KERNEL(im2col, (zorch_tensor *col, const zorch_tensor *x, const conv_geom *g, int64_t n0,     \
                      int64_t nb))                                                                  \
      KERNEL(col2im, (zorch_tensor *gx, const zorch_tensor *col, const conv_geom *g, int64_t n0,    \
                      int64_t nb))                                                                  \
      KERNEL(conv2d, (zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *w,              \
                      const zorch_tensor *b, const conv_geom *g))                                   \
      KERNEL(conv2d_bwd, (zorch_tensor *gx, zorch_tensor *gw, const zorch_tensor *gout,             \
                          const zorch_tensor *x, const zorch_tensor *w, const conv_geom *g))),      \
     (GOLDEN(conv2d, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){0}), 2e-5, 1e-6)           \
      GOLDEN(conv2d_stride_pad, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){{2, 1}, {1, 2}, {1, 1}, 1}), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(conv2d_dilation, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){{1, 1}, {1, 1}, {2, 1}, 1}), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(conv2d_groups, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){{2, 2}, {1, 1}, {1, 1}, 2}), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(conv2d_3d, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){0}), 2e-5, 1e-6)        \
      GOLDEN(conv2d_batch, zorch_conv2d(x[0], x[1], x[2], &(zorch_conv2d_opts){{1, 1}, {1, 1}, {1, 1}, 1}), \
             2e-5, 1e-6)                                                                            \
      /* stride, padding, dilation, groups; 10 images are 2 blocks */                               \
      GRAD(conv2d, zorch_conv2d(in[0], in[1], in[2], NULL),                                         \
           (LEAF(2, 3, 5, 4), LEAF(2, 3, 3, 2), LEAF(2)))                                           \
      GRAD(conv2d_3d, zorch_conv2d(in[0], in[1], in[2], NULL), (LEAF(2, 4, 4), LEAF(3, 2, 2, 2), LEAF(3))) \
      GRAD(conv2d_blocks, zorch_conv2d(in[0], in[1], in[2], NULL),                                  \
           (LEAF(10, 2, 4, 3), LEAF(3, 2, 2, 2), LEAF(3)))                                          \
      GRAD(conv2d_stride_pad, zorch_conv2d(in[0], in[1], in[2], &(zorch_conv2d_opts){{2, 1}, {1, 2}, {1, 1}, 1}), \
           (LEAF(2, 2, 5, 4), LEAF(3, 2, 3, 3), LEAF(3)))                                           \
      GRAD(conv2d_dil_groups, zorch_conv2d(in[0], in[1], NULL, &(zorch_conv2d_opts){{1, 2}, {2, 1}, {2, 1}, 2}), \
           (LEAF(1, 4, 6, 5), LEAF(4, 2, 2, 3)))                                                    \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(32, 3, 3, 3))",                        \
          "conv2d: weight (32, 3, 3, 3) expects 3 input channels per group, input (8, 1, 28, 28) has 1") \
      BAD("zorch.conv2d(zorch.ones(2, 3, 5, 5), zorch.ones(4, 1, 3, 3), nil, {groups = 2})",        \
          "conv2d: groups 2 does not divide the 3 channels of input (2, 3, 5, 5)")                  \
      BAD("zorch.conv2d(zorch.ones(1, 1, 2, 2), zorch.ones(1, 1, 5, 5))",                           \
          "conv2d: the output would be empty: input (1, 1, 2, 2)")                                  \
      BAD("zorch.conv2d(zorch.ones(1, 1, 4, 4):long(), zorch.ones(1, 1, 3, 3))",                    \
          "conv2d: needs a floating-point input, got int64")                                        \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(2, 1, 3, 3):double())",                \
          "conv2d: input (float32), weight (float64) must have one dtype")                          \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(2, 3, 3))", "conv2d: weight (2, 3, 3)") \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(2, 1, 3, 3), zorch.ones(5))", "conv2d: bias (5,)") \
      BAD("zorch.conv2d(zorch.ones(1, 1, 1, 4, 4), zorch.ones(2, 1, 3, 3))", "conv2d: input (1, 1, 1, 4, 4)") \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(2, 1, 3, 3), nil, {padding = 1 << 40})", \
          "conv2d: padding")                                                                        \
      BAD("zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(2, 1, 3, 3), nil, {groups = 0})",      \
          "conv2d: groups must be a positive integer")))                                            \
  /* indices (may be NULL) gets each maximum's position iy * W + ix in its plane (int64).           \
     pool2d: out (n, oh, ow) = the pool of each window of x (n, h, w); for                          \
     POOL_MAX, idx (int64, same shape) gets the argmax as iy * w + ix within its                    \
     plane (NaN wins; the first maximum otherwise). pool2d_bwd: gx (n, h, w),                       \
     overwritten, = the adjoint of pool2d applied to gout (n, oh, ow); idx is                       \
     pool2d's for POOL_MAX (NULL otherwise). */                                                     \
  OP(max_pool2d, zorch_tensor *, (zorch_tensor *x, const zorch_pool2d_opts *o, zorch_tensor **indices), \
     (x, o, indices), LUA_NONE /* kernel_size and the options table {stride, padding, ...} */,      \
     (KERNEL(pool2d, (pool_kind k, zorch_tensor *out, zorch_tensor *idx, const zorch_tensor *x,     \
                      const conv_geom *g))                                                          \
      KERNEL(pool2d_bwd, (pool_kind k, zorch_tensor *gx, const zorch_tensor *gout,                  \
                          const zorch_tensor *idx, const conv_geom *g))),                           \
     (GOLDEN(max_pool2d, zorch_max_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {2, 2}}, NULL), 2e-5, 1e-6) \
      GOLDEN(max_pool2d_pad,                                                                        \
             zorch_max_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, \
                              NULL), 2e-5, 1e-6)                                                    \
      GOLDEN(max_pool2d_ceil_dil,                                                                   \
             zorch_max_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0}, \
                                                         .dilation = {2, 1}, .ceil_mode = true}, NULL), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(max_pool2d_indices,                                                                    \
             pool_indices(x[0], &(zorch_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}), \
             2e-5, 1e-6)                                                                            \
      GRAD(max_pool2d, zorch_max_pool2d(in[0], &(zorch_pool2d_opts){.kernel = {2, 2}}, NULL), (LEAF(2, 2, 4, 5))) \
      GRAD(max_pool2d_pad_dil,                                                                      \
           zorch_max_pool2d(in[0], &(zorch_pool2d_opts){.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, \
                                                        .dilation = {2, 1}, .ceil_mode = true}, NULL), \
           (LEAF(1, 2, 7, 5)))                                                                      \
      BAD("zorch.max_pool2d(zorch.ones(8, 1, 28, 28), 30)",                                         \
          "max_pool2d: the output would be empty (0 x 0): input (8, 1, 28, 28) is smaller than the kernel (30, 30)") \
      BAD("zorch.max_pool2d(zorch.ones(8, 1, 28, 28), 2, {padding = 2})",                           \
          "max_pool2d: padding (2, 2) must be at most half the kernel")                             \
      BAD("zorch.max_pool2d(zorch.ones(4, 4), 2)", "max_pool2d: input (4, 4)")                      \
      BAD("zorch.max_pool2d(zorch.ones(8, 1, 28, 28), {2, 2, 2})",                                  \
          "max_pool2d: kernel_size must be an integer or a pair")))                                 \
  OP(avg_pool2d, zorch_tensor *, (zorch_tensor *x, const zorch_pool2d_opts *o), (x, o),             \
     LUA_NONE /* as max_pool2d */, (),                                                              \
     (GOLDEN(avg_pool2d, zorch_avg_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {2, 2}}), 2e-5, 1e-6) \
      GOLDEN(avg_pool2d_pad,                                                                        \
             zorch_avg_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(avg_pool2d_excl_ceil,                                                                  \
             zorch_avg_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, \
                                                         .ceil_mode = true, .exclude_pad = true}),  \
             2e-5, 1e-6)                                                                            \
      GOLDEN(avg_pool2d_ceil,                                                                       \
             zorch_avg_pool2d(x[0], &(zorch_pool2d_opts){.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, \
                                                         .ceil_mode = true}),                       \
             2e-5, 1e-6)                                                                            \
      GRAD(avg_pool2d,                                                                              \
           zorch_avg_pool2d(in[0], &(zorch_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}), \
           (LEAF(2, 2, 5, 6)))                                                                      \
      GRAD(avg_pool2d_excl_ceil,                                                                    \
           zorch_avg_pool2d(in[0], &(zorch_pool2d_opts){.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, \
                                                        .ceil_mode = true, .exclude_pad = true}),   \
           (LEAF(1, 2, 5, 6)))                                                                      \
      BAD("zorch.avg_pool2d(zorch.ones(8, 1, 28, 28), 2, {stride = 0})", "avg_pool2d: stride (0, 0) must be positive") \
      BAD("zorch.avg_pool2d(zorch.ones(1, 4, 4):long(), 2)", "avg_pool2d: needs a floating-point input, got int64"))) \
  /* Output (oh, ow): the window of output i spans floor(i * H / oh) .. ceil((i + 1) * H / oh). */  \
  OP(adaptive_avg_pool2d, zorch_tensor *, (zorch_tensor *x, int64_t oh, int64_t ow), (x, oh, ow),   \
     LUA_NONE /* output_size: a number or a pair, two C arguments */, (),                           \
     (GOLDEN(adaptive_avg_pool2d, zorch_adaptive_avg_pool2d(x[0], 3, 4), 2e-5, 1e-6)                \
      GOLDEN(adaptive_avg_pool2d_1, zorch_adaptive_avg_pool2d(x[0], 1, 1), 2e-5, 1e-6)              \
      GOLDEN(adaptive_avg_pool2d_up, zorch_adaptive_avg_pool2d(x[0], 5, 4), 2e-5, 1e-6)             \
      GRAD(adaptive_avg_pool2d, zorch_adaptive_avg_pool2d(in[0], 3, 2), (LEAF(2, 7, 5)))            \
      BAD("zorch.adaptive_avg_pool2d(zorch.ones(8, 1, 28, 28), {0, 2})",                            \
          "adaptive_avg_pool2d: output_size (0, 2) must be positive")                               \
      BAD("zorch.adaptive_avg_pool2d(zorch.ones(1, 0, 4), 2)", "adaptive_avg_pool2d: input (1, 0, 4) has an empty image"))) \
  /* Rotary position embedding as Llama applies it (Hugging Face's                                  \
     apply_rotary_pos_emb): x * cos + rotate_half(x) * sin, rotate_half(x) =                        \
     cat(-x2, x1) of the two halves of the last dim. x (batch, heads, seq,                          \
     head_dim), head_dim even; cos and sin of x's dtype and one shape, (seq,                        \
     head_dim) for one table every sequence shares or (batch, seq, head_dim) for                    \
     each sequence's own positions. Differentiable in x, cos and sin.                               \
     rope: out from x (batch, heads, seq, dim) and the tables ((batch when                          \
     per_batch, else 1), seq, dim), all contiguous, one float dtype.                                \
     rope_bwd: gx (may be NULL) = g * cos + the adjoint rotation of g * sin (the                    \
     forward with sin negated where sin's halves are equal, as in Llama's tables),                  \
     and gcos, gsin (the tables' shape, may be NULL: not wanted), the sums of g * x                 \
     and g * rotate_half(x) over heads (and batch for a shared table). */                           \
  OP(rope, zorch_tensor *, (zorch_tensor *x, zorch_tensor *cosines, zorch_tensor *sines),           \
     (x, cosines, sines), LUA_FUNCTION((LT(1), LT(2), LT(3))),                                      \
     (KERNEL(rope, (zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *cosines,          \
                    const zorch_tensor *sines, int64_t batch, int64_t heads, int64_t seq,           \
                    int64_t dim, bool per_batch))                                                   \
      KERNEL(rope_bwd, (zorch_tensor *gx, zorch_tensor *gcos, zorch_tensor *gsin,                   \
                        const zorch_tensor *g, const zorch_tensor *x, const zorch_tensor *cosines,  \
                        const zorch_tensor *sines, int64_t batch, int64_t heads, int64_t seq,       \
                        int64_t dim, bool per_batch))),                                             \
     (GOLDEN(rope, zorch_rope(x[0], x[1], x[2]), 2e-5, 1e-6)                                        \
      GOLDEN(rope_positions, zorch_rope(x[0], x[1], x[2]), 2e-5, 1e-6)                              \
      GRAD(rope, zorch_rope(in[0], in[1], in[2]), (LEAF(2, 3, 4, 6), LEAF(4, 6), LEAF(4, 6)))       \
      GRAD(rope_positions, zorch_rope(in[0], in[1], in[2]), (LEAF(2, 2, 3, 4), LEAF(2, 3, 4), LEAF(2, 3, 4))) \
      GRAD(rope_x, zorch_rope(in[0], in[1], in[2]), (LEAF(1, 2, 5, 8), NOGRAD(LEAF(5, 8)), NOGRAD(LEAF(5, 8)))) \
      BAD("zorch.rope(zorch.ones(1, 2, 3, 5), zorch.ones(3, 5), zorch.ones(3, 5))", "rope: head_dim 5 must be even") \
      BAD("zorch.rope(zorch.ones(1, 2, 3, 4), zorch.ones(4, 4), zorch.ones(4, 4))", "rope: cos (4, 4) must be")     \
      BAD("zorch.rope(zorch.ones(1, 2, 3, 4), zorch.ones(3, 4), zorch.ones(2, 3, 4))", "rope: sin (2, 3, 4) must be") \
      BAD("zorch.rope(zorch.ones(2, 2, 3, 4), zorch.ones(3, 3, 4), zorch.ones(3, 3, 4))", "rope: cos (3, 3, 4) must be") \
      BAD("zorch.rope(zorch.ones(1, 2, 3, 4, {dtype = 'int64'}), zorch.ones(3, 4), zorch.ones(3, 4))", "rope: x must be floating point") \
      BAD("zorch.rope(zorch.ones(1, 2, 3, 4), zorch.ones(3, 4, {dtype = 'int64'}), zorch.ones(3, 4))", "rope: cos is int64") \
      BAD("zorch.rope(zorch.ones(2, 3, 4), zorch.ones(3, 4), zorch.ones(3, 4))", "rope: x must be (batch, heads, seq, head_dim)") \
      DEVICE("zorch.rope(a, zorch.cos(b), zorch.sin(b))", (2, 3, 17, 8), (17, 8), 1e-5)               \
      DEVICE("zorch.rope(a, zorch.cos(b), zorch.sin(b))", (2, 4, 9, 64), (2, 9, 64), 1e-5)))          \
  /* Llama's MLP gate, silu(a) * b (down(silu(gate(x)) * up(x))), a and b of one                    \
     shape and float dtype, in one pass.                                                            \
     swiglu: out = silu(a) * b over n contiguous elements, one float dtype.                         \
     swiglu_bwd: ga = g * b * silu'(a), gb = g * silu(a) (either may be NULL: not wanted). */       \
  OP(swiglu, zorch_tensor *, (zorch_tensor *a, zorch_tensor *b), (a, b), LUA_FUNCTION((LT(1), LT(2))), \
     (KERNEL(swiglu, (zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, int64_t n))  \
      KERNEL(swiglu_bwd, (zorch_tensor *ga, zorch_tensor *gb, const zorch_tensor *g,                \
                          const zorch_tensor *a, const zorch_tensor *b, int64_t n))),               \
     (GOLDEN(swiglu, zorch_swiglu(x[0], x[1]), 2e-5, 1e-6)                                          \
      GRAD(swiglu, zorch_swiglu(in[0], in[1]), (LEAF(3, 5), LEAF(3, 5)))                            \
      GRAD(swiglu_3d, zorch_swiglu(in[0], in[1]), (LEAF(2, 3, 4), NOGRAD(LEAF(2, 3, 4))))           \
      BAD("zorch.swiglu(zorch.ones(2, 3), zorch.ones(3, 2))", "swiglu: a (2, 3) and b (3, 2) must have one shape") \
      BAD("zorch.swiglu(zorch.ones(2, 3, {dtype = 'int64'}), zorch.ones(2, 3, {dtype = 'int64'}))", "swiglu: a must be floating point") \
      BAD("zorch.swiglu(zorch.ones(2, 3), zorch.ones(2, 3, {dtype = 'float64'}))", "swiglu: b is float64")  \
      DEVICE("zorch.swiglu(a, b)", (4, 1000), (4, 1000), 1e-5)))                                    \
  /* ---- fused optimizer updates: one pass, in place, PyTorch's formulas; param,                   \
     grad and state tensors share a shape, dtype f32 or f64 and contiguity ---- */                  \
  /* adam: the update of p (and m, v, vmax when amsgrad) from g at `step`. */                       \
  OP(adam_step, zorch_status,                                                                       \
     (zorch_tensor *param, zorch_tensor *grad, zorch_tensor *m, zorch_tensor *v, zorch_tensor *max_v, \
      int64_t step, const zorch_adam_opts *o),                                                      \
     (param, grad, m, v, max_v, step, o), LUA_NONE /* zorch._adam_step, lua/lzorch.c */,            \
     (KERNEL(adam, (zorch_tensor *p, const zorch_tensor *g, zorch_tensor *m, zorch_tensor *v,       \
                    zorch_tensor *vmax, int64_t step, const zorch_adam_opts *o))),                  \
     (GOLDEN(adam, adam_case(x, (zorch_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}), \
             2e-5, 1e-6)                                                                            \
      GOLDEN(adam_wd, adam_case(x, (zorch_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, \
                                                     .weight_decay = 0.1}), 2e-5, 1e-6)             \
      GOLDEN(adam_amsgrad, adam_case(x, (zorch_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, \
                                                          .eps = 1e-8, .amsgrad = true}), 2e-5, 1e-6) \
      GOLDEN(adamw, adam_case(x, (zorch_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, \
                                                   .weight_decay = 0.1, .decoupled = true}), 2e-5, 1e-6))) \
  /* `buf` is the momentum buffer (NULL when momentum is 0); first_step copies the                  \
     gradient into it, as PyTorch does on its first step.                                           \
     sgd: the update of p (and buf, NULL when momentum is 0) from g. */                             \
  OP(sgd_step, zorch_status,                                                                        \
     (zorch_tensor *param, zorch_tensor *grad, zorch_tensor *buf, bool first_step, const zorch_sgd_opts *o), \
     (param, grad, buf, first_step, o), LUA_NONE /* zorch._sgd_step, lua/lzorch.c */,               \
     (KERNEL(sgd, (zorch_tensor *p, const zorch_tensor *g, zorch_tensor *buf, bool first,           \
                   const zorch_sgd_opts *o))),                                                      \
     (GOLDEN(sgd, sgd_case(x, (zorch_sgd_opts){.lr = 0.1}), 2e-5, 1e-6)                             \
      GOLDEN(sgd_momentum, sgd_case(x, (zorch_sgd_opts){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, \
                                                        .weight_decay = 0.01}), 2e-5, 1e-6)         \
      GOLDEN(sgd_nesterov, sgd_case(x, (zorch_sgd_opts){.lr = 0.1, .momentum = 0.9, .nesterov = true}), \
             2e-5, 1e-6)))                                                                          \
  /* ---- random constructors: counter based (Philox4x32-10); gen NULL draws from                   \
     the default generator ---- */                                                                  \
  /* Uniform [0, 1) and standard normal from a counter-based generator (NULL: the                   \
     default one). The same seed gives the same numbers on every device.                            \
     random: Philox numbers for elements [0, numel) from block `offset` on. */                      \
  OP(rand, zorch_tensor *,                                                                          \
     (int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev, zorch_generator *gen),      \
     (ndim, shape, dt, dev, gen), LUA_NONE /* sizes, then an options table */,                      \
     (KERNEL(random, (zorch_tensor *out, uint64_t seed, uint64_t offset, bool normal))),            \
     (NO_GOLDEN("random: PyTorch's generator draws other numbers")))                                \
  OP(randn, zorch_tensor *,                                                                         \
     (int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev, zorch_generator *gen),      \
     (ndim, shape, dt, dev, gen), LUA_NONE /* as rand */, (),                                       \
     (NO_GOLDEN("random: PyTorch's generator draws other numbers")))                                \
  /* Integers uniform in [low, high) (high > low), drawn as int64 and converted to                  \
     dt; and a random permutation of 0..n-1. Counter based like rand: the same seed                 \
     gives the same numbers on every device.                                                        \
     randint: int64 out: low + (64 random bits mod range) per element from block                    \
     `offset` on (zm_random_int of ops/backend/math.h). */                                          \
  OP(randint, zorch_tensor *,                                                                       \
     (int64_t low, int64_t high, int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev,  \
      zorch_generator *gen),                                                                        \
     (low, high, ndim, shape, dt, dev, gen), LUA_NONE /* 1-based bounds, a sizes table, options */, \
     (KERNEL(randint, (zorch_tensor *out, uint64_t seed, uint64_t offset, int64_t low,              \
                       uint64_t range))),                                                           \
     (NO_GOLDEN("random: PyTorch's generator draws other numbers")                                  \
      BAD("zorch.randint(5, 2, {3})", "randint: high (2) must be at least low (5)")                 \
      BAD("zorch.randint(1, 5, 3)", "table expected, got number")                                   \
      BAD("zorch.randint(0, 1000, {4}, {dtype = 'uint8'})", "randint: values from 0 to 1000 do not all fit uint8") \
      BAD("zorch.randint(0, 1, {3}, {dtype = 'bool'})", "randint: needs a numeric dtype, got bool"))) \
  OP(randperm, zorch_tensor *, (int64_t n, zorch_dtype dt, zorch_device dev, zorch_generator *gen), \
     (n, dt, dev, gen), LUA_NONE /* 1-based values, options */, (),                                 \
     (NO_GOLDEN("random: PyTorch's generator draws other numbers")                                  \
      BAD("zorch.randperm(-1)", "randperm: n must be >= 0, got -1")                                 \
      BAD("zorch.randperm(1000, {dtype = 'uint8'})", "randperm: values from 1 to 1000 do not all fit uint8"))) \
  /* n indices (int64) drawn from each row of probs, (N) or (B, N) non-negative                     \
     finite weights (normalised or not), as torch.multinomial: with replacement                     \
     each draw is independent; without, a category is drawn at most once (n <= the                  \
     row's positive weights). Result (n) or (B, n) on probs' device; gen NULL draws                 \
     from the default generator. */                                                                 \
  OP(multinomial, zorch_tensor *, (zorch_tensor *probs, int64_t n, bool replacement, zorch_generator *gen), \
     (probs, n, replacement, gen), LUA_NONE /* 1-based indices, the options table {replacement, generator} */, \
     (), (NO_GOLDEN("random: PyTorch's generator draws other numbers")                              \
      BAD("zorch.multinomial(zorch.tensor{1, 2}, 1)", "multinomial: probs must be floating point, got int64") \
      BAD("zorch.multinomial(zorch.ones(3), 0)", "multinomial: the number of samples must be at least 1"))) \
  /* ---- other constructors ---- */                                                                \
  /* Plain constructors, of dt on dev. empty's values are unset (host memory the                    \
     system hands out on first touch: nn.deferred's parameters).                                    \
     Lua: the hand bindings (sizes, then an options table; zorch.full an                            \
     integer fill exact past 2^53, zorch.arange integers by arange_i64). */                         \
  OP(empty, zorch_tensor *, (int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev),     \
     (ndim, shape, dt, dev), LUA_NONE, (),                                                          \
     (GOLDEN(empty_shape, shape_of(zorch_empty(SHAPE(2, 0, 3), ZORCH_F32, CPU)), 0, 0)))            \
  OP(zeros, zorch_tensor *, (int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev),     \
     (ndim, shape, dt, dev), LUA_NONE, (),                                                          \
     (GOLDEN(zeros, zorch_zeros(SHAPE(2, 3), ZORCH_F32, CPU), 0, 0)                                 \
      BAD("zorch.zeros(2, {dtype = 'float7'})", "unknown dtype 'float7'")                           \
      BAD("zorch.zeros(2, {dtyp = 'float32'})", "unknown option 'dtyp'")))                          \
  OP(ones, zorch_tensor *, (int ndim, const int64_t *shape, zorch_dtype dt, zorch_device dev),      \
     (ndim, shape, dt, dev), LUA_NONE, (),                                                          \
     (GOLDEN(ones, zorch_ones(SHAPE(3, 1, 2), ZORCH_F64, CPU), 0, 0)))                              \
  OP(full, zorch_tensor *,                                                                          \
     (int ndim, const int64_t *shape, double value, zorch_dtype dt, zorch_device dev),              \
     (ndim, shape, value, dt, dev), LUA_NONE, (),                                                   \
     (GOLDEN(full, zorch_full(SHAPE(2, 3), p[0], ZORCH_F32, CPU), 0, 0)                             \
      BAD("zorch.full({2}, 300, {dtype = 'uint8'})", "full: value 300 cannot be converted to uint8 without overflow"))) \
  /* [start, end) by step, like torch.arange. */                                                    \
  OP(arange, zorch_tensor *, (double start, double end, double step, zorch_dtype dt, zorch_device dev), \
     (start, end, step, dt, dev), LUA_NONE, (),                                                     \
     (GOLDEN(arange, zorch_arange(-1, 2, 0.25, ZORCH_F32, CPU), 0, 0)                               \
      BAD("zorch.arange(0, 1, 0.0)", "arange: start, end and step must be finite and step nonzero"))) \
  /* Integer twins of full and arange (as zorch_fill_i64_ is of zorch_fill_):                       \
     the value travels as an int64_t, so an int64 tensor gets all 64 bits (a                        \
     double holds integers exactly only up to 2^53). Other dtypes get the value                     \
     converted as from the double path. */                                                          \
  OP(full_i64, zorch_tensor *,                                                                      \
     (int ndim, const int64_t *shape, int64_t value, zorch_dtype dt, zorch_device dev),             \
     (ndim, shape, value, dt, dev), LUA_NONE, (),                                                   \
     (GOLDEN(full_i64, zorch_full_i64(SHAPE(4), -(INT64_C(1) << 40) - 3, ZORCH_I64, CPU), 0, 0)))   \
  OP(arange_i64, zorch_tensor *, (int64_t start, int64_t end, int64_t step, zorch_dtype dt, zorch_device dev), \
     (start, end, step, dt, dev), LUA_NONE, (),                                                     \
     (GOLDEN(arange_i64, zorch_arange_i64(10, -3, -4, ZORCH_I64, CPU), 0, 0)                        \
      BAD("zorch.arange(1, 5, 0)", "arange: step must be nonzero")))                                \
  /* n x m identity (m = -1: n). */                                                                 \
  OP(eye, zorch_tensor *, (int64_t n, int64_t m, zorch_dtype dt, zorch_device dev), (n, m, dt, dev), \
     LUA_NONE /* options table (lua/lshape.c) */, (),                                               \
     (GOLDEN(eye, zorch_eye(3, 4, ZORCH_F32, CPU), 0, 0)                                             \
      GOLDEN(eye_square, zorch_eye(3, -1, ZORCH_F32, CPU), 0, 0)))                                   \
  OP(linspace, zorch_tensor *, (double start, double end, int64_t steps, zorch_dtype dt, zorch_device dev), \
     (start, end, steps, dt, dev), LUA_NONE /* options table (lua/lshape.c) */, (),                 \
     (GOLDEN(linspace, zorch_linspace(-1, 2, 7, ZORCH_F32, CPU), 1e-6, 1e-7)))                      \
  OP(logspace, zorch_tensor *,                                                                      \
     (double start, double end, int64_t steps, double base, zorch_dtype dt, zorch_device dev),      \
     (start, end, steps, base, dt, dev), LUA_NONE /* options table (lua/lshape.c) */, (),           \
     (GOLDEN(logspace, zorch_logspace(-1, 2, 5, 2, ZORCH_F32, CPU), 1e-6, 1e-7)))

#endif
