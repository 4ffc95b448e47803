// emu.cc: the emulated CUDA device (cuda_emu.h, cuda_runtime.h): fibers for a
// block's threads, launch checks, device memory with guard zones, the
// synchronous streams and events, and the count of kernels launched.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CU_EMU_ASAN 1
#include <sanitizer/common_interface_defs.h>
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cu_emu {
const size_t default_dynamic_shared = 48 << 10;
static const size_t MAX_OPT_IN_SHARED = 227 << 10;  // sm_90's per-block limit
}

// ---- errors: the last error of the thread, as the runtime keeps it ----
static thread_local cudaError_t last_error = cudaSuccess;
static cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

extern "C" cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) { return last_error; }
extern "C" const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

// ---- devices ----
static int device_count() {
  static int n = [] {
    const char *s = getenv("ZORCH_CUDA_EMU_DEVICES");
    int v = s ? atoi(s) : 1;
    return v < 0 ? 0 : v > 8 ? 8 : v;
  }();
  return n;
}
static thread_local int current = 0;
extern "C" cudaError_t cudaGetDeviceCount(int *n) {
  *n = device_count();
  return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}
extern "C" cudaError_t cudaSetDevice(int dev) {
  if (dev < 0 || dev >= device_count()) return fail(cudaErrorInvalidDevice);
  current = dev;
  return cudaSuccess;
}
extern "C" cudaError_t cudaGetDevice(int *dev) {
  *dev = current;
  return cudaSuccess;
}
extern "C" cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
extern "C" cudaError_t cudaDriverGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

// ---- device memory: guard zones around every block, checked after each
// launch and at each free, so a kernel writing past its tensor's allocation
// fails the launch with the runtime's illegal-address error. Under ASan the
// blocks are plain malloc'ed and ASan's own redzones do that job. ----
namespace {
#ifdef CU_EMU_ASAN
const size_t GUARD = 0;
#else
const size_t GUARD = 64;
#endif
const unsigned char GUARD_BYTE = 0xA5;
std::mutex mem_lock;
std::map<char *, size_t> blocks;  // user pointer -> size
size_t mem_used = 0;
size_t mem_total() {
  static size_t t = [] {
    const char *s = getenv("ZORCH_CUDA_EMU_MEMORY_MIB");
    return (size_t)(s ? atol(s) : 16384) << 20;
  }();
  return t;
}
bool guards_ok(char *p, size_t n) {
  for (size_t i = 0; i < GUARD; i++)
    if (p[-1 - (ptrdiff_t)i] != (char)GUARD_BYTE || p[n + i] != (char)GUARD_BYTE) return false;
  return true;
}
// the first block whose guard a kernel overwrote (nullptr: none)
char *broken_block() {
  std::lock_guard<std::mutex> lk(mem_lock);
  for (auto &b : blocks)
    if (!guards_ok(b.first, b.second)) return b.first;
  return nullptr;
}
}  // namespace

extern "C" cudaError_t cudaMalloc(void **p, size_t n) {
  *p = nullptr;
  std::lock_guard<std::mutex> lk(mem_lock);
  if (n > mem_total() - mem_used) return fail(cudaErrorMemoryAllocation);
  char *raw = (char *)malloc(n + 2 * GUARD);
  if (!raw) return fail(cudaErrorMemoryAllocation);
  memset(raw, GUARD_BYTE, GUARD);
  memset(raw + GUARD + n, GUARD_BYTE, GUARD);
  memset(raw + GUARD, 0xFF, n);  // not zero: a read before a write shows (NaN, -1)
  blocks[raw + GUARD] = n;
  mem_used += n;
  *p = raw + GUARD;
  return cudaSuccess;
}
extern "C" cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lk(mem_lock);
  auto it = blocks.find((char *)p);
  if (it == blocks.end()) return fail(cudaErrorInvalidDevicePointer);
  bool ok = guards_ok(it->first, it->second);
  mem_used -= it->second;
  free(it->first - GUARD);
  blocks.erase(it);
  return ok ? cudaSuccess : fail(cudaErrorIllegalAddress);
}
extern "C" cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
  std::lock_guard<std::mutex> lk(mem_lock);
  *free_ = mem_total() - mem_used;
  *total = mem_total();
  return cudaSuccess;
}
extern "C" cudaError_t cudaMallocHost(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
extern "C" cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMallocHost(p, n); }
extern "C" cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned) {
  *d = h;  // host memory is device memory here
  return cudaSuccess;
}
extern "C" cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

