/* main.c: the zorch command: run a script, a chunk (-e), print build
   information (info), or start the interactive REPL. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lua/lz.h"
#include "lalloc.h"
#include "repl.h"
#include "zorch.h"
#include "zorch_tokenizer.h"

#ifdef ZORCH_MPI
#define ZORCH_HAVE_MPI 1
#else
#define ZORCH_HAVE_MPI 0
#endif

static lua_State *globalL;

/* Ctrl-C while Lua runs: a hook raises an error at the next instruction (setting
   a hook is the one thing Lua allows from a signal handler). */
static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted");
}
static void on_sigint(int sig) {
  signal(sig, SIG_DFL);
  lua_sethook(globalL, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* A zorch.UsageError (a bad command line, or --help) is its message alone, with
   no traceback; the command exits with its status (2, or 0 after --help). */
static int usage_status = -1;
/* A usage error with every_rank set is raised alike by every rank (a bad config
   file): rank 0 prints it, and the ranks exit with its status without an abort. */
static bool usage_every_rank;

static int traceback(lua_State *L) {
  if (luaL_getmetafield(L, 1, "__name") == LUA_TSTRING && strcmp(lua_tostring(L, -1), "zorch.UsageError") == 0) {
    lua_getfield(L, 1, "status");
    usage_status = (int)luaL_optinteger(L, -1, 2);
    lua_getfield(L, 1, "every_rank");
    usage_every_rank = lua_toboolean(L, -1);
    luaL_tolstring(L, 1, NULL);
    return 1;
  }
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Calls the function below nargs arguments, with a traceback and Ctrl-C. */
static int docall(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  globalL = L;
  signal(SIGINT, on_sigint);
  int st = lua_pcall(L, nargs, nres, base);
  signal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  return st;
}

static bool in_repl;

static int report(lua_State *L, int st) {
  if (st != LUA_OK) {
    int world = zorch_dist_world();
    if (world > 1 && usage_status < 0) {
      char host[64] = "";
      gethostname(host, sizeof host - 1);
      char rank[16] = "?";
      if (zorch_dist_rank() >= 0) snprintf(rank, sizeof rank, "%d", zorch_dist_rank());
      fprintf(stderr, "zorch: rank %s failed on %s (pid %d): %s\n", rank, host, (int)getpid(), lua_tostring(L, -1));
    } else if (usage_status == 0) {
      printf("%s\n", lua_tostring(L, -1));
    } else if (world > 1 && usage_every_rank) {
      if (zorch_dist_rank() <= 0) fprintf(stderr, "zorch: %s\n", lua_tostring(L, -1));
    } else {
      fprintf(stderr, "zorch: %s\n", lua_tostring(L, -1));
    }
    fflush(stderr);
    lua_pop(L, 1);
    /* one failing rank ends them all: the others would wait in a collective;
       a usage error keeps its status through mpirun */
    if (world > 1 && !in_repl && usage_status != 0 && !usage_every_rank) zorch_dist_abort(usage_status > 0 ? usage_status : 1);
    if (in_repl) usage_status = -1, usage_every_rank = false;
  }
  return st;
}

/* An error outside any protected call (none is expected: everything runs
   under docall); Lua aborts after this returns. */
static int on_panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "zorch: unprotected Lua error: %s\n", msg ? msg : "(not a string)");
  return 0;
}

/* warn() as the stand-alone lua prints it: off until "@on", pieces of one
   message joined, one "Lua warning: " line per message. */
static void on_warn(void *ud, const char *msg, int tocont) {
  static bool on, cont;
  (void)ud;
  if (!cont && msg[0] == '@') {
    if (strcmp(msg, "@on") == 0) on = true;
    else if (strcmp(msg, "@off") == 0) on = false;
    return;
  }
  if (on) fprintf(stderr, "%s%s%s", cont ? "" : "Lua warning: ", msg, tocont ? "" : "\n");
  cont = tocont != 0;
}

/* A collective that timed out ends the job, naming the rank and the collective:
   the launcher ends the other ranks when one exits with an error. */
static void on_hang(const char *msg, void *ud) {
  (void)ud;
  fprintf(stderr, "zorch: %s; ending the job\n", msg);
  fflush(stderr);
  zorch_dist_abort(3);
  _exit(3);
}

/* ---- elastic jobs: zorch launch --max-restarts K [--min-ranks M] --------------- */

/* The path of this executable (mpirun starts it on every rank). */
static const char *self_path(void) {
  static char self[4096];
  if (!self[0]) {
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return NULL;
    self[sl] = 0;
  }
  return self;
}

static pid_t rank_child;
static void forward_signal(int sig) {
  if (rank_child > 0) {
    kill(rank_child, sig);
    kill(rank_child, SIGCONT); /* a stopped rank acts on it too */
  }
}

/* zorch launch --elastic-rank DIR script.lua args: one rank of a job (every
   job's ranks run under it). The script runs in a child process; when it
   fails, DIR/rank<r> gets the wall-clock time and how it ended, so that the
   launcher names the rank that failed first (mpirun ends the others after
   it), a rank killed by a signal too. */
static int elastic_rank(int argc, char **argv) {
  if (argc < 5) return 2;
  const char *dir = argv[3], *self = self_path();
  if (!self) return 1;
  rank_child = fork();
  if (rank_child < 0) return 1;
  if (rank_child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* mpirun may kill this wrapper outright */
    argv[3] = (char *)self;
    execv(self, argv + 3);
    _exit(127);
  }
  signal(SIGTERM, forward_signal);
  signal(SIGINT, forward_signal);
  signal(SIGHUP, forward_signal);
  int status = 0;
  while (waitpid(rank_child, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMIX_RANK");
  char path[4200];
  snprintf(path, sizeof path, "%s/rank%s", dir, rank ? rank : "?");
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%lld.%09ld %s %d\n", (long long)now.tv_sec, now.tv_nsec, WIFSIGNALED(status) ? "signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    fclose(f);
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* The rank that failed first in the last attempt, from the ranks' records:
   its rank (-1 when none wrote one), and how it ended into *how / *code. */
static int first_failure(const char *dir, int world, char *how, int *code) {
  int first = -1;
  double best = 0;
  for (int r = 0; r < world; r++) {
    char path[4200], kind[16];
    snprintf(path, sizeof path, "%s/rank%d", dir, r);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    double t;
    int c;
    if (fscanf(f, "%lf %15s %d", &t, kind, &c) == 3 && (first < 0 || t < best)) {
      first = r, best = t, *code = c;
      snprintf(how, 16, "%s", kind);
    }
    fclose(f);
    remove(path);
  }
  return first;
}

static volatile sig_atomic_t launch_interrupted;
static volatile pid_t launch_mpirun;
/* Ctrl-C reaches mpirun from the terminal itself; a SIGTERM sent to the
   launcher alone is passed on, so mpirun ends the ranks. */
static void on_launch_signal(int sig) {
  launch_interrupted = 1;
  if (sig != SIGINT && launch_mpirun > 0) kill(launch_mpirun, sig);
}

/* The world size after two failures at `world`: the largest divisor of the
   first world size up to half of `world`, so the first launch's global batch
   still splits evenly over the ranks (a script keeps it by accumulating
   more), and never below min_ranks (which wins when no divisor fits). */
static int shrunk_world(int first, int world, int min_ranks) {
  for (int w = world / 2; w >= min_ranks && w >= 1; w--)
    if (first % w == 0) return w;
  return min_ranks;
}

/* Runs mpirun (av, whose rank count is written into nbuf) until the job
   succeeds or the restarts run out (none with max_restarts 0: a job that
   fails is only reported, naming the rank that failed first). Policy: a failed job restarts at the same
   world size; a second failure in a row at one world size goes to at most
   half the ranks (shrunk_world), never below min_ranks. Each rank sees ZORCH_ELASTIC_RESTART (0, 1, ...) and
   ZORCH_ELASTIC_WORLD (the first world size), and resumes from its latest
   checkpoint on a restart. */
static int elastic_launch(char **av, char *nbuf, size_t ncap, int world, int max_restarts, int min_ranks,
                          const char *dir) {
  int fails_here = 0, rc = 1;
  char wbuf[24];
  snprintf(wbuf, sizeof wbuf, "%d", world);
  if (max_restarts > 0) setenv("ZORCH_ELASTIC_WORLD", wbuf, 1);
  signal(SIGINT, on_launch_signal);
  signal(SIGTERM, on_launch_signal);
  signal(SIGHUP, on_launch_signal);
  for (int restart = 0;; restart++) {
    char rbuf[24];
    snprintf(rbuf, sizeof rbuf, "%d", restart);
    if (max_restarts > 0) setenv("ZORCH_ELASTIC_RESTART", rbuf, 1);
    snprintf(nbuf, ncap, "%d", world);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      execvp("mpirun", av);
      fprintf(stderr, "zorch launch: cannot run mpirun: %s (install openmpi-bin)\n", strerror(errno));
      _exit(127);
    }
    launch_mpirun = pid;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    launch_mpirun = 0;
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc == 0 || rc == 127 || launch_interrupted) break;
    char how[16] = "";
    int code = 0, culprit = first_failure(dir, world, how, &code);
    char what[96];
    if (culprit < 0)
      snprintf(what, sizeof what, "the job failed (mpirun exit status %d)", rc);
    else if (strcmp(how, "signal") == 0)
      snprintf(what, sizeof what, "rank %d was killed by signal %d (%s)", culprit, code, strsignal(code));
    else
      snprintf(what, sizeof what, "rank %d exited with code %d", culprit, code);
    if (max_restarts == 0) {
      /* a rank that failed in Lua printed why; one killed by a signal printed nothing */
      if (culprit < 0 || strcmp(how, "signal") == 0) fprintf(stderr, "zorch launch: %s\n", what);
      break;
    }
    if (culprit >= 0 && strcmp(how, "exit") == 0 && code == 2) {
      fprintf(stderr, "zorch launch: %s, a usage error: not restarting\n", what);
      break;
    }
    if (restart >= max_restarts) {
      fprintf(stderr, "zorch launch: %s; no restarts left (%d of %d used)\n", what, restart, max_restarts);
      break;
    }
    int before = world;
    if (++fails_here >= 2 && world > min_ranks) {
      world = shrunk_world(atoi(wbuf), world, min_ranks);
      fails_here = 0;
    }
    fprintf(stderr, "zorch launch: %s; restart %d of %d with %d ranks%s, from the latest checkpoint\n", what,
            restart + 1, max_restarts, world, world < before ? " (it failed twice at that size)" : "");
    fflush(stderr);
  }
  return launch_interrupted ? 130 : rc;
}

/* zorch launch [-n N] [--max-restarts K [--min-ranks M]] [mpirun options]
   script.lua args: the script on N ranks through mpirun; options before the
   script (--hostfile, -H, ...) go to mpirun. */
static int launch(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[2], "--elastic-rank") == 0) return elastic_rank(argc, argv);
  const char *n = "1";
  int first = 2, script = -1, max_restarts = 0, min_ranks = 1;
  for (int i = 2; i < argc; i++) {
    size_t len = strlen(argv[i]);
    if (len > 4 && strcmp(argv[i] + len - 4, ".lua") == 0) {
      script = i;
      break;
    }
  }
  if (script < 0) {
    fprintf(stderr, "zorch launch: no script.lua given\nusage: zorch launch -n N [--max-restarts K [--min-ranks M]] [mpirun options] "
            "script.lua [args]\n");
    return 2;
  }
  char **av = calloc((size_t)argc + 20, sizeof *av);
  if (!av) return 1;
  int k = 0;
  av[k++] = "mpirun";
  if (geteuid() == 0) av[k++] = "--allow-run-as-root";
  /* zorch names the failing rank and why itself: mpirun's own notes on a
     non-zero exit would repeat it in paragraphs of noise */
  av[k++] = "--quiet";
  for (int i = first; i < script; i++) {
    if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "-np") == 0 || strcmp(argv[i], "--np") == 0) && i + 1 < script) {
      n = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--config") == 0 && i + 1 < script) { /* a DeepSpeed config for every rank */
      setenv("ZORCH_CONFIG", argv[++i], 1);
      av[k++] = "-x";
      av[k++] = "ZORCH_CONFIG";
      continue;
    }
    if ((strcmp(argv[i], "--max-restarts") == 0 || strcmp(argv[i], "--min-ranks") == 0) && i + 1 < script) {
      bool restarts = strcmp(argv[i], "--max-restarts") == 0;
      int v = atoi(argv[i + 1]);
      if (v < (restarts ? 0 : 1)) {
        fprintf(stderr, "zorch launch: %s takes an integer >= %d, got %s\n", argv[i], restarts ? 0 : 1, argv[i + 1]);
        free(av);
        return 2;
      }
      if (restarts) max_restarts = v;
      else min_ranks = v;
      i++;
      continue;
    }
    av[k++] = argv[i];
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (atol(n) > cores) av[k++] = "--oversubscribe";
  static char nbuf[24];
  snprintf(nbuf, sizeof nbuf, "%s", n);
  av[k++] = "-n";
  av[k++] = nbuf;
  av[k++] = "-x";
  av[k++] = "OMP_NUM_THREADS";
  const char *self = self_path();
  if (!self) {
    free(av);
    return 1;
  }
  av[k++] = (char *)self;
  /* every rank runs under the wrapper that records how it ended: a rank killed
     by a signal prints nothing itself, and mpirun (--quiet) does not either */
  char dir[] = "/tmp/zorch-ranks-XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "zorch launch: cannot make a folder for the ranks' exit records: %s\n", strerror(errno));
    free(av);
    return 1;
  }
  av[k++] = "launch";
  av[k++] = "--elastic-rank";
  av[k++] = dir;
  if (max_restarts > 0) {
    const char *env[] = {"-x", "ZORCH_ELASTIC_RESTART", "-x", "ZORCH_ELASTIC_WORLD"};
    memmove(av + 5, av + 1, (size_t)(k - 1) * sizeof *av); /* after "mpirun" */
    memcpy(av + 1, env, sizeof env);
    k += 4;
  }
  for (int i = script; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  /* ranks share the cores: an equal part each unless asked otherwise */
  char threads[24];
  long per = cores / (atol(n) > 0 ? atol(n) : 1);
  snprintf(threads, sizeof threads, "%ld", per > 0 ? per : 1);
  setenv("OMP_NUM_THREADS", threads, 0);
  if (min_ranks > atoi(n)) min_ranks = atoi(n);
  int rc = elastic_launch(av, nbuf, sizeof nbuf, atoi(n), max_restarts, min_ranks, dir);
  first_failure(dir, atoi(n), (char[16]){0}, &(int){0}); /* (removes the records left) */
  rmdir(dir);
  free(av);
  return rc;
}

