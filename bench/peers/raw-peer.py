"""The floor: a raw client on the Python standard library only. One
keep-alive HTTP/1.1 connection per session (or one pipe per stdio child),
hand-written JSON-RPC: initialize, initialized, then ping once per interval.
    python3 raw-peer.py http URL_BASE N INTERVAL_S DURATION_S
    python3 raw-peer.py stdio COMMAND N INTERVAL_S DURATION_S
"""
import asyncio
import json
import re
import sys
import time
from urllib.parse import urlparse


class Http:
    def __init__(self, base, i):
        u = urlparse(base)
        self.host, self.port, self.path = u.hostname, u.port, f"/mcp/{i}"
        self.session = None
        self.next_id = 0

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.host, self.port)

    async def call(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        body = json.dumps(msg).encode()
        head = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n")
        if self.session:
            head += f"Mcp-Session-Id: {self.session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        self.w.write(head.encode() + b"\r\n" + body)
        status = await self.r.readline()
        length = 0
        while (line := await self.r.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
            elif k.lower() == "mcp-session-id":
                self.session = v.strip()
        data = await self.r.readexactly(length) if length else b""
        if not status.split()[1].startswith(b"2"):
            raise RuntimeError(status)
        return json.loads(data) if data else None


class Stdio:
    def __init__(self, command, _i):
        self.command = command
        self.next_id = 0

    async def open(self):
        self.p = await asyncio.create_subprocess_exec(self.command, "--stdio", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)

    async def call(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        await self.p.stdin.drain()
        if notify:
            return None
        return json.loads(await self.p.stdout.readline())


async def main():
    mode, target, n, interval, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    kind = Http if mode == "http" else Stdio
    peers = []
    for i in range(n):
        p = kind(target, i)
        await p.open()
        await p.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}})
        await p.call("notifications/initialized", notify=True)
        peers.append(p)
    rtts, stats = [], {"pings": 0, "failures": 0}
    # Its sessions are open: a caller measuring from outside starts here.
    print("pinging", flush=True)
    cpu0 = time.process_time()
    start = time.perf_counter()

    async def run(i, p):
        await asyncio.sleep(interval * i / n)
        while time.perf_counter() - start < duration:
            t0 = time.perf_counter()
            try:
                await asyncio.wait_for(p.call("ping"), 5)
                rtts.append((time.perf_counter() - t0) * 1e6)
                stats["pings"] += 1
            except Exception:
                stats["failures"] += 1
            await asyncio.sleep(max(0, interval - (time.perf_counter() - t0)))

    await asyncio.gather(*(run(i, p) for i, p in enumerate(peers)))
    cpu = time.process_time() - cpu0
    hwm = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))
    rtts.sort()
    q = lambda x: rtts[min(len(rtts) - 1, int(x * len(rtts)))] if rtts else None
    print(json.dumps({"client": "raw", "cpu_s": cpu, "peak_rss_kib": hwm, "pings": stats["pings"],
                      "failures": stats["failures"], "p50_us": q(0.5), "p99_us": q(0.99)}), flush=True)
    if mode == "stdio":
        for p in peers:
            p.p.kill()


asyncio.run(main())
