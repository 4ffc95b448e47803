/* The sandbox of the embedding API: every way out a script could try is
   refused (files outside the allowed folders, private helpers, the standard
   library's io and os, binary chunks, runaway loops, tensor memory), allowed
   folders work, and the lifetimes of what a VM leaves on host tensors. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

static char root[PATH_MAX], inside[PATH_MAX + 8], outside[PATH_MAX + 8], lua[4 * PATH_MAX];

/* Runs a chunk with root, inside and outside as globals; the status. */
static zorch_status run(zorch_vm *vm, const char *chunk) {
  snprintf(lua, sizeof lua, "ROOT, IN, OUT = [[%s]], [[%s]], [[%s]]\n%s", root, inside, outside, chunk);
  return zorch_vm_dostring(vm, lua, "=t");
}

static bool exists(const char *dir, const char *name) {
  char p[2 * PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  struct stat st;
  return stat(p, &st) == 0;
}

static void write_file(const char *dir, const char *name, const char *text) {
  char p[2 * PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fputs(text, f), fclose(f);
}

static const char *refused(zorch_vm *vm, const char *chunk) {
  return run(vm, chunk) != ZORCH_OK && strstr(zorch_vm_error(vm), "not allowed") ? "yes" : zorch_vm_error(vm);
}
#define REFUSED(vm, chunk, what) \
  do { \
    const char *r = refused(vm, chunk); \
    ok(strcmp(r, "yes") == 0, "refused: %s (%s)", what, r); \
  } while (0)

static void test_files(void) {
  const char *allow[] = {inside, NULL};
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .allow_write = allow});
  ok(vm != NULL, "a sandbox with one writable folder starts");
  write_file(outside, "secret.csv", "1,2\n3,4\n");
  write_file(outside, "keep", "x");
  char link[2 * PATH_MAX];
  snprintf(link, sizeof link, "%s/link", inside);
  ok(symlink(outside, link) == 0, "a symlink from the allowed folder out of it");

  ok(run(vm, "zorch._write_atomic(OUT .. '/w', 'x')") != ZORCH_OK && strstr(zorch_vm_error(vm), "nil value"),
     "_write_atomic is not reachable");
  ok(run(vm, "zorch._remove_dir(OUT)") != ZORCH_OK && run(vm, "zorch._mkdir(OUT .. '/made')") != ZORCH_OK &&
         run(vm, "zorch._file_hash('/etc/passwd')") != ZORCH_OK && run(vm, "zorch.data._read_csv(OUT .. '/secret.csv')") != ZORCH_OK,
     "nor _remove_dir, _mkdir, _file_hash, a private read_csv");
  REFUSED(vm, "local z = require 'zorch'; for k in pairs(z) do assert(k:sub(1, 1) ~= '_', k) end "
              "for _, m in ipairs{'nn', 'optim', 'data'} do for k in pairs(z[m]) do assert(type(k) ~= 'string' or "
              "k:sub(1, 1) ~= '_', m .. '.' .. k) end end error('not allowed: none found')",
          "no name starting with _ in zorch");
  ok(run(vm, "assert(zorch._remove_dir == nil and zorch._mkdir == nil and zorch._file_hash == nil and "
             "zorch._write_atomic == nil and zorch._read_csv == nil)") == ZORCH_OK,
     "private helpers are not on zorch: %s", zorch_vm_error(vm));
  REFUSED(vm, "zorch.data.read_csv(OUT .. '/secret.csv')", "read_csv outside");
  REFUSED(vm, "zorch.data.load_npy(OUT .. '/x.npy')", "load_npy outside");
  REFUSED(vm, "zorch.load('/etc/passwd')", "zorch.load('/etc/passwd')");
  ok(!strstr(zorch_vm_error(vm), "root:") && !strstr(zorch_vm_error(vm), "nologin"),
     "the message holds no bytes of the file");
  REFUSED(vm, "zorch.load('/nonexistent/file')", "a missing file outside: the same answer");
  REFUSED(vm, "zorch.save({a = zorch.ones(2)}, OUT .. '/w.safetensors')", "zorch.save outside");
  REFUSED(vm, "zorch.fs.write_atomic(OUT .. '/w', 'x')", "zorch.fs.write_atomic outside");
  REFUSED(vm, "zorch.fs.mkdir(OUT .. '/made', true)", "zorch.fs.mkdir outside");
  REFUSED(vm, "zorch.load(IN .. '/../' .. OUT:match('[^/]+$') .. '/keep')", "reading through ..");
  REFUSED(vm, "zorch.save({a = zorch.ones(2)}, IN .. '/../w.safetensors')", "writing through ..");
  REFUSED(vm, "zorch.data.read_csv(IN .. '/link/secret.csv')", "reading through a symlink");
  REFUSED(vm, "zorch.save({a = zorch.ones(2)}, IN .. '/link/w.safetensors')", "writing through a symlink");
  REFUSED(vm, "local L = zorch.Logger{csv = OUT .. '/log.csv'} L:log(1, {a = 1})",
          "a Logger file outside");
  ok(!exists(outside, "w") && !exists(outside, "w.safetensors") && !exists(outside, "log.csv") && exists(outside, "keep"),
     "nothing was written or removed outside");
  ok(run(vm, "assert(io == nil and os == nil and debug == nil and package == nil and string.dump == nil)") == ZORCH_OK,
     "no io, os, debug, package, string.dump");
  ok(run(vm, "require 'io'") != ZORCH_OK && run(vm, "require 'debug'") != ZORCH_OK &&
         run(vm, "require 'zorch.private'") != ZORCH_OK,
     "require of other modules is refused");
  ok(run(vm, "assert(load('\\27Lua'))") != ZORCH_OK && strstr(zorch_vm_error(vm), "binary"), "binary chunks are refused");
  ok(run(vm, "collectgarbage('stop')") != ZORCH_OK && run(vm, "collectgarbage('incremental', 0, 0)") != ZORCH_OK &&
         run(vm, "collectgarbage(); assert(collectgarbage('count') > 0)") == ZORCH_OK,
     "collectgarbage cannot stop or retune the collector; collect and count work");
  ok(run(vm, "assert(getmetatable('').__index == string and string.dump == nil)") == ZORCH_OK,
     "the string metatable gives no dump either");

  /* the allowed folder works */
  ok(run(vm, "zorch.save({a = zorch.ones(3)}, IN .. '/m.safetensors'); assert(zorch.load(IN .. '/m.safetensors').a:sum():item() == 3)") == ZORCH_OK,
     "save and load inside the allowed folder: %s", zorch_vm_error(vm));
  ok(run(vm, "local L = zorch.Logger{csv = IN .. '/log.csv'} L:log(1, {a = 1}) L:close()") == ZORCH_OK &&
         exists(inside, "log.csv"),
     "a Logger writes inside: %s", zorch_vm_error(vm));
  write_file(inside, "d.csv", "1,2\n3,4\n");
  ok(run(vm, "assert(zorch.data.read_csv(IN .. '/d.csv'):sum():item() == 10)") == ZORCH_OK, "read_csv inside: %s",
     zorch_vm_error(vm));
  zorch_vm_free(vm);

  const char *ro[] = {inside, NULL};
  vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .allow_read = ro});
  ok(run(vm, "assert(zorch.load(IN .. '/m.safetensors').a:sum():item() == 3)") == ZORCH_OK,
     "a read-only folder reads: %s", zorch_vm_error(vm));
  REFUSED(vm, "zorch.save({a = zorch.ones(2)}, IN .. '/x.safetensors')", "writing in a read-only folder");
  zorch_vm_free(vm);
  const char *bad[] = {"/nonexistent-folder-for-zorch", NULL};
  ok(zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .allow_read = bad}) == NULL && error_has("does not resolve"),
     "an allowed folder that does not exist is an error");
}

