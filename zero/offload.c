/* offload.c: Adam's moments in a file, streamed in chunks (offload.h). One I/O
   thread serves a first-in first-out queue of chunk reads and writes with
   pread/pwrite; the step submits the read of chunk i + nbuf - 1 once chunk i - 1
   is written back (the same buffer: the queue's order keeps the write first),
   so reading ahead, updating and writing behind overlap. */
#include "offload.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../vm/core/error.h"

enum { OP_READ, OP_WRITE, OP_STOP };
typedef struct {
  int kind;
  int64_t chunk;
  int buf;
} io_op;

#define QCAP 64

struct zoff {
  int fd;
  int64_t numel, chunk, nchunks;
  int nbuf;
  float **bufs; /* each chunk floats of m, then chunk floats of v */
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  io_op q[QCAP];
  int64_t submitted, done; /* ops, by sequence number */
  int err;                 /* the first I/O error (errno), 0: none */
  char what[64];
  double read_s, write_s, wait_s;
  int64_t read_bytes, write_bytes;
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

/* The chunk's m then v, whole; false with errno on failure. */
static bool chunk_io(zoff *o, int kind, int64_t c, float *buf) {
  int64_t len = chunk_len(o, c);
  char *p = (char *)buf;
  size_t left = (size_t)len * 2 * sizeof(float);
  off_t at = (off_t)(c * o->chunk * 2 * (int64_t)sizeof(float));
  if (kind == OP_WRITE) { /* m and v sit chunk apart in the buffer, len apart in the file */
    memmove(p + (size_t)len * sizeof(float), p + (size_t)o->chunk * sizeof(float), (size_t)len * sizeof(float));
  }
  while (left > 0) {
    ssize_t r = kind == OP_READ ? pread(o->fd, p, left, at) : pwrite(o->fd, p, left, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return false;
    }
    p += r, left -= (size_t)r, at += r;
  }
  if (kind == OP_READ) {
    memmove((char *)buf + (size_t)o->chunk * sizeof(float), (char *)buf + (size_t)len * sizeof(float),
            (size_t)len * sizeof(float));
  }
  return true;
}

static void *io_main(void *arg) {
  zoff *o = arg;
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (o->done == o->submitted) pthread_cond_wait(&o->cv, &o->mu);
    io_op op = o->q[o->done % QCAP];
    if (op.kind == OP_STOP) break;
    bool skip = o->err != 0;
    pthread_mutex_unlock(&o->mu);
    double t0 = mono();
    bool good = skip || chunk_io(o, op.kind, op.chunk, o->bufs[op.buf]);
    int e = errno;
    double dt = mono() - t0;
    pthread_mutex_lock(&o->mu);
    if (!good && !o->err) {
      o->err = e ? e : EIO;
      snprintf(o->what, sizeof o->what, "%s chunk %lld", op.kind == OP_READ ? "reading" : "writing", (long long)op.chunk);
    }
    if (!skip) {
      int64_t bytes = chunk_len(o, op.chunk) * 2 * (int64_t)sizeof(float);
      if (op.kind == OP_READ) o->read_s += dt, o->read_bytes += bytes;
      else o->write_s += dt, o->write_bytes += bytes;
    }
    o->done++;
    pthread_cond_broadcast(&o->cv);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

/* Queues an op; returns its sequence number (waits while the queue is full). */
static int64_t submit(zoff *o, int kind, int64_t c, int buf) {
  pthread_mutex_lock(&o->mu);
  while (o->submitted - o->done >= QCAP) pthread_cond_wait(&o->cv, &o->mu);
  o->q[o->submitted % QCAP] = (io_op){kind, c, buf};
  int64_t seq = o->submitted++;
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
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
  if (e) return err_set(ZORCH_ERR_IO, "optimizer offload: %s of the state file: %s", what, strerror(e));
  return ZORCH_OK;
}

zoff *zoff_open(const char *dir, int64_t numel, int64_t chunk, int nbuf) {
  if (!dir || !*dir) return err_null(ZORCH_ERR_ARG, "optimizer offload: nvme_path is empty");
  if (numel < 0 || chunk < 1 || nbuf < 2 || nbuf > QCAP / 2)
    return err_null(ZORCH_ERR_ARG, "optimizer offload: chunk must be >= 1 and buffer_count in 2..%d, got %lld and %d",
                    QCAP / 2, (long long)chunk, nbuf);
  if (chunk > numel && numel > 0) chunk = numel;
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
  o->numel = numel, o->chunk = chunk, o->nbuf = nbuf;
  o->nchunks = numel == 0 ? 0 : (numel + chunk - 1) / chunk;
  if (ftruncate(o->fd, (off_t)(numel * 2 * (int64_t)sizeof(float))) != 0) {
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
    submit(o, OP_STOP, 0, 0);
    pthread_join(o->thread, NULL);
  }
  pthread_mutex_destroy(&o->mu);
  pthread_cond_destroy(&o->cv);
  for (int i = 0; o->bufs && i < o->nbuf; i++) free(o->bufs[i]);
  free(o->bufs);
  close(o->fd);
  free(o);
}

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
  o->read_s = o->write_s = o->wait_s = 0;
  o->read_bytes = o->write_bytes = 0;
  pthread_mutex_unlock(&o->mu);
}

/* Runs fn on every chunk in order, each read before and written after (as
   `read`/`write` ask), nbuf - 1 reads ahead. */
typedef zorch_status (*chunk_fn)(zoff *o, int64_t c, float *m, float *v, int64_t lo, int64_t len, void *ud);
static zorch_status stream(zoff *o, bool read, bool write, chunk_fn fn, void *ud) {
  zorch_status st = ZORCH_OK;
  int64_t *rseq = calloc((size_t)(o->nchunks > 0 ? o->nchunks : 1), sizeof *rseq), last = -1;
  if (!rseq) return err_set(ZORCH_ERR_OOM, "optimizer offload: out of memory");
  int ahead = o->nbuf - 1;
  if (read)
    for (int64_t c = 0; c < o->nchunks && c < ahead; c++) rseq[c] = submit(o, OP_READ, c, (int)(c % o->nbuf));
  for (int64_t c = 0; c < o->nchunks && !st; c++) {
    int b = (int)(c % o->nbuf);
    if (read) st = wait_op(o, rseq[c]);
    else if (c >= o->nbuf && last >= 0) st = wait_op(o, last - (o->nbuf - 1)); /* the buffer's previous write */
    if (st) break;
    float *m = o->bufs[b], *v = m + o->chunk;
    st = fn(o, c, m, v, c * o->chunk, chunk_len(o, c), ud);
    if (st) break;
    if (write) last = submit(o, OP_WRITE, c, b);
    if (read && c + ahead < o->nchunks) rseq[c + ahead] = submit(o, OP_READ, c + ahead, (int)((c + ahead) % o->nbuf));
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
  const zorch_adam_opts *k;
} adam_ud;

static zorch_status adam_chunk(zoff *o, int64_t c, float *m, float *v, int64_t lo, int64_t len, void *ud) {
  (void)o, (void)c;
  adam_ud *a = ud;
  int64_t shape[1] = {len};
  zorch_tensor *p = zorch_narrow(a->param, 0, lo, len), *g = zorch_narrow(a->grad, 0, lo, len);
  zorch_tensor *mt = zorch_tensor_wrap(m, ZORCH_F32, 1, shape, NULL), *vt = zorch_tensor_wrap(v, ZORCH_F32, 1, shape, NULL);
  zorch_status st = p && g && mt && vt ? zorch_adam_step(p, g, mt, vt, NULL, a->step, a->k) : zorch_last_status();
  zorch_tensor_free(p), zorch_tensor_free(g), zorch_tensor_free(mt), zorch_tensor_free(vt);
  return st;
}

zorch_status zoff_adam(zoff *o, zorch_tensor *param, zorch_tensor *grad, int64_t step, const zorch_adam_opts *k) {
  zorch_status st;
  if ((st = check_flat("optimizer offload", o, param)) || (st = check_flat("optimizer offload", o, grad))) return st;
  if (k->amsgrad) return err_set(ZORCH_ERR_ARG, "optimizer offload: amsgrad is not supported with offload to nvme");
  reset_stats(o);
  adam_ud a = {param, grad, step, k};
  return stream(o, true, true, adam_chunk, &a);
}

typedef struct {
  float *m, *v;
  bool get;
} copy_ud;

static zorch_status copy_chunk(zoff *o, int64_t c, float *m, float *v, int64_t lo, int64_t len, void *ud) {
  (void)o, (void)c;
  copy_ud *u = ud;
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
  return stream(o, true, false, copy_chunk, &u);
}

zorch_status zoff_put(zoff *o, const zorch_tensor *m, const zorch_tensor *v) {
  zorch_status st;
  if ((st = check_flat("optimizer offload", o, m)) || (st = check_flat("optimizer offload", o, v))) return st;
  copy_ud u = {zorch_tensor_data(m), zorch_tensor_data(v), false};
  return stream(o, false, true, copy_chunk, &u);
}

void zoff_get_stats(const zoff *o, zoff_stats *s) {
  pthread_mutex_lock((pthread_mutex_t *)&o->mu);
  *s = (zoff_stats){o->numel * 2 * (int64_t)sizeof(float), (int64_t)o->nbuf * o->chunk * 2 * (int64_t)sizeof(float),
                    o->read_s, o->write_s, o->wait_s, o->read_bytes, o->write_bytes};
  pthread_mutex_unlock((pthread_mutex_t *)&o->mu);
}
