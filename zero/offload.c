/* offload.c: Adam's moments in a file, streamed in chunks (offload.h). One I/O
   thread serves a first-in first-out queue of chunk reads and writes with
   pread/pwrite; the step submits the read of chunk i + nbuf - 1 once chunk i - 1
   is written back (the same buffer: the queue's order keeps the write first),
   so reading ahead, updating and writing behind overlap. A chunk's buffer holds
   its fields one after another, each `chunk` floats: m and v, or with the
   parameters bound p, g, m and v; an op moves some of them (a mask). In the
   moments' file chunk c holds its m then its v. Built with liburing
   (ZORCH_URING), the thread submits an op's fields to an io_uring together
   with those of the next op when it uses another buffer (a chunk's write and
   the read ahead the step queues with it) and waits for them, reads and
   writes in flight at once; without it,
   or when the kernel refuses a ring, or with ZORCH_OFFLOAD_IO=pread, it calls
   pread/pwrite one field after another. With direct I/O (a chunk of a
   multiple of ZOFF_ALIGN / 4 elements, a filesystem that takes O_DIRECT) the
   moments' chunk c holds m at c * chunk * 8 bytes and v chunk * 4 bytes after
   it, every transfer rounded up to ZOFF_ALIGN bytes: the page cache never
   holds the state, so a state larger than memory streams at the disk's pace
   without the kernel's write-back and eviction in the way. */
#include "offload.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ops/def/ops.h"
#include "../ops/core/error.h"
#ifdef ZORCH_URING
#include <liburing.h>
#endif

enum { OP_READ, OP_WRITE, OP_STOP };
enum { F_P = 1, F_G = 2, F_M = 4, F_V = 8 }; /* fields of a chunk */
typedef struct {
  int kind;
  int64_t chunk;
  int buf, fields;
} io_op;

#define QCAP 64

struct zoff {
  int fd;
  int64_t numel, chunk, nchunks;
  int nbuf;
  float **bufs; /* each nfield * chunk floats: (p, g,) m, v */
  int nfield;
  int pfd;                /* the parameters' file (bound), or -1 */
  int64_t p_off, g_off;   /* bytes: element 0's parameter and gradient in it */
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  io_op q[QCAP];
  int64_t submitted, done; /* ops, by sequence number */
  int err;                 /* the first I/O error (errno), 0: none */
  char what[64];
  double read_s, write_s, wait_s, step_s;
  int64_t read_bytes, write_bytes;
  bool uring; /* the I/O thread uses the ring */
  bool direct, pdirect; /* the moments' file, the parameters' file: O_DIRECT */
  double gscale;        /* the next step's gradient factor (bound parameters) */
#ifdef ZORCH_URING
  struct io_uring ring;
#endif
};

static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int64_t chunk_len(const zoff *o, int64_t c) {
  int64_t lo = c * o->chunk;
  return o->numel - lo < o->chunk ? o->numel - lo : o->chunk;
}

/* A field's floats in the chunk's buffer. */
static float *field_of(const zoff *o, float *buf, int f) {
  int k = f == F_P ? 0 : f == F_G ? 1 : f == F_M ? 0 : 1;
  if (o->nfield == 4 && (f == F_M || f == F_V)) k += 2;
  return buf + (size_t)k * (size_t)o->chunk;
}

/* len floats at byte offset at of fd, whole; false with errno on failure. */
static bool seg_io(int kind, int fd, char *p, size_t left, off_t at) {
  while (left > 0) {
    ssize_t r = kind == OP_READ ? pread(fd, p, left, at) : pwrite(fd, p, left, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return false;
    }
    p += r, left -= (size_t)r, at += r;
  }
  return true;
}

typedef struct {
  int kind; /* OP_READ or OP_WRITE */
  int fd;
  char *p;
  size_t left;
  off_t at;
} seg;

#ifdef ZORCH_URING
static void uring_push(zoff *o, seg *s, int i) {
  struct io_uring_sqe *q = io_uring_get_sqe(&o->ring); /* (the ring has a slot per field of two ops) */
  if (s->kind == OP_READ) io_uring_prep_read(q, s->fd, s->p, (unsigned)s->left, (uint64_t)s->at);
  else io_uring_prep_write(q, s->fd, s->p, (unsigned)s->left, (uint64_t)s->at);
  io_uring_sqe_set_data64(q, (uint64_t)i);
}