static void test_budget(void) {
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_instructions = 2000000});
  ok(vm != NULL, "a VM with an instruction budget starts");
  ok(run(vm, "while true do end") == ZORCH_ERR_TIMEOUT && strstr(zorch_vm_error(vm), "instruction limit"),
     "while true do end stops: %s", zorch_vm_error(vm));
  ok(run(vm, "x = 0 for i = 1, 1000 do x = x + i end assert(x == 500500)") == ZORCH_OK, "and the VM is usable after");
  ok(run(vm, "while true do pcall(function() while true do end end) end") == ZORCH_ERR_TIMEOUT,
     "a pcall around the loop does not swallow the stop");
  ok(run(vm, "while true do local ok = xpcall(function() while true do end end, function() while true do end end) end") ==
         ZORCH_ERR_TIMEOUT,
     "nor xpcall with a looping handler");
  ok(run(vm, "while true do local co = coroutine.create(function() while true do end end) coroutine.resume(co) end") ==
         ZORCH_ERR_TIMEOUT,
     "nor coroutines");
  ok(run(vm, "co = coroutine.wrap(function() while true do coroutine.yield() end end)") == ZORCH_OK &&
         run(vm, "while true do pcall(co) end") == ZORCH_ERR_TIMEOUT,
     "a coroutine made in an earlier entry counts too");
  ok(run(vm, "setmetatable({}, {__gc = function() while true do end end})") != ZORCH_OK &&
         strstr(zorch_vm_error(vm), "__gc"),
     "finalizers written in Lua (run with hooks off) are refused");
  ok(run(vm, "local t = setmetatable({}, {__index = {a = 1}}) assert(t.a == 1)") == ZORCH_OK, "other metatables work");
  ok(run(vm, "function spin() while true do end end") == ZORCH_OK, "a looping function");
  ok(zorch_vm_call(vm, "spin", 0, NULL, 0, NULL) == ZORCH_ERR_TIMEOUT, "vm_call stops too");
  zorch_vm_free(vm);

  vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_seconds = 0.2});
  ok(run(vm, "while true do end") == ZORCH_ERR_TIMEOUT && strstr(zorch_vm_error(vm), "time limit"),
     "a time budget stops the loop: %s", zorch_vm_error(vm));
  ok(run(vm, "x = 1") == ZORCH_OK, "and the next entry has its own time");
  zorch_vm_free(vm);
}

