/* repl.c: the zorch command's interactive loop, after lua.c's: each input is
   tried as `return <line>` first so expressions print, and read on while the
   chunk is unfinished. On a terminal, GNU readline edits the line, the history
   file gets every input as it is entered (~/.zorch_history, or
   $ZORCH_HISTORY), and Tab completes globals, fields and methods from the live
   Lua state. Ctrl-C at the prompt abandons the line; while a chunk runs it
   raises "interrupted" in every thread that runs until the chunk has
   returned, so a script's own pcall or coroutines cannot swallow it, and
   stops a long tensor op at its next chunk (zorch_interrupt). Pressing it
   again only interrupts again: it never ends the REPL. Results print in
   protected mode. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#ifdef ZORCH_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

#include "repl.h"
#include "zorch.h"

/* ---- Ctrl-C ---------------------------------------------------------------------- */
static lua_State *repl_L;                   /* the state the signal handler hooks */
static volatile sig_atomic_t repl_running;  /* a chunk runs under repl_call */
static volatile sig_atomic_t repl_stop;     /* Ctrl-C came while it ran: stop it */
static volatile sig_atomic_t repl_cancel;   /* Ctrl-C came at the prompt */

static int repl_traceback(lua_State *L);

/* The hook, on calls and every REPL_EVERY instructions, stays installed in
   every thread (coroutines inherit it when they are made), so a loop without
   calls in a coroutine is seen too. While a stop is pending it raises, and
   tightens its thread to every instruction; after, a tightened thread goes
   back to the light count. The REPL's own message handler is let through:
   an error there would hide the traceback. */
#define REPL_MASK (LUA_MASKCALL | LUA_MASKCOUNT)
#define REPL_EVERY 1000
static void repl_hook(lua_State *L, lua_Debug *ar) {
  if (!repl_stop) {
    if (lua_gethookcount(L) != REPL_EVERY) lua_sethook(L, repl_hook, REPL_MASK, REPL_EVERY);
    return;
  }
  if (ar->event == LUA_HOOKCALL && lua_getinfo(L, "f", ar)) {
    bool ours = lua_tocfunction(L, -1) == repl_traceback;
    lua_pop(L, 1);
    if (ours) return;
  }
  if (lua_gethookcount(L) != 1) lua_sethook(L, repl_hook, REPL_MASK, 1);
  luaL_error(L, "interrupted");
}

/* Every Ctrl-C while a chunk runs is the same request: stop it (a long C
   op at its next chunk, Lua at its next instruction). The handler stays, so
   a second press while an op runs cannot end the process. */
static void repl_on_sigint(int sig) {
  (void)sig;
  if (!repl_running) {
    repl_cancel = 1;
    return;
  }
  repl_stop = 1;
  zorch_interrupt();
  lua_sethook(repl_L, repl_hook, REPL_MASK, 1);
}

/* SIGINT to the REPL's handler, without SA_RESTART: a read at the prompt
   returns EINTR. */
static void repl_catch_sigint(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = repl_on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

static int repl_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Calls the function below nargs arguments in protected mode with a traceback;
   Ctrl-C stops it. Returns the status; the results or the message are pushed. */
static int repl_call(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, repl_traceback);
  lua_insert(L, base);
  repl_stop = 0;
  zorch_interrupt_clear();
  repl_running = 1;
  int st = lua_pcall(L, nargs, nres, base);
  repl_running = 0;
  repl_stop = 0;
  zorch_interrupt_clear();
  lua_sethook(L, repl_hook, REPL_MASK, REPL_EVERY);
  lua_remove(L, base);
  return st;
}

/* Prints the message on top of the stack and pops it. */
static void repl_report(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "zorch: %s\n", msg ? msg : "(error object is not a string)");
  fflush(stderr);
  lua_pop(L, 1);
}

/* Its arguments as print shows them, tab-separated on one line; built first so
   a failing __tostring prints nothing. */
static int repl_print_values(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  fwrite(s, 1, len, stdout);
  fflush(stdout);
  return 0;
}

/* ---- history ------------------------------------------------------------------------ */
#ifdef ZORCH_READLINE
static char repl_history[4096]; /* the history file; empty: none */

/* Reads the history file ($ZORCH_HISTORY, empty for none, or ~/.zorch_history),
   creating it so that entries can be appended to it. */
