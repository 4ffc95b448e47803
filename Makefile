# zorch: plain Makefile. `make` builds the libraries, zorch.so and the zorch
# command; `make run` runs the reference job; `make test` runs the suite (prove);
# `make check-asan` runs it under ASan and UBSan; `make bench` prints JSON lines
# (zorch beside PyTorch, scripts/bench-compare.py); `make bench-models` the ZeRO,
# CNN and GPT-2 steps;
# `make demo` trains a small MLP from C; `make install PREFIX=...`; `make
# examples` links examples/embed statically against an installed zorch.
CC      ?= gcc
comma   := ,
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
# JOBS=N (or JOBS=auto, one a core) builds in parallel where the caller cannot
# pass -j (LuaRocks' make build type)
JOBS    ?=
ifneq ($(JOBS),)
MAKEFLAGS += -j$(if $(filter auto,$(JOBS)),$(shell nproc),$(JOBS))
endif
# MPI (Debian's Open MPI) carries the collectives between CPU ranks.
MPI_DIR  := /usr/lib/x86_64-linux-gnu/openmpi
MPI      ?= $(if $(wildcard $(MPI_DIR)/include/mpi.h),1,)
MPI_FLAGS := $(if $(MPI),-DZORCH_MPI -I$(MPI_DIR)/include,)
# GNU readline for the REPL (line editing, history), the same way
READLINE ?= $(if $(wildcard /usr/include/readline/readline.h),1,)
# liburing for the offload files' I/O thread (zero/offload.c), when installed
URING ?= $(if $(wildcard /usr/include/liburing.h),1,)
# libmicrohttpd for `zorch serve` (lua/lhttp.c), when pkg-config finds it
MHD ?= $(if $(shell pkg-config --exists libmicrohttpd 2>/dev/null && echo 1),1,)
# CUDA: built when nvcc is found (or `make CUDA=1`): ops/cuda for sm_80 and
# sm_90 (+ PTX) with the toolkit at CUDA_DIR, and zero/nccl.c, go into the CUDA
# module libzorch_cuda.so (beside libzorch.so), which links cudart, cuBLASLt
# (cuBLAS for the shapes it has no algorithm for) and NCCL; the library opens
# it with dlopen on first use of a cuda device (docs/cuda.md), so nothing of
# CUDA's is mapped in a CPU run. cuDNN (when its header is found: CUDNN=1) is
# opened by the module itself at run time, with the own kernels as fallback.
# `make CUDA=0` builds the CPU-only library; sanitizer builds are CPU-only.
# EMU=1 (make test-cuda-emu, in build/emu) builds the same module from the same
# sources with g++ against the emulated CUDA of ops/cuda/emu: the kernels run on
# the host under the CUDA execution model, cuBLASLt on the CPU's BLAS, NCCL for
# one rank (docs/cuda.md). It needs no CUDA toolkit, and sanitizers apply.
EMU      ?= 0
CUDA_DIR ?= /usr/local/cuda
NVCC     ?= $(CUDA_DIR)/bin/nvcc
ifeq ($(EMU),1)
override CUDA := 1
override CUDNN := 0
CUDA_FLAGS := -DZORCH_WITH_CUDA -DZORCH_CUDA_EMU -Iops/cuda/emu
else
CUDA     ?= $(if $(SAN),0,$(if $(wildcard $(NVCC)),1,0))
CUDA_FLAGS := $(if $(filter 1,$(CUDA)),-DZORCH_WITH_CUDA -I$(CUDA_DIR)/include,)
CUDNN    ?= $(if $(wildcard $(CUDA_DIR)/include/cudnn.h),1,0)
endif
# Lua's headers (LuaRocks passes LUA_INCDIR); CFLAGS given on the command line
# (LuaRocks passes its own) come after zorch's. Warnings are errors only where
# asked (`make WERROR=1`: development and CI), so a newer compiler's new
# warning never breaks a user's build.
LUA_INCDIR ?= /usr/include/lua5.4
WERROR     ?=
override CFLAGS := -std=c11 $(OPT) -g -Wall -Wextra $(if $(WERROR),-Werror,) -fPIC -fvisibility=hidden -fopenmp -D_GNU_SOURCE \
           -Iinclude -I$(LUA_INCDIR) $(MPI_FLAGS) $(CUDA_FLAGS) -MMD -MP $(if $(SAN),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined,) \
           $(if $(filter command line,$(origin CFLAGS)),$(CFLAGS),)
