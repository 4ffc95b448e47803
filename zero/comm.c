/* comm.c: the local, MPI and NCCL collectives. MPI is started lazily, only
   when the process was launched with more than one rank; CPU tensors travel
   over MPI and cuda tensors over NCCL (zero/nccl.c). */
#include "comm.h"
#include "rendezvous.h"

#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef ZORCH_MPI
#include <mpi.h>
#endif
#ifdef ZORCH_WITH_CUDA
#include <pthread.h>

#include "../ops/backend/cudamod.h"
#include "../ops/cuda/module.h"
#include "nccl.h"
#define ON_GPU(t) ((t)->st->device.type == ZORCH_CUDA)
static const nccl_api *nccl_table(void);
/* cuda buffers go to NCCL (in the CUDA module), whose waits are timed like MPI's */
#define NCCL_ROUTE(t, call)                        \
  if (ON_GPU(t)) {                                 \
    const nccl_api *nccl_ = nccl_table();          \
    return nccl_ ? nccl_->call : zorch_last_status(); \
  }
#else
#define ON_GPU(t) ((void)(t), false)
#define NCCL_ROUTE(t, call) (void)0;
#endif
#include "../ops/backend/backend.h"

static zero_comm the_comm = {.rank = 0, .world = 1, .backend = "local", .nccl_dev = -1};
static bool comm_ready;
#ifdef ZORCH_MPI
static bool mpi_started;
/* the world's communicator: MPI_COMM_WORLD, or the one the rendezvous joined */
static MPI_Comm world_comm;
#endif

/* ---- timed waits: a collective that does not complete within comm_timeout
   is handed to the host's hang handler and then fails with ZORCH_ERR_TIMEOUT,
   instead of hanging without a word. The collective's request is left pending
   (MPI has no way to cancel it), so the communicator is closed: later
   collectives fail at once. ------------------------------------------------------ */
static char comm_label_text[160];
static _Atomic double comm_timeout_s = 600;
static zorch_hang_handler hang_fn;
static void *hang_ud;
static bool comm_closed; /* a collective timed out: MPI and NCCL are unusable */
static int64_t comm_entered; /* collectives this rank has entered */
static const char *comm_entered_what = "collective";

/* Every rank publishes how many collectives it has entered, and a heartbeat
   (wall-clock milliseconds, renewed at least every 0.1 s while it waits in a
   collective), in a one-sided MPI window (two int64 per world rank, under a
   lock_all epoch held for the whole run), so a rank whose wait times out can
   read the others' and name the ranks that never reached the collective it
   waits in, and those that reached it but stopped inside it (a stopped
   process's heartbeat ages; a waiting one's does not). */
#ifdef ZORCH_MPI
static MPI_Win progress_win = MPI_WIN_NULL;
#endif
enum { PROGRESS_COUNT, PROGRESS_BEAT, PROGRESS_SLOTS };
static double beat_at; /* comm_clock() of this rank's last heartbeat */

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Publishes this rank's count and heartbeat (force: now; else at most every 0.1 s). */
static void comm_beat(bool force) {
#ifdef ZORCH_MPI
  if (progress_win == MPI_WIN_NULL) return;
  double now = comm_clock();
  if (!force && now - beat_at < 0.1) return;
  beat_at = now;
  int64_t v[PROGRESS_SLOTS] = {comm_entered, wall_ms()};
  MPI_Accumulate(v, PROGRESS_SLOTS, MPI_INT64_T, the_comm.rank, 0, PROGRESS_SLOTS, MPI_INT64_T, MPI_REPLACE,
                 progress_win);
  MPI_Win_flush(the_comm.rank, progress_win);
#else
  (void)force;
#endif
}

/* A test hook: ZORCH_TEST_HOOKS=comm_signal=RANK/N/SIG makes world rank RANK
   send itself signal SIG (a number, or STOP, KILL) on entering its collective
   #N, so tests can stop or kill a rank inside a collective. */
static void comm_test_signal(void) {
  static int rank = -2, sig;
  static long long at;
  if (rank == -2) {
    const char *h = zorch_test_hook("comm_signal");
    char name[16] = "";
    rank = -1;
    if (h && sscanf(h, "%d/%lld/%15s", &rank, &at, name) == 3)
      sig = strcmp(name, "STOP") == 0 ? SIGSTOP : strcmp(name, "KILL") == 0 ? SIGKILL : atoi(name);
    else rank = -1;
  }
  if (rank == the_comm.rank && comm_entered == at && sig > 0) raise(sig);
}

/* Calls, bytes this rank sent and seconds per kind of collective since the
   last comm_kind_stats(reset): the engine's comms_logger report. A call's
   seconds run from its start to the moment this rank sees it complete (for a
   started one, its wait or successful test), so they include the time it was
   in flight behind compute. */
#define COMM_KINDS 16
static struct {
  char name[24];
  int64_t calls;
  uint64_t bytes;
  double seconds;
} comm_kinds[COMM_KINDS];
/* the collective entered last: a blocking call waits on it next */
static int comm_cur_kind = -1;
static double comm_cur_t0;

static int comm_count(const char *what, uint64_t bytes) {
  for (int i = 0; i < COMM_KINDS; i++) {
    if (!comm_kinds[i].name[0]) snprintf(comm_kinds[i].name, sizeof comm_kinds[i].name, "%s", what);
    if (!strncmp(comm_kinds[i].name, what, sizeof comm_kinds[i].name - 1)) {
      comm_kinds[i].calls++;
      comm_kinds[i].bytes += bytes;
      return i;
    }
  }
  return -1;
}

/* A collective of kind `kind` started at t0 has completed. */
static void comm_lap(int kind, double t0) {
  if (kind >= 0 && kind < COMM_KINDS) comm_kinds[kind].seconds += comm_clock() - t0;
}