static void repl_history_open(void) {
  const char *env = getenv("ZORCH_HISTORY"), *home = getenv("HOME");
  if (env) snprintf(repl_history, sizeof repl_history, "%s", env);
  else if (home) snprintf(repl_history, sizeof repl_history, "%s/.zorch_history", home);
  if (!*repl_history) return;
  /* a multi-line input is one entry: timestamp lines (#<seconds>) mark where
     entries start */
  history_comment_char = '#';
  history_write_timestamps = 1;
  history_multiline_entries = 1;
  if (read_history(repl_history) != 0) {
    FILE *f = fopen(repl_history, "a");
    if (f) fclose(f);
  }
  history_truncate_file(repl_history, 5000);
}

/* Adds an input to the history and appends it to the file at once, so a killed
   REPL loses nothing. */
static void repl_history_add(const char *text, bool tty) {
  if (!tty || !*text) return;
  add_history(text);
  if (*repl_history) append_history(1, repl_history);
}
#else
static void repl_history_open(void) {}
static void repl_history_add(const char *text, bool tty) { (void)text, (void)tty; }
#endif

/* ---- completion ---------------------------------------------------------------------- */
#ifdef ZORCH_READLINE
static const char *const repl_keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while", NULL};

static bool repl_is_name(const char *s, size_t len) {
  if (len == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
  for (size_t i = 1; i < len; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
      return false;
  return true;
}

/* Pushes where the fields of the value at idx can be listed: the value itself
   for a table, else its metatable's __methods (tensors) or __index table; nil
   when there is none. Raw access only: no metamethod runs. */
static void repl_push_fields_of(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_pushvalue(L, idx);
    return;
  }
  if (!lua_getmetatable(L, idx)) {
    lua_pushnil(L);
    return;
  }
  lua_pushliteral(L, "__methods");
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2);
  }
  lua_remove(L, -2);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* Pushes t[key] for the table at idx, following __index tables (raw access, a
   few levels); nil when absent. */
static void repl_rawget_chain(lua_State *L, int idx, const char *key, size_t len) {
  lua_pushvalue(L, idx);
  for (int depth = 0; depth < 8 && lua_istable(L, -1); depth++) {
    lua_pushlstring(L, key, len);
    if (lua_rawget(L, -2) != LUA_TNIL) {
      lua_remove(L, -2);
      return;
    }
    lua_pop(L, 1);
    if (!lua_getmetatable(L, -1)) break;
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2);
    lua_remove(L, -2); /* the metatable */
    lua_remove(L, -2); /* the table */
  }
  lua_pop(L, 1);
  lua_pushnil(L);
}

/* Adds to the set at index `set` every string key of the fields at the top
   (and of its __index tables) starting with prefix, as head .. key; methods_only
   keeps functions and callable values. Pops the fields. */
static void repl_add_keys(lua_State *L, int set, const char *head, size_t head_len, const char *prefix,
                          bool methods_only) {
  size_t plen = strlen(prefix);
  for (int depth = 0; depth < 8 && lua_istable(L, -1); depth++) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      size_t klen;
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &klen) : NULL;
      bool callable = lua_type(L, -1) == LUA_TFUNCTION || lua_type(L, -1) == LUA_TTABLE;
      if (k && repl_is_name(k, klen) && klen >= plen && memcmp(k, prefix, plen) == 0 &&
          (!methods_only || callable)) {
        lua_pushlstring(L, head, head_len);
        lua_pushvalue(L, -3);
        lua_concat(L, 2);
        lua_pushboolean(L, 1);
        lua_rawset(L, set);
      }
      lua_pop(L, 1);
    }
    if (!lua_getmetatable(L, -1)) break;
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2);
    lua_remove(L, -2);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
}

/* lua_CFunction: the completions of the word (argument 1) as the keys of a
   table: globals and keywords, or a.b.c's fields after '.', methods after ':'. */
static int repl_completions(lua_State *L) {
  const char *word = luaL_checkstring(L, 1);
  lua_newtable(L);
  int set = lua_gettop(L);
  const char *last = NULL;
  for (const char *p = word; *p; p++)
    if (*p == '.' || *p == ':') last = p;
  if (!last) {
    lua_pushglobaltable(L);
    repl_add_keys(L, set, "", 0, word, false);
    size_t n = strlen(word);
    for (int i = 0; repl_keywords[i]; i++)
      if (strncmp(repl_keywords[i], word, n) == 0) {
        lua_pushboolean(L, 1);
        lua_setfield(L, set, repl_keywords[i]);
      }
    return 1;
  }
  /* a.b.c: only names joined by dots; ':' may come last only */
  for (const char *p = word; p < last; p++)
    if (*p == ':') return 1;
  lua_pushglobaltable(L);
  const char *part = word;
  while (part < last + 1) {
    size_t len = strcspn(part, ".:");
    if (!repl_is_name(part, len)) return 1;
    int holder = lua_gettop(L);
    repl_push_fields_of(L, holder);
    if (lua_isnil(L, -1)) return 1;
    repl_rawget_chain(L, lua_gettop(L), part, len);
    lua_remove(L, -2); /* the fields */
    lua_remove(L, holder);
    part += len + 1;
  }
  repl_push_fields_of(L, lua_gettop(L));
  repl_add_keys(L, set, word, (size_t)(last + 1 - word), last + 1, *last == ':');
  lua_settop(L, set);
  return 1;
}