static int open_all(lua_State *L) {
  luaL_openlibs(L);
  luaL_requiref(L, "zorch", luaopen_zorch, 1);
  lua_pop(L, 1);
  /* `require "zorch"` finds the built-in module */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getglobal(L, "zorch");
  lua_setfield(L, -2, "zorch");
  lua_pop(L, 1);
  help_open(L);
  return 0;
}

static void print_info(void) {
  printf("zorch %s\n", ZORCH_VERSION);
  printf("  blas:     %s\n", zorch_blas_info());
  printf("  threads:  %d\n", zorch_get_num_threads());
  int ngpu = 0;
  while (ngpu < 64 && zorch_device_available((zorch_device){ZORCH_CUDA, ngpu})) ngpu++;
  /* the probe above opened the CUDA module, where this build has one */
  const char *cuda = zorch_cuda_info();
  printf("  backends: %s\n", strncmp(cuda, "module /", 8) == 0 ? "cpu, cuda" : "cpu");
  if (zorch_cuda_built())
    printf("  cuda:     %s; TF32 %s\n", cuda, zorch_cuda_tf32() ? "on" : "off");
  else
    printf("  cuda:     %s\n", cuda);
  printf("  mpi:      %s\n", ZORCH_HAVE_MPI ? "Open MPI (zorch launch)" : "not built");
  printf("  devices:  cpu");
  for (int i = 0; i < ngpu; i++) printf(", cuda:%d", i);
  printf("\n");
  printf("  lua:      %s\n", LUA_RELEASE);
}

