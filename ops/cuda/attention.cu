// attention.cu: fused attention on CUDA, the same computation as the CPU's
// (ops/cpu/attention.c): an online softmax over the keys, a chunk of 256 keys at
// a time, keeping only the output and the per-row log-sum-exp; the backward
// recomputes the probabilities from them. A block of 256 threads owns one query
// row (forward, dQ) or one key row of a key/value head (dK, dV, summed over
// its query heads), so every sum runs in a fixed order
// and nothing is added atomically: the results repeat bit for bit. The rows
// live in shared memory (the head dim is limited by it).
#include "cuda.h"

#define ATT_T 256  // threads per block, the width of cu_block_max and cu_block_sum

static unsigned att_blocks(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

template <typename T>
__device__ inline T att_dot(const T *a, const T *b, int64_t d) {
  T s = 0;
  for (int64_t c = 0; c < d; c++) s += a[c] * b[c];
  return s;
}

// The rules of ops/cpu/attention.c on the device: query i of head h sees key j
// inside its band (causal: j <= i + off; the window: j > i + off - win) where
// the mask and the segments of h's batch allow; the additive mask adds to the
// scaled score. Passed to the kernels by value.
template <typename T>
struct att_rules {
  int64_t bh, tq, tk, d, heads, group, off, win;
  bool causal;
  const bool *keep;
  const T *add;
  int64_t ms[4];
  const int64_t *ks, *qs;
  int64_t kss, qss;
};

template <typename T>
static att_rules<T> att_rules_of(const att_geom *g) {
  att_rules<T> r = {g->bh, g->tq, g->tk, g->d, g->heads, g->group, g->tk - g->tq, g->window, g->causal,
                    nullptr, nullptr, {0, 0, 0, 0}, nullptr, nullptr, 0, 0};
  if (g->mask) {
    if (g->mask->dtype == ZORCH_BOOL) r.keep = (const bool *)tensor_ptr(g->mask);
    else r.add = (const T *)tensor_ptr(g->mask);
    for (int i = 0; i < 4; i++) r.ms[i] = g->mask->strides[i];
  }
  if (g->kseg) {
    r.ks = (const int64_t *)tensor_ptr(g->kseg), r.kss = g->kseg->strides[0];
    r.qs = (const int64_t *)tensor_ptr(g->qseg), r.qss = g->qseg->strides[0];
  }
  return r;
}

// The band of query i: keys [*lo, *hi).
template <typename T>
__device__ inline void att_band(const att_rules<T> &r, int64_t i, int64_t *lo, int64_t *hi) {
  int64_t a = r.win ? i + r.off - r.win + 1 : 0, b = r.causal ? i + r.off + 1 : r.tk;
  *lo = a < 0 ? 0 : a > r.tk ? r.tk : a;
  *hi = b < *lo ? *lo : b > r.tk ? r.tk : b;
}

// s (the scaled score of query i and key j of head h, inside the band) plus the
// additive mask, or -inf where the mask or the segments hide the key.
template <typename T>
__device__ inline T att_mod(const att_rules<T> &r, int64_t h, int64_t i, int64_t j, T s) {
  int64_t b = h / r.heads, m = b * r.ms[0] + (h % r.heads) * r.ms[1] + i * r.ms[2] + j * r.ms[3];
  if (r.add) s += r.add[m];
  if (r.keep && !r.keep[m]) return (T)-INFINITY;
  if (r.ks && r.ks[b * r.kss + j] != r.qs[b * r.qss + i]) return (T)-INFINITY;
  return s;
}

// One block per query row: scores of a chunk of keys (one per thread), the
// chunk's max and sum over the block, the output rescaled when the max grows.
template <typename T>
__global__ void k_att_fwd(T *out, T *lse, const T *q, const T *k, const T *v, att_rules<T> r, T scale) {
  CU_DYNAMIC_SHARED(unsigned char, att_sh);
  int64_t d = r.d, tq = r.tq, tk = r.tk;
  T *sq = (T *)att_sh, *acc = sq + d, *sp = acc + d;
  int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < r.bh * tq; row += gridDim.x) {
    int64_t h = row / tq, i = row % tq, klo, kend;
    const T *kh = k + (h / r.group) * tk * d, *vh = v + (h / r.group) * tk * d;
    for (int64_t c = t; c < d; c += ATT_T) sq[c] = q[row * d + c] * scale, acc[c] = 0;
    __syncthreads();
    att_band(r, i, &klo, &kend);
    T m = -INFINITY, l = 0;
    for (int64_t kb = klo; kb < kend; kb += ATT_T) {
      int64_t j = kb + t, kn = kend - kb < ATT_T ? kend - kb : ATT_T;
      T s = j < kend ? att_mod(r, h, i, j, att_dot(sq, kh + j * d, d)) : (T)-INFINITY;
      T mx = (T)cu_block_max((double)s);
      T mnew = mx > m ? mx : m;
      T alpha = m == -INFINITY ? (T)0 : exp(m - mnew);
      T p = s == (T)-INFINITY ? (T)0 : exp(s - mnew);  // (a hidden key, or past the band)
      sp[t] = p;
      l = l * alpha + (T)cu_block_sum((double)p);  // its barriers publish sp
      for (int64_t c = t; c < d; c += ATT_T) {
        T a = acc[c] * alpha;
        for (int64_t jj = 0; jj < kn; jj++) a += sp[jj] * vh[(kb + jj) * d + c];
        acc[c] = a;
      }
      m = mnew;
      __syncthreads();  // sp is rewritten by the next chunk
    }
    // l is 0 where the row sees no key, NaN where a score is NaN or infinite
    for (int64_t c = t; c < d; c += ATT_T) out[row * d + c] = l != 0 ? acc[c] / l : (T)0;
    if (t == 0) lse[row] = l != 0 ? m + log(l) : (T)-INFINITY;
    __syncthreads();
  }
}

