/* The embedding API: run strings, call Lua functions with tensors in and out,
   the sandbox, the Lua heap limit, and errors that reach the host. */
#include <lauxlib.h>
#include <lualib.h>

#include "tap.h"

static int push_ones(lua_State *L) {
  zorch_push_tensor(L, zorch_ones(1, (int64_t[]){4}, ZORCH_F32, (zorch_device){ZORCH_CPU, 0}));
  return 1;
}

/* A host's own lua_State: zorch_push_tensor raises there until luaopen_zorch
   has run (and frees the tensor: ASan checks), then pushes tensors. */
static void host_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushcfunction(L, push_ones);
  int st = lua_pcall(L, 0, 1, 0);
  const char *msg = lua_tostring(L, -1);
  ok(st != LUA_OK && msg && strstr(msg, "not open"), "a push into a state without zorch raises: %s", msg);
  lua_settop(L, 0);
  luaL_requiref(L, "zorch", luaopen_zorch, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, push_ones);
  st = lua_pcall(L, 0, 1, 0);
  ok(st == LUA_OK && zorch_to_tensor(L, -1) && zorch_tensor_numel(zorch_to_tensor(L, -1)) == 4,
     "after luaopen_zorch the push gives a tensor");
  lua_setglobal(L, "t");
  st = luaL_dostring(L, "assert(zorch.sum(t * 2):item() == 8)");
  ok(st == LUA_OK, "the host state runs zorch: %s", st ? lua_tostring(L, -1) : "ok");
  lua_close(L);
}

