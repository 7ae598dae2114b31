#!/usr/bin/env bash
# Runs mcpmon on the demo fleet: builds, starts the HTTP demo server, then
# mcpmon on http://127.0.0.1:9850 (try /health/fleet and /metrics).
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin mcpmon --example demo-server
./target/debug/examples/demo-server --name search --transport http --listen 127.0.0.1:8931 >/dev/null &
http_pid=$!
trap 'kill $http_pid 2>/dev/null || true' EXIT
exec_args=(--config.file examples/demo-fleet.yaml --web.listen-address "${MCPMON_LISTEN:-127.0.0.1:9850}")
echo "mcpmon: http://${MCPMON_LISTEN:-127.0.0.1:9850}/health/fleet" >&2
./target/debug/mcpmon "${exec_args[@]}"