LDFLAGS := -fopenmp $(if $(SAN),-fsanitize=address$(comma)undefined,)
LDLIBS  := -ldl -lm -lpthread

LUA_INC  := -I$(LUA_INCDIR)
# Every Lua module, by path: a new file under lua/zorch/ is embedded, installed
# and loaded by its folder's init.lua without a list to edit.
LUA_SRC  := $(sort $(wildcard lua/zorch/*.lua lua/zorch/*/*.lua lua/zorch/*/*/*.lua))
# The zorch command's own sources (the REPL, help) go into the binary only.
CLI_SRC  := vm/repl.c vm/help.c
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/help_doc.o
LIB_SRC  := $(filter-out vm/main.c $(CLI_SRC) zero/nccl.c,$(wildcard ops/core/*.c ops/backend/*.c ops/cpu/*.c ops/def/*.c ops/autograd/*.c ops/io/*.c zero/*.c lua/*.c vm/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/lua_modules.o
# libzorch links liblua (for the embedding API); zorch.so, loaded by a Lua
# interpreter, must not: it takes Lua's symbols from the host.
EXT_LIBS := -lcjson -lz $(if $(MHD),$(shell pkg-config --libs libmicrohttpd),) $(if $(MPI),-L$(MPI_DIR)/lib -lmpi,) $(if $(URING),-luring,)
# The CUDA module: the kernels, the module's side of ops/cuda/module.h
# (host.c), the NCCL collectives and the dtype tables (constants only). Linked
# with --no-undefined: every core function it calls comes through host.c.
CUDA_SRC := $(wildcard ops/cuda/*.cu)
MOD_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o) $(BUILD)/obj/ops/cuda/host.o $(BUILD)/obj/zero/nccl.o $(BUILD)/obj/ops/core/dtype.o
MOD_LIBS := -L$(CUDA_DIR)/lib64 -Wl,-rpath,$(CUDA_DIR)/lib64 -lcudart -lcublasLt -lcublas -lnccl -lstdc++ -ldl -lm -lpthread
EMU_SRC  := $(wildcard ops/cuda/emu/*.cc)
ifeq ($(EMU),1)
MOD_OBJ  += $(EMU_SRC:%.cc=$(BUILD)/obj/%.o)
MOD_LIBS := -lstdc++ -ldl -lm -lpthread
endif
# the emulated build's C++: the .cu files as host code (CU_BREAK_* are the
# broken variants tests/gpu/test_cuda_emu.sh builds)
EMU_CXXFLAGS = -x c++ -std=c++17 $(OPT) -g -Wall $(if $(WERROR),-Werror,) -fPIC -fvisibility=hidden -Iinclude \
               -I$(LUA_INCDIR) $(CUDA_FLAGS) -MMD -MP \
               $(if $(SAN),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined,)
CUDA_MOD := $(if $(filter 1,$(CUDA)),$(BUILD)/libzorch_cuda.so,)
NVFLAGS  := -O3 -std=c++17 -Iinclude -I$(LUA_INCDIR) -DZORCH_WITH_CUDA $(if $(filter 1,$(CUDNN)),-DZORCH_CUDNN,) \
            -Xcompiler -fPIC,-fvisibility=hidden,-Wall$(if $(WERROR),$(comma)-Werror -Werror all-warnings,) \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90
LIB_LIBS := -llua5.4 $(EXT_LIBS)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LUA := $(sort $(wildcard tests/lua/test_*.lua tests/lua/*/test_*.lua))
TEST_SH  := $(wildcard tests/test_*.sh)