// ---- copies, streams, events: everything has finished when the call returns ----
struct cu_emu_stream { unsigned flags; };
struct cu_emu_event { unsigned flags; };
static cudaError_t check_stream(cudaStream_t s) {
  (void)s;  // (every stream handle zorch holds is live)
  return cudaSuccess;
}
extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind) {
  if (n && (!dst || !src)) return fail(cudaErrorInvalidValue);
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}
extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) {
  if (check_stream(s)) return last_error;
  return cudaMemcpy(dst, src, n, k);
}
extern "C" cudaError_t cudaMemset(void *p, int v, size_t n) {
  if (n && !p) return fail(cudaErrorInvalidValue);
  if (n) memset(p, v, n);
  return cudaSuccess;
}
extern "C" cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  *s = new cu_emu_stream{flags};
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
extern "C" cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
extern "C" cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  *e = new cu_emu_event{flags};
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle); }
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaEventQuery(e); }

// ---- fibers ----
// x86-64: a hand-rolled switch (callee-saved registers, the FP control words),
// no system call, so a thread costs two switches; elsewhere ucontext.
namespace cu_emu {
enum state { READY, AT_BLOCK_BARRIER, AT_WARP, DONE };
struct fiber {
  void *sp;  // saved stack pointer (x86-64)
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
  char *stack;
  uint3 tid;
  unsigned lane, warp;
  state st;
  unsigned warp_mask;
  unsigned round;  // warp collectives done, for the double buffer
};
}  // namespace cu_emu

#if defined(__x86_64__)
extern "C" void cu_emu_switch(void **save_sp, void *to_sp);
extern "C" void cu_emu_fiber_start(void);
asm(R"(
  .text
  .p2align 4
  .type cu_emu_switch,@function
cu_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cu_emu_switch, .-cu_emu_switch
  .p2align 4
  .type cu_emu_fiber_start,@function
cu_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size cu_emu_fiber_start, .-cu_emu_fiber_start
)");
#endif

namespace cu_emu {
thread_local fiber *cur = nullptr;
thread_local block_state blk;

namespace {
#ifdef CU_EMU_ASAN
const size_t STACK = 512 << 10;
#else
const size_t STACK = 128 << 10;
#endif
struct launch_ctx {
  void (*run)(void *);
  void *args;
  const char *name;
  std::vector<fiber> fibers;
  unsigned nthreads;
  uint64_t xbuf[MAX_THREADS / WARP][2][WARP];  // warp exchange, double-buffered
  const char *error;  // a collective the block's threads did not all reach
};
thread_local launch_ctx *ctx = nullptr;
thread_local void *sched_sp;  // the scheduler's stack pointer while a fiber runs
#if !defined(__x86_64__)
thread_local ucontext_t sched_uc;
#endif
#ifdef CU_EMU_ASAN
thread_local const void *sched_stack_bottom;
thread_local size_t sched_stack_size;
#endif
thread_local std::vector<char *> stacks;  // reused by every launch of this host thread

char *stack_for(unsigned i) {
  while (stacks.size() <= i) {
    // a guard page below each stack: an overflow faults instead of corrupting
    char *s = (char *)mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) return nullptr;
    mprotect(s, 4096, PROT_NONE);
    stacks.push_back(s);
  }
  return stacks[i];
}

void to_scheduler() {
  fiber *f = cur;
#ifdef CU_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(f->st == DONE ? nullptr : &fake, sched_stack_bottom, sched_stack_size);
#endif
#if defined(__x86_64__)
  cu_emu_switch(&f->sp, sched_sp);
#else
  swapcontext(&f->uc, &sched_uc);
#endif
#ifdef CU_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void to_fiber(fiber *f) {
  cur = f;
#ifdef CU_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, STACK);
#endif
#if defined(__x86_64__)
  cu_emu_switch(&sched_sp, f->sp);
#else
  swapcontext(&sched_uc, &f->uc);
#endif
#ifdef CU_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  cur = nullptr;
}

void fiber_main(void *) {
#ifdef CU_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
  ctx->run(ctx->args);
  cur->st = DONE;
  to_scheduler();  // never resumed
}
#if !defined(__x86_64__)
void fiber_main_uc() { fiber_main(nullptr); }
#endif

void start(fiber *f) {
#if defined(__x86_64__)
  // the first switch pops the saved registers (r12: argument, r13: function)
  // and returns into cu_emu_fiber_start, with the stack 16-byte aligned
  uintptr_t top = ((uintptr_t)(f->stack + STACK)) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)(top - 24);
  sp[0] = (uint64_t)(uintptr_t)cu_emu_fiber_start;
  uint64_t *regs = sp - 6;  // r15 r14 r13 r12 rbx rbp, lowest first
  regs[0] = 0, regs[1] = 0, regs[2] = (uint64_t)(uintptr_t)fiber_main, regs[3] = 0, regs[4] = 0, regs[5] = 0;
  uint32_t *csr = (uint32_t *)(regs - 1);
  uint32_t mx;
  uint16_t cw;
  asm volatile("stmxcsr %0" : "=m"(mx));
  asm volatile("fnstcw %0" : "=m"(cw));
  csr[0] = mx, csr[1] = cw;
  f->sp = regs - 1;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = STACK;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiber_main_uc, 0);
