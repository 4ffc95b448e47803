// index.cu: gather, scatter and sort along a dim. The line and row logic is
// ops/backend/math.h's, which the CPU kernels run too. Scatters run one thread per
// line, in index order: the lines write disjoint places, so there are no
// atomics and repeated indices give the CPU's answer. Bad indices are skipped
// and reported at the next wait for the device (cu_report_bad).
#include "cuda.h"

// Copies one element of es bytes.
__device__ inline void copy_elem(char *dst, const char *src, size_t es) {
  switch (es) {
    case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
    default: *dst = *src; break;
  }
}

// Elements after dim in a contiguous shape: the stride of dim.
static int64_t inner_of(const int64_t *shape, int ndim, int dim) {
  int64_t s = 1;
  for (int k = dim + 1; k < ndim; k++) s *= shape[k];
  return s;
}

// one thread per element of the index; element e = (o, j, i) of the index
// shape taken as (before dim, dim, after dim) lies on line o * si + i
__global__ void k_gather(char *out, const char *a, const int64_t *ix, index_geom g, int64_t numel, int64_t si,
                         int64_t sa, size_t es, int64_t *bad) {
  int d = g.dim;
  int64_t m = g.ishape[d], n = g.ashape[d];
  FOR(e, numel) {
    int64_t i = e % si, o = e / (si * m), v = ix[e];
    if (v < 0 || v >= n) {
      cu_report_bad(bad, CU_BAD_GATHER, v, n);
      continue;
    }
    int64_t ba = zm_line_offset(o * si + i, g.ndim, d, g.ishape, g.ashape);
    copy_elem(out + e * es, a + (ba + v * sa) * es, es);
  }
}

zorch_status cuda_gather(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx, const index_geom *g) {
  int64_t numel = shape_numel(g->ndim, g->ishape);
  if (!numel) return ZORCH_OK;
  int dev = cu_dev(out);
  CU_LAUNCH(ON(numel, dev), k_gather)(tensor_ptr(out), tensor_ptr(a), (const int64_t *)tensor_ptr(idx), *g, numel,
                               inner_of(g->ishape, g->ndim, g->dim), inner_of(g->ashape, g->ndim, g->dim),
                               dtype_sizes[a->dtype], cu_bad_index_word(dev));
  return cu_launched("gather");
}

template <typename T>
__global__ void k_scatter_add(T *out, const int64_t *ix, const T *src, index_geom g, int64_t lines, int64_t si,
                              int64_t sa, int64_t *bad) {
  int d = g.dim;
  int64_t m = g.ishape[d], n = g.ashape[d];
  FOR(line, lines) {
    int64_t bi = zm_line_offset(line, g.ndim, d, g.ishape, g.ishape);
    int64_t ba = zm_line_offset(line, g.ndim, d, g.ishape, g.ashape);
    for (int64_t j = 0; j < m; j++) {
      int64_t e = bi + j * si, v = ix[e];
      if (v < 0 || v >= n) cu_report_bad(bad, CU_BAD_SCATTER_ADD, v, n);
      else out[ba + v * sa] += src[e];
    }
  }
}

__global__ void k_scatter(char *out, const int64_t *ix, const char *src, index_geom g, int64_t lines, int64_t si,
                          int64_t sa, size_t es, int64_t *bad) {
  int d = g.dim;
  int64_t m = g.ishape[d], n = g.ashape[d];
  FOR(line, lines) {
    int64_t bi = zm_line_offset(line, g.ndim, d, g.ishape, g.ishape);
    int64_t ba = zm_line_offset(line, g.ndim, d, g.ishape, g.ashape);
    for (int64_t j = 0; j < m; j++) {
      int64_t e = bi + j * si, v = ix[e];
      if (v < 0 || v >= n) cu_report_bad(bad, CU_BAD_SCATTER, v, n);
      else copy_elem(out + (ba + v * sa) * es, src + e * es, es);
    }
  }
}

