/* attention_tpl.h: the attention kernels over one element type, included by
   attention.c once per type with T (float or double), SFX (T's name), EXP and
   LOG (expf, logf or exp, log) set.
   Layout: q (bh, tq, d), k and v (bh, tk, d), out and dout (bh, tq, d), each
   with its own att_lay (a head's first element and the stride between rows;
   the d values of a row are adjacent); lse (bh, tq) contiguous. Query head h
   reads key/value head h / group. Query i sees key j inside its band
   (att_band) where the head's mask and segments allow (prep_row). A row that
   sees no key gets 0 and lse -inf; a NaN or +inf score makes its row (and the
   gradients it reaches) NaN. */
#define ATT_CAT_(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT_(a, b)
#define ATT(name) ATT_CAT(name, SFX)

/* bt (d, ATT_BK) = the transpose of the kn rows of b (kn, d; row stride ldb),
   columns past kn zero: the score tiles then run over a fixed width. Whole
   16 x 16 blocks go through ATT_BLOCK_T where the type has one. */
static void ATT(transpose)(T *restrict bt, const T *restrict b, int64_t kn, int64_t d, int64_t ldb) {
  int64_t kf = 0, df = 0;
#ifdef ATT_BLOCK_T
  kf = kn / 16 * 16, df = d / 16 * 16;
  for (int64_t j0 = 0; j0 < kf; j0 += 16)
    for (int64_t c0 = 0; c0 < df; c0 += 16) ATT_BLOCK_T(bt + c0 * ATT_BK + j0, ATT_BK, b + j0 * ldb + c0, ldb);
#endif
  for (int64_t c = 0; c < d; c++) {
    T *row = bt + c * ATT_BK;
    for (int64_t j = c < df ? kf : 0; j < kn; j++) row[j] = b[j * ldb + c];
    for (int64_t j = kn; j < ATT_BK; j++) row[j] = 0;
  }
}

/* 64-byte vectors of T (GCC's vector extension; each clone lowers them to its
   registers), loaded and stored unaligned: the tiles' accumulators written as
   arrays of T stayed in memory (GCC vectorised the loops but kept the arrays
   on the stack), loaded and stored at every step. */
typedef T ATT(v) __attribute__((vector_size(64)));
#define ATT_VL ((int)(64 / sizeof(T)))
#define ATT_LD(x, p) memcpy(&(x), (p), sizeof(ATT(v)))
#define ATT_ST(p, x) memcpy((p), &(x), sizeof(ATT(v)))

/* Four rows' accumulators acc[0..3][v] += x0..x3 times the vector at p (the
   register-blocked inner step of tile_abt and tile_acc). */
#define ATT_ROWS4(acc, v, p)   \
  {                            \
    ATT(v) w_;                 \
    ATT_LD(w_, (p));           \
    acc[0][v] += x0 * w_;      \
    acc[1][v] += x1 * w_;      \
    acc[2][v] += x2 * w_;      \
    acc[3][v] += x3 * w_;      \
  }

/* Four rows of tile_abt, NV vectors of columns: their 4 x NV sums held in
   registers while bt streams past. */
#define ATT_ABT4(NVC)                                                     \
  {                                                                       \
    enum { NV = (NVC) };                                                  \
    ATT(v) acc[4][NV];                                                    \
    for (int x = 0; x < 4; x++)                                           \
      for (int v = 0; v < NV; v++) acc[x][v] = (ATT(v)){0};               \
    const T *a0 = a + r * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda; \
    for (int64_t c = 0; c < d; c++) {                                     \
      const T *b = bt + c * ATT_BK;                                       \
      T x0 = a0[c], x1 = a1[c], x2 = a2[c], x3 = a3[c];                   \
      for (int v = 0; v < NV; v++) ATT_ROWS4(acc, v, b + v * ATT_VL);   \
    }                                                                     \
    for (int x = 0; x < 4; x++)                                           \
      for (int v = 0; v < NV; v++) ATT_ST(s + (r + x) * ATT_BK + v * ATT_VL, acc[x][v]); \
  }

/* s (nr, ATT_BK) = a (nr, d; row stride lda) times bt (d, ATT_BK), four rows at
   a time. Row r needs only its first hi0 + r columns (the causal mask; the
   rest are left as they were, for the caller masks them): a block on the
   diagonal computes about half its tile. */
