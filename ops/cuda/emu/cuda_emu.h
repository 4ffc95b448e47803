// cuda_emu.h: the CUDA execution model on the host, for the kernels of
// ops/cuda compiled as C++ (the emulated build, docs/cuda.md). A launch runs
// the grid's blocks one after another; a block's threads are fibers (emu.cc)
// that run until they finish or reach a collective point: __syncthreads (the
// whole block) or a warp intrinsic (the 32 lanes of the warp named in its
// mask). __shared__ variables are per host thread, and one host thread runs
// one block at a time, so a block's fibers share them as a block's threads do.
#ifndef ZORCH_CUDA_EMU_H
#define ZORCH_CUDA_EMU_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__
#define __shared__ static thread_local
// extern __shared__ T name[] (dynamic shared memory): CU_DYNAMIC_SHARED(T, name)
#define CU_DYNAMIC_SHARED(T, name) T *const name = (T *)::cu_emu::dynamic_shared()

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace cu_emu {
// Launch limits as a device of compute capability 8.0/9.0 has them.
enum { MAX_THREADS = 1024, MAX_BLOCK_Z = 64, MAX_GRID_YZ = 65535, WARP = 32 };
extern const size_t default_dynamic_shared;  // 48 KiB without the opt-in attribute

struct fiber;
struct block_state {
  uint3 bid;
  dim3 bdim, gdim;
  void *dyn;  // dynamic shared memory
};
extern thread_local fiber *cur;  // the running fiber (its thread)
extern thread_local block_state blk;
uint3 thread_idx();
void *dynamic_shared();
void syncthreads(const char *file, int line);
// warp collectives: every lane of `mask` deposits v and gets back the 32
// deposits of this round (lanes outside the mask leave theirs unset)
const uint64_t *warp_exchange(unsigned mask, uint64_t v);
unsigned lane_id();

// Runs one launch: geometry checked as the driver does (else the runtime's
// error becomes the last error), then every block. `run` calls the kernel for
// the current thread with the arguments kept in `args`.
cudaError_t launch(const char *name, const void *kernel, dim3 g, dim3 b, size_t shmem, cudaStream_t s,
                   void (*run)(void *), void *args);
// Name of a kernel as written at its launch, for the count of kernels run.
void note_launch(const char *name);

template <typename... P>
struct launcher {
  const char *name;
  void (*fn)(P...);
  dim3 g, b;
  size_t shmem;
  cudaStream_t s;
  template <typename... A>
  void operator()(A &&...a) const {
    struct pack {
      void (*fn)(P...);
      std::tuple<typename std::decay<P>::type...> args;
    } pk{fn, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
    launch(name, (const void *)fn, g, b, shmem, s,
           [](void *v) {
             pack *p = (pack *)v;
             std::apply(p->fn, p->args);  // by value, as kernel parameters are
           },
           &pk);
  }
};
template <typename... P>
launcher<P...> make_launch(const char *name, void (*fn)(P...), dim3 g, dim3 b, size_t shmem = 0,
                           cudaStream_t s = 0) {
  return launcher<P...>{name, fn, g, b, shmem, s};
}
// cudaFuncSetAttribute: the dynamic shared memory a kernel may ask for
cudaError_t set_max_dynamic_shared(const void *kernel, int bytes);
}  // namespace cu_emu

template <typename F>
cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int v) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return cu_emu::set_max_dynamic_shared((const void *)kernel, v);
}

#define threadIdx (::cu_emu::thread_idx())
#define blockIdx (::cu_emu::blk.bid)
#define blockDim (::cu_emu::blk.bdim)
#define gridDim (::cu_emu::blk.gdim)
#define warpSize 32
#define __syncthreads() ::cu_emu::syncthreads(__FILE__, __LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cu_emu::warp_exchange(mask, 0); }

// ---- warp intrinsics: collective points among the lanes of the mask ----
template <typename T>
inline T cu_emu_shfl_pick(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  const uint64_t *all = ::cu_emu::warp_exchange(mask, bits);
  T r;
  memcpy(&r, &all[src], sizeof(T));
  return r;
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  int lane = (int)::cu_emu::lane_id();
  return cu_emu_shfl_pick(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
  int lane = (int)::cu_emu::lane_id(), s = lane ^ lm;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return cu_emu_shfl_pick(mask, v, s);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  int lane = (int)::cu_emu::lane_id(), s = lane + (int)d;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return cu_emu_shfl_pick(mask, v, s);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  int lane = (int)::cu_emu::lane_id(), s = lane - (int)d;
  if (s < (lane & ~(width - 1))) s = lane;
  return cu_emu_shfl_pick(mask, v, s);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  const uint64_t *all = ::cu_emu::warp_exchange(mask, pred != 0);
  unsigned r = 0;
  for (int l = 0; l < 32; l++)
    if ((mask >> l & 1u) && all[l]) r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline unsigned __activemask(void) { return 0xffffffffu; }

// ---- atomics (blocks may one day run on several host threads) ----
template <typename T>
inline T cu_emu_atomic_add(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicAdd(int *p, int v) { return cu_emu_atomic_add(p, v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return cu_emu_atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return cu_emu_atomic_add(p, v); }
template <typename T, typename F>
inline T cu_emu_atomic_cas_loop(T *p, F f) {  // floats: compare-and-swap on the bits
  T old = *p, want;
  do want = f(old);
  while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
inline float atomicAdd(float *p, float v) { return cu_emu_atomic_cas_loop(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double *p, double v) { return cu_emu_atomic_cas_loop(p, [v](double o) { return o + v; }); }
inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned *p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicExch(T *p, T v) { T r; __atomic_exchange(p, &v, &r, __ATOMIC_SEQ_CST); return r; }
template <typename T>
inline T atomicCAS(T *p, T cmp, T v) {
  __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
template <typename T>
inline T atomicMax(T *p, T v) { return cu_emu_atomic_cas_loop(p, [v](T o) { return o > v ? o : v; }); }
template <typename T>
inline T atomicMin(T *p, T v) { return cu_emu_atomic_cas_loop(p, [v](T o) { return o < v ? o : v; }); }
template <typename T>
inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- math intrinsics: the fast variants as the exact functions ----
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <typename T>
inline T __ldg(const T *p) { return *p; }
#endif