static char **repl_matches; /* the completions of the word being completed */
static size_t repl_nmatches;

static void repl_matches_free(void) {
  for (size_t i = 0; i < repl_nmatches; i++) free(repl_matches[i]);
  free(repl_matches);
  repl_matches = NULL;
  repl_nmatches = 0;
}

/* Collects the completions of text into repl_matches, in protected mode: odd
   input or a failing allocation gives none, never an error. */
static void repl_collect(lua_State *L, const char *text) {
  repl_matches_free();
  int top = lua_gettop(L);
  lua_pushcfunction(L, repl_completions);
  lua_pushstring(L, text);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) n++, lua_pop(L, 1);
    repl_matches = calloc(n ? n : 1, sizeof *repl_matches);
    lua_pushnil(L);
    while (repl_matches && lua_next(L, -2)) {
      lua_pop(L, 1);
      char *s = strdup(lua_tostring(L, -1));
      if (s) repl_matches[repl_nmatches++] = s;
    }
  }
  lua_settop(L, top);
}

/* readline's generator: the next match (state 0 starts over). */
static char *repl_generate(const char *text, int state) {
  static size_t next;
  (void)text;
  if (state == 0) next = 0;
  return next < repl_nmatches ? strdup(repl_matches[next++]) : NULL;
}

static char **repl_complete(const char *text, int start, int end) {
  (void)start, (void)end;
  rl_attempted_completion_over = 1; /* no file names */
  rl_completion_append_character = '\0';
  repl_collect(repl_L, text);
  char **m = rl_completion_matches(text, repl_generate);
  repl_matches_free();
  return m;
}

/* ---- reading lines ------------------------------------------------------------------ */
static char *repl_rl_line;
static bool repl_rl_done;

static void repl_on_line(char *line) {
  repl_rl_line = line;
  repl_rl_done = true;
  rl_callback_handler_remove();
}

/* One line through readline's callback interface: SIGINT stays blocked except
   inside pselect, so a Ctrl-C is seen there and nowhere else. */
static int repl_read_tty(const char *prompt, char **out) {
  sigset_t block, orig;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &orig);
  repl_cancel = 0;
  repl_rl_done = false;
  repl_rl_line = NULL;
  rl_callback_handler_install(prompt, repl_on_line);
  int fd = fileno(rl_instream ? rl_instream : stdin);
  int result = 0;
  while (!repl_rl_done) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    int r = pselect(fd + 1, &fds, NULL, NULL, NULL, &orig);
    if (r < 0 && errno == EINTR) {
      if (!repl_cancel) continue;
      /* Ctrl-C: leave the text on the screen, drop it from the line */
      rl_callback_sigcleanup();
      rl_free_line_state();
      rl_point = rl_end;
      rl_redisplay();
      rl_replace_line("", 0);
      rl_callback_handler_remove();
      fputs("^C\n", rl_outstream ? rl_outstream : stdout);
      using_history();
      result = 1;
      break;
    }
    if (r < 0) {
      rl_callback_handler_remove();
      result = 2;
      break;
    }
    rl_callback_read_char();
  }
  sigprocmask(SIG_SETMASK, &orig, NULL);
  repl_cancel = 0;
  if (result) return result;
  *out = repl_rl_line;
  return repl_rl_line ? 0 : 2;
}
#endif

enum { LINE_OK, LINE_CANCELLED, LINE_END };

/* Reads a line without its newline into *out (malloc'd). Returns LINE_OK,
   LINE_CANCELLED (Ctrl-C) or LINE_END. */
static int repl_read_line(const char *prompt, bool tty, char **out) {
#ifdef ZORCH_READLINE
  if (tty) return repl_read_tty(prompt, out);
#else
  if (tty) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
#endif
  static char buf[1 << 16];
  repl_cancel = 0;
  if (!fgets(buf, sizeof buf, stdin)) {
    if (ferror(stdin) && errno == EINTR) {
      clearerr(stdin);
      return LINE_CANCELLED;
    }
    return LINE_END;
  }
  buf[strcspn(buf, "\n")] = 0;
  *out = strdup(buf);
  return *out ? LINE_OK : LINE_END;
}

