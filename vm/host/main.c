/* main.c: the zorch command: run a script, a chunk (-e), print build
   information (info), or start the interactive REPL. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#ifdef ZORCH_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#else
/* Built without GNU readline: plain lines, no editing or history. */
static char *readline(const char *prompt) {
  static char buf[1 << 16];
  fputs(prompt, stdout);
  fflush(stdout);
  if (!fgets(buf, sizeof buf, stdin)) return NULL;
  buf[strcspn(buf, "\n")] = 0;
  return strdup(buf);
}
static void add_history(const char *line) { (void)line; }
static int read_history(const char *path) { return (void)path, 0; }
static int write_history(const char *path) { return (void)path, 0; }
#endif

#include "zorch.h"

#ifdef ZORCH_MPI
#define ZORCH_HAVE_MPI 1
#else
#define ZORCH_HAVE_MPI 0
#endif
#ifdef ZORCH_WITH_CUDA
#define ZORCH_HAVE_NCCL 1
#else
#define ZORCH_HAVE_NCCL 0
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

static int traceback(lua_State *L) {
  if (luaL_getmetafield(L, 1, "__name") == LUA_TSTRING && strcmp(lua_tostring(L, -1), "zorch.UsageError") == 0) {
    lua_getfield(L, 1, "status");
    usage_status = (int)luaL_optinteger(L, -1, 2);
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
      const char *rank = getenv("OMPI_COMM_WORLD_RANK");
      if (!rank) rank = getenv("PMIX_RANK");
      if (!rank) rank = getenv("SLURM_PROCID");
      fprintf(stderr, "zorch: rank %s failed on %s (pid %d): %s\n", rank ? rank : "?", host, (int)getpid(),
              lua_tostring(L, -1));
    } else if (usage_status == 0) {
      printf("%s\n", lua_tostring(L, -1));
    } else {
      fprintf(stderr, "zorch: %s\n", lua_tostring(L, -1));
    }
    fflush(stderr);
    lua_pop(L, 1);
    /* one failing rank ends them all: the others would wait in a collective */
    if (world > 1 && !in_repl && usage_status != 0) zorch_dist_abort(1);
    if (in_repl) usage_status = -1;
  }
  return st;
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

/* zorch launch [-n N] [mpirun options] script.lua args: the script on N ranks
   through mpirun; options before the script (--hostfile, -H, ...) go to mpirun. */
