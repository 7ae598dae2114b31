#!/usr/bin/env bash
# Takes the README's pictures: the demo fleet (examples/demo.sh) on a
# history of 90 generated days (examples/seed-history.rs), its fleet page
# and payments' server page, in headless Chromium.
#
#     docs/picture.sh        # writes docs/status-page.png, docs/server-page.png
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bin mcpmon --example demo-server --example seed-history
dir=$(mktemp -d)
export MCPMON_LISTEN=127.0.0.1:9850
./target/debug/examples/seed-history "$dir/history.db"
./examples/demo.sh --storage.path "$dir/history.db" >"$dir/demo.log" 2>&1 &
demo=$!
trap 'kill $demo 2>/dev/null || true; wait $demo 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://$MCPMON_LISTEN/-/ready" >/dev/null && break
  sleep 1
done
# Long enough for payments to have crashed and come back once.
sleep 20
shot() {
  chromium --headless=new --no-sandbox --disable-dev-shm-usage --hide-scrollbars \
    --window-size="$2" --screenshot="$3" "http://$MCPMON_LISTEN$1" 2>/dev/null
}
shot / 1400,450 docs/status-page.png
shot /servers/payments 1200,1500 docs/server-page.png
echo "docs/status-page.png docs/server-page.png taken"