.PHONY: all lib test test-cuda-emu test-cuda-emu-here check-asan check-valgrind bench bench-llamacpp bench-models demo run clean install install-lib install-lua examples
# Where `make install` puts things. LuaRocks sets the last three (the rockspec
# passes its BINDIR, LIBDIR and LUADIR) and runs install-lua.
PREFIX          ?= /usr/local
LIBDIR          ?= $(PREFIX)/lib
INCLUDEDIR      ?= $(PREFIX)/include
PKGCONFIGDIR    ?= $(LIBDIR)/pkgconfig
BINDIR          ?= $(PREFIX)/bin
LUA_CMODULE_DIR ?= $(LIBDIR)/lua/5.4
LUA_MODULE_DIR  ?= $(PREFIX)/share/lua/5.4
all: lib
lib: $(BUILD)/libzorch.a $(BUILD)/libzorch.so $(BUILD)/zorch.so $(BUILD)/zorch $(CUDA_MOD) $(BUILD)/examples/train_c \
     $(BUILD)/examples/generate_c

# `make` only builds: scripts/deps.sh installs what it needs (the README's two
# commands run it). What is missing is said here, with how to get it; the
# optional parts are left out with a note.
need = $(if $(wildcard $(1)),,$(error zorch needs $(2) ($(1) is missing): run scripts/deps.sh, or apt-get install $(3)))
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
$(call need,$(LUA_INCDIR)/lua.h,Lua 5.4's headers,liblua5.4-dev)
$(call need,/usr/include/cjson/cJSON.h,cJSON,libcjson-dev)
$(call need,/usr/include/zlib.h,zlib,zlib1g-dev)
$(if $(MPI),,$(info zorch: building without MPI (one process only): apt-get install libopenmpi-dev openmpi-bin))
$(if $(READLINE),,$(info zorch: building the REPL without line editing: apt-get install libreadline-dev))
$(if $(MHD),,$(info zorch: building without `zorch serve` (no libmicrohttpd): apt-get install libmicrohttpd-dev))
endif
# the programs the build and the suite run
need_cmd = $(if $(shell command -v $(1) 2>/dev/null),,$(error zorch: `$(1)` is missing: run scripts/deps.sh, or apt-get install $(2)))

# Kernels build at -O3: GCC 12 vectorises at -O2 only loops that need no
# runtime alias check, which excludes nearly every strided kernel loop.
$(BUILD)/obj/ops/cpu/%.o: OPT_K = $(if $(SAN),,-O3)
# the optimizer loop's sqrt vectorises only without errno (its argument is never negative)
$(BUILD)/obj/ops/cpu/optim.o: OPT_K = $(if $(SAN),,-O3 -fno-math-errno)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(OPT_K) -c $< -o $@

$(BUILD)/obj/ops/cuda/%.o: ops/cuda/%.cu ops/cuda/cuda.h ops/cuda/module.h ops/backend/math.h ops/backend/backend.h ops/core/device.h \
                           ops/core/tensor.h include/zorch.h include/zorch_ops.h
	@mkdir -p $(dir $@)
	$(if $(filter 1,$(EMU)),$(CXX) $(EMU_CXXFLAGS),$(NVCC) $(NVFLAGS)) -c $< -o $@

$(BUILD)/obj/ops/cuda/emu/%.o: ops/cuda/emu/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

# A broken variant of the emulated module (build/emu/broken/SYNC.so, ...): the
# module with one file rebuilt with -DCU_BREAK_<variant> (ops/cuda/cuda.h).
EMU_BROKEN_FILE_BOUND := reduce
EMU_BROKEN_FILE_SYNC  := reduce
EMU_BROKEN_FILE_SHMEM := attention
$(BUILD)/broken/%.so: $(MOD_OBJ) ops/cuda/cuda.h
	@mkdir -p $(BUILD)/broken
	$(CXX) $(EMU_CXXFLAGS) -DCU_BREAK_$* -c ops/cuda/$(EMU_BROKEN_FILE_$*).cu -o $(BUILD)/broken/$*.o
	$(CC) -shared -Wl,--version-script=scripts/zorch_cuda.map -Wl,--no-undefined -o $@ \
	  $(filter-out %/ops/cuda/$(EMU_BROKEN_FILE_$*).o,$(MOD_OBJ)) $(BUILD)/broken/$*.o $(MOD_LIBS) \
	  $(if $(SAN),-fsanitize=address$(comma)undefined,)

$(BUILD)/libzorch.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Only the public API is exported: hidden visibility by default, ZORCH_API on
# the functions of include/zorch.h, and the version script for what the
# compilers export on their own (C++ template instances in the CUDA objects).
SO_FLAGS := -shared -Wl,--version-script=scripts/zorch.map

$(BUILD)/libzorch.so: $(LIB_OBJ) scripts/zorch.map
	$(CC) $(SO_FLAGS) $(LDFLAGS) -Wl,-soname,libzorch.so -o $@ $(LIB_OBJ) $(LIB_LIBS) $(LDLIBS)

$(BUILD)/zorch.so: $(LIB_OBJ) scripts/zorch.map
	$(CC) $(SO_FLAGS) $(LDFLAGS) -o $@ $(LIB_OBJ) $(EXT_LIBS) $(LDLIBS)

# The CUDA module (see CUDA above); it exports only its two entry points.
# (`make SAN=1 CUDA=1` builds it too, its C parts sanitized, to check the
# loader under ASan on a machine without a GPU.)
$(BUILD)/libzorch_cuda.so: $(MOD_OBJ) scripts/zorch_cuda.map
	$(CC) -shared -Wl,--version-script=scripts/zorch_cuda.map -Wl,--no-undefined -Wl,-soname,libzorch_cuda.so \
	  -o $@ $(MOD_OBJ) $(MOD_LIBS) $(if $(SAN),-fsanitize=address$(comma)undefined,)

# where `make install` puts the module, the last place the library looks for it
$(BUILD)/obj/ops/backend/cudamod.o: CFLAGS += -DZORCH_LIBDIR='"$(LIBDIR)"'

$(BUILD)/zorch: vm/main.c $(CLI_OBJ) $(BUILD)/libzorch.a
	$(CC) $(CFLAGS) $< $(CLI_OBJ) -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) \
	  $(if $(READLINE),-lreadline,) $(LDLIBS)

