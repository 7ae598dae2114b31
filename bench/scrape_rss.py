#!/usr/bin/env python3
"""Resident memory across scrapes in a row, per build: each build of
mcpmon holds N HTTP sessions to the fleet simulator (one ping a second
each, as the guard runs them), then takes SCRAPES `/metrics` scrapes back
to back. Prints the resident set before the first scrape and after each,
with the time each scrape took (a render shared with the scrape before
it answers in about a millisecond), and the growth over the scrapes,
rep by rep, the builds alternating.

    python3 bench/scrape_rss.py BUILD... [--n N] [--scrapes K] [--reps R]

Run it with _RJEM_MALLOC_CONF set to see what the allocator keeps: with
dirty_decay_ms:0,muzzy_decay_ms:0 jemalloc hands freed pages back at
once, so the resident set is about what is allocated; with narenas:1
every thread allocates from one arena.
"""
import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run  # noqa: E402  (the benchmark's own helpers: simulator, mcpmon, /proc)

SETTLE = 3.0


def scrapes(build, n, count):
    """(RSS KiB before, [(RSS KiB, ms) after each scrape]) for one run."""
    with run.mcpmon_on_sim(build, n) as m:
        time.sleep(SETTLE)  # past start-up and the first round of pings
        before = run.status_kib(m.pid, "VmRSS")
        after = []
        for _ in range(count):
            t0 = time.perf_counter()
            run.get(m.addr, "/metrics")
            after.append((run.status_kib(m.pid, "VmRSS"), (time.perf_counter() - t0) * 1000))
        return before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="mcpmon binaries")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    print(f"RSS KiB over {args.scrapes} /metrics scrapes in a row, N={args.n} HTTP sessions")
    for rep, build in run.turns(args.builds, args.reps):
        before, after = scrapes(build, args.n, args.scrapes)
        steps = " ".join(f"{kib}/{ms:.0f}ms" for kib, ms in after)
        grown = (after[-1][0] - before) / 1024
        print(f"rep {rep + 1} {build}: {before} | {steps} | +{grown:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