int comm_kind_stats(int i, const char **name, int64_t *calls, uint64_t *bytes, double *seconds, bool reset) {
  if (i < 0 || i >= COMM_KINDS || !comm_kinds[i].name[0]) return 0;
  *name = comm_kinds[i].name;
  *calls = comm_kinds[i].calls;
  *bytes = comm_kinds[i].bytes;
  *seconds = comm_kinds[i].seconds;
  if (reset) comm_kinds[i].calls = 0, comm_kinds[i].bytes = 0, comm_kinds[i].seconds = 0;
  return 1;
}

static void comm_enter(const zero_comm *c, const char *what, uint64_t bytes) {
  (void)c;
  comm_cur_kind = comm_count(what, bytes);
  comm_cur_t0 = comm_clock();
  comm_entered++;
  comm_entered_what = what;
  comm_beat(true);
  comm_test_signal();
}

/* Appends to msg (size cap) which ranks have entered fewer collectives than
   this one, as read from their counters, and returns how many it named (-1
   when the counters cannot be read). A rank that does not answer within a second (its counter lives on a
   host whose one-sided transport needs the target's progress, and it is
   stopped) is named as not answering. */
static int comm_describe_laggards(const zero_comm *c, char *msg, size_t cap) {
#ifdef ZORCH_MPI
  if (progress_win == MPI_WIN_NULL || c->world < 2 || c->mpi) return -1;
  int64_t *counts = calloc((size_t)c->world * PROGRESS_SLOTS, sizeof *counts);
  MPI_Request *reqs = calloc((size_t)c->world, sizeof *reqs);
  if (!counts || !reqs) {
    free(counts);
    free(reqs);
    return -1;
  }
  for (int r = 0; r < c->world; r++) {
    reqs[r] = MPI_REQUEST_NULL;
    if (r != c->rank &&
        MPI_Rget_accumulate(NULL, 0, MPI_INT64_T, &counts[PROGRESS_SLOTS * r], PROGRESS_SLOTS, MPI_INT64_T, r, 0,
                            PROGRESS_SLOTS, MPI_INT64_T, MPI_NO_OP, progress_win, &reqs[r]) != MPI_SUCCESS)
      reqs[r] = MPI_REQUEST_NULL, counts[PROGRESS_SLOTS * r] = -1;
  }
  double t0 = comm_clock();
  int pending = 1;
  while (pending && comm_clock() - t0 < 1.0) {
    comm_beat(false); /* (this rank still waits: the others must not take it for stopped) */
    pending = 0;
    for (int r = 0; r < c->world; r++) {
      int done = 1;
      if (reqs[r] != MPI_REQUEST_NULL) MPI_Test(&reqs[r], &done, MPI_STATUS_IGNORE);
      if (!done) pending = 1;
    }
  }
  size_t len = strlen(msg);
  int named = 0;
  /* a heartbeat older than this: the rank has not polled for that long */
  double stale_s = comm_timeout_s / 2 > 1.0 ? comm_timeout_s / 2 : 1.0;
  int64_t now_ms = wall_ms();
  for (int r = 0; r < c->world && len + 1 < cap; r++) {
    if (r == c->rank) continue;
    const char *sep = named ? "; " : ": ";
    int64_t count = counts[PROGRESS_SLOTS * r], beat = counts[PROGRESS_SLOTS * r + PROGRESS_BEAT];
    if (reqs[r] != MPI_REQUEST_NULL) {
      snprintf(msg + len, cap - len, "%srank %d did not answer (stopped or unreachable)", sep, r);
    } else if (count >= 0 && count < comm_entered) {
      if (count == 0)
        snprintf(msg + len, cap - len, "%srank %d did not reach %s #%lld (it has entered no collective)", sep, r,
                 comm_entered_what, (long long)comm_entered);
      else
        snprintf(msg + len, cap - len, "%srank %d did not reach %s #%lld (it is at #%lld)", sep, r,
                 comm_entered_what, (long long)comm_entered, (long long)count);
    } else if (count == comm_entered && beat > 0 && (double)(now_ms - beat) / 1000 > stale_s) {
      snprintf(msg + len, cap - len, "%srank %d reached %s #%lld but has made no progress in it for %.1f s "
               "(stopped, or blocked)", sep, r, comm_entered_what, (long long)comm_entered,
               (double)(now_ms - beat) / 1000);
    } else {
      continue;
    }
    named++;
    len = strlen(msg);
  }
  /* requests still pending keep their buffers: the communicator is closed anyway */
  if (!pending) {
    free(counts);
    free(reqs);
  }
  return named;
#else
  (void)c, (void)msg, (void)cap;
  return -1;
#endif
}

void zorch_set_hang_handler(zorch_hang_handler fn, void *ud) {
  hang_fn = fn;
  hang_ud = ud;
}

double comm_clock(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

zorch_status comm_check_wait(const zero_comm *c, const char *what, int64_t n, double t0) {
  comm_beat(false);
#ifdef ZORCH_MPI
  int lost = rdv_lost();
  if (lost >= 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "rank %d: %s of %lld elements%s%s cannot complete: rank %d has ended", c->rank, what,
             (long long)n, comm_label_text[0] ? " for " : "", comm_label_text, lost);
    comm_closed = true;
    if (hang_fn) hang_fn(msg, hang_ud);
    return err_set(ZORCH_ERR_IO, "%s; collectives cannot run again in this process", msg);
  }
#endif
  double limit = comm_timeout_s;
  if (limit <= 0 || comm_clock() - t0 <= limit) return ZORCH_OK;
  char msg[1024];
  snprintf(msg, sizeof msg, "rank %d: %s of %lld elements%s%s%s did not complete within %.0f s (comm_timeout)",
           comm_world_rank(c, c->rank), what, (long long)n, c->mpi ? " in a group" : "", comm_label_text[0] ? " for " : "",
           comm_label_text, limit);
  size_t len = strlen(msg);
  int named = comm_describe_laggards(c, msg, sizeof msg);
  if (named == 0)
    snprintf(msg + len, sizeof msg - len, ": every rank reached %s #%lld; another rank failed or hangs inside it",
             comm_entered_what, (long long)comm_entered);
  else if (named < 0)
    snprintf(msg + len, sizeof msg - len, ": another rank failed, hangs, or never reached it");
  comm_closed = true;
  if (hang_fn) hang_fn(msg, hang_ud);
  return err_set(ZORCH_ERR_TIMEOUT, "%s; collectives cannot run again in this process", msg);
}

