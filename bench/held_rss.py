#!/usr/bin/env python3
"""Memory per held session, per build, split where it arises: each build
of mcpmon holds N and 10 HTTP sessions to the fleet simulator (one ping a
second each, the guard's workload, `run.one`), and the resident set is
read twice per run: before any scrape (steady) and after the scrapes that
end the run (four `/metrics`, one gzipped, one `/health/fleet`: what the
guard reads). Prints each run and, per build, KiB per added session for
both readings; the builds alternate rep by rep.

    python3 bench/held_rss.py BUILD... [--n N] [--reps R]
    python3 bench/held_rss.py BUILD... --smaps    # anonymous and file-backed KiB at N=10

With _RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 jemalloc hands
freed pages back at once, so the figures are about what is allocated.
"""
import argparse
import pathlib
import re
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run  # noqa: E402  (the benchmark's own helpers: simulator, mcpmon, /proc)


def smaps(build):
    """Anonymous and file-backed KiB of a build holding 10 sessions, 3 s
    after it is ready."""
    with run.mcpmon_on_sim(build, 10) as m:
        time.sleep(3)
        roll = open(f"/proc/{m.pid}/smaps_rollup").read()
    kib = dict(re.findall(r"^(Anonymous|Pss_File):\s+(\d+)", roll, re.M))
    print(f"{build}: anonymous {kib['Anonymous']} KiB, file-backed {kib['Pss_File']} KiB", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="mcpmon binaries")
    ap.add_argument("--n", type=int, default=run.CHECK_MEMORY_N)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--smaps", action="store_true")
    args = ap.parse_args()
    if args.smaps:
        for build in args.builds:
            smaps(build)
        return
    res = {b: {10: [], args.n: []} for b in args.builds}
    for rep, build in run.turns(args.builds, args.reps):
        for n in (10, args.n):
            run.MCPMON = pathlib.Path(build)
            r = run.one("mcpmon", "http", n, 1.0, run.CHECK_DURATION)
            res[build][n].append(r)
            print(f"rep {rep + 1} {build} N={n}: steady {r['steady_kib']} KiB, after the scrapes "
                  f"{r['rss_kib']} KiB", flush=True)
    for build in args.builds:
        for key, what in (("steady_kib", "before any scrape"), ("rss_kib", "after the scrapes")):
            per = (run.med(res[build][args.n], key) - run.med(res[build][10], key)) / (args.n - 10)
            print(f"{build}: {per:.1f} KiB per held session {what}")


if __name__ == "__main__":
    main()