$(BUILD)/obj/lua/lhttp.o: CFLAGS += $(if $(MHD),-DZORCH_MHD,)
$(BUILD)/obj/vm/repl.o: CFLAGS += $(if $(READLINE),-DZORCH_READLINE,)
$(BUILD)/obj/zero/offload.o: CFLAGS += $(if $(URING),-DZORCH_URING,)

# help()'s text: docs/api.md made into a Lua table, with help.lua, at build time.
$(BUILD)/gen/help_doc.c: docs/api.md vm/help.lua scripts/gen_help.lua
	$(call need_cmd,lua5.4,lua5.4)
	@mkdir -p $(dir $@)
	lua5.4 scripts/gen_help.lua docs/api.md vm/help.lua > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/help_doc.o: $(BUILD)/gen/help_doc.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The Lua modules, compiled into the library.
$(BUILD)/gen/lua_modules.c: $(LUA_SRC) scripts/embed_lua.sh
	@mkdir -p $(dir $@)
	scripts/embed_lua.sh $(LUA_SRC) > $@

$(BUILD)/obj/gen/lua_modules.o: $(BUILD)/gen/lua_modules.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-overlength-strings -c $< -o $@

$(BUILD)/tests/%: tests/%.c tests/tap.h $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iops/core $< -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

# The allocation-failure test links with the allocator wrapped: every malloc,
# calloc, ... in libzorch.a's objects goes to the test's __wrap_ functions.
ALLOC_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=strdup
$(BUILD)/tests/test_allocfail: tests/test_allocfail.c tests/tap.h $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(ALLOC_WRAP) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

# The suite: every tests/test_*.c is a TAP program; prove prints the summary.
# A CUDA build (the default where nvcc exists) also runs tests/gpu, which skip
# without a GPU.
GPU_TESTS := $(if $(filter 1,$(CUDA)),$(wildcard tests/gpu/test_*.lua),)

