/* lsandbox.c: what a script in an embedding host's VM may do: the folders it
   may read and write (every zorch function that touches a file asks
   lz_check_path), the io and os the embedded Lua modules get in place of the
   standard libraries, and the instruction and time budget of each entry. */
#include <errno.h>
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lz.h"

typedef struct {
  const void *tag;
  lz_vm *vm;
} vm_box;
static const char vm_tag;

lz_vm *lz_vm_get(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "zorch.vm");
  vm_box *b = lz_tagged(L, -1, &vm_tag, sizeof *b);
  lua_pop(L, 1);
  return b ? b->vm : NULL;
}

void lz_vm_attach(lua_State *L, lz_vm *vm) {
  vm_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->tag = &vm_tag, b->vm = vm;
  lua_setfield(L, LUA_REGISTRYINDEX, "zorch.vm");
}

/* ---- the budget ------------------------------------------------------------------ */
#define HOOK_EVERY 1000 /* instructions between two looks at the budget */

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool has_budget(const lz_vm *vm) { return vm->max_instructions || vm->max_seconds > 0; }

/* The hook count a thread runs with: every instruction once the budget is
   crossed, so each thread that runs again raises at once. */
static int hook_every(const lz_vm *vm) {
  if (vm->exceeded) return 1;
  return vm->max_instructions && vm->max_instructions < HOOK_EVERY ? (int)vm->max_instructions : HOOK_EVERY;
}

static void budget_hook(lua_State *L, lua_Debug *ar);

/* Gives thread T the VM's hook unless it has it already (setting a hook
   restarts its count: a coroutine resumed over and over must keep counting). */
static void hook_thread(lz_vm *vm, lua_State *T) {
  int every = hook_every(vm);
  if (lua_gethook(T) != budget_hook || lua_gethookcount(T) != every) lua_sethook(T, budget_hook, LUA_MASKCOUNT, every);
}

/* Marks the budget crossed (sticky until the outermost entry returns): the
   main thread's hook tightens, and the C ops of the VM's state stop at their
   next look at the deadline. */
static void budget_cross(lz_vm *vm) {
  vm->exceeded = 1;
  zorch_state_set_deadline(vm->state, 1e-9); /* a time long past */
  if (vm->main) hook_thread(vm, vm->main);
}

bool lz_vm_crossed(lz_vm *vm) {
  if (vm->exceeded) return true;
  if (vm->depth == 0) return false;
  if (vm->max_instructions && vm->steps >= vm->max_instructions)
    snprintf(vm->why, sizeof vm->why, "instruction limit of %llu reached", vm->max_instructions);
  else if (vm->max_seconds > 0 && now_seconds() > vm->deadline)
    snprintf(vm->why, sizeof vm->why, "time limit of %g seconds reached", vm->max_seconds);
  else
    return false;
  budget_cross(vm);
  return true;
}

/* The count hook, on every thread of the VM: it counts the instructions that
   thread ran since its last call; past the budget it raises, and from then on
   every thread that runs raises at its next instruction, so neither pcall nor
   a coroutine that catches the error can keep going. */
static void budget_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lz_vm *vm = lz_vm_get(L);
  if (!vm || vm->depth == 0) return;
  if (!vm->exceeded) {
    vm->steps += (unsigned long long)lua_gethookcount(L);
    if (!lz_vm_crossed(vm)) return;
  }
  hook_thread(vm, L);
  luaL_error(L, "%s", vm->why);
}

void lz_vm_hook(lz_vm *vm) {
  if (vm->main && has_budget(vm)) hook_thread(vm, vm->main);
}

void lz_vm_hook_thread(lua_State *L, lua_State *T) {
  lz_vm *vm = lz_vm_get(L);
  if (vm && vm->depth > 0 && has_budget(vm)) hook_thread(vm, T);
}

void lz_vm_note_stop(lua_State *L) {
  lz_vm *vm = lz_vm_get(L);
  if (vm && vm->depth > 0 && has_budget(vm) && lz_vm_crossed(vm)) hook_thread(vm, L);
}

void lz_vm_check_resume(lua_State *L, lua_State *co) {
  lz_vm *vm = lz_vm_get(L);
  if (!vm || vm->depth == 0 || !has_budget(vm)) return;
  if (lz_vm_crossed(vm)) luaL_error(L, "%s", vm->why);
  hook_thread(vm, co);
}

zorch_state *lz_vm_enter(lz_vm *vm) {
  zorch_state *prev = zorch_state_swap(vm->state);
  if (vm->depth++ == 0) {
    vm->steps = 0;
    vm->exceeded = 0;
    vm->deadline = now_seconds() + vm->max_seconds;
    zorch_state_set_deadline(vm->state, vm->max_seconds > 0 ? vm->deadline : 0);
    lz_vm_hook(vm);
  }
  return prev;
}

void lz_vm_leave(lz_vm *vm, zorch_state *prev) {
  if (--vm->depth == 0) {
    zorch_state_set_deadline(vm->state, 0);
    if (vm->exceeded) {
      vm->exceeded = 0;
      lz_vm_hook(vm);
    }
  }
  zorch_state_swap(prev);
}

/* ---- paths ------------------------------------------------------------------------ */
/* Resolves path as opening it would: the whole path when it exists (symlinks
   followed), else its folder resolved plus its last name. false when neither
   resolves (a dangling symlink, a missing folder). */