/* arg table as lua.c makes it: arg[0] the script, arg[1..] its arguments */
static void make_args(lua_State *L, char **argv, int argc, int script) {
  lua_createtable(L, argc - script - 1, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* zorch tokenize --tokenizer FILE INPUT -o OUT [--add-special] [--special all|none]:
   INPUT's ids into an llm.c token file (header, then uint16 ids, or uint32
   when the vocabulary exceeds 65,535). */
static int tokenize(int argc, char **argv) {
  const char *tok = NULL, *in = NULL, *out = NULL;
  zorch_encode_opts o = {false, ZORCH_SPECIAL_DEFAULT, NULL, 0};
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) tok = argv[++i];
    else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
    else if (strcmp(argv[i], "--add-special") == 0) o.add_special = true;
    else if (strcmp(argv[i], "--special") == 0 && i + 1 < argc && (strcmp(argv[i + 1], "all") == 0 || strcmp(argv[i + 1], "none") == 0))
      o.special = strcmp(argv[++i], "all") == 0 ? ZORCH_SPECIAL_ALL : ZORCH_SPECIAL_NONE;
    else if (argv[i][0] != '-' && !in) in = argv[i];
    else {
      fprintf(stderr, "zorch tokenize: unexpected argument %s\n", argv[i]);
      in = NULL;
      break;
    }
  }
  if (!tok || !in || !out) {
    fprintf(stderr, "usage: zorch tokenize --tokenizer FILE INPUT.txt -o OUT.bin [--add-special] [--special all|none]\n");
    return 2;
  }
  zorch_tokenizer *t;
  size_t n;
  if (zorch_tokenizer_load(tok, &t) || zorch_tokenizer_encode_file(t, in, out, &o, &n)) {
    fprintf(stderr, "zorch tokenize: %s\n", zorch_last_error());
    zorch_tokenizer_free(t);
    return 1;
  }
  printf("zorch tokenize: %zu tokens (%s) to %s\n", n, zorch_tokenizer_vocab_size(t) > 65536 ? "uint32" : "uint16", out);
  zorch_tokenizer_free(t);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: zorch [script.lua [args...]]   run a script (no script: the REPL)\n"
          "       zorch -e 'chunk' [args...]      run a chunk of Lua\n"
          "       zorch -i [script.lua [args...]] run a script, then the REPL with its globals\n"
          "       zorch launch -n N [--config ds_config.json] [mpirun options] script.lua [args...]\n"
          "       zorch consolidate DIR out.safetensors [float32|bfloat16]\n"
          "       zorch plot metrics.jsonl [-o loss.png] [--y loss,lr] [--x step]   draw logged metrics\n"
          "       zorch serve MODEL_DIR [--host H] [--port P] [--queue N] ...   an OpenAI-compatible HTTP server\n"
          "       zorch generate MODEL_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--seed S] [--chat]\n"
          "                                       a completion, printed as it is generated\n"
          "       zorch tokenize --tokenizer FILE INPUT.txt -o OUT.bin [--add-special] [--special all|none]\n"
          "                                       an llm.c token file of a text file\n"
          "       zorch info                      build features, BLAS kernel, threads, devices\n"
          "       zorch --version\n");
}