/* The segments through the ring, all in flight together; a short transfer
   goes back for the rest. Every one submitted completes before it returns
   (the buffers are the step's). */
static bool uring_io(zoff *o, seg *s, int n) {
  int inflight = 0, err = 0;
  for (int i = 0; i < n; i++) uring_push(o, &s[i], i), inflight++;
  io_uring_submit(&o->ring);
  while (inflight > 0) {
    struct io_uring_cqe *cqe;
    int r = io_uring_wait_cqe(&o->ring, &cqe);
    if (r == -EINTR) continue;
    if (r < 0) { /* (the ring itself failed: nothing more will complete) */
      errno = -r;
      return false;
    }
    int i = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
    io_uring_cqe_seen(&o->ring, cqe);
    inflight--;
    if (res == -EINTR || res == -EAGAIN) res = 0; /* again, below */
    else if (res <= 0) {
      if (!err) err = res < 0 ? -res : EIO;
      continue;
    }
    s[i].p += res, s[i].left -= (size_t)res, s[i].at += res;
    if (s[i].left > 0 && !err) {
      uring_push(o, &s[i], i), inflight++;
      io_uring_submit(&o->ring);
    }
  }
  if (err) errno = err;
  return err == 0;
}
#endif

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* The transfers of an op: the chunk's fields in `fields`, into out (at most 4). */
static int chunk_segs(const zoff *o, int kind, int64_t c, float *buf, int fields, seg *out) {
  int64_t len = chunk_len(o, c), lo = c * o->chunk;
  size_t n = (size_t)len * sizeof(float);
  int ns = 0;
  for (int f = F_P; f <= F_V; f <<= 1) {
    if (!(fields & f)) continue;
    bool pf = f == F_P || f == F_G, direct = pf ? o->pdirect : o->direct;
    off_t at = f == F_P   ? (off_t)(o->p_off + lo * 4)
               : f == F_G ? (off_t)(o->g_off + lo * 4)
                          : (off_t)(lo * 2 * 4 + (f == F_V ? (o->direct ? o->chunk : len) * 4 : 0));
    /* (direct: the tail of a short last chunk moves too, within the buffer) */
    out[ns++] = (seg){kind, pf ? o->pfd : o->fd, (char *)field_of(o, buf, f), direct ? round_up(n, ZOFF_ALIGN) : n, at};
  }
  return ns;
}

/* The transfers, whole; false with errno on failure. */
static bool segs_io(zoff *o, seg *s, int ns) {
#ifdef ZORCH_URING
  if (o->uring) return uring_io(o, s, ns);
#else
  (void)o;
#endif
  for (int i = 0; i < ns; i++)
    if (!seg_io(s[i].kind, s[i].fd, s[i].p, s[i].left, s[i].at)) return false;
  return true;
}

static int64_t fields_bytes(const zoff *o, int64_t c, int fields) {
  int k = 0;
  for (int f = F_P; f <= F_V; f <<= 1) k += (fields & f) != 0;
  return chunk_len(o, c) * k * (int64_t)sizeof(float);
}

/* The I/O thread takes the queue's ops in order; with the ring, the next op
   goes along with the head one when it uses another buffer (the step queues
   a chunk's write and the read that reuses another chunk's buffer together),
   so a write and a read are in flight at once. Ops on one buffer stay in
   order: the read that refills a buffer waits for its write. */
