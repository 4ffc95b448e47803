/* index.c: CPU gather, scatter and sort along a dim. The row and line logic is
   ops/backend/math.h's, which the CUDA kernels run too. */
#include <stdlib.h>
#include <string.h>

#include "../backend/math.h"
#include "cpu.h"
#include "kernels.h"

/* The first index of idx (n entries) outside [0, size), as an error naming op. */
static zorch_status check_indices(const char *op, const int64_t *ix, int64_t n, int64_t size) {
  for (int64_t k = 0; k < n; k++)
    if (ix[k] < 0 || ix[k] >= size)
      return cpu_bad_index(op, ix[k], k, size);
  return ZORCH_OK;
}

/* Elements after dim in a contiguous shape: the stride of dim. */
static int64_t inner_of(const int64_t *shape, int ndim, int dim) {
  int64_t s = 1;
  for (int k = dim + 1; k < ndim; k++) s *= shape[k];
  return s;
}

zorch_status cpu_gather(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx,
                        const index_geom *g) {
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int nd = g->ndim, d = g->dim;
  int64_t numel = shape_numel(nd, g->ishape), m = g->ishape[d];
  if (numel == 0) return ZORCH_OK;
  zorch_status st = check_indices("gather", ix, numel, g->ashape[d]);
  if (st) return st;
  int64_t si = inner_of(g->ishape, nd, d), sa = inner_of(g->ashape, nd, d);
  size_t es = dtype_sizes[a->dtype];
  const char *src = tensor_ptr(a);
  char *dst = tensor_ptr(out);
  for (int64_t line = 0; line < numel / m; line++) {
    int64_t bi = zm_line_offset(line, nd, d, g->ishape, g->ishape);
    int64_t ba = zm_line_offset(line, nd, d, g->ishape, g->ashape);
    for (int64_t j = 0; j < m; j++) {
      int64_t e = bi + j * si;
      memcpy(dst + (size_t)e * es, src + (size_t)(ba + ix[e] * sa) * es, es);
    }
  }
  return ZORCH_OK;
}

#define SCATTER_ADD(T)                                                      \
  {                                                                         \
    T *o_ = (T *)tensor_ptr(out);                                           \
    const T *s_ = (const T *)tensor_ptr(src);                               \
    for (int64_t line = 0; line < numel / m; line++) {                      \
      int64_t bi = zm_line_offset(line, nd, d, g->ishape, g->ishape);       \
      int64_t ba = zm_line_offset(line, nd, d, g->ishape, g->ashape);       \
      for (int64_t j = 0; j < m; j++) {                                     \
        int64_t e = bi + j * si;                                            \
        o_[ba + ix[e] * sa] += s_[e];                                       \
      }                                                                     \
    }                                                                       \
  }

zorch_status cpu_scatter(zorch_tensor *out, const zorch_tensor *idx, const zorch_tensor *src,
                         const index_geom *g, bool add) {
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  int nd = g->ndim, d = g->dim;
  int64_t numel = shape_numel(nd, g->ishape), m = g->ishape[d];
  const char *op = add ? "scatter_add" : "scatter";
  if (numel == 0) return ZORCH_OK;
  zorch_status st = check_indices(op, ix, numel, g->ashape[d]);
  if (st) return st;
  int64_t si = inner_of(g->ishape, nd, d), sa = inner_of(g->ashape, nd, d);
  if (add) {
    CPU_REAL_DISPATCH(out->dtype, "scatter_add", SCATTER_ADD);
    return ZORCH_OK;
  }
  size_t es = dtype_sizes[out->dtype];
  const char *s = tensor_ptr(src);
  char *o = tensor_ptr(out);
  for (int64_t line = 0; line < numel / m; line++) {
    int64_t bi = zm_line_offset(line, nd, d, g->ishape, g->ishape);
    int64_t ba = zm_line_offset(line, nd, d, g->ishape, g->ashape);
    for (int64_t j = 0; j < m; j++) {
      int64_t e = bi + j * si;
      memcpy(o + (size_t)(ba + ix[e] * sa) * es, s + (size_t)e * es, es);
    }
  }
  return ZORCH_OK;
}

#define SORT_ROWS(T, SUF)                                                   \
  {                                                                         \
    T *v_ = (T *)tensor_ptr(values);                                        \
    const T *a_ = (const T *)tensor_ptr(a);                                 \
    for (int64_t o = 0; o < outer; o++)                                     \
      for (int64_t i = 0; i < inner; i++) {                                 \
        const T *row = a_ + o * n * inner + i;                              \
        zm_sort_row_##SUF(row, inner, n, descending, perm, perm + n);       \
        for (int64_t j = 0; j < n; j++) {                                   \
          v_[(o * n + j) * inner + i] = row[perm[j] * inner];               \
          ix[(o * n + j) * inner + i] = perm[j];                            \
        }                                                                   \
      }                                                                     \
  }

zorch_status cpu_sort(zorch_tensor *values, zorch_tensor *idx, const zorch_tensor *a,
                      int64_t outer, int64_t n, int64_t inner, bool descending) {
  if (outer * n * inner == 0) return ZORCH_OK;
  if (a->dtype != ZORCH_F32 && a->dtype != ZORCH_F64 && a->dtype != ZORCH_I64)
    return err_set(ZORCH_ERR_DTYPE, "sort: no CPU kernel for dtype %s", zorch_dtype_name(a->dtype));
  int64_t *perm = malloc(2 * (size_t)n * sizeof(int64_t)), *ix = (int64_t *)tensor_ptr(idx);
  if (!perm)
    return err_set(ZORCH_ERR_OOM, "sort: out of memory for %lld scratch indices", (long long)(2 * n));
  switch (a->dtype) {
    case ZORCH_F32: SORT_ROWS(float, f32) break;
    case ZORCH_F64: SORT_ROWS(double, f64) break;
    default: SORT_ROWS(int64_t, i64) break;
  }
  free(perm);
  return ZORCH_OK;
}