static int launch(int argc, char **argv) {
  const char *n = "1";
  int first = 2, script = -1;
  for (int i = 2; i < argc; i++) {
    size_t len = strlen(argv[i]);
    if (len > 4 && strcmp(argv[i] + len - 4, ".lua") == 0) {
      script = i;
      break;
    }
  }
  if (script < 0) {
    fprintf(stderr, "zorch launch: no script.lua given\nusage: zorch launch -n N [mpirun options] script.lua [args]\n");
    return 2;
  }
  char **av = calloc((size_t)argc + 16, sizeof *av);
  if (!av) return 1;
  int k = 0;
  av[k++] = "mpirun";
  if (geteuid() == 0) av[k++] = "--allow-run-as-root";
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
    av[k++] = argv[i];
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (atol(n) > cores) av[k++] = "--oversubscribe";
  av[k++] = "-n";
  av[k++] = (char *)n;
  av[k++] = "-x";
  av[k++] = "OMP_NUM_THREADS";
  static char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = 0;
  av[k++] = self;
  for (int i = script; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  /* ranks share the cores: an equal part each unless asked otherwise */
  char threads[24];
  long per = cores / (atol(n) > 0 ? atol(n) : 1);
  snprintf(threads, sizeof threads, "%ld", per > 0 ? per : 1);
  setenv("OMP_NUM_THREADS", threads, 0);
  execvp("mpirun", av);
  fprintf(stderr, "zorch launch: cannot run mpirun: %s (install openmpi-bin)\n", strerror(errno));
  return 127;
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
  return 0;
}

static void print_info(void) {
  printf("zorch %s\n", ZORCH_VERSION);
  printf("  blas:     %s\n", zorch_blas_info());
  printf("  threads:  %d\n", zorch_get_num_threads());
  int ngpu = 0;
  while (ngpu < 64 && zorch_device_available((zorch_device){ZORCH_CUDA, ngpu})) ngpu++;
#ifdef ZORCH_WITH_CUDA
  printf("  backends: cpu, cuda\n");
  printf("  cuda:     built (cuBLASLt, TF32 %s), %d device%s\n", zorch_cuda_tf32() ? "on" : "off", ngpu,
         ngpu == 1 ? "" : "s");
#else
  printf("  backends: cpu\n");
  printf("  cuda:     not built (no nvcc at build time, or make CUDA=0)\n");
#endif
  printf("  nccl:     %s\n", ZORCH_HAVE_NCCL ? "built (ZeRO collectives of cuda tensors)" : "not built");
  printf("  mpi:      %s\n", ZORCH_HAVE_MPI ? "Open MPI (zorch launch)" : "not built");
  printf("  devices:  cpu");
  for (int i = 0; i < ngpu; i++) printf(", cuda:%d", i);
  printf("\n");
  printf("  lua:      %s\n", LUA_RELEASE);
}

/* ---- the REPL ------------------------------------------------------------------- */
static char *read_line(const char *prompt, bool tty) {
  if (tty) return readline(prompt);
  static char buf[1 << 16];
  if (!fgets(buf, sizeof buf, stdin)) return NULL;
  buf[strcspn(buf, "\n")] = 0;
  return strdup(buf);
}

/* Compiles `return <line>` first, so expressions print; otherwise the line as
   a statement, reading more lines while the error is an unfinished chunk. */
static int load_input(lua_State *L, char *first, bool tty) {
  const char *ret = lua_pushfstring(L, "return %s;", first);
  if (luaL_loadbuffer(L, ret, strlen(ret), "=stdin") == LUA_OK) {
    lua_remove(L, -2);
    if (tty && *first) add_history(first);
    free(first);
    return LUA_OK;
  }
  lua_pop(L, 2);
  char *text = first;
  for (;;) {
    int st = luaL_loadbuffer(L, text, strlen(text), "=stdin");
    if (st != LUA_ERRSYNTAX) break;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    if (len < 5 || strcmp(msg + len - 5, "<eof>") != 0) break;
    lua_pop(L, 1);
    char *more = read_line(">> ", tty);
    if (!more) break;
    size_t n = strlen(text) + strlen(more) + 2;
    char *joined = malloc(n);
    if (!joined) {
      free(more);
      break;
    }
    snprintf(joined, n, "%s\n%s", text, more);
    free(more);
    free(text);
    text = joined;
  }
  if (tty && *text) add_history(text);
  free(text);
  return lua_isfunction(L, -1) ? LUA_OK : LUA_ERRSYNTAX;
}

static void print_results(lua_State *L) {
  int n = lua_gettop(L);
  if (n == 0) return;
  for (int i = 1; i <= n; i++) {
    printf(i > 1 ? "\t%s" : "%s", luaL_tolstring(L, i, NULL));
    lua_pop(L, 1);
  }
  printf("\n");
  fflush(stdout);
  lua_settop(L, 0);
}

static void repl(lua_State *L) {
  bool tty = isatty(0);
  char hist[1024] = "";
  if (tty) {
    printf("zorch %s (Lua %s); Ctrl-D exits, Ctrl-C interrupts a running chunk\n", ZORCH_VERSION, LUA_VERSION_MAJOR "." LUA_VERSION_MINOR);
    const char *home = getenv("HOME");
    if (home) {
      snprintf(hist, sizeof hist, "%s/.zorch_history", home);
      read_history(hist);
    }
  }
  char *line;
  while ((line = read_line("> ", tty)) != NULL) {
    lua_settop(L, 0);
    int st = load_input(L, line, tty);
    if (st == LUA_OK) st = docall(L, 0, LUA_MULTRET);
    if (st == LUA_OK) print_results(L);
    else report(L, st);
    lua_settop(L, 0);
  }
  if (tty) {
    printf("\n");
    if (*hist) write_history(hist);
  }
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

static void usage(void) {
  fprintf(stderr,
          "usage: zorch [script.lua [args...]]   run a script (no script: the REPL)\n"
          "       zorch -e 'chunk' [args...]      run a chunk of Lua\n"
          "       zorch launch -n N [--config ds_config.json] [mpirun options] script.lua [args...]\n"
          "       zorch consolidate DIR out.safetensors [float32|bfloat16]\n"
          "       zorch plot metrics.jsonl [-o loss.png] [--y loss,lr] [--x step]   draw logged metrics\n"
          "       zorch info                      build features, BLAS kernel, threads, devices\n"
          "       zorch --version\n");
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
    printf("zorch %s\n", ZORCH_VERSION);
    return 0;
  }
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "launch") == 0) return launch(argc, argv);
  if (argc > 1 && strcmp(argv[1], "info") == 0) {
    print_info();
    return 0;
  }
  zorch_set_hang_handler(on_hang, NULL);
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "zorch: cannot create a Lua state\n");
    return 1;
  }
  lua_pushcfunction(L, open_all);
  if (report(L, docall(L, 0, 0))) return 1;
  int st = LUA_OK;
  if (argc > 1 && strcmp(argv[1], "consolidate") == 0) {
    static const char chunk[] =
        "local zorch = require 'zorch'\n"
        "local n = debug.getregistry()[\"zorch.private\"]._consolidate(...)\n"
        "print(('consolidated %d parameters into %s'):format(n, select(2, ...)))\n";
    make_args(L, argv, argc, 1);
    st = luaL_loadbuffer(L, chunk, sizeof chunk - 1, "=consolidate");
    if (st == LUA_OK) {
      for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
      st = docall(L, argc - 2, 0);
    }
    report(L, st);
  } else if (argc > 1 && strcmp(argv[1], "plot") == 0) {
    static const char chunk[] =
        "require('zorch')\n"
        "local ok, msg = debug.getregistry()[\"zorch.private\"]._plot_cli(...)\n"
        "if not ok then io.stderr:write(msg, '\\n'); os.exit(2, true) end\n";
    make_args(L, argv, argc, 1);
    st = luaL_loadbuffer(L, chunk, sizeof chunk - 1, "=plot");
    if (st == LUA_OK) {
      for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
      st = docall(L, argc - 2, 0);
    }
    report(L, st);
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
    repl(L);
  }
  lua_close(L);
  if (usage_status >= 0 && !in_repl) return usage_status;
  return st == LUA_OK ? 0 : 1;
}