ATT_FMA CPU_CLONES static void ATT(tile_abt)(T *restrict s, const T *restrict a, int64_t nr,
                                     const T *restrict bt, int64_t d, int64_t lda, int64_t hi0) {
  enum { NVMAX = ATT_BK / ATT_VL };
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) {
    int64_t need = hi0 + r + 4 - 1; /* the group's last row */
    int nv = need >= ATT_BK ? NVMAX : need <= 0 ? 0 : (int)((need + ATT_VL - 1) / ATT_VL);
    switch (nv) {
      case 0: break;
      case 1: ATT_ABT4(1) break;
      case 2: ATT_ABT4(2) break;
      case 3: ATT_ABT4(3) break;
      default: ATT_ABT4(NVMAX) break; /* (double's 4-7 of 8 too) */
    }
  }
  for (; r < nr; r++) {
    T acc[ATT_BK];
    for (int j = 0; j < ATT_BK; j++) acc[j] = 0;
    for (int64_t c = 0; c < d; c++) {
      const T *b = bt + c * ATT_BK;
      T x = a[r * lda + c];
      for (int j = 0; j < ATT_BK; j++) acc[j] += x * b[j];
    }
    memcpy(s + r * ATT_BK, acc, sizeof acc);
  }
}
#undef ATT_ABT4

/* x within [0, n] */
static inline int64_t ATT(clamp)(int64_t x, int64_t n) { return x < 0 ? 0 : x > n ? n : x; }

/* One pass of tile_acc over columns [c0, c0 + CW) while they fit: four rows
   and CW columns at a time in registers. */
#define ATT_ACC_PASS(CW)                                                               \
  for (; c0 + (CW) <= d; c0 += (CW)) {                                                 \
    enum { NV = (CW) / ATT_VL };                                                       \
    int64_t r = 0;                                                                     \
    for (; r + 4 <= nr; r += 4) {                                                      \
      ATT(v) acc[4][NV];                                                               \
      for (int x = 0; x < 4; x++)                                                      \
        for (int v = 0; v < NV; v++) ATT_LD(acc[x][v], o + (r + x) * ldo + c0 + v * ATT_VL); \
      const T *p0 = p + r * pr, *p1 = p0 + pr, *p2 = p1 + pr, *p3 = p2 + pr;           \
      int64_t jlo = ATT(clamp)(lo0 + r, nj), jhi = ATT(clamp)(hi0 + r + 3, nj);       \
      for (int64_t j = jlo; j < jhi; j++) {                                            \
        const T *mr = m + j * ldm + c0;                                                \
        T x0 = p0[j * pj], x1 = p1[j * pj], x2 = p2[j * pj], x3 = p3[j * pj];          \
        for (int v = 0; v < NV; v++) ATT_ROWS4(acc, v, mr + v * ATT_VL);               \
      }                                                                                \
      for (int x = 0; x < 4; x++)                                                      \
        for (int v = 0; v < NV; v++) ATT_ST(o + (r + x) * ldo + c0 + v * ATT_VL, acc[x][v]); \
    }                                                                                  \
    for (; r < nr; r++) {                                                              \
      T acc[CW];                                                                       \
      for (int c = 0; c < (CW); c++) acc[c] = o[r * ldo + c0 + c];                     \
      int64_t jlo = ATT(clamp)(lo0 + r, nj), jhi = ATT(clamp)(hi0 + r, nj);           \
      for (int64_t j = jlo; j < jhi; j++) {                                               \
        const T *mr = m + j * ldm + c0;                                                \
        T x = p[r * pr + j * pj];                                                      \
        for (int c = 0; c < (CW); c++) acc[c] += x * mr[c];                            \
      }                                                                                \
      for (int c = 0; c < (CW); c++) o[r * ldo + c0 + c] = acc[c];                     \
    }                                                                                  \
  }

/* o (nr, d; row stride ldo) += p m: p[r][j] at p + r * pr + j * pj (so p may be
   read transposed), m (nj, d; row stride ldm). Passes of ATT_CW columns, then
   of ATT_CW / 2 (a head dim of 32), in registers; a narrower tail runs plainly.
   Each element sums its products in j's order in every path. Row r takes
   only the j in [lo0 + r, hi0 + r) (the causal mask's band; p is 0 outside
   it), ATT_ALL for no bound. */
