#!/usr/bin/env python3
"""Attackers for mcpmon's hostile-input suite (tests/it/hostile.rs), stdlib only.

Each answers what a monitor needs (the handshake of its era, liveness,
tools/list) so that only the attack itself is wrong, and starts its attack
once the file TRIGGER exists (so the test can take a baseline first).

MCP servers:
    attacks.py stdio ERA KIND TRIGGER
    attacks.py http ERA KIND TRIGGER PORT_FILE
    attacks.py sse KIND TRIGGER PORT_FILE    the legacy HTTP+SSE transport (GET /sse)
        ERA:  legacy | modern
        KIND: message | progress | list_changed | mix   notification storms
              (over HTTP they come inside every answer's SSE stream)
              huge-tools     16 pages of one tool each with a 4 MB schema,
                             then list_changed every 50 ms (stdio)
              slow-event     every answer is one 3 MiB SSE event written
                             1 KiB at a time (http legacy)
              endless-event  one event that never ends, as fast as the
                             stream takes it (sse)
              elsewhere      the stream names a message endpoint on another
                             origin, at once (sse)
              blank-events   empty events ("\\n\\n") as fast as the stream
                             takes them (sse)
              sniff          unsolicited listing-shaped lines, each under
                             1 MiB, naming one tool of ~1 MB with
                             taskSupport, 16 a second (stdio)
              slow-cel       every tools/call answer has 3 000 text items,
                             for a condition that compares each with each

Other peers:
    attacks.py serve BODY_FILE PORT_FILE      http_sd: BODY_FILE's bytes, as JSON, on every GET
    attacks.py registry KIND TRIGGER PORT_FILE
        an MCP Registry (GET /v0.1/servers); empty until TRIGGER exists, then:
        KIND: huge-version   12 pages, each one active server (a new name)
                             whose version is a 15 MiB string
              alike-names    one page of 40 000 servers whose names agree in
                             their first 64 characters
    attacks.py token TOKEN PORT_FILE          an OAuth token endpoint handing out TOKEN

PORT_FILE receives the port the server listens on (bound to 127.0.0.1:0).
"""

import http.server
import json
import os
import queue
import socketserver
import sys
import threading
import time

LEGACY = "2025-06-18"
MODERN = "2026-07-28"


def storm_line(kind, n):
    if kind == "mix":
        kind = ("message", "progress", "list_changed")[n % 3]
    if kind == "message":
        note = {"method": "notifications/message", "params": {"level": "info", "data": f"log {n}"}}
    elif kind == "progress":
        # Tokens mcpmon's requests use (rmcp numbers them from 0) and others.
        note = {"method": "notifications/progress", "params": {"progressToken": n % 8, "progress": n}}
    else:
        note = {"method": "notifications/tools/list_changed"}
    note["jsonrpc"] = "2.0"
    return json.dumps(note)


def handshake_result(era, method):
    if era == "legacy" and method == "initialize":
        return {
            "protocolVersion": LEGACY,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "attacker", "version": "1"},
        }
    if era == "modern" and method == "server/discover":
        return {
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {"listChanged": True}},
            "ttlMs": 0,
            "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "attacker", "version": "1"}},
        }
    return None


def answer(era, kind, msg, pages_served):
    """The JSON-RPC answer to `msg`, or None for a notification."""
    method, msg_id = msg.get("method"), msg.get("id")
    if msg_id is None:
        return None
    result = handshake_result(era, method)
    if result is None and method == "ping" and era == "legacy":
        result = {}
    if result is None and method == "tools/call" and kind == "slow-cel":
        items = 3000 if attacking(TRIGGER) else 1
        result = {"content": [{"type": "text", "text": "t"} for _ in range(items)]}
    if result is None and method == "tools/list":
        if kind == "huge-tools":
            page = int((msg.get("params") or {}).get("cursor") or 0)
            pages_served[0] += 1
            schema = {"type": "object", "properties": {"pad": {"description": "x" * 4_000_000}}}
            result = {"tools": [{"name": f"big_{page}", "inputSchema": schema}]}
            if page < 15:
                result["nextCursor"] = str(page + 1)
        else:
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        if era == "modern":
            result.update(resultType="complete", ttlMs=0, cacheScope="public")
    if result is None:
        return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