zorch_status cuda_scatter(zorch_tensor *out, const zorch_tensor *idx, const zorch_tensor *src, const index_geom *g,
                          bool add) {
  int64_t numel = shape_numel(g->ndim, g->ishape);
  if (!numel) return ZORCH_OK;
  int dev = cu_dev(out);
  int64_t lines = numel / g->ishape[g->dim], si = inner_of(g->ishape, g->ndim, g->dim);
  int64_t sa = inner_of(g->ashape, g->ndim, g->dim);
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int64_t *bad = cu_bad_index_word(dev);
  if (!add) {
    CU_LAUNCH(ON(lines, dev), k_scatter)(tensor_ptr(out), ix, tensor_ptr(src), *g, lines, si, sa, dtype_sizes[out->dtype],
                                  bad);
  } else if (out->dtype == ZORCH_I64) {
    CU_LAUNCH(ON(lines, dev), k_scatter_add<int64_t>)((int64_t *)tensor_ptr(out), ix, (const int64_t *)tensor_ptr(src), *g,
                                               lines, si, sa, bad);
  } else {
    CU_REAL(out->dtype, "scatter_add",
            (CU_LAUNCH(ON(lines, dev), k_scatter_add<T>)((T *)tensor_ptr(out), ix, (const T *)tensor_ptr(src), *g, lines, si,
                                                  sa, bad)));
  }
  return cu_launched(add ? "scatter_add" : "scatter");
}

__device__ inline void sort_row(const float *v, int64_t s, int64_t n, int desc, int64_t *idx, int64_t *tmp) {
  zm_sort_row_f32(v, s, n, desc, idx, tmp);
}
__device__ inline void sort_row(const double *v, int64_t s, int64_t n, int desc, int64_t *idx, int64_t *tmp) {
  zm_sort_row_f64(v, s, n, desc, idx, tmp);
}
__device__ inline void sort_row(const int64_t *v, int64_t s, int64_t n, int desc, int64_t *idx, int64_t *tmp) {
  zm_sort_row_i64(v, s, n, desc, idx, tmp);
}

// one thread per (outer, inner) row, merge-sorting its positions in `scratch`
// (2n entries a row): the CPU's sort, so equal values come out in the same order
template <typename T>
__global__ void k_sort(T *vals, int64_t *idx, const T *a, int64_t outer, int64_t n, int64_t inner, int desc,
                       int64_t *scratch) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    const T *row = a + o * n * inner + i;
    int64_t *perm = scratch + j * 2 * n;
    sort_row(row, inner, n, desc, perm, perm + n);
    for (int64_t k = 0; k < n; k++) {
      vals[(o * n + k) * inner + i] = row[perm[k] * inner];
      idx[(o * n + k) * inner + i] = perm[k];
    }
  }
}

zorch_status cuda_sort(zorch_tensor *values, zorch_tensor *idx, const zorch_tensor *a, int64_t outer, int64_t n,
                       int64_t inner, bool descending) {
  if (outer * n * inner == 0) return ZORCH_OK;
  if (a->dtype != ZORCH_F32 && a->dtype != ZORCH_F64 && a->dtype != ZORCH_I64) return cu_no_kernel("sort", a->dtype);
  int dev = cu_dev(a);
  int64_t *scratch = (int64_t *)cuda_alloc(dev, (size_t)(outer * inner) * 2 * (size_t)n * sizeof(int64_t));
  if (!scratch) return zorch_last_status();
  int64_t *ix = (int64_t *)tensor_ptr(idx);
  if (a->dtype == ZORCH_F32)
    CU_LAUNCH(ON(outer * inner, dev), k_sort<float>)((float *)tensor_ptr(values), ix, (const float *)tensor_ptr(a), outer, n,
                                              inner, descending, scratch);
  else if (a->dtype == ZORCH_F64)
    CU_LAUNCH(ON(outer * inner, dev), k_sort<double>)((double *)tensor_ptr(values), ix, (const double *)tensor_ptr(a), outer,
                                               n, inner, descending, scratch);
  else
    CU_LAUNCH(ON(outer * inner, dev), k_sort<int64_t>)((int64_t *)tensor_ptr(values), ix, (const int64_t *)tensor_ptr(a),
                                                outer, n, inner, descending, scratch);
  zorch_status st = cu_launched("sort");
  cuda_free(dev, scratch);  // reused only by work queued after the kernel
  return st;
}
