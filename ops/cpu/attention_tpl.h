/* attention_tpl.h: the attention kernels over one element type, included by
   attention.c once per type with T (float or double), SFX (f32 or f64), EXP and
   LOG (expf, logf or exp, log) set.
   Layout: q (bh, tq, d), k and v (bh, tk, d), out and dout (bh, tq, d), lse
   (bh, tq), all contiguous. Query i sees key j when j <= i + off (off = tk - tq)
   or always without the causal mask. A row that sees no key gets 0 and lse -inf. */
#define ATT_CAT_(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT_(a, b)
#define ATT(name) ATT_CAT(name, SFX)

/* kt (d, kn) = the transpose of the kn rows of k starting at row kb, so the
   scores of a query against the block are a loop over contiguous keys. */
static void ATT(transpose)(T *restrict kt, const T *restrict k, int64_t kn, int64_t d) {
  for (int64_t j = 0; j < kn; j++)
    for (int64_t c = 0; c < d; c++) kt[c * kn + j] = k[j * d + c];
}

/* s[j] = scale * (q . kt[:, j]) for j < lim. */
CPU_CLONES static void ATT(scores)(T *restrict s, const T *restrict q, const T *restrict kt,
                                   int64_t kn, int64_t lim, int64_t d, T scale) {
  for (int64_t j = 0; j < lim; j++) s[j] = 0;
  for (int64_t c = 0; c < d; c++) {
    T qc = q[c] * scale;
    const T *kr = kt + c * kn;
    for (int64_t j = 0; j < lim; j++) s[j] += qc * kr[j];
  }
}

/* y[0, d) += a * x[0, d) */
static inline void ATT(axpy)(T *restrict y, T a, const T *restrict x, int64_t d) {
  for (int64_t c = 0; c < d; c++) y[c] += a * x[c];
}

/* How many keys of the block [kb, kb + kn) query i sees. */
static inline int64_t ATT(visible)(int64_t i, int64_t kb, int64_t kn, int64_t off, bool causal) {
  if (!causal) return kn;
  int64_t n = i + off - kb + 1;
  return n < 0 ? 0 : n > kn ? kn : n;
}

/* The forward over queries [i0, i1) of one head: scores a key block at a time
   with a running max m and sum l per row (the online softmax), the output
   accumulated in acc and rescaled when the max grows. Scratch: kt (d * ATT_BK),
   s (ATT_BK), acc ((i1 - i0) * d), m and l (i1 - i0). */
CPU_CLONES static void ATT(fwd_rows)(T *restrict out, T *restrict lse, const T *restrict q,
                                     const T *restrict k, const T *restrict v, int64_t i0,
                                     int64_t i1, int64_t tk, int64_t d, int64_t off, bool causal,
                                     T scale, T *restrict kt, T *restrict s, T *restrict acc,
                                     T *restrict m, T *restrict l) {
  int64_t nr = i1 - i0;
  for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
  for (int64_t c = 0; c < nr * d; c++) acc[c] = 0;
  int64_t kend = causal ? i1 - 1 + off + 1 : tk; /* keys the last row sees */
  if (kend > tk) kend = tk;
  for (int64_t kb = 0; kb < kend; kb += ATT_BK) {
    int64_t kn = tk - kb < ATT_BK ? tk - kb : ATT_BK;
    ATT(transpose)(kt, k + kb * d, kn, d);
    for (int64_t r = 0; r < nr; r++) {
      int64_t lim = ATT(visible)(i0 + r, kb, kn, off, causal);
      if (lim <= 0) continue;
      ATT(scores)(s, q + (i0 + r) * d, kt, kn, lim, d, scale);
      T mx = s[0];
      for (int64_t j = 1; j < lim; j++) mx = s[j] > mx ? s[j] : mx;
      T *a = acc + r * d;
      if (mx > m[r]) { /* the max grows: rescale what was summed under the old one */
        T alpha = m[r] == -INFINITY ? 0 : EXP(m[r] - mx);
        l[r] *= alpha;
        for (int64_t c = 0; c < d; c++) a[c] *= alpha;
        m[r] = mx;
      }
      T sum = 0;
      for (int64_t j = 0; j < lim; j++) {
        T p = EXP(s[j] - m[r]);
        sum += p;
        ATT(axpy)(a, p, v + (kb + j) * d, d);
      }
      l[r] += sum;
    }
  }
  for (int64_t r = 0; r < nr; r++) {
    T *o = out + (i0 + r) * d;
    if (l[r] > 0) {
      T inv = 1 / l[r];
      for (int64_t c = 0; c < d; c++) o[c] = acc[r * d + c] * inv;
      lse[i0 + r] = m[r] + LOG(l[r]);
    } else {
      for (int64_t c = 0; c < d; c++) o[c] = 0;
      lse[i0 + r] = -INFINITY;
    }
  }
}