int main(void) {
  host_state();
  zorch_vm *vm = zorch_vm_new(NULL);
  ok(vm != NULL, "a VM starts");
  ok(zorch_vm_dostring(vm, "function double(x) return x * 2, 'not a tensor' end", "=t") == ZORCH_OK,
     "a chunk defines a function");
  float buf[3] = {1, 2, 3};
  zorch_tensor *x = zorch_tensor_wrap(buf, ZORCH_F32, 1, (int64_t[]){3}, NULL);
  zorch_tensor *outs[2] = {NULL, NULL};
  ok(zorch_vm_call(vm, "double", 1, &x, 2, outs) == ZORCH_OK && outs[0] && at(outs[0], 2) == 6 && outs[1] == NULL,
     "vm_call passes a wrapped buffer in and gets a tensor back");
  buf[0] = 10;
  zorch_tensor *again = NULL;
  ok(zorch_vm_call(vm, "double", 1, &x, 1, &again) == ZORCH_OK && at(again, 0) == 20,
     "the wrapped buffer is shared, not copied");
  ok(zorch_vm_call(vm, "missing", 0, NULL, 0, NULL) != ZORCH_OK && strstr(zorch_vm_error(vm), "missing"),
     "calling a missing function is an error naming it");
  ok(zorch_vm_dostring(vm, "error('bad thing')", "=t") != ZORCH_OK && strstr(zorch_vm_error(vm), "bad thing") &&
         strstr(zorch_vm_error(vm), "traceback"),
     "a Lua error reaches the host with a traceback");
  ok(zorch_vm_dostring(vm, "local t = zorch.ones(2) + zorch.ones(3)", "=t") != ZORCH_OK &&
         strstr(zorch_vm_error(vm), "(2,)") && strstr(zorch_vm_error(vm), "(3,)"),
     "a zorch error reaches the host with the shapes");
  ok(zorch_vm_dofile(vm, "/nonexistent.lua") != ZORCH_OK && strstr(zorch_vm_error(vm), "nonexistent"),
     "a missing file is an error");
  ok(zorch_vm_dostring(vm, "assert(io and os and require('zorch') == zorch)", "=t") == ZORCH_OK,
     "an unsandboxed VM has the standard library");
  zorch_vm_free(vm);

  zorch_vm *sb = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .mem_limit = 2 << 20});
  ok(sb != NULL, "a sandboxed VM with a 2 MiB Lua heap starts");
  ok(zorch_vm_dostring(sb, "assert(io == nil and os == nil and package == nil and debug == nil and dofile == nil)", "=t") == ZORCH_OK,
     "the sandbox has no io, os, package, debug or dofile");
  ok(zorch_vm_dostring(sb, "local z = require 'zorch'; assert(z.ones(2):sum():item() == 2)", "=t") == ZORCH_OK,
     "require gives zorch in the sandbox");
  ok(zorch_vm_dostring(sb, "assert(require 'zorch.nn' == zorch.nn and require 'zorch.engine' == true)", "=t") == ZORCH_OK,
     "and its modules: require 'zorch.nn'");
  ok(zorch_vm_dostring(sb, "require 'os'", "=t") != ZORCH_OK && zorch_vm_dostring(sb, "require 'zorch.os'", "=t") != ZORCH_OK,
     "and nothing else");
  ok(zorch_vm_dostring(sb, "load(string.dump(function() end))()", "=t") != ZORCH_OK, "binary chunks are refused");
  ok(zorch_vm_dostring(sb, "local t = {} for i = 1, 1e7 do t[i] = i end", "=t") == ZORCH_ERR_OOM &&
         strstr(zorch_vm_error(sb), "memory limit"),
     "the heap limit becomes an error: %s", zorch_vm_error(sb));
  ok(zorch_vm_dostring(sb, "x = 1 + 1", "=t") == ZORCH_OK, "the VM keeps working after hitting the limit");
  zorch_vm_free(sb);

  /* a hook a VM put on a host tensor does not outlive the VM */
  zorch_tensor *w = zorch_ones(1, (int64_t[]){3}, ZORCH_F32, (zorch_device){ZORCH_CPU, 0});
  zorch_set_requires_grad(w, true);
  zorch_vm *hv = zorch_vm_new(NULL);
  ok(zorch_vm_dostring(hv, "function hook(w) w:register_hook(function(t) seen = (seen or 0) + 1; "
                           "grad_on = zorch.is_grad_enabled() end) end", "=t") == ZORCH_OK &&
         zorch_vm_call(hv, "hook", 1, &w, 0, NULL) == ZORCH_OK,
     "a VM puts a hook on a host tensor");
  zorch_tensor *loss = zorch_sum(w, 0, NULL, false);
  ok(zorch_backward(loss, NULL, false) == ZORCH_OK && zorch_vm_dostring(hv, "assert(seen == 1 and grad_on == false)", "=t") == ZORCH_OK,
     "a backward from the host runs it in the VM, grad mode off: %s", zorch_vm_error(hv));
  zorch_tensor_free(loss);
  zorch_vm_free(hv);
  loss = zorch_sum(w, 0, NULL, false);
  ok(zorch_backward(loss, NULL, false) == ZORCH_OK, "after the VM is freed the tensor's backward runs without its hook");
  zorch_tensor_free(loss);
  zorch_tensor_free(w);

  /* many results */
  zorch_vm *mv = zorch_vm_new(NULL);
  ok(zorch_vm_dostring(mv, "function many() local t = {} for i = 1, 300 do t[i] = zorch.ones(1) end "
                           "return table.unpack(t) end", "=t") == ZORCH_OK, "a function with 300 results");
  zorch_tensor *many[300];
  ok(zorch_vm_call(mv, "many", 0, NULL, 300, many) == ZORCH_OK && many[299] && at(many[299], 0) == 1,
     "vm_call takes 300 results: %s", zorch_vm_error(mv));
  for (int i = 0; i < 300; i++) zorch_tensor_free(many[i]);
  /* past a short's range: Lua's call keeps a fixed result count in one */
  zorch_tensor **wide = calloc(40000, sizeof *wide);
  ok(wide && zorch_vm_call(mv, "many", 0, NULL, 40000, wide) == ZORCH_OK && wide[299] && !wide[300] && !wide[39999],
     "vm_call takes 40000 results of a function returning 300: %s", zorch_vm_error(mv));
  for (int i = 0; wide && i < 40000; i++) zorch_tensor_free(wide[i]);
  ok(zorch_vm_dostring(mv, "function lots() local t = {} for i = 1, 40000 do t[i] = zorch.ones(1) end "
                           "return table.unpack(t) end", "=t") == ZORCH_OK &&
         wide && zorch_vm_call(mv, "lots", 0, NULL, 40000, wide) == ZORCH_OK && wide[39999] && at(wide[39999], 0) == 1,
     "and 40000 results of a function returning 40000: %s", zorch_vm_error(mv));
  for (int i = 0; wide && i < 40000; i++) zorch_tensor_free(wide[i]);
  free(wide);
  zorch_tensor **huge = calloc(2000000, sizeof *huge);
  ok(zorch_vm_call(mv, "many", 0, NULL, 2000000, huge) == ZORCH_ERR_ARG && strstr(zorch_vm_error(mv), "results") &&
         strstr(zorch_last_error(), "results"),
     "more results than a Lua call returns is an error: %s", zorch_vm_error(mv));
  ok(zorch_vm_call(mv, "many", 0, NULL, 300, many) == ZORCH_OK, "and the VM runs the next call");
  for (int i = 0; i < 300; i++) zorch_tensor_free(many[i]);
  free(huge);
  zorch_vm_free(mv);

  /* the Lua heap limit hit anywhere in a call leaks nothing (ASan checks) */
  int passed = 0;
  for (size_t lim = 160 << 10; lim < (3u << 20) && !passed; lim += 4096) {
    zorch_vm *lv = zorch_vm_new(&(zorch_vm_opts){.mem_limit = lim});
    if (!lv) continue;
    zorch_tensor *r[3] = {NULL, NULL, NULL};
    if (zorch_vm_dostring(lv, "function f(x) local t = {} for i = 1, 2000 do t[i] = x + 1 end return x * 2, x + 1, t[1] end", "=t") == ZORCH_OK &&
        zorch_vm_call(lv, "f", 1, &x, 3, r) == ZORCH_OK)
      passed = 1;
    for (int i = 0; i < 3; i++) zorch_tensor_free(r[i]);
    zorch_vm_free(lv);
  }
  ok(passed, "calls under growing heap limits fail cleanly, then pass");
  zorch_tensor_free(x);
  zorch_tensor_free(outs[0]);
  zorch_tensor_free(again);
  return done_testing();
}
