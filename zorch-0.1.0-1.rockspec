-- zorch for LuaRocks: the Lua module zorch.so, the Lua sources of its
-- embedded modules (zorch.nn, zorch.optim, ...) and the zorch command.
-- `luarocks make` builds from this directory; the rock is the CPU build
-- (CUDA=0): see README.md, Install, for the CUDA backend.
rockspec_format = "3.0"
package = "zorch"
version = "0.1.0-1"
source = {
   url = "git+https://github.com/zorch/zorch.git",
   tag = "v0.1.0",
}
description = {
   summary = "Autograd tensors in C, a Lua scripting layer and ZeRO training",
   detailed = [[
Tensors with autograd and CPU kernels over OpenBLAS (CUDA optional), nn,
optim and data modules in Lua, an Engine configured like DeepSpeed with a
ZeRO partition manager across processes over MPI, and the zorch command.]],
   homepage = "https://github.com/zorch/zorch",
   license = "MIT",
}
dependencies = {
   "lua >= 5.4, < 5.5",
}
build = {
   type = "make",
   build_target = "lib",
   build_variables = {
      CUDA = "0",
      JOBS = "auto",
      BUILD = "build/luarocks",
      CC = "$(CC)",
      CFLAGS = "$(CFLAGS)",
      LUA_INCDIR = "$(LUA_INCDIR)",
   },
   install_target = "install-lua",
   install_variables = {
      CUDA = "0",
      BUILD = "build/luarocks",
      PREFIX = "$(PREFIX)",
      BINDIR = "$(BINDIR)",
      LUA_CMODULE_DIR = "$(LIBDIR)",
      LUA_MODULE_DIR = "$(LUADIR)",
   },
   copy_directories = { "docs" },
}
