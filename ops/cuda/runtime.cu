// runtime.cu: devices, their streams, the caching allocator, host copies and
// the backend table. Registered by ops/backend.c on first use of a cuda device.
#include <map>
#include <mutex>
#include <vector>

#include "cuda.h"

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

static int cuda_count(void) {
  static int n = -1;
  if (n < 0) {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();
      c = 0;
    }
    n = c;
  }
  return n;
}

static zorch_status check_dev(int dev) {
  if (dev < 0 || dev >= cuda_count() || dev >= MAX_DEV)
    return err_set(ZORCH_ERR_DEVICE, "cuda: no device %d (%d present)", dev, cuda_count());
  return ZORCH_OK;
}

extern "C" int zorch_cuda_device_count(void) { return cuda_count(); }

extern "C" zorch_status zorch_cuda_memory_stats(int dev, zorch_cuda_memory *out) {
  if (check_dev(dev)) return zorch_last_status();
  std::lock_guard<std::mutex> lk(alloc_lock);
  dev_cache &dc = caches[dev];
  out->in_use = dc.in_use;
  out->cached = dc.held - dc.in_use;
  out->peak = dc.peak;
  out->mallocs = dc.mallocs;
  return ZORCH_OK;
}

extern "C" zorch_status zorch_cuda_empty_cache(int dev) {
  if (check_dev(dev)) return zorch_last_status();
  std::lock_guard<std::mutex> lk(alloc_lock);
  cu_stream(dev);
  release_cached(caches[dev]);
  return ZORCH_OK;
}

extern "C" zorch_status zorch_cuda_synchronize(int dev) {
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

static backend make_backend() {
  backend b{};
  b.name = "cuda";
  b.native16 = true;
  b.copy = cuda_copy;
  b.fill = cuda_fill;
  b.unary = cuda_unary;
  b.binary = cuda_binary;
  b.where = cuda_where;
  b.reduce = cuda_reduce;
  b.max_bwd = cuda_max_bwd;
  b.cumsum = cuda_cumsum;
  b.sort = cuda_sort;
  b.gather = cuda_gather;
  b.scatter = cuda_scatter;
  b.softmax = cuda_softmax;
  b.gemm = cuda_gemm;
  b.index_select = cuda_index_select;
  b.index_add = cuda_index_add;
  b.nll = cuda_nll;
  b.nll_bwd = cuda_nll_bwd;
  b.layer_norm = cuda_layer_norm;
  b.layer_norm_bwd = cuda_layer_norm_bwd;
  b.attention = cuda_attention;
  b.attention_bwd = cuda_attention_bwd;
  b.batch_norm = cuda_batch_norm;
  b.batch_norm_bwd = cuda_batch_norm_bwd;
  b.random = cuda_random;
  b.randint = cuda_randint;
  b.adam = cuda_adam;
  b.sgd = cuda_sgd;
  b.im2col = cuda_im2col;
  b.col2im = cuda_col2im;
  b.pool2d = cuda_pool2d;
  b.pool2d_bwd = cuda_pool2d_bwd;
  b.to_host = cuda_to_host;
  b.from_host = cuda_from_host;
  b.to_device = cuda_to_device;
  return b;
}
static const backend cuda_backend = make_backend();
static const device_mem cuda_mem = {cuda_alloc, cuda_free, cuda_count};

// Called once by ops/backend.c; with no GPU the device count is 0 and every cuda
// tensor is refused with a clear error.
extern "C" void cuda_backend_init(void) {
  backend_register(ZORCH_CUDA, &cuda_backend);
  device_mem_register(ZORCH_CUDA, &cuda_mem);
}

// The device's stream, for the NCCL collectives (zero/nccl.c, plain C).
extern "C" cudaStream_t zorch_cuda_stream(int dev) { return cu_stream(dev); }