/* Refuses a collective once an earlier one timed out. */
static zorch_status check_open(const zero_comm *c, const char *what) {
  if (!comm_closed) return ZORCH_OK;
  return err_set(ZORCH_ERR_STATE, "%s on rank %d: an earlier collective timed out; collectives cannot run again "
                 "in this process", what, c->rank);
}

void comm_wait_begin(comm_waiter *w) {
  w->t0 = comm_clock();
  w->nap = 0;
}

/* Spins (yielding) for the first 0.5 ms of a wait, so fast collectives keep
   their latency, then sleeps between polls, from 20 us doubling to 1 ms, so a
   rank that waits long for the others leaves the CPU to them. Open MPI
   progresses only inside MPI calls, so each poll (MPI_Test) moves the
   collective on; a nap delays that by at most 1 ms. */
void comm_wait_pause(comm_waiter *w) {
  if (w->nap == 0) {
    if (comm_clock() - w->t0 < 5e-4) {
      sched_yield();
      return;
    }
    w->nap = 2e-5;
  }
  struct timespec ts = {0, (long)(w->nap * 1e9)};
  nanosleep(&ts, NULL);
  w->nap = w->nap * 2 > 1e-3 ? 1e-3 : w->nap * 2;
}

void comm_set_label(const char *label) { snprintf(comm_label_text, sizeof comm_label_text, "%s", label ? label : ""); }
void comm_set_timeout(double seconds) { comm_timeout_s = seconds; }

/* World size promised by the launcher's environment: mpirun's, or a PMIx
   server's (srun --mpi=pmix), which MPI_Init joins; else a torchrun-style or
   Slurm one without PMIx, which zero/rendezvous.c joins (*rdv filled). */
static int launcher_world(rdv_env *rdv) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (v && atoi(v) > 1) return atoi(v);
  if (getenv("PMIX_RANK")) {
    static const char *const vars[] = {"PMIX_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
      if ((v = getenv(vars[i])) && atoi(v) > 1) return atoi(v);
    return 1;
  }
  rdv_env e;
  if (!rdv_from_env(rdv ? rdv : &e)) return 1;
  return rdv ? rdv->world : e.world;
}

#ifdef ZORCH_MPI
static zorch_status mpi_check(int rc, const char *what, int64_t n) {
  if (rc == MPI_SUCCESS) return ZORCH_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return err_set(ZORCH_ERR_IO, "%s of %lld elements failed on rank %d: %s", what, (long long)n,
                 the_comm.rank, msg);
}
/* Waits for a non-blocking collective, polling so that the wait can be timed. */
/* Waits for req, a collective of kind `kind` started at t0 (its time counted on completion). */
static zorch_status mpi_wait_timed(const zero_comm *c, MPI_Request *req, const char *what, int64_t n, int kind,
                                   double t0) {
  comm_waiter w;
  comm_wait_begin(&w);
  for (;;) {
    int done = 0;
    zorch_status st = mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what, n);
    if (!st && done) comm_lap(kind, t0);
    if (st || done) return st;
    if ((st = comm_check_wait(c, what, n, w.t0))) return st;
    comm_wait_pause(&w);
  }
}

/* A blocking call's wait: on the collective it has just entered. */
static zorch_status mpi_wait(const zero_comm *c, MPI_Request *req, const char *what, int64_t n) {
  return mpi_wait_timed(c, req, what, n, comm_cur_kind, comm_cur_t0);
}

/* MPI's int counts and displacements (2 x world entries, freed by the caller);
   NULL with an error when a count does not fit an int. */
static int *mpi_counts(const char *op, const zero_comm *c, const int64_t *counts) {
  int *rc = malloc(sizeof(int) * 2 * (size_t)c->world);
  if (!rc) return err_null(ZORCH_ERR_OOM, "%s: out of memory", op);
  int64_t off = 0;
  for (int r = 0; r < c->world; r++) {
    if (counts[r] > INT_MAX || off > INT_MAX) {
      free(rc);
      return err_null(ZORCH_ERR_ARG, "%s: %lld elements per rank is more than MPI counts (split the bucket)", op,
                      (long long)counts[r]);
    }
    rc[r] = (int)counts[r];
    rc[c->world + r] = (int)off;
    off += counts[r];
  }
  return rc;
}

/* The group's MPI communicator (the world's when it is not a group). */
static MPI_Comm mcomm(const zero_comm *c) { return c->mpi ? *(MPI_Comm *)c->mpi : world_comm; }

static MPI_Datatype mpi_type(zorch_dtype dt) {
  return dt == ZORCH_F64 ? MPI_DOUBLE : dt == ZORCH_F32 ? MPI_FLOAT : MPI_UINT16_T;
}
#endif

zero_comm *comm_local(void) {
  static zero_comm local = {.rank = 0, .world = 1, .backend = "local", .nccl_dev = -1};
  return &local;
}

