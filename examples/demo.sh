#!/usr/bin/env bash
# Runs mcpmon on the demo fleet (examples/demo-fleet.yaml): builds, starts the
# HTTP demo server on 127.0.0.1:8931, then mcpmon on http://127.0.0.1:9850
# (open it in a browser for the status page; /health/fleet and /metrics for
# machines). Ctrl-C stops everything. Arguments go to mcpmon
# (`examples/demo.sh --storage.path /tmp/demo.db`).
set -euo pipefail
cd "$(dirname "$0")/.."
listen="${MCPMON_LISTEN:-127.0.0.1:9850}"
# The first build takes minutes: say so, and let cargo show its progress.
echo "building mcpmon and the demo server (the first build takes a few minutes)..." >&2
cargo build --bin mcpmon --example demo-server
./target/debug/examples/demo-server --name search --transport http --listen 127.0.0.1:8931 >/dev/null &
http_pid=$!
./target/debug/mcpmon --config.file examples/demo-fleet.yaml --web.listen-address "$listen" "$@" &
mon_pid=$!
trap 'kill $mon_pid $http_pid 2>/dev/null || true; wait 2>/dev/null || true' INT TERM EXIT
echo "mcpmon: status page http://$listen/  (JSON: http://$listen/health/fleet, metrics: http://$listen/metrics)" >&2
wait $mon_pid
