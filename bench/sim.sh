# Sourced by the bench scripts: the fleet simulator, and a config for it.
#   sim_start           starts the release fleet-sim, waits for its
#                       "listening on URL" line (10 s at most) and sets
#                       $sim (its pid) and $base (its URL)
#   everything_start    the same for npm server-everything over Streamable
#                       HTTP on a free port: $base is its one /mcp endpoint
#   sim_fleet N [HEAD]  prints a config of N HTTP servers s0..s(N-1) on it
#                       (sessions to one endpoint when $base ends in /mcp),
#                       after HEAD (a `global:` block, or nothing)
#   sim_ping_fleet N [INTERVAL]
#                       the same, for the CPU profiles: pinged every
#                       INTERVAL seconds (1 unless told), nothing else
#                       probed, nobody judged stuck

sim_start() {
  # Read the first line from a pipe rather than poll a file: the wait ends
  # the moment the simulator is listening, or says why it did not.
  exec {sim_fd}< <(exec ./target/release/examples/fleet-sim)
  sim=$!
  local line=""
  if ! read -r -t 10 line <&"$sim_fd" || [[ $line != "listening on "* ]]; then
    echo "fleet-sim did not start: ${line:-no line within 10 s}" >&2
    return 1
  fi
  base=${line#listening on }
}

everything_start() {
  local port line=""
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  exec {sim_fd}< <(PORT=$port exec tests/node/node_modules/.bin/mcp-server-everything streamableHttp 2>&1 >/dev/null)
  sim=$!
  if ! read -r -t 20 line <&"$sim_fd" || [[ $line != *listening* ]]; then
    echo "server-everything did not start: ${line:-no line within 20 s}" >&2
    return 1
  fi
  base=http://127.0.0.1:$port/mcp
}

sim_fleet() {
  local n=$1 i
  if [ -n "${2:-}" ]; then printf '%s\n' "$2"; fi
  printf 'servers:\n'
  for ((i = 0; i < n; i++)); do
    if [[ $base == */mcp ]]; then
      printf '  - id: s%d\n    transport: http\n    url: %s\n' "$i" "$base"
    else
      printf '  - id: s%d\n    transport: http\n    url: %s/mcp/%d\n' "$i" "$base" "$i"
    fi
  done
}

sim_ping_fleet() {
  local every=${2:-1} timeout=1
  # At one ping a second a ping waits a second, as it always has; slower
  # fleets are counted at a thousand sessions under valgrind, where an
  # answer can take longer.
  [ "$every" = 1 ] || timeout=5
  sim_fleet "$1" "global:
  ping_interval: ${every}s
  ping_timeout: ${timeout}s
  health_check_interval: 1h
  stuck_after: 10m
  connect_timeout: 120s
  protocol: 2025-11-25"
}