zero_comm *comm_get(void) {
  if (!comm_ready) {
    rdv_env rdv = {0};
    int world = launcher_world(&rdv);
    if (world > 1) {
#ifdef ZORCH_MPI
      int provided, inited = 0;
      MPI_Initialized(&inited);
      world_comm = MPI_COMM_WORLD;
      if (!inited && rdv.world > 1) {
        zorch_status st = rdv_join(&rdv, comm_timeout_s, &world_comm);
        MPI_Initialized(&inited); /* (when it failed, perhaps after MPI started) */
        mpi_started = inited;
        if (st) return NULL;
      } else {
        /* funneled: only the thread that runs the collectives calls MPI */
        if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
          return err_null(ZORCH_ERR_IO, "comm: MPI_Init failed");
        mpi_started = !inited;
      }
      MPI_Comm_set_errhandler(world_comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(world_comm, &the_comm.rank);
      MPI_Comm_size(world_comm, &the_comm.world);
      the_comm.backend = "mpi";
      /* the progress counters; without them a timeout names no rank */
      int64_t *counter = NULL;
      if (MPI_Win_allocate(PROGRESS_SLOTS * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, world_comm, &counter,
                           &progress_win) != MPI_SUCCESS)
        progress_win = MPI_WIN_NULL;
      if (progress_win != MPI_WIN_NULL) {
        memset(counter, 0, PROGRESS_SLOTS * sizeof(int64_t));
        MPI_Win_set_errhandler(progress_win, MPI_ERRORS_RETURN);
        if (MPI_Win_lock_all(MPI_MODE_NOCHECK, progress_win) != MPI_SUCCESS) MPI_Win_free(&progress_win);
      }
#else
      return err_null(ZORCH_ERR_DEVICE, "comm: launched with %d ranks but zorch was built without MPI", world);
#endif
    }
    comm_ready = true;
  }
  return &the_comm;
}

zorch_status comm_bcast_bytes(zero_comm *c, void *buf, size_t bytes, const char *what) {
  if (c->world == 1) return ZORCH_OK;
  if (check_open(c, what)) return zorch_last_status();
  comm_enter(c, "broadcast", c->rank == 0 ? bytes : 0);
#ifdef ZORCH_MPI
  if (bytes > INT_MAX) return err_set(ZORCH_ERR_ARG, "%s: %zu bytes is more than one MPI call takes", what, bytes);
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, mcomm(c), &req), what, (int64_t)bytes);
  return st ? st : mpi_wait(c, &req, what, (int64_t)bytes);
#else
  (void)buf, (void)bytes;
  return err_set(ZORCH_ERR_DEVICE, "%s: %d ranks but zorch was built without MPI", what, c->world);
#endif
}

static zorch_status check_buf(const char *op, const zorch_tensor *t) {
  if (!t || (t->dtype != ZORCH_F32 && t->dtype != ZORCH_F64) || !zorch_tensor_is_contiguous(t))
    return err_set(ZORCH_ERR_ARG, "%s: needs a contiguous float32/float64 tensor", op);
  return ZORCH_OK;
}

static zorch_status check_same_dev(const char *op, const zorch_tensor *a, const zorch_tensor *b) {
  if (a->st->device.type != b->st->device.type || a->st->device.index != b->st->device.index)
    return err_set(ZORCH_ERR_DEVICE, "%s: the send and receive buffers are on different devices", op);
  return ZORCH_OK;
}

/* One process: the collective is a copy, unless ZORCH_NCCL_SINGLE=1 sends the
   cuda ones through a one-rank NCCL communicator (to check the NCCL path on a
   machine with one GPU). */
static bool local_only(const zero_comm *c, const zorch_tensor *t) {
  static int single = -1; /* read once: collectives run per bucket */
  if (c->world > 1) return false;
  if (!ON_GPU(t)) return true;
  if (single < 0) {
    const char *v = getenv("ZORCH_NCCL_SINGLE");
    single = v && *v == '1';
  }
  return !single;
}

/* The one-process collective: a copy on the buffers' device. */
static zorch_status local_copy(const zorch_tensor *like, void *dst, const void *src, size_t n) {
  if (dst == src || !n) return ZORCH_OK;
  if (like->st->device.type == ZORCH_CPU) {
    memmove(dst, src, n);
    return ZORCH_OK;
  }
  return backend_of(like)->to_device(dst, src, n, like->st->device.index);
}

zorch_status comm_allreduce(zero_comm *c, zorch_tensor *t, bool max) {
  if (check_buf("allreduce", t)) return zorch_last_status();
  int64_t n = zorch_tensor_numel(t);
  uint64_t bytes = (uint64_t)n * dtype_sizes[t->dtype];
  if (local_only(c, t)) return ZORCH_OK;
  if (check_open(c, "allreduce")) return zorch_last_status();
  comm_enter(c, "allreduce", 2 * bytes * (uint64_t)(c->world - 1) / (uint64_t)c->world);
  /* a ring all-reduce sends 2(N-1)/N of the buffer */
  c->sent += 2 * bytes * (uint64_t)(c->world - 1) / (uint64_t)c->world;
  c->recv += 2 * bytes * (uint64_t)(c->world - 1) / (uint64_t)c->world;
  NCCL_ROUTE(t, allreduce(c, t, max))
#ifdef ZORCH_MPI
  if (n > INT_MAX) return err_set(ZORCH_ERR_ARG, "allreduce: %lld elements is more than one MPI call takes", (long long)n);
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Iallreduce(MPI_IN_PLACE, tensor_ptr(t), (int)n, mpi_type(t->dtype),
                                             max ? MPI_MAX : MPI_SUM, mcomm(c), &req), "allreduce", n);
  return st ? st : mpi_wait(c, &req, "allreduce", n);
#else
  (void)max;
  return ZORCH_OK;
#endif
}

/* The sum of counts into *total, checked against the whole buffer and this
   rank's part. */
static zorch_status check_counts(const char *op, const zero_comm *c, const int64_t *counts, const zorch_tensor *whole,
                                 const zorch_tensor *part, int64_t *total) {
  *total = 0;
  for (int r = 0; r < c->world; r++) *total += counts[r];
  if (*total != zorch_tensor_numel(whole) || counts[c->rank] != zorch_tensor_numel(part) || whole->dtype != part->dtype)
    return err_set(ZORCH_ERR_SHAPE, "%s: counts do not match the buffers on rank %d", op, c->rank);
  return ZORCH_OK;
}

struct comm_request {
  zero_comm *c;
  const char *what;
  int64_t n;
  int kind;  /* its comms_logger kind */
  double t0; /* when it started */
  bool timed; /* its completion has been counted */
#ifdef ZORCH_WITH_CUDA
  void *ev; /* cuda buffers: the NCCL collective's completion on the side stream */
#endif
#ifdef ZORCH_MPI
  MPI_Request req;
  int *counts; /* MPI reads them until the request completes */
#endif
};

