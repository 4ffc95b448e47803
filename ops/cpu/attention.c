/* attention.c: the CPU attention kernels, forward and backward, in the manner of
   FlashAttention: the scores are made a key block at a time and never stored
   whole, so the extra memory is the per-row log-sum-exp and scratch of a few
   blocks per thread, whatever the sequence length. The work is split over heads
   and query blocks (forward) and over heads (backward, each thread owning its
   heads' dQ, so no two threads add to one element and the sums do not depend on
   the thread count). The inner loops run over contiguous keys or over the head
   dim, plain loops the compiler vectorises (built for AVX2 and AVX-512 too). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"

/* a tensor's first element as a pointer of any element type */
#define P(t) ((void *)tensor_ptr(t))

#define ATT_BQ 64 /* queries per forward work item */
#define ATT_BK 64 /* keys per block */
#define ATT_CW 64 /* output columns per register tile (then ATT_CW / 2) */
#define ATT_ALL ((int64_t)1 << 40) /* a tile's band without a bound */

/* The softmax loops are built without trapping math: they compare and convert
   values whose floating-point exceptions nobody reads, and GCC if-converts (and
   so vectorises) such loops only under that assumption. */
#define ATT_NOTRAP __attribute__((optimize("no-trapping-math")))

/* The tiles' multiply-adds as fused ones where the clone's ISA has them: the
   build's -std=c11 turns contraction off, which left the AVX-512 tiles at a
   vmulps and a vaddps per product. */
#define ATT_FMA __attribute__((optimize("fp-contract=fast")))

/* e^x for x <= 0 in float32, as a polynomial the compiler vectorises (libm's
   expf is a call per element, half the forward's time): x = n ln2 + r,
   |r| <= ln2 / 2, e^r by Cephes' degree-6 polynomial (about 1 ulp), times 2^n
   built in the exponent bits; below -87.3 (under the smallest normal) it is 0.
   A NaN stays NaN (the vectorised select gave 0, which dropped a NaN score
   from its row), and the integer steps never see it (converting it is
   undefined). */
ATT_NOTRAP static inline float att_expf(float x) {
  float c = x >= -87.3f ? x : -87.3f;
  float fx = c * 1.44269504088896341f + 0.5f;
  int32_t n = (int32_t)(fx + 128.0f) - 128; /* floor, as fx + 128 > 0 */
  float fn = (float)n;
  float r = c - fn * 0.693359375f + fn * 2.12194440e-4f;
  float z = r * r;
  float y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
              4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) * z + r + 1.0f;
  union {
    int32_t i;
    float f;
  } p2 = {.i = (n + 127) * (1 << 23)};
  float e = y * p2.f * (float)(x >= -87.3f);
  return x == x ? e : x;
}

/* Where a tensor's heads and rows are: head h (of bh, numbered as in a
   contiguous (B, H, ...) tensor) starts at (h / nh) * sb + (h % nh) * sh, and
   its rows are st apart; a row's d values are adjacent. So q, k and v may be
   the heads of a fused projection's output viewed in place (B, T, H, D ->
   transposed), and the gradients written the same way. */
typedef struct {
  int64_t nh, sb, sh, st;
} att_lay;

static inline int64_t att_head(const att_lay *l, int64_t h) {
  return (h / l->nh) * l->sb + (h % l->nh) * l->sh;
}

/* The layout of a (bh, t, d) or (B, H, t, d) tensor whose last stride is 1. */
static att_lay att_lay_of(const zorch_tensor *t) {
  if (t->ndim == 4) return (att_lay){t->shape[1] > 0 ? t->shape[1] : 1, t->strides[0], t->strides[1], t->strides[2]};
  return (att_lay){1, t->strides[0], 0, t->strides[1]};
}


/* The rules every head shares: query i sees key j only inside its band
   [i + off - win + 1, i + off] (each side only with the window, causal), and
   only where the head's mask and segments allow. */
typedef struct {
  int64_t tq, tk, off, win; /* win 0: no window */
  bool causal;
} att_rules;

static att_rules att_rules_of(const att_geom *g) {
  return (att_rules){g->tq, g->tk, g->tk - g->tq, g->window, g->causal};
}

/* The band of query i as block-relative columns [*jlo, *jhi) of the key block
   [kb, kb + kn). */
static inline void att_band(const att_rules *ru, int64_t i, int64_t kb, int64_t kn, int64_t *jlo,
                            int64_t *jhi) {
  int64_t lo = ru->win ? i + ru->off - ru->win + 1 - kb : 0, hi = ru->causal ? i + ru->off + 1 - kb : kn;
  *jlo = lo < 0 ? 0 : lo > kn ? kn : lo;
  *jhi = hi < 0 ? 0 : hi > kn ? kn : hi;
}