ATT_FMA CPU_CLONES static void ATT(tile_acc)(T *restrict o, int64_t ldo, int64_t nr, const T *restrict p,
                                     int64_t pr, int64_t pj, int64_t nj, const T *restrict m,
                                     int64_t ldm, int64_t d, int64_t lo0, int64_t hi0) {
  int64_t c0 = 0;
  ATT_ACC_PASS(ATT_CW)
  ATT_ACC_PASS(ATT_CW / 2)
  if (c0 < d)
    for (int64_t r = 0; r < nr; r++)
      for (int64_t j = ATT(clamp)(lo0 + r, nj); j < ATT(clamp)(hi0 + r, nj); j++) {
        T x = p[r * pr + j * pj];
        for (int64_t c = c0; c < d; c++) o[r * ldo + c] += x * m[j * ldm + c];
      }
}
#undef ATT_ACC_PASS
#undef ATT_ROWS4

/* Row i's scores in the columns [jlo, jhi) of key block kb become scale s plus
   the mask's value, -inf where the mask or the segments hide the key. */
ATT_NOTRAP CPU_CLONES static void ATT(prep_row)(T *restrict row, int64_t jlo, int64_t jhi, T scale,
                                     const att_hm *hm, int64_t i, int64_t kb) {
  for (int64_t j = jlo; j < jhi; j++) row[j] *= scale;
  if (hm->add) {
    const T *a = (const T *)hm->add + i * hm->mq + kb * hm->mk;
    for (int64_t j = jlo; j < jhi; j++) row[j] += a[j * hm->mk];
  }
  if (hm->keep) {
    const bool *m = hm->keep + i * hm->mq + kb * hm->mk;
    for (int64_t j = jlo; j < jhi; j++) row[j] = m[j * hm->mk] ? row[j] : -INFINITY;
  }
  if (hm->ks) {
    const int64_t *ks = hm->ks + kb, sid = hm->qs[i];
    for (int64_t j = jlo; j < jhi; j++) row[j] = ks[j] == sid ? row[j] : -INFINITY;
  }
}

/* One row of a score tile in the online softmax: the row's running max m grows
   to the max of its scores in [jlo, jhi) (prep_row's; what was summed under
   the old max, l and the output row acc, is rescaled), those become e^(s - m),
   the rest of the kn columns 0, and l gets their sum. A row whose keys are all
   hidden so far (m still -inf) adds nothing, but a NaN. The omp simd
   reductions let the max and the sum vectorise (in a fixed order, so results
   still repeat). */
ATT_NOTRAP CPU_CLONES static void ATT(online_row)(T *restrict row, int64_t jlo, int64_t jhi, int64_t kn,
                                       T *restrict m, T *restrict l, T *restrict acc, int64_t d) {
  if (jhi > jlo) {
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = jlo; j < jhi; j++) mx = row[j] > mx ? row[j] : mx;
    if (mx > *m) {
      T alpha = *m == -INFINITY ? 0 : EXP(*m - mx);
      *l *= alpha;
      for (int64_t c = 0; c < d; c++) acc[c] *= alpha;
      *m = mx;
    }
    T mm = *m, sum = 0;
    if (mm == -INFINITY)
      for (int64_t j = jlo; j < jhi; j++) row[j] = row[j] == -INFINITY ? 0 : EXP(row[j] - mm);
    else
      for (int64_t j = jlo; j < jhi; j++) row[j] = EXP(row[j] - mm);
#pragma omp simd reduction(+ : sum)
    for (int64_t j = jlo; j < jhi; j++) sum += row[j];
    *l += sum;
  }
  for (int64_t j = 0; j < jlo; j++) row[j] = 0;
  for (int64_t j = jhi > jlo ? jhi : jlo; j < kn; j++) row[j] = 0;
}

/* Turns prep_row's scores of one backward row into P (in ps) and dS (in pd,
   from dP); a hidden key's dS is 0 whatever its dP. */
ATT_NOTRAP CPU_CLONES static void ATT(bwd_row)(T *restrict ps, T *restrict pd, int64_t jlo, int64_t jhi,
                                    int64_t kn, T scale, T lse, T dsum) {
  for (int64_t j = jlo; j < jhi; j++) {
    T z = ps[j], p = EXP(z - lse);
    ps[j] = p;
    pd[j] = z == -INFINITY ? 0 : p * (pd[j] - dsum) * scale;
  }
  for (int64_t j = 0; j < jlo; j++) ps[j] = 0, pd[j] = 0;
  for (int64_t j = jhi > jlo ? jhi : jlo; j < kn; j++) ps[j] = 0, pd[j] = 0;
}