/* A test that would hang fails instead. */
static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "Bail out! a budgeted entry did not return to the host\n";
  if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* The budget crossed inside coroutine B, resumed by coroutine A, which
   catches each "limit reached" with pcall and loops: every thread raises
   again, so the entry still returns. */
static void test_budget_nested_coroutines(void) {
  static const char *escape =
      "local B = coroutine.create(function() while true do end end) "
      "local A = coroutine.create(function() coroutine.resume(B) "
      "  while true do pcall(function() while true do end end) end end) "
      "while true do pcall(coroutine.resume, A) end";
  static const char *escape_wrap =
      "local A = coroutine.wrap(function() local B = coroutine.wrap(function() while true do end end) "
      "  pcall(B) while true do pcall(function() local x = 0 for i = 1, 1e12 do x = x + i end end) end end) "
      "A()";
  static const char *resume_after =
      "local C = coroutine.create(function() while true do coroutine.yield() end end) "
      "local B = coroutine.create(function() while true do end end) "
      "while true do pcall(coroutine.resume, B) local ok, msg = pcall(coroutine.resume, C) "
      "  if not ok then CAUGHT = msg end end";
  signal(SIGALRM, on_watchdog);
  alarm(30);
  zorch_vm_opts opts[] = {{.sandbox = 1, .max_instructions = 100000000, .max_seconds = 2},
                          {.sandbox = 1, .max_instructions = 1000000, .max_seconds = 1}};
  for (int i = 0; i < 2; i++) {
    zorch_vm *vm = zorch_vm_new(&opts[i]);
    ok(run(vm, escape) == ZORCH_ERR_TIMEOUT, "budget %llu/%gs: a coroutine A catching B's stop with pcall still stops: %s",
       opts[i].max_instructions, opts[i].max_seconds, zorch_vm_error(vm));
    ok(run(vm, escape_wrap) == ZORCH_ERR_TIMEOUT, "and with coroutine.wrap: %s", zorch_vm_error(vm));
    ok(run(vm, "x = 0 for i = 1, 1000 do x = x + i end assert(x == 500500)") == ZORCH_OK, "the next entry runs: %s",
       zorch_vm_error(vm));
    zorch_vm_free(vm);
  }
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_instructions = 1000000});
  ok(run(vm, resume_after) == ZORCH_ERR_TIMEOUT, "a coroutine resumed after the stop: %s", zorch_vm_error(vm));
  ok(run(vm, "co = coroutine.wrap(function() while true do coroutine.yield() end end) co()") == ZORCH_OK &&
         run(vm, "while true do co() end") == ZORCH_ERR_TIMEOUT && run(vm, "for i = 1, 20000 do co() end") == ZORCH_OK,
     "a coroutine of an entry that overran runs under the next entry's fresh budget: %s", zorch_vm_error(vm));
  zorch_vm_free(vm);
  alarm(0);
}