# The trigger file of this peer (set by main), for answers that change.
TRIGGER = ""


def attacking(trigger):
    return os.path.exists(trigger)


def stdio(era, kind, trigger):
    out = sys.stdout.buffer
    lock = threading.Lock()

    def write(text):
        with lock:
            out.write(text.encode() + b"\n")
            out.flush()

    def storm():
        while not attacking(trigger):
            time.sleep(0.05)
        n = 0
        if kind == "huge-tools":
            while True:
                write(storm_line("list_changed", 0))
                time.sleep(0.05)
        if kind == "sniff":
            # Under the inbound budget (32 MiB/s): answers to nothing
            # mcpmon asked, each naming a new megabyte-long tool.
            while True:
                name = f"{n:08d}" + "n" * 1_000_000
                n += 1
                tool = {"name": name, "inputSchema": {}, "execution": {"taskSupport": "optional"}}
                write(json.dumps({"jsonrpc": "2.0", "id": 900000 + n, "result": {"tools": [tool]}}))
                time.sleep(1 / 16)
        if kind == "slow-cel":
            return
        while True:
            chunk = "\n".join(storm_line(kind, n + i) for i in range(500))
            n += 500
            try:
                write(chunk)
            except (BrokenPipeError, OSError):
                os._exit(0)

    if kind != "none":
        threading.Thread(target=storm, daemon=True).start()
    pages = [0]
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        reply = answer(era, kind, msg, pages)
        if reply is not None:
            try:
                write(json.dumps(reply))
            except (BrokenPipeError, OSError):
                os._exit(0)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    era = "legacy"
    kind = "message"
    trigger = ""
    pages = [0]

    def log_message(self, *args):
        pass

    def plain(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.plain(405)

    def do_DELETE(self):
        self.plain(200)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            msg = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.plain(400)
        reply = answer(self.era, self.kind, msg, self.pages)
        if reply is None:
            return self.plain(202)
        body = json.dumps(reply).encode()
        if msg.get("method") == "initialize":
            return self.plain(200, body, [("Content-Type", "application/json"), ("Mcp-Session-Id", "s1")])
        if not attacking(self.trigger):
            return self.plain(200, body, [("Content-Type", "application/json")])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if self.kind == "slow-event":
                # One event of 3 MiB, a kibibyte at a time: the reader must
                # not scan the whole event again at every piece.
                self.wfile.write(b"data: ")
                self.wfile.flush()
                pad = json.dumps(reply)[:-1] + ', "pad": "'
                self.wfile.write(pad.encode())
                piece = b"y" * 1024
                for i in range(3 * 1024):
                    self.wfile.write(piece)
                    self.wfile.flush()
                    if i % 16 == 0:
                        time.sleep(0.002)
                self.wfile.write(b'"}\n\n')
            else:
                n = 0
                for _ in range(200):
                    events = "".join(f"data: {storm_line(self.kind, n + i)}\n\n" for i in range(500))
                    n += 500
                    self.wfile.write(events.encode())
                self.wfile.write(f"data: {json.dumps(reply)}\n\n".encode())
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


class Sse(http.server.BaseHTTPRequestHandler):
    """The legacy HTTP+SSE transport: GET /sse holds the stream, whose first
    event names /messages; answers to what is POSTed there go down the
    stream. One session at a time."""

    protocol_version = "HTTP/1.1"
    kind = "message"
    trigger = ""
    out = queue.Queue()
    pages = [0]

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            msg = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            msg = {}
        reply = answer("legacy", self.kind, msg, self.pages)
        if reply is not None:
            Sse.out.put(json.dumps(reply))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        if self.path != "/sse":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        Sse.out = queue.Queue()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        n = 0
        try:
            endpoint = b"http://127.0.0.1:9/messages" if self.kind == "elsewhere" else b"/messages"
            self.wfile.write(b"event: endpoint\ndata: " + endpoint + b"\n\n")
            self.wfile.flush()
            while True:
                try:
                    text = Sse.out.get(timeout=0.02)
                    self.wfile.write(f"event: message\ndata: {text}\n\n".encode())
                    self.wfile.flush()
                except queue.Empty:
                    pass
                if not attacking(self.trigger):
                    continue
                if self.kind == "blank-events":
                    blank = b"\n\n" * 32768
                    while True:
                        self.wfile.write(blank)
                if self.kind == "endless-event":
                    self.wfile.write(b"event: message\ndata: ")
                    piece = b"z" * 65536
                    while True:
                        self.wfile.write(piece)
                events = "".join(
                    f"event: message\ndata: {storm_line(self.kind, n + i)}\n\n" for i in range(500)
                )
                n += 500
                self.wfile.write(events.encode())
        except OSError:
            pass
        self.close_connection = True


class Serve(http.server.BaseHTTPRequestHandler):
    """http_sd: the body file's bytes as JSON on every GET."""

    protocol_version = "HTTP/1.1"
    body_file = ""

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            with open(self.body_file, "rb") as f:
                body = f.read()
        except OSError:
            body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Registry(http.server.BaseHTTPRequestHandler):
    """An MCP Registry's GET /v0.1/servers, hostile once TRIGGER exists."""

    protocol_version = "HTTP/1.1"
    kind = "huge-version"
    trigger = ""

    def log_message(self, *args):
        pass

    def page(self, cursor):
        official = {"io.modelcontextprotocol.registry/official": {"status": "active", "isLatest": True}}
        remote = lambda i: [{"type": "streamable-http", "url": f"http://127.0.0.1:9/mcp/{i}"}]
        if not attacking(self.trigger):
            return {"servers": [], "metadata": {"count": 0}}
        if self.kind == "alike-names":
            prefix = "io.example.alike/" + "a" * 60
            servers = [
                {"server": {"name": f"{prefix}{i}", "version": "1", "remotes": remote(i)}, "_meta": official}
                for i in range(40_000)
            ]
            return {"servers": servers, "metadata": {"count": len(servers)}}
        page = int(cursor or 0)
        server = {"name": f"io.example.huge/s{page}", "version": "v" * (15 << 20), "remotes": remote(page)}
        out = {"servers": [{"server": server, "_meta": official}], "metadata": {"count": 1}}
        if page < 11:
            out["metadata"]["nextCursor"] = str(page + 1)
        return out

    def do_GET(self):
        from urllib.parse import parse_qs, urlparse

        url = urlparse(self.path)
        if url.path != "/v0.1/servers":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        cursor = (parse_qs(url.query).get("cursor") or [None])[0]
        body = json.dumps(self.page(cursor)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Token(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    token = ""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"access_token": self.token, "token_type": "Bearer", "expires_in": 3600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up mid-answer is what these peers expect


def listen(handler, port_file):
    server = Threaded(("127.0.0.1", 0), handler)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, port_file)
    server.serve_forever()


def main():
    global TRIGGER
    what = sys.argv[1]
    if what in ("stdio", "http"):
        TRIGGER = sys.argv[4]
    if what == "stdio":
        stdio(sys.argv[2], sys.argv[3], sys.argv[4])
    elif what == "http":
        Handler.era, Handler.kind, Handler.trigger = sys.argv[2], sys.argv[3], sys.argv[4]
        listen(Handler, sys.argv[5])
    elif what == "sse":
        Sse.kind, Sse.trigger = sys.argv[2], sys.argv[3]
        listen(Sse, sys.argv[4])
    elif what == "serve":
        Serve.body_file = sys.argv[2]
        listen(Serve, sys.argv[3])
    elif what == "registry":
        Registry.kind, Registry.trigger = sys.argv[2], sys.argv[3]
        listen(Registry, sys.argv[4])
    elif what == "token":
        Token.token = sys.argv[2]
        listen(Token, sys.argv[3])


if __name__ == "__main__":
    main()