/* The forward over queries [i0, i1) of one head: the scores of a key block as one
   tile, a running max m and sum l per row (the online softmax), the output
   accumulated in acc and rescaled when a row's max grows. Key blocks outside
   the rows' bands, or without a key of their segments, are skipped. The row
   strides of out, q, k and v are so, sq, sk, sv; q points at query i0.
   Scratch: kt (d * ATT_BK), s (ATT_BQ * ATT_BK), acc ((i1 - i0) * d), m and l
   (i1 - i0). */
static void ATT(fwd_rows)(T *restrict out, int64_t so, T *restrict lse, const T *restrict q,
                          int64_t sq, const T *restrict k, int64_t sk, const T *restrict v,
                          int64_t sv, int64_t i0, int64_t i1, int64_t d, const att_rules *ru,
                          const att_hm *hm, T scale, T *restrict kt, T *restrict s, T *restrict acc,
                          T *restrict m, T *restrict l) {
  int64_t nr = i1 - i0, tk = ru->tk, off = ru->off, klo, khi;
  for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
  for (int64_t c = 0; c < nr * d; c++) acc[c] = 0;
  att_key_range(ru, i0, i1, &klo, &khi);
  for (int64_t kb = klo / ATT_BK * ATT_BK; kb < khi; kb += ATT_BK) {
    int64_t kn = tk - kb < ATT_BK ? tk - kb : ATT_BK;
    if (hm->ks && !att_segs_meet(hm->qs + i0, nr, hm->ks + kb, kn)) continue;
    ATT(transpose)(kt, k + kb * sk, kn, d, sk);
    /* row r sees keys in [lo0 + r, hi0 + r) of the block */
    int64_t hi0 = ru->causal ? i0 + off - kb + 1 : ATT_ALL, lo0 = ru->win ? i0 + off - ru->win + 1 - kb : -ATT_ALL;
    ATT(tile_abt)(s, q, nr, kt, d, sq, hi0);
    for (int64_t r = 0; r < nr; r++) { /* scores -> probabilities under the running max */
      int64_t jlo, jhi;
      att_band(ru, i0 + r, kb, kn, &jlo, &jhi);
      ATT(prep_row)(s + r * ATT_BK, jlo, jhi, scale, hm, i0 + r, kb);
      ATT(online_row)(s + r * ATT_BK, jlo, jhi, kn, &m[r], &l[r], acc + r * d, d);
    }
    ATT(tile_acc)(acc, d, nr, s, ATT_BK, 1, kn, v + kb * sv, sv, d, lo0, hi0);
  }
  for (int64_t r = 0; r < nr; r++) {
    T *o = out + (i0 + r) * so;
    if (l[r] != 0) { /* a NaN or +inf score made l NaN: the row is NaN, as softmax's */
      T inv = 1 / l[r];
      for (int64_t c = 0; c < d; c++) o[c] = acc[r * d + c] * inv;
      lse[i0 + r] = m[r] + LOG(l[r]);
    } else {
      for (int64_t c = 0; c < d; c++) o[c] = 0;
      lse[i0 + r] = -INFINITY;
    }
  }
}

/* dst (rows, d) contiguous = the rows of src, ld apart. Strided heads are
   copied a head (or query block) at a time into thread scratch that stays in
   cache: read in place, rows 3C apart (a fused projection's) map to a few
   cache sets, and the column-wise reads of the key transposes missed L1. */
static void ATT(pack)(T *restrict dst, const T *restrict src, int64_t rows, int64_t ld, int64_t d) {
  /* rows far apart defeat the hardware's prefetch, and each was a miss to
     memory in turn: the row ATT_PF ahead is asked for while one is copied */
  enum { ATT_PF = 8 };
  int64_t lines = ((int64_t)sizeof(T) * d + 63) / 64;
  for (int64_t r = 0; r < rows; r++) {
    if (r + ATT_PF < rows)
      for (int64_t c = 0; c < lines; c++)
        __builtin_prefetch((const char *)(src + (r + ATT_PF) * ld) + 64 * c);
    memcpy(dst + r * d, src + r * ld, sizeof(T) * (size_t)d);
  }
}

