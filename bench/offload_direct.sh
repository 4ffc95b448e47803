#!/bin/sh
# The larger-than-memory run of docs/performance.md ("Direct I/O") under
# /usr/bin/time -v, sampling /proc/meminfo's Cached and the process's VmRSS
# every second: sh bench/offload_direct.sh LABEL NVME_DIR [VAR=value ...]
# (e.g. ZORCH_OFFLOAD_DIRECT=0 for the page cache). Writes LABEL.log (the
# run's output and time -v) and LABEL.mem (the samples) in the current folder.
L=$1 DIR=$2
shift 2
BIN=${ZORCH_BIN:-build/cpu/zorch}
grep -E "^Cached" /proc/meminfo > "$L.mem"
env "$@" /usr/bin/time -v "$BIN" models/simple_net.lua --in 4096 --hidden 4096 --out 4096 \
  --layers 16 --samples 128 --zero-stage 3 --offload-optimizer nvme --offload-param nvme \
  --nvme-path "$DIR" --steps 3 --print-every 1 --report --save "" --bucket 16777216 --quiet > "$L.log" 2>&1 &
sleep 1
P=$(pgrep -n -f "simple_net.lua --in 4096")
while [ -n "$P" ] && [ -d /proc/$P ]; do
  echo "$(grep VmRSS /proc/$P/status 2>/dev/null | tr -s ' ') $(grep -E '^Cached' /proc/meminfo)" >> "$L.mem"
  sleep 1
done
wait
grep -E "^Cached" /proc/meminfo >> "$L.mem"
grep -o "Cached: *[0-9]*" "$L.mem" | awk '{print $2}' | sort -n | sed -n '1p;$p' | tr '\n' ' ' | sed 's/^/Cached lowest, highest (kB): /'
echo
