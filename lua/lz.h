/* lz.h: shared helpers of the Lua bindings (prefix lz_). Lua indices and dims
   are 1-based; negative ones count from the end; they become the C API's
   0-based ones here and nowhere else. */
#ifndef ZORCH_LUA_LZ_H
#define ZORCH_LUA_LZ_H
#include <lauxlib.h>
#include <lua.h>

#include "zorch.h"

#define LZ_TENSOR "zorch.Tensor"
#define LZ_SHAPE "zorch.Shape"

/* Raises the core's last error as a Lua error, its dims and indices counted
   from 1 (vm/core/error.h marks them). */
int lz_fail(lua_State *L);
/* Pushes t (taking its reference) or raises the last error when NULL. */
int lz_push(lua_State *L, zorch_tensor *t);
/* lz_push from a C closure whose upvalue `up` is the table lz_push_state
   pushes (the spare box and the tensor metatable): no registry lookup. */
int lz_push_up(lua_State *L, zorch_tensor *t, int up);
void lz_push_state(lua_State *L);
zorch_tensor *lz_check(lua_State *L, int idx);
/* Pushes t's shape: a plain array of sizes that prints as (2, 3). */
int lz_push_shape(lua_State *L, const zorch_tensor *t);
/* A 1-based (or negative) Lua dim to a C dim; 0 is an error. */
int lz_dim(lua_State *L, int idx);
/* Sizes from varargs numbers starting at idx, or from a table at idx. */
int lz_sizes(lua_State *L, int idx, int64_t *shape);
/* The options table at idx (or none): dtype, device, requires_grad. */
typedef struct {
  zorch_dtype dtype;
  zorch_device device;
  int requires_grad;
} lz_opts;
void lz_get_opts(lua_State *L, int idx, lz_opts *o, zorch_dtype def);
/* A 1-based int64 index tensor turned 0-based (new reference). */
zorch_tensor *lz_index0(lua_State *L, int idx);
void lz_open_tensor(lua_State *L);
void lz_open_functions(lua_State *L);
/* zorch.data.load_idx (lidx.c) */
int lz_load_idx(lua_State *L);
/* ---- the VM an embedding host made (lsandbox.c) ---------------------------------
   vm/host/embed.c fills one per VM and keeps it in the registry ("zorch.vm");
   a Lua state without one (zorch.so loaded by lua5.4) has no limits. */
struct zstate;
typedef struct lz_vm {
  struct zstate *state;        /* the VM's zorch state, current while it runs */
  lua_State *main;             /* its main thread */
  int sandbox;                 /* files only in the folders below */
  char **read_dirs, **write_dirs; /* resolved folders, NULL-terminated (write implies read) */
  unsigned long long max_instructions; /* per entry; 0: no limit */
  double max_seconds;          /* per entry; 0: no limit */
  /* the running entry */
  int depth;
  unsigned long long steps;
  double deadline;
  int exceeded;
  char why[96];
} lz_vm;
/* The VM of L, or NULL. */
lz_vm *lz_vm_get(lua_State *L);
/* Enters the VM (its state current, its budget counted from the outermost
   entry); returns the state to give lz_vm_leave. */
struct zstate *lz_vm_enter(lz_vm *vm);
void lz_vm_leave(lz_vm *vm, struct zstate *prev);
/* Installs the instruction/time budget hook when the VM has a budget. */
void lz_vm_hook(lz_vm *vm);
/* Raises "not allowed" unless the VM may `access` ("read" or "write") path:
   every zorch function that touches a file calls it first. The message names
   the path as given and nothing about the file. */
void lz_check_path(lua_State *L, const char *path, const char *access);
/* The io and os the embedded Lua modules see: the standard ones, or in a
   sandbox tables whose file functions call lz_check_path and which run no
   programs and read no environment. [-0, +2, m] */
void lz_push_module_io(lua_State *L);

/* A process group argument (ldist.c): a zorch.Group, or the world's when
   absent. */
struct zero_comm;
struct zero_comm *lz_opt_group(lua_State *L, int idx);

/* What `require "zorch.NAME"` gives for an embedded module (lua/NAME.lua):
   luaopen_zorch_NAME, generated beside the sources, calls it. */
int lz_open_module(lua_State *L, const char *name);
#endif