#ifdef ZORCH_WITH_CUDA
/* The request of an NCCL collective started on the side stream (ev). */
static zorch_status nccl_request(zero_comm *c, const char *what, int64_t n, void *ev, comm_request **req) {
  comm_request *g = calloc(1, sizeof *g);
  if (!g) {
    (void)nccl_table()->wait_done(c, ev, what, n);
    return err_set(ZORCH_ERR_OOM, "%s: out of memory", what);
  }
  *g = (comm_request){.c = c, .what = what, .n = n, .kind = comm_cur_kind, .t0 = comm_cur_t0, .ev = ev};
  *req = g;
  return ZORCH_OK;
}
#endif

/* Starts a reduce-scatter; *req stays NULL when it completed already. */
static zorch_status start_reduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                         const int64_t *counts, comm_request **req) {
  *req = NULL;
  if (check_buf("reduce_scatter", send) || check_buf("reduce_scatter", recv) ||
      check_same_dev("reduce_scatter", send, recv))
    return zorch_last_status();
  int64_t total;
  if (check_counts("reduce_scatter", c, counts, send, recv, &total)) return zorch_last_status();
  size_t es = dtype_sizes[send->dtype];
  if (local_only(c, send)) return local_copy(recv, tensor_ptr(recv), tensor_ptr(send), (size_t)total * es);
  if (check_open(c, "reduce_scatter")) return zorch_last_status();
  comm_enter(c, "reduce_scatter", (uint64_t)(total - counts[c->rank]) * es);
  c->sent += (uint64_t)(total - counts[c->rank]) * es;
  c->recv += (uint64_t)(total - counts[c->rank]) * es;
#ifdef ZORCH_WITH_CUDA
  if (ON_GPU(send)) { /* on NCCL's side stream, overlapping the compute queued after it */
    const nccl_api *nccl = nccl_table();
    void *ev;
    if (!nccl || nccl->ireduce_scatter(c, send, recv, counts, &ev)) return zorch_last_status();
    return nccl_request(c, "reduce_scatter", total, ev, req);
  }
#endif
#ifdef ZORCH_MPI
  comm_request *r = malloc(sizeof *r);
  int *rc = mpi_counts("reduce_scatter", c, counts);
  if (!r || !rc) {
    free(r);
    free(rc);
    return rc ? err_set(ZORCH_ERR_OOM, "reduce_scatter: out of memory") : zorch_last_status();
  }
  *r = (comm_request){.c = c, .what = "reduce_scatter", .n = total, .kind = comm_cur_kind, .t0 = comm_cur_t0, .counts = rc};
  zorch_status st = mpi_check(MPI_Ireduce_scatter(tensor_ptr(send), tensor_ptr(recv), rc, mpi_type(send->dtype),
                                                  MPI_SUM, mcomm(c), &r->req), "reduce_scatter", total);
  if (st) {
    free(rc);
    free(r);
    return st;
  }
  *req = r;
  return ZORCH_OK;
#else
  return ZORCH_OK;
#endif
}

zorch_status comm_test(comm_request *r, bool *done) {
  *done = true;
  if (!r) return ZORCH_OK;
#ifdef ZORCH_WITH_CUDA
  if (r->ev) {
    zorch_status st = nccl_table()->test(r->c, r->ev, r->what, r->n, done);
    if (!st && *done && !r->timed) comm_lap(r->kind, r->t0), r->timed = true;
    return st;
  }
#endif
#ifdef ZORCH_MPI
  int flag = 0;
  zorch_status st = mpi_check(MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE), r->what, r->n);
  *done = flag != 0;
  if (!st && *done && !r->timed) comm_lap(r->kind, r->t0), r->timed = true;
  return st;
#else
  return ZORCH_OK;
#endif
}

zorch_status comm_wait(comm_request *r) {
  if (!r) return ZORCH_OK;
#ifdef ZORCH_WITH_CUDA
  if (r->ev) {
    zorch_status st = nccl_table()->wait_done(r->c, r->ev, r->what, r->n);
    if (!st && !r->timed) comm_lap(r->kind, r->t0);
    free(r);
    return st;
  }
#endif
#ifdef ZORCH_MPI
  zorch_status st = mpi_wait_timed(r->c, &r->req, r->what, r->n, r->timed ? -1 : r->kind, r->t0);
  if (st != ZORCH_ERR_TIMEOUT) free(r->counts); /* a pending request may still read them */
  free(r);
  return st;
#else
  free(r);
  return ZORCH_OK;
#endif
}

zorch_status comm_ireduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                                  comm_request **req) {
  return start_reduce_scatter(c, send, recv, counts, req);
}

zorch_status comm_reduce_scatter(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                 const int64_t *counts) {
  comm_request *r;
  zorch_status st = start_reduce_scatter(c, send, recv, counts, &r);
  return st ? st : comm_wait(r);
}

zorch_status comm_reduce_scatter_inplace(zero_comm *c, zorch_tensor *buf) {
  if (check_buf("reduce_scatter", buf)) return zorch_last_status();
  int64_t total = zorch_tensor_numel(buf), n = total / c->world;
  if (n * c->world != total)
    return err_set(ZORCH_ERR_SHAPE, "reduce_scatter: %lld elements do not split over %d ranks",
                   (long long)total, c->world);
  if (local_only(c, buf)) return ZORCH_OK;
  if (check_open(c, "reduce_scatter")) return zorch_last_status();
  size_t es = dtype_sizes[buf->dtype];
  comm_enter(c, "reduce_scatter", (uint64_t)(total - n) * es);
  c->sent += (uint64_t)(total - n) * es;
  c->recv += (uint64_t)(total - n) * es;
  NCCL_ROUTE(buf, reduce_scatter_inplace(c, buf, n))
#ifdef ZORCH_MPI
  if (n > INT_MAX) return err_set(ZORCH_ERR_ARG, "reduce_scatter: %lld elements per rank is more than one MPI call takes", (long long)n);
  char *p = tensor_ptr(buf);
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, p, (int)n, mpi_type(buf->dtype), MPI_SUM,
                                                        mcomm(c), &req), "reduce_scatter", total);
  if (!st) st = mpi_wait(c, &req, "reduce_scatter", total);
  /* the result lands at the front: move it to this rank's slice */
  if (!st && c->rank) memmove(p + (size_t)(n * c->rank) * es, p, (size_t)n * es);
  return st;
