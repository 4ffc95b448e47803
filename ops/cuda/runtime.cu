// runtime.cu: devices, their streams, the caching allocator, host copies, the
// backend table and the module's table (ops/cuda/module.h), which the core
// registers when it opens the module on first use of a cuda device.
#include <nccl.h>
#include <stdio.h>

#include <map>
#include <mutex>
#include <vector>

#include "cuda.h"
extern "C" {
#include "module.h"
}

#define MAX_DEV 64

static cudaStream_t streams[MAX_DEV];
static std::once_flag stream_once[MAX_DEV];
static thread_local int current_dev = -1;

cudaStream_t cu_stream(int dev) {
  if (dev < 0 || dev >= MAX_DEV) dev = 0;
  if (current_dev != dev) {
    cudaSetDevice(dev);
    current_dev = dev;
  }
  std::call_once(stream_once[dev], [dev] {
    // non-blocking: it never waits for (or on) the legacy default stream
    if (cudaStreamCreateWithFlags(&streams[dev], cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      streams[dev] = 0;
    }
  });
  return streams[dev];
}

static int64_t *bad_host[MAX_DEV], *bad_dev[MAX_DEV];
static std::once_flag bad_once[MAX_DEV];

int64_t *cu_bad_index_word(int dev) {
  if (dev < 0 || dev >= MAX_DEV) return nullptr;
  std::call_once(bad_once[dev], [dev] {
    cu_stream(dev);
    void *h = nullptr, *d = nullptr;
    if (cudaHostAlloc(&h, 4 * sizeof(int64_t), cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer(&d, h, 0) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    bad_host[dev] = (int64_t *)h;
    bad_dev[dev] = (int64_t *)d;
    bad_host[dev][0] = 0;
  });
  return bad_dev[dev];
}

// After a wait for the device: a bad index a kernel found becomes the error.
static zorch_status check_bad_index(int dev) {
  volatile int64_t *w = bad_host[dev];
  if (!w || !w[0]) return ZORCH_OK;
  static const char *const ops[] = {"", "index_select", "index_add", "cross_entropy", "gather", "scatter",
                                    "scatter_add"};
  int op = (int)w[0];
  long long v = (long long)w[1], n = (long long)w[2];
  w[0] = 0;
  const char *name = ops[op >= 1 && op <= CU_BAD_SCATTER_ADD ? op : 0];
  if (op == CU_BAD_TARGET)
    return err_set(ZORCH_ERR_ARG,
                   "%s: target " ERR_IXV("%lld") " is out of range " ERR_IXV("0") ".." ERR_IXV("%lld")
                   "%s (found on cuda:%d by an earlier kernel)", name, v, n - 1,
                   v == -1 ? ERR_NOTE1(" (targets are 1-based, as Lua counts; add 1 to 0-based labels)") : "", dev);
  return err_set(ZORCH_ERR_ARG,
                 "%s: index " ERR_IXV("%lld") " is out of range " ERR_IXV("0") ".." ERR_IXV("%lld")
                 "%s (found on cuda:%d by an earlier kernel)", name, v, n - 1,
                 v == -1 ? ERR_NOTE1(" (indices are 1-based, as Lua counts)") : "", dev);
}

zorch_status cu_launched(const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ZORCH_OK;
  return err_set(ZORCH_ERR_DEVICE, "%s: CUDA kernel launch failed: %s", op, cudaGetErrorString(e));
}

zorch_status cu_no_kernel(const char *op, zorch_dtype dt) {
  return err_set(ZORCH_ERR_DTYPE, "%s: no CUDA kernel for dtype %s", op, zorch_dtype_name(dt));
}

geom cu_geom(int nops, const zorch_tensor *const *ts) {
  geom g{};
  const zorch_tensor *t0 = ts[0];
  g.nd = t0->ndim;
  g.nops = nops;
  g.numel = shape_numel(t0->ndim, t0->shape);
  for (int i = 0; i < t0->ndim; i++) g.shape[i] = t0->shape[i];
  g.contig = 1;
  for (int k = 0; k < nops; k++) {
    g.base[k] = tensor_ptr(ts[k]);
    g.es[k] = (int64_t)dtype_sizes[ts[k]->dtype];
    int64_t want = 1;
    for (int i = t0->ndim - 1; i >= 0; i--) {
      g.st[k][i] = ts[k]->strides[i] * g.es[k];
      if (t0->shape[i] != 1 && ts[k]->strides[i] != want) g.contig = 0;
      want *= t0->shape[i];
    }
  }
  return g;
}

// ---- caching allocator ----------------------------------------------------------------
// Blocks are reused by size class (round_class), per device. A
// freed block goes back to its class at once: every kernel of a device runs on
// its one stream, so a later kernel that gets the block runs after the earlier
// ones that used it. On out-of-memory the cached blocks are released (cudaFree
// waits for the device) and the allocation is tried once more.
namespace {
struct dev_cache {
  std::map<size_t, std::vector<void *>> free_blocks;
  std::map<void *, size_t> size_of;
  size_t held = 0, in_use = 0, peak = 0, mallocs = 0;
};
std::mutex alloc_lock;
dev_cache caches[MAX_DEV];

// Small blocks by power of two (512 bytes up); above 1 MiB by multiples of
// 2 MiB, so a large tensor wastes at most 2 MiB, not up to half its size.
size_t round_class(size_t n) {
  if (n > ((size_t)1 << 20)) return (n + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
  size_t c = 512;
  while (c < n) c <<= 1;
  return c;
}
void release_cached(dev_cache &dc) {
  for (auto &kv : dc.free_blocks)
    for (void *p : kv.second) {
      cudaFree(p);
      dc.held -= kv.first;
      dc.size_of.erase(p);
    }
  dc.free_blocks.clear();
}
}  // namespace

void *cuda_alloc(int dev, size_t nbytes) {
  if (dev < 0 || dev >= MAX_DEV) return err_null(ZORCH_ERR_DEVICE, "cuda: no device %d", dev);
  if (nbytes > ((size_t)1 << 62)) return err_null(ZORCH_ERR_OOM, "cuda: cannot allocate %zu bytes", nbytes);
  std::lock_guard<std::mutex> lk(alloc_lock);
  dev_cache &dc = caches[dev];
  size_t c = round_class(nbytes ? nbytes : 1);
  auto &fl = dc.free_blocks[c];
  void *p = nullptr;
  if (!fl.empty()) {
    p = fl.back();
    fl.pop_back();
  } else {
    cu_stream(dev);
    if (cudaMalloc(&p, c) != cudaSuccess) {
      cudaGetLastError();
      release_cached(dc);
      if (cudaMalloc(&p, c) != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        err_set(ZORCH_ERR_OOM,
                "cuda:%d: out of memory allocating %zu bytes (%zu held by zorch's tensors, %zu free of %zu on "
                "the device)",
                dev, nbytes, dc.in_use, fr, tot);
        return nullptr;
      }
    }
    dc.mallocs++;
    dc.size_of[p] = c;
    dc.held += c;
  }
  dc.in_use += c;
  if (dc.in_use > dc.peak) dc.peak = dc.in_use;
  return p;
}

void cuda_free(int dev, void *p) {
  if (!p || dev < 0 || dev >= MAX_DEV) return;
  std::lock_guard<std::mutex> lk(alloc_lock);
  dev_cache &dc = caches[dev];
  auto it = dc.size_of.find(p);
  if (it == dc.size_of.end()) return;
  dc.in_use -= it->second;
  dc.free_blocks[it->second].push_back(p);
}

static cudaError_t count_error = cudaSuccess;
static int cuda_count(void) {
  static std::once_flag once;
  static int n = 0;
  std::call_once(once, [] {
    int c = 0;
    count_error = cudaGetDeviceCount(&c);
    if (count_error != cudaSuccess) {
      cudaGetLastError();
      c = 0;
    }
    n = c;
  });
  return n;
}

static const char *no_device_reason(void) {
  if (cuda_count() > 0) return "";
  return count_error != cudaSuccess ? cudaGetErrorString(count_error) : "no CUDA device found";
}

static zorch_status check_dev(int dev) {
  if (dev < 0 || dev >= cuda_count() || dev >= MAX_DEV)
    return err_set(ZORCH_ERR_DEVICE, "cuda: no device %d (%d present)", dev, cuda_count());
  return ZORCH_OK;
}

static zorch_status memory_stats(int dev, zorch_cuda_memory *out) {
  if (check_dev(dev)) return zorch_last_status();
  std::lock_guard<std::mutex> lk(alloc_lock);
  dev_cache &dc = caches[dev];
  out->in_use = dc.in_use;
  out->cached = dc.held - dc.in_use;
  out->peak = dc.peak;
  out->mallocs = dc.mallocs;
  return ZORCH_OK;
}

static zorch_status empty_cache(int dev) {
  if (check_dev(dev)) return zorch_last_status();
  std::lock_guard<std::mutex> lk(alloc_lock);
  cu_stream(dev);
  release_cached(caches[dev]);
  return ZORCH_OK;
}

static zorch_status synchronize(int dev) {
  if (check_dev(dev)) return zorch_last_status();
  CUDA_TRY(cudaStreamSynchronize(cu_stream(dev)));
  return check_bad_index(dev);
}

// ---- copies: queued on the stream; a copy to the host waits for it --------------------
zorch_status cuda_to_host(void *dst, const void *src, size_t n, int dev) {
  cudaStream_t s = cu_stream(dev);
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
  CUDA_TRY(cudaStreamSynchronize(s));
  return check_bad_index(dev);
}

// From pageable host memory the copy returns once the source was read, so the
// caller may free it at once.
zorch_status cuda_from_host(void *dst, const void *src, size_t n, int dev) {
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cu_stream(dev)));
  return ZORCH_OK;
}

zorch_status cuda_to_device(void *dst, const void *src, size_t n, int dev) {
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cu_stream(dev)));
  return ZORCH_OK;
}