#endif
}

// Runs every thread of the current block until each is done; releases
// barriers when every thread they wait for has arrived.
void run_block(launch_ctx &L) {
  unsigned n = L.nthreads;
  for (unsigned t = 0; t < n; t++) {
    fiber &f = L.fibers[t];
    f.st = READY;
    f.round = 0;
    start(&f);
  }
  for (;;) {
    unsigned live = 0, at_block = 0;
    for (unsigned t = 0; t < n; t++) {
      fiber &f = L.fibers[t];
      if (f.st == READY) to_fiber(&f);
      if (f.st != DONE) live++;
      if (f.st == AT_BLOCK_BARRIER) at_block++;
    }
    if (!live) return;
    bool released = false;
    // warps: all lanes of a mask at the collective (one exited: an error)
    for (unsigned w = 0; w * WARP < n; w++) {
      unsigned waiting = 0, mask = 0, exited = 0;
      for (unsigned l = 0; l < WARP && w * WARP + l < n; l++) {
        fiber &f = L.fibers[w * WARP + l];
        if (f.st == AT_WARP) waiting |= 1u << l, mask |= f.warp_mask;
        if (f.st == DONE) exited |= 1u << l;
      }
      if (!waiting) continue;
      if ((mask & exited) || (mask & ~waiting & ~exited) == 0) {
        if (mask & exited) L.error = "a warp collective's mask names a thread that has exited";
        for (unsigned l = 0; l < WARP && w * WARP + l < n; l++)
          if (waiting >> l & 1u) L.fibers[w * WARP + l].st = READY;
        released = true;
      }
    }
    if (!released && at_block == live) {
      if (live != n) L.error = "__syncthreads reached by only some of the block's threads (the others exited)";
      for (unsigned t = 0; t < n; t++)
        if (L.fibers[t].st == AT_BLOCK_BARRIER) L.fibers[t].st = READY;
      released = true;
    }
    if (!released) {  // waiting at a barrier that cannot open: give the block up
      L.error = "the block's threads wait at different collectives (__syncthreads and a warp's)";
      return;
    }
  }
}

std::mutex names_lock;
std::set<std::string> *launched;
std::map<const void *, int> *opt_in;  // kernel -> dynamic shared memory allowed

void write_launch_log() {
  const char *path = getenv("ZORCH_CUDA_EMU_LOG");
  if (!path || !launched) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  for (auto &s : *launched) fprintf(f, "%s\n", s.c_str());
  fclose(f);
}
}  // namespace

uint3 thread_idx() { return cur->tid; }
unsigned lane_id() { return cur->lane; }
void *dynamic_shared() { return blk.dyn; }

void syncthreads(const char *, int) {
  cur->st = AT_BLOCK_BARRIER;
  to_scheduler();
}

const uint64_t *warp_exchange(unsigned mask, uint64_t v) {
  fiber *f = cur;
  unsigned r = f->round++ & 1;
  ctx->xbuf[f->warp][r][f->lane] = v;
  f->warp_mask = mask;
  f->st = AT_WARP;
  to_scheduler();
  return ctx->xbuf[f->warp][r];
}

