/* embed.c: a Lua VM with zorch loaded, for C hosts: run files and strings, call
   Lua functions with tensors, optionally sandboxed and with a Lua heap limit. */
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <stdatomic.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/core/error.h"
#include "../ops/core/state.h"
#include "../lua/lz.h"
#include "lalloc.h"
#include "zorch.h"

/* A VM owns its Lua state and its zorch state (default generator, grad mode,
   last error), which is current on the thread while the VM runs. */
struct zorch_vm {
  lua_State *L;
  zstate *state;
  size_t used, limit;
  zmem_account *shared; /* a sandbox's mem_limit over heap and tensors both (the state's account), or NULL */
  lz_pool pool; /* the Lua state's small blocks */
  lz_vm ctx; /* sandbox folders and budget, seen by the Lua layer */
  char err[2048];
};

/* Counts the Lua heap and refuses growth past the limit (and, in a sandbox
   whose mem_limit covers tensors too, past what the tensors leave of it); Lua
   turns the refusal into a memory error that the protected call reports. */
static void *vm_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  zorch_vm *vm = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    lz_pool_realloc(&vm->pool, ptr, osize, 0);
    vm->used -= old;
    if (vm->shared) atomic_fetch_sub(&vm->shared->used, old);
    return NULL;
  }
  size_t grow = nsize > old ? nsize - old : 0;
  if (vm->limit && vm->used + grow > vm->limit) return NULL;
  if (vm->shared && grow && atomic_fetch_add(&vm->shared->used, grow) + grow > vm->shared->limit) {
    atomic_fetch_sub(&vm->shared->used, grow);
    return NULL;
  }
  void *p = lz_pool_realloc(&vm->pool, ptr, osize, nsize);
  if (p) {
    vm->used = vm->used - old + nsize;
    if (vm->shared && nsize < old) atomic_fetch_sub(&vm->shared->used, old - nsize);
  } else if (vm->shared && grow) {
    atomic_fetch_sub(&vm->shared->used, grow);
  }
  return p;
}

static int vm_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  /* an error object with __tostring (a zorch.UsageError) is its text */
  if (!msg && luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) msg = lua_tostring(L, -1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* In a sandbox, require gives zorch and its modules (zorch.nn, ...) and nothing
   else. */
static int vm_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (strcmp(name, "zorch") == 0 || strncmp(name, "zorch.", 6) == 0) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    if (lua_getfield(L, -1, name) != LUA_TNIL) return 1;
  }
  return luaL_error(L, "require: module '%s' is not available in the sandbox", name);
}

/* load() of text only: binary chunks can break the VM's invariants */
static int vm_load_text(lua_State *L) {
  lua_settop(L, 4);
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 4, LUA_MULTRET);
  return lua_gettop(L);
}

/* collectgarbage without the options that change the collector: a stopped
   collector would keep every dropped tensor's memory until the host frees the VM. */
