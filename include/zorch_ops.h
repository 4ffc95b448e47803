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

#define ZORCH_OPS(OP)

#endif