/* ---- the loop ------------------------------------------------------------------------ */
enum { CHUNK_READY, CHUNK_ERROR, CHUNK_CANCELLED, CHUNK_END };

static bool repl_incomplete(lua_State *L, int st) {
  if (st != LUA_ERRSYNTAX) return false;
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  return msg && len >= 5 && strcmp(msg + len - 5, "<eof>") == 0;
}

/* Reads one input and compiles it: `return <line>` when that compiles, else the
   lines as a chunk, reading more while it is unfinished. Pushes the function
   (CHUNK_READY) or the syntax error (CHUNK_ERROR); the input, all its lines,
   goes to the history as one entry. */
static int repl_read_chunk(lua_State *L, bool tty) {
  char *text;
  int r = repl_read_line("> ", tty, &text);
  if (r != LINE_OK) return r == LINE_END ? CHUNK_END : CHUNK_CANCELLED;
  const char *ret = lua_pushfstring(L, "return %s;", text);
  if (luaL_loadbuffer(L, ret, strlen(ret), "=stdin") == LUA_OK) {
    lua_remove(L, -2);
    repl_history_add(text, tty);
    free(text);
    return CHUNK_READY;
  }
  lua_pop(L, 2);
  int result;
  for (;;) {
    int st = luaL_loadbuffer(L, text, strlen(text), "=stdin");
    if (!repl_incomplete(L, st)) {
      result = st == LUA_OK ? CHUNK_READY : CHUNK_ERROR;
      break;
    }
    char *more;
    r = repl_read_line(">> ", tty, &more);
    if (r == LINE_END) { /* the syntax error says <eof> */
      result = CHUNK_ERROR;
      break;
    }
    lua_pop(L, 1);
    if (r == LINE_CANCELLED) {
      result = CHUNK_CANCELLED;
      break;
    }
    size_t n = strlen(text) + strlen(more) + 2;
    char *joined = malloc(n);
    if (joined) snprintf(joined, n, "%s\n%s", text, more);
    free(more);
    if (!joined) {
      result = CHUNK_END;
      break;
    }
    free(text);
    text = joined;
  }
  repl_history_add(text, tty);
  free(text);
  return result;
}

void repl_run(lua_State *L, const char *script, int nargs, char **args) {
  bool tty = isatty(0);
  repl_L = L;
  repl_catch_sigint();
  lua_sethook(L, repl_hook, REPL_MASK, REPL_EVERY);
  int top = lua_gettop(L);
  if (script) {
    int st = luaL_loadfile(L, script);
    if (st == LUA_OK) {
      for (int i = 0; i < nargs; i++) lua_pushstring(L, args[i]);
      st = repl_call(L, nargs, 0);
    }
    if (st != LUA_OK) repl_report(L);
  }
  if (tty) {
    printf("zorch %s (Lua %s); help(x) for documentation, Ctrl-D exits, Ctrl-C interrupts\n", ZORCH_VERSION,
           LUA_VERSION_MAJOR "." LUA_VERSION_MINOR);
    fflush(stdout);
#ifdef ZORCH_READLINE
    rl_readline_name = "zorch";
    rl_catch_signals = 0; /* SIGINT is the REPL's: see repl_read_tty */
    rl_attempted_completion_function = repl_complete;
    rl_completer_word_break_characters = " \t\n\"\\'`@$><=;|&{(+-*/%^~#,[]})";
#endif
    repl_history_open();
  }
  for (;;) {
    lua_settop(L, top);
    int r = repl_read_chunk(L, tty);
    if (r == CHUNK_END) break;
    if (r == CHUNK_CANCELLED) continue;
    if (r == CHUNK_ERROR) {
      repl_report(L);
      continue;
    }
    int st = repl_call(L, 0, LUA_MULTRET);
    if (st == LUA_OK && lua_gettop(L) > top) {
      int n = lua_gettop(L) - top;
      lua_pushcfunction(L, repl_print_values);
      lua_insert(L, top + 1);
      st = repl_call(L, n, 0);
      if (st != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        lua_pushfstring(L, "cannot print the result: %s", msg ? msg : "?");
        lua_remove(L, -2);
      }
    }
    if (st != LUA_OK) repl_report(L);
  }
  lua_settop(L, top);
  if (tty) printf("\n");
  lua_sethook(L, NULL, 0, 0);
  signal(SIGINT, SIG_DFL);
}