/* One long C op (a fill of 1 GiB, a 4000x4000 matmul) stops at the time
   limit between its chunks, not when it is done; a pcall around it does not
   keep the script going. */
static void test_budget_long_ops(void) {
  alarm(30);
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_seconds = 0.05});
  ok(run(vm, "local t = zorch.full({16384, 16384}, 1.5)") == ZORCH_ERR_TIMEOUT &&
         strstr(zorch_vm_error(vm), "stopped"),
     "a 1 GiB fill stops inside the op: %.80s", zorch_vm_error(vm));
  zorch_vm_free(vm);
  vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .max_seconds = 0.15});
  ok(run(vm, "local a = zorch.ones(4000, 4000) local c = zorch.matmul(a, a)") == ZORCH_ERR_TIMEOUT &&
         strstr(zorch_vm_error(vm), "matmul") && strstr(zorch_vm_error(vm), "stopped"),
     "a 4000x4000 matmul stops between its panels: %.80s", zorch_vm_error(vm));
  /* past the deadline the stopped op's error crosses the budget at once: the
     loop does not redo the op's set-up (its output's 64 MB) until the hook's
     next count; bound: the budget and one panel, on a loaded machine */
  ok(run(vm, "A = zorch.ones(4000, 4000)") == ZORCH_OK, "a 4000x4000 operand");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  zorch_status st = run(vm, "while true do pcall(zorch.matmul, A, A) end");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ok(st == ZORCH_ERR_TIMEOUT && took < 0.6, "a pcall around it does not keep the script going (%.2f s of 0.15): %.80s",
     took, zorch_vm_error(vm));
  ok(run(vm, "A = nil collectgarbage()") == ZORCH_OK, "the operand freed");
  ok(run(vm, "local a = zorch.ones(300, 300) assert(zorch.matmul(a, a)[1][1]:item() == 300)") == ZORCH_OK,
     "the next entry's ops run: %s", zorch_vm_error(vm));
  zorch_vm_free(vm);
  alarm(0);
}

static void test_tensor_limit(void) {
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .tensor_limit = 1 << 20});
  ok(run(vm, "local t = zorch.zeros(1000, 1000)") != ZORCH_OK && strstr(zorch_vm_error(vm), "tensor memory limit"),
     "a tensor past the limit is refused: %s", zorch_vm_error(vm));
  ok(run(vm, "for i = 1, 100 do local t <close> = zorch.zeros(100, 1000) end") == ZORCH_OK,
     "freed tensors give their bytes back: %s", zorch_vm_error(vm));
  ok(run(vm, "keep = zorch.zeros(200, 1000)") == ZORCH_OK && run(vm, "local b = zorch.zeros(100, 1000)") != ZORCH_OK,
     "held tensors count");
  ok(run(vm, "function make() return zorch.ones(4) end") == ZORCH_OK, "a function making a tensor");
  zorch_tensor *out = NULL;
  ok(zorch_vm_call(vm, "make", 0, NULL, 1, &out) == ZORCH_OK && out, "a tensor made by the VM");
  zorch_tensor *host = zorch_zeros(1, (int64_t[]){1 << 20}, ZORCH_F32, CPU);
  ok(host != NULL, "the host's own allocations are not counted");
  zorch_vm_free(vm);
  ok(at(out, 0) == 1, "a VM's tensor outlives the VM");
  zorch_tensor_free(out);
  zorch_tensor_free(host);
}

/* A sandbox's mem_limit bounds the Lua heap and tensors together unless
   tensor_limit is given; outside a sandbox it is the Lua heap's alone. */
static void test_mem_limit_covers_tensors(void) {
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .mem_limit = 64 << 20});
  ok(run(vm, "local t = zorch.zeros(8192, 8192)") != ZORCH_OK && strstr(zorch_vm_error(vm), "memory limit"),
     "a sandbox with mem_limit 64 MiB refuses a 256 MiB tensor: %.100s", zorch_vm_error(vm));
  ok(run(vm, "keep = zorch.zeros(10 << 20)") == ZORCH_OK, "a 40 MiB tensor fits: %s", zorch_vm_error(vm));
  ok(run(vm, "local t = {} for i = 1, 2e6 do t[i] = i end") == ZORCH_ERR_OOM &&
         strstr(zorch_vm_error(vm), "Lua heap and tensors"),
     "and then a 32 MiB Lua table does not: the two share the limit: %s", zorch_vm_error(vm));
  ok(run(vm, "keep = nil collectgarbage() local t = {} for i = 1, 2e6 do t[i] = i end") == ZORCH_OK,
     "the tensor's bytes come back when it is freed: %s", zorch_vm_error(vm));
  zorch_vm_free(vm);
  vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .mem_limit = 64 << 20, .tensor_limit = 512 << 20});
  ok(run(vm, "local t = zorch.zeros(8192, 8192)") == ZORCH_OK, "tensor_limit says otherwise: %s", zorch_vm_error(vm));
  zorch_vm_free(vm);
  vm = zorch_vm_new(&(zorch_vm_opts){.mem_limit = 64 << 20});
  ok(run(vm, "local t = zorch.zeros(8192, 8192)") == ZORCH_OK, "outside a sandbox mem_limit is the Lua heap's: %s",
     zorch_vm_error(vm));
  zorch_vm_free(vm);
}

