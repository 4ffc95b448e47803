/* The sandbox's budgets under random scripts: nests of coroutines, pcall,
   xpcall, metamethods and Lua callbacks run by C (table.sort's comparator,
   string.gsub's replacement, a DataLoader's dataset), around loops that never
   end, and loops of long ops (1500^3 matmuls). Every script must come back
   to the host with ZORCH_ERR_TIMEOUT within twice its time budget, and the VM
   must run the next entry. Seeds: a fixed
   list, then a few from the clock (printed, to replay one: ZORCH_FUZZ_SEED). */
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#define BUDGET_SECONDS 0.2

/* gen(seed) -> a script and its instruction budget (0: time only). */
static const char *generator =
    "local seed = ...\n"
    "math.randomseed(seed)\n"
    "local R = math.random\n"
    "local leaves = {\n"
    "  'while true do end',\n"
    "  'local x = 0 for i = 1, math.maxinteger do x = x + i end',\n"
    "  'while true do local _ = math.abs(-1) end',\n"
    "  'while true do local s = (\"a\"):rep(100) end',\n"
    "  'local a = zorch.ones(64, 64) while true do a = zorch.matmul(a, a) * 0 end',\n"
    "  'while true do local t <close> = zorch.ones(1000) end',\n"
    "  'local a = zorch.ones(1500, 1500) while true do local c <close> = zorch.matmul(a, a) end',\n"
    "  'local co = coroutine.wrap(function() while true do coroutine.yield() end end) while true do co() end',\n"
    "}\n"
    "local wraps = {\n"
    "  function(b) return 'while true do pcall(function() ' .. b .. ' end) end' end,\n"
    "  function(b) return 'while true do xpcall(function() ' .. b .. ' end, function() while true do end end) end' end,\n"
    "  function(b) return 'while true do xpcall(function() ' .. b .. ' end, function(e) return e end) end' end,\n"
    "  function(b) return 'local co = coroutine.create(function() ' .. b .. ' end) while true do coroutine.resume(co) end' end,\n"
    "  function(b) return 'local f = coroutine.wrap(function() ' .. b .. ' end) while true do pcall(f) end' end,\n"
    "  function(b) return 'local co = coroutine.wrap(function() coroutine.yield() ' .. b .. ' end) '\n"
    "    .. 'while true do pcall(co) pcall(co) end' end,\n"
    "  function(b) return 'local B = coroutine.create(function() ' .. b .. ' end) '\n"
    "    .. 'local A = coroutine.create(function() while true do pcall(coroutine.resume, B) '\n"
    "    .. 'pcall(function() ' .. b .. ' end) end end) while true do pcall(coroutine.resume, A) end' end,\n"
    "  function(b) return 'local t = setmetatable({}, {__index = function() ' .. b .. ' end}) '\n"
    "    .. 'while true do pcall(function() return t.x end) end' end,\n"
    "  function(b) return 'local t = setmetatable({}, {__add = function() ' .. b .. ' end, __lt = function() ' .. b .. ' end}) '\n"
    "    .. 'while true do pcall(function() return t + 1 end) pcall(function() return t < t end) end' end,\n"
    "  function(b) return 'while true do pcall(function() local c <close> = setmetatable({}, {__close = function() '\n"
    "    .. b .. ' end}) end) end' end,\n"
    "  function(b) return 'local t = {} for i = 1, 50 do t[i] = 51 - i end '\n"
    "    .. 'while true do pcall(table.sort, t, function(x, y) ' .. b .. ' end) end' end,\n"
    "  function(b) return 'while true do pcall(string.gsub, (\"a\"):rep(50), \"a\", function() ' .. b .. ' end) end' end,\n"
    "  function(b) return 'local ds = setmetatable({get = function(self, i) ' .. b .. ' end}, {__len = function() return 8 end}) '\n"
    "    .. 'local L = zorch.data.DataLoader(ds, {batch_size = 4}) '\n"
    "    .. 'while true do pcall(function() for x in L:iter() do end end) end' end,\n"
    "  function(b) return 'local function f(n) if n > 0 then return f(n - 1) end ' .. b .. ' end while true do pcall(f, 50) end' end,\n"
    "}\n"
    "local code = leaves[R(#leaves)]\n"
    "for _ = 1, R(1, 4) do code = wraps[R(#wraps)](code) end\n"
    "if R(4) == 1 then code = 'error(setmetatable({}, {__tostring = function() ' .. code .. ' end}))' end\n"
    "return code, R(2) == 1 and R(100000, 3000000) or 0\n";

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "Bail out! a budgeted script did not return to the host\n";
  if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* Runs the script of one seed in a fresh sandbox and checks how it ends. */
static void fuzz_one(lua_State *G, long long seed) {
  lua_settop(G, 0);
  lua_getglobal(G, "gen");
  lua_pushinteger(G, seed);
  if (lua_pcall(G, 1, 2, 0) != LUA_OK) {
    ok(0, "seed %lld: the generator fails: %s", seed, lua_tostring(G, -1));
    return;
  }
  const char *code = lua_tostring(G, 1);
  unsigned long long instr = (unsigned long long)lua_tointeger(G, 2);
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_instructions = instr, .max_seconds = BUDGET_SECONDS});
  if (!vm) {
    ok(0, "seed %lld: no VM: %s", seed, zorch_last_error());
    return;
  }
  double t0 = now();
  zorch_status st = zorch_vm_dostring(vm, code, "=fuzz");
  double took = now() - t0;
  ok(st == ZORCH_ERR_TIMEOUT && took < 2 * BUDGET_SECONDS,
     "seed %lld (%llu instructions, %g s): back in %.3f s with status %d", seed, instr, BUDGET_SECONDS, took, (int)st);
  if (st != ZORCH_ERR_TIMEOUT || took >= 2 * BUDGET_SECONDS) printf("# script: %s\n# error: %.300s\n", code, zorch_vm_error(vm));
  ok(zorch_vm_dostring(vm, "local x = 0 for i = 1, 100 do x = x + i end assert(x == 5050)", "=after") == ZORCH_OK,
     "seed %lld: the VM runs its next entry: %s", seed, zorch_vm_error(vm));
  zorch_vm_free(vm);
}

int main(void) {
  signal(SIGALRM, on_watchdog);
  alarm(60);
  lua_State *G = luaL_newstate();
  luaL_openlibs(G);
  if (luaL_loadstring(G, generator) != LUA_OK) return printf("Bail out! %s\n", lua_tostring(G, -1)), 1;
  lua_setglobal(G, "gen");
  const char *env = getenv("ZORCH_FUZZ_SEED");
  if (env) {
    fuzz_one(G, atoll(env));
  } else {
    static const long long fixed[] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) fuzz_one(G, fixed[i]);
    long long base = (long long)time(NULL);
    printf("# random seeds from %lld\n", base);
    for (int i = 0; i < 4; i++) fuzz_one(G, base + i);
  }
  lua_close(G);
  alarm(0);
  return done_testing();
}
