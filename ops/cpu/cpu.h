/* cpu.h: internals of the CPU backend: the strided iterator every elementwise
   kernel runs on, threading, and value conversion. */
#ifndef ZORCH_OPS_CPU_H
#define ZORCH_OPS_CPU_H
#include "../backend/backend.h"

/* Elements below which a kernel stays on the calling thread: starting a parallel
   region costs a few microseconds, which small tensors must not pay. */
#define CPU_GRAIN 32768
/* The same for memory-bound elementwise loops (binary ops, copies, fills,
   where): with OpenMP's passive wait, waking the sleeping threads costs about
   40 us on the 2-core test machine, the time of a float32 add over some 400k
   elements (docs/performance.md, "Threads"). */
#define CPU_GRAIN_MEM 524288

/* Hot loops are built for the baseline ISA and for AVX2/AVX-512, picked at load. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(ZORCH_NO_CLONES)
#define CPU_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define CPU_CLONES
#endif

/* Kernel scratch from the tensor allocator's caches (ops/core/hostmem.c): a
   buffer of 64 KiB or more from malloc came back as fresh pages on every
   call, each a fault (the attention backward's 160 KiB took 32 faults a
   transformer block step). NULL when out of memory. */
void *cpu_scratch(size_t bytes);
void cpu_scratch_free(void *p);

#define CPU_MAX_OPS 4

/* Operands of one shape, with byte strides, coalesced to as few dims as possible. */
typedef struct {
  int ndim, nops;
  int64_t numel;
  int64_t shape[ZORCH_MAX_DIMS];
  int64_t st[CPU_MAX_OPS][ZORCH_MAX_DIMS];
  char *base[CPU_MAX_OPS];
} cpu_iter;

/* Inner loop over n elements: p[k] points at operand k, s[k] is its byte stride. */
typedef void (*cpu_loop)(char **p, const int64_t *s, int64_t n, const double *prm);

/* ts[0] gives the shape; the others must have it (stride 0 where broadcast). */
void cpu_iter_init(cpu_iter *it, int nops, const zorch_tensor *const *ts);
/* Runs fn over every element, on several threads when numel >= CPU_GRAIN
   (cpu_iter_run_grain: >= grain), in chunks of ZCANCEL_CHUNK elements with a
   look at the deadline and the interrupt flag between two (ZORCH_ERR_TIMEOUT
   when one stops it, the output partly written). */
zorch_status cpu_iter_run(const cpu_iter *it, cpu_loop fn, const double *prm);
zorch_status cpu_iter_run_grain(const cpu_iter *it, cpu_loop fn, const double *prm, int64_t grain);

int cpu_threads(void);

/* A same-size copy whose source runs along the destination's second-to-last
   dim (a transposed matrix made contiguous), done in tiles (transpose.c);
   false, having done nothing, for any other layout. */
bool cpu_copy_transposed(const cpu_iter *it, size_t es);
/* dst (16 rows, ldd elements apart) = the transpose of the 16 x 16 block of
   4-byte elements at src (rows lds apart). */
void cpu_t16_f32(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds);

/* The error for index v at position k of an index tensor, not in 0..n-1
   (numbers marked for the caller's numbering, ops/core/error.h). */
zorch_status cpu_bad_index(const char *op, int64_t v, int64_t k, int64_t n);

/* Dtype dispatch, the one idiom of the CPU kernels: a kernel's body is
   written once over its element type T, as a macro BODY(T) or, for the
   attention kernels, as attention_tpl.h included once per type (its per-type
   functions named by T, called from a BODY(T)); these expand BODY for each
   type they cover and give every other dtype the one error,
   "<op>: no CPU kernel for dtype <name>" (op a string). BODY runs as the
   case of a switch: a `break` in it ends the dispatch, and the code after
   the macro runs next. */
#define CPU_NO_KERNEL(dt, op) err_set(ZORCH_ERR_DTYPE, "%s: no CPU kernel for dtype %s", (op), zorch_dtype_name(dt))
/* float32 and float64 */
#define CPU_FLOAT_DISPATCH(dt, op, BODY)        \
  do {                                          \
    switch (dt) {                               \
      case ZORCH_F32: { BODY(float) } break;    \
      case ZORCH_F64: { BODY(double) } break;   \
      default: return CPU_NO_KERNEL(dt, op);    \
    }                                           \
  } while (0)
/* float32, float64 and int64 */
#define CPU_REAL_DISPATCH(dt, op, BODY)         \
  do {                                          \
    switch (dt) {                               \
      case ZORCH_F32: { BODY(float) } break;    \
      case ZORCH_F64: { BODY(double) } break;   \
      case ZORCH_I64: { BODY(int64_t) } break;  \
      default: return CPU_NO_KERNEL(dt, op);    \
    }                                           \
  } while (0)
/* float32, float64, and bfloat16 and float16 through float32:
   BODY16(load, store) with the 16-bit type's conversions (ops/backend/math.h) */
#define CPU_FLOAT16_DISPATCH(dt, op, BODY, BODY16)                       \
  do {                                                                   \
    switch (dt) {                                                        \
      case ZORCH_F32: { BODY(float) } break;                             \
      case ZORCH_F64: { BODY(double) } break;                            \
      case ZORCH_BF16: { BODY16(zm_bf16_to_f32, zm_f32_to_bf16) } break; \
      case ZORCH_F16: { BODY16(zm_f16_to_f32, zm_f32_to_f16) } break;    \
      default: return CPU_NO_KERNEL(dt, op);                             \
    }                                                                    \
  } while (0)

/* Value conversion through double, for the rare dtype pairs without a fast loop. */
double cpu_load(const char *p, zorch_dtype dt);
void cpu_store(char *p, zorch_dtype dt, double v);
#endif