/* The keys [klo, khi) some query of [i0, i1) may see under the band. */
static inline void att_key_range(const att_rules *ru, int64_t i0, int64_t i1, int64_t *klo, int64_t *khi) {
  int64_t lo = ru->win ? i0 + ru->off - ru->win + 1 : 0, hi = ru->causal ? i1 + ru->off : ru->tk;
  *klo = lo < 0 ? 0 : lo > ru->tk ? ru->tk : lo;
  *khi = hi < *klo ? *klo : hi > ru->tk ? ru->tk : hi;
}

/* The queries [qlo, qhi) that may see some key of [k0, k1) under the band. */
static inline void att_query_range(const att_rules *ru, int64_t k0, int64_t k1, int64_t *qlo, int64_t *qhi) {
  int64_t lo = ru->causal ? k0 - ru->off : 0, hi = ru->win ? k1 - 1 - ru->off + ru->win : ru->tq;
  *qlo = lo < 0 ? 0 : lo > ru->tq ? ru->tq : lo;
  *qhi = hi < *qlo ? *qlo : hi > ru->tq ? ru->tq : hi;
}

/* One head's mask and segments: keep (bool) or add (the compute dtype) at
   [i * mq + j * mk]; qs[i] and ks[j] the segment ids of its batch. */
typedef struct {
  const bool *keep;
  const void *add;
  int64_t mq, mk;
  const int64_t *qs, *ks;
} att_hm;

static att_hm att_hm_of(const att_geom *g, int64_t h) {
  att_hm hm = {0};
  int64_t b = h / g->heads, hh = h % g->heads;
  if (g->mask) {
    const zorch_tensor *m = g->mask;
    const char *base = tensor_ptr(m) + (b * m->strides[0] + hh * m->strides[1]) * (int64_t)dtype_sizes[m->dtype];
    if (m->dtype == ZORCH_BOOL) hm.keep = (const bool *)base;
    else hm.add = base;
    hm.mq = m->strides[2], hm.mk = m->strides[3];
  }
  if (g->kseg) {
    hm.ks = (const int64_t *)tensor_ptr(g->kseg) + b * g->kseg->strides[0];
    hm.qs = (const int64_t *)tensor_ptr(g->qseg) + b * g->qseg->strides[0];
  }
  return hm;
}

/* Whether the segment ids a[0..n) and b[0..m) may share one: their ranges
   meet (packed sequences keep ids in runs, so disjoint ranges are the rule). */
static bool att_segs_meet(const int64_t *a, int64_t n, const int64_t *b, int64_t m) {
  if (n <= 0 || m <= 0) return false;
  int64_t alo = a[0], ahi = a[0], blo = b[0], bhi = b[0];
  for (int64_t i = 1; i < n; i++) alo = a[i] < alo ? a[i] : alo, ahi = a[i] > ahi ? a[i] : ahi;
  for (int64_t i = 1; i < m; i++) blo = b[i] < blo ? b[i] : blo, bhi = b[i] > bhi ? b[i] : bhi;
  return alo <= bhi && blo <= ahi;
}


#define T float
#define SFX float /* (the per-type functions are named by T: the dispatch's BODY(T) calls them) */
#define ATT_BLOCK_T cpu_t16_f32
#define EXP att_expf
#define LOG logf
#include "attention_tpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG
#undef ATT_BLOCK_T

#define T double
#define SFX double
#define EXP exp
#define LOG log
#include "attention_tpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG

zorch_status cpu_attention(zorch_tensor *out, zorch_tensor *lse, const zorch_tensor *q,
                           const zorch_tensor *k, const zorch_tensor *v, const att_geom *g) {
  att_lay lo = att_lay_of(out), lq = att_lay_of(q), lk = att_lay_of(k), lv = att_lay_of(v);
#define ATT_FWD(T) return fwd_##T(P(out), &lo, P(lse), P(q), &lq, P(k), &lk, P(v), &lv, g);
  CPU_FLOAT_DISPATCH(q->dtype, "attention", ATT_FWD);
#undef ATT_FWD
}

zorch_status cpu_attention_bwd(zorch_tensor *dq, zorch_tensor *dk, zorch_tensor *dv,
                               const zorch_tensor *dout, const zorch_tensor *q,
                               const zorch_tensor *k, const zorch_tensor *v,
                               const zorch_tensor *out, const zorch_tensor *lse, const att_geom *g) {
  att_lay ldq = att_lay_of(dq), ldk = att_lay_of(dk), ldv = att_lay_of(dv), lg = att_lay_of(dout),
          lq = att_lay_of(q), lk = att_lay_of(k), lv = att_lay_of(v), lo = att_lay_of(out);
#define ATT_BWD(T)                                                                                   \
  return bwd_##T(P(dq), &ldq, P(dk), &ldk, P(dv), &ldv, P(dout), &lg, P(q), &lq, P(k), &lk, P(v), &lv, P(out), \
                 &lo, P(lse), g);
  CPU_FLOAT_DISPATCH(q->dtype, "attention backward", ATT_BWD);
#undef ATT_BWD
}

/* ---- rotary position embedding (include/zorch_ops.h): one (b, h, s) row of
   head_dim per iteration; row r reads table row (b when per_batch) * seq + s.
   With h2 = dim / 2, rotate_half(x)_j is -x_{j+h2} below h2, x_{j-h2} above. */