static bool path_resolve(const char *path, char out[PATH_MAX]) {
  struct stat st;
  if (lstat(path, &st) == 0) return realpath(path, out) != NULL;
  if (errno != ENOENT) return false;
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return false;
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : dir;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) return false;
  char name[NAME_MAX + 1];
  if (snprintf(name, sizeof name, "%s", base) >= (int)sizeof name) return false;
  if (!slash) strcpy(dir, ".");
  else if (slash == dir) strcpy(dir, "/");
  else *slash = 0;
  char real[PATH_MAX];
  if (!realpath(dir, real)) return false;
  return snprintf(out, PATH_MAX, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", name) < PATH_MAX;
}

/* Whether a resolved path is one of the folders or inside one. */
static bool path_inside(const char *p, char *const *dirs) {
  for (; dirs && *dirs; dirs++) {
    size_t n = strlen(*dirs);
    if (strcmp(*dirs, "/") == 0 || (strncmp(p, *dirs, n) == 0 && (p[n] == 0 || p[n] == '/'))) return true;
  }
  return false;
}

int lz_sandboxed(lua_State *L) {
  lz_vm *vm = lz_vm_get(L);
  return vm && vm->sandbox;
}

int lz_path_allowed(lua_State *L, const char *path, int write) {
  lz_vm *vm = lz_vm_get(L);
  if (!vm || !vm->sandbox) return 1;
  char real[PATH_MAX];
  return path_resolve(path, real) && (path_inside(real, vm->write_dirs) || (!write && path_inside(real, vm->read_dirs)));
}

void lz_check_path(lua_State *L, const char *path, const char *access) {
  bool write = strcmp(access, "read") != 0;
  if (lz_path_allowed(L, path, write)) return;
  char shown[201];
  snprintf(shown, sizeof shown, "%s", path);
  luaL_error(L, "%s '%s': not allowed in this sandbox (scripts %s only in the folders the host allows)",
             write ? "writing" : "reading", shown, write ? "write" : "read");
}

void lz_refuse_in_sandbox(lua_State *L, const char *what) {
  if (lz_sandboxed(L)) luaL_error(L, "%s: not allowed in this sandbox (it changes the whole host process)", what);
}

/* ---- the io and os of the embedded modules ---------------------------------------- */
/* io.open(path, mode) once the path is allowed; upvalue 1: the real io.open */
static int io_open_checked(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  lz_check_path(L, path, strpbrk(mode, "wa+") ? "write" : "read");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* os.remove(path) / os.rename(from, to) once the paths may be written; upvalue 1: the real one */
static int os_files_checked(lua_State *L) {
  for (int i = 1; i <= lua_gettop(L); i++) lz_check_path(L, luaL_checkstring(L, i), "write");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int refuse_process(lua_State *L) {
  return luaL_error(L, "running programs and temporary files are not allowed in this sandbox");
}

static int no_env(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_pushnil(L);
  return 1;
}

/* Copies field k of the table at src into the table on top. */
static void copy_field(lua_State *L, int src, const char *k) {
  lua_getfield(L, src, k);
  lua_setfield(L, -2, k);
}

/* Sets field k of the table on top to a closure of fn over field k of src. */
static void wrap_field(lua_State *L, int src, const char *k, lua_CFunction fn) {
  lua_getfield(L, src, k);
  lua_pushcclosure(L, fn, 1);
  lua_setfield(L, -2, k);
}

void lz_push_module_io(lua_State *L) {
  lz_vm *vm = lz_vm_get(L);
  if (!vm || !vm->sandbox) {
    lua_getglobal(L, "io");
    lua_getglobal(L, "os");
    return;
  }
  /* the real libraries, never made global nor loaded as modules */
  lua_pushcfunction(L, luaopen_io);
  lua_call(L, 0, 1);
  int rio = lua_gettop(L);
  /* a Logger's file handles reach the script: their metatable must not take a __gc */
  luaL_getmetatable(L, LUA_FILEHANDLE);
  lz_protect_metatable(L);
  lua_pop(L, 1);
  lua_pushcfunction(L, luaopen_os);
  lua_call(L, 0, 1);
  int ros = lua_gettop(L);
  lua_createtable(L, 0, 8);
  wrap_field(L, rio, "open", io_open_checked);
  copy_field(L, rio, "stdout");
  copy_field(L, rio, "stderr");
  copy_field(L, rio, "type");
  lua_pushcfunction(L, refuse_process);
  lua_setfield(L, -2, "popen");
  lua_createtable(L, 0, 8);
  wrap_field(L, ros, "remove", os_files_checked);
  wrap_field(L, ros, "rename", os_files_checked);
  copy_field(L, ros, "time");
  copy_field(L, ros, "clock");
  copy_field(L, ros, "date");
  copy_field(L, ros, "difftime");
  lua_pushcfunction(L, no_env);
  lua_setfield(L, -2, "getenv");
  lua_pushcfunction(L, refuse_process);
  lua_setfield(L, -2, "execute");
  lua_pushcfunction(L, refuse_process);
  lua_setfield(L, -2, "tmpname");
  lua_pushcfunction(L, refuse_process);
  lua_setfield(L, -2, "exit");
  lua_replace(L, ros);
  lua_replace(L, rio);
}
