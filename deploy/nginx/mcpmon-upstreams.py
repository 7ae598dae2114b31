#!/usr/bin/env python3
"""Write an nginx upstream block from mcpmon's verdicts.

Open-source nginx has no active health checks, and gating every request on
an auth subrequest to mcpmon puts mcpmon on every request's path (and turns
its 503 into a 500). Instead, run this every few seconds (a systemd timer,
or a loop beside nginx) and reload nginx when it says the file changed:

    mcpmon-upstreams.py --mcpmon http://127.0.0.1:9850 --upstream mcp_search \
        --server search-1=10.0.0.11:8931 --server search-2=10.0.0.12:8931 \
        --out /etc/nginx/conf.d/mcp_search.upstream.conf && nginx -s reload

Servers mcpmon judges unhealthy or unknown are written `down`. It fails
open: when mcpmon cannot be asked, the file is left as it was, and when
every server would be down, all are written up (an outage is better served
by trying than by a guaranteed 502).

Exit status: 0 the file changed (reload nginx), 3 unchanged, 2 mcpmon could
not be asked (file untouched), 1 bad arguments. Python 3 standard library only.
"""

import argparse
import json
import os
import sys
import tempfile
import urllib.request


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mcpmon", required=True, help="mcpmon's base URL")
    p.add_argument("--upstream", required=True, help="name of the upstream block")
    p.add_argument("--server", action="append", required=True, metavar="ID=HOST:PORT",
                   help="an mcpmon server id and the address nginx proxies to")
    p.add_argument("--out", required=True, help="file to write")
    p.add_argument("--timeout", type=float, default=2.0)
    a = p.parse_args()
    servers = []
    for s in a.server:
        if "=" not in s:
            p.error(f"--server {s!r} is not ID=HOST:PORT")
        servers.append(tuple(s.split("=", 1)))
    try:
        with urllib.request.urlopen(f"{a.mcpmon.rstrip('/')}/health/fleet",
                                    timeout=a.timeout) as r:
            fleet = json.load(r)
    except Exception as e:  # 503 is an answer too: urllib raises on it
        body = getattr(e, "read", None)
        try:
            fleet = json.loads(body()) if body else None
        except Exception:
            fleet = None
        if not fleet:
            print(f"mcpmon not reachable ({e}); {a.out} left as it was", file=sys.stderr)
            return 2
    state = {s["id"]: s["status"] for s in fleet.get("servers", [])}
    up = {sid for sid, _ in servers if state.get(sid) in ("healthy", "degraded")}
    if not up:
        up = {sid for sid, _ in servers}  # fail open
    lines = [f"# written by mcpmon-upstreams.py from {a.mcpmon}", f"upstream {a.upstream} {{"]
    for sid, addr in servers:
        lines.append(f"    server {addr}{'' if sid in up else ' down'};  # {sid}: {state.get(sid, 'not monitored')}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    try:
        with open(a.out) as f:
            if f.read() == text:
                return 3
    except FileNotFoundError:
        pass
    d = os.path.dirname(os.path.abspath(a.out))
    with tempfile.NamedTemporaryFile("w", dir=d, delete=False) as f:
        f.write(text)
    os.replace(f.name, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
