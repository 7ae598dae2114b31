"""A server built with FastMCP (PyPI `fastmcp`, 2.x speaks the legacy era
and 4.x the modern one), the way its README writes one:

    python fastmcp_server.py stdio
    python fastmcp_server.py http PORT
    python fastmcp_server.py sse PORT   (the legacy HTTP+SSE transport)
"""

import sys

from fastmcp import FastMCP

mcp = FastMCP("compat-fastmcp")


@mcp.tool
def echo(text: str) -> str:
    """Say it back."""
    return text


if __name__ == "__main__":
    if sys.argv[1:2] == ["sse"]:
        mcp.run(transport="sse", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    elif sys.argv[1:2] == ["http"]:
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    else:
        mcp.run()