#define ROPE_FWD(T)                                                                          \
  {                                                                                          \
    T *op = (T *)tensor_ptr(out);                                                            \
    const T *xp = (const T *)tensor_ptr(x), *cp = (const T *)tensor_ptr(cosines),            \
            *sp = (const T *)tensor_ptr(sines);                                              \
    _Pragma("omp parallel for if (rows * dim >= CPU_GRAIN)")                                 \
    for (int64_t r = 0; r < rows; r++) {                                                     \
      int64_t t = (per_batch ? r / (heads * seq) * seq : 0) + r % seq;                       \
      const T *xr = xp + r * dim, *c = cp + t * dim, *s = sp + t * dim;                      \
      T *o = op + r * dim;                                                                   \
      for (int64_t j = 0; j < h2; j++) o[j] = xr[j] * c[j] - xr[j + h2] * s[j];              \
      for (int64_t j = h2; j < dim; j++) o[j] = xr[j] * c[j] + xr[j - h2] * s[j];            \
    }                                                                                        \
  }

zorch_status cpu_rope(zorch_tensor *out, const zorch_tensor *x, const zorch_tensor *cosines,
                      const zorch_tensor *sines, int64_t batch, int64_t heads, int64_t seq, int64_t dim,
                      bool per_batch) {
  int64_t rows = batch * heads * seq, h2 = dim / 2;
  CPU_FLOAT_DISPATCH(x->dtype, "rope", ROPE_FWD);
  return ZORCH_OK;
}

/* gx_j = g_j c_j + g_{j+h2} s_{j+h2} below h2, g_j c_j - g_{j-h2} s_{j-h2} above;
   the tables' gradients sum each entry's rows in order (the same bits on every
   thread count), one table row per iteration. */
#define ROPE_BWD(T)                                                                          \
  {                                                                                          \
    const T *gp = (const T *)tensor_ptr(g), *xp = (const T *)tensor_ptr(x),                  \
            *cp = (const T *)tensor_ptr(cosines), *sp = (const T *)tensor_ptr(sines);        \
    if (gx) {                                                                                \
      T *gxp = (T *)tensor_ptr(gx);                                                          \
      _Pragma("omp parallel for if (rows * dim >= CPU_GRAIN)")                               \
      for (int64_t r = 0; r < rows; r++) {                                                   \
        int64_t t = (per_batch ? r / (heads * seq) * seq : 0) + r % seq;                     \
        const T *gr = gp + r * dim, *c = cp + t * dim, *s = sp + t * dim;                    \
        T *o = gxp + r * dim;                                                                \
        for (int64_t j = 0; j < h2; j++) o[j] = gr[j] * c[j] + gr[j + h2] * s[j + h2];       \
        for (int64_t j = h2; j < dim; j++) o[j] = gr[j] * c[j] - gr[j - h2] * s[j - h2];     \
      }                                                                                      \
    }                                                                                        \
    if (gcos || gsin) {                                                                      \
      T *gcp = gcos ? (T *)tensor_ptr(gcos) : NULL, *gsp = gsin ? (T *)tensor_ptr(gsin) : NULL; \
      int64_t trows = (per_batch ? batch : 1) * seq, nb = per_batch ? 1 : batch;             \
      _Pragma("omp parallel for if (rows * dim >= CPU_GRAIN)")                               \
      for (int64_t t = 0; t < trows; t++) {                                                  \
        int64_t b0 = per_batch ? t / seq : 0, sq = t % seq;                                  \
        for (int64_t j = 0; j < dim; j++) {                                                  \
          double ac = 0, as = 0;                                                             \
          int64_t jr = j < h2 ? j + h2 : j - h2;                                             \
          double sign = j < h2 ? -1.0 : 1.0;                                                 \
          for (int64_t b = b0; b < b0 + nb; b++)                                             \
            for (int64_t h = 0; h < heads; h++) {                                            \
              int64_t o = ((b * heads + h) * seq + sq) * dim;                                \
              ac += (double)gp[o + j] * (double)xp[o + j];                                   \
              as += (double)gp[o + j] * sign * (double)xp[o + jr];                           \
            }                                                                                \
          if (gcp) gcp[t * dim + j] = (T)ac;                                                 \
          if (gsp) gsp[t * dim + j] = (T)as;                                                 \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
  }

zorch_status cpu_rope_bwd(zorch_tensor *gx, zorch_tensor *gcos, zorch_tensor *gsin, const zorch_tensor *g,
                          const zorch_tensor *x, const zorch_tensor *cosines, const zorch_tensor *sines,
                          int64_t batch, int64_t heads, int64_t seq, int64_t dim, bool per_batch) {
  int64_t rows = batch * heads * seq, h2 = dim / 2;
  CPU_FLOAT_DISPATCH(g->dtype, "rope backward", ROPE_BWD);
  return ZORCH_OK;
}
