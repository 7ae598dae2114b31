#!/usr/bin/env python3
"""Soak benchmark: mcpmon on hundreds of servers, some flapping, for a fixed
time, sampling its own resident memory, open file descriptors, runtime tasks
and threads. A leak shows as a slope; the summary prints first, last, max and
the slope per hour of each. Not a test: run it by hand.

    cargo build --release --bin mcpmon --example demo-server
    python3 bench/soak.py --minutes 10 --stdio 200 --http 200

Every process it starts is stopped when it ends (also on Ctrl-C).
"""

import argparse
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/mcpmon"
DEMO = ROOT / "target/release/examples/demo-server"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(proc, prefix, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline().decode()
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise RuntimeError(f"no {prefix!r} line within {timeout}s")


def fleet_yaml(args, http_urls, dead_url):
    lines = [
        "global:",
        f"  ping_interval: {args.ping_interval}",
        "  ping_timeout: 2s",
        "  health_check_interval: 15s",
        "  backoff_initial: 1s",
        "  backoff_max: 20s",
        "fleet:",
        "  min_available_percentage: 50",
        "servers:",
    ]
    for i in range(args.stdio):
        extra = []
        if i % 10 == 0:  # flapping: crashes after 20-80 s, restarted with backoff
            extra = ["--crash-after-ms", str(20000 + (i * 997) % 60000)]
        elif i % 10 == 1:
            extra = ["--status", "degraded"]
        elif i % 10 == 2:
            extra = ["--era", "legacy"]
        argv = json.dumps(["--name", f"s{i}"] + extra)
        lines += [f"  - id: stdio-{i}", "    transport: stdio", f"    command: {DEMO}", f"    args: {argv}"]
    for i in range(args.http):
        url = dead_url if i % 20 == 0 else http_urls[i % len(http_urls)]
        lines += [f"  - id: http-{i}", "    transport: http", f"    url: {url}"]
    return "\n".join(lines) + "\n"


def scrape(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    def one(name):
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else float("nan")
    def fleet(state):
        m = re.search(rf'^mcpmon_fleet_servers{{state="{state}"}} (\S+)$', text, re.M)
        return int(float(m.group(1))) if m else -1
    threads = len(os.listdir(f"/proc/{PROC['mcpmon'].pid}/task"))
    return {
        "rss_mib": one("process_resident_memory_bytes") / 2**20,
        "fds": one("process_open_fds"),
        "tasks": one("mcpmon_runtime_alive_tasks"),
        "threads": threads,
        "cpu_s": one("process_cpu_seconds_total"),
        "healthy": fleet("healthy"),
        "degraded": fleet("degraded"),
        "unhealthy": fleet("unhealthy"),
        "unknown": fleet("unknown"),
    }


PROC = {}


def stop_all():
    for name, p in list(PROC.items()):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM) if name != "mcpmon" else p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in PROC.values():
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def slope_per_hour(points):
    """Least-squares slope of (t seconds, v) in units per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    num = sum((t - mt) * (v - mv) for t, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return 3600.0 * num / den if den else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--stdio", type=int, default=200)
    ap.add_argument("--http", type=int, default=200)
    ap.add_argument("--http-processes", type=int, default=4)
    ap.add_argument("--ping-interval", default="5s")
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=60, help="seconds before the first counted sample")
    args = ap.parse_args()
    for b in (BIN, DEMO):
        if not b.exists():
            sys.exit(f"{b} missing: cargo build --release --bin mcpmon --example demo-server")

    signal.signal(signal.SIGINT, lambda *_: (stop_all(), sys.exit(130)))
    tmp = tempfile.TemporaryDirectory()
    try:
        urls = []
        for i in range(args.http_processes):
            p = subprocess.Popen(
                [str(DEMO), "--name", f"h{i}", "--transport", "http", "--listen", "127.0.0.1:0"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
            )
            PROC[f"http{i}"] = p
            urls.append(wait_line(p, "listening on ", 10))
        dead = f"http://127.0.0.1:{free_port()}/mcp"
        cfg = pathlib.Path(tmp.name) / "fleet.yaml"
        cfg.write_text(fleet_yaml(args, urls, dead))
        port = free_port()
        addr = f"127.0.0.1:{port}"
        PROC["mcpmon"] = subprocess.Popen(
            [str(BIN), "--config.file", str(cfg), "--web.listen-address", addr, "--log.level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        start = time.time()
        total = args.minutes * 60
        samples = []
        print(f"# {args.stdio} stdio + {args.http} http servers, {args.minutes} min, ping every {args.ping_interval}")
        print("t_s\trss_mib\tfds\ttasks\tthreads\tcpu_s\thealthy\tdegraded\tunhealthy\tunknown")
        while time.time() - start < total:
            time.sleep(args.sample_every)
            try:
                s = scrape(addr)
            except OSError as e:
                print(f"# scrape failed: {e}")
                continue
            t = time.time() - start
            samples.append((t, s))
            print(f"{t:.0f}\t{s['rss_mib']:.1f}\t{s['fds']:.0f}\t{s['tasks']:.0f}\t{s['threads']}\t{s['cpu_s']:.1f}\t"
                  f"{s['healthy']}\t{s['degraded']}\t{s['unhealthy']}\t{s['unknown']}", flush=True)
        counted = [(t, s) for t, s in samples if t >= args.warmup]
        half = [(t, s) for t, s in samples if t >= total / 2]
        print("\n# after warm-up: first, last, min, max, least-squares slope per hour (whole run after warm-up; second half)")
        for key in ("rss_mib", "fds", "tasks", "threads"):
            pts = [(t, s[key]) for t, s in counted]
            if not pts:
                continue
            vals = [v for _, v in pts]
            late = [(t, s[key]) for t, s in half]
            print(f"{key}\tfirst {vals[0]:.1f}\tlast {vals[-1]:.1f}\tmin {min(vals):.1f}\tmax {max(vals):.1f}"
                  f"\tslope/h {slope_per_hour(pts):+.2f}\tsecond-half slope/h {slope_per_hour(late):+.2f}")
        if len(samples) >= 2:
            (t0, s0), (t1, s1) = samples[0], samples[-1]
            print(f"cpu\t{100 * (s1['cpu_s'] - s0['cpu_s']) / (t1 - t0):.2f}% of one core")
    finally:
        stop_all()
        tmp.cleanup()


if __name__ == "__main__":
    main()