#else
  return ZORCH_OK;
#endif
}

/* All-gathers move bytes, so 16-bit floats are fine there. */
static zorch_status check_gather_buf(const zorch_tensor *t) {
  if (t && (t->dtype == ZORCH_BF16 || t->dtype == ZORCH_F16) && zorch_tensor_is_contiguous(t)) return ZORCH_OK;
  return check_buf("allgather", t);
}

zorch_status comm_allgather(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv) {
  if (check_gather_buf(send) || check_gather_buf(recv) || check_same_dev("allgather", send, recv))
    return zorch_last_status();
  int64_t n = zorch_tensor_numel(send);
  if (n * c->world != zorch_tensor_numel(recv) || send->dtype != recv->dtype)
    return err_set(ZORCH_ERR_SHAPE, "allgather: %lld elements on each of %d ranks do not fill %lld",
                   (long long)n, c->world, (long long)zorch_tensor_numel(recv));
  size_t es = dtype_sizes[send->dtype];
  if (local_only(c, send)) return local_copy(recv, tensor_ptr(recv), tensor_ptr(send), (size_t)n * es);
  if (check_open(c, "allgather")) return zorch_last_status();
  comm_enter(c, "allgather", (uint64_t)n * es * (uint64_t)(c->world - 1));
  c->sent += (uint64_t)n * es * (uint64_t)(c->world - 1);
  c->recv += (uint64_t)n * es * (uint64_t)(c->world - 1);
  NCCL_ROUTE(send, allgather(c, send, recv, n))
#ifdef ZORCH_MPI
  /* the send buffer may be this rank's slice of recv */
  const char *sp = tensor_ptr(send), *rp = tensor_ptr(recv);
  bool inplace = sp == rp + (size_t)(n * c->rank) * es;
  if (n > INT_MAX) return err_set(ZORCH_ERR_ARG, "allgather: %lld elements per rank is more than one MPI call takes", (long long)n);
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Iallgather(inplace ? MPI_IN_PLACE : sp, (int)n, mpi_type(send->dtype), (void *)rp,
                                             (int)n, mpi_type(send->dtype), mcomm(c), &req), "allgather", n);
  return st ? st : mpi_wait(c, &req, "allgather", n * c->world);
#else
  return ZORCH_OK;
#endif
}

/* Starts an all-gather of counts (comm_allgatherv's arguments); *req stays
   NULL when it completed already. */
static zorch_status start_allgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                                     const int64_t *counts, comm_request **req) {
  *req = NULL;
  if (check_gather_buf(send) || check_gather_buf(recv) || check_same_dev("allgatherv", send, recv))
    return zorch_last_status();
  int64_t total;
  if (check_counts("allgatherv", c, counts, recv, send, &total)) return zorch_last_status();
  size_t es = dtype_sizes[send->dtype];
  if (local_only(c, send)) return local_copy(recv, tensor_ptr(recv), tensor_ptr(send), (size_t)total * es);
  if (check_open(c, "allgatherv")) return zorch_last_status();
  comm_enter(c, "allgather", (uint64_t)counts[c->rank] * es * (uint64_t)(c->world - 1));
  c->sent += (uint64_t)counts[c->rank] * es * (uint64_t)(c->world - 1);
  c->recv += (uint64_t)(total - counts[c->rank]) * es;
#ifdef ZORCH_WITH_CUDA
  if (ON_GPU(send)) { /* on NCCL's side stream, as the reduce-scatter */
    const nccl_api *nccl = nccl_table();
    void *ev;
    if (!nccl || nccl->iallgatherv(c, send, recv, counts, &ev)) return zorch_last_status();
    return nccl_request(c, "allgather", total, ev, req);
  }
#endif
#ifdef ZORCH_MPI
  comm_request *r = malloc(sizeof *r);
  int *rc = mpi_counts("allgatherv", c, counts);
  if (!r || !rc) {
    free(r);
    free(rc);
    return rc ? err_set(ZORCH_ERR_OOM, "allgatherv: out of memory") : zorch_last_status();
  }
  *r = (comm_request){.c = c, .what = "allgather", .n = total, .kind = comm_cur_kind, .t0 = comm_cur_t0, .counts = rc};
  int *displs = rc + c->world;
  zorch_status st = mpi_check(MPI_Iallgatherv(tensor_ptr(send), rc[c->rank], mpi_type(send->dtype), tensor_ptr(recv),
                                              rc, displs, mpi_type(send->dtype), mcomm(c), &r->req),
                              "allgatherv", total);
  if (st) {
    free(rc);
    free(r);
    return st;
  }
  *req = r;
  return ZORCH_OK;
#else
  return ZORCH_OK;
#endif
}

zorch_status comm_iallgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv, const int64_t *counts,
                              comm_request **req) {
  return start_allgatherv(c, send, recv, counts, req);
}

zorch_status comm_allgatherv(zero_comm *c, const zorch_tensor *send, zorch_tensor *recv,
                             const int64_t *counts) {
  comm_request *r;
  zorch_status st = start_allgatherv(c, send, recv, counts, &r);
  return st ? st : comm_wait(r);
}

/* ---- byte collectives (the compressed all-reduce's packed signs and scales) ---- */
/* op is MPI_Alltoall (send holds world pieces of `per` bytes, recv gets piece
   `rank` of every rank) or MPI_Allgather (send is one piece of `per` bytes). */
