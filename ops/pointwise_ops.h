/* pointwise_ops.h: the registry of elementwise ops. Each op is declared once,
   below; the enums of ops/backend.h, the names, autograd table and public
   functions of ops/pointwise.c, the CPU loops of ops/cpu/elementwise.c, the
   CUDA cases of ops/cuda/elementwise.cu, the Lua bindings and the tests are
   all expanded from these lists, so nothing is kept in step by hand.

   Unary ops: X(ID, name, node, fmath, ints, imath, grad, nparams, api, dom)
     ID      the enum value UOP_<ID>
     name    the user-facing name: the C function zorch_<name>, the Lua function
             zorch.<name> and method x:<name>(), the name in error messages
     node    the autograd node's name
     fmath   the float math per element: an expression of x and the parameters
             p0, p1, all of type T (float or double); ZM(f, ...) calls zm_f of
             ops/math.h for T, so CPU and CUDA run the same formula
     ints    which integer dtypes have a kernel: INT (int32, int64, uint8),
             SIGNED (int32, int64) or NO_INT (the op computes in float)
     imath   the integer math (same names, T the integer type); 0 under NO_INT.
             It wraps around in two's complement as PyTorch's does: sums,
             differences and products are taken in uint64_t, where overflow
             is defined (in a signed type it is undefined behaviour)
     grad    FUSED(BOP_<K>, save): the gradient is the fused binary kernel K of
             (g, saved); CUSTOM(fn, save): the backward function fn of
             ops/pointwise.c; save is SAVE_NONE, SAVE_IN (the input),
             SAVE_OUT (the output) or SAVE_BOTH (input and output)
     nparams the scalar parameters p0, p1 the op reads (0, 1 or 2)
     api     API: zorch_<name>(a[, p0]) is generated; HAND(call): the public
             function is written by hand, `call` invokes it with a, p0, p1
     dom     ANY, or POS_A: the tests draw the input positive

   Binary ops: X(ID, name, node, out, fmath, ints, imath, grad, api, dom)
     out     SAME (the compute dtype) or BOOL (comparisons)
     fmath   an expression of x (input a), y (input b), p0, p1; for the
             gradient kernels x is the incoming gradient and y the saved tensor
     grad    CUSTOM(fn, save) with save SAVE_NONE, SAVE_IN (a and b) or
             SAVE_BOTH (a, b and the output); NO_GRAD: not differentiable
     api     API: zorch_<name>(a, b) is generated; KERNEL: a gradient kernel
             with no public function (tested through the op that uses it)
     dom     ANY, POS_A or POS_B (which input the tests draw positive)

   This header includes nothing: it is read by every layer from ops/ up. */
#ifndef ZORCH_OPS_POINTWISE_OPS_H
#define ZORCH_OPS_POINTWISE_OPS_H

#define ZORCH_UNARY_OPS(X)                                                                       \
  X(NEG, neg, "NegBackward", -x, SIGNED, (T)(0 - (uint64_t)x), CUSTOM(neg_bwd, SAVE_NONE), 0, API, ANY)         \
  X(EXP, exp, "ExpBackward", exp(x), NO_INT, 0, CUSTOM(exp_bwd, SAVE_OUT), 0, API, ANY)          \
  X(LOG, log, "LogBackward", log(x), NO_INT, 0, CUSTOM(log_bwd, SAVE_IN), 0, API, POS_A)         \
  X(SQRT, sqrt, "SqrtBackward", sqrt(x), NO_INT, 0, FUSED(BOP_SQRT_BWD_Y, SAVE_OUT), 0, API,     \
    POS_A)                                                                                       \
  X(ABS, abs, "AbsBackward", fabs(x), SIGNED, (T)(x < 0 ? 0 - (uint64_t)x : (uint64_t)x),                               \
    FUSED(BOP_ABS_BWD, SAVE_IN), 0, API, ANY)                                                    \
  X(RELU, relu, "ReluBackward", ZM(relu, x), SIGNED, (T)(x > 0 ? x : 0),                         \
    FUSED(BOP_RELU_BWD, SAVE_IN), 0, API, ANY)                                                   \
  X(GELU, gelu, "GeluBackward", ZM(gelu, x), NO_INT, 0, FUSED(BOP_GELU_BWD, SAVE_IN), 0,         \
    HAND(zorch_gelu(a, false)), ANY)                                                             \
  X(GELU_TANH, gelu_tanh, "GeluBackward", ZM(gelu_tanh, x), NO_INT, 0,                           \
    FUSED(BOP_GELU_TANH_BWD, SAVE_IN), 0, HAND(zorch_gelu(a, true)), ANY)                        \
  X(TANH, tanh, "TanhBackward", tanh(x), NO_INT, 0, FUSED(BOP_TANH_BWD_Y, SAVE_OUT), 0, API,     \
    ANY)                                                                                         \
  X(SIGMOID, sigmoid, "SigmoidBackward", ZM(sigmoid, x), NO_INT, 0,                              \
    FUSED(BOP_SIGMOID_BWD_Y, SAVE_OUT), 0, API, ANY)                                             \
  X(SILU, silu, "SiluBackward", ZM(silu, x), NO_INT, 0, FUSED(BOP_SILU_BWD, SAVE_IN), 0, API,    \
    ANY)                                                                                         \
  X(SIN, sin, "SinBackward", sin(x), NO_INT, 0, FUSED(BOP_SIN_BWD, SAVE_IN), 0, API, ANY)        \
  X(COS, cos, "CosBackward", cos(x), NO_INT, 0, FUSED(BOP_COS_BWD, SAVE_IN), 0, API, ANY)        \
  X(ADD_S, add_scalar, "AddBackward", x + p0, INT, (T)((uint64_t)x + (uint64_t)p0),                                  \
    CUSTOM(add_scalar_bwd, SAVE_NONE), 1, API, ANY)                                              \
  X(MUL_S, mul_scalar, "MulBackward", x * p0, INT, (T)((uint64_t)x * (uint64_t)p0),                                  \
    CUSTOM(mul_scalar_bwd, SAVE_NONE), 1, API, ANY)                                              \
  X(RSUB_S, rsub_scalar, "RsubBackward", p0 - x, SIGNED, (T)((uint64_t)p0 - (uint64_t)x),                            \
    CUSTOM(neg_bwd, SAVE_NONE), 1, API, ANY)                                                     \
  X(RDIV_S, rdiv_scalar, "DivBackward", p0 / x, NO_INT, 0, CUSTOM(rdiv_scalar_bwd, SAVE_BOTH),   \
    1, API, POS_A)                                                                               \
  X(POW_S, pow_scalar, "PowBackward", p0 == (T)2 ? x * x : pow(x, p0), INT, (T)zm_ipow(x, p0),  \
    FUSED(BOP_POW_S_BWD, SAVE_IN), 1, HAND(zorch_pow_scalar(a, p0)), POS_A)                      \
  X(CLAMP, clamp, "ClampBackward", x < p0 ? p0 : (x > p1 ? p1 : x), INT,                         \
    x < p0 ? p0 : (x > p1 ? p1 : x), FUSED(BOP_CLAMP_BWD, SAVE_IN), 2,                           \
    HAND(zorch_clamp(a, p0, p1)), ANY)