// ---- offload on GPU ranks: pinned host memory, device-to-host copies on a side stream ----
static cudaStream_t side_streams[MAX_DEV];
static cudaEvent_t side_events[MAX_DEV];
static std::once_flag side_once[MAX_DEV];

static cudaStream_t cu_side_stream(int dev) {
  if (dev < 0 || dev >= MAX_DEV) dev = 0;
  cu_stream(dev);  // (selects the device)
  std::call_once(side_once[dev], [dev] {
    if (cudaStreamCreateWithFlags(&side_streams[dev], cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&side_events[dev], cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      side_streams[dev] = 0;
      side_events[dev] = 0;
    }
  });
  return side_streams[dev];
}

static zorch_status host_alloc(size_t n, void **out) {
  *out = nullptr;
  CUDA_TRY(cudaMallocHost(out, n ? n : 1));
  return ZORCH_OK;
}

static void host_free(void *p) {
  if (p && cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

// The copy waits for what the device's stream has queued (the reduction that
// wrote src), then runs beside the next kernels: backward goes on.
static zorch_status copy_to_host_async(void *dst, const void *src, size_t n, int dev) {
  cudaStream_t side = cu_side_stream(dev);
  int d = dev < 0 || dev >= MAX_DEV ? 0 : dev;
  if (!side || !side_events[d]) return cuda_to_host(dst, src, n, dev);  // (no side stream: in line)
  CUDA_TRY(cudaEventRecord(side_events[d], cu_stream(dev)));
  CUDA_TRY(cudaStreamWaitEvent(side, side_events[d], 0));
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, side));
  return ZORCH_OK;
}

static zorch_status copy_wait(int dev) {
  cudaStream_t side = cu_side_stream(dev);
  if (side) CUDA_TRY(cudaStreamSynchronize(side));
  return ZORCH_OK;
}

static backend make_backend() {
  backend b{};
  b.name = "cuda";
  b.native16 = true;
  b.copy = cuda_copy;
  b.fill = cuda_fill;
  b.unary = cuda_unary;
  b.binary = cuda_binary;
  b.where = cuda_where;
  b.conv2d_takes = cu_cudnn_conv_takes;  // cuda_conv2d when cuDNN takes it; else im2col + GEMM (ops/def/conv.c)
  b.to_host = cuda_to_host;
  b.from_host = cuda_from_host;
  b.to_device = cuda_to_device;
#define KERNEL(slot, params) b.slot = cuda_##slot;
#define KERNEL_OPT(slot, params)
  ZORCH_OP_KERNELS
#undef KERNEL_OPT
#undef KERNEL
  return b;
}
static const backend cuda_backend = make_backend();
static const device_mem cuda_mem = {cuda_alloc, cuda_free, cuda_count};

const char *cu_nccl_version(void) {
  static char buf[48];
  static std::once_flag once;
  std::call_once(once, [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) snprintf(buf, sizeof buf, "NCCL (version unknown)");
    else snprintf(buf, sizeof buf, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  });
  return buf;
}

// "CUDA runtime 13.0, driver 13.0, cuBLASLt, cuDNN ..., NCCL 2.x", for zorch info.
static void describe(char *buf, size_t n) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  cudaGetLastError();
  char dn[160];
  cu_cudnn_describe(dn, sizeof dn);
#ifdef ZORCH_CUDA_EMU
  int len = snprintf(buf, n, "emulated on the CPU (ops/cuda/emu), CUDA runtime %d.%d, ", rt / 1000, rt % 1000 / 10);
#else
  int len = snprintf(buf, n, "CUDA runtime %d.%d, ", rt / 1000, rt % 1000 / 10);
#endif
  if (len >= 0 && (size_t)len < n)
    len += drv ? snprintf(buf + len, n - len, "driver %d.%d, ", drv / 1000, drv % 1000 / 10)
               : snprintf(buf + len, n - len, "no driver, ");
  if (len >= 0 && (size_t)len < n) snprintf(buf + len, n - len, "cuBLASLt, %s, %s", dn, cu_nccl_version());
}

