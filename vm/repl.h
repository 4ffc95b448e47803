/* repl.h: the zorch command's interactive loop (repl.c) and its help() global
   (help.c). Both are compiled into the zorch binary, not the libraries. */
#ifndef ZORCH_HOST_REPL_H
#define ZORCH_HOST_REPL_H
#include <lua.h>

/* Runs script (when not NULL) with its nargs arguments from args, then reads,
   runs and prints chunks until the input ends. Ctrl-C clears the line at the
   prompt and interrupts a running chunk. Stack: unchanged. */
void repl_run(lua_State *L, const char *script, int nargs, char **args);

/* Sets the global help(x): the documentation of a zorch function, module or
   tensor method, from docs/api.md. Raises a Lua error on failure (run it in
   protected mode). Stack: unchanged. */
void help_open(lua_State *L);
#endif
