/* host.c: a C program that embeds zorch: it runs a Lua model script in a
   sandboxed VM, hands it a host buffer as a tensor without copying, and reads
   the result back.
   Build: cc host.c $(pkg-config --cflags --libs zorch) -o host
   Run:   ./host model.lua */
#include <stdio.h>
#include <stdlib.h>
#include <zorch.h>

int main(int argc, char **argv) {
  const char *script = argc > 1 ? argv[1] : "model.lua";
  zorch_vm *vm = zorch_vm_new(&(zorch_vm_opts){.sandbox = 1, .mem_limit = 64 << 20});
  if (!vm) {
    fprintf(stderr, "host: %s\n", zorch_last_error());
    return 1;
  }
  if (zorch_vm_dofile(vm, script) != ZORCH_OK) {
    fprintf(stderr, "host: %s\n", zorch_vm_error(vm));
    zorch_vm_free(vm);
    return 1;
  }
  float input[2][4] = {{1, 2, 3, 4}, {-1, 0, 1, 2}};
  zorch_tensor *x = zorch_tensor_wrap(input, ZORCH_F32, 2, (int64_t[]){2, 4}, NULL);
  zorch_tensor *y = NULL;
  if (!x || zorch_vm_call(vm, "predict", 1, &x, 1, &y) != ZORCH_OK || !y) {
    fprintf(stderr, "host: %s\n", zorch_vm_error(vm));
    zorch_tensor_free(x);
    zorch_vm_free(vm);
    return 1;
  }
  char *text = zorch_tensor_format(y);
  printf("predict(x) = %s\n", text ? text : "?");
  free(text);
  zorch_tensor_free(y);
  zorch_tensor_free(x);
  zorch_vm_free(vm);
  return 0;
}