static zorch_status ATT(fwd)(T *out, T *lse, const T *q, const T *k, const T *v, int64_t bh,
                             int64_t tq, int64_t tk, int64_t d, bool causal, T scale) {
  int64_t nqb = (tq + ATT_BQ - 1) / ATT_BQ, off = tk - tq;
  bool oom = false;
  bool par = bh * tq * tk * d >= CPU_GRAIN;
#pragma omp parallel if (par)
  {
    T *buf = malloc(sizeof(T) * (size_t)(d * ATT_BK + ATT_BK + ATT_BQ * d + 2 * ATT_BQ));
    if (!buf) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < bh * nqb; w++) {
      if (!buf) continue;
      int64_t h = w / nqb, i0 = (w % nqb) * ATT_BQ, i1 = i0 + ATT_BQ < tq ? i0 + ATT_BQ : tq;
      T *kt = buf, *s = kt + d * ATT_BK, *acc = s + ATT_BK, *m = acc + ATT_BQ * d, *l = m + ATT_BQ;
      ATT(fwd_rows)(out + h * tq * d, lse + h * tq, q + h * tq * d, k + h * tk * d,
                    v + h * tk * d, i0, i1, tk, d, off, causal, scale, kt, s, acc, m, l);
    }
    free(buf);
  }
  if (oom) return err_set(ZORCH_ERR_OOM, "attention: out of memory for the kernel's scratch");
  return ZORCH_OK;
}

/* The backward of one head, a key block at a time: the block's dK and dV are
   summed in dkb, dvb over every query that sees it, and dQ is added to in place
   (one thread owns the head). P is recomputed from the scores and the saved
   lse; dP = dO V^T, dS = P (dP - rowsum(dO * O)). Scratch: kt and vt (d * ATT_BK),
   s and dp (ATT_BK), dkb and dvb (ATT_BK * d), dsum (tq). */
CPU_CLONES static void ATT(bwd_head)(T *restrict dq, T *restrict dk, T *restrict dv,
                                     const T *restrict g, const T *restrict q,
                                     const T *restrict k, const T *restrict v,
                                     const T *restrict o, const T *restrict lse, int64_t tq,
                                     int64_t tk, int64_t d, bool causal, T scale, T *restrict kt,
                                     T *restrict vt, T *restrict s, T *restrict dp,
                                     T *restrict dkb, T *restrict dvb, T *restrict dsum) {
  int64_t off = tk - tq;
  for (int64_t i = 0; i < tq; i++) {
    T acc = 0;
    for (int64_t c = 0; c < d; c++) acc += g[i * d + c] * o[i * d + c];
    dsum[i] = acc;
  }
  for (int64_t c = 0; c < tq * d; c++) dq[c] = 0;
  for (int64_t kb = 0; kb < tk; kb += ATT_BK) {
    int64_t kn = tk - kb < ATT_BK ? tk - kb : ATT_BK;
    ATT(transpose)(kt, k + kb * d, kn, d);
    ATT(transpose)(vt, v + kb * d, kn, d);
    for (int64_t c = 0; c < kn * d; c++) dkb[c] = 0, dvb[c] = 0;
    int64_t ifirst = causal ? kb - off : 0; /* the first query that sees key kb */
    if (ifirst < 0) ifirst = 0;
    for (int64_t i = ifirst; i < tq; i++) {
      int64_t lim = ATT(visible)(i, kb, kn, off, causal);
      if (lim <= 0 || lse[i] == -INFINITY) continue;
      const T *qi = q + i * d, *gi = g + i * d;
      ATT(scores)(s, qi, kt, kn, lim, d, scale);
      ATT(scores)(dp, gi, vt, kn, lim, d, 1);
      T *dqi = dq + i * d;
      for (int64_t j = 0; j < lim; j++) {
        T p = EXP(s[j] - lse[i]);
        T ds = p * (dp[j] - dsum[i]) * scale;
        ATT(axpy)(dvb + j * d, p, gi, d);
        ATT(axpy)(dkb + j * d, ds, qi, d);
        ATT(axpy)(dqi, ds, k + (kb + j) * d, d);
      }
    }
    memcpy(dk + kb * d, dkb, sizeof(T) * (size_t)(kn * d));
    memcpy(dv + kb * d, dvb, sizeof(T) * (size_t)(kn * d));
  }
}

static zorch_status ATT(bwd)(T *dq, T *dk, T *dv, const T *g, const T *q, const T *k,
                             const T *v, const T *o, const T *lse, int64_t bh, int64_t tq,
                             int64_t tk, int64_t d, bool causal, T scale) {
  bool oom = false;
  bool par = bh > 1 && bh * tq * tk * d >= CPU_GRAIN;
#pragma omp parallel if (par)
  {
    T *buf = malloc(sizeof(T) * (size_t)(2 * d * ATT_BK + 2 * ATT_BK + 2 * ATT_BK * d + tq));
    if (!buf) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(dynamic)
    for (int64_t h = 0; h < bh; h++) {
      if (!buf) continue;
      T *kt = buf, *vt = kt + d * ATT_BK, *s = vt + d * ATT_BK, *dp = s + ATT_BK;
      T *dkb = dp + ATT_BK, *dvb = dkb + ATT_BK * d, *dsum = dvb + ATT_BK * d;
      int64_t qo = h * tq * d, ko = h * tk * d;
      ATT(bwd_head)(dq + qo, dk + ko, dv + ko, g + qo, q + qo, k + ko, v + ko, o + qo,
                    lse + h * tq, tq, tk, d, causal, scale, kt, vt, s, dp, dkb, dvb, dsum);
    }
    free(buf);
  }
  if (oom) return err_set(ZORCH_ERR_OOM, "attention: out of memory for the backward's scratch");
  return ZORCH_OK;
}

#undef ATT
#undef ATT_CAT
#undef ATT_CAT_
