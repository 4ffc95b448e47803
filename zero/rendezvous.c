/* rendezvous.c: the world of ranks that no MPI launcher started (see
   rendezvous.h). Open MPI connects two singletons only through a name server
   they share, its ompi-server: rank 0 runs one, and the TCP socket at
   MASTER_ADDR:MASTER_PORT hands its address and rank 0's MPI port to the
   others. Rank 0 then accepts them one at a time, in rank order, each
   accept collective over the ranks joined so far, so the merged
   communicator's order is RANK's. Every message after that is MPI's. */
#include "rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  char *end;
  if (!v || !*v) return 0;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 30) return 0;
  *out = (int)x;
  return 1;
}

/* The first host of a Slurm host list ("node[03-05,9],gpu1" -> "node03"). */
static void first_host(const char *list, char *out, size_t cap) {
  size_t n = strcspn(list, ",[");
  snprintf(out, cap, "%.*s", (int)n, list);
  if (list[n] == '[') {
    const char *d = list + n + 1;
    size_t m = strcspn(d, "-,]");
    size_t len = strlen(out);
    snprintf(out + len, cap - len, "%.*s", (int)m, d);
  }
}

bool rdv_from_env(rdv_env *e) {
  memset(e, 0, sizeof *e);
  const char *addr = getenv("MASTER_ADDR");
  bool have_port = env_int("MASTER_PORT", &e->port);
  if (env_int("RANK", &e->rank) && env_int("WORLD_SIZE", &e->world)) {
    e->who = "RANK/WORLD_SIZE";
    if (!have_port) e->port = 0;
    /* torchrun's agent keeps its own store at MASTER_PORT: zorch takes the next */
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (have_port && agent && strcmp(agent, "True") == 0) e->port++;
  } else if (env_int("SLURM_PROCID", &e->rank) && env_int("SLURM_STEP_NUM_TASKS", &e->world)) {
    e->who = "SLURM_PROCID/SLURM_STEP_NUM_TASKS";
    const char *nodes = getenv("SLURM_STEP_NODELIST");
    if (!addr && nodes) {
      first_host(nodes, e->addr, sizeof e->addr);
      addr = e->addr;
    }
    /* a port of the job's step, the same on every rank */
    int job = 0, step = 0;
    env_int("SLURM_JOB_ID", &job);
    env_int("SLURM_STEP_ID", &step);
    if (!have_port) e->port = 20000 + (int)(((long long)job * 64 + step) % 20000);
  } else {
    return false;
  }
  if (addr != e->addr) snprintf(e->addr, sizeof e->addr, "%s", addr ? addr : "");
  return e->world > 1;
}

#ifdef ZORCH_MPI
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t server_pid = -1;
/* The rendezvous sockets stay open for the job: MPI_Abort ends only the
   process's own singleton job, so a rank learns that another one ended from
   its socket closing (rank 0 watches every rank, the others rank 0). */
static int *watch_fd, watch_n, *watch_rank;

static void watch(int fd, int rank) {
  int *f = realloc(watch_fd, sizeof(int) * (size_t)(watch_n + 1)), *r = f ? realloc(watch_rank, sizeof(int) * (size_t)(watch_n + 1)) : NULL;
  if (f) watch_fd = f;
  if (!r) {
    close(fd); /* (unwatched: a lost rank is then found by the collective's timeout) */
    return;
  }
  watch_rank = r;
  watch_fd[watch_n] = fd, watch_rank[watch_n++] = rank;
}

