/* lz.h: shared helpers of the Lua bindings (prefix lz_). Lua indices and dims
   are 1-based; negative ones count from the end; they become the C API's
   0-based ones here and nowhere else. */
#ifndef ZORCH_LUA_LZ_H
#define ZORCH_LUA_LZ_H
#include <lauxlib.h>
#include <string.h>
#include <lua.h>

#include "zorch.h"
#include "zorch_zero.h"

#define LZ_TENSOR "zorch.Tensor"
#define LZ_SHAPE "zorch.Shape"

/* Raises the core's last error as a Lua error, its dims and indices counted
   from 1 (ops/core/error.h marks them). */
int lz_fail(lua_State *L);
/* Pushes t (taking its reference) or raises the last error when NULL. */
int lz_push(lua_State *L, zorch_tensor *t);
/* lz_push from a C closure whose upvalue `up` is the table lz_push_state
   pushes (the spare box and the tensor metatable): no registry lookup. */
int lz_push_up(lua_State *L, zorch_tensor *t, int up);
void lz_push_state(lua_State *L);
zorch_tensor *lz_check(lua_State *L, int idx);
/* Pushes f(a, b) for the operands at 1 and 2: tensors, or one of them a number
   (a 0-d tensor of PyTorch's dtype for a number beside the other tensor). */
int lz_binary(lua_State *L, const char *name, zorch_tensor *(*f)(zorch_tensor *, zorch_tensor *));
/* Pushes the n bytes at p (malloc'd by the library) as a string and frees p,
   also when the push raises. */
int lz_push_owned(lua_State *L, void *p, size_t n);
/* the same for a binary op of the registry (zorch_pointwise_ops) */
int lz_binary_op(lua_State *L, const zorch_pointwise_op *op);
/* Pushes t's shape: a plain array of sizes that prints as (2, 3). */
int lz_push_shape(lua_State *L, const zorch_tensor *t);
/* A 1-based (or negative) Lua dim to a C dim; 0 is an error. */
int lz_dim(lua_State *L, int idx);
/* Sizes from varargs numbers starting at idx, or from a table at idx. */
int lz_sizes(lua_State *L, int idx, int64_t *shape);
/* Integers at idx: a number or a table of at most cap numbers (shifts, pads,
   sizes); returns the count. */
int lz_ints(lua_State *L, int idx, int64_t *out, int cap);
/* The options table at idx (or none): dtype, device, requires_grad. */
typedef struct {
  zorch_dtype dtype;
  zorch_device device;
  int requires_grad;
} lz_opts;
void lz_get_opts(lua_State *L, int idx, lz_opts *o, zorch_dtype def);
/* Reading tables a script passed: raw, so no script code (an __index or
   __len of its own) runs while a binding holds tensors it borrowed; such code
   could close one (docs/architecture.md, "What a script can do to a
   binding"). Anything but a table is a type error. */
static inline void lz_need_table(lua_State *L, int idx) {
  if (lua_istable(L, idx)) return;
  if (idx > 0) luaL_typeerror(L, idx, "table");
  luaL_error(L, "table expected, got %s", luaL_typename(L, idx));
}
static inline int lz_getfield(lua_State *L, int idx, const char *k) {
  lz_need_table(L, idx);
  idx = lua_absindex(L, idx);
  lua_pushstring(L, k);
  return lua_rawget(L, idx);
}
static inline int lz_geti(lua_State *L, int idx, lua_Integer i) {
  lz_need_table(L, idx);
  return lua_rawgeti(L, idx, i);
}
static inline lua_Integer lz_len(lua_State *L, int idx) {
  lz_need_table(L, idx);
  return (lua_Integer)lua_rawlen(L, idx);
}
/* A userdata zorch made with `tag` (a static's address) first and `size`
   bytes in all, else NULL: what zorch keeps in the registry can be replaced
   through the debug library, and a foreign userdata must not be read as one. */
static inline void *lz_tagged(lua_State *L, int idx, const void *tag, size_t size) {
  void *p = lua_type(L, idx) == LUA_TUSERDATA ? lua_touserdata(L, idx) : NULL;
  return p && lua_rawlen(L, idx) == size && *(const void *const *)p == tag ? p : NULL;
}
/* A path argument: a string without a NUL byte (C would stop at it, and a
   file of another name would be read or written). */