static zorch_status ATT(fwd)(T *out, const att_lay *lo, T *lse, const T *q, const att_lay *lq,
                             const T *k, const att_lay *lk, const T *v, const att_lay *lv,
                             const att_geom *g) {
  int64_t bh = g->bh, tq = g->tq, tk = g->tk, d = g->d, nqb = (tq + ATT_BQ - 1) / ATT_BQ;
  att_rules ru = att_rules_of(g);
  T scale = (T)g->scale;
  bool oom = false;
  bool par = bh * tq * tk * d >= CPU_GRAIN;
  bool pack = lq->st != d || lk->st != d || lv->st != d; /* strided inputs: copied per item */
#pragma omp parallel if (par)
  {
    size_t nbuf = (size_t)(d * ATT_BK + ATT_BQ * ATT_BK + ATT_BQ * d + 2 * ATT_BQ);
    if (pack) nbuf += (size_t)(ATT_BQ * d + 2 * tk * d);
    T *buf = cpu_scratch(sizeof(T) * nbuf);
    if (!buf) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < bh * nqb; w++) {
      if (!buf) continue;
      int64_t h = w / nqb, kvh = h / g->group, i0 = (w % nqb) * ATT_BQ, i1 = i0 + ATT_BQ < tq ? i0 + ATT_BQ : tq;
      T *kt = buf, *s = kt + d * ATT_BK, *acc = s + ATT_BQ * ATT_BK, *m = acc + ATT_BQ * d;
      T *l = m + ATT_BQ;
      const T *qh = q + att_head(lq, h), *kh = k + att_head(lk, kvh), *vh = v + att_head(lv, kvh);
      int64_t sq = lq->st, sk = lk->st, sv = lv->st;
      att_hm hm = att_hm_of(g, h);
      qh += i0 * sq;
      if (pack) { /* this item's queries, and the key blocks they may see (at their rows) */
        T *qp = l + ATT_BQ, *kp = qp + ATT_BQ * d, *vp = kp + tk * d;
        int64_t klo, khi;
        att_key_range(&ru, i0, i1, &klo, &khi);
        klo = klo / ATT_BK * ATT_BK;
        khi = (khi + ATT_BK - 1) / ATT_BK * ATT_BK;
        khi = khi > tk ? tk : khi;
        ATT(pack)(qp, qh, i1 - i0, sq, d);
        if (khi > klo) {
          ATT(pack)(kp + klo * d, kh + klo * sk, khi - klo, sk, d);
          ATT(pack)(vp + klo * d, vh + klo * sv, khi - klo, sv, d);
        }
        qh = qp, kh = kp, vh = vp, sq = sk = sv = d;
      }
      ATT(fwd_rows)(out + att_head(lo, h), lo->st, lse + h * tq, qh, sq, kh, sk, vh, sv, i0, i1, d, &ru,
                    &hm, scale, kt, s, acc, m, l);
    }
    cpu_scratch_free(buf);
  }
  if (oom) return err_set(ZORCH_ERR_OOM, "attention: out of memory for the kernel's scratch");
  return ZORCH_OK;
}

/* The backward of one key block [kb, kb + kn) of a head against its queries
   [i0, i1), ATT_BQ at a time: P is recomputed from the scores and the saved lse,
   dP = dO V^T, dS = scale P (dP - dsum) with dsum = rowsum(dO * O); then
   dvb += P^T dO and dkb += dS^T Q (the block's, when not NULL) and dq += dS K
   (the head's, when not NULL). kt and vt hold the block's K and V transposed.
   Each element's sums run in the same order whichever caller splits the work,
   so the results do not depend on it. dkb and dvb have row stride d; dq, g, q
   and k the strides in st (dq, g, q, k). Scratch: s and dp (ATT_BQ * ATT_BK). */