# (the test programs in $(BUILD)/tests are told where the CUDA module is; the
# zorch command finds it beside itself)
test: $(TEST_BIN) $(BUILD)/zorch $(BUILD)/examples/train_c $(BUILD)/examples/generate_c $(BUILD)/zorch.so $(BUILD)/libzorch.so $(CUDA_MOD)
	$(call need_cmd,prove,perl)$(call need_cmd,mpirun,openmpi-bin)$(call need_cmd,python3,python3)
	@cd tests && ZORCH_QUIET=1 ZORCH_BIN=../$(BUILD)/zorch ZORCH_BUILD=../$(BUILD) \
	  $(if $(CUDA_MOD),ZORCH_CUDA_MODULE=$(abspath $(CUDA_MOD)),) \
	  prove -f --exec ./runtest $(addprefix ../,$(TEST_BIN)) $(TEST_SH:tests/%=%) $(TEST_LUA:tests/%=%) $(GPU_TESTS:tests/%=%)

# The CUDA kernels on the emulated device (EMU=1 in build/emu, docs/cuda.md):
# the execution model's own test, tests/gpu/test_cuda.lua against the CPU, then
# the count of kernels run and the broken variants (tests/gpu/test_cuda_emu.sh).
# EMU_SAN=1 does it under ASan and UBSan (in build/emu-asan).
EMU_BUILD := $(if $(EMU_SAN),build/emu-asan,build/emu)
test-cuda-emu:
	$(MAKE) EMU=1 BUILD=$(EMU_BUILD) $(if $(EMU_SAN),SAN=1 OPT=-O1,) test-cuda-emu-here

test-cuda-emu-here: $(BUILD)/zorch $(BUILD)/libzorch_cuda.so $(BUILD)/tests/test_emu_model \
                    $(addprefix $(BUILD)/broken/,BOUND.so SYNC.so SHMEM.so)
	$(call need_cmd,prove,perl)
	@rm -f $(BUILD)/kernels.log
	@cd tests && ZORCH_QUIET=1 ZORCH_BIN=../$(BUILD)/zorch ZORCH_BUILD=../$(BUILD) \
	  ZORCH_CUDA_MODULE=$(abspath $(BUILD)/libzorch_cuda.so) ZORCH_CUDA_EMU_LOG=$(abspath $(BUILD)/kernels.log) \
	  $(if $(SAN),ZORCH_TEST_SANITIZED=1 ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1,) \
	  prove -f --exec ./runtest ../$(BUILD)/tests/test_emu_model gpu/test_cuda.lua gpu/test_cuda_emu.sh
	@cd tests && ZORCH_CUDA_EMU_LOG=$(abspath $(BUILD)/kernels.log) sh gpu/test_cuda_emu.sh --count | sed 's/^# //'

$(BUILD)/tests/test_emu_model: tests/gpu/test_emu_model.cc $(filter %/emu/emu.o,$(MOD_OBJ))
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -x c++ -MMD -MP,$(EMU_CXXFLAGS)) $< $(filter %/emu/emu.o,$(MOD_OBJ)) -o $@ \
	  $(if $(SAN),-fsanitize=address$(comma)undefined,)

check-asan:
	ZORCH_TEST_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(MAKE) BUILD=build/asan SAN=1 OPT=-O1 test

check-valgrind: $(TEST_BIN)
	@cd tests && for t in $(addprefix ../,$(TEST_BIN)); do \
	  ZORCH_QUIET=1 ZORCH_ALLOC_CACHE=0 ZORCH_TEST_SANITIZED=1 OMP_NUM_THREADS=1 valgrind -q --error-exitcode=99 --leak-check=full --suppressions=valgrind.supp $$t >/dev/null || exit 1; \
	  echo "valgrind clean: $$t"; done

$(BUILD)/bench/%: bench/%.c $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O3 $< -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