// One block per query row: dsum = rowsum(dO * O) (kept for the dK/dV kernel)
// and dQ = scale * sum_j P (dP - dsum) K_j.
template <typename T>
__global__ void k_att_dq(T *dq, T *dsum, const T *g, const T *q, const T *k, const T *v, const T *o, const T *lse,
                         att_rules<T> r, T scale) {
  CU_DYNAMIC_SHARED(unsigned char, att_sh);
  int64_t d = r.d, tq = r.tq, tk = r.tk;
  T *sq = (T *)att_sh, *sg = sq + d, *acc = sg + d, *sds = acc + d;
  int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < r.bh * tq; row += gridDim.x) {
    int64_t h = row / tq, i = row % tq, klo, kend;
    const T *kh = k + (h / r.group) * tk * d, *vh = v + (h / r.group) * tk * d;
    double part = 0;
    for (int64_t c = t; c < d; c += ATT_T) {
      sq[c] = q[row * d + c], sg[c] = g[row * d + c], acc[c] = 0;
      part += (double)(g[row * d + c] * o[row * d + c]);
    }
    T ds_row = (T)cu_block_sum(part);  // its barriers publish sq and sg
    if (t == 0) dsum[row] = ds_row;
    T li = lse[row];
    att_band(r, i, &klo, &kend);
    if (li == (T)-INFINITY) kend = klo;
    for (int64_t kb = klo; kb < kend; kb += ATT_T) {
      int64_t j = kb + t, kn = kend - kb < ATT_T ? kend - kb : ATT_T;
      T ds = 0;
      if (j < kend) {
        T z = att_mod(r, h, i, j, att_dot(sq, kh + j * d, d) * scale);
        if (z != (T)-INFINITY) ds = exp(z - li) * (att_dot(sg, vh + j * d, d) - ds_row) * scale;
      }
      sds[t] = ds;
      __syncthreads();
      for (int64_t c = t; c < d; c += ATT_T) {
        T a = acc[c];
        for (int64_t jj = 0; jj < kn; jj++) a += sds[jj] * kh[(kb + jj) * d + c];
        acc[c] = a;
      }
      __syncthreads();
    }
    for (int64_t c = t; c < d; c += ATT_T) dq[row * d + c] = acc[c];
    __syncthreads();
  }
}