/* Runs a subcommand's chunk (`zorch NAME args...`) with the arguments after
   NAME, which `arg` holds too; reports an error. Returns the Lua status. */
/* Runs chunk with zorch's helper `helper` (lz_push_private) and the
   subcommand's arguments as its varargs. */
static int push_helper(lua_State *L) {
  lz_push_private(L, lua_tostring(L, 1));
  return 1;
}
static int run_subcommand(lua_State *L, const char *name, int argc, char **argv, const char *helper,
                          const char *chunk) {
  make_args(L, argv, argc, 1);
  int st = luaL_loadbuffer(L, chunk, strlen(chunk), name);
  if (st == LUA_OK) {
    lua_pushcfunction(L, push_helper);
    lua_pushstring(L, helper);
    st = lua_pcall(L, 1, 1, 0);
    if (st != LUA_OK) lua_remove(L, -2); /* the chunk; the message stays for report */
  }
  if (st == LUA_OK) {
    for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    st = docall(L, argc - 1, 0);
  }
  report(L, st);
  return st;
}

/* `zorch serve`: SIGTERM and SIGINT set a flag the server's loop reads
   (zorch._serve_cli's first argument); it stops taking requests, finishes
   those in flight and returns. */
static volatile sig_atomic_t serve_stop;
static void on_stop_signal(int sig) {
  (void)sig;
  serve_stop = 1;
}
static int serve(lua_State *L, int argc, char **argv) {
  struct sigaction sa = {.sa_handler = on_stop_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer is an error of that write only */
  make_args(L, argv, argc, 1);
  lz_push_private(L, "_serve_cli");
  lua_pushlightuserdata(L, (void *)&serve_stop);
  for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
  int st = docall(L, argc - 1, 0);
  report(L, st);
  return st;
}

/* ---- OpenMP's wait policy -------------------------------------------------------------
   libgomp reads OMP_WAIT_POLICY once, when it loads, before main; by default its
   idle threads spin after each parallel region, and on a small shared machine a
   spinning thread takes the core another thread (or process) needs: a parallel
   region cost 45 ms that way. The zorch command therefore starts with
   OMP_WAIT_POLICY=PASSIVE unless the user set it. A setenv in main comes too
   late, and one in a preinit function is lost when libc sets up `environ`
   from the original array, so the entry goes into that array itself: it takes
   the slot of the shell's `_`, or else of the last variable that no library
   reads while loading, and main puts that variable back (docs/performance.md, "Threads"). */
extern char **environ;
static char *wait_displaced; /* the variable whose slot holds the policy, or NULL */

static bool wait_slot_ok(const char *e) {
  static const char *const keep[] = {"OMP_", "GOMP_", "KMP_", "LD_", "OPENBLAS_", "MKL_",
                                     "DNNL_", "ONEDNN_", "ZORCH_", "OMPI_", "PMIX_", "MALLOC_",
                                     "GLIBC_", "CUDA_", "NCCL_", "LUA_"};
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
    if (strncmp(e, keep[i], strlen(keep[i])) == 0) return false;
  return strchr(e, '=') != NULL;
}

static void wait_policy_early(int argc, char **argv, char **envp) {
  (void)argc, (void)argv;
  static char passive[] = "OMP_WAIT_POLICY=PASSIVE";
  int n = 0, slot = -1;
  bool underscore = false; /* the shell's "_" (the last command), which nothing reads */
  for (; envp && envp[n]; n++) {
    if (strncmp(envp[n], "OMP_WAIT_POLICY=", 16) == 0) return; /* the user's choice */
    if (underscore || !wait_slot_ok(envp[n])) continue;
    slot = n;
    underscore = strncmp(envp[n], "_=", 2) == 0;
  }
  if (slot < 0) return; /* no free slot: libgomp's default stays */
  wait_displaced = envp[slot];
  envp[slot] = passive;
}
__attribute__((section(".preinit_array"), used)) static void (*const wait_policy_hook)(
    int, char **, char **) = wait_policy_early;

/* The displaced variable back (libraries have loaded; the policy entry stays, so
   ranks and other children inherit it). */
static void wait_policy_restore(void) {
  if (wait_displaced) putenv(wait_displaced);
  wait_displaced = NULL;
}

/* glibc maps a malloc of more than 128 KiB (its default threshold, raised
   only up to 32 MiB) on its own and gives it back on free, so a buffer made
   and dropped every step comes back as fresh pages every step. Open MPI's
   nonblocking reduce-scatter allocates its scratch (twice the bucket) per
   call: at 2 ranks, stage 2, a 16 MiB bucket faulted 8,200 pages a step
   (docs/performance.md, "malloc and MPI's scratch"). The command keeps such
   blocks in the heap: mmap above 256 MiB only, and the heap's free top
   given back above 512 MiB. Not when the user set glibc's malloc variables;
   a host embedding zorch decides for its own process. */
static void malloc_tune(void) {
  const char *t = getenv("GLIBC_TUNABLES");
  if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_") || (t && strstr(t, "glibc.malloc.")))
    return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int main(int argc, char **argv) {
  wait_policy_restore();
  malloc_tune();
  if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
    printf("zorch %s\n", ZORCH_VERSION);
    return 0;
  }
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "launch") == 0) return launch(argc, argv);
  if (argc > 1 && strcmp(argv[1], "tokenize") == 0) return tokenize(argc, argv);
  if (argc > 1 && strcmp(argv[1], "info") == 0) {
    print_info();
    return 0;
  }
  zorch_set_hang_handler(on_hang, NULL);
  static lz_pool pool; /* the state's small blocks (lalloc.c) */
  lua_State *L = lua_newstate(lz_pool_lua_alloc, &pool);
  if (!L) {
    fprintf(stderr, "zorch: cannot create a Lua state\n");
    return 1;
  }
  lua_atpanic(L, on_panic);
  lua_setwarnf(L, on_warn, NULL);
  lua_gc(L, LUA_GCGEN, 0, 0); /* as lua.c does: a script's tensors are mostly short-lived temporaries */
  lua_pushcfunction(L, open_all);
  if (report(L, docall(L, 0, 0))) return 1;
  int st = LUA_OK;
  if (argc > 1 && strcmp(argv[1], "consolidate") == 0) {
    st = run_subcommand(L, "=consolidate", argc, argv, "_consolidate",
                        "local consolidate, dir, out = ...\n"
                        "local n = consolidate(select(2, ...))\n"
                        "print(('consolidated %d parameters into %s'):format(n, out))\n");
  } else if (argc > 1 && strcmp(argv[1], "plot") == 0) {
    st = run_subcommand(L, "=plot", argc, argv, "_plot_cli",
                        "local plot_cli = ...\n"
                        "local ok, msg = plot_cli(select(2, ...))\n"
                        "if not ok then io.stderr:write(msg, '\\n'); os.exit(2, true) end\n");
  } else if (argc > 1 && strcmp(argv[1], "serve") == 0) {
    st = serve(L, argc, argv);
  } else if (argc > 1 && strcmp(argv[1], "generate") == 0) {
    st = run_subcommand(L, "=generate", argc, argv, "_generate_cli", "local generate_cli = ...\ngenerate_cli(select(2, ...))\n");
  } else if (argc > 1 && strcmp(argv[1], "-e") == 0) {
    if (argc < 3) {
      usage();
      lua_close(L);
      return 2;
    }
    make_args(L, argv, argc, 2);
    st = luaL_loadbuffer(L, argv[2], strlen(argv[2]), "=(command line)");
    if (st == LUA_OK) st = docall(L, 0, 0);
    report(L, st);
  } else if (argc > 1 && strcmp(argv[1], "-i") == 0) {
    make_args(L, argv, argc, argc > 2 ? 2 : 0);
    in_repl = true;
    repl_run(L, argc > 2 ? argv[2] : NULL, argc > 3 ? argc - 3 : 0, argc > 2 ? argv + 3 : NULL);
  } else if (argc > 1) {
    make_args(L, argv, argc, 1);
    st = luaL_loadfile(L, argv[1]);
    if (st == LUA_OK) {
      for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
      st = docall(L, argc - 2, 0);
    }
    report(L, st);
  } else {
    make_args(L, argv, argc, 0);
    in_repl = true;
    repl_run(L, NULL, 0, NULL);
  }
  lua_close(L);
  if (usage_status >= 0 && !in_repl) return usage_status;
  return st == LUA_OK ? 0 : 1;
}
