"""An MCP server built with the official Python SDK, for mcpmon's tests.

Runs with mcp 1.x (legacy protocol era, FastMCP) or mcp 2.x (modern era,
MCPServer), over stdio or Streamable HTTP:

    python server.py stdio
    python server.py http PORT

HEALTH_SHAPE picks how health_check answers, the ways Python servers write
it: `dict` (a dict return, the default), `json` (a `-> str` return holding
JSON text) or `word` (a `-> str` return holding the bare status word).
HEALTH_STATUS is the status it reports (default healthy).
"""

import json
import os
import sys
import time

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

STARTED = time.time()
CALLS = {"n": 0}

mcp = Server("python-sdk-demo")


SHAPE = os.environ.get("HEALTH_SHAPE", "dict")
STATUS = os.environ.get("HEALTH_STATUS", "healthy")


def report() -> dict:
    CALLS["n"] += 1
    return {
        "status": STATUS,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "uptime_seconds": int(time.time() - STARTED),
        "request_count": CALLS["n"],
    }


if SHAPE == "dict":

    @mcp.tool()
    def health_check() -> dict:
        """Report this server's health."""
        return report()

else:
    # FastMCP wraps a `str` return as structuredContent {"result": "..."}.

    @mcp.tool()
    def health_check() -> str:
        """Report this server's health."""
        return json.dumps(report()) if SHAPE == "json" else STATUS


@mcp.tool()
async def block(seconds: float) -> str:
    """Block the server's event loop (a CPU-bound call done wrong)."""
    time.sleep(seconds)
    return "done"


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        mcp.run()
        return
    port = int(sys.argv[2])
    try:
        mcp.run(transport="streamable-http", host="127.0.0.1", port=port)
    except TypeError:  # mcp 1.x takes host and port as settings
        mcp.settings.host = "127.0.0.1"
        mcp.settings.port = port
        mcp.run(transport="streamable-http")


if __name__ == "__main__":
    main()