static void *io_main(void *arg) {
  zoff *o = arg;
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (o->done == o->submitted) pthread_cond_wait(&o->cv, &o->mu);
    io_op ops[2] = {o->q[o->done % QCAP]};
    if (ops[0].kind == OP_STOP) break;
    int nops = 1;
    if (o->uring && o->submitted - o->done >= 2) {
      ops[1] = o->q[(o->done + 1) % QCAP];
      if (ops[1].kind != OP_STOP && ops[1].buf != ops[0].buf) nops = 2;
    }
    bool skip = o->err != 0;
    pthread_mutex_unlock(&o->mu);
    double t0 = mono();
    seg s[8];
    int ns = 0;
    for (int k = 0; k < nops; k++)
      ns += chunk_segs(o, ops[k].kind, ops[k].chunk, o->bufs[ops[k].buf], ops[k].fields, s + ns);
    bool good = skip || segs_io(o, s, ns);
    int e = errno;
    double dt = mono() - t0;
    pthread_mutex_lock(&o->mu);
    if (!good && !o->err) {
      o->err = e ? e : EIO;
      snprintf(o->what, sizeof o->what, "%s chunk %lld of the state",
               nops == 2 ? "reading or writing" : ops[0].kind == OP_READ ? "reading" : "writing",
               (long long)ops[0].chunk);
    }
    if (!skip) { /* the time shared by the bytes */
      int64_t b[2] = {fields_bytes(o, ops[0].chunk, ops[0].fields),
                      nops == 2 ? fields_bytes(o, ops[1].chunk, ops[1].fields) : 0};
      for (int k = 0; k < nops; k++) {
        double share = b[0] + b[1] > 0 ? dt * (double)b[k] / (double)(b[0] + b[1]) : 0;
        if (ops[k].kind == OP_READ) o->read_s += share, o->read_bytes += b[k];
        else o->write_s += share, o->write_bytes += b[k];
      }
    }
    o->done += nops;
    pthread_cond_broadcast(&o->cv);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

/* Queues n ops at once (so the I/O thread finds them together), their
   sequence numbers in seq[] (waits while the queue lacks room). */
static void submit_ops(zoff *o, const io_op *ops, int n, int64_t *seq) {
  pthread_mutex_lock(&o->mu);
  while (o->submitted - o->done > QCAP - n) pthread_cond_wait(&o->cv, &o->mu);
  for (int k = 0; k < n; k++) {
    o->q[o->submitted % QCAP] = ops[k];
    seq[k] = o->submitted++;
  }
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
}

/* Queues an op; returns its sequence number (waits while the queue is full). */
static int64_t submit(zoff *o, int kind, int64_t c, int buf, int fields) {
  io_op op = {kind, c, buf, fields};
  int64_t seq;
  submit_ops(o, &op, 1, &seq);
  return seq;
}

/* Waits until op seq is done; its error (or an earlier one) as a status. */
static zorch_status wait_op(zoff *o, int64_t seq) {
  double t0 = mono();
  pthread_mutex_lock(&o->mu);
  while (o->done <= seq) pthread_cond_wait(&o->cv, &o->mu);
  int e = o->err;
  char what[64];
  memcpy(what, o->what, sizeof what);
  o->wait_s += mono() - t0;
  pthread_mutex_unlock(&o->mu);
  if (e) return err_set(ZORCH_ERR_IO, "optimizer offload: %s: %s", what, strerror(e));
  return ZORCH_OK;
}

zoff *zoff_open(const char *dir, int64_t numel, int64_t chunk, int nbuf) {
  if (!dir || !*dir) return err_null(ZORCH_ERR_ARG, "optimizer offload: nvme_path is empty");
  if (numel < 0 || chunk < 1 || nbuf < 2 || nbuf > QCAP / 2)
    return err_null(ZORCH_ERR_ARG, "optimizer offload: chunk must be >= 1 and buffer_count in 2..%d, got %lld and %d",
                    QCAP / 2, (long long)chunk, nbuf);
  const char *dio = getenv("ZORCH_OFFLOAD_DIRECT");
  bool want_direct = chunk % (ZOFF_ALIGN / 4) == 0 && !(dio && !strcmp(dio, "0"));
  /* (a store smaller than its chunk: buffers of its size, aligned for direct I/O) */
  if (chunk > numel && numel > 0) chunk = want_direct ? (int64_t)round_up((size_t)numel, ZOFF_ALIGN / 4) : numel;
  zoff *o = calloc(1, sizeof *o);
  char *path = malloc(strlen(dir) + 32);
  if (!o || !path) {
    free(o), free(path);
    return err_null(ZORCH_ERR_OOM, "optimizer offload: out of memory");
  }
  sprintf(path, "%s/zorch-optim-XXXXXX", dir);
  o->fd = mkstemp(path);
  if (o->fd < 0) {
    err_set(ZORCH_ERR_IO, "optimizer offload: cannot make a file in nvme_path %s: %s", dir, strerror(errno));
    free(o), free(path);
    return NULL;
  }
  unlink(path); /* the file lives while the store is open */
  free(path);
  if (want_direct) { /* the same file through a direct descriptor, where the filesystem takes it */
    int dfd = zoff_reopen(o->fd, true, 0);
    if (dfd >= 0) close(o->fd), o->fd = dfd, o->direct = true;
  }
  o->numel = numel, o->chunk = chunk, o->nbuf = nbuf, o->nfield = 2, o->pfd = -1, o->gscale = 1;
#ifdef ZORCH_URING
  const char *how = getenv("ZORCH_OFFLOAD_IO");
  if (!(how && !strcmp(how, "pread"))) o->uring = io_uring_queue_init(8, &o->ring, 0) == 0; /* 2 ops x 4 fields */
#endif
  o->nchunks = numel == 0 ? 0 : (numel + chunk - 1) / chunk;
  if (ftruncate(o->fd, (off_t)((o->direct ? o->nchunks * chunk : numel) * 2 * (int64_t)sizeof(float))) != 0) {
    err_set(ZORCH_ERR_IO, "optimizer offload: cannot size the state file in %s (%lld bytes): %s", dir,
            (long long)(numel * 8), strerror(errno));
    close(o->fd), free(o);
    return NULL;
  }
  o->bufs = calloc((size_t)nbuf, sizeof *o->bufs);
  for (int i = 0; o->bufs && i < nbuf; i++)
    if (posix_memalign((void **)&o->bufs[i], 4096, (size_t)chunk * 2 * sizeof(float))) o->bufs[i] = NULL;
  bool bufs_ok = o->bufs != NULL;
  for (int i = 0; bufs_ok && i < nbuf; i++) bufs_ok = o->bufs[i] != NULL;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  if (!bufs_ok || pthread_create(&o->thread, NULL, io_main, o) != 0) {
    zoff_close(o);
    return err_null(ZORCH_ERR_OOM, "optimizer offload: out of memory for %d buffers of %lld bytes", nbuf,
                    (long long)(chunk * 8));
  }
  o->started = true;
  return o;
}

void zoff_close(zoff *o) {
  if (!o) return;
  if (o->started) {
    submit(o, OP_STOP, 0, 0, 0);
    pthread_join(o->thread, NULL);
  }
  pthread_mutex_destroy(&o->mu);
  pthread_cond_destroy(&o->cv);
  for (int i = 0; o->bufs && i < o->nbuf; i++) free(o->bufs[i]);
  free(o->bufs);
  close(o->fd);
  if (o->pfd >= 0) close(o->pfd);
#ifdef ZORCH_URING
  if (o->uring) io_uring_queue_exit(&o->ring);
#endif
  free(o);
}

zorch_status zoff_bind_params(zoff *o, int fd, int64_t p_off, int64_t g_off) {
  if (o->pfd >= 0) return err_set(ZORCH_ERR_STATE, "optimizer offload: the parameters are already bound");
  float **bigger = calloc((size_t)o->nbuf, sizeof *bigger);
  for (int i = 0; bigger && i < o->nbuf; i++)
    if (posix_memalign((void **)&bigger[i], 4096, (size_t)o->chunk * 4 * sizeof(float))) bigger[i] = NULL;
  bool ok = bigger != NULL;
  for (int i = 0; ok && i < o->nbuf; i++) ok = bigger[i] != NULL;
  /* a description of its own: direct where the store's is and both regions
     start aligned (the engine's may differ) */
  bool direct = o->direct && p_off % ZOFF_ALIGN == 0 && g_off % ZOFF_ALIGN == 0;
  int dup_fd = ok ? zoff_reopen(fd, direct, -1) : -1;
  if (ok && dup_fd < 0 && direct) direct = false, dup_fd = zoff_reopen(fd, false, -1);
  if (!ok || dup_fd < 0) {
    for (int i = 0; bigger && i < o->nbuf; i++) free(bigger[i]);
    free(bigger);
    return ok ? err_set(ZORCH_ERR_IO, "optimizer offload: cannot use the parameters' file: %s", strerror(errno))
              : err_set(ZORCH_ERR_OOM, "optimizer offload: out of memory for %d buffers of %lld bytes", o->nbuf,
                        (long long)(o->chunk * 16));
  }
  /* (no op is queued between steps: the old buffers are idle) */
  for (int i = 0; i < o->nbuf; i++) free(o->bufs[i]);
  free(o->bufs);
  o->bufs = bigger;
  o->nfield = 4, o->pfd = dup_fd, o->p_off = p_off, o->g_off = g_off, o->pdirect = direct;
  return ZORCH_OK;
}

void zoff_set_grad_scale(zoff *o, double s) { o->gscale = s; }

static zorch_status check_flat(const char *fn, const zoff *o, const zorch_tensor *t) {
  if (!t) return err_set(ZORCH_ERR_ARG, "%s: tensor is NULL", fn);
  if (zorch_tensor_dtype(t) != ZORCH_F32 || zorch_tensor_numel(t) != o->numel || !zorch_tensor_is_contiguous(t) ||
      zorch_tensor_device(t).type != ZORCH_CPU)
    return err_set(ZORCH_ERR_ARG, "%s: expected a contiguous float32 CPU tensor of %lld elements", fn,
                   (long long)o->numel);
  return ZORCH_OK;
}

static void reset_stats(zoff *o) {
  pthread_mutex_lock(&o->mu);
  o->read_s = o->write_s = o->wait_s = o->step_s = 0;
  o->read_bytes = o->write_bytes = 0;
  pthread_mutex_unlock(&o->mu);
}

/* Runs fn on every chunk in order, the fields `rf` read before and `wf`
   written after (0: none), nbuf - 1 reads ahead. */
typedef zorch_status (*chunk_fn)(zoff *o, float *buf, int64_t lo, int64_t len, void *ud);
static zorch_status stream(zoff *o, int rf, int wf, chunk_fn fn, void *ud) {
  zorch_status st = ZORCH_OK;
  int64_t *rseq = calloc((size_t)(o->nchunks > 0 ? o->nchunks : 1), sizeof *rseq), last = -1;
  if (!rseq) return err_set(ZORCH_ERR_OOM, "optimizer offload: out of memory");
  int ahead = o->nbuf - 1;
  if (rf)
    for (int64_t c = 0; c < o->nchunks && c < ahead; c++) rseq[c] = submit(o, OP_READ, c, (int)(c % o->nbuf), rf);
  for (int64_t c = 0; c < o->nchunks && !st; c++) {
    int b = (int)(c % o->nbuf);
    if (rf) st = wait_op(o, rseq[c]);
    else if (c >= o->nbuf && last >= 0) st = wait_op(o, last - (o->nbuf - 1)); /* the buffer's previous write */
    if (st) break;
    st = fn(o, o->bufs[b], c * o->chunk, chunk_len(o, c), ud);
    if (st) break;
    /* the write and the read ahead queued together, so that they go out together */
    io_op ops[2];
    int64_t seq[2];
    int n = 0;
    bool rd = rf && c + ahead < o->nchunks;
    if (wf) ops[n++] = (io_op){OP_WRITE, c, b, wf};
    if (rd) ops[n++] = (io_op){OP_READ, c + ahead, (int)((c + ahead) % o->nbuf), rf};
    if (n) submit_ops(o, ops, n, seq);
    if (wf) last = seq[0];
    if (rd) rseq[c + ahead] = seq[n - 1];
  }
  /* drain: every op queued finishes before the buffers are reused */
  pthread_mutex_lock(&o->mu);
  int64_t all = o->submitted - 1;
  pthread_mutex_unlock(&o->mu);
  zorch_status st2 = all >= 0 ? wait_op(o, all) : ZORCH_OK;
  free(rseq);
  return st ? st : st2;
}

typedef struct {
  zorch_tensor *param, *grad;
  int64_t step;
  int nruns;
  const zoff_run *runs;
} adam_ud;

static zorch_status adam_chunk(zoff *o, float *buf, int64_t lo, int64_t len, void *ud) {
  adam_ud *a = ud;
  zorch_status st = ZORCH_OK;
  if (o->pfd >= 0 && o->gscale != 1.0) { /* the clip's factor, as the in-memory step's scale of the whole gradient */
    zorch_tensor *g = zorch_tensor_wrap(field_of(o, buf, F_G), ZORCH_F32, 1, &len, NULL);
    st = g ? backend_of(g)->unary(UOP_MUL_S, g, g, o->gscale, 0) : zorch_last_status();
    zorch_tensor_free(g);
  }
  for (int r = 0; r < a->nruns && !st; r++) {
    const zoff_run *run = &a->runs[r];
    int64_t s = run->lo > lo ? run->lo : lo, e = run->lo + run->len < lo + len ? run->lo + run->len : lo + len;
    if (e <= s) continue;
    int64_t n = e - s, at = s - lo;
    zorch_tensor *p, *g;
    if (o->pfd >= 0) {
      p = zorch_tensor_wrap(field_of(o, buf, F_P) + at, ZORCH_F32, 1, &n, NULL);
      g = zorch_tensor_wrap(field_of(o, buf, F_G) + at, ZORCH_F32, 1, &n, NULL);
    } else {
      p = zorch_narrow(a->param, 0, s, n), g = zorch_narrow(a->grad, 0, s, n);
    }
    zorch_tensor *mt = zorch_tensor_wrap(field_of(o, buf, F_M) + at, ZORCH_F32, 1, &n, NULL);
    zorch_tensor *vt = zorch_tensor_wrap(field_of(o, buf, F_V) + at, ZORCH_F32, 1, &n, NULL);
    int64_t step = run->step > 0 ? run->step : a->step;
    st = p && g && mt && vt ? zorch_adam_step(p, g, mt, vt, NULL, step, &run->k) : zorch_last_status();
    zorch_tensor_free(p), zorch_tensor_free(g), zorch_tensor_free(mt), zorch_tensor_free(vt);
  }
  return st;
}

zorch_status zoff_adam(zoff *o, zorch_tensor *param, zorch_tensor *grad, int64_t step, int nruns, const zoff_run *runs) {
  zorch_status st;
  if ((st = check_flat("optimizer offload", o, param)) || (st = check_flat("optimizer offload", o, grad))) return st;
  for (int r = 0; r < nruns; r++) {
    if (runs[r].k.amsgrad) return err_set(ZORCH_ERR_ARG, "optimizer offload: amsgrad is not supported with offload to nvme");
    if (runs[r].lo < 0 || runs[r].len < 0 || runs[r].lo + runs[r].len > o->numel)
      return err_set(ZORCH_ERR_ARG, "optimizer offload: run %d (elements %lld..%lld) is outside the %lld elements", r + 1,
                     (long long)runs[r].lo, (long long)(runs[r].lo + runs[r].len), (long long)o->numel);
  }
  reset_stats(o);
  double t0 = mono();
  adam_ud a = {param, grad, step, nruns, runs};
  int rf = o->pfd >= 0 ? F_P | F_G | F_M | F_V : F_M | F_V, wf = o->pfd >= 0 ? F_P | F_M | F_V : F_M | F_V;
  st = stream(o, rf, wf, adam_chunk, &a);
  o->gscale = 1; /* (one step's) */
  pthread_mutex_lock(&o->mu);
  o->step_s = mono() - t0;
  pthread_mutex_unlock(&o->mu);
  return st;
}

typedef struct {
  float *m, *v;
  bool get;
} copy_ud;

static zorch_status copy_chunk(zoff *o, float *buf, int64_t lo, int64_t len, void *ud) {
  copy_ud *u = ud;
  float *m = field_of(o, buf, F_M), *v = field_of(o, buf, F_V);
  if (!u->m) { /* zeros */
    memset(m, 0, (size_t)len * sizeof(float));
    memset(v, 0, (size_t)len * sizeof(float));
    return ZORCH_OK;
  }
  if (u->get) {
    memcpy(u->m + lo, m, (size_t)len * sizeof(float));
    memcpy(u->v + lo, v, (size_t)len * sizeof(float));
  } else {
    memcpy(m, u->m + lo, (size_t)len * sizeof(float));
    memcpy(v, u->v + lo, (size_t)len * sizeof(float));
  }
  return ZORCH_OK;
}

zorch_status zoff_get(zoff *o, zorch_tensor *m, zorch_tensor *v) {
  zorch_status st;
  if ((st = check_flat("optimizer offload", o, m)) || (st = check_flat("optimizer offload", o, v))) return st;
  copy_ud u = {zorch_tensor_data(m), zorch_tensor_data(v), true};
  return stream(o, F_M | F_V, 0, copy_chunk, &u);
}

zorch_status zoff_put(zoff *o, const zorch_tensor *m, const zorch_tensor *v) {
  zorch_status st;
  if ((st = check_flat("optimizer offload", o, m)) || (st = check_flat("optimizer offload", o, v))) return st;
  copy_ud u = {zorch_tensor_data(m), zorch_tensor_data(v), false};
  return stream(o, 0, F_M | F_V, copy_chunk, &u);
}

zorch_status zoff_zero(zoff *o) {
  copy_ud u = {NULL, NULL, false};
  return stream(o, 0, F_M | F_V, copy_chunk, &u);
}

void zoff_get_stats(const zoff *o, zoff_stats *s) {
  pthread_mutex_lock((pthread_mutex_t *)&o->mu);
  *s = (zoff_stats){o->numel * 2 * (int64_t)sizeof(float),
                    (int64_t)o->nbuf * o->chunk * o->nfield * (int64_t)sizeof(float),
                    o->read_s, o->write_s, o->wait_s, o->step_s, o->read_bytes, o->write_bytes, o->uring,
                    o->direct};
  pthread_mutex_unlock((pthread_mutex_t *)&o->mu);
}

zorch_status zoff_probe(const char *dir, int64_t bytes, double *write_mbps, double *read_mbps, bool *direct) {
  const size_t blk = 4u << 20;
  int64_t nblk = bytes / (int64_t)blk > 0 ? bytes / (int64_t)blk : 1;
  char *path = malloc(strlen(dir) + 32);
  void *buf = NULL;
  if (!path || posix_memalign(&buf, 4096, blk)) {
    free(path);
    return err_set(ZORCH_ERR_OOM, "offload probe: out of memory");
  }
  memset(buf, 0x5a, blk);
  sprintf(path, "%s/zorch-probe-XXXXXX", dir);
  *direct = true;
  int fd = mkostemp(path, O_DIRECT);
  if (fd < 0 && errno == EINVAL) *direct = false, fd = mkstemp(path);
  if (fd < 0) {
    zorch_status st = err_set(ZORCH_ERR_IO, "offload probe: cannot make a file in %s: %s", dir, strerror(errno));
    free(path), free(buf);
    return st;
  }
  unlink(path);
  free(path);
  bool ok = true;
  double t0 = mono();
  for (int64_t i = 0; i < nblk && ok; i++) {
    ok = seg_io(OP_WRITE, fd, buf, blk, (off_t)(i * (int64_t)blk));
    if (!ok && i == 0 && *direct && errno == EINVAL) { /* (O_DIRECT accepted at open, refused at write) */
      int fl = fcntl(fd, F_GETFL);
      *direct = false;
      ok = fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0 && seg_io(OP_WRITE, fd, buf, blk, 0);
    }
  }
  if (ok) ok = fdatasync(fd) == 0;
  double t1 = mono();
  for (int64_t i = 0; i < nblk && ok; i++) ok = seg_io(OP_READ, fd, buf, blk, (off_t)(i * (int64_t)blk));
  double t2 = mono();
  int e = errno;
  close(fd);
  free(buf);
  if (!ok) return err_set(ZORCH_ERR_IO, "offload probe: I/O in %s failed: %s", dir, strerror(e));
  double mb = (double)(nblk * (int64_t)blk) / 1e6;
  *write_mbps = mb / (t1 - t0 > 1e-9 ? t1 - t0 : 1e-9);
  *read_mbps = mb / (t2 - t1 > 1e-9 ? t2 - t1 : 1e-9);
  return ZORCH_OK;
}

int zoff_reopen(int fd, bool direct, off_t probe) {
  char name[64];
  snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
  int nfd = open(name, O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (nfd < 0 && !direct) nfd = dup(fd); /* (no /proc: the same description; the caller's is not direct) */
  if (nfd < 0 || !direct || probe < 0) return nfd;
  void *blk = NULL;
  bool ok = posix_memalign(&blk, ZOFF_ALIGN, ZOFF_ALIGN) == 0;
  if (ok) memset(blk, 0, ZOFF_ALIGN), ok = seg_io(OP_WRITE, nfd, blk, ZOFF_ALIGN, probe);
  int e = errno;
  free(blk);
  if (!ok) {
    close(nfd);
    errno = e;
    return -1;
  }
  return nfd;
}

bool zoff_pio(int fd, bool direct, bool write, void *buf, size_t len, off_t at) {
  const size_t A = ZOFF_ALIGN;
  char *p = buf;
  if (!direct || ((uintptr_t)p % A == 0 && (size_t)at % A == 0 && len % A == 0))
    return seg_io(write ? OP_WRITE : OP_READ, fd, p, len, at);
  size_t cap = round_up(len + 2 * A, A);
  if (cap > (4u << 20)) cap = 4u << 20;
  char *b = NULL;
  if (posix_memalign((void **)&b, A, cap)) {
    errno = ENOMEM;
    return false;
  }
  bool ok = true;
  while (ok && len > 0) {
    off_t a0 = at / (off_t)A * (off_t)A;
    size_t head = (size_t)(at - a0), take = len < cap - head ? len : cap - head;
    size_t span = round_up(head + take, A);
    if (write) { /* the partial blocks at the ends keep what the file holds there */
      if (head) ok = seg_io(OP_READ, fd, b, A, a0);
      if (ok && (head + take) % A && (span > A || !head)) ok = seg_io(OP_READ, fd, b + span - A, A, a0 + (off_t)(span - A));
      if (ok) memcpy(b + head, p, take), ok = seg_io(OP_WRITE, fd, b, span, a0);
    } else {
      ok = seg_io(OP_READ, fd, b, span, a0);
      if (ok) memcpy(p, b + head, take);
    }
    p += take, len -= take, at += (off_t)take;
  }
  int e = errno;
  free(b);
  errno = e;
  return ok;
}

/* ---- public: include/zorch_zero.h ---- */
#define NEED_STORE(o) \
  if (!(o)) return err_set(ZORCH_ERR_ARG, "%s: the store is NULL", __func__)

zorch_offload *zorch_offload_open(const char *dir, int64_t numel, int64_t chunk, int nbuf) {
  if (!dir) return err_null(ZORCH_ERR_ARG, "zorch_offload_open: dir is NULL");
  return zoff_open(dir, numel, chunk, nbuf);
}
void zorch_offload_close(zorch_offload *o) { zoff_close(o); }
zorch_status zorch_offload_adam(zorch_offload *o, zorch_tensor *param, zorch_tensor *grad, int64_t step, int nruns,
                                const zorch_offload_run *runs) {
  NEED_STORE(o);
  if (nruns < 0 || (nruns && !runs)) return err_set(ZORCH_ERR_ARG, "zorch_offload_adam: no runs");
  return zoff_adam(o, param, grad, step, nruns, runs);
}
zorch_status zorch_offload_bind_params(zorch_offload *o, int fd, int64_t p_off, int64_t g_off) {
  NEED_STORE(o);
  return zoff_bind_params(o, fd, p_off, g_off);
}
void zorch_offload_set_grad_scale(zorch_offload *o, double s) {
  if (o) zoff_set_grad_scale(o, s);
}
zorch_status zorch_offload_get(zorch_offload *o, zorch_tensor *m, zorch_tensor *v) {
  NEED_STORE(o);
  return zoff_get(o, m, v);
}
zorch_status zorch_offload_put(zorch_offload *o, const zorch_tensor *m, const zorch_tensor *v) {
  NEED_STORE(o);
  return zoff_put(o, m, v);
}
zorch_status zorch_offload_zero(zorch_offload *o) {
  NEED_STORE(o);
  return zoff_zero(o);
}
void zorch_offload_get_stats(const zorch_offload *o, zorch_offload_stats *s) {
  if (!s) return;
  if (!o) *s = (zorch_offload_stats){0};
  else zoff_get_stats(o, s);
}
zorch_status zorch_offload_probe(const char *dir, int64_t bytes, double *write_mbps, double *read_mbps, bool *direct) {
  if (!dir || !write_mbps || !read_mbps || !direct) return err_set(ZORCH_ERR_ARG, "zorch_offload_probe: NULL argument");
  return zoff_probe(dir, bytes, write_mbps, read_mbps, direct);
}
