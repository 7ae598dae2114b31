#!/usr/bin/env python3
"""Misbehaving MCP peers for mcpmon's fault-injection tests (stdlib only).

stdio servers (speak JSON-RPC on stdin/stdout, legacy era):
    hostile.py stdio garbage       # prints non-JSON lines and never answers
    hostile.py stdio noisy         # answers, but interleaves garbage lines and floods stderr
    hostile.py stdio huge          # answers ping with a 16 MiB line
    hostile.py stdio trickle       # answers one byte every 200 ms (slowloris)
    hostile.py stdio bad-health    # health_check result is malformed
    hostile.py stdio tool-churn    # a different tools list on every call, 5000 tools
    hostile.py stdio malformed     # answers with broken JSON-RPC envelopes
    hostile.py stdio flood         # after initialize, writes ping requests forever, never reads again
    hostile.py stdio loud-info     # serverInfo with a 1 MiB protocolVersion, \n and ESC in its name

HTTP fault proxy in front of a real server, mode read from a file per request:
    hostile.py proxy UPSTREAM_URL PORT MODE_FILE
    modes: pass | 500 | 502 | 503 | expire (the session is forgotten: 404 for it from then on) | redirect | huge

HTTPS server with an untrusted certificate:
    hostile.py tls CERT KEY PORT
"""

import http.server
import json
import os
import socketserver
import ssl
import sys
import threading
import time
import urllib.request


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def result(msg_id, value):
    send({"jsonrpc": "2.0", "id": msg_id, "result": value})


INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "hostile", "version": "0"},
}


def tools(n):
    return [{"name": f"tool_{i}", "inputSchema": {"type": "object"}} for i in range(n)]


def stdio(mode):
    calls = 0
    if mode == "garbage":
        while True:
            sys.stdout.write("this is not json-rpc\n{{{broken\n")
            sys.stdout.flush()
            time.sleep(0.05)
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None:
            continue  # a notification
        if mode == "noisy":
            sys.stdout.write("garbage between messages\n")
            sys.stderr.write("x" * 10000 + "\n")
            sys.stderr.flush()
        if method == "initialize" and mode == "loud-info":
            info = {
                "protocolVersion": "9" * (1024 * 1024),
                "capabilities": {"tools": {}},
                "serverInfo": {
                    "name": "evil\nlevel=ERROR msg=\"forged line\" \x1b[31mred\x1b[0m",
                    "version": "v" * (1024 * 1024),
                },
            }
            result(msg_id, info)
        elif method == "initialize":
            result(msg_id, INIT)
            if mode == "flood":
                # Wait for the client's notifications/initialized, then flood
                # and never read stdin again.
                sys.stdin.readline()
                n = 0
                while True:
                    n += 1
                    send({"jsonrpc": "2.0", "id": f"flood-{n}", "method": "ping"})
        elif method == "ping":
            if mode == "huge":
                result(msg_id, {"pad": "x" * (16 * 1024 * 1024)})
            elif mode == "trickle":
                text = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {}}) + "\n"
                for ch in text:
                    sys.stdout.write(ch)
                    sys.stdout.flush()
                    time.sleep(0.2)
            elif mode == "malformed":
                sys.stdout.write('{"jsonrpc": "2.0", "id": ' + json.dumps(msg_id) + ', "result": \n')
                sys.stdout.write('{"jsonrpc": "1.0", "weird": true}\n')
                sys.stdout.flush()
            else:
                result(msg_id, {})
        elif method == "tools/list":
            calls += 1
            n = 5000 if mode == "tool-churn" else 1
            listed = tools(n)
            if mode == "tool-churn":
                listed = [dict(t, name=f"{t['name']}_{calls}") for t in listed]
            if mode == "bad-health":
                listed = [{"name": "health_check", "inputSchema": {"type": "object"}}]
            result(msg_id, {"tools": listed})
        elif method == "tools/call":
            if mode == "bad-health":
                # content must be a list; structuredContent a JSON object.
                result(msg_id, {"content": "not-a-list", "structuredContent": [1, 2, 3]})
            else:
                result(msg_id, {"content": [{"type": "text", "text": "ok"}]})
        else:
            send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "nope"}})


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = ""
    mode_file = ""
    expired = set()
    lock = threading.Lock()
    initializes = 0

    def log_message(self, *args):
        pass

    def mode(self):
        try:
            with open(self.mode_file) as f:
                return f.read().strip() or "pass"
        except OSError:
            return "pass"

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def forward(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        mode = self.mode()
        session = self.headers.get("Mcp-Session-Id")
        if body and b'"initialize"' in body:
            with Proxy.lock:
                Proxy.initializes += 1
            with open(self.mode_file + ".initializes", "w") as f:
                f.write(str(Proxy.initializes))
        if mode in ("500", "502", "503"):
            return self.reply(int(mode), b"upstream trouble")
        if mode == "redirect":
            return self.reply(307, b"", [("Location", "http://127.0.0.1:9/elsewhere")])
        if mode == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(64 * 1024 * 1024))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" " * (1024 * 1024))
            except OSError:
                pass
            return
        # An expired session stays forgotten, as on a real server: every
        # later request that names it gets 404 until a new initialize.
        if session and (session in Proxy.expired or mode == "expire"):
            Proxy.expired.add(session)
            return self.reply(404, b"session expired")
        req = urllib.request.Request(self.upstream, data=body, method=method)
        for k, v in self.headers.items():
            if k.lower() not in ("host", "content-length", "connection"):
                req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                data = r.read()
                headers = [(k, v) for k, v in r.getheaders()
                           if k.lower() not in ("content-length", "transfer-encoding", "connection")]
                self.reply(r.status, data, headers)
        except urllib.error.HTTPError as e:
            self.reply(e.code, e.read())
        except OSError:
            self.reply(502, b"upstream unreachable")

    def do_POST(self):
        self.forward("POST")

    def do_GET(self):
        # No standalone SSE stream through this proxy.
        self.reply(405, b"")

    def do_DELETE(self):
        self.forward("DELETE")


class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    kind = sys.argv[1]
    if kind == "stdio":
        stdio(sys.argv[2])
    elif kind == "proxy":
        Proxy.upstream, port, Proxy.mode_file = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        server = Threaded(("127.0.0.1", port), Proxy)
        print(f"listening on http://127.0.0.1:{server.server_address[1]}/mcp", flush=True)
        server.serve_forever()
    elif kind == "tls":
        cert, key, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
        Proxy.upstream, Proxy.mode_file = "http://127.0.0.1:9/mcp", os.devnull
        server = Threaded(("127.0.0.1", port), Proxy)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        print(f"listening on https://127.0.0.1:{server.server_address[1]}/mcp", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
