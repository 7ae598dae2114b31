#!/usr/bin/env python3
"""Idle, per client, in one run: 5 HTTP sessions to the fleet simulator,
pinged every 10 s, each client alone for a bounded window after start-up.
Prints each client's context switches and CPU (from /proc/PID/task), and
its CPU as a ratio to the raw floor client's measured in this same run.

    python3 bench/idle_threads.py [--window SECONDS] [--mcpmon PATH]
"""
import argparse
import os
import pathlib
import select
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SIM = ROOT / "target/release/examples/fleet-sim"
FLOOR = ROOT / "target/release/examples/floor-peer"
SETTLE = 8


def sample(pid):
    """Voluntary context switches and CPU ns, summed over every thread."""
    switches = cpu = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = open(f"/proc/{pid}/task/{tid}/status").read()
            switches += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            cpu += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return switches, cpu


def measure(cmd, window):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(SETTLE)
        s0, c0 = sample(p.pid)
        time.sleep(window)
        s1, c1 = sample(p.pid)
    finally:
        p.kill()
        p.wait()
    return s1 - s0, (c1 - c0) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=40)
    ap.add_argument("--mcpmon", default=str(ROOT / "target/release/mcpmon"))
    args = ap.parse_args()
    sim = subprocess.Popen([str(SIM), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
    try:
        # Bounded: a simulator that never says where it listens ends the run.
        if not select.select([sim.stdout], [], [], 10)[0]:
            raise SystemExit("fleet-sim printed nothing within 10 s")
        base = sim.stdout.readline().decode().strip().removeprefix("listening on ")
        tmp = tempfile.TemporaryDirectory()
        floor = [str(FLOOR), "http", base, "5", "10", str(SETTLE + args.window + 30)]
        runs = [("raw-socket floor", floor + ["raw"]),
                ("hyper floor, pooled", floor + ["hyper-pool"]),
                ("hyper floor", floor + ["hyper"])]
        for name, health in (("mcpmon, pings only", "  health_check_interval: 1h\n"),
                             ("mcpmon at defaults", "")):
            cfg = pathlib.Path(tmp.name) / f"{len(runs)}.yaml"
            servers = "".join(f"  - id: s{i}\n    transport: http\n    url: {base}/mcp/{i}\n"
                              for i in range(5))
            cfg.write_text((f"global:\n{health}" if health else "") + "servers:\n" + servers)
            runs.append((name, [args.mcpmon, "--config.file", str(cfg), "--web.listen-address",
                                "127.0.0.1:0", "--log.level", "error"]))
        print(f"| client ({args.window:g} s window) | voluntary context switches | CPU ms | × raw floor |")
        print("|---|---:|---:|---:|")
        floor_ms = None
        for name, cmd in runs:
            switches, ms = measure(cmd, args.window)
            floor_ms = floor_ms or ms
            print(f"| {name} | {switches} | {ms:.2f} | {ms / floor_ms:.2f} |", flush=True)
    finally:
        sim.kill()
        sim.wait()


if __name__ == "__main__":
    main()
