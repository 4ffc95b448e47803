/* zorch._http_server: the HTTP side of `zorch serve` (docs/serve.md) on
   libmicrohttpd, one thread per connection. A connection thread reads the
   body, puts a job on a mutex-guarded queue and waits on the job's condvar;
   the thread that owns the Lua VM takes jobs (srv:next), answers them
   (srv:head, srv:write, srv:finish) between scheduler steps, and never waits
   on the network. A job is freed by whichever side lets go of it last. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lz.h"

#ifdef ZORCH_MHD
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

typedef struct job {
  struct job *next;      /* in the queue */
  long id;
  char method[8], *path, *body;
  size_t body_n;
  int status;            /* 0 until the engine answers */
  bool stream, done, taken;
  char *ctype, *out;
  size_t out_n, out_cap, out_off;
  int refs;              /* the connection and the engine */
  pthread_cond_t cv;
} job;

typedef struct {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* a job queued */
  job *head, *tail;
  long next_id;
  int live;              /* jobs not yet freed */
  int inflight;          /* POST jobs not finished by the engine */
  int queue_max;
  size_t max_body;
  bool quiesced;
  const volatile sig_atomic_t *stop;
} server;

/* a connection's request while its body arrives */
typedef struct {
  char *body;
  size_t n;
  bool too_big;
} upload;

static void job_unref(server *s, job *j) { /* with s->mu held */
  if (--j->refs > 0) return;
  pthread_cond_destroy(&j->cv);
  free(j->path), free(j->body), free(j->ctype), free(j->out), free(j);
  s->live--;
  pthread_cond_broadcast(&s->cv);
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype, const char *text,
                                 size_t n) {
  struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", ctype);
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *msg) {
  char b[512];
  int n = snprintf(b, sizeof b, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%u}}", msg,
                   type, status);
  return send_text(c, status, "application/json", b, (size_t)n);
}

typedef struct {
  server *s;
  job *j;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream_ctx *x = cls;
  pthread_mutex_lock(&x->s->mu);
  while (x->j->out_off == x->j->out_n && !x->j->done) pthread_cond_wait(&x->j->cv, &x->s->mu);
  ssize_t n;
  if (x->j->out_off < x->j->out_n) {
    size_t k = x->j->out_n - x->j->out_off;
    if (k > max) k = max;
    memcpy(buf, x->j->out + x->j->out_off, k);
    x->j->out_off += k;
    n = (ssize_t)k;
  } else
    n = MHD_CONTENT_READER_END_OF_STREAM;
  pthread_mutex_unlock(&x->s->mu);
  return n;
}

static void stream_free(void *cls) {
  stream_ctx *x = cls;
  pthread_mutex_lock(&x->s->mu);
  job_unref(x->s, x->j);
  pthread_mutex_unlock(&x->s->mu);
  free(x);
}

/* the job's answer, once the engine gave its status: the whole body, or a
   stream read as the engine writes it */
static enum MHD_Result answer(server *s, struct MHD_Connection *c, job *j) {
  pthread_mutex_lock(&s->mu);
  while (j->status == 0 || (!j->stream && !j->done)) pthread_cond_wait(&j->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  unsigned status = (unsigned)j->status;
  struct MHD_Response *r;
  stream_ctx *x = NULL;
  if (!j->stream) r = MHD_create_response_from_buffer(j->out_n, j->out ? j->out : (void *)"", MHD_RESPMEM_MUST_COPY);
  else {
    x = malloc(sizeof *x);
    r = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, x, stream_free) : NULL;
    if (r) *x = (stream_ctx){s, j};
    else free(x);
  }
  if (r) {
    MHD_add_response_header(r, "Content-Type", j->ctype ? j->ctype : "application/json");
    if (j->stream) MHD_add_response_header(r, "Cache-Control", "no-cache");
  }
  if (!r || !j->stream) { /* the stream's reader lets go of it otherwise */
    pthread_mutex_lock(&s->mu);
    job_unref(s, j);
    pthread_mutex_unlock(&s->mu);
  }
  if (!r) return MHD_NO;
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls) {
  (void)version;
  server *s = cls;
  upload *u = *con_cls;
  if (!u) { /* the headers: the body follows in later calls */
    u = calloc(1, sizeof *u);
    if (!u) return MHD_NO;
    *con_cls = u;
    return MHD_YES;
  }
  if (*size) {
    if (!u->too_big && u->n + *size <= s->max_body) {
      char *b = realloc(u->body, u->n + *size + 1);
      if (!b) return MHD_NO;
      memcpy(b + u->n, data, *size);
      u->body = b;
      u->n += *size;
      b[u->n] = 0;
    } else
      u->too_big = true; /* read and dropped: the answer is a 413 */
    *size = 0;
    return MHD_YES;
  }
  if (u->too_big) return send_error(c, 413, "invalid_request_error", "the request body is larger than --max-body");
  bool post = strcmp(method, "POST") == 0;
  pthread_mutex_lock(&s->mu);
  if (s->quiesced || (s->stop && *s->stop)) {
    pthread_mutex_unlock(&s->mu);
    return send_error(c, 503, "server_error", "the server is shutting down");
  }
  if (post && s->inflight >= s->queue_max) {
    pthread_mutex_unlock(&s->mu);
    return send_error(c, 429, "rate_limit_error", "the request queue is full (--queue)");
  }
  job *j = calloc(1, sizeof *j);
  char *path = strdup(url);
  if (!j || !path) {
    pthread_mutex_unlock(&s->mu);
    free(j), free(path);
    return send_error(c, 500, "server_error", "out of memory");
  }
  j->id = ++s->next_id;
  snprintf(j->method, sizeof j->method, "%s", method);
  j->path = path;
  j->body = u->body; /* the job owns it now */
  j->body_n = u->n;
  u->body = NULL;
  j->refs = 2;
  j->taken = post; /* counted in inflight until finished */
  pthread_cond_init(&j->cv, NULL);
  if (post) s->inflight++;
  s->live++;
  if (s->tail) s->tail->next = j;
  else s->head = j;
  s->tail = j;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return answer(s, c, j);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
  (void)cls, (void)c, (void)t;
  upload *u = *con_cls;
  if (u) free(u->body), free(u);
  *con_cls = NULL;
}