// One block per key row of a key/value head: dV_j = sum_i P_ij dO_i, dK_j =
// scale * sum_i dS_ij Q_i over the group's query heads (in order) and the
// queries that see key j.
template <typename T>
__global__ void k_att_dkv(T *dk, T *dv, const T *g, const T *q, const T *k, const T *v, const T *lse,
                          const T *dsum, att_rules<T> r, T scale) {
  CU_DYNAMIC_SHARED(unsigned char, att_sh);
  int64_t d = r.d, tq = r.tq, tk = r.tk;
  T *sk = (T *)att_sh, *sv = sk + d, *ak = sv + d, *av = ak + d, *sp = av + d, *sds = sp + ATT_T;
  int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < r.bh / r.group * tk; row += gridDim.x) {
    int64_t kvh = row / tk, j = row % tk;
    for (int64_t c = t; c < d; c += ATT_T) sk[c] = k[row * d + c], sv[c] = v[row * d + c], ak[c] = 0, av[c] = 0;
    __syncthreads();
    // the queries whose band holds key j
    int64_t ifirst = r.causal ? j - r.off : 0, iend = r.win ? j - r.off + r.win : tq;
    ifirst = ifirst < 0 ? 0 : ifirst;
    iend = iend > tq ? tq : iend;
    for (int64_t gi = 0; gi < r.group; gi++) {
      int64_t h = kvh * r.group + gi;
      const T *qh = q + h * tq * d, *gh = g + h * tq * d, *lh = lse + h * tq, *dh = dsum + h * tq;
      for (int64_t ib = ifirst; ib < iend; ib += ATT_T) {
        int64_t i = ib + t, in = iend - ib < ATT_T ? iend - ib : ATT_T;
        T p = 0, ds = 0;
        if (i < iend && lh[i] != (T)-INFINITY) {
          T z = att_mod(r, h, i, j, att_dot(qh + i * d, sk, d) * scale);
          if (z != (T)-INFINITY) {
            p = exp(z - lh[i]);
            ds = p * (att_dot(gh + i * d, sv, d) - dh[i]) * scale;
          }
        }
        sp[t] = p, sds[t] = ds;
        __syncthreads();
        for (int64_t c = t; c < d; c += ATT_T) {
          T a = ak[c], b = av[c];
          for (int64_t ii = 0; ii < in; ii++) {
            a += sds[ii] * qh[(ib + ii) * d + c];
            b += sp[ii] * gh[(ib + ii) * d + c];
          }
          ak[c] = a, av[c] = b;
        }
        __syncthreads();
      }
    }
    for (int64_t c = t; c < d; c += ATT_T) dk[row * d + c] = ak[c], dv[row * d + c] = av[c];
    __syncthreads();
  }
}

// The shared memory a kernel needs, or an error when the head dim is too large.
static zorch_status att_smem(int64_t d, int rows, int chunks, size_t es, size_t *bytes) {
  *bytes = ((size_t)rows * (size_t)d + (size_t)chunks * ATT_T) * es;
  if (*bytes > 48 * 1024)
    return err_set(ZORCH_ERR_ARG, "attention: head dim %lld is too large for the CUDA kernel (at most %lld)",
                   (long long)d, (long long)((48 * 1024 / es - (size_t)chunks * ATT_T) / (size_t)rows));
  return ZORCH_OK;
}

template <typename T>
static zorch_status att_fwd(zorch_tensor *out, zorch_tensor *lse, const zorch_tensor *q, const zorch_tensor *k,
                            const zorch_tensor *v, const att_geom *g) {
  size_t sh;
  if (att_smem(g->d, 2, 1, sizeof(T), &sh)) return zorch_last_status();
  if (g->bh * g->tq == 0) return ZORCH_OK;
  CU_LAUNCH((att_blocks(g->bh * g->tq), ATT_T, sh, cu_stream(cu_dev(out))), k_att_fwd<T>)(
      (T *)tensor_ptr(out), (T *)tensor_ptr(lse), (const T *)tensor_ptr(q), (const T *)tensor_ptr(k),
      (const T *)tensor_ptr(v), att_rules_of<T>(g), (T)g->scale);
  return cu_launched("attention");
}

zorch_status cuda_attention(zorch_tensor *out, zorch_tensor *lse, const zorch_tensor *q, const zorch_tensor *k,
                            const zorch_tensor *v, const att_geom *g) {
  if (q->dtype == ZORCH_F32) return att_fwd<float>(out, lse, q, k, v, g);
  if (q->dtype == ZORCH_F64) return att_fwd<double>(out, lse, q, k, v, g);
  return cu_no_kernel("attention", q->dtype);
}

