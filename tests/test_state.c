/* Per-VM state: each VM owns its default generator, grad mode and last error;
   the host's (the thread's) are its own too. */
#include "tap.h"

/* Runs `chunk` in vm, which must set the global `r` to a number; returns it. */
static double vm_number(zorch_vm *vm, const char *chunk) {
  if (zorch_vm_dostring(vm, chunk, "=t") != ZORCH_OK) {
    printf("# %s\n", zorch_vm_error(vm));
    return -1e300;
  }
  zorch_vm_dostring(vm, "rt = zorch.tensor({r}, {dtype = 'float64'})", "=t");
  zorch_vm_dostring(vm, "function get_r() return rt end", "=t");
  zorch_tensor *t = NULL;
  double v = -1e300;
  if (zorch_vm_call(vm, "get_r", 0, NULL, 1, &t) == ZORCH_OK && t) zorch_tensor_item(t, &v);
  zorch_tensor_free(t);
  return v;
}

int main(void) {
  zorch_vm *a = zorch_vm_new(NULL), *b = zorch_vm_new(NULL);
  ok(a && b, "two VMs start");
  uint64_t host_off = zorch_generator_offset(zorch_default_generator());

  vm_number(a, "zorch.manual_seed(7); r = 0");
  vm_number(b, "zorch.manual_seed(7); r = 0");
  double a1 = vm_number(a, "r = zorch.randn(1):item()");
  double b1 = vm_number(b, "r = zorch.randn(1):item()");
  double a2 = vm_number(a, "r = zorch.randn(1):item()");
  ok(a1 == b1 && a1 != a2, "each VM draws from its own default generator (%g %g %g)", a1, b1, a2);
  ok(zorch_generator_offset(zorch_default_generator()) == host_off,
     "the host's default generator is untouched by the VMs' draws");

  ok(vm_number(a, "zorch.set_grad_enabled(false); r = zorch.is_grad_enabled() and 1 or 0") == 0,
     "grad mode turned off in one VM");
  ok(vm_number(b, "r = zorch.is_grad_enabled() and 1 or 0") == 1, "stays on in another VM");
  ok(zorch_is_grad_enabled(), "and on the host");
  ok(vm_number(a, "r = zorch.is_grad_enabled() and 1 or 0") == 0, "and stays off in the first VM");

  zorch_clear_error();
  ok(zorch_vm_dostring(b, "error('in b')", "=t") != ZORCH_OK && strstr(zorch_last_error(), "in b"),
     "a VM's failure reaches the caller's last error");
  ok(zorch_vm_dostring(a, "x = 1", "=t") == ZORCH_OK && strstr(zorch_vm_error(b), "in b") &&
         strstr(zorch_last_error(), "in b"),
     "another VM's success leaves both the failed VM's error and the caller's");

  zorch_generator *g = zorch_default_generator();
  zorch_generator_free(g);
  ok(zorch_generator_offset(zorch_default_generator()) == host_off, "freeing the default generator is a no-op");
  zorch_vm_free(a);
  zorch_vm_free(b);
  ok(zorch_is_grad_enabled() && zorch_generator_offset(zorch_default_generator()) == host_off,
     "freeing VMs leaves the host's state as it was");
  return done_testing();
}