# every case on 1 and 2 threads, zorch and PyTorch interleaved, with the
# machine's FMA peak and memory bandwidth; the lines also go to $(BUILD)/bench.jsonl
# (scripts/bench-table.py makes docs/performance.md's table from them)
bench: $(BUILD)/bench/bench $(CUDA_MOD)
	@$(if $(CUDA_MOD),ZORCH_CUDA_MODULE=$(abspath $(CUDA_MOD)) ,)python3 scripts/bench-compare.py --bench $(BUILD)/bench/bench --out $(BUILD)/bench.jsonl

# whole training steps: the ZeRO engine from Lua, the Fashion-MNIST CNN, GPT-2
# zorch's decode beside llama.cpp (built from PyPI's llama-cpp-python sources) and
# Transformers on one random Llama; skips without pip or cmake
bench-llamacpp: $(BUILD)/zorch $(BUILD)/bench/bench
	@python3 scripts/bench-llamacpp.py --zorch $(BUILD)/zorch --bench $(BUILD)/bench/bench || echo "bench-llamacpp: skipped"

bench-models: $(BUILD)/zorch $(CUDA_MOD)
	@for n in 1 4; do for s in 0 1 2 3; do \
	  $(BUILD)/zorch launch -n $$n bench/zero_step.lua simplenet_step $$s 10 20 2 64 500; \
	  $(BUILD)/zorch launch -n $$n bench/zero_step.lua mlp_1024_4096_1024_b256_step $$s 1024 4096 1024 256 3; \
	done; done
	@export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 ZORCH_QUIET=1 ZORCH_BENCH_BUCKET=1048576; for r in 1 2 3; do \
	  $(BUILD)/zorch launch -n 2 bench/zero_step.lua mlp_1024_4096_1024_b256_step 2 1024 4096 1024 256 5; \
	  ZORCH_BENCH_OVERLAP=1 $(BUILD)/zorch launch -n 2 bench/zero_step.lua mlp_1024_4096_1024_b256_step 2 1024 4096 1024 256 5; \
	  ZORCH_BENCH_OVERLAP=1 ZORCH_BENCH_REUSE=1000000000 $(BUILD)/zorch launch -n 2 bench/zero_step.lua \
	    mlp_1024_4096_1024_b256_step 3 1024 4096 1024 256 5; \
	  python3 bench/torch_ddp.py mlp_1024_4096_1024_b256_step 2 1024 4096 1024 256 5 2>/dev/null; \
	done; true
	@export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 ZORCH_QUIET=1; for r in 1 2 3; do for p in fp32 bf16; do \
	  ZORCH_BENCH_PRECISION=$$p $(BUILD)/zorch bench/zero_step.lua mlp_1024_4096_1024_b256_step 0 1024 4096 1024 256 5; \
	  ZORCH_BENCH_PRECISION=$$p python3 bench/torch_ddp.py mlp_1024_4096_1024_b256_step 1 1024 4096 1024 256 5 2>/dev/null; \
	done; done; true
	@for b in 64 256; do for r in 1 2; do \
	  ZORCH_QUIET=1 OMP_WAIT_POLICY=passive $(BUILD)/zorch models/fashion_mnist.lua --model cnn --bench 5 --batch-size $$b \
	    --threads 2 2>/dev/null | grep '^{'; \
	  python3 models/fashion_mnist_torch.py --model cnn --bench 5 --batch-size $$b --threads 2 2>/dev/null; \
	done; done; true
	@export OMP_WAIT_POLICY=passive; for p in fp32 bf16; do \
	  ZORCH_QUIET=1 $(BUILD)/zorch models/gpt2.lua --bench 3 --precision $$p 2>/dev/null | grep '^{'; \
	  ZORCH_QUIET=1 $(BUILD)/zorch models/gpt2.lua --model gpt2 --context 64 --batch-size 4 --bench 3 --precision $$p \
	    2>/dev/null | grep '^{'; \
	  python3 bench/torch_gpt2.py --precision $$p 2>/dev/null; \
	  python3 bench/torch_gpt2.py --model gpt2 --context 64 --batch-size 4 --precision $$p 2>/dev/null; \
	done; true

# A C host that trains with ZeRO through the public headers alone.
$(BUILD)/examples/train_c: examples/train_c/main.c include/zorch.h include/zorch_zero.h include/zorch_zero_options.h $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