static void ATT(bwd_block)(T *restrict dq, T *restrict dkb, T *restrict dvb,
                           const T *restrict g, const T *restrict q, const T *restrict k,
                           const int64_t *st, const T *restrict lse, const T *restrict dsum,
                           int64_t kb, int64_t kn, int64_t i0, int64_t i1, const att_rules *ru,
                           const att_hm *hm, int64_t d, T scale, const T *restrict kt,
                           const T *restrict vt, T *restrict s, T *restrict dp) {
  int64_t sdq = st[0], sg = st[1], sq = st[2], sk = st[3], off = ru->off, win = ru->win;
  for (int64_t ib = i0; ib < i1; ib += ATT_BQ) {
    int64_t nr = i1 - ib < ATT_BQ ? i1 - ib : ATT_BQ;
    if (hm->ks && !att_segs_meet(hm->qs + ib, nr, hm->ks + kb, kn)) continue;
    /* query ib + r sees keys kb + j for j in [lq0 + r, hi0 + r); key kb + r is
       seen by queries ib + j for j in [lo0 + r, hk0 + r) */
    int64_t hi0 = ru->causal ? ib + off - kb + 1 : ATT_ALL, lo0 = ru->causal ? kb - ib - off : -ATT_ALL;
    int64_t lq0 = win ? ib + off - win + 1 - kb : -ATT_ALL, hk0 = win ? kb - ib - off + win : ATT_ALL;
    ATT(tile_abt)(s, q + ib * sq, nr, kt, d, sq, hi0);
    ATT(tile_abt)(dp, g + ib * sg, nr, vt, d, sg, hi0);
    for (int64_t r = 0; r < nr; r++) { /* s becomes P, dp becomes dS */
      int64_t i = ib + r, jlo, jhi;
      att_band(ru, i, kb, kn, &jlo, &jhi);
      if (lse[i] == -INFINITY) jhi = jlo; /* the row sees no key */
      ATT(prep_row)(s + r * ATT_BK, jlo, jhi, scale, hm, i, kb);
      ATT(bwd_row)(s + r * ATT_BK, dp + r * ATT_BK, jlo, jhi, kn, scale, lse[i], dsum[i]);
    }
    if (dvb) ATT(tile_acc)(dvb, d, kn, s, 1, ATT_BK, nr, g + ib * sg, sg, d, lo0, hk0);
    if (dkb) ATT(tile_acc)(dkb, d, kn, dp, 1, ATT_BK, nr, q + ib * sq, sq, d, lo0, hk0);
    if (dq) ATT(tile_acc)(dq + ib * sdq, sdq, nr, dp, ATT_BK, 1, kn, k + kb * sk, sk, d, lq0, hi0);
  }
}

/* The dot product of two rows of d, in vector lanes (a fixed order). */
CPU_CLONES static T ATT(dot)(const T *restrict a, const T *restrict b, int64_t d) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t c = 0; c < d; c++) acc += a[c] * b[c];
  return acc;
}

/* dsum (bh * tq) = rowsum(dO * O), every row. */
static void ATT(row_dots)(T *dsum, const T *g, const att_lay *lg, const T *o, const att_lay *lo,
                          int64_t bh, int64_t tq, int64_t d) {
#pragma omp parallel for if (bh * tq * d >= CPU_GRAIN)
  for (int64_t i = 0; i < bh * tq; i++) {
    int64_t h = i / tq, t = i % tq;
    const T *gr = g + att_head(lg, h) + t * lg->st, *orow = o + att_head(lo, h) + t * lo->st;
    dsum[i] = ATT(dot)(gr, orow, d);
  }
}

/* Scratch of one backward task: kt, vt (d * ATT_BK), s, dp (ATT_BQ * ATT_BK),
   dkb, dvb (ATT_BK * d). */
typedef struct {
  T *kt, *vt, *s, *dp, *dkb, *dvb;
} ATT(scratch);
static T *ATT(scratch_new)(ATT(scratch) *w, int64_t d) {
  T *buf = cpu_scratch(sizeof(T) * (size_t)(4 * d * ATT_BK + 2 * ATT_BQ * ATT_BK));
  if (buf) {
    w->kt = buf, w->vt = w->kt + d * ATT_BK, w->s = w->vt + d * ATT_BK;
    w->dp = w->s + ATT_BQ * ATT_BK, w->dkb = w->dp + ATT_BQ * ATT_BK, w->dvb = w->dkb + ATT_BK * d;
  }
  return buf;
}

/* One head's pointers and row strides in the backward: dq, g, q, k (in
   bwd_block's order), then dk, dv, v; k, v, dk and dv are its key/value head's. */
typedef struct {
  T *dq, *dk, *dv;
  const T *g, *q, *k, *v;
  int64_t st[7];
} ATT(head);

static ATT(head) ATT(head_at)(T *dq, const att_lay *ldq, T *dk, const att_lay *ldk, T *dv,
                              const att_lay *ldv, const T *g, const att_lay *lg, const T *q,
                              const att_lay *lq, const T *k, const att_lay *lk, const T *v,
                              const att_lay *lv, int64_t h, int64_t kvh) {
  return (ATT(head)){.dq = dq + att_head(ldq, h), .dk = dk + att_head(ldk, kvh),
                     .dv = dv + att_head(ldv, kvh), .g = g + att_head(lg, h),
                     .q = q + att_head(lq, h), .k = k + att_head(lk, kvh), .v = v + att_head(lv, kvh),
                     .st = {ldq->st, lg->st, lq->st, lk->st, ldk->st, ldv->st, lv->st}};
}

