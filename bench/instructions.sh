#!/usr/bin/env bash
# Instructions per ping under callgrind: 50 HTTP sessions to the fleet
# simulator pinged every second; counting starts 25 s in (after start-up)
# and lasts 40 s. Pings are calls to hyper's request encoder, which both
# mcpmon and the floor client make once per ping.
#   bench/instructions.sh mcpmon [BINARY]     (default target/release/mcpmon)
#   bench/instructions.sh floor MODE          (raw, hyper, hyper-pool, ...)
# N=SESSIONS and INTERVAL=SECONDS change the fleet (50 sessions pinged every
# second unless told); WARM=SECONDS the start-up left out (25 unless told;
# a thousand sessions under valgrind need about 90).
# TARGET=everything pings npm server-everything (one endpoint, 50 sessions,
# answers as event streams) instead of the simulator.
# KEEP=FILE keeps the callgrind output there, for bench/costs.py (costs
# per ping by function) or callgrind_annotate.
# CACHE=1 also simulates the caches (callgrind --cache-sim=yes, with the
# last level set to one core's 2 MiB L2, where a fleet's sessions no longer
# fit) and prints data reads, writes and misses per ping: a first-level
# data miss is a cache line the ping touched that was not already near.
# FRAMES=1 also records each instruction's address (--dump-instr=yes) and
# prints bench/frames.py's costs by source function, inlined ones included
# (a task's whole future is inlined into tokio's poll, where costs.py sees
# one function).
set -euo pipefail
cd "$(dirname "$0")/.."
who="${1:?mcpmon or floor}"
tmp=$(mktemp -d)
trap 'kill ${vg:-} ${sim:-} 2>/dev/null || true; [ -z "${KEEP:-}" ] || cp "$tmp/cg.out.1" "$KEEP" || true; rm -rf "$tmp"' EXIT
. bench/sim.sh
if [ "${TARGET:-sim}" = everything ]; then everything_start; else sim_start; fi
n=${N:-50}
interval=${INTERVAL:-1}
sim_ping_fleet "$n" "$interval" > "$tmp/fleet.yaml"
if [ "$who" = mcpmon ]; then
  cmd=("${2:-./target/release/mcpmon}" --config.file "$tmp/fleet.yaml" --web.listen-address 127.0.0.1:0 --log.level error)
else
  cmd=(./target/release/examples/floor-peer http "$base" "$n" "$interval" 400 "${2:?floor mode}")
fi
sim_args=()
[ -z "${CACHE:-}" ] || sim_args=(--cache-sim=yes --LL=2097152,16,64)
[ -z "${FRAMES:-}" ] || sim_args+=(--dump-instr=yes)
valgrind --tool=callgrind "${sim_args[@]}" --callgrind-out-file="$tmp/cg.out" "${cmd[@]}" > /dev/null 2>&1 &
vg=$!
sleep "${WARM:-25}"
callgrind_control -z "$vg" > /dev/null 2>&1
sleep 40
callgrind_control -d "$vg" > /dev/null 2>&1
# The dump is written when the command returns; wait for the file, bounded.
for _ in $(seq 50); do [ -s "$tmp/cg.out.1" ] && break; sleep 0.2; done
label="$who ${2:-}"
python3 bench/costs.py "$tmp/cg.out.1" --label "${label% }"
if [ -n "${FRAMES:-}" ]; then
  python3 bench/frames.py "$tmp/cg.out.1" "${cmd[0]}"
fi