static int vm_collectgarbage(lua_State *L) {
  static const char *const safe[] = {"collect", "count", "step", "isrunning", NULL};
  luaL_checkoption(L, 1, "collect", safe);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* setmetatable without __gc: Lua runs finalizers with hooks off, so a looping
   one could not be stopped by the budget. Installed before zorch loads, so
   its modules (whose classes a script can extend) get it too. */
static int vm_setmetatable(lua_State *L) {
  if (lua_istable(L, 2)) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: __gc metamethods are not allowed in this sandbox");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* The message handler of the sandbox's xpcall: the script's handler, except
   once the budget is spent (an error raised from the count hook runs its
   handler with hooks off). Upvalue 1: the script's handler. */
static int vm_xpcall_handler(lua_State *L) {
  lz_vm *vm = lz_vm_get(L);
  if (vm && vm->exceeded) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* coroutine.resume(co, ...): refused once the budget is crossed, else co
   gets the budget hook first. Upvalue 1: the real resume. */
static int vm_co_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co) lz_vm_check_resume(L, co);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* A function coroutine.wrap made, checked as vm_co_resume checks. Upvalues:
   the real wrap's function, its coroutine. */
static int vm_co_wrapped(lua_State *L) {
  lz_vm_check_resume(L, lua_tothread(L, lua_upvalueindex(2)));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* coroutine.wrap(f). Upvalue 1: the real wrap. */
static int vm_co_wrap(lua_State *L) {
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, 1);
  if (!lua_getupvalue(L, 1, 1) || !lua_isthread(L, -1))
    return luaL_error(L, "coroutine.wrap: no coroutine behind the function");
  lua_pushcclosure(L, vm_co_wrapped, 2);
  return 1;
}

/* The coroutine library with resume and wrap checked: a coroutine made at
   any time runs under the budget of the entry that resumes it. */
static void vm_wrap_coroutines(lua_State *L) {
  if (lua_getglobal(L, "coroutine") == LUA_TTABLE) {
    lua_getfield(L, -1, "resume");
    lua_pushcclosure(L, vm_co_resume, 1);
    lua_setfield(L, -2, "resume");
    lua_getfield(L, -1, "wrap");
    lua_pushcclosure(L, vm_co_wrap, 1);
    lua_setfield(L, -2, "wrap");
  }
  lua_pop(L, 1);
}

/* xpcall(f, h, ...) with h wrapped by vm_xpcall_handler. Upvalue 1: xpcall. */
static int vm_xpcall(lua_State *L) {
  luaL_checkany(L, 2);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, vm_xpcall_handler, 1);
  lua_replace(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int vm_open(lua_State *L) {
  zorch_vm *vm = lua_touserdata(L, 1);
  bool sandbox = vm->ctx.sandbox;
  lz_vm_attach(L, &vm->ctx);
  if (!sandbox) {
    luaL_openlibs(L);
  } else {
    static const luaL_Reg safe[] = {{LUA_GNAME, luaopen_base},       {LUA_TABLIBNAME, luaopen_table},
                                    {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
                                    {LUA_UTF8LIBNAME, luaopen_utf8}, {LUA_COLIBNAME, luaopen_coroutine},
                                    {NULL, NULL}};
    for (const luaL_Reg *l = safe; l->func; l++) {
      luaL_requiref(L, l->name, l->func, 1);
      lua_pop(L, 1);
    }
    lua_pushnil(L);
    lua_setglobal(L, "dofile");
    lua_pushnil(L);
    lua_setglobal(L, "loadfile");
    lua_getglobal(L, "load");
    lua_pushcclosure(L, vm_load_text, 1);
    lua_setglobal(L, "load");
    lua_pushcfunction(L, vm_require);
    lua_setglobal(L, "require");
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    lua_getglobal(L, "collectgarbage");
    lua_pushcclosure(L, vm_collectgarbage, 1);
    lua_setglobal(L, "collectgarbage");
    lua_getglobal(L, "setmetatable");
    lua_pushcclosure(L, vm_setmetatable, 1);
    lua_setglobal(L, "setmetatable");
  }
  vm_wrap_coroutines(L);
  luaL_requiref(L, "zorch", luaopen_zorch, 1);
  if (sandbox) { /* after zorch: its modules keep the plain xpcall */
    lua_getglobal(L, "xpcall");
    lua_pushcclosure(L, vm_xpcall, 1);
    lua_setglobal(L, "xpcall");
  }
  return 0;
}

static zorch_status vm_fail(zorch_vm *vm, int st) {
  const char *m = lua_tostring(vm->L, -1);
  if (lz_vm_crossed(&vm->ctx)) { /* also when a C op saw the deadline first */
    snprintf(vm->err, sizeof vm->err, "%s", m ? m : vm->ctx.why);
    lua_pop(vm->L, 1);
    return err_set(ZORCH_ERR_TIMEOUT, "%s", vm->err);
  }
  if (st == LUA_ERRMEM && vm->limit)
    snprintf(vm->err, sizeof vm->err, "memory limit of %zu bytes of %s reached", vm->limit,
             vm->shared ? "Lua heap and tensors" : "Lua heap");
  else
    snprintf(vm->err, sizeof vm->err, "%s", m ? m : "(error without a message)");
  lua_pop(vm->L, 1);
  return err_set(st == LUA_ERRMEM ? ZORCH_ERR_OOM : ZORCH_ERR_STATE, "%s", vm->err);
}

/* Makes the VM's state current and starts its budget for an entry. */
#define VM_ENTER(vm) zstate *vm_prev_state = lz_vm_enter(&(vm)->ctx)
#define VM_LEAVE(vm) lz_vm_leave(&(vm)->ctx, vm_prev_state)

/* Ends an entry: the caller's state gets the VM's failure too. */
static zorch_status vm_leave(zorch_vm *vm, zstate *prev, zorch_status st) {
  lz_vm_leave(&vm->ctx, prev);
  return st ? err_set(st, "%s", vm->err) : ZORCH_OK;
}

static void dirs_free(char **dirs) {
  for (char **d = dirs; d && *d; d++) free(*d);
  free(dirs);
}

/* Resolves a host's folder list (realpath); NULL with the error set when one
   does not resolve or memory runs out. An empty list for NULL. */
static char **dirs_resolve(const char *const *dirs) {
  size_t n = 0;
  while (dirs && dirs[n]) n++;
  char **out = calloc(n + 1, sizeof *out);
  if (!out) return err_null(ZORCH_ERR_OOM, "vm_new: out of memory");
  for (size_t i = 0; i < n; i++) {
    if (!(out[i] = realpath(dirs[i], NULL))) {
      dirs_free(out);
      return err_null(ZORCH_ERR_ARG, "vm_new: allowed folder '%s' does not resolve", dirs[i]);
    }
  }
  return out;
}

/* A charge past tensor_limit: the script's dropped tensors are freed by a
   full collection before the charge is refused (their boxes' finalizers only
   free; the tensors an op is using are on the Lua stack, reachable). Not while
   the state closes or the collector is stopped. */
static void vm_reclaim(void *ud) {
  zorch_vm *vm = ud;
  if (vm->L && vm->ctx.main && lua_gc(vm->L, LUA_GCISRUNNING)) lua_gc(vm->L, LUA_GCCOLLECT);
}

static void vm_destroy(zorch_vm *vm) {
  if (vm->L) {
    VM_ENTER(vm); /* finalizers written in Lua run under the budget too */
    lua_close(vm->L);
    lz_pool_drain(&vm->pool);
    vm->ctx.main = NULL;
    zstate_swap(vm_prev_state);
  }
  dirs_free(vm->ctx.read_dirs);
  dirs_free(vm->ctx.write_dirs);
  if (vm->state && vm->state->mem) vm->state->mem->reclaim = NULL; /* the account may outlive the VM */
  zmem_account_release(vm->state ? vm->state->mem : NULL);
  zstate_free(vm->state);
  free(vm);
}

zorch_vm *zorch_vm_new(const zorch_vm_opts *opts) {
  zorch_vm *vm = calloc(1, sizeof *vm);
  if (!vm || !(vm->state = zstate_new())) {
    free(vm);
    return err_null(ZORCH_ERR_OOM, "vm_new: out of memory");
  }
  vm->limit = opts ? opts->mem_limit : 0;
  vm->ctx.state = vm->state;
  if (opts) {
    vm->ctx.sandbox = opts->sandbox != 0;
    vm->ctx.max_instructions = opts->max_instructions;
    vm->ctx.max_seconds = opts->max_seconds > 0 ? opts->max_seconds : 0;
    if (opts->sandbox && (!(vm->ctx.read_dirs = dirs_resolve(opts->allow_read)) ||
                          !(vm->ctx.write_dirs = dirs_resolve(opts->allow_write)))) {
      char msg[sizeof vm->err];
      snprintf(msg, sizeof msg, "%s", zorch_last_error());
      zorch_status code = zorch_last_status();
      vm_destroy(vm);
      return err_null(code, "%s", msg);
    }
    /* a sandbox's mem_limit bounds all it makes unless tensor_limit says otherwise */
    bool shared = opts->sandbox && opts->mem_limit && !opts->tensor_limit;
    size_t tensor_limit = shared ? opts->mem_limit : opts->tensor_limit;
    if (tensor_limit && !(vm->state->mem = zmem_account_new(tensor_limit))) {
      vm_destroy(vm);
      return err_null(ZORCH_ERR_OOM, "vm_new: out of memory");
    }
    if (shared) vm->shared = vm->state->mem;
  }
  vm->L = lua_newstate(vm_alloc, vm);
  if (!vm->L) {
    vm_destroy(vm);
    return err_null(ZORCH_ERR_OOM, "vm_new: cannot create a Lua state");
  }
  lua_gc(vm->L, LUA_GCGEN, 0, 0); /* as lua.c does: a script's tensors are mostly short-lived temporaries */
  vm->ctx.main = vm->L;
  if (vm->state->mem) vm->state->mem->reclaim = vm_reclaim, vm->state->mem->reclaim_ud = vm;
  /* loading zorch's own modules is not the script's budget */
  unsigned long long max_instructions = vm->ctx.max_instructions;
  double max_seconds = vm->ctx.max_seconds;
  vm->ctx.max_instructions = 0;
  vm->ctx.max_seconds = 0;
  VM_ENTER(vm);
  lua_pushcfunction(vm->L, vm_open);
  lua_pushlightuserdata(vm->L, vm);
  int st = lua_pcall(vm->L, 1, 0, 0);
  if (st != LUA_OK) vm_fail(vm, st);
  VM_LEAVE(vm);
  vm->ctx.max_instructions = max_instructions;
  vm->ctx.max_seconds = max_seconds;
  if (st != LUA_OK) {
    char msg[sizeof vm->err];
    memcpy(msg, vm->err, sizeof msg);
    vm_destroy(vm);
    return err_null(ZORCH_ERR_STATE, "vm_new: %s", msg);
  }
  return vm;
}

void zorch_vm_free(zorch_vm *vm) {
  if (vm) vm_destroy(vm);
}

lua_State *zorch_vm_state(zorch_vm *vm) { return vm ? vm->L : NULL; }
const char *zorch_vm_error(const zorch_vm *vm) { return vm ? vm->err : "no vm"; }

/* Runs the function below nargs arguments on the stack, in the VM's state. */
static zorch_status vm_run(zorch_vm *vm, int loadst, int nargs, int nres) {
  if (loadst != LUA_OK) return vm_fail(vm, loadst);
  zstate *prev = lz_vm_enter(&vm->ctx);
  int base = lua_gettop(vm->L) - nargs;
  lua_pushcfunction(vm->L, vm_traceback);
  lua_insert(vm->L, base);
  int st = lua_pcall(vm->L, nargs, nres, base);
  lua_remove(vm->L, base);
  if (st != LUA_OK) return vm_leave(vm, prev, vm_fail(vm, st));
  vm->err[0] = 0;
  return vm_leave(vm, prev, ZORCH_OK);
}

zorch_status zorch_vm_dofile(zorch_vm *vm, const char *path) {
  if (!vm || !path) return err_set(ZORCH_ERR_ARG, "vm_dofile: NULL argument");
  return vm_run(vm, luaL_loadfilex(vm->L, path, "t"), 0, 0);
}

zorch_status zorch_vm_dostring(zorch_vm *vm, const char *chunk, const char *name) {
  if (!vm || !chunk) return err_set(ZORCH_ERR_ARG, "vm_dostring: NULL argument");
  return vm_run(vm, luaL_loadbufferx(vm->L, chunk, strlen(chunk), name ? name : "=chunk", "t"), 0, 0);
}

typedef struct {
  const char *fn;
  int nin, nout;
  zorch_tensor *const *ins;
  zorch_tensor **outs;
} vm_call_args;

/* Runs inside a protected call: pushing values can raise (memory limit).
   The function's results are taken as it returns them (LUA_MULTRET: Lua's
   call records a fixed result count in a short), the missing ones NULL. */
static int vm_call_body(lua_State *L) {
  vm_call_args *a = lua_touserdata(L, 1);
  if (!lua_checkstack(L, a->nin + 4))
    return luaL_error(L, "vm_call: %d arguments do not fit on the Lua stack", a->nin);
  if (lua_getglobal(L, a->fn) != LUA_TFUNCTION)
    return luaL_error(L, "vm_call: global '%s' is not a function", a->fn);
  for (int i = 0; i < a->nin; i++) {
    if (a->ins[i]) zorch_push_tensor(L, zorch_tensor_retain(a->ins[i]));
    else lua_pushnil(L);
  }
  int base = lua_gettop(L) - a->nin - 1;
  lua_call(L, a->nin, LUA_MULTRET);
  int got = lua_gettop(L) - base;
  for (int i = 0; i < a->nout && i < got; i++) {
    zorch_tensor *t = zorch_to_tensor(L, base + 1 + i);
    a->outs[i] = t ? zorch_tensor_retain(t) : NULL;
  }
  return 0;
}

/* More values than this never fit on a Lua stack. */
#define VM_MAX_VALUES (LUAI_MAXSTACK - 64)

zorch_status zorch_vm_call(zorch_vm *vm, const char *fn, int nin, zorch_tensor *const *ins, int nout,
                           zorch_tensor **outs) {
  if (!vm || !fn || nin < 0 || nout < 0 || (nin && !ins) || (nout && !outs))
    return err_set(ZORCH_ERR_ARG, "vm_call: bad arguments");
  if (nin > VM_MAX_VALUES || nout > VM_MAX_VALUES) {
    snprintf(vm->err, sizeof vm->err, "vm_call: %d arguments and %d results: a Lua call takes and returns at most %d",
             nin, nout, VM_MAX_VALUES);
    return err_set(ZORCH_ERR_ARG, "%s", vm->err);
  }
  for (int i = 0; i < nout; i++) outs[i] = NULL;
  vm_call_args a = {fn, nin, nout, ins, outs};
  lua_pushcfunction(vm->L, vm_call_body);
  lua_pushlightuserdata(vm->L, &a);
  zorch_status st = vm_run(vm, LUA_OK, 1, 0);
  if (st)
    for (int i = 0; i < nout; i++) {
      zorch_tensor_free(outs[i]);
      outs[i] = NULL;
    }
  return st;
}