/* ---- the engine's side (Lua) ------------------------------------------------------ */

#define SERVER_MT "zorch.HttpServer"
#define JOBS_KEY "zorch.HttpServer.jobs" /* id -> light userdata, in the server's uservalue */

static server *check_server(lua_State *L) {
  server *s = luaL_checkudata(L, 1, SERVER_MT);
  if (!s->d) luaL_error(L, "http server: closed");
  return s;
}

/* the engine's job of an id (the jobs it has taken and not finished) */
static job *check_job(lua_State *L, server *s) {
  (void)s;
  lua_Integer id = luaL_checkinteger(L, 2);
  lua_getiuservalue(L, 1, 1);
  lua_rawgeti(L, -1, id);
  job *j = lua_touserdata(L, -1);
  lua_pop(L, 2);
  if (!j) luaL_error(L, "http server: no open request %d", (int)id);
  return j;
}

static void stop_daemon(server *s) {
  if (!s->d) return;
  MHD_stop_daemon(s->d);
  s->d = NULL;
}

static int srv_gc(lua_State *L) {
  server *s = luaL_checkudata(L, 1, SERVER_MT);
  if (s->d) { /* jobs the engine never finished: their connections get an end */
    pthread_mutex_lock(&s->mu);
    lua_getiuservalue(L, 1, 1);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      job *j = lua_touserdata(L, -1);
      if (j->status == 0) j->status = 500;
      j->done = true;
      pthread_cond_broadcast(&j->cv);
      job_unref(s, j);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    pthread_mutex_unlock(&s->mu);
    stop_daemon(s);
  }
  return 0;
}

/* srv:next(timeout_ms): the requests that arrived, {id, method, path, body} each
   (waits up to timeout_ms for the first) */
static int srv_next(lua_State *L) {
  server *s = check_server(L);
  lua_Integer ms = luaL_optinteger(L, 2, 0);
  lua_getiuservalue(L, 1, 1);
  int jobs = lua_gettop(L);
  lua_newtable(L);
  pthread_mutex_lock(&s->mu);
  if (!s->head && ms > 0) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &t);
  }
  job *list = s->head;
  s->head = s->tail = NULL;
  pthread_mutex_unlock(&s->mu);
  int k = 0;
  for (job *j = list; j; j = j->next) {
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, j->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, j->method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, j->path);
    lua_setfield(L, -2, "path");
    lua_pushlstring(L, j->body ? j->body : "", j->body_n);
    lua_setfield(L, -2, "body");
    lua_rawseti(L, -2, ++k);
    lua_pushlightuserdata(L, j);
    lua_rawseti(L, jobs, j->id);
  }
  return 1;
}

static void put_out(server *s, job *j, const char *p, size_t n) { /* with s->mu held */
  (void)s;
  if (j->out_n + n > j->out_cap) {
    size_t cap = (j->out_n + n) * 2 + 256;
    char *b = realloc(j->out, cap);
    if (!b) return; /* dropped; the client sees a short answer */
    j->out = b;
    j->out_cap = cap;
  }
  memcpy(j->out + j->out_n, p, n);
  j->out_n += n;
}

/* srv:respond(id, status, text [, content_type [, stream]]): the answer's head
   and first text; a stream stays open for srv:write until srv:finish */