/* dK and dV of key block kb from one query head (and dQ += its part when
   with_dq): written, or with `add` added to what the group's earlier heads
   wrote, so every thread count sums the heads in one order. */
static void ATT(bwd_keys)(const ATT(head) *hd, bool with_dq, bool add, const T *lse, const T *dsum,
                          const att_hm *hm, int64_t kb, const att_rules *ru, int64_t d, T scale,
                          ATT(scratch) *w) {
  int64_t kn = ru->tk - kb < ATT_BK ? ru->tk - kb : ATT_BK, qlo, qhi;
  int64_t sk = hd->st[3], sdk = hd->st[4], sdv = hd->st[5], sv = hd->st[6];
  for (int64_t c = 0; c < kn * d; c++) w->dkb[c] = 0, w->dvb[c] = 0;
  att_query_range(ru, kb, kb + kn, &qlo, &qhi);
  if (qhi > qlo) {
    ATT(transpose)(w->kt, hd->k + kb * sk, kn, d, sk);
    ATT(transpose)(w->vt, hd->v + kb * sv, kn, d, sv);
    ATT(bwd_block)(with_dq ? hd->dq : NULL, w->dkb, w->dvb, hd->g, hd->q, hd->k, hd->st, lse, dsum, kb, kn,
                   qlo, qhi, ru, hm, d, scale, w->kt, w->vt, w->s, w->dp);
  }
  for (int64_t r = 0; r < kn; r++) {
    T *dkr = hd->dk + (kb + r) * sdk, *dvr = hd->dv + (kb + r) * sdv;
    const T *ak = w->dkb + r * d, *av = w->dvb + r * d;
    if (add) {
      for (int64_t c = 0; c < d; c++) dkr[c] += ak[c], dvr[c] += av[c];
    } else {
      memcpy(dkr, ak, sizeof(T) * (size_t)d);
      memcpy(dvr, av, sizeof(T) * (size_t)d);
    }
  }
}

/* The backward. With a key/value head per thread or more, a thread takes
   whole key/value heads (walking the key blocks for each query head of the
   group, dQ summed in place). With fewer than threads, two passes share the
   work out finer: dK and dV per (key/value head, key block), then dQ per
   (head, query block), which recomputes the scores once more. */