template <typename T>
static zorch_status att_bwd(zorch_tensor *dq, zorch_tensor *dk, zorch_tensor *dv, const zorch_tensor *g,
                            const zorch_tensor *q, const zorch_tensor *k, const zorch_tensor *v,
                            const zorch_tensor *out, const zorch_tensor *lse, const att_geom *geo) {
  size_t sh_q, sh_kv;
  int64_t d = geo->d, nq = geo->bh * geo->tq, nk = geo->bh / geo->group * geo->tk;
  if (att_smem(d, 3, 1, sizeof(T), &sh_q) || att_smem(d, 4, 2, sizeof(T), &sh_kv)) return zorch_last_status();
  int dev = cu_dev(dq);
  cudaStream_t s = cu_stream(dev);
  if (nk > 0 && nq == 0) {  // no queries: no gradient reaches k and v
    CUDA_TRY(cudaMemsetAsync(tensor_ptr(dk), 0, (size_t)(nk * d) * sizeof(T), s));
    CUDA_TRY(cudaMemsetAsync(tensor_ptr(dv), 0, (size_t)(nk * d) * sizeof(T), s));
    return ZORCH_OK;
  }
  if (nq == 0) return ZORCH_OK;
  T *dsum = (T *)cuda_alloc(dev, (size_t)nq * sizeof(T));
  if (!dsum) return err_set(ZORCH_ERR_OOM, "attention: out of device memory for the backward's row sums");
  att_rules<T> r = att_rules_of<T>(geo);
  CU_LAUNCH((att_blocks(nq), ATT_T, sh_q, s), k_att_dq<T>)(
      (T *)tensor_ptr(dq), dsum, (const T *)tensor_ptr(g), (const T *)tensor_ptr(q), (const T *)tensor_ptr(k),
      (const T *)tensor_ptr(v), (const T *)tensor_ptr(out), (const T *)tensor_ptr(lse), r, (T)geo->scale);
  if (nk > 0)
    CU_LAUNCH((att_blocks(nk), ATT_T, sh_kv, s), k_att_dkv<T>)(
        (T *)tensor_ptr(dk), (T *)tensor_ptr(dv), (const T *)tensor_ptr(g), (const T *)tensor_ptr(q),
        (const T *)tensor_ptr(k), (const T *)tensor_ptr(v), (const T *)tensor_ptr(lse), dsum, r, (T)geo->scale);
  zorch_status st = cu_launched("attention");
  cuda_free(dev, dsum);  // reused only by work queued after these kernels
  return st;
}

zorch_status cuda_attention_bwd(zorch_tensor *dq, zorch_tensor *dk, zorch_tensor *dv, const zorch_tensor *dout,
                                const zorch_tensor *q, const zorch_tensor *k, const zorch_tensor *v,
                                const zorch_tensor *out, const zorch_tensor *lse, const att_geom *g) {
  if (q->dtype == ZORCH_F32) return att_bwd<float>(dq, dk, dv, dout, q, k, v, out, lse, g);
  if (q->dtype == ZORCH_F64) return att_bwd<double>(dq, dk, dv, dout, q, k, v, out, lse, g);
  return cu_no_kernel("attention", q->dtype);
}

// ---- rotary position embedding (include/zorch_ops.h), the CPU's formulas
// (ops/cpu/attention.c): one thread an element; the tables' gradients one
// thread a table entry, its rows summed in order in double (deterministic) ----
__device__ static inline int64_t rope_trow(int64_t r, int64_t heads, int64_t seq, bool per_batch) {
  return (per_batch ? r / (heads * seq) * seq : 0) + r % seq;
}

template <typename T>
__global__ void k_rope(T *out, const T *x, const T *c, const T *s, int64_t rows, int64_t heads, int64_t seq,
                       int64_t dim, bool per_batch) {
  int64_t h2 = dim / 2;
  FOR(i, rows * dim) {
    int64_t j = i % dim, r = i / dim, t = rope_trow(r, heads, seq, per_batch) * dim + j;
    out[i] = j < h2 ? x[i] * c[t] - x[i + h2] * s[t] : x[i] * c[t] + x[i - h2] * s[t];
  }
}