static zorch_status byte_collective(zero_comm *c, bool alltoall, const void *send, void *recv, size_t per) {
  const char *what = alltoall ? "1-bit alltoall" : "1-bit allgather";
  if (c->world == 1) return memmove(recv, send, per), ZORCH_OK;
  if (check_open(c, what)) return zorch_last_status();
  comm_enter(c, what, (uint64_t)per * (uint64_t)(c->world - 1));
  c->sent += (uint64_t)per * (uint64_t)(c->world - 1);
  c->recv += (uint64_t)per * (uint64_t)(c->world - 1);
#ifdef ZORCH_MPI
  if (per > INT_MAX) return err_set(ZORCH_ERR_ARG, "%s: %zu bytes per rank is more than one MPI call takes", what, per);
  MPI_Request req;
  int n = (int)per;
  zorch_status st = mpi_check(alltoall ? MPI_Ialltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, mcomm(c), &req)
                                       : MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, mcomm(c), &req),
                              what, (int64_t)per);
  return st ? st : mpi_wait(c, &req, what, (int64_t)per * c->world);
#else
  (void)send, (void)recv;
  return err_set(ZORCH_ERR_DEVICE, "%s: %d ranks but zorch was built without MPI", what, c->world);
#endif
}

zorch_status comm_alltoall_bytes(zero_comm *c, const void *send, void *recv, size_t per) {
  return byte_collective(c, true, send, recv, per);
}
zorch_status comm_allgather_bytes(zero_comm *c, const void *send, void *recv, size_t per) {
  return byte_collective(c, false, send, recv, per);
}

/* ---- groups and point to point ---------------------------------------------------- */
/* Every group made. They stay (reachable from here) for the process's life:
   another Lua state may still hold one, and freeing a communicator is
   collective; comm_finalize frees their MPI communicators with MPI's. */
static zero_comm *groups;

int comm_world_rank(const zero_comm *c, int r) { return c->members ? c->members[r] : r; }

zorch_status comm_split(zero_comm *parent, int color, int key, zero_comm **out) {
  *out = NULL;
  if (color < 0) return err_set(ZORCH_ERR_ARG, "comm_split: color must be >= 0, got %d", color);
  if (check_open(parent, "comm_split")) return zorch_last_status();
  zero_comm *g = calloc(1, sizeof *g);
  if (!g) return err_set(ZORCH_ERR_OOM, "comm_split: out of memory");
  g->backend = parent->backend;
  g->nccl_dev = -1;
  g->world = 1;
  (void)key; /* only MPI orders a split group's ranks */
#ifdef ZORCH_MPI
  if (parent->world > 1 || parent->mpi) {
    MPI_Comm *mc = malloc(sizeof *mc);
    g->mpi = mc;
    if (!mc) {
      free(g);
      return err_set(ZORCH_ERR_OOM, "comm_split: out of memory");
    }
    comm_enter(parent, "comm_split", 0);
    zorch_status st = mpi_check(MPI_Comm_split(mcomm(parent), color, key, mc), "comm_split", 1);
    if (st) {
      free(mc);
      free(g);
      return st;
    }
    MPI_Comm_set_errhandler(*mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*mc, &g->rank);
    MPI_Comm_size(*mc, &g->world);
    g->members = malloc(sizeof(int) * (size_t)g->world);
    int *mine = malloc(sizeof(int) * (size_t)g->world);
    MPI_Group gg, wg;
    if (g->members && mine && MPI_Comm_group(*mc, &gg) == MPI_SUCCESS) {
      MPI_Comm_group(world_comm, &wg);
      for (int r = 0; r < g->world; r++) mine[r] = r;
      MPI_Group_translate_ranks(gg, g->world, mine, wg, g->members);
      MPI_Group_free(&gg);
      MPI_Group_free(&wg);
    } else {
      free(g->members);
      g->members = NULL;
    }
    free(mine);
    if (!g->members) {
      MPI_Comm_free(mc);
      free(mc);
      free(g);
      return err_set(ZORCH_ERR_OOM, "comm_split: out of memory");
    }
  }
#endif
  if (!g->members) { /* one process: a group of one */
    g->members = malloc(sizeof(int));
    if (!g->members) {
      free(g);
      return err_set(ZORCH_ERR_OOM, "comm_split: out of memory");
    }
    g->members[0] = comm_world_rank(parent, parent->rank);
  }
  g->next = groups;
  groups = g;
  *out = g;
  return ZORCH_OK;
}

static zorch_status check_p2p_buf(const char *op, const zorch_tensor *t) {
  if (!zorch_tensor_is_contiguous(t)) return err_set(ZORCH_ERR_ARG, "%s: needs a contiguous tensor", op);
  return ZORCH_OK;
}

static zorch_status check_peer(const zero_comm *c, const char *op, const char *arg, int peer) {
  if (peer < 0 || peer >= c->world)
    return err_set(ZORCH_ERR_ARG, "%s: %s rank %d is outside the group of %d", op, arg, peer, c->world);
  return ZORCH_OK;
}