void note_launch(const char *name) {
  std::string s(name);
  size_t lt = s.find('<');
  if (lt != std::string::npos) s.resize(lt);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  std::lock_guard<std::mutex> lk(names_lock);
  if (!launched) {
    launched = new std::set<std::string>;
    atexit(write_launch_log);
  }
  launched->insert(s);
}

cudaError_t set_max_dynamic_shared(const void *kernel, int bytes) {
  if (bytes < 0 || (size_t)bytes > MAX_OPT_IN_SHARED) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(names_lock);
  if (!opt_in) opt_in = new std::map<const void *, int>;
  (*opt_in)[kernel] = bytes;
  return cudaSuccess;
}

static size_t shared_limit(const void *kernel) {
  std::lock_guard<std::mutex> lk(names_lock);
  if (opt_in) {
    auto it = opt_in->find(kernel);
    if (it != opt_in->end()) return (size_t)it->second;
  }
  return default_dynamic_shared;
}

cudaError_t launch(const char *name, const void *kernel, dim3 g, dim3 b, size_t shmem, cudaStream_t s,
                   void (*run)(void *), void *args) {
  (void)s;
  note_launch(name);
  // the driver's checks, in its order: geometry, then resources
  uint64_t nt = (uint64_t)b.x * b.y * b.z;
  if (!g.x || !g.y || !g.z || !nt || b.x > MAX_THREADS || b.y > MAX_THREADS || b.z > MAX_BLOCK_Z ||
      nt > MAX_THREADS || g.x > 0x7fffffffu || g.y > MAX_GRID_YZ || g.z > MAX_GRID_YZ)
    return fail(cudaErrorInvalidConfiguration);
  if (shmem > shared_limit(kernel)) return fail(cudaErrorInvalidValue);
  if (ctx) {  // a launch from inside a kernel (dynamic parallelism) is not emulated
    fprintf(stderr, "cuda emulator: %s launched from a kernel\n", name);
    return fail(cudaErrorLaunchFailure);
  }
  launch_ctx *L = new launch_ctx;
  L->run = run, L->args = args, L->name = name, L->nthreads = (unsigned)nt, L->error = nullptr;
  L->fibers.resize(nt);
  for (unsigned t = 0; t < nt; t++) {
    fiber &f = L->fibers[t];
    f.stack = stack_for(t);
    if (!f.stack) {
      delete L;
      return fail(cudaErrorLaunchOutOfResources);
    }
    f.tid = uint3{t % b.x, t / b.x % b.y, t / (b.x * b.y)};
    f.lane = t % WARP, f.warp = t / WARP;
  }
  // dynamic shared memory: NaN bytes to start (as uninitialised as on a GPU,
  // but visible), a guard after it checked after each block (under ASan, the
  // exact size: ASan's redzone is the guard)
  const size_t SG = GUARD ? 64 : 0;
  unsigned char *dyn = (unsigned char *)malloc(shmem + SG ? shmem + SG : 1);
  cudaError_t rc = cudaSuccess;
  const char *why = nullptr;
  ctx = L;
  blk.gdim = g, blk.bdim = b, blk.dyn = dyn;
  for (unsigned z = 0; z < g.z && !rc; z++)
    for (unsigned y = 0; y < g.y && !rc; y++)
      for (unsigned x = 0; x < g.x && !rc; x++) {
        blk.bid = uint3{x, y, z};
        memset(dyn, 0xFF, shmem);
        memset(dyn + shmem, GUARD_BYTE, SG);
        run_block(*L);
        if (L->error) why = L->error, rc = cudaErrorLaunchFailure;
        for (size_t i = 0; i < SG && !rc; i++)
          if (dyn[shmem + i] != GUARD_BYTE) why = "wrote past its dynamic shared memory", rc = cudaErrorIllegalAddress;
      }
  ctx = nullptr;
  free(dyn);
  delete L;
  if (!rc && broken_block()) why = "wrote past the end of a device allocation", rc = cudaErrorIllegalAddress;
  if (rc) {
    fprintf(stderr, "cuda emulator: kernel %s (grid %u,%u,%u, block %u,%u,%u, %zu bytes shared): %s\n", name, g.x,
            g.y, g.z, b.x, b.y, b.z, shmem, why);
    return fail(rc);
  }
  return cudaSuccess;
}
}  // namespace cu_emu
