// The emulated CUDA execution model (ops/cuda/emu) on its own: what the
// kernels of ops/cuda rely on and what the driver refuses. A TAP program,
// built by `make test-cuda-emu` (build/emu/tests/test_emu_model).
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "../../ops/cuda/cuda.h"

static int n_test = 0, n_fail = 0;
static void ok(bool c, const char *what) {
  n_test++;
  if (!c) n_fail++;
  printf("%s %d - %s\n", c ? "ok" : "not ok", n_test, what);
}

// stubs of the core functions cuda.h declares (the module gets them from the core)
extern "C" zorch_status err_set(zorch_status code, const char *, ...) { return code; }

__global__ void k_warp_sum(int *out) {  // a warp's lanes summed by shuffles
  int v = (int)threadIdx.x + 1;
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
__global__ void k_butterfly(double *out) {
  double v = threadIdx.x;
  for (int m = 1; m < 32; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  out[threadIdx.x] = v;
}
__global__ void k_vote(unsigned *out) {
  unsigned b = __ballot_sync(0xffffffffu, threadIdx.x & 1);
  int any = __any_sync(0xffffffffu, threadIdx.x == 7), all = __all_sync(0xffffffffu, threadIdx.x < 64);
  int bcast = __shfl_sync(0xffffffffu, (int)threadIdx.x * 3, 5);
  if (threadIdx.x == 0) out[0] = b, out[1] = any, out[2] = all, out[3] = bcast;
}
__global__ void k_reverse(int *out, int n) {  // through shared memory, across warps
  __shared__ int sh[1024];
  int t = threadIdx.x;
  sh[t] = t * 2;
  __syncthreads();
  out[t] = sh[n - 1 - t];
}
__global__ void k_dyn_reverse(float *out, int n) {
  CU_DYNAMIC_SHARED(float, sh);
  int t = threadIdx.x;
  sh[t] = (float)t;
  __syncthreads();
  out[blockIdx.x * n + t] = sh[n - 1 - t] + (float)blockIdx.x;
}
__global__ void k_atomics(float *f, double *d, int *i, int *mx) {
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(i, 1);
  atomicMax(mx, (int)(blockIdx.x * blockDim.x + threadIdx.x));
}
__global__ void k_index3(int *out) {  // a 3-d block in a 2-d grid: the row-major thread order
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int b = blockIdx.x + gridDim.x * blockIdx.y;
  out[b * blockDim.x * blockDim.y * blockDim.z + t] = (int)(threadIdx.z * 100 + threadIdx.y * 10 + threadIdx.x);
}
__global__ void k_early_exit(int *out) {  // thread 0 leaves before the barrier
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void k_past_end(int *out, int n) { out[n + threadIdx.x] = 1; }
__global__ void k_nothing(int) {}

int main() {
  int *di;
  cudaMalloc((void **)&di, 4096 * sizeof(int));
  std::vector<int> h(4096);

  CU_LAUNCH((1, 96, 0, 0), k_warp_sum)(di);
  cudaMemcpy(h.data(), di, 3 * sizeof(int), cudaMemcpyDeviceToHost);
  ok(cudaGetLastError() == cudaSuccess && h[0] == 528 && h[1] == 528 + 32 * 32 && h[2] == 528 + 64 * 32,
     "__shfl_down_sync sums each warp's 32 lanes (three warps)");

  double *dd;
  cudaMalloc((void **)&dd, 64 * sizeof(double));
  CU_LAUNCH((1, 64, 0, 0), k_butterfly)(dd);
  std::vector<double> hd(64);
  cudaMemcpy(hd.data(), dd, 64 * sizeof(double), cudaMemcpyDeviceToHost);
  ok(hd[0] == 496 && hd[31] == 496 && hd[32] == 496 + 32 * 32 && hd[63] == 496 + 32 * 32,
     "__shfl_xor_sync's butterfly gives every lane its warp's sum (doubles)");

  unsigned *du;
  cudaMalloc((void **)&du, 4 * sizeof(unsigned));
  CU_LAUNCH((1, 32, 0, 0), k_vote)(du);
  unsigned hu[4];
  cudaMemcpy(hu, du, sizeof hu, cudaMemcpyDeviceToHost);
  ok(hu[0] == 0xAAAAAAAAu && hu[1] == 1 && hu[2] == 1 && hu[3] == 15,
     "__ballot_sync, __any_sync, __all_sync and __shfl_sync from one lane");

  CU_LAUNCH((1, 1000, 0, 0), k_reverse)(di, 1000);
  cudaMemcpy(h.data(), di, 1000 * sizeof(int), cudaMemcpyDeviceToHost);
  ok(h[0] == 1998 && h[999] == 0 && h[500] == 998, "__syncthreads orders a block of 1000 threads' shared writes");

  float *df;
  cudaMalloc((void **)&df, 3 * 129 * sizeof(float));
  CU_LAUNCH((3, 129, 129 * sizeof(float), 0), k_dyn_reverse)(df, 129);
  std::vector<float> hf(3 * 129);
  cudaMemcpy(hf.data(), df, hf.size() * sizeof(float), cudaMemcpyDeviceToHost);
  ok(cudaGetLastError() == cudaSuccess && hf[0] == 128 && hf[129] == 129 && hf[3 * 129 - 1] == 2,
     "dynamic shared memory, per block");

  float *af;
  double *ad;
  int *ai, *am;
  cudaMalloc((void **)&af, 4), cudaMalloc((void **)&ad, 8), cudaMalloc((void **)&ai, 4), cudaMalloc((void **)&am, 4);
  cudaMemset(af, 0, 4), cudaMemset(ad, 0, 8), cudaMemset(ai, 0, 4), cudaMemset(am, 0, 4);
  CU_LAUNCH((7, 33, 0, 0), k_atomics)(af, ad, ai, am);
  float rf;
  double rd;
  int ri, rm;
  cudaMemcpy(&rf, af, 4, cudaMemcpyDeviceToHost), cudaMemcpy(&rd, ad, 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(&ri, ai, 4, cudaMemcpyDeviceToHost), cudaMemcpy(&rm, am, 4, cudaMemcpyDeviceToHost);
  ok(rf == 115.5f && rd == 57.75 && ri == 231 && rm == 230, "atomicAdd on float, double and int; atomicMax");

  CU_LAUNCH((dim3(2, 2), dim3(4, 3, 2), 0, 0), k_index3)(di);
  cudaMemcpy(h.data(), di, 96 * sizeof(int), cudaMemcpyDeviceToHost);
  ok(h[0] == 0 && h[1] == 1 && h[4] == 10 && h[12] == 100 && h[23] == 123 && h[95] == 123,
     "threadIdx.x/y/z and blockIdx.x/y of a 3-d block in a 2-d grid");

  struct { dim3 g, b; size_t sh; const char *what; } bad[] = {
      {dim3(1), dim3(1025), 0, "a block of 1025 threads"},
      {dim3(1), dim3(32, 32, 2), 0, "a block of 32x32x2 threads"},
      {dim3(1), dim3(1, 1, 65), 0, "a block z of 65"},
      {dim3(1, 65536), dim3(32), 0, "a grid y of 65536"},
      {dim3(0), dim3(32), 0, "an empty grid"},
      {dim3(1), dim3(0), 0, "an empty block"},
  };
  for (auto &c : bad) {
    CU_LAUNCH((c.g, c.b, c.sh, 0), k_nothing)(0);
    char what[96];
    snprintf(what, sizeof what, "%s: cudaErrorInvalidConfiguration", c.what);
    ok(cudaGetLastError() == cudaErrorInvalidConfiguration, what);
  }
  ok(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets the error");
  CU_LAUNCH((1, 32, (48 << 10) + 4, 0), k_nothing)(0);
  ok(cudaGetLastError() == cudaErrorInvalidValue, "48 KiB + 4 of dynamic shared memory without the opt-in: refused");
  cudaFuncSetAttribute(k_nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10);
  CU_LAUNCH((1, 32, (48 << 10) + 4, 0), k_nothing)(0);
  ok(cudaGetLastError() == cudaSuccess, "... and allowed after cudaFuncSetAttribute");

  CU_LAUNCH((1, 64, 0, 0), k_early_exit)(di);
  ok(cudaGetLastError() == cudaErrorLaunchFailure, "a __syncthreads that a thread never reaches fails the launch");
#ifndef __SANITIZE_ADDRESS__  // (there ASan reports these writes itself)
  CU_LAUNCH((1, 32, 31 * sizeof(float), 0), k_dyn_reverse)(df, 32);  // one float short
  ok(cudaGetLastError() == cudaErrorIllegalAddress, "a write past the dynamic shared memory: illegal address");
  CU_LAUNCH((1, 2, 0, 0), k_past_end)(di, 4096);
  ok(cudaGetLastError() == cudaErrorIllegalAddress, "a write past a cudaMalloc'ed block: illegal address");
#endif
  void *huge;
  ok(cudaMalloc(&huge, (size_t)1 << 50) == cudaErrorMemoryAllocation && cudaGetLastError() == cudaErrorMemoryAllocation,
     "more than the device's memory: cudaErrorMemoryAllocation");
  printf("1..%d\n", n_test);
  return n_fail != 0;
}
