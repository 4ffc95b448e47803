// nn.cu: index_select and index_add, the cross-entropy pieces and layer norm.
// One thread per output row or column with loops inside, sums in double in a
// fixed order: deterministic, no atomics.
#include <vector>

#include "cuda.h"

// Indices are checked on the host: one copy of the (small) index tensor.
static zorch_status check_indices(const char *op, const zorch_tensor *idx, int64_t n, int64_t ignore, bool has_ignore) {
  int64_t k = shape_numel(idx->ndim, idx->shape);
  std::vector<int64_t> h((size_t)(k ? k : 1));
  zorch_status st = cuda_to_host(h.data(), tensor_ptr(idx), (size_t)k * sizeof(int64_t), cu_dev(idx));
  if (st) return st;
  for (int64_t i = 0; i < k; i++)
    if (!(has_ignore && h[(size_t)i] == ignore) && (h[(size_t)i] < 0 || h[(size_t)i] >= n))
      return err_set(ZORCH_ERR_ARG, "%s: index %lld out of range for a dimension of size %lld", op,
                     (long long)h[(size_t)i], (long long)n);
  return ZORCH_OK;
}

__global__ void k_index_select(char *out, const char *a, const int64_t *ix, int64_t outer, int64_t n, int64_t ni,
                               int64_t row) {
  FOR(j, outer * ni * row) {
    int64_t b = j % row, k = (j / row) % ni, o = j / (row * ni);
    out[j] = a[(o * n + ix[k]) * row + b];
  }
}

zorch_status cuda_index_select(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx, int64_t outer,
                                      int64_t n, int64_t inner) {
  int dev = cu_dev(out);
  int64_t ni = shape_numel(idx->ndim, idx->shape), row = inner * (int64_t)dtype_sizes[a->dtype];
  zorch_status st = check_indices("index_select", idx, n, 0, false);
  if (st || outer * ni * row == 0) return st;
  k_index_select<<<ON(outer * ni * row, dev)>>>(tensor_ptr(out), tensor_ptr(a), (const int64_t *)tensor_ptr(idx), outer,
                                             n, ni, row);
  return cu_launched("index_select");
}

// one thread per (outer, column): adds the rows in index order, so the result
// does not depend on scheduling (no atomics)
template <typename T>
__global__ void k_index_add(T *out, const T *src, const int64_t *ix, int64_t outer, int64_t n, int64_t ni, int64_t inner) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    for (int64_t k = 0; k < ni; k++) out[(o * n + ix[k]) * inner + i] += src[(o * ni + k) * inner + i];
  }
}

zorch_status cuda_index_add(zorch_tensor *out, const zorch_tensor *src, const zorch_tensor *idx, int64_t outer,
                                   int64_t n, int64_t inner) {
  int dev = cu_dev(out);
  int64_t ni = shape_numel(idx->ndim, idx->shape);
  zorch_status st = check_indices("index_add", idx, n, 0, false);
  if (st || outer * inner == 0) return st;
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  CU_REAL(out->dtype, "index_add",
          (k_index_add<T><<<ON(outer * inner, dev)>>>((T *)tensor_ptr(out), (const T *)tensor_ptr(src), ix, outer, n, ni, inner)));
}

template <typename T>
__global__ void k_nll(T *loss, const T *lp, const int64_t *t, int64_t n, int64_t c, int64_t ignore, const T *g, int bwd) {
  FOR(i, n) {
    if (bwd) { if (t[i] != ignore) loss[i * c + t[i]] = -g[i]; }
    else loss[i] = t[i] == ignore ? (T)0 : -lp[i * c + t[i]];
  }
}

static zorch_status nll_any(zorch_tensor *dst, const zorch_tensor *src, const zorch_tensor *t, int64_t n, int64_t c,
                            int64_t ignore, bool bwd) {
  int dev = cu_dev(dst);
  zorch_status st = check_indices("cross_entropy", t, c, ignore, true);
  if (st || n == 0) return st;
  const int64_t *tg = (const int64_t *)tensor_ptr(t);
  CU_REAL(dst->dtype, "cross_entropy",
          (k_nll<T><<<ON(n, dev)>>>((T *)tensor_ptr(dst), bwd ? nullptr : (const T *)tensor_ptr(src), tg, n, c, ignore,
                                 bwd ? (const T *)tensor_ptr(src) : nullptr, bwd)));
}
zorch_status cuda_nll(zorch_tensor *loss, const zorch_tensor *logp, const zorch_tensor *t, int64_t n, int64_t c,
                             int64_t ignore) {
  return nll_any(loss, logp, t, n, c, ignore, false);
}
zorch_status cuda_nll_bwd(zorch_tensor *gin, const zorch_tensor *g, const zorch_tensor *t, int64_t n, int64_t c,
                                 int64_t ignore) {
  return nll_any(gin, g, t, n, c, ignore, true);
}

// Rows are normalised by one thread each, or, when they are long (BLOCK), by
// one block each with block-wide sums; both sum in double in a fixed order.
#define ROWS_LOOP(r, rows)                                                                    \
  const int lane = BLOCK ? threadIdx.x : 0, lanes = BLOCK ? blockDim.x : 1;                   \
  for (int64_t r = BLOCK ? blockIdx.x : blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < (rows); \
       r += BLOCK ? gridDim.x : (int64_t)gridDim.x * blockDim.x)
#define ROW_SUM(v) (BLOCK ? cu_block_sum(v) : (v))