template <typename T>
__global__ void k_rope_bwd_x(T *gx, const T *g, const T *c, const T *s, int64_t rows, int64_t heads, int64_t seq,
                             int64_t dim, bool per_batch) {
  int64_t h2 = dim / 2;
  FOR(i, rows * dim) {
    int64_t j = i % dim, r = i / dim, t = rope_trow(r, heads, seq, per_batch) * dim + j;
    gx[i] = j < h2 ? g[i] * c[t] + g[i + h2] * s[t + h2] : g[i] * c[t] - g[i - h2] * s[t - h2];
  }
}

template <typename T>
__global__ void k_rope_bwd_tab(T *gc, T *gs, const T *g, const T *x, int64_t batch, int64_t heads, int64_t seq,
                               int64_t dim, bool per_batch) {
  int64_t h2 = dim / 2, trows = (per_batch ? batch : 1) * seq, nb = per_batch ? 1 : batch;
  FOR(k, trows * dim) {
    int64_t t = k / dim, j = k % dim, b0 = per_batch ? t / seq : 0, sq = t % seq;
    int64_t jr = j < h2 ? j + h2 : j - h2;
    double sign = j < h2 ? -1.0 : 1.0, ac = 0, as = 0;
    for (int64_t b = b0; b < b0 + nb; b++)
      for (int64_t h = 0; h < heads; h++) {
        int64_t o = ((b * heads + h) * seq + sq) * dim;
        ac += (double)g[o + j] * (double)x[o + j];
        as += (double)g[o + j] * sign * (double)x[o + jr];
      }
    if (gc) gc[k] = (T)ac;
    if (gs) gs[k] = (T)as;
  }
}

template <typename T>
static void rope(T *out, const T *x, const T *c, const T *s, int64_t rows, int64_t heads, int64_t seq, int64_t dim,
                 bool per_batch, int dev) {
  CU_LAUNCH(ON(rows * dim, dev), k_rope<T>)(out, x, c, s, rows, heads, seq, dim, per_batch);
}

template <typename T>
static void rope_bwd(T *gx, T *gc, T *gs, const T *g, const T *x, const T *c, const T *s, int64_t batch,
                     int64_t heads, int64_t seq, int64_t dim, bool per_batch, int dev) {
  int64_t rows = batch * heads * seq;
  if (gx) CU_LAUNCH(ON(rows * dim, dev), k_rope_bwd_x<T>)(gx, g, c, s, rows, heads, seq, dim, per_batch);
  if (gc || gs)
    CU_LAUNCH(ON((per_batch ? batch : 1) * seq * dim, dev), k_rope_bwd_tab<T>)(gc, gs, g, x, batch, heads, seq, dim,
                                                                         per_batch);
}

zorch_status cuda_rope(zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *cosines,
                       const zorch_tensor *sines, int64_t batch, int64_t heads, int64_t seq, int64_t dim,
                       bool per_batch) {
  CU_REAL(x->dtype, "rope",
          rope<T>((T *)tensor_ptr(out), (const T *)tensor_ptr(x), (const T *)tensor_ptr(cosines),
                  (const T *)tensor_ptr(sines), batch * heads * seq, heads, seq, dim, per_batch, cu_dev(out)));
}

zorch_status cuda_rope_bwd(zorch_tensor *gx, zorch_tensor *gcos, zorch_tensor *gsin, const zorch_tensor *g,
                           const zorch_tensor *x, const zorch_tensor *cosines, const zorch_tensor *sines,
                           int64_t batch, int64_t heads, int64_t seq, int64_t dim, bool per_batch) {
  CU_REAL(g->dtype, "rope backward",
          rope_bwd<T>(gx ? (T *)tensor_ptr(gx) : nullptr, gcos ? (T *)tensor_ptr(gcos) : nullptr,
                      gsin ? (T *)tensor_ptr(gsin) : nullptr, (const T *)tensor_ptr(g), (const T *)tensor_ptr(x),
                      (const T *)tensor_ptr(cosines), (const T *)tensor_ptr(sines), batch, heads, seq, dim,
                      per_batch, cu_dev(g)));
}
