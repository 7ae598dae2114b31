#!/usr/bin/env bash
# What a held HTTP session keeps on the heap: mcpmon on N simulator
# servers under heaptrack for a bounded time, killed (so what is live at
# the end is the steady state, not a shutdown), then the largest live
# allocation sites. Then the same fleet without heaptrack, and its RSS
# before and after glibc's malloc_trim(0) through gdb, which shows how
# much of it is freed memory the allocator kept. heaptrack and the trim see
# only glibc's allocator, so the default binary is a release build without
# the jemalloc feature (built into target/glibc).
#   bench/heap.sh [N] [protocol] [mcpmon binary] [seconds]
#   (defaults: 2000, 2025-11-25, that build, 45)
#   SUBSITES=40 bench/heap.sh ...   up to 40 call sites under each
#                                   allocation site (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-2000}"; proto="${2:-2025-11-25}"; bin="${3:-}"; secs="${4:-45}"
if [ -z "$bin" ]; then
  cargo build --quiet --release --no-default-features --bin mcpmon --target-dir target/glibc
  bin=./target/glibc/release/mcpmon
fi
cargo build --quiet --release --example fleet-sim
tmp=$(mktemp -d)
trap 'kill ${sim:-} ${mon:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
. bench/sim.sh
sim_start
sim_fleet "$n" "global:
  ping_interval: 2s
  ping_timeout: 2s
  health_check_interval: 1h
  stuck_after: 10m
  connect_timeout: 60s
  protocol: $proto" > "$tmp/fleet.yaml"
timeout -s KILL "$secs" heaptrack -o "$tmp/heap" "$bin" --config.file "$tmp/fleet.yaml" \
  --web.listen-address 127.0.0.1:0 --log.level error > /dev/null 2>&1 || true
sleep 2
heaptrack_print -f "$tmp"/heap*.zst --print-peaks 0 --print-allocators 0 --print-temporary 0 \
  --print-leaks 1 -n 15 -s "${SUBSITES:-5}" 2>/dev/null \
  | awk '/leaked over/ {print; n=0; show=1; next} show && /at / {if (n<2) print "    " $0; n++} /^$/ {show=0}' \
  | head -n "$((12 * ${SUBSITES:-5}))"
"$bin" --config.file "$tmp/fleet.yaml" --web.listen-address 127.0.0.1:0 --log.level error &
mon=$!
sleep "$((secs / 2))"
echo "RSS before malloc_trim: $(grep VmRSS /proc/$mon/status)"
gdb -p "$mon" -batch -ex 'call (int)malloc_trim(0)' > /dev/null 2>&1 || true
sleep 1
echo "RSS after malloc_trim:  $(grep VmRSS /proc/$mon/status)"
