/* iter.c: the strided, broadcasting, multithreaded elementwise iterator. */
#include <math.h>
#include <string.h>

#include "../backend/math.h"
#include "cpu.h"
#ifdef _OPENMP
#include <omp.h>
#endif

int cpu_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void cpu_iter_init(cpu_iter *it, int nops, const zorch_tensor *const *ts) {
  const zorch_tensor *t0 = ts[0];
  it->nops = nops;
  it->numel = shape_numel(t0->ndim, t0->shape);
  for (int k = 0; k < nops; k++) it->base[k] = tensor_ptr(ts[k]);
  /* keep dims of size > 1, with byte strides */
  int nd = 0;
  for (int i = 0; i < t0->ndim; i++) {
    if (t0->shape[i] == 1) continue;
    it->shape[nd] = t0->shape[i];
    for (int k = 0; k < nops; k++)
      it->st[k][nd] = ts[k]->strides[i] * (int64_t)dtype_sizes[ts[k]->dtype];
    nd++;
  }
  if (nd == 0) {
    it->shape[0] = 1;
    for (int k = 0; k < nops; k++) it->st[k][0] = (int64_t)dtype_sizes[ts[k]->dtype];
    nd = 1;
  }
  /* merge dim i into i+1 when every operand steps through them as one */
  int out = 0;
  for (int i = 1; i < nd; i++) {
    bool merge = true;
    for (int k = 0; k < nops && merge; k++)
      merge = it->st[k][out] == it->st[k][i] * it->shape[i];
    if (merge) {
      it->shape[out] *= it->shape[i];
      for (int k = 0; k < nops; k++) it->st[k][out] = it->st[k][i];
    } else {
      out++;
      it->shape[out] = it->shape[i];
      for (int k = 0; k < nops; k++) it->st[k][out] = it->st[k][i];
    }
  }
  it->ndim = out + 1;
}

/* Runs elements [start, end) in row-major order. */
static void iter_range(const cpu_iter *it, int64_t start, int64_t end, cpu_loop fn,
                       const double *prm) {
  int nd = it->ndim, last = nd - 1;
  int64_t idx[ZORCH_MAX_DIMS];
  int64_t rem = start;
  for (int i = last; i >= 0; i--) {
    idx[i] = rem % it->shape[i];
    rem /= it->shape[i];
  }
  int64_t inner_st[CPU_MAX_OPS];
  for (int k = 0; k < it->nops; k++) inner_st[k] = it->st[k][last];
  int64_t cur = start;
  while (cur < end) {
    char *p[CPU_MAX_OPS];
    for (int k = 0; k < it->nops; k++) {
      int64_t off = 0;
      for (int i = 0; i < nd; i++) off += idx[i] * it->st[k][i];
      p[k] = it->base[k] + off;
    }
    int64_t n = it->shape[last] - idx[last];
    if (n > end - cur) n = end - cur;
    fn(p, inner_st, n, prm);
    cur += n;
    idx[last] += n;
    for (int i = last; i > 0 && idx[i] >= it->shape[i]; i--) {
      idx[i] = 0;
      idx[i - 1]++;
    }
  }
}

void cpu_iter_run(const cpu_iter *it, cpu_loop fn, const double *prm) {
  cpu_iter_run_grain(it, fn, prm, CPU_GRAIN);
}

void cpu_iter_run_grain(const cpu_iter *it, cpu_loop fn, const double *prm, int64_t grain) {
  int64_t n = it->numel;
  if (n == 0) return;
  int nt = cpu_threads();
  if (n < grain || nt <= 1) {
    iter_range(it, 0, n, fn, prm);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    int tid = omp_get_thread_num(), tn = omp_get_num_threads();
#else
    int tid = 0, tn = 1;
#endif
    /* chunks aligned to 16 elements keep vector loops whole */
    int64_t per = ((n + tn - 1) / tn + 15) & ~(int64_t)15;
    int64_t s = per * tid, e = s + per < n ? s + per : n;
    if (s < e) iter_range(it, s, e, fn, prm);
  }
}

double cpu_load(const char *p, zorch_dtype dt) {
  switch (dt) {
    case ZORCH_F32: { float v; memcpy(&v, p, 4); return v; }
    case ZORCH_F64: { double v; memcpy(&v, p, 8); return v; }
    case ZORCH_BF16: { uint16_t v; memcpy(&v, p, 2); return zm_bf16_to_f32(v); }
    case ZORCH_F16: { uint16_t v; memcpy(&v, p, 2); return zm_f16_to_f32(v); }
    case ZORCH_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ZORCH_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case ZORCH_U8: case ZORCH_BOOL: return (unsigned char)*p;
    case ZORCH_I8: return (signed char)*p;
    default: return 0;
  }
}

/* Out-of-range values saturate (C leaves the cast undefined). */
static double sat(double v, double lo, double hi) {
  if (v != v) return 0;
  return v < lo ? lo : (v > hi ? hi : v);
}

void cpu_store(char *p, zorch_dtype dt, double v) {
  switch (dt) {
    case ZORCH_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case ZORCH_F64: memcpy(p, &v, 8); break;
    case ZORCH_BF16: { uint16_t h = zm_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case ZORCH_F16: { uint16_t h = zm_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case ZORCH_I32: { int32_t i = (int32_t)sat(v, -2147483648.0, 2147483647.0); memcpy(p, &i, 4); break; }
    case ZORCH_I64: { int64_t i = (int64_t)sat(v, -9223372036854775808.0, 9223372036854774784.0); memcpy(p, &i, 8); break; }
    case ZORCH_U8: *(unsigned char *)p = (unsigned char)sat(v, 0, 255); break;
    case ZORCH_I8: *(signed char *)p = (signed char)sat(v, -128, 127); break;
    case ZORCH_BOOL: *(unsigned char *)p = v != 0; break;
    default: break;
  }
}