static int host_hook_calls;
static zorch_status host_hook(zorch_tensor *leaf, void *ud) {
  (void)leaf, (void)ud;
  host_hook_calls++;
  return ZORCH_OK;
}

/* What a hostile script reaches beyond the file functions: metatables,
   classes it can extend, the host's hooks, process-wide settings, MPI. */
static void test_hostile(void) {
  const char *allow[] = {inside, NULL};
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .allow_write = allow, .max_instructions = 20000000,
                                               .tensor_limit = 1 << 20});
  ok(run(vm, "local mt = getmetatable(zorch.ones(1)) assert(mt.__name == 'zorch.Tensor' and mt.__gc == nil) "
             "mt.__gc = function() while true do end end local t = zorch.ones(2)") == ZORCH_OK,
     "a tensor's metatable is not reachable: %s", zorch_vm_error(vm));
  ok(run(vm, "assert(getmetatable(zorch.ones(2).shape).__tostring == nil and getmetatable(zorch.Generator(1)).__gc == nil)") == ZORCH_OK,
     "nor a shape's or a generator's: %s", zorch_vm_error(vm));
  ok(run(vm, "local C = zorch.nn.Module:extend('Spin') C.__gc = function() while true do end end C()") != ZORCH_OK &&
         strstr(zorch_vm_error(vm), "__gc"),
     "a class with a looping __gc: refused by the modules' setmetatable too (%s)", zorch_vm_error(vm));
  ok(run(vm, "local L = zorch.Logger{jsonl = IN .. '/h.jsonl'} local mt = getmetatable(L.jsonl) "
             "assert(mt.__gc == nil and mt.__index == nil) L:close()") == ZORCH_OK,
     "a Logger's file handle shows no metatable either: %s", zorch_vm_error(vm));
  ok(run(vm, "ran = false local x = zorch.ones(1, 4, 4) "
             "local size = setmetatable({}, {__len = function() ran = true return 2 end, __index = function() ran = true return 2 end}) "
             "pcall(zorch.adaptive_avg_pool2d, x, size) pcall(zorch.cat, size) "
             "pcall(zorch.conv2d, x:view(1, 1, 4, 4), zorch.ones(1, 1, 3, 3), nil, size) assert(not ran)") == ZORCH_OK,
     "the bindings read a script's tables raw: no __index or __len runs inside them (%s)", zorch_vm_error(vm));
  ok(run(vm, "for i = 1, 50 do local t = zorch.zeros(10000) t.grad = t local a, b = zorch.zeros(10000), zorch.zeros(10000) "
             "a.grad = b b.grad = a end collectgarbage() collectgarbage() local big = zorch.zeros(200, 1000)") == ZORCH_OK,
     "t.grad = t and a.grad = b, b.grad = a hold no cycle: their memory comes back (%s)", zorch_vm_error(vm));
  ok(run(vm, "local big = zorch.zeros(190, 1000)") == ZORCH_OK &&
         run(vm, "for i = 1, 100 do local t = zorch.zeros(10000) end") == ZORCH_OK,
     "a dropped tensor of most of tensor_limit does not refuse the next script's small ones (%s)", zorch_vm_error(vm));
  ok(run(vm, "local a = zorch.zeros(200, 1000) a = nil local b = zorch.zeros(200, 1000) b = nil "
             "local c = zorch.zeros(200, 1000)") == ZORCH_OK,
     "nor a script's own: its dropped tensors are collected before its next one is refused (%s)", zorch_vm_error(vm));
  ok(run(vm, "local a = zorch.zeros(200, 1000) local b = zorch.zeros(200, 1000)") != ZORCH_OK &&
         strstr(zorch_vm_error(vm), "tensor memory limit"),
     "tensors still held count: two of 800 KB pass a 1 MiB limit (%s)", zorch_vm_error(vm));
  ok(run(vm, "Y = zorch.ones(1, {requires_grad = true}) for i = 1, 1000000 do Y = Y:view(1) end") != ZORCH_OK &&
         strstr(zorch_vm_error(vm), "tensor memory limit"),
     "a chain of views counts against tensor_limit (%s)", zorch_vm_error(vm));
  ok(run(vm, "Y = nil collectgarbage() local t = zorch.zeros(100, 1000)") == ZORCH_OK, "and gives it back");
  ok(run(vm, "local L = zorch.Logger{tensorboard = IN .. '/runs/a/b'} L:log(1, {x = 1}) L:close()") == ZORCH_OK,
     "a Logger's absolute tensorboard folder, two levels new, inside: %s", zorch_vm_error(vm));
  char probe[2][2 * PATH_MAX + 64];
  for (int i = 0; i < 2; i++) {
    snprintf(lua, sizeof lua, "ROOT, IN, OUT = [[%s]], [[%s]], [[%s]]\nzorch.Logger{tensorboard = OUT .. '/%s/new'}", root,
             inside, outside, i ? "missing" : ".");
    ok(zorch_vm_dostring(vm, lua, "=t") != ZORCH_OK, "a tensorboard folder outside is refused");
    snprintf(probe[i], sizeof probe[i], "%s", zorch_vm_error(vm));
    char *at = strstr(probe[i], "/new");
    if (at) memmove(strstr(probe[i], outside), at, strlen(at) + 1); /* the path's start differs, by design */
  }
  ok(strcmp(probe[0], probe[1]) == 0, "the same answer whether the folders above exist or not");
  ok(run(vm, "zorch.set_num_threads(2)") != ZORCH_OK && strstr(zorch_vm_error(vm), "not allowed"),
     "set_num_threads, a setting of the whole process, is refused");
  setenv("SLURM_NTASKS", "2", 1);
  ok(run(vm, "assert(zorch.dist.world():size() == 1) local e = zorch.Engine{comm_timeout = 0} assert(e.world_size == 1)") ==
         ZORCH_OK,
     "a launcher's environment does not make a sandbox a rank of MPI: %s", zorch_vm_error(vm));
  unsetenv("SLURM_NTASKS");

  /* a host tensor with the host's own hook: the script neither replaces nor removes it */
  zorch_tensor *x = zorch_ones(SHAPE(3), ZORCH_F32, CPU);
  zorch_set_requires_grad(x, true);
  zorch_set_grad_hook(x, host_hook, NULL);
  ok(run(vm, "function touch(x) x:register_hook(nil) end function swap(x) x:register_hook(function() end) end") ==
         ZORCH_OK,
     "functions that touch a host tensor's hook");
  ok(zorch_vm_call(vm, "touch", 1, &x, 0, NULL) != ZORCH_OK && strstr(zorch_vm_error(vm), "host"),
     "removing the host's hook is refused: %s", zorch_vm_error(vm));
  ok(zorch_vm_call(vm, "swap", 1, &x, 0, NULL) != ZORCH_OK, "so is replacing it");
  zorch_vm_free(vm);
  zorch_tensor *l = zorch_sum(x, 0, NULL, false);
  host_hook_calls = 0;
  ok(l && zorch_backward(l, NULL, false) == ZORCH_OK && host_hook_calls == 1, "the host's hook still runs");
  zorch_tensor_free(l);
  zorch_tensor_free(x);
}

int main(void) {
  char tmpl[] = "/tmp/zorch-sandbox-XXXXXX";
  if (!mkdtemp(tmpl) || !realpath(tmpl, root)) return printf("Bail out! no temporary folder\n"), 1;
  snprintf(inside, sizeof inside, "%s/in", root);
  snprintf(outside, sizeof outside, "%s/out", root);
  mkdir(inside, 0700);
  mkdir(outside, 0700);
  test_files();
  test_budget();
  test_budget_nested_coroutines();
  test_budget_long_ops();
  test_tensor_limit();
  test_mem_limit_covers_tensors();
  test_hostile();
  char cmd[2 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) printf("# could not remove %s\n", root);
  return done_testing();
}
