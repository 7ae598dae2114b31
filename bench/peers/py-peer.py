"""Peer client on the official Python SDK (mcp): open N sessions, ping each
once per interval (spread evenly), with a timeout; print one JSON line.
    python py-peer.py http URL_BASE N INTERVAL_S DURATION_S
    python py-peer.py stdio COMMAND N INTERVAL_S DURATION_S
"""
import asyncio
import contextlib
import json
import re
import resource
import sys
import time
from datetime import timedelta

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


async def main():
    mode, target, n, interval, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    stack = contextlib.AsyncExitStack()
    sessions = []
    for i in range(n):
        if mode == "http":
            read, write, _ = await stack.enter_async_context(streamablehttp_client(f"{target}/mcp/{i}"))
        else:
            read, write = await stack.enter_async_context(stdio_client(StdioServerParameters(command=target, args=["--stdio"])))
        s = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=timedelta(seconds=5)))
        await s.initialize()
        sessions.append(s)
    rtts, stats = [], {"pings": 0, "failures": 0}
    cpu0 = time.process_time()
    start = time.perf_counter()

    async def run(i, s):
        await asyncio.sleep(interval * i / n)
        while time.perf_counter() - start < duration:
            t0 = time.perf_counter()
            try:
                await asyncio.wait_for(s.send_ping(), 5)
                rtts.append((time.perf_counter() - t0) * 1e6)
                stats["pings"] += 1
            except Exception:
                stats["failures"] += 1
            await asyncio.sleep(max(0, interval - (time.perf_counter() - t0)))

    await asyncio.gather(*(run(i, s) for i, s in enumerate(sessions)))
    cpu = time.process_time() - cpu0
    hwm = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))
    rtts.sort()
    q = lambda p: rtts[min(len(rtts) - 1, int(p * len(rtts)))] if rtts else None
    print(json.dumps({"client": "py", "cpu_s": cpu, "peak_rss_kib": hwm, "pings": stats["pings"],
                      "failures": stats["failures"], "p50_us": q(0.5), "p99_us": q(0.99)}), flush=True)
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(stack.aclose(), 10)


asyncio.run(main())
