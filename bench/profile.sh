#!/usr/bin/env bash
# Instruction profile of mcpmon holding N HTTP sessions to the fleet
# simulator, pinged every second, for a bounded time under callgrind.
#   bench/profile.sh [N] [seconds]      (defaults: 100 sessions, 90 s)
# Prints the top inclusive and self costs (callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100}"; secs="${2:-90}"
cargo build --quiet --release --bin mcpmon --example fleet-sim
tmp=$(mktemp -d)
trap 'kill ${sim:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
. bench/sim.sh
sim_start
sim_ping_fleet "$n" > "$tmp/fleet.yaml"
timeout "$secs" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
  ./target/release/mcpmon --config.file "$tmp/fleet.yaml" --web.listen-address 127.0.0.1:0 \
  --log.level error > /dev/null 2>&1 || true
callgrind_annotate --inclusive=yes "$tmp/cg.out" | head -60
callgrind_annotate --inclusive=no "$tmp/cg.out" | head -40
