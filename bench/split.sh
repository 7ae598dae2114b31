#!/usr/bin/env bash
# Where mcpmon's CPU goes under load, and its system calls per ping: mcpmon
# holding N HTTP sessions to the fleet simulator, pinged every second.
#   bench/split.sh [N] [seconds]      (defaults: 1000 sessions, 15 s)
#   MCPMON=path bench/split.sh ...    another build of mcpmon (an earlier
#                                     commit's), split the same way
#   bench/split.sh 1000 15 --frames TEXT ...   also the share of samples
#                                     with a frame naming TEXT (bench/split.py)
# After 10 s for the sessions to open, `perf record` samples mcpmon for the
# given seconds, and each sample goes to the task it ran in, named by the
# frames on its stack (bench/split.py). Then
# `strace -c` counts its system calls over the same length of time, divided
# by the pings that time holds (N per second).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000}"; secs="${2:-15}"
shift $(( $# < 2 ? $# : 2 ))
cargo build --quiet --release --bin mcpmon --example fleet-sim
tmp=$(mktemp -d)
trap 'kill ${sim:-} ${mon:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
. bench/sim.sh
sim_start
sim_ping_fleet "$n" > "$tmp/fleet.yaml"
"${MCPMON:-./target/release/mcpmon}" --config.file "$tmp/fleet.yaml" --web.listen-address 127.0.0.1:0 \
  --log.level error &
mon=$!
sleep 10
perf record -q -F 999 -g --call-graph dwarf -o "$tmp/perf.data" -p "$mon" -- sleep "$secs" \
  > /dev/null 2>&1
perf script -i "$tmp/perf.data" -F comm,ip,sym 2>/dev/null | python3 bench/split.py "$@"
echo "system calls per ping ($n pings a second, ${secs} s):"
timeout "$secs" strace -c -f -p "$mon" 2>&1 \
  | awk -v pings="$((n * secs))" '$NF ~ /^(writev|sendto|recvfrom|epoll_wait)$/ {
      printf "  %-10s %.2f\n", $NF, $(NF - 1 - ($5 ~ /^[0-9]+$/)) / pings }' || true