# A C host that generates through zorch_generate.h alone.
$(BUILD)/examples/generate_c: examples/generate_c/main.c include/zorch.h include/zorch_generate.h $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libzorch.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BUILD)/libzorch.a $(LIB_LIBS) $(LDLIBS)

# The reference job: SimpleNet with Adam, ZeRO stage 2 config, clipping 1.0.
run: lib
	$(BUILD)/zorch models/simple_net.lua $(ARGS)

demo: $(BUILD)/examples/mlp_demo
	$(BUILD)/examples/mlp_demo

# zorch.pc: Libs.private is what the link line of libzorch.so adds to its
# objects (the same variables), so a static link against libzorch.a needs
# nothing else; Requires.private names those of its libraries that ship a .pc
# (where one is installed), for their include paths and their own libraries.
PC_LIBS     := $(LDFLAGS) $(LIB_LIBS) $(LDLIBS)
PC_NAME_lua5.4 := lua5.4
PC_NAME_cjson  := libcjson
PC_NAME_z      := zlib
PC_NAME_mpi    := ompi-c
PC_REQUIRES := $(foreach l,$(patsubst -l%,%,$(filter -l%,$(PC_LIBS))),$(PC_NAME_$(l)))
ZORCH_VERSION = $(shell sed -n 's/.*ZORCH_VERSION "\(.*\)"/\1/p' include/zorch.h)

$(BUILD)/zorch.pc: scripts/zorch.pc.in FORCE
	@mkdir -p $(dir $@)
	@req=; for p in $(PC_REQUIRES); do pkg-config --exists $$p 2>/dev/null && req="$$req $$p"; done; \
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@VERSION@|$(ZORCH_VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(PC_LIBS))|' \
	  -e "s|@REQUIRES_PRIVATE@|$${req# }|" $< > $@
FORCE:

# Libraries, header, pkg-config file (install-lib); the Lua module, the Lua
# sources its chunks are named after, the zorch command (install-lua). The CUDA
# module goes beside each library that opens it.
install: install-lib install-lua

install-lib: lib $(BUILD)/zorch.pc
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(INCLUDEDIR)
	install -m 644 $(BUILD)/libzorch.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libzorch.so $(CUDA_MOD) $(DESTDIR)$(LIBDIR)/
	install -m 644 include/zorch.h include/zorch_zero.h include/zorch_zero_options.h include/zorch_ops.h include/zorch_tokenizer.h include/zorch_generate.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/zorch.pc $(DESTDIR)$(PKGCONFIGDIR)/

install-lua: $(BUILD)/zorch.so $(BUILD)/zorch
	install -d $(DESTDIR)$(LUA_CMODULE_DIR) $(DESTDIR)$(LUA_MODULE_DIR)/zorch $(DESTDIR)$(BINDIR)
	install -m 755 $(BUILD)/zorch.so $(CUDA_MOD) $(DESTDIR)$(LUA_CMODULE_DIR)/
	for f in $(LUA_SRC:lua/%=%); do install -D -m 644 lua/$$f $(DESTDIR)$(LUA_MODULE_DIR)/$$f || exit 1; done
	install -m 755 $(BUILD)/zorch $(DESTDIR)$(BINDIR)/

# examples/embed/host.c linked statically against the libzorch.a of an
# installed zorch, the way another project would (make install PREFIX=... first):
# pkg-config --static gives the private libraries; -l:libzorch.a takes the
# archive where -lzorch would take the shared library.
examples:
	@mkdir -p $(BUILD)/examples
	PKG_CONFIG_PATH=$(PKGCONFIGDIR) sh -c '$(CC) examples/embed/host.c \
	  $$(pkg-config --static --cflags --libs zorch | sed "s/-lzorch\b/-l:libzorch.a/") -o $(BUILD)/examples/host'

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(BUILD)/obj/ops/cuda/host.d $(BUILD)/obj/zero/nccl.d $(if $(filter 1,$(EMU)),$(MOD_OBJ:.o=.d),)