static inline const char *lz_checkpath(lua_State *L, int idx) {
  size_t n;
  const char *p = luaL_checklstring(L, idx, &n);
  if (strlen(p) != n) luaL_argerror(L, idx, "a path holds a NUL byte");
  return p;
}
/* luaL_setmetatable that raises, not crashes, when the registry's entry was
   replaced by something other than a table. */
static inline void lz_setmetatable(lua_State *L, const char *name) {
  if (luaL_getmetatable(L, name) != LUA_TTABLE) luaL_error(L, "zorch: the %s metatable was replaced", name);
  lua_setmetatable(L, -2);
}
/* A 1-based int64 index tensor turned 0-based (new reference). */
zorch_tensor *lz_index0(lua_State *L, int idx);
/* Sets __metatable on the metatable on top: getmetatable gives a table with
   only its __name, so a script can neither call __gc or __close on an object
   a binding is using nor change how zorch's objects behave. [-0, +0] */
void lz_protect_metatable(lua_State *L);
void lz_open_tensor(lua_State *L);
void lz_open_functions(lua_State *L);
/* zorch.tokenizer (ltokenizer.c), into the table on top. */
void lz_open_tokenizer(lua_State *L);
/* zorch._http_server (lhttp.c), into the table on top. */
void lz_open_http(lua_State *L);
/* The functions and methods of lshape.c, into the tables at module and methods. */
void lz_open_shape(lua_State *L, int module, int methods);
/* ---- the VM an embedding host made (lsandbox.c) ---------------------------------
   vm/embed.c fills one per VM and keeps it in the registry ("zorch.vm");
   a Lua state without one (zorch.so loaded by lua5.4) has no limits. */
typedef struct lz_vm {
  zorch_state *state;          /* the VM's zorch state, current while it runs */
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
/* Makes vm the VM of L (the registry's "zorch.vm"). */
void lz_vm_attach(lua_State *L, lz_vm *vm);
/* Enters the VM (its state current, its budget counted from the outermost
   entry); returns the state to give lz_vm_leave. */
zorch_state *lz_vm_enter(lz_vm *vm);
void lz_vm_leave(lz_vm *vm, zorch_state *prev);
/* Installs the instruction/time budget hook on the main thread when the VM
   has a budget. */
void lz_vm_hook(lz_vm *vm);
/* Gives thread T (of L's VM) the budget hook before C code runs Lua in it. */
void lz_vm_hook_thread(lua_State *L, lua_State *T);
/* Before coroutine co of L's VM is resumed: raises once the budget is
   crossed, else gives co the budget hook. */
void lz_vm_check_resume(lua_State *L, lua_State *co);
/* After an op stopped at the deadline (ZORCH_ERR_TIMEOUT): the budget is
   crossed now, and L raises at its next instruction, not at its hook's next
   count (a script catching the op's error in a loop would redo the op's
   set-up, its output's allocation, until then). */
void lz_vm_note_stop(lua_State *L);
/* Whether the running entry's budget is crossed (it becomes so, sticky until
   the entry returns, when the count or the clock is past it). */
bool lz_vm_crossed(lz_vm *vm);
/* Raises "not allowed" unless the VM may `access` ("read" or "write") path:
   every zorch function that touches a file calls it first. The message names
   the path as given and nothing about the file. */
void lz_check_path(lua_State *L, const char *path, const char *access);
/* Whether the VM of L (none: yes) lets a script read or write path. */
int lz_path_allowed(lua_State *L, const char *path, int write);
/* Whether L runs in a sandbox. */
int lz_sandboxed(lua_State *L);
/* Raises "not allowed in this sandbox" for a setting of the whole process
   (threads, TF32, ...) when L runs in one. */
void lz_refuse_in_sandbox(lua_State *L, const char *what);
/* The io and os the embedded Lua modules see: the standard ones, or in a
   sandbox tables whose file functions call lz_check_path and which run no
   programs and read no environment. [-0, +2, m] */
void lz_push_module_io(lua_State *L);

/* A process group argument (ldist.c): a zorch.Group, or the world's when
   absent. */
zorch_zero_comm *lz_opt_group(lua_State *L, int idx);

/* What `require "zorch.nn.loss"` gives for an embedded module
   (lua/zorch/nn/loss.lua): luaopen_zorch_nn_loss, generated beside the
   sources, calls it with the module's name. */
int lz_open_module(lua_State *L, const char *name);
/* Pushes the helper `name` ("_consolidate", ...) the embedded modules keep in
   zorch's private table, for the command's subcommands; raises when there is
   none. zorch must be open. [-0, +1, e] */
void lz_push_private(lua_State *L, const char *name);
#endif