#define ZORCH_BINARY_OPS(X)                                                                      \
  X(ADD, add, "AddBackward", SAME, x + y, INT, (T)((uint64_t)x + (uint64_t)y), CUSTOM(add_bwd, SAVE_NONE), API, ANY) \
  X(SUB, sub, "SubBackward", SAME, x - y, INT, (T)((uint64_t)x - (uint64_t)y), CUSTOM(sub_bwd, SAVE_NONE), API, ANY) \
  X(MUL, mul, "MulBackward", SAME, x * y, INT, (T)((uint64_t)x * (uint64_t)y), CUSTOM(mul_bwd, SAVE_IN), API, ANY)   \
  X(DIV, div, "DivBackward", SAME, x / y, NO_INT, 0, CUSTOM(div_bwd, SAVE_IN), API, POS_B)       \
  X(POW, pow, "PowBackward", SAME, pow(x, y), INT, (T)zm_ipow(x, y), CUSTOM(pow_bwd, SAVE_BOTH), API, POS_A) \
  X(EQ, eq, NULL, BOOL, x == y, INT, x == y, NO_GRAD, API, ANY)                                  \
  X(LT, lt, NULL, BOOL, x < y, INT, x < y, NO_GRAD, API, ANY)                                    \
  X(GT, gt, NULL, BOOL, x > y, INT, x > y, NO_GRAD, API, ANY)                                    \
  X(NE, ne, NULL, BOOL, x != y, INT, x != y, NO_GRAD, API, ANY)                                  \
  X(LE, le, NULL, BOOL, x <= y, INT, x <= y, NO_GRAD, API, ANY)                                  \
  X(GE, ge, NULL, BOOL, x >= y, INT, x >= y, NO_GRAD, API, ANY)                                  \
  X(MAXIMUM, maximum, "MaximumBackward", SAME, ZM(maximum, x, y), INT, (x < y ? y : x),          \
    CUSTOM(maximum_bwd, SAVE_IN), API, ANY)                                                      \
  X(MINIMUM, minimum, "MinimumBackward", SAME, ZM(minimum, x, y), INT, (y < x ? y : x),          \
    CUSTOM(minimum_bwd, SAVE_IN), API, ANY)                                                      \
  X(FMAX, fmax, "FmaxBackward", SAME, ZM(fmax, x, y), INT, (x < y ? y : x), CUSTOM(fmax_bwd, SAVE_IN), \
    API, ANY)                                                                                    \
  X(FMIN, fmin, "FminBackward", SAME, ZM(fmin, x, y), INT, (y < x ? y : x), CUSTOM(fmin_bwd, SAVE_IN), \
    API, ANY)                                                                                    \
  X(ATAN2, atan2, "Atan2Backward", SAME, atan2(x, y), NO_INT, 0, CUSTOM(atan2_bwd, SAVE_IN), API, \
    ANY)                                                                                         \
  X(HYPOT, hypot, "HypotBackward", SAME, hypot(x, y), NO_INT, 0, CUSTOM(hypot_bwd, SAVE_BOTH),   \
    API, ANY)                                                                                    \
  X(LOGADDEXP, logaddexp, "LogaddexpBackward", SAME, ZM(logaddexp, x, y), NO_INT, 0,             \
    CUSTOM(logaddexp_bwd, SAVE_IN), API, ANY)                                                    \
  X(COPYSIGN, copysign, "CopysignBackward", SAME, copysign(x, y), NO_INT, 0,                     \
    CUSTOM(copysign_bwd, SAVE_BOTH), API, ANY)                                                   \
  X(FMOD, fmod, "FmodBackward", SAME, fmod(x, y), INT, (T)zm_ifmod(x, y),                        \
    CUSTOM(fmod_bwd, SAVE_IN), API, POS_B)                                                       \
  X(REMAINDER, remainder, "RemainderBackward", SAME, ZM(remainder, x, y), INT,                   \
    (T)zm_iremainder(x, y), CUSTOM(remainder_bwd, SAVE_IN), API, POS_B)                          \
  X(FLOOR_DIVIDE, floor_divide, NULL, SAME, ZM(floor_divide, x, y), INT,                         \
    (T)zm_ifloor_divide(x, y), NO_GRAD, API, POS_B)                                              \
  X(TRUNC_DIV, trunc_div, NULL, SAME, trunc(x / y), NO_INT, 0, NO_GRAD, KERNEL, ANY)             \
  X(RELU_BWD, relu_bwd, NULL, SAME, ZM(relu_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)         \
  X(GELU_BWD, gelu_bwd, NULL, SAME, ZM(gelu_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)         \
  X(GELU_TANH_BWD, gelu_tanh_bwd, NULL, SAME, ZM(gelu_tanh_bwd, x, y), NO_INT, 0, NO_GRAD,       \
    KERNEL, ANY)                                                                                 \
  X(TANH_BWD_Y, tanh_bwd, NULL, SAME, ZM(tanh_bwd_y, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)     \
  X(SIGMOID_BWD_Y, sigmoid_bwd, NULL, SAME, ZM(sigmoid_bwd_y, x, y), NO_INT, 0, NO_GRAD, KERNEL, \
    ANY)                                                                                         \
  X(SILU_BWD, silu_bwd, NULL, SAME, ZM(silu_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)         \
  X(SIN_BWD, sin_bwd, NULL, SAME, ZM(sin_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)            \
  X(COS_BWD, cos_bwd, NULL, SAME, ZM(cos_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)            \
  X(SQRT_BWD_Y, sqrt_bwd, NULL, SAME, ZM(sqrt_bwd_y, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)     \
  X(ABS_BWD, abs_bwd, NULL, SAME, ZM(abs_bwd, x, y), NO_INT, 0, NO_GRAD, KERNEL, ANY)            \
  X(POW_S_BWD, pow_scalar_bwd, NULL, SAME, p0 == 0 ? (T)0 : x * p0 * pow(y, p0 - (T)1), NO_INT, 0, NO_GRAD, \
    KERNEL, ANY)                                                                                 \
  X(CLAMP_BWD, clamp_bwd, NULL, SAME, (y > p0 && y < p1) ? x : (T)0, NO_INT, 0, NO_GRAD,         \
    KERNEL, ANY)                                                                                 \
  X(MUL_SCALED, mul_scaled, NULL, SAME, (T)p0 * y * x, NO_INT, 0, NO_GRAD, KERNEL, ANY)

/* The enums: UOP_<ID> and BOP_<ID>, in list order. */
#define ZORCH_OP_ENUM_U(ID, ...) UOP_##ID,
#define ZORCH_OP_ENUM_B(ID, ...) BOP_##ID,
typedef enum { ZORCH_UNARY_OPS(ZORCH_OP_ENUM_U) UOP_COUNT } uop;
typedef enum { ZORCH_BINARY_OPS(ZORCH_OP_ENUM_B) BOP_COUNT } bop;
#undef ZORCH_OP_ENUM_U
#undef ZORCH_OP_ENUM_B

/* What the tests draw for an op's inputs (bits: input a, input b positive). */
enum { OP_DOM_ANY = 0, OP_DOM_POS_A = 1, OP_DOM_POS_B = 2 };

/* A user-facing op of the lists (the gradient kernels excluded), for the Lua
   bindings and the tests that go over every op. */
typedef struct op_info {
  const char *name;
  int nin;            /* tensor inputs: 1 or 2 */
  int nparams;        /* scalar parameters */
  int differentiable; /* records a gradient */
  int dom;            /* OP_DOM_* bits */
  /* Runs the op through its public function on in[0..nin) and p[0..nparams). */
  struct zorch_tensor *(*call)(struct zorch_tensor *const *in, const double *p);
} op_info;

/* The user-facing elementwise ops, unary first, in list order; *n gets the count. */
const op_info *ops_pointwise(int *n);
#endif
