#!/usr/bin/env python3
"""System calls per ping: an mcpmon build, the raw floor client and the
hyper floor client each hold N HTTP sessions to one fleet simulator, one
ping a second each, all at once; `strace -c -f` counts each one's calls
over a window, in turn. Prints the calls per ping, by name (those at
0.05 a ping or more).

    python3 bench/syscalls.py [BUILD] [--n N] [--window SECONDS]
"""
import argparse
import pathlib
import re
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run  # noqa: E402  (the benchmark's own helpers: simulator, clients)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=str(run.MCPMON))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--window", type=int, default=6)
    args = ap.parse_args()
    sim, base = run.start_sim()
    clients = {}
    try:
        clients["mcpmon"] = run.Mcpmon("http", base, args.n, 1.0, binary=pathlib.Path(args.build))
        for name in ("floor", "floor-hyper"):
            # Alive past every window counted below.
            clients[name] = run.Floor(name, base, args.n, 1.0, 3 + 3 * (args.window + 5))
        for c in clients.values():
            c.ready()
        time.sleep(3)
        for name, c in clients.items():
            out = subprocess.run(["timeout", "-s", "INT", str(args.window), "strace", "-c", "-f", "-p", str(c.pid)],
                                 capture_output=True, text=True).stderr
            calls = {}
            for line in out.splitlines():
                m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
                if m:
                    calls[m.group(2)] = int(m.group(1))
            pings = args.n * args.window
            per = {k: round(v / pings, 2) for k, v in sorted(calls.items(), key=lambda x: -x[1]) if v / pings >= 0.05}
            print(name, per, flush=True)
    finally:
        for c in clients.values():
            try:
                c.stop()
            except Exception:
                pass
        sim.kill()
        sim.wait()


if __name__ == "__main__":
    main()