template <typename T, bool BLOCK>
__global__ void k_layer_norm(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t rows, int64_t cols,
                             double eps) {
  ROWS_LOOP(r, rows) {
    const T *xr = x + r * cols;
    double s = 0, ss = 0;
    for (int64_t j = lane; j < cols; j += lanes) s += xr[j];
    double mu = ROW_SUM(s) / (double)cols;
    for (int64_t j = lane; j < cols; j += lanes) ss += ((double)xr[j] - mu) * ((double)xr[j] - mu);
    double rs = 1.0 / sqrt(ROW_SUM(ss) / (double)cols + eps);
    if (lane == 0) mean[r] = (T)mu, rstd[r] = (T)rs;
    for (int64_t j = lane; j < cols; j += lanes) {
      T v = (T)(((double)xr[j] - mu) * rs);
      if (w) v *= w[j];
      if (b) v += b[j];
      y[r * cols + j] = v;
    }
  }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

template <typename T>
static void layer_norm(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t rows, int64_t cols,
                       double eps, int dev) {
  if (cols >= 256)
    k_layer_norm<T, true><<<row_blocks(rows), 256, 0, cu_stream(dev)>>>(y, mean, rstd, x, w, b, rows, cols, eps);
  else
    k_layer_norm<T, false><<<ON(rows, dev)>>>(y, mean, rstd, x, w, b, rows, cols, eps);
}

zorch_status cuda_layer_norm(zorch_tensor *y, zorch_tensor *mean, zorch_tensor *rstd, const zorch_tensor *x,
                             const zorch_tensor *w, const zorch_tensor *b, int64_t rows, int64_t cols, double eps) {
  int dev = cu_dev(y);
  if (rows == 0) return ZORCH_OK;
  CU_REAL(x->dtype, "layer_norm",
          layer_norm<T>((T *)tensor_ptr(y), (T *)tensor_ptr(mean), (T *)tensor_ptr(rstd), (const T *)tensor_ptr(x),
                        w ? (const T *)tensor_ptr(w) : nullptr, b ? (const T *)tensor_ptr(b) : nullptr, rows, cols,
                        eps, dev));
}

// gx per row; gw, gb per column (rows in order: deterministic)
template <typename T, bool BLOCK>
__global__ void k_ln_bwd_x(T *gx, const T *g, const T *x, const T *mean, const T *rstd, const T *w, int64_t rows,
                           int64_t cols) {
  ROWS_LOOP(r, rows) {
    const T *gr = g + r * cols, *xr = x + r * cols;
    double mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
    for (int64_t j = lane; j < cols; j += lanes) {
      double gh = (double)gr[j] * (w ? (double)w[j] : 1.0);
      s1 += gh;
      s2 += gh * ((double)xr[j] - mu) * rs;
    }
    s1 = ROW_SUM(s1) / (double)cols;
    s2 = ROW_SUM(s2) / (double)cols;
    for (int64_t j = lane; j < cols; j += lanes) {
      double gh = (double)gr[j] * (w ? (double)w[j] : 1.0), xh = ((double)xr[j] - mu) * rs;
      gx[r * cols + j] = (T)(rs * (gh - s1 - xh * s2));
    }
  }
}
template <typename T>
__global__ void k_ln_bwd_wb(T *gw, T *gb, const T *g, const T *x, const T *mean, const T *rstd, int64_t rows,
                            int64_t cols) {
  FOR(j, cols) {
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < rows; r++) {
      double gv = g[r * cols + j];
      aw += gv * ((double)x[r * cols + j] - (double)mean[r]) * (double)rstd[r];
      ab += gv;
    }
    if (gw) gw[j] = (T)aw;
    if (gb) gb[j] = (T)ab;
  }
}

template <typename T>
static void ln_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb, const zorch_tensor *g, const zorch_tensor *x,
                   const zorch_tensor *mean, const zorch_tensor *rstd, const zorch_tensor *w, int64_t rows,
                   int64_t cols, int dev) {
  T *gxp = (T *)tensor_ptr(gx);
  const T *gp = (const T *)tensor_ptr(g), *xp = (const T *)tensor_ptr(x), *mp = (const T *)tensor_ptr(mean),
          *rp = (const T *)tensor_ptr(rstd), *wp = w ? (const T *)tensor_ptr(w) : nullptr;
  if (cols >= 256)
    k_ln_bwd_x<T, true><<<row_blocks(rows), 256, 0, cu_stream(dev)>>>(gxp, gp, xp, mp, rp, wp, rows, cols);
  else
    k_ln_bwd_x<T, false><<<ON(rows, dev)>>>(gxp, gp, xp, mp, rp, wp, rows, cols);
  if (gw || gb)
    k_ln_bwd_wb<T><<<ON(cols, dev)>>>(gw ? (T *)tensor_ptr(gw) : nullptr, gb ? (T *)tensor_ptr(gb) : nullptr,
                                   (const T *)tensor_ptr(g), (const T *)tensor_ptr(x), (const T *)tensor_ptr(mean),
                                   (const T *)tensor_ptr(rstd), rows, cols);
}

zorch_status cuda_layer_norm_bwd(zorch_tensor *gx, zorch_tensor *gw, zorch_tensor *gb, const zorch_tensor *g,
                                        const zorch_tensor *x, const zorch_tensor *mean, const zorch_tensor *rstd,
                                        const zorch_tensor *w, int64_t rows, int64_t cols) {
  int dev = cu_dev(gx);
  if (rows == 0) return ZORCH_OK;
  CU_REAL(x->dtype, "layer_norm backward", ln_bwd<T>(gx, gw, gb, g, x, mean, rstd, w, rows, cols, dev));
}

