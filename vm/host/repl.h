/* repl.h: the zorch command's interactive loop (repl.c), compiled into the
   zorch binary, not the libraries. */
#ifndef ZORCH_HOST_REPL_H
#define ZORCH_HOST_REPL_H
#include <lua.h>

/* Runs script (when not NULL) with its nargs arguments from args, then reads,
   runs and prints chunks until the input ends. Ctrl-C clears the line at the
   prompt and interrupts a running chunk. Stack: unchanged. */
void repl_run(lua_State *L, const char *script, int nargs, char **args);

#endif
