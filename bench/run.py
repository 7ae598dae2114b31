#!/usr/bin/env python3
"""Benchmark runner: mcpmon against what users would write instead.

Runs mcpmon and each peer client (bench/peers: TypeScript SDK, Python SDK,
a raw standard-library Python client, and examples/floor-peer.rs, the
physical floor: raw tokio TCP with keep-alive and a pre-built ping, no MCP
library; floor-hyper, floor-hyper-inline, floor-hyper-pool and
floor-reqwest send the same pings through those
HTTP libraries) against the same fleet
simulator (examples/fleet-sim.rs), alternating, for several repetitions. It
prints the medians as a table of ratios. The workload is the same for
everyone: open N sessions, ping each once per interval (spread evenly),
with a timeout.

    cargo build --release --bin mcpmon --example fleet-sim --example floor-peer
    python3 bench/run.py                 # full suite (tens of minutes)
    python3 bench/run.py --smoke         # N=10, a few seconds (CI)

Reported per client and scenario: client CPU microseconds per ping (over the
ping phase only), peak resident KiB per session, and ping RTT p50/p99 as
the client reports them. For mcpmon the RTT is the last liveness round trip
of each server, from /health/fleet. The raw client's RTT is the floor.
"""

import argparse
import contextlib
import gzip
import json
import os
import pathlib
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
MCPMON = ROOT / "target/release/mcpmon"
SIM = ROOT / "target/release/examples/fleet-sim"


def use_profile(profile):
    global MCPMON, SIM, FLOOR
    MCPMON = ROOT / f"target/{profile}/mcpmon"
    SIM = ROOT / f"target/{profile}/examples/fleet-sim"
    FLOOR = ROOT / f"target/{profile}/examples/floor-peer"

# Extra mcpmon flags (--mcpmon-args), for A/B runs of one build's settings.
MCPMON_ARGS = []
PEERS = ROOT / "bench/peers"
NODE_MODULES = ROOT / "tests/node/node_modules"
NODE = NODE_MODULES / ".bin/node"
PY_SDK = ROOT / "tests/python/.venv-legacy/bin/python"

# Peers that cannot hold this many sessions in reasonable time are skipped.
LIMITS = {"ts": 1000, "py": 1000, "raw": 10000, "mcpmon": 10000, "floor": 10000,
          "floor-hyper": 10000, "floor-reqwest": 10000, "floor-hyper-pool": 10000,
          "floor-hyper-inline": 10000}
# The floors speak HTTP only: raw bytes on a socket, then the same pings
# through hyper and through reqwest (the price of an HTTP library).
FLOORS = {"floor": "raw", "floor-hyper": "hyper", "floor-reqwest": "reqwest",
          "floor-hyper-pool": "hyper-pool", "floor-hyper-inline": "hyper-inline"}