static double clock_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int wait_fd(int fd, short events, double deadline) {
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    double left = deadline - clock_s();
    if (left <= 0) return 0;
    int r = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

static int send_line(int fd, const char *s) {
  char buf[1200];
  int n = snprintf(buf, sizeof buf, "%s\n", s);
  for (int off = 0; off < n;) {
    ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    off += (int)w;
  }
  return 0;
}

/* One line (without its newline): 1, 0 on timeout, -1 when the peer closed. */
static int recv_line(int fd, char *buf, size_t cap, double deadline) {
  size_t n = 0;
  for (;;) {
    int r = wait_fd(fd, POLLIN, deadline);
    if (r <= 0) return r;
    char c;
    ssize_t got = read(fd, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    if (c == '\n') break;
    if (n + 1 < cap) buf[n++] = c;
  }
  buf[n] = 0;
  return 1;
}

/* ompi-server, with its address in uri: it writes it to a file (its stdout
   would be a pipe it does not flush). */
static zorch_status start_server(char *uri, size_t cap, double deadline) {
  char dir[] = "/tmp/zorch-rdv-XXXXXX", file[64];
  if (!mkdtemp(dir)) return err_set(ZORCH_ERR_IO, "comm: rendezvous: cannot make a folder in /tmp: %s", strerror(errno));
  snprintf(file, sizeof file, "%s/uri", dir);
  pid_t pid = fork();
  if (pid < 0) {
    rmdir(dir);
    return err_set(ZORCH_ERR_IO, "comm: rendezvous: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* it goes with rank 0 however rank 0 ends */
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
    execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", file, (char *)NULL);
    _exit(127); /* (the forked child) exec failed: the parent sees it end */
  }
  server_pid = pid;
  bool got = false, alive = true;
  size_t prev = 0;
  while (!got && alive && clock_s() < deadline) {
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    FILE *f = fopen(file, "r");
    size_t n = f ? fread(uri, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    uri[n] = 0;
    got = n > 0 && n == prev && strstr(uri, "tcp"); /* the whole of it: the same twice */
    prev = n;
    alive = waitpid(pid, NULL, WNOHANG) == 0;
  }
  unlink(file);
  rmdir(dir);
  uri[strcspn(uri, "\n")] = 0;
  if (got) return ZORCH_OK;
  if (!alive) server_pid = -1;
  rdv_finish();
  return err_set(ZORCH_ERR_IO, "comm: rendezvous: Open MPI's ompi-server %s (it connects ranks that mpirun did not "
                 "start; install openmpi-bin)", alive ? "gave no address in time" : "did not start");
}

static int tcp_listen(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0), off = 0, on = 1;
  bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  int rc;
  if (v6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off); /* IPv4 peers too */
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
    rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  } else {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
    rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  }
  if (rc != 0 || listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Connects to rank 0, trying again while it is not listening yet. */
static int tcp_connect(const rdv_env *e, double deadline, char *why, size_t cap) {
  char port[16];
  snprintf(port, sizeof port, "%d", e->port);
  snprintf(why, cap, "no answer");
  do {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(e->addr, port, &hints, &res);
    if (g != 0) {
      snprintf(why, cap, "%s", gai_strerror(g));
    } else {
      for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          freeaddrinfo(res);
          return fd;
        }
        snprintf(why, cap, "%s", strerror(errno));
        close(fd);
      }
      freeaddrinfo(res);
    }
    nanosleep(&(struct timespec){0, 100000000}, NULL);
  } while (clock_s() < deadline);
  return -1;
}

/* MPI_Init as a singleton that uses the shared name server. Open MPI takes a
   process with Slurm's step variables for one that srun started through PMI,
   which it cannot use: they are hidden while it starts. */
static zorch_status singleton_init(const char *uri) {
  setenv("OMPI_MCA_pmix_server_uri", uri, 1);
  static const char *const hide[] = {"SLURM_STEP_ID", "SLURM_STEPID"};
  char *saved[2];
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(hide[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(hide[i]);
  }
  int provided, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  for (int i = 0; i < 2; i++) {
    if (saved[i]) setenv(hide[i], saved[i], 1);
    free(saved[i]);
  }
  if (rc != MPI_SUCCESS) return err_set(ZORCH_ERR_IO, "comm: MPI_Init failed");
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  return ZORCH_OK;
}

static zorch_status mpi_failed(int rc, const char *what, const rdv_env *e) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return err_set(ZORCH_ERR_IO, "comm: rendezvous: %s failed on rank %d: %s", what, e->rank, msg);
}

/* Accepts the ranks after `from` (collective over *cur, whose ranks are
   0..from), merging each at the end. */
static zorch_status accept_rest(const rdv_env *e, const char *port, int from, MPI_Comm *cur, int *peers) {
  for (int k = from + 1; k < e->world; k++) {
    if (peers && send_line(peers[k], port) != 0)
      return err_set(ZORCH_ERR_IO, "comm: rendezvous: rank %d left before it could join", k);
    MPI_Comm inter, merged;
    int rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, *cur, &inter);
    if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Comm_accept", e);
    rc = MPI_Intercomm_merge(inter, 0, &merged);
    MPI_Comm_free(&inter);
    if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Intercomm_merge", e);
    if (*cur != MPI_COMM_SELF) MPI_Comm_free(cur);
    *cur = merged;
  }
  return ZORCH_OK;
}

/* Rank 0: the hellos of every other rank, their sockets in peers[rank]. */
static zorch_status gather_peers(const rdv_env *e, int lfd, int *peers, double deadline) {
  for (int joined = 1; joined < e->world;) {
    if (wait_fd(lfd, POLLIN, deadline) <= 0) {
      char missing[256] = "";
      for (int r = 1; r < e->world && strlen(missing) < 200; r++)
        if (peers[r] < 0) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %d", r);
      return err_set(ZORCH_ERR_TIMEOUT, "comm: rendezvous: %d of %d ranks reached port %d in time; missing ranks:%s",
                     joined, e->world, e->port, missing);
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) continue;
    char line[128];
    int rank = -1, world = -1;
    if (recv_line(fd, line, sizeof line, clock_s() + 10) != 1 || sscanf(line, "zorch rank %d world %d", &rank, &world) != 2) {
      close(fd); /* not a rank of this job */
      continue;
    }
    const char *bad = world != e->world ? "a different world size" : rank < 1 || rank >= e->world ? "a rank outside the world"
                    : peers[rank] >= 0 ? "a rank that has already joined" : NULL;
    if (bad) {
      char msg[200];
      snprintf(msg, sizeof msg, "error rank %d of %d: %s (rank 0 has a world of %d)", rank, world, bad, e->world);
      send_line(fd, msg);
      close(fd);
      return err_set(ZORCH_ERR_ARG, "comm: rendezvous: a process came as rank %d of %d: %s (%s = %d of %d here)",
                     rank, world, bad, e->who, e->rank, e->world);
    }
    peers[rank] = fd;
    joined++;
  }
  return ZORCH_OK;
}

static zorch_status join_as_root(const rdv_env *e, double deadline, MPI_Comm *cur) {
  int lfd = tcp_listen(e->port);
  if (lfd < 0)
    return err_set(ZORCH_ERR_IO, "comm: rendezvous: rank 0 cannot listen on port %d (MASTER_PORT): %s", e->port,
                   strerror(errno));
  int *peers = malloc(sizeof(int) * (size_t)e->world);
  if (!peers) {
    close(lfd);
    return err_set(ZORCH_ERR_OOM, "comm: rendezvous: out of memory");
  }
  for (int r = 0; r < e->world; r++) peers[r] = -1;
  char uri[1024], port[MPI_MAX_PORT_NAME] = "", line[1100];
  zorch_status st = gather_peers(e, lfd, peers, deadline);
  close(lfd);
  if (!st) st = start_server(uri, sizeof uri, deadline);
  if (!st) {
    snprintf(line, sizeof line, "uri %s", uri);
    for (int r = 1; r < e->world && !st; r++)
      if (send_line(peers[r], line) != 0) st = err_set(ZORCH_ERR_IO, "comm: rendezvous: rank %d left", r);
  }
  if (!st) st = singleton_init(uri);
  int rc;
  if (!st && (rc = MPI_Open_port(MPI_INFO_NULL, port)) != MPI_SUCCESS) st = mpi_failed(rc, "MPI_Open_port", e);
  if (!st) st = accept_rest(e, port, 0, cur, peers);
  if (*port) MPI_Close_port(port);
  if (!st) {
    for (int r = 1; r < e->world; r++) watch(peers[r], r);
  } else {
    for (int r = 1; r < e->world; r++)
      if (peers[r] >= 0) close(peers[r]);
  }
  free(peers);
  return st;
}

static zorch_status join_as_peer(const rdv_env *e, double deadline, MPI_Comm *cur) {
  char why[128], line[1100], hello[64];
  int fd = tcp_connect(e, deadline, why, sizeof why);
  if (fd < 0)
    return err_set(ZORCH_ERR_TIMEOUT, "comm: rendezvous: rank %d cannot reach rank 0 at %s:%d (MASTER_ADDR:MASTER_PORT): %s",
                   e->rank, e->addr, e->port, why);
  snprintf(hello, sizeof hello, "zorch rank %d world %d", e->rank, e->world);
  zorch_status st = ZORCH_OK;
  int r = send_line(fd, hello) == 0 ? recv_line(fd, line, sizeof line, deadline) : -1;
  if (r == 1 && strncmp(line, "error ", 6) == 0) st = err_set(ZORCH_ERR_ARG, "comm: rendezvous: rank 0 refused %s", line + 6);
  else if (r != 1 || strncmp(line, "uri ", 4) != 0)
    st = err_set(ZORCH_ERR_TIMEOUT, "comm: rendezvous: rank %d: rank 0 %s", e->rank,
                 r == 0 ? "did not answer in time (it waits for every rank)" : "closed the rendezvous (it failed: see its error)");
  if (!st) st = singleton_init(line + 4);
  /* the port name, when rank 0 comes to this rank */
  if (!st && (r = recv_line(fd, line, sizeof line, deadline + 60)) != 1)
    st = err_set(ZORCH_ERR_IO, "comm: rendezvous: rank %d: rank 0 closed the rendezvous before this rank's turn", e->rank);
  if (st) {
    close(fd);
    return st;
  }
  watch(fd, 0);
  MPI_Comm inter;
  int rc = MPI_Comm_connect(line, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
  if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Comm_connect", e);
  rc = MPI_Intercomm_merge(inter, 1, cur);
  MPI_Comm_free(&inter);
  if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Intercomm_merge", e);
  return accept_rest(e, line, e->rank, cur, NULL);
}

zorch_status rdv_join(const rdv_env *e, double timeout_s, MPI_Comm *world) {
  if (!*e->addr || e->port <= 0 || e->port > 65535)
    return err_set(ZORCH_ERR_ARG, "comm: %s say rank %d of %d, but MASTER_ADDR and MASTER_PORT (rank 0's host and a "
                   "free port) are %s", e->who, e->rank, e->world, *e->addr ? "not a valid port" : "not set");
  if (e->rank >= e->world)
    return err_set(ZORCH_ERR_ARG, "comm: %s say rank %d of %d: the rank must be below the world size", e->who, e->rank,
                   e->world);
  double deadline = clock_s() + (timeout_s > 0 ? timeout_s : 1e9);
  MPI_Comm cur = MPI_COMM_SELF;
  zorch_status st = e->rank == 0 ? join_as_root(e, deadline, &cur) : join_as_peer(e, deadline, &cur);
  if (st) return st;
  int r = -1, n = 0;
  MPI_Comm_rank(cur, &r);
  MPI_Comm_size(cur, &n);
  if (r != e->rank || n != e->world)
    return err_set(ZORCH_ERR_IO, "comm: rendezvous: joined as rank %d of %d instead of %d of %d", r, n, e->rank, e->world);
  *world = cur;
  return ZORCH_OK;
}

int rdv_lost(void) {
  static double last;
  double now = clock_s();
  if (!watch_n || now - last < 0.1) return -1;
  last = now;
  for (int i = 0; i < watch_n; i++) {
    struct pollfd p = {.fd = watch_fd[i], .events = POLLIN};
    char c;
    if (poll(&p, 1, 0) == 1 && read(watch_fd[i], &c, 1) <= 0) return watch_rank[i];
  }
  return -1;
}

void rdv_finish(void) {
  for (int i = 0; i < watch_n; i++) close(watch_fd[i]);
  free(watch_fd), free(watch_rank);
  watch_fd = watch_rank = NULL, watch_n = 0;
  if (server_pid > 0) {
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
    server_pid = -1;
  }
}
#endif
