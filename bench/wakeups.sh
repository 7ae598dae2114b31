#!/usr/bin/env bash
# Where an idle mcpmon's CPU goes: 5 HTTP servers of the fleet simulator at
# default tunables, held for a bounded time, then measured with perf stat
# (task-clock and context switches over 30 s) and strace (the system calls
# of the same length of time).
#   bench/wakeups.sh [mcpmon binary] [seconds]   (defaults: the release build, 30)
# The first 10 s (sessions opening) are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-./target/release/mcpmon}"; secs="${2:-30}"
tmp=$(mktemp -d)
trap 'kill ${sim:-} ${mon:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
. bench/sim.sh
sim_start
sim_fleet 5 > "$tmp/fleet.yaml"
"$bin" --config.file "$tmp/fleet.yaml" --web.listen-address 127.0.0.1:0 --log.level error &
mon=$!
sleep 10
perf stat -e task-clock,context-switches -p "$mon" -- sleep "$secs" 2>&1 | grep -E "task-clock|context-switches"
timeout "$secs" strace -c -f -p "$mon" 2>&1 | tail -n +3 || true