static zorch_status ATT(bwd)(T *dq, const att_lay *ldq, T *dk, const att_lay *ldk, T *dv,
                             const att_lay *ldv, const T *g, const att_lay *lg, const T *q,
                             const att_lay *lq, const T *k, const att_lay *lk, const T *v,
                             const att_lay *lv, const T *o, const att_lay *lo, const T *lse,
                             const att_geom *geo) {
  int64_t bh = geo->bh, tq = geo->tq, tk = geo->tk, d = geo->d, grp = geo->group, nkv = bh / grp;
  att_rules ru = att_rules_of(geo);
  T scale = (T)geo->scale;
  bool oom = false;
  bool par = bh * tq * tk * d >= CPU_GRAIN;
  bool split = par && nkv < cpu_threads();
  int64_t nkb = (tk + ATT_BK - 1) / ATT_BK, nqb = (tq + ATT_BQ - 1) / ATT_BQ;
  T *dsum = cpu_scratch(sizeof(T) * (size_t)(bh * tq > 0 ? bh * tq : 1));
  if (!dsum) return err_set(ZORCH_ERR_OOM, "attention: out of memory for the backward's row sums");
  ATT(row_dots)(dsum, g, lg, o, lo, bh, tq, d);
  /* whole heads with strided rows are copied into thread scratch (see pack),
     dQ summed there and written out once */
  bool pack = !split && (ldq->st != d || lg->st != d || lq->st != d || lk->st != d || lv->st != d);
  if (!pack)
    for (int64_t h = 0; h < bh; h++)
      for (int64_t t = 0; t < tq; t++) memset(dq + att_head(ldq, h) + t * ldq->st, 0, sizeof(T) * (size_t)d);
#define HEAD(h) ATT(head_at)(dq, ldq, dk, ldk, dv, ldv, g, lg, q, lq, k, lk, v, lv, h, (h) / grp)
#pragma omp parallel if (par)
  {
    ATT(scratch) w = {0};
    T *buf = ATT(scratch_new)(&w, d);
    T *pk = pack ? cpu_scratch(sizeof(T) * (size_t)(3 * tq * d + 2 * tk * d)) : NULL;
    if (!buf || (pack && !pk)) {
#pragma omp atomic write
      oom = true;
    }
    if (!split) {
#pragma omp for schedule(dynamic)
      for (int64_t kvh = 0; kvh < nkv; kvh++) {
        if (!buf || (pack && !pk)) continue;
        T *qp = pk, *gp = pack ? qp + tq * d : NULL, *kp = pack ? gp + tq * d : NULL;
        T *vp = pack ? kp + tk * d : NULL, *dqp = pack ? vp + tk * d : NULL;
        for (int64_t gi = 0; gi < grp; gi++) {
          int64_t h = kvh * grp + gi;
          ATT(head) hd = HEAD(h);
          att_hm hm = att_hm_of(geo, h);
          T *dqh = hd.dq;
          if (pack) {
            if (gi == 0) {
              ATT(pack)(kp, hd.k, tk, hd.st[3], d);
              ATT(pack)(vp, hd.v, tk, hd.st[6], d);
            }
            ATT(pack)(qp, hd.q, tq, hd.st[2], d);
            ATT(pack)(gp, hd.g, tq, hd.st[1], d);
            memset(dqp, 0, sizeof(T) * (size_t)(tq * d));
            hd.q = qp, hd.g = gp, hd.k = kp, hd.v = vp, hd.dq = dqp;
            hd.st[0] = hd.st[1] = hd.st[2] = hd.st[3] = hd.st[6] = d;
          }
          for (int64_t kb = 0; kb < tk; kb += ATT_BK)
            ATT(bwd_keys)(&hd, true, gi > 0, lse + h * tq, dsum + h * tq, &hm, kb, &ru, d, scale, &w);
          if (pack)
            for (int64_t t = 0; t < tq; t++) memcpy(dqh + t * ldq->st, hd.dq + t * d, sizeof(T) * (size_t)d);
        }
      }
    } else {
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < nkv * nkb; t++) {
        if (!buf) continue;
        int64_t kvh = t / nkb, kb = (t % nkb) * ATT_BK;
        for (int64_t gi = 0; gi < grp; gi++) {
          int64_t h = kvh * grp + gi;
          ATT(head) hd = HEAD(h);
          att_hm hm = att_hm_of(geo, h);
          ATT(bwd_keys)(&hd, false, gi > 0, lse + h * tq, dsum + h * tq, &hm, kb, &ru, d, scale, &w);
        }
      }
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < bh * nqb; t++) {
        if (!buf) continue;
        int64_t h = t / nqb, i0 = (t % nqb) * ATT_BQ, i1 = i0 + ATT_BQ < tq ? i0 + ATT_BQ : tq, klo, khi;
        ATT(head) hd = HEAD(h);
        att_hm hm = att_hm_of(geo, h);
        att_key_range(&ru, i0, i1, &klo, &khi);
        for (int64_t kb = klo / ATT_BK * ATT_BK; kb < khi; kb += ATT_BK) {
          int64_t kn = tk - kb < ATT_BK ? tk - kb : ATT_BK, qlo, qhi;
          att_query_range(&ru, kb, kb + kn, &qlo, &qhi);
          qlo = qlo > i0 ? qlo : i0, qhi = qhi < i1 ? qhi : i1;
          if (qlo >= qhi) continue;
          ATT(transpose)(w.kt, hd.k + kb * hd.st[3], kn, d, hd.st[3]);
          ATT(transpose)(w.vt, hd.v + kb * hd.st[6], kn, d, hd.st[6]);
          ATT(bwd_block)(hd.dq, NULL, NULL, hd.g, hd.q, hd.k, hd.st, lse + h * tq, dsum + h * tq, kb, kn, qlo,
                         qhi, &ru, &hm, d, scale, w.kt, w.vt, w.s, w.dp);
        }
      }
    }
    cpu_scratch_free(buf), cpu_scratch_free(pk);
  }
#undef HEAD
  cpu_scratch_free(dsum);
  if (oom) return err_set(ZORCH_ERR_OOM, "attention: out of memory for the backward's scratch");
  return ZORCH_OK;
}

#undef ATT_VL
#undef ATT_LD
#undef ATT_ST
#undef ATT
#undef ATT_CAT
#undef ATT_CAT_