static int srv_respond(lua_State *L) {
  server *s = check_server(L);
  job *j = check_job(L, s);
  lua_Integer status = luaL_checkinteger(L, 3);
  size_t n;
  const char *text = luaL_checklstring(L, 4, &n);
  const char *ctype = luaL_optstring(L, 5, "application/json");
  bool stream = lua_toboolean(L, 6);
  luaL_argcheck(L, status >= 100 && status <= 599, 3, "an HTTP status");
  char *ct = strdup(ctype);
  if (!ct) return luaL_error(L, "http server: out of memory");
  pthread_mutex_lock(&s->mu);
  if (j->status) {
    pthread_mutex_unlock(&s->mu);
    free(ct);
    return luaL_error(L, "http server: request %d already answered", (int)j->id);
  }
  j->status = (int)status;
  j->ctype = ct;
  j->stream = stream;
  put_out(s, j, text, n);
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int srv_write(lua_State *L) {
  server *s = check_server(L);
  job *j = check_job(L, s);
  size_t n;
  const char *text = luaL_checklstring(L, 3, &n);
  pthread_mutex_lock(&s->mu);
  put_out(s, j, text, n);
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* srv:finish(id): the answer is complete; the engine lets go of the request */
static int srv_finish(lua_State *L) {
  server *s = check_server(L);
  job *j = check_job(L, s);
  pthread_mutex_lock(&s->mu);
  if (!j->status) j->status = 500;
  j->done = true;
  if (j->taken) s->inflight--;
  pthread_cond_broadcast(&j->cv);
  job_unref(s, j);
  pthread_mutex_unlock(&s->mu);
  lua_getiuservalue(L, 1, 1);
  lua_pushnil(L);
  lua_rawseti(L, -2, luaL_checkinteger(L, 2));
  return 0;
}

/* srv:stopping(): the host's stop flag is set */
static int srv_stopping(lua_State *L) {
  server *s = check_server(L);
  lua_pushboolean(L, s->stop && *s->stop);
  return 1;
}

/* srv:close([wait_ms]): stop accepting, wait until every answer is delivered
   (or wait_ms passed), stop the daemon */
static int srv_close(lua_State *L) {
  server *s = luaL_checkudata(L, 1, SERVER_MT);
  if (!s->d) return 0;
  lua_Integer ms = luaL_optinteger(L, 2, 30000);
  pthread_mutex_lock(&s->mu);
  s->quiesced = true;
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  int rc = 0;
  lua_getiuservalue(L, 1, 1);
  int open = 0;
  lua_pushnil(L);
  while (lua_next(L, -2)) open++, lua_pop(L, 1);
  lua_pop(L, 1);
  while (s->live > open && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cv, &s->mu, &t);
  pthread_mutex_unlock(&s->mu);
  srv_gc(L);
  return 0;
}

/* zorch._http_server{host =, port =, max_body =, queue =, stop = lightuserdata}:
   a server listening now (port 0: a free one; srv.port says which) */
static int l_http_server(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "host");
  const char *host = luaL_optstring(L, -1, "127.0.0.1");
  lua_getfield(L, 1, "port");
  lua_Integer port = luaL_optinteger(L, -1, 8000);
  lua_getfield(L, 1, "max_body");
  lua_Integer max_body = luaL_optinteger(L, -1, 1 << 20);
  lua_getfield(L, 1, "queue");
  lua_Integer queue = luaL_optinteger(L, -1, 64);
  lua_getfield(L, 1, "stop");
  const volatile sig_atomic_t *stop = lua_touserdata(L, -1);
  if (port < 0 || port > 65535) return luaL_error(L, "zorch._http_server: port must be in [0, 65535], got %d", (int)port);
  if (max_body < 1 || queue < 1) return luaL_error(L, "zorch._http_server: max_body and queue must be >= 1");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
    return luaL_error(L, "zorch._http_server: host must be an IPv4 address, got '%s'", host);
  server *s = lua_newuserdatauv(L, sizeof *s, 1);
  memset(s, 0, sizeof *s);
  lua_newtable(L);
  lua_setiuservalue(L, -2, 1);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->max_body = (size_t)max_body;
  s->queue_max = (int)queue;
  s->stop = stop;
  if (luaL_newmetatable(L, SERVER_MT)) {
    static const luaL_Reg m[] = {{"next", srv_next},         {"respond", srv_respond}, {"write", srv_write},
                                 {"finish", srv_finish},     {"stopping", srv_stopping}, {"close", srv_close},
                                 {NULL, NULL}};
    luaL_newlib(L, m);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, srv_gc);
    lua_setfield(L, -2, "__gc");
    lz_protect_metatable(L);
  }
  lua_setmetatable(L, -2);
  s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                          NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
                          on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
  if (!s->d) return luaL_error(L, "zorch._http_server: cannot listen on %s:%d (%s)", host, (int)port, strerror(errno));
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  lua_pushinteger(L, di ? di->port : port);
  return 2;
}
#else
static int l_http_server(lua_State *L) {
  return luaL_error(L, "zorch serve: this zorch was built without libmicrohttpd: apt-get install libmicrohttpd-dev "
                       "(scripts/deps.sh), then rebuild");
}
#endif

void lz_open_http(lua_State *L) {
  lua_pushcfunction(L, l_http_server);
  lua_setfield(L, -2, "_http_server");
}