static const cuda_module the_module = [] {
  cuda_module m{};
  m.abi = ZORCH_CUDA_MODULE_ABI;
  m.size = sizeof(cuda_module);
  m.backend_size = sizeof(backend);
  m.device_mem_size = sizeof(device_mem);
  m.backend = &cuda_backend;
  m.mem = &cuda_mem;
  m.device_count = cuda_count;
  m.no_device_reason = no_device_reason;
  m.memory_stats = memory_stats;
  m.empty_cache = empty_cache;
  m.synchronize = synchronize;
  m.describe = describe;
  m.host_alloc = host_alloc;
  m.host_free = host_free;
  m.copy_to_host_async = copy_to_host_async;
  m.copy_wait = copy_wait;
  return m;
}();

// The module's entry (module.h). With no GPU the device count is 0 and the
// core refuses every cuda tensor with a clear error; the module loads all the same.
extern "C" __attribute__((visibility("default"))) const cuda_module *zorch_cuda_module_open(const cuda_host *host,
                                                                                           char *why, size_t n) {
  return cu_host_attach(host, why, n) ? &the_module : nullptr;
}

// The device's stream, for the NCCL collectives (zero/nccl.c, plain C).
extern "C" cudaStream_t zorch_cuda_stream(int dev) { return cu_stream(dev); }