FLOOR = ROOT / "target/release/examples/floor-peer"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def start_sim():
    p = subprocess.Popen([str(SIM), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError(f"fleet-sim: {line!r}")
    return p, line[len("listening on "):]


def cpu_seconds(pid):
    """CPU time of every thread of the process, in nanosecond resolution
    (schedstat), where /proc/<pid>/stat only counts 10 ms ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def wakeups(pid):
    """Context switches of every thread so far: each is the thread going to
    sleep or being woken, so their rate is the process's wake-up rate."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:
            continue
        total += sum(int(v) for v in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)$", text, re.M))
    return total


def status_kib(pid, key):
    return int(re.search(rf"{key}:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))


def get(addr, path, timeout=30):
    """Status and body; a 503 from /health/fleet is an answer, not an error."""
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_gzip(addr, path, timeout=30):
    """Milliseconds to fetch `path` gzip-compressed (render, compression and
    transfer), compressed bytes, and the text."""
    req = urllib.request.Request(f"http://{addr}{path}", headers={"Accept-Encoding": "gzip"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
        ms = (time.perf_counter() - t0) * 1000
        if r.headers.get("Content-Encoding") != "gzip":
            raise RuntimeError(f"{path} not gzip-compressed")
    return ms, len(body), gzip.decompress(body).decode()


def peer_command(name, mode, target, n, interval, duration):
    """The command line and environment of peer client `name` (FLOORS, "ts",
    "py", or the raw Python client) holding N sessions for `duration` s."""
    if name == "ts":
        cmd = [str(NODE), str(PEERS / "ts-peer.mjs")]
    elif name == "py":
        cmd = [str(PY_SDK), str(PEERS / "py-peer.py")]
    elif name in FLOORS:
        if mode != "http":
            raise RuntimeError("the floor client speaks HTTP only")
        cmd = [str(FLOOR)]
    else:
        cmd = [sys.executable, str(PEERS / "raw-peer.py")]
    cmd += [mode, target, str(n), str(interval), str(duration)]
    if name in FLOORS:
        cmd.append(FLOORS[name])
    return cmd, dict(os.environ, MCPMON_NODE_MODULES=str(NODE_MODULES))


def run_peer(name, mode, target, n, interval, duration):
    cmd, env = peer_command(name, mode, target, n, interval, duration)
    budget = duration + 60 + n * 0.05
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, env=env)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"{name} printed no result: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


ERA_VERSIONS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
ERA = "legacy"


class Mcpmon:
    """A running mcpmon on a generated fleet file: `defaults`, every
    tunable at its default (the idle scenario), else the ping workload:
    `interval`, no health checks, one protocol (ERA). `pings_only` with
    `defaults`: the defaults but for health checks, the same work the floor
    client does. `binary`: the build to run (MCPMON unless told)."""

    def __init__(self, mode, target, n, interval, defaults=False, pings_only=False, binary=None):
        self.tmp = tempfile.TemporaryDirectory()
        cfg = pathlib.Path(self.tmp.name) / "fleet.yaml"
        if defaults:
            lines = ["global:", "  health_check_interval: 1h"] if pings_only else []
        else:
            lines = [
            "global:",
            f"  ping_interval: {interval}s",
            f"  ping_timeout: {min(5, interval)}s",
            "  health_check_interval: 1h",
            "  stuck_after: 10m",
            "  connect_timeout: 60s",
            f"  protocol: {ERA_VERSIONS[ERA]}",
        ]
        lines.append("servers:")
        for i in range(n):
            if mode == "http":
                # A target ending in /mcp is one server every session shares.
                url = target if target.endswith("/mcp") else f"{target}/mcp/{i}"
                lines += [f"  - id: s{i}", "    transport: http", f"    url: {url}"]
            else:
                lines += [f"  - id: s{i}", "    transport: stdio", f"    command: {target}", '    args: ["--stdio"]']
        cfg.write_text("\n".join(lines) + "\n")
        self.addr = f"127.0.0.1:{free_port()}"
        self.p = subprocess.Popen([str(binary or MCPMON), "--config.file", str(cfg), "--web.listen-address", self.addr,
                                   "--log.level", "error", *MCPMON_ARGS],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.p.pid
        self.started = time.time()

    def ready(self, limit=120):
        """Seconds from start until /-/ready answered 200."""
        while True:
            try:
                if get(self.addr, "/-/ready", 5)[0] == 200:
                    return time.time() - self.started
            except OSError:
                pass
            if time.time() - self.started > limit:
                raise RuntimeError(f"mcpmon not ready in {limit} s")
            time.sleep(0.1)

    def pings(self):
        """Pings sent so far, summed over the fleet from /metrics."""
        text = get(self.addr, "/metrics")[1]
        return sum(float(v) for v in re.findall(r'^mcpmon_probes_total\{probe="ping",server="[^"]+"\} (\S+)$', text, re.M))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.tmp.cleanup()


@contextlib.contextmanager
def mcpmon_on_sim(build, n):
    """A build of mcpmon holding N HTTP sessions to a fresh simulator, one
    ping a second each, ready; both stopped on leaving."""
    sim, base = start_sim()
    m = Mcpmon("http", base, n, 1.0, binary=pathlib.Path(build))
    try:
        m.ready()
        yield m
    finally:
        m.stop()
        sim.kill()
        sim.wait()


def run_mcpmon(mode, target, n, interval, duration, defaults=False, pings_only=False):
    """One mcpmon run of `duration` seconds measured after a full round
    (see `Mcpmon` for the workload)."""
    m = Mcpmon(mode, target, n, interval, defaults, pings_only)
    p, addr, pings = m.p, m.addr, m.pings
    try:
        judged_s = m.ready()
        time.sleep(interval)  # one full round before measuring
        # Start-up's peak against the held sessions' resident set, read
        # before any scrape can raise either.
        started_peak_kib, steady_kib = status_kib(p.pid, "VmHWM"), status_kib(p.pid, "VmRSS")

        # Scrapes stay outside the CPU window: a render runs on a blocking-pool
        # thread that may exit (and take its CPU count along) before the window
        # closes, and it is not ping work anyway.
        p0 = pings()
        w0, c0 = wakeups(p.pid), cpu_seconds(p.pid)
        time.sleep(duration)
        c1, w1 = cpu_seconds(p.pid), wakeups(p.pid)
        p1 = pings()
        t0 = time.perf_counter()
        _, metrics_text = get(addr, "/metrics")
        metrics_ms = (time.perf_counter() - t0) * 1000
        gz_ms, gz_bytes, gz_text = get_gzip(addr, "/metrics")
        per_server = len(re.findall(r'^mcpmon_[a-z_]+\{[^}]*server="', gz_text, re.M)) / n
        t0 = time.perf_counter()
        _, fleet_text = get(addr, "/health/fleet")
        fleet_ms = (time.perf_counter() - t0) * 1000
        rtts = sorted(s["response_time_ms"] * 1000 for s in json.loads(fleet_text)["servers"] if s.get("response_time_ms") is not None)
        q = lambda x: rtts[min(len(rtts) - 1, int(x * len(rtts)))] if rtts else None
        return {
            "client": "mcpmon", "cpu_s": c1 - c0, "pings": p1 - p0, "failures": 0,
            "peak_rss_kib": status_kib(p.pid, "VmHWM"), "rss_kib": status_kib(p.pid, "VmRSS"),
            "startup_peak_kib": started_peak_kib, "steady_kib": steady_kib,
            "p50_us": q(0.5), "p99_us": q(0.99), "judged_s": judged_s,
            "metrics_ms": metrics_ms, "metrics_kib": len(metrics_text) / 1024,
            "metrics_gzip_ms": gz_ms, "metrics_gzip_kib": gz_bytes / 1024, "series_per_server": per_server,
            "fleet_ms": fleet_ms, "fleet_kib": len(fleet_text) / 1024,
            "core_share": (c1 - c0) / duration,
            "wakeups_per_s": (w1 - w0) / duration,
        }
    finally:
        m.stop()


def one(client, mode, n, interval, duration):
    sim = None
    try:
        if mode == "http":
            sim, base = start_sim()
            target = base
        else:
            target = str(SIM)
        if client == "mcpmon":
            return run_mcpmon(mode, target, n, interval, duration)
        return run_peer(client, mode, target, n, interval, duration)
    finally:
        if sim:
            sim.kill()
            sim.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="N=10 HTTP and N=3 stdio, a few seconds, one repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between pings of one session")
    ap.add_argument("--http", default="100,1000,10000")
    ap.add_argument("--stdio", default="20,200")
    ap.add_argument("--clients", default="floor,floor-hyper,floor-hyper-pool,floor-reqwest,raw,mcpmon,ts,py")
    ap.add_argument("--json", help="also write every result here")
    ap.add_argument("--profile", default="release", help="cargo profile whose binaries to run")
    ap.add_argument("--mcpmon", help="run this mcpmon binary instead (an A/B against another build)")
    ap.add_argument("--mcpmon-args", default="", help="extra mcpmon flags, space-separated")
    ap.add_argument("--era", choices=sorted(ERA_VERSIONS), default="legacy",
                    help="protocol era mcpmon speaks to the simulator (legacy: initialize and a session; modern: server/discover)")
    ap.add_argument("--memory", metavar="N,N",
                    help="instead: resident KiB per held HTTP session at these N, both eras: the RSS difference "
                         "from a 10-server instance divided by the added sessions")
    ap.add_argument("--everything", type=int, metavar="N",
                    help="instead: N sessions to npm server-everything, mcpmon against the TypeScript SDK client (with --paired: the paired clients, \"ts\" among them, all to one server-everything)")
    ap.add_argument("--otlp", type=int, metavar="N",
                    help="instead: mcpmon on N HTTP servers with OTLP off, metrics pushed, and metrics plus "
                         "every probe's span pushed, alternating; CPU per ping as ratios to off")
    ap.add_argument("--idle", type=float, metavar="SECONDS",
                    help="instead: mcpmon alone on 5 HTTP servers with every tunable at its default, "
                         "measured this long (CPU share and wake-ups per second)")
    ap.add_argument("--check", action="store_true",
                    help="instead: the guard CI runs; mcpmon against the raw floor client and the TypeScript SDK "
                         "client on a small fleet, in one run; exits 1 when a ratio or the memory per session is past "
                         "its bound")
    ap.add_argument("--ab", metavar="PATH",
                    help="instead: this mcpmon build (B) against the built one or --mcpmon (A), with the raw floor, "
                         "rep by rep in one run (N=--http's first, --reps, --duration); CPU per ping and B/A")
    ap.add_argument("--paired", metavar="CLIENTS",
                    help="instead: these clients running at once, each on N=--http's first sessions to one "
                         "simulator, measured over the same window (--reps, --duration): mcpmon (the built one or "
                         "--mcpmon), paths to other mcpmon builds, and floor clients (floor, floor-hyper, ...), "
                         "comma-separated; CPU per ping and the first one's over each other's, rep by rep")
    ap.add_argument("--settle", type=float, metavar="SECONDS",
                    help="with --paired: wait this long after every client is ready before the window (a fleet's "
                         "first pings come together; its jitter spreads them over some turns)")
    ap.add_argument("--ab-memory", metavar="PATH",
                    help="instead: the guard's memory per held session for this mcpmon build (B) against the built "
                         "one or --mcpmon (A), rep by rep in one run (--reps)")
    ap.add_argument("--stand-in", metavar="CLIENT",
                    help="with --check: judge this peer client as if it were mcpmon (shows that the guard fails)")
    args = ap.parse_args()
    use_profile(args.profile)
    global MCPMON, MCPMON_ARGS, ERA
    ERA = args.era
    if args.mcpmon:
        MCPMON = pathlib.Path(args.mcpmon)
    MCPMON_ARGS = args.mcpmon_args.split()
    if args.smoke:
        args.reps, args.duration, args.http, args.stdio = 1, 3, "10", "3"
    for b in (MCPMON, SIM, FLOOR):
        if not b.exists():
            sys.exit(f"{b} missing: cargo build --profile {'dev' if args.profile == 'debug' else args.profile} --bin mcpmon --example fleet-sim --example floor-peer")
    raise_fd_limit()
    if args.check:
        return check(args.stand_in or "mcpmon")
    if args.ab_memory:
        return ab_memory(args.ab_memory, args.reps)
    if args.paired:
        subjects = [str(MCPMON) if c == "mcpmon" else c for c in args.paired.split(",")]
        if len(subjects) < 2 or len(set(subjects)) < len(subjects):
            sys.exit("--paired: two clients or more, each named once")
        n = args.everything or int(args.http.split(",")[0])
        return paired(subjects, args.reps, n, args.duration, args.interval, everything=bool(args.everything),
                      settle=args.settle)
    if args.ab:
        return ab(args.ab, args.reps, int(args.http.split(",")[0]), args.duration)
    if args.idle:
        return idle(args.idle, args.reps)
    if args.otlp:
        return otlp(args.otlp, args.reps, args.duration)
    if args.everything:
        return everything(args.everything, args.reps, args.duration)
    if args.memory:
        return memory([int(n) for n in args.memory.split(",")], args.reps, args.duration)
    clients = args.clients.split(",")
    scenarios = [("http", int(n)) for n in args.http.split(",") if n] + [("stdio", int(n)) for n in args.stdio.split(",") if n]
    results = {}
    for mode, n in scenarios:
        # 10 000 sessions at one ping a second each would measure the simulator;
        # keep about 1000 pings a second per scenario.
        interval = max(args.interval, n / 1000)
        for rep in range(args.reps):
            order = clients[rep % len(clients):] + clients[:rep % len(clients)]
            for client in order:
                if n > LIMITS.get(client, 0) or (client in FLOORS and mode != "http"):
                    continue
                try:
                    r = one(client, mode, n, interval, args.duration)
                except Exception as e:  # a peer that fails is reported, not fatal
                    print(f"# {mode} N={n} {client}: {e}", file=sys.stderr)
                    continue
                r["interval_s"] = interval
                results.setdefault((mode, n, client), []).append(r)
                print(f"# {mode} N={n} rep {rep + 1} {client}: {json.dumps(r)}", file=sys.stderr, flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({f"{m}/{n}/{c}": v for (m, n, c), v in results.items()}, indent=1))
    report(results, scenarios, clients)
    missing = [f"{m} N={n} {c}" for m, n in scenarios for c in clients
               if n <= LIMITS.get(c, 0) and not (c in FLOORS and m != "http") and (m, n, c) not in results]
    if missing:
        print(f"# no result for: {', '.join(missing)}", file=sys.stderr)
        if args.smoke:
            sys.exit(1)


EVERYTHING = ROOT / "tests/node/node_modules/.bin/mcp-server-everything"


def start_everything():
    """npm server-everything over Streamable HTTP on a free port."""
    port = free_port()
    p = subprocess.Popen([str(EVERYTHING), "streamableHttp"], env=dict(os.environ, PORT=str(port)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    if "listening" not in line:
        p.kill()
        raise RuntimeError(f"server-everything: {line!r}")
    return p, f"http://127.0.0.1:{port}/mcp"


def everything(n, reps, duration):
    """CPU per ping at N sessions to npm server-everything: mcpmon against
    the official TypeScript SDK client, alternating, one ping a second each.
    The three floors ping the same server in the same run: they bound how
    far below the SDK any client can go on this machine."""
    clients = ["mcpmon", "ts", *FLOORS]
    rows = {c: [] for c in clients}
    for rep in range(reps):
        for client in clients[rep % len(clients):] + clients[:rep % len(clients)]:
            server, url = start_everything()
            try:
                if client == "mcpmon":
                    r = run_mcpmon("http", url, n, 1.0, duration)
                else:
                    r = run_peer(client, "http", url, n, 1.0, duration)
            finally:
                server.kill()
                server.wait()
            rows[client].append(r)
            print(f"# everything N={n} rep {rep + 1} {client}: {json.dumps(r)}", file=sys.stderr, flush=True)
    per = {c: med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in rs], "v") for c, rs in rows.items()}
    print(f"- npm server-everything, N={n}, one ping a second each: mcpmon {per['mcpmon']:.1f} µs of CPU per ping, "
          f"TypeScript SDK client {per['ts']:.1f} µs: the SDK costs {per['ts'] / per['mcpmon']:.1f}× mcpmon "
          f"(median of {reps}, {med(rows['mcpmon'], 'pings'):.0f} and {med(rows['ts'], 'pings'):.0f} pings)")
    for c in FLOORS:
        print(f"- the same server and rate, {c}: {per[c]:.1f} µs of CPU per ping; the SDK costs "
              f"{per['ts'] / per[c]:.1f}× {c}, mcpmon {per['mcpmon'] / per[c]:.2f}× "
              f"({med(rows[c], 'pings'):.0f} pings)")


def memory(sizes, reps, duration):
    """KiB per held session, both eras: mcpmon at N against a 10-server
    instance, pinging once a second (at most 1000 pings a second)."""
    global ERA
    base = 10
    for era in ("legacy", "modern"):
        ERA = era
        rss = {}
        for n in [base] + sizes:
            rows = []
            for rep in range(reps):
                sim, target = start_sim()
                try:
                    rows.append(run_mcpmon("http", target, n, max(1.0, n / 1000), duration))
                finally:
                    sim.kill()
                    sim.wait()
                print(f"# memory {era} N={n} rep {rep + 1}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
            rss[n] = med(rows, "rss_kib")
        for n in sizes:
            per = (rss[n] - rss[base]) / (n - base)
            print(f"- {era} era, N={n}: {per:.1f} KiB per held session "
                  f"(RSS {rss[n] / 1024:.1f} MiB against {rss[base] / 1024:.1f} MiB at N={base}, median of {reps})")


def start_receiver():
    """An OTLP/HTTP receiver that reads every request and answers 200: the
    push's cost on mcpmon's side, not a backend's."""
    import http.server
    import threading

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def otlp(n, reps, duration):
    """CPU per ping with OTLP off, metrics on, and metrics plus spans (every
    probe sampled), alternating in one run."""
    global MCPMON_ARGS
    receiver, url = start_receiver()
    own = list(MCPMON_ARGS)
    variants = {
        "off": [],
        "metrics": ["--otlp.endpoint", url, "--otlp.interval", "5s"],
        "metrics+spans": ["--otlp.endpoint", url, "--otlp.interval", "5s", "--otlp.traces.sample-ratio", "1"],
    }
    interval = max(1.0, n / 1000)
    rows = {k: [] for k in variants}
    try:
        for rep in range(reps):
            names = list(variants)
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                MCPMON_ARGS = own + variants[name]
                sim, base = start_sim()
                try:
                    r = run_mcpmon("http", base, n, interval, duration)
                finally:
                    sim.kill()
                    sim.wait()
                rows[name].append(r)
                print(f"# otlp N={n} rep {rep + 1} {name}: {json.dumps(r)}", file=sys.stderr, flush=True)
    finally:
        MCPMON_ARGS = own
        receiver.shutdown()
    per_ping = {k: med(v, "cpu_s") * 1e6 / max(med(v, "pings"), 1) for k, v in rows.items()}
    print(f"| OTLP (N={n} HTTP, {1 / interval:g} ping/s each, {duration:g} s, median of {reps}) | µs CPU per ping | ratio to off | RSS MiB |")
    print("|---|---:|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {per_ping[k]:.1f} | {per_ping[k] / per_ping['off']:.2f} | {med(v, 'rss_kib') / 1024:.1f} |")


def idle(duration, reps):
    """The cost of watching a small fleet: 5 HTTP servers, default tunables;
    the same with health checks off (pings only, the floor client's work);
    and the floor client, in the same rep."""
    rows, pings_only, floor = [], [], []
    for rep in range(reps):
        sim, base = start_sim()
        try:
            r = run_mcpmon("http", base, 5, 10, duration, defaults=True)
            p = run_mcpmon("http", base, 5, 10, duration, defaults=True, pings_only=True)
            # The floor client at the same ping rate (mcpmon's default
            # interval, 10 s), pings only: what waking up to send 30 pings
            # costs on this machine at all.
            f = run_peer("floor", "http", base, 5, 10, duration)
        finally:
            sim.kill()
            sim.wait()
        rows.append(r)
        pings_only.append(p)
        floor.append(f)
        floor_share = f["cpu_s"] / duration
        print(f"# idle rep {rep + 1}: {json.dumps(r)}", file=sys.stderr, flush=True)
        print(f"# idle rep {rep + 1} pings only: {json.dumps(p)}", file=sys.stderr, flush=True)
        print(f"# idle rep {rep + 1} floor: {json.dumps(f)}", file=sys.stderr, flush=True)
        print(f"# idle rep {rep + 1}: {100 * r['core_share']:.4f}% / pings only {100 * p['core_share']:.4f}% / "
              f"floor {100 * floor_share:.4f}% of one core: {r['core_share'] / floor_share:.2f}× and "
              f"{p['core_share'] / floor_share:.2f}× the floor", file=sys.stderr, flush=True)
    share, only = med(rows, "core_share"), med(pings_only, "core_share")
    floor_share = med(floor, "cpu_s") / duration
    print(f"- idle, 5 HTTP servers at default tunables (health checks included) over {duration:g} s: "
          f"{100 * share:.3f}% of one core, {med(rows, 'wakeups_per_s'):.1f} wake-ups/s, "
          f"{med(rows, 'cpu_s') * 1e6 / max(med(rows, 'pings'), 1):.0f} µs of CPU per ping "
          f"({med(rows, 'pings'):.0f} pings); RSS {med(rows, 'rss_kib') / 1024:.1f} MiB (median of {len(rows)})")
    print(f"- the same, health checks off (pings only): {100 * only:.3f}% of one core, "
          f"{med(pings_only, 'wakeups_per_s'):.1f} wake-ups/s ({med(pings_only, 'pings'):.0f} pings)")
    print(f"- the floor client, 5 sessions pinged every 10 s (pings only) over {duration:g} s: "
          f"{100 * floor_share:.3f}% of one core ({med(floor, 'pings'):.0f} pings); "
          f"mcpmon idle = {share / floor_share:.1f}× the floor, pings only {only / floor_share:.1f}×")


# The guard's bounds, as ratios measured in the same window (never times):
# set from runs on two machines of this size (docs/benchmarks.md, "The
# guard, paired" and "The guard on a second machine"), which differ by
# 1.45× in the floor ratio, with a fifth of room over the dearer one. A
# change that moves a ratio past one fails CI.
CHECK_N = 200
CHECK_REPS = 3
CHECK_DURATION = 8.0
# mcpmon's CPU per ping at most this many times the raw floor client's
# (measured 1.56-1.75× on one machine, 2.26-2.30× on another).
CHECK_MAX_FLOOR_RATIO = 2.8
# The TypeScript SDK client's CPU per ping at least this many times mcpmon's
# (measured 10.55-10.80×).
CHECK_MIN_TS_ADVANTAGE = 6.0
# Resident memory per held session, measured at this many sessions.
CHECK_MAX_KIB_PER_SESSION = 32.0
CHECK_MEMORY_N = 1000


def per_ping(rows):
    return med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in rows], "v")


def check(subject):
    """The guard: N=CHECK_N HTTP sessions to the simulator, one ping a second
    each, `subject` (mcpmon, or a peer standing in for it), the raw floor
    client and the TypeScript SDK client running at once and measured over
    the same window (`paired_runs`), each ratio the median of the reps'
    own; then `subject`'s memory per held session, at N=CHECK_MEMORY_N
    against N=10. Exit 1 past a bound."""
    me = str(MCPMON) if subject == "mcpmon" else subject
    per = paired_runs([me, "floor", "ts"], CHECK_REPS, CHECK_N, CHECK_DURATION)
    cpu = {s: statistics.median(v) for s, v in per.items()}
    floor_ratio = statistics.median(rep_ratios(per, me, "floor"))
    ts_advantage = statistics.median(rep_ratios(per, "ts", me))
    # Memory per session over a larger fleet: at N=200 the allocator's
    # fixed costs still swing the figure by a few KiB from run to run.
    small = [one(subject, "http", 10, 1.0, CHECK_DURATION) for _ in range(CHECK_REPS)]
    large = [one(subject, "http", CHECK_MEMORY_N, 1.0, CHECK_DURATION) for _ in range(CHECK_REPS)]
    kib = held_kib(subject, small, large)
    checks = [
        (floor_ratio <= CHECK_MAX_FLOOR_RATIO,
         f"CPU per ping {floor_ratio:.2f}× the raw floor client's ({cpu[me]:.1f} / {cpu['floor']:.1f} µs; "
         f"bound {CHECK_MAX_FLOOR_RATIO}×)"),
        (ts_advantage >= CHECK_MIN_TS_ADVANTAGE,
         f"the TypeScript SDK client's CPU per ping {ts_advantage:.2f}× {subject}'s ({cpu['ts']:.1f} µs; "
         f"bound at least {CHECK_MIN_TS_ADVANTAGE}×)"),
        (kib <= CHECK_MAX_KIB_PER_SESSION,
         f"{kib:.1f} KiB per held session (bound {CHECK_MAX_KIB_PER_SESSION:g} KiB)"),
    ]
    print(f"guard: {subject}, http N={CHECK_N}, one ping a second each, all three over the same window, "
          f"median of {CHECK_REPS} reps:")
    for ok, line in checks:
        print(f"- {'ok' if ok else 'FAILED'}: {line}")
    failed = sum(1 for ok, _ in checks if not ok)
    if failed:
        print(f"guard: {failed} of {len(checks)} bounds crossed")
        sys.exit(1)
    print(f"guard: all {len(checks)} bounds hold")


def turns(names, reps):
    """(rep, name) for every rep and name, the order rotated by one each
    rep, so a machine that drifts during a run moves every name alike."""
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            yield rep, name


def one_build(build, n, duration):
    """`one` for mcpmon, with the binary at `build` for this run only."""
    global MCPMON
    kept, MCPMON = MCPMON, build
    try:
        return one("mcpmon", "http", n, 1.0, duration)
    finally:
        MCPMON = kept


def held_kib(subject, small, large):
    """KiB per held session: the median RSS of the `large` runs
    (N=CHECK_MEMORY_N) less that of the `small` ones (N=10), per session
    added. The difference leaves out what does not grow with the fleet,
    the binary's mapped pages first of all."""
    key = "rss_kib" if subject == "mcpmon" else "peak_rss_kib"
    return (med(large, key) - med(small, key)) / (CHECK_MEMORY_N - 10)


def ab_memory(other, reps):
    """The guard's memory per held session for two builds of mcpmon: A
    (the built one, or --mcpmon) and B (`other`), rep by rep, the order
    turned every rep. Prints each rep's figure and the medians."""
    builds = {"A": MCPMON, "B": pathlib.Path(other)}
    rows = {b: ([], []) for b in builds}
    for rep, b in turns(list(builds), reps):
        small = one_build(builds[b], 10, CHECK_DURATION)
        large = one_build(builds[b], CHECK_MEMORY_N, CHECK_DURATION)
        rows[b][0].append(small)
        rows[b][1].append(large)
        print(f"# ab-memory rep {rep + 1} {b}: {held_kib('mcpmon', [small], [large]):.1f} KiB per held "
              f"session (RSS {small['rss_kib']} KiB at N=10, {large['rss_kib']} KiB at N={CHECK_MEMORY_N})",
              file=sys.stderr, flush=True)
    kib = {b: held_kib("mcpmon", *rows[b]) for b in builds}
    print(f"a/b memory: http N={CHECK_MEMORY_N} against N=10, medians of {reps} alternating reps")
    for b in builds:
        print(f"{b} {builds[b]}: {kib[b]:.1f} KiB per held session")
    print(f"B/A = {kib['B'] / kib['A']:.3f}")


def ab(other, reps, n, duration):
    """Two builds of mcpmon in one run: A (the built one, or --mcpmon) and
    B (`other`), with the raw floor client, rep by rep in rotating order,
    so a machine that drifts during the run moves all three alike. Prints
    each rep's CPU per ping and the medians as ratios: B/A, and each
    against the floor."""
    builds = {"A": MCPMON, "B": pathlib.Path(other)}
    rows = {"A": [], "B": [], "floor": []}
    for rep, client in turns(list(rows), reps):
        if client == "floor":
            r = one("floor", "http", n, 1.0, duration)
        else:
            r = one_build(builds[client], n, duration)
        rows[client].append(r)
        print(f"# ab rep {rep + 1} {client}: {1e6 * r['cpu_s'] / max(r['pings'], 1):.1f} µs/ping "
              f"over {r['pings']:.0f} pings", file=sys.stderr, flush=True)
    cpu = {c: per_ping(rs) for c, rs in rows.items()}
    print(f"a/b: http N={n}, one ping a second each, median of {reps} rotating reps")
    print(f"A {builds['A']}: {cpu['A']:.1f} µs/ping, {cpu['A'] / cpu['floor']:.2f}× the raw floor")
    print(f"B {builds['B']}: {cpu['B']:.1f} µs/ping, {cpu['B'] / cpu['floor']:.2f}× the raw floor")
    print(f"raw floor: {cpu['floor']:.1f} µs/ping; B/A = {cpu['B'] / cpu['A']:.3f}")


# Peer clients `paired` runs beside mcpmon builds: the floors, the
# TypeScript SDK's, and the raw Python client.
PEER_SUBJECTS = {*FLOORS, "ts", "raw"}


class Floor:
    """A peer client pinging N sessions for `duration` seconds (one of
    PEER_SUBJECTS), measured from outside like mcpmon: its pings in a
    window are its rate (pings over `duration`, from its result) times the
    window."""

    def __init__(self, name, target, n, interval, duration):
        self.duration = duration
        cmd, env = peer_command(name, "http", target, n, interval, duration)
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.pid = self.p.pid

    def ready(self, limit=120):
        """Wait for its sessions to open: it says so before its clock starts."""
        started = time.time()
        line = self.p.stdout.readline()
        if line.strip() != "pinging":
            raise RuntimeError(f"peer client: {line!r}")
        return time.time() - started

    def rate(self):
        """Pings a second over its run, read from its result when it ends."""
        out, _ = self.p.communicate(timeout=self.duration + 60)
        r = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        if r["failures"]:
            raise RuntimeError(f"peer client: {r['failures']} pings failed")
        return r["pings"] / self.duration

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def paired_runs(subjects, reps, n, duration, interval=1.0, everything=False, settle=None):
    """Several clients at once, each holding N sessions to one simulator
    and measured over the same window: mcpmon builds (paths) and peer
    clients (PEER_SUBJECTS); `everything`: all of them to one npm
    server-everything instead. Whatever the machine does during the window
    (a neighbour's burst, a slower clock) it does to all of them, so a
    ratio within one rep is steadier than a ratio of runs taken apart.
    Returns each subject's CPU µs per ping, rep by rep; the start order
    turns every rep. `interval`: seconds between pings of one session;
    `settle`: seconds between every client's readiness and the window (at
    least a full round, 3 s, unless told)."""
    settle = max(3.0, interval) if settle is None else settle
    per = {s: [] for s in subjects}
    for rep in range(reps):
        order = subjects[rep % len(subjects):] + subjects[:rep % len(subjects)]
        sim, base = start_everything() if everything else start_sim()
        running = {}
        try:
            for s in order:
                if s in PEER_SUBJECTS:
                    running[s] = Floor(s, base, n, interval, settle + duration + settle)
                else:
                    running[s] = Mcpmon("http", base, n, interval, binary=pathlib.Path(s))
            for c in running.values():
                c.ready()
            time.sleep(settle)
            p0 = {s: c.pings() for s, c in running.items() if s not in PEER_SUBJECTS}
            c0 = {s: cpu_seconds(c.pid) for s, c in running.items()}
            time.sleep(duration)
            c1 = {s: cpu_seconds(c.pid) for s, c in running.items()}
            pings = {s: c.pings() - p0[s] for s, c in running.items() if s not in PEER_SUBJECTS}
            for s, c in running.items():
                if s in PEER_SUBJECTS:
                    pings[s] = c.rate() * duration
        finally:
            for c in running.values():
                c.stop()
            sim.kill()
            sim.wait()
        us = {s: 1e6 * (c1[s] - c0[s]) / max(pings[s], 1) for s in subjects}
        for s in subjects:
            per[s].append(us[s])
        print(f"# paired rep {rep + 1}: " + ", ".join(f"{s} {us[s]:.1f} µs/ping over {pings[s]:.0f} pings"
                                                      for s in subjects), file=sys.stderr, flush=True)
    return per


def paired(subjects, reps, n, duration, interval=1.0, everything=False, settle=None):
    """`paired_runs`, printed: each subject's median CPU per ping, and the
    first subject's over each other's, rep by rep, and their medians (so
    `B,A` gives B/A)."""
    per = paired_runs(subjects, reps, n, duration, interval, everything, settle)
    where = "one npm server-everything" if everything else "the simulator"
    rate = "one ping a second each" if interval == 1.0 else f"one ping every {interval:g} s each"
    print(f"paired: http N={n} each to {where}, {rate}, all measured over the same window, {reps} reps")
    for s in subjects:
        print(f"{s}: {statistics.median(per[s]):.1f} µs/ping (median)")
    first = subjects[0]
    for s in subjects[1:]:
        rs = rep_ratios(per, first, s)
        print(f"{first} ÷ {s} per rep: {', '.join(f'{r:.3f}' for r in rs)}; "
              f"median {statistics.median(rs):.3f}, from {min(rs):.3f} to {max(rs):.3f}")


def rep_ratios(per, a, b):
    """`a`'s CPU per ping over `b`'s, each rep's from that rep's window."""
    return [x / y for x, y in zip(per[a], per[b])]


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(results, scenarios, clients):
    print("| scenario | client | CPU µs/ping | × mcpmon | KiB/session | RTT p50 µs | RTT p99 µs | pings |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    summary = []
    for mode, n in scenarios:
        mon = results.get((mode, n, "mcpmon"))
        mon_cpu = None
        if mon:
            mon_cpu = med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in mon], "v")
        raw = results.get((mode, n, "raw"))
        floor = results.get((mode, n, "floor"))
        for client in clients:
            if client in FLOORS and mode != "http":
                continue
            rows = results.get((mode, n, client))
            if not rows:
                print(f"| {mode} N={n} | {client} | – | – | – | – | – | not run |")
                continue
            cpu = med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in rows], "v")
            kib = med([{"v": r["peak_rss_kib"] / n} for r in rows], "v")
            ratio = f"{cpu / mon_cpu:.1f}" if mon_cpu and client != "mcpmon" else ("1" if client == "mcpmon" else "–")
            p50, p99 = med(rows, "p50_us"), med(rows, "p99_us")
            fmt = lambda v: f"{v:.0f}" if v is not None else "–"
            print(f"| {mode} N={n} | {client} | {cpu:.1f} | {ratio} | {kib:.1f} | {fmt(p50)} | {fmt(p99)} | {med(rows, 'pings'):.0f} |")
        if mon and raw:
            d = med(mon, "p50_us") - med(raw, "p50_us")
            summary.append(f"{mode} N={n}: mcpmon RTT p50 − raw RTT p50 = {d:+.0f} µs")
        if mon_cpu and floor:
            floor_cpu = med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in floor], "v")
            summary.append(f"{mode} N={n}: mcpmon CPU per ping = {mon_cpu / floor_cpu:.2f} × the floor client's ({mon_cpu:.1f} / {floor_cpu:.1f} µs)")
            for lib in ("floor-hyper", "floor-hyper-inline", "floor-hyper-pool", "floor-reqwest"):
                rows = results.get((mode, n, lib))
                if rows:
                    lib_cpu = med([{"v": 1e6 * r["cpu_s"] / max(r["pings"], 1)} for r in rows], "v")
                    summary.append(f"{mode} N={n}: {lib} CPU per ping = {lib_cpu / floor_cpu:.2f} × the floor client's; "
                                   f"mcpmon = {mon_cpu / lib_cpu:.2f} × {lib}'s")
        if mon:
            m = mon
            summary.append(
                f"{mode} N={n}: mcpmon {100 * med(m, 'core_share'):.2f}% of one core at one ping per "
                f"{m[0]['interval_s']:g} s per server; {med(m, 'wakeups_per_s'):.1f} wake-ups/s; "
                f"RSS {med(m, 'rss_kib') / 1024:.1f} MiB; "
                f"start-up peak {med(m, 'startup_peak_kib') / 1024:.1f} MiB = "
                f"{med([{'v': r['startup_peak_kib'] / r['steady_kib']} for r in m], 'v'):.2f}× the steady RSS; "
                f"/metrics {med(m, 'metrics_ms'):.1f} ms ({med(m, 'metrics_kib'):.0f} KiB), "
                f"gzip {med(m, 'metrics_gzip_ms'):.1f} ms ({med(m, 'metrics_gzip_kib'):.0f} KiB), "
                f"{med(m, 'series_per_server'):.1f} series per server; "
                f"/health/fleet {med(m, 'fleet_ms'):.1f} ms ({med(m, 'fleet_kib'):.0f} KiB); "
                f"all judged {med(m, 'judged_s'):.1f} s after start"
            )
    print()
    for line in summary:
        print(f"- {line}")


if __name__ == "__main__":
    main()