zorch_status comm_sendrecv(zero_comm *c, const zorch_tensor *send, int dst, zorch_tensor *recv, int src) {
  const char *op = "sendrecv";
  if ((send && (check_p2p_buf(op, send) || check_peer(c, op, "destination", dst))) ||
      (recv && (check_p2p_buf(op, recv) || check_peer(c, op, "source", src))) ||
      (send && recv && check_same_dev(op, send, recv)))
    return zorch_last_status();
  size_t sb = send ? (size_t)zorch_tensor_numel(send) * dtype_sizes[send->dtype] : 0;
  size_t rb = recv ? (size_t)zorch_tensor_numel(recv) * dtype_sizes[recv->dtype] : 0;
  if (!send && !recv) return ZORCH_OK;
  /* to itself: a copy (a group of one, or a rank that is its own neighbour) */
  if (send && recv && dst == c->rank && src == c->rank) {
    if (sb != rb) return err_set(ZORCH_ERR_SHAPE, "%s: %zu bytes sent to itself into a buffer of %zu", op, sb, rb);
    return local_copy(recv, tensor_ptr(recv), tensor_ptr(send), sb);
  }
  if (c->world == 1)
    return err_set(ZORCH_ERR_ARG, "%s: a %s with no matching %s in a group of one rank", op, send ? "send" : "receive",
                   send ? "receive" : "send");
  if (check_open(c, op)) return zorch_last_status();
  comm_enter(c, op, sb);
  c->sent += sb;
  c->recv += rb;
  NCCL_ROUTE(send ? send : recv, sendrecv(c, send, dst, recv, src))
#ifdef ZORCH_MPI
  if (sb > INT_MAX || rb > INT_MAX) return err_set(ZORCH_ERR_ARG, "%s: more bytes than one MPI call takes", op);
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Status stat[2];
  zorch_status st = ZORCH_OK;
  if (recv) st = mpi_check(MPI_Irecv(tensor_ptr(recv), (int)rb, MPI_BYTE, src, 0, mcomm(c), &req[0]), op, (int64_t)rb);
  if (!st && send)
    st = mpi_check(MPI_Isend(tensor_ptr(send), (int)sb, MPI_BYTE, dst, 0, mcomm(c), &req[1]), op, (int64_t)sb);
  if (st) return st; /* a posted receive stays pending: the next exchange fails too */
  comm_waiter w;
  comm_wait_begin(&w);
  for (;;) {
    int done = 0;
    if ((st = mpi_check(MPI_Testall(2, req, &done, stat), op, (int64_t)(sb + rb)))) return st;
    if (done) {
      comm_lap(comm_cur_kind, comm_cur_t0);
      break;
    }
    if ((st = comm_check_wait(c, op, (int64_t)(sb + rb), w.t0))) return st;
    comm_wait_pause(&w);
  }
  if (recv) {
    int got = 0;
    MPI_Get_count(&stat[0], MPI_BYTE, &got);
    if ((size_t)got != rb)
      return err_set(ZORCH_ERR_SHAPE, "%s: rank %d received %d bytes from rank %d into a buffer of %zu", op, c->rank,
                     got, src, rb);
  }
  return ZORCH_OK;
#else
  return err_set(ZORCH_ERR_DEVICE, "%s: %d ranks but zorch was built without MPI", op, c->world);
#endif
}

zorch_status comm_broadcast(zero_comm *c, zorch_tensor *t, int root) {
  if (check_p2p_buf("broadcast", t) || check_peer(c, "broadcast", "root", root)) return zorch_last_status();
  size_t n = (size_t)zorch_tensor_numel(t) * dtype_sizes[t->dtype];
  if (c->world == 1) return ZORCH_OK;
  if (check_open(c, "broadcast")) return zorch_last_status();
  comm_enter(c, "broadcast", c->rank == root ? n : 0);
  if (c->rank == root) c->sent += n;
  else c->recv += n;
  NCCL_ROUTE(t, broadcast(c, t, root))
#ifdef ZORCH_MPI
  if (n > INT_MAX) return err_set(ZORCH_ERR_ARG, "broadcast: %zu bytes is more than one MPI call takes", n);
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Ibcast(tensor_ptr(t), (int)n, MPI_BYTE, root, mcomm(c), &req), "broadcast", (int64_t)n);
  return st ? st : mpi_wait(c, &req, "broadcast", (int64_t)n);
#else
  return ZORCH_OK;
#endif
}

zorch_status comm_barrier(zero_comm *c) {
  if (c->world == 1) return ZORCH_OK;
  if (check_open(c, "barrier")) return zorch_last_status();
  comm_enter(c, "barrier", 0);
#ifdef ZORCH_MPI
  MPI_Request req;
  zorch_status st = mpi_check(MPI_Ibarrier(mcomm(c), &req), "barrier", 0);
  return st ? st : mpi_wait(c, &req, "barrier", 0);
#else
  return ZORCH_OK;
#endif
}

void comm_reset_bytes(zero_comm *c) { c->sent = c->recv = 0; }

void comm_abort(int code) {
#ifdef ZORCH_MPI
  if (the_comm.world > 1) MPI_Abort(world_comm, code);
#else
  (void)code;
#endif
}

void comm_finalize(void) {
#ifdef ZORCH_MPI
  int fin = 0;
  /* after a timeout a collective is still pending: finalising would wait on it */
  if (mpi_started && !comm_closed && (MPI_Finalized(&fin), !fin)) {
    for (zero_comm *g = groups; g; g = g->next)
      if (g->mpi) MPI_Comm_free((MPI_Comm *)g->mpi);
    if (progress_win != MPI_WIN_NULL) {
      MPI_Win_unlock_all(progress_win);
      MPI_Win_free(&progress_win);
    }
    MPI_Finalize();
    rdv_finish();
  }
#endif
}

void zorch_dist_abort(int code) { comm_abort(code); }
int zorch_dist_world(void) { return comm_ready ? the_comm.world : launcher_world(NULL); }
int zorch_dist_rank(void) {
  if (comm_ready) return the_comm.rank;
  const char *v = getenv("OMPI_COMM_WORLD_RANK");
  if (!v) v = getenv("PMIX_RANK");
  if (v) return atoi(v);
  rdv_env e;
  return rdv_from_env(&e) ? e.rank : -1;
}

#ifdef ZORCH_WITH_CUDA
/* The NCCL collectives of the CUDA module, which a cuda tensor has already
   opened; they get this file's broadcast and timed waits. */
static const nccl_host nccl_services = {sizeof(nccl_host), comm_bcast_bytes, comm_check_wait, comm_wait_begin,
                                        comm_wait_pause};
static const nccl_api *nccl_api_ptr;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static void nccl_open(void) {
  nccl_entry entry = (nccl_entry)cuda_module_symbol(ZORCH_CUDA_NCCL_ENTRY);
  nccl_api_ptr = entry ? entry(&nccl_services) : NULL;
}
static const nccl_api *nccl_table(void) {
  pthread_once(&nccl_once, nccl_open);
  if (!nccl_api_ptr)
    err_set(ZORCH_ERR_DEVICE, "cuda: NCCL collectives not available: %s",
            *cuda_module_why() ? cuda_module_why() : "the CUDA module has no " ZORCH_CUDA_NCCL_ENTRY);
  return nccl_api_ptr;
}
#endif
