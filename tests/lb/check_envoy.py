"""Validates the Envoy recipe in docs/operations.md against Envoy's own API
definitions (PyPI `envoy-data-plane`, generated from envoyproxy's protos):
unknown or mistyped fields are errors. Also checks what the protos cannot:
a health check's `address` must be an IP, not a name.

    check_envoy.py docs/operations.md
"""

import ipaddress
import re
import sys

import yaml
from envoy_data_plane.envoy.config.cluster.v3 import Cluster

text = open(sys.argv[1]).read()
section = text.split("### Envoy", 1)[1].split("\n### ", 1)[0]
blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
if not blocks:
    sys.exit("no yaml block in the Envoy section")
clusters = yaml.safe_load(blocks[0])["clusters"]
for raw in clusters:
    cluster = Cluster.from_dict(raw)  # raises on an unknown or mistyped field
    for group in cluster.load_assignment.endpoints:
        for lb in group.lb_endpoints:
            hc = lb.endpoint.health_check_config.address.socket_address.address
            try:
                ipaddress.ip_address(hc)
            except ValueError:
                sys.exit(f"{cluster.name}: health_check_config address {hc!r} is not an IP")
    if not cluster.health_checks or not cluster.health_checks[0].http_health_check.path.startswith("/health/servers/"):
        sys.exit(f"{cluster.name}: no health check against mcpmon")
    print(f"{cluster.name}: valid")
