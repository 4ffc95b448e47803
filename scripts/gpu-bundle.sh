#!/bin/sh
# Builds zorch with CUDA here into build/gpu, with the non-system shared
# libraries it needs beside it (build/gpu/lib), for a GPU machine whose image
# lacks the Debian packages (Lua, cJSON, Open MPI): carry build/gpu/zorch,
# build/gpu/bench/bench, build/gpu/libzorch_cuda.so (the CUDA module, found
# beside zorch) and build/gpu/lib there, and scripts/gpu-check.sh uses them
# when it cannot build. The CUDA libraries (cuDNN too) are the machine's own.
set -eu
cd "$(dirname "$0")/.."
make -j"$(nproc)" CUDA=1 BUILD=build/gpu lib build/gpu/bench/bench >/dev/null
rm -rf build/gpu/lib
mkdir -p build/gpu/lib
for lib in $(ldd build/gpu/zorch build/gpu/bench/bench build/gpu/libzorch_cuda.so | awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libcuda* | libcublas* | libnccl* | libcudnn* | libstdc++* | libgcc_s*) ;;
    *) cp -L "$lib" build/gpu/lib/ ;;
  esac
done
du -ch build/gpu/zorch build/gpu/bench/bench build/gpu/libzorch_cuda.so build/gpu/lib | tail -1
