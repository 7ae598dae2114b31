#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) and copies
# any crashing input into fuzz/regressions/<target>/, where
# tests/it/fuzz_regressions.rs replays it in every test run.
#   fuzz/run.sh [seconds-per-target]
# Needs cargo-fuzz (cargo install cargo-fuzz). cargo fuzz wants nightly
# compiler flags; RUSTC_BOOTSTRAP lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
export RUSTC_BOOTSTRAP=1
for target in config health_check metrics lean_ping basic_auth redact discovery; do
  mkdir -p "fuzz/corpus/$target" "fuzz/regressions/$target"
  cp -n fuzz/seeds/$target/* "fuzz/corpus/$target/" 2>/dev/null || true
  echo "== $target for ${secs}s"
  cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" -- \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 || true
  for crash in fuzz/artifacts/$target/crash-* fuzz/artifacts/$target/oom-* fuzz/artifacts/$target/timeout-*; do
    [ -e "$crash" ] || continue
    cp "$crash" "fuzz/regressions/$target/"
    echo "kept $crash as a regression input"
  done
done
