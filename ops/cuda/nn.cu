// nn.cu: index_select and index_add, the cross-entropy pieces and layer norm.
// Sums in double in a fixed order: deterministic, no atomics. Indices are
// checked by the kernels, which skip a bad one and leave it for the next wait
// for the device to report (cu_report_bad): nothing waits here.
#include "cuda.h"

__global__ void k_index_select(char *out, const char *a, const int64_t *ix, int64_t outer, int64_t n, int64_t ni,
                               int64_t row, int64_t *bad) {
  FOR(j, outer * ni * row) {
    int64_t b = j % row, k = (j / row) % ni, o = j / (row * ni), v = ix[k];
    if (v < 0 || v >= n) {
      cu_report_bad(bad, CU_BAD_INDEX_SELECT, v, n);
      out[j] = 0;
    } else {
      out[j] = a[(o * n + v) * row + b];
    }
  }
}

zorch_status cuda_index_select(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *idx, int64_t outer,
                                      int64_t n, int64_t inner) {
  int dev = cu_dev(out);
  int64_t ni = shape_numel(idx->ndim, idx->shape), row = inner * (int64_t)dtype_sizes[a->dtype];
  if (outer * ni * row == 0) return ZORCH_OK;
  CU_LAUNCH(ON(outer * ni * row, dev), k_index_select)(tensor_ptr(out), tensor_ptr(a), (const int64_t *)tensor_ptr(idx), outer,
                                                n, ni, row, cu_bad_index_word(dev));
  return cu_launched("index_select");
}

// one thread per (outer, column): adds the rows in index order, so the result
// does not depend on scheduling (no atomics); 16-bit floats add in float and
// round after each add, as the CPU kernel does
template <typename S>
__global__ void k_index_add(char *out, const char *src, const int64_t *ix, int64_t outer, int64_t n, int64_t ni,
                            int64_t inner, int64_t *bad) {
  FOR(j, outer * inner) {
    int64_t o = j / inner, i = j % inner;
    for (int64_t k = 0; k < ni; k++) {
      int64_t v = ix[k];
      if (v < 0 || v >= n) {
        cu_report_bad(bad, CU_BAD_INDEX_ADD, v, n);
      } else {
        char *d = out + ((o * n + v) * inner + i) * (int64_t)sizeof(S);
        io<S>::st(d, io<S>::ld(d) + io<S>::ld(src + ((o * ni + k) * inner + i) * (int64_t)sizeof(S)));
      }
    }
  }
}

zorch_status cuda_index_add(zorch_tensor *out, const zorch_tensor *src, const zorch_tensor *idx, int64_t outer,
                                   int64_t n, int64_t inner) {
  int dev = cu_dev(out);
  int64_t ni = shape_numel(idx->ndim, idx->shape);
  if (outer * inner == 0) return ZORCH_OK;
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  bool done = false;
  CU_FLOAT_DISPATCH(out->dtype, (CU_LAUNCH(ON(outer * inner, dev), k_index_add<S>)((char *)tensor_ptr(out),
                                   (const char *)tensor_ptr(src), ix, outer, n, ni, inner, cu_bad_index_word(dev)),
                                 done = true));
  return done ? cu_launched("index_add") : cu_no_kernel("index_add", out->dtype);
}

template <typename T>
__global__ void k_nll(T *loss, const T *lp, const int64_t *t, int64_t n, int64_t c, int64_t ignore, const T *g, int bwd,
                      int64_t *bad) {
  FOR(i, n) {
    int64_t v = t[i];
    bool skip = v == ignore;
    if (!skip && (v < 0 || v >= c)) {
      cu_report_bad(bad, CU_BAD_TARGET, v, c);
      skip = true;
    }
    if (bwd) {
      if (!skip) loss[i * c + v] = -g[i];
    } else {
      loss[i] = skip ? (T)0 : -lp[i * c + v];
    }
  }
}

static zorch_status nll_any(zorch_tensor *dst, const zorch_tensor *src, const zorch_tensor *t, int64_t n, int64_t c,
                            int64_t ignore, bool bwd) {
  int dev = cu_dev(dst);
  if (n == 0) return ZORCH_OK;
  const int64_t *tg = (const int64_t *)tensor_ptr(t);
  CU_REAL(dst->dtype, "cross_entropy",
          (CU_LAUNCH(ON(n, dev), k_nll<T>)((T *)tensor_ptr(dst), bwd ? nullptr : (const T *)tensor_ptr(src), tg, n, c, ignore,
                                    bwd ? (const T *)tensor_ptr(src) : nullptr, bwd, cu_bad_index_word(dev))));
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
    CU_LAUNCH((row_blocks(rows), 256, 0, cu_stream(dev)), k_layer_norm<T, true>)(y, mean, rstd, x, w, b, rows, cols, eps);
  else
    CU_LAUNCH(ON(rows, dev), k_layer_norm<T, false>)(y, mean, rstd, x, w, b, rows, cols, eps);
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
    CU_LAUNCH((row_blocks(rows), 256, 0, cu_stream(dev)), k_ln_bwd_x<T, true>)(gxp, gp, xp, mp, rp, wp, rows, cols);
  else
    CU_LAUNCH(ON(rows, dev), k_ln_bwd_x<T, false>)(gxp, gp, xp, mp, rp, wp, rows, cols);
  if (gw || gb)
    CU_LAUNCH(ON(cols, dev), k_ln_bwd_wb<T>)(gw ? (T *)tensor_ptr(gw) : nullptr, gb ? (T *)tensor_ptr(gb) : nullptr,
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

// ---- SwiGLU (include/zorch_ops.h): silu(a) * b, the registry's silu formulas ----
template <typename T>
__global__ void k_swiglu(T *out, const T *a, const T *b, int64_t n) {
  FOR(i, n) out[i] = zm_silu(a[i]) * b[i];
}

template <typename T>
__global__ void k_swiglu_bwd(T *ga, T *gb, const T *g, const T *a, const T *b, int64_t n) {
  FOR(i, n) {
    if (ga) ga[i] = zm_silu_bwd(g[i] * b[i], a[i]);
    if (gb) gb[i] = g[i] * zm_silu(a[i]);
  }
}

template <typename T>
static void swiglu(T *out, const T *a, const T *b, int64_t n, int dev) {
  CU_LAUNCH(ON(n, dev), k_swiglu<T>)(out, a, b, n);
}

template <typename T>
static void swiglu_bwd(T *ga, T *gb, const T *g, const T *a, const T *b, int64_t n, int dev) {
  CU_LAUNCH(ON(n, dev), k_swiglu_bwd<T>)(ga, gb, g, a, b, n);
}

zorch_status cuda_swiglu(zorch_tensor *out, const zorch_tensor *a, const zorch_tensor *b, int64_t n) {
  CU_REAL(a->dtype, "swiglu",
          swiglu<T>((T *)tensor_ptr(out), (const T *)tensor_ptr(a), (const T *)tensor_ptr(b), n, cu_dev(out)));
}

zorch_status cuda_swiglu_bwd(zorch_tensor *ga, zorch_tensor *gb, const zorch_tensor *g, const zorch_tensor *a,
                             const zorch_tensor *b, int64_t n) {
  CU_REAL(a->dtype, "swiglu backward",
          swiglu_bwd<T>(ga ? (T *)tensor_ptr(ga) : nullptr, gb ? (T *)tensor_ptr(gb) : nullptr,
                        (const T *)tensor_ptr(g), (const T *)tensor_ptr(a), (const T *)tensor_ptr(b), n, cu_dev(g)));
}
