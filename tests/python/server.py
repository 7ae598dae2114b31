"""An MCP server built with the official Python SDK, for mcpmon's tests.

Runs with mcp 1.x (legacy protocol era, FastMCP) or mcp 2.x (modern era,
MCPServer), over stdio or Streamable HTTP:

    python server.py stdio
    python server.py http PORT

HEALTH_SHAPE picks how health_check answers, the ways Python servers write
it: `dict` (a dict return, the default), `json` (a `-> str` return holding
JSON text) or `word` (a `-> str` return holding the bare status word).
HEALTH_STATUS is the status it reports (default healthy).

REQUIRE_TOKEN_FILE puts the HTTP server behind a bearer-token gate, the way
a hosted server answers: the token is the file's content, read at every
request (so a test can revoke it); no or a wrong token gets 401 with an
RFC 9728 `resource_metadata` challenge, and the token with `-readonly`
appended gets 403 `insufficient_scope`.

ISSUE_TOKENS=id:secret:seconds makes the gate an OAuth 2.0 authorization
server too: POST /token with client credentials (HTTP Basic) issues tokens
that expire after that many seconds, and only unexpired ones are accepted.

EXTRA_TOOLS_FILE names a file read at start: one more `echo`-like tool per
line (a redeploy that changes the tool surface). The `grow` tool adds a
tool named `grown` while running and announces it with
`notifications/tools/list_changed`.

TRACE_FILE: each health_check call appends the `traceparent` it got in
`params._meta` (or `-` for none) to that file.

THROTTLE_FILE makes it throttle: while that file exists, every request is
answered 429 with its content as `Retry-After`, and each throttled POST
adds a line to the file's name plus `.log`.
"""

import json
import os
import sys
import time

try:  # mcp 2.x
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as Server

STARTED = time.time()
CALLS = {"n": 0}

mcp = Server("python-sdk-demo")


SHAPE = os.environ.get("HEALTH_SHAPE", "dict")
STATUS = os.environ.get("HEALTH_STATUS", "healthy")


def note_trace(ctx) -> None:
    path = os.environ.get("TRACE_FILE")
    if not path:
        return
    meta = getattr(ctx.request_context, "meta", None)
    if isinstance(meta, dict):
        tp = meta.get("traceparent")
    else:
        tp = (getattr(meta, "model_extra", None) or {}).get("traceparent")
    with open(path, "a") as f:
        f.write(f"{tp or '-'}\n")


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
    def health_check(ctx: Context) -> dict:
        """Report this server's health."""
        note_trace(ctx)
        return report()

else:
    # FastMCP wraps a `str` return as structuredContent {"result": "..."}.

    @mcp.tool()
    def health_check(ctx: Context) -> str:
        """Report this server's health."""
        note_trace(ctx)
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


@mcp.resource("inventory://stock", mime_type="application/json")
def stock() -> str:
    """What is in stock: a resource a probe reads."""
    return json.dumps({"widgets": 12})


@mcp.prompt()
def triage(service: str) -> str:
    """A prompt a probe gets: its argument comes back in the message."""
    return f"Triage the incident on {service}."


def _extra(text: str) -> str:
    """An extra tool of this deployment."""
    return text


for _name in (
    open(os.environ["EXTRA_TOOLS_FILE"]).read().split()
    if os.path.exists(os.environ.get("EXTRA_TOOLS_FILE", "/nonexistent"))
    else []
):
    mcp.add_tool(_extra, name=_name)


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and tell the client the list changed."""
    if not any(t.name == "grown" for t in await mcp.list_tools()):
        mcp.add_tool(_extra, name="grown")
    await ctx.session.send_tool_list_changed()
    return "grown"


def gate(app, token_file, throttle_file, issuer, port: int):
    """ASGI middleware: throttling, then only `Bearer <token>` reaches the app."""
    import base64
    import secrets

    metadata = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource"
    issued = {}  # token -> expiry (time.time())

    async def token_endpoint(scope, receive, send):
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        client_id, client_secret, seconds = issuer
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        expected = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        form = dict(p.split("=", 1) for p in body.decode().split("&") if "=" in p)
        if auth != f"Basic {expected}" or form.get("grant_type") != "client_credentials":
            payload, status = b'{"error":"invalid_client"}', 401
        else:
            token = secrets.token_urlsafe(24)
            issued[token] = time.time() + float(seconds)
            payload = json.dumps(
                {"access_token": token, "token_type": "Bearer", "expires_in": int(seconds)}
            ).encode()
            status = 200
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def refuse(send, status: int, challenge: str, header=b"www-authenticate") -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (header, challenge.encode()),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if throttle_file and os.path.exists(throttle_file):
            with open(throttle_file) as f:
                retry_after = f.read().strip()
            if scope["method"] == "POST":
                with open(throttle_file + ".log", "a") as f:
                    f.write(f"{time.time()}\n")
            return await refuse(send, 429, retry_after, b"retry-after")
        if issuer and scope["path"] == "/token":
            return await token_endpoint(scope, receive, send)
        if scope["path"] == "/.well-known/oauth-protected-resource":
            doc = {
                "resource": f"http://127.0.0.1:{port}/mcp",
                "authorization_servers": [f"http://127.0.0.1:{port}"],
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            return await send({"type": "http.response.body", "body": json.dumps(doc).encode()})
        if not token_file and not issuer:
            return await app(scope, receive, send)
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = None
        if token_file:
            with open(token_file) as f:
                token = f.read().strip()
        presented = auth.removeprefix("Bearer ")
        if issued.get(presented, 0) > time.time():
            return await app(scope, receive, send)
        if token and auth == f"Bearer {token}":
            return await app(scope, receive, send)
        if token and auth == f"Bearer {token}-readonly":
            return await refuse(
                send, 403, 'Bearer error="insufficient_scope", scope="mcp:tools"'
            )
        return await refuse(send, 401, f'Bearer resource_metadata="{metadata}"')

    return guarded


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        mcp.run()
        return
    port = int(sys.argv[2])
    token_file = os.environ.get("REQUIRE_TOKEN_FILE")
    throttle_file = os.environ.get("THROTTLE_FILE")
    issuer = os.environ.get("ISSUE_TOKENS")
    issuer = issuer.split(":") if issuer else None
    if token_file or throttle_file or issuer:
        import uvicorn

        app = gate(mcp.streamable_http_app(), token_file, throttle_file, issuer, port)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    try:
        mcp.run(transport="streamable-http", host="127.0.0.1", port=port)
    except TypeError:  # mcp 1.x takes host and port as settings
        mcp.settings.host = "127.0.0.1"
        mcp.settings.port = port
        mcp.run(transport="streamable-http")


if __name__ == "__main__":
    main()
