#!/usr/bin/env python3
"""Builds the Grafana dashboards (mcpmon-fleet.json, mcpmon-server.json).

The JSON files are committed; edit this file and run it to change them:

    python3 dashboards/build.py

Every panel query uses the `datasource` variable, `$__rate_interval` for
rates, and label matchers on `job`/`server` variables, so the integration
test can substitute the variables and run each query against Prometheus.
"""

import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}


def datasource_var():
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }


def query_var(name, label, query, multi):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-var"},
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "allValue": ".*" if multi else None,
        "current": {},
        "hide": 0,
    }


class Layout:
    """Places panels on Grafana's 24-column grid, left to right."""

    def __init__(self):
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def place(self, w, h):
        if self.x + w > 24:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        pid = self.next_id
        self.next_id += 1
        return pid, pos


def target(expr, legend="", ref="A", instant=False, fmt="time_series"):
    t = {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "format": fmt,
    }
    if instant:
        t["instant"] = True
        t["range"] = False
    return t


def panel(layout, kind, title, targets, w=12, h=8, description="", **extra):
    pid, pos = layout.place(w, h)
    p = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": pos,
        "targets": targets,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {},
    }
    p.update(extra)
    return p


STATE_MAPPING = [
    {
        "type": "value",
        "options": {
            "0": {"text": "unknown", "color": "text"},
            "1": {"text": "healthy", "color": "green"},
            "2": {"text": "degraded", "color": "orange"},
            "3": {"text": "unhealthy", "color": "red"},
        },
    }
]

# 0 unknown, 1 healthy, 2 degraded, 3 unhealthy, per server.
STATE_EXPR = (
    'max by (server) (mcpmon_server_state{{job=~"$job", server=~"{s}", state="healthy"}})'
    ' + 2 * max by (server) (mcpmon_server_state{{job=~"$job", server=~"{s}", state="degraded"}})'
    ' + 3 * max by (server) (mcpmon_server_state{{job=~"$job", server=~"{s}", state="unhealthy"}})'
)


# The server dashboard for the series or row a link is on, keeping time and job.
SERVER_LINK = (
    "/d/mcpmon-server/mcpmon-server?var-server={server}&var-job=${{job}}"
    "&var-datasource=${{datasource}}&${{__url_time_range}}"
)
# p99 liveness latency above this for 10m fires McpServerPingLatencyHigh.
LATENCY_ALERT_SECONDS = 0.5

# The availability objective of the mixin's burn-rate alerts (alerts/build.py).
SLO_AVAILABILITY = 99.9
BUDGET = round(1 - SLO_AVAILABILITY / 100, 10)
# Its windows, and the burn rate each alerts at.
BURN_WINDOWS = [("1h", 14.4), ("6h", 6), ("1d", 3), ("3d", 1)]


def server_links(label="${__field.labels.server}"):
    return [{"title": "Server detail", "url": SERVER_LINK.format(server=label)}]


def count_thresholds(bad_color):
    """A count that should be zero: green at 0, `bad_color` from 1."""
    return {
        "unit": "none",
        "decimals": 0,
        "color": {"mode": "thresholds"},
        "thresholds": {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": bad_color, "value": 1}]},
    }


def dashboard(uid, title, description, variables, panels, tags, links=()):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": tags,
        "editable": False,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "graphTooltip": 1,
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [
            {"title": "mcpmon", "type": "dashboards", "tags": ["mcpmon"], "asDropdown": True}
        ] + list(links),
        "panels": panels,
    }


def fleet():
    L = Layout()
    sel = 'job=~"$job", server=~"$server"'
    panels = []
    for state, color in [("healthy", "green"), ("degraded", "orange"), ("unhealthy", "red"), ("unknown", "text")]:
        # Healthy is good news in any number; the others are green only at 0.
        defaults = (
            {"unit": "none", "decimals": 0, "color": {"mode": "fixed", "fixedColor": "green"}}
            if state == "healthy" else count_thresholds(color)
        )
        panels.append(
            panel(
                L, "stat", f"Servers {state}",
                [target(f'sum(job_state:mcpmon_servers:count{{job=~"$job", state="{state}"}})', instant=True)],
                w=4, h=4,
                fieldConfig={"defaults": defaults, "overrides": []},
                options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
            )
        )
    panels.append(
        panel(
            L, "stat", "Health percentage",
            [target(
                f'100 * sum(job_state:mcpmon_servers:count{{job=~"$job", state="healthy"}}) / sum(job:mcpmon_servers:count{{job=~"$job"}})',
                instant=True,
            )],
            w=4, h=4, description="Share of servers judged healthy, across every shard (fleet-wide recording rules).",
            fieldConfig={"defaults": {"unit": "percent", "min": 0, "max": 100}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "stat", "Available vs policy",
            [
                target('min(job:mcpmon_servers_available:ratio{job=~"$job"})', "available", "A", instant=True),
                target('max(job:mcpmon_fleet_policy_min_available:ratio{job=~"$job"})', "required", "B", instant=True),
            ],
            w=4, h=4, description="Across every shard. Each replica's /health/fleet answers 503 while its own shard is below required.",
            fieldConfig={"defaults": {"unit": "percentunit"}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "table", "Servers",
            [
                target(f"max by (server, state) (mcpmon_server_state{{{sel}}} == 1)", ref="A", instant=True, fmt="table"),
                target(f"max by (server, reason) (mcpmon_server_reason{{{sel}}})", ref="B", instant=True, fmt="table"),
                target(f"max by (server) (server:mcpmon_ping_duration_seconds:p50_rate5m{{{sel}}})", ref="C", instant=True, fmt="table"),
                target(f"max by (server) (server:mcpmon_ping_duration_seconds:p99_rate5m{{{sel}}})", ref="D", instant=True, fmt="table"),
                target(f"time() - max by (server) (mcpmon_server_last_check_timestamp_seconds{{{sel}}})", ref="E", instant=True, fmt="table"),
            ],
            w=24, h=9, description="State, reason, liveness latency (p50/p99 over 5m) and seconds since the last probe result.",
            transformations=[
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value #A": True, "Value #B": True},
                    "renameByName": {"Value #C": "ping p50", "Value #D": "ping p99", "Value #E": "since last check"},
                }},
            ],
            fieldConfig={"defaults": {}, "overrides": [
                {"matcher": {"id": "byRegexp", "options": "ping.*"}, "properties": [{"id": "unit", "value": "s"}]},
                {"matcher": {"id": "byName", "options": "since last check"}, "properties": [{"id": "unit", "value": "s"}]},
                {"matcher": {"id": "byName", "options": "server"}, "properties": [
                    {"id": "links", "value": server_links("${__value.raw}")}]},
            ]},
        )
    )
    panels.append(
        panel(
            L, "state-timeline", "State timeline",
            # The 30 worst: a fleet of thousands stays readable and cheap to draw.
            [target(f"topk(30, {STATE_EXPR.format(s='$server')})", "{{server}}")],
            w=24, h=8, description="The 30 servers in the worst state (unhealthy first); pick servers above to see others.",
            fieldConfig={"defaults": {"mappings": STATE_MAPPING, "color": {"mode": "thresholds"},
                                      "links": server_links(),
                                      "thresholds": {"mode": "absolute", "steps": [
                                          {"color": "text", "value": None}, {"color": "green", "value": 1},
                                          {"color": "orange", "value": 2}, {"color": "red", "value": 3}]}},
                         "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "timeseries", "Probe failures by reason",
            [target(f"sum by (probe, reason) (rate(mcpmon_probe_failures_total{{{sel}}}[$__rate_interval]))", "{{probe}} {{reason}}")],
            fieldConfig={"defaults": {"unit": "ops"}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "timeseries", "Reconnect rate",
            [target(f"topk(10, sum by (server, reason) (rate(mcpmon_reconnects_total{{{sel}}}[$__rate_interval])))", "{{server}} {{reason}}")],
            description="The 10 busiest reconnecting servers.",
            fieldConfig={"defaults": {"unit": "ops", "links": server_links()}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "timeseries", "Ping timeouts vs reconnects",
            [
                target(f'sum(rate(mcpmon_probe_failures_total{{{sel}, probe=~"ping|discover", reason="timeout"}}[$__rate_interval]))', "ping timeouts", "A"),
                target(f"sum(rate(mcpmon_reconnects_total{{{sel}}}[$__rate_interval]))", "reconnects", "B"),
            ],
            description="A monitor that reconnects on every late ping shows these two lines together; mcpmon should keep reconnects far below timeouts.",
            fieldConfig={"defaults": {"unit": "ops"}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "bargauge", "Slowest servers (ping p99, 5m)",
            [target(f"topk(10, server:mcpmon_ping_duration_seconds:p99_rate5m{{{sel}}})", "{{server}}", instant=True)],
            fieldConfig={"defaults": {"unit": "s", "links": server_links(), "color": {"mode": "thresholds"},
                                      "thresholds": {"mode": "absolute", "steps": [
                                          {"color": "green", "value": None},
                                          {"color": "red", "value": LATENCY_ALERT_SECONDS}]}},
                         "overrides": []},
            options={"orientation": "horizontal", "reduceOptions": {"calcs": ["lastNotNull"]}},
        )
    )
    # mcpmon itself: is the monitor healthy, and what does watching cost?
    own = 'job=~"$job"'
    panels.append(
        panel(
            L, "timeseries", "mcpmon: scrape and page time",
            [target(
                f'histogram_quantile(0.99, sum by (handler, le) (rate(mcpmon_http_request_duration_seconds_bucket{{{own}}}[$__rate_interval])))',
                "p99 {{handler}}",
            )],
            w=8, description="How long mcpmon takes to answer its own endpoints (/metrics render included).",
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        )
    )
    panels.append(
        panel(
            L, "timeseries", "mcpmon: CPU and memory",
            [
                target(f"rate(process_cpu_seconds_total{{{own}}}[$__rate_interval])", "CPU {{instance}}", "A"),
                target(f"process_resident_memory_bytes{{{own}}}", "memory {{instance}}", "B"),
            ],
            w=8, description="mcpmon's own process: cores used, and resident memory.",
            fieldConfig={"defaults": {"unit": "percentunit"}, "overrides": [
                {"matcher": {"id": "byFrameRefID", "options": "B"},
                 "properties": [{"id": "unit", "value": "bytes"}, {"id": "custom.axisPlacement", "value": "right"}]},
            ]},
        )
    )
    panels.append(
        panel(
            L, "stat", "mcpmon: last config load",
            [target(f"min(mcpmon_config_last_reload_successful{{{own}}})", instant=True)],
            w=8, h=8, description="0 means the last reload was rejected and an older config is running.",
            fieldConfig={"defaults": {
                "unit": "none",
                "mappings": [{"type": "value", "options": {
                    "0": {"text": "rejected", "color": "red"}, "1": {"text": "ok", "color": "green"}}}],
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [
                    {"color": "red", "value": None}, {"color": "green", "value": 1}]},
            }, "overrides": []},
            options={"colorMode": "background", "reduceOptions": {"calcs": ["lastNotNull"]}},
        )
    )
    panels.append(collapsed_row(L, "Locations (replicas with --location)", [
        ("timeseries", "Servers down, by location",
         [target('count by (location) (server_location:mcpmon_server_up:max{server=~"$server"} == 0)', "{{location}}", "A"),
          target('count(count without (location) (server_location:mcpmon_server_up:max{server=~"$server"} == 0) >= 2)',
                 "down from 2 or more", "B")],
         "Servers each location's replicas judge down. Down from one location only is that location's path; "
         "down from two or more is the server (McpServerDownFromLocations).",
         {"fieldConfig": {"defaults": {"unit": "none", "decimals": 0}, "overrides": []}}),
        ("table", "Locations reporting",
         [target("count by (location) (mcpmon_location_info)", "{{location}}", instant=True, fmt="table")],
         "Replicas per location now. A location that stopped reporting fires McpmonLocationSilent.",
         {}),
    ]))
    variables = [
        datasource_var(),
        query_var("job", "Job", "label_values(mcpmon_build_info, job)", True),
        query_var("server", "Server", 'label_values(mcpmon_server_up{job=~"$job"}, server)', True),
    ]
    return dashboard(
        "mcpmon-fleet", "mcpmon / Fleet overview",
        "Every MCP server mcpmon watches: states, reasons, latency, failures and reconnects.",
        variables, panels, ["mcpmon", "mcp"],
    )


def server():
    L = Layout()
    sel = 'job=~"$job", server="$server"'
    panels = [
        panel(
            L, "stat", "State",
            [target(STATE_EXPR.format(s="$server").replace('server=~"$server"', 'server="$server"'), "{{server}}", instant=True)],
            w=6, h=4,
            fieldConfig={"defaults": {"mappings": STATE_MAPPING}, "overrides": []},
            options={"colorMode": "background", "reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        panel(
            L, "stat", "Reason",
            [target(f"max by (reason) (mcpmon_server_reason{{{sel}}})", "{{reason}}", instant=True)],
            w=6, h=4, options={"textMode": "name", "reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        panel(
            L, "stat", "Since last probe result",
            [target(f"time() - max(mcpmon_server_last_check_timestamp_seconds{{{sel}}})", instant=True)],
            w=6, h=4, fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            L, "stat", "Health check tool",
            [target(f'count(mcpmon_server_info{{{sel}, health_check="true"}}) or vector(0)', instant=True)],
            w=6, h=4, fieldConfig={"defaults": {"unit": "none", "mappings": [{"type": "value", "options": {
                "0": {"text": "not listed", "color": "orange"}, "1": {"text": "listed", "color": "green"}}}]},
                "overrides": []},
            options={"colorMode": "background", "reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        panel(
            L, "heatmap", "Liveness latency",
            [target(f"sum by (le) (rate(mcpmon_ping_duration_seconds_bucket{{{sel}}}[$__rate_interval]))", "{{le}}", fmt="heatmap")],
            options={"calculate": False, "yAxis": {"unit": "s"}},
        ),
        panel(
            L, "timeseries", "Liveness latency quantiles",
            [
                target(f"histogram_quantile({q}, sum by (le) (rate(mcpmon_ping_duration_seconds_bucket{{{sel}}}[$__rate_interval])))", f"p{int(q * 100)}", ref)
                for q, ref in [(0.5, "A"), (0.9, "B"), (0.99, "C")]
            ],
            description=f"The dashed line is where McpServerPingLatencyHigh fires (p99 over {LATENCY_ALERT_SECONDS} s for 10m).",
            fieldConfig={"defaults": {
                "unit": "s",
                "custom": {"thresholdsStyle": {"mode": "dashed"}},
                "thresholds": {"mode": "absolute", "steps": [
                    {"color": "green", "value": None}, {"color": "red", "value": LATENCY_ALERT_SECONDS}]},
            }, "overrides": []},
        ),
        panel(
            L, "timeseries", "Probe failures by reason",
            [target(f"sum by (probe, reason) (rate(mcpmon_probe_failures_total{{{sel}}}[$__rate_interval]))", "{{probe}} {{reason}}")],
            fieldConfig={"defaults": {"unit": "ops"}, "overrides": []},
        ),
        panel(
            L, "timeseries", "health_check values",
            [target(f"mcpmon_health_check_value{{{sel}}}", "{{field}}")],
            description="Numeric fields the server's own health_check reported.",
        ),
        panel(
            L, "timeseries", "Tool call durations",
            [
                target(f"histogram_quantile({q}, sum by (tool, le) (rate(mcpmon_tool_call_duration_seconds_bucket{{{sel}}}[$__rate_interval])))", f"{{{{tool}}}} p{int(q * 100)}", ref)
                for q, ref in [(0.5, "A"), (0.99, "B")]
            ] + [target(f"sum by (tool, reason) (increase(mcpmon_tool_call_cancellations_total{{{sel}}}[$__rate_interval]))", "{{tool}} cancelled ({{reason}})", "C")],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": [
                # Cancellations are counts: their own axis, not seconds.
                {"matcher": {"id": "byFrameRefID", "options": "C"}, "properties": [
                    {"id": "unit", "value": "none"}, {"id": "decimals", "value": 0},
                    {"id": "custom.axisPlacement", "value": "right"}]},
            ]},
        ),
        panel(
            L, "timeseries", "Sessions rebuilt and closed",
            [
                target(f"sum by (reason) (increase(mcpmon_reconnects_total{{{sel}}}[$__rate_interval]))", "rebuilt ({{reason}})", "A"),
                target(f"sum by (reason) (increase(mcpmon_session_closes_total{{{sel}}}[$__rate_interval]))", "closed ({{reason}})", "B"),
            ],
            description="Counters appear with their first event: a server that never lost a session shows none.",
            fieldConfig={"defaults": {"unit": "none", "decimals": 0}, "overrides": []},
        ),
    ]
    panels += budget_row(L)
    # What mcpmon exports only when asked (docs/metrics.md): a collapsed row,
    # so the dashboard stays whole at the default series budget.
    row_id, row_pos = L.place(24, 1)
    detail = Layout()
    detail.y = row_pos["y"] + 1
    detail.next_id = L.next_id
    detail_panels = [
        panel(
            detail, "stat", "Session age",
            [target(f"time() - max(mcpmon_session_start_timestamp_seconds{{{sel}}})", instant=True)],
            w=6, h=4, fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
            description="Needs --metrics.detail.",
        ),
        panel(
            detail, "stat", "Tools listed",
            [target(f"max(mcpmon_server_tools{{{sel}}})", instant=True)],
            w=6, h=4, fieldConfig={"defaults": {"unit": "none", "decimals": 0}, "overrides": []},
            description="Needs --metrics.detail.",
        ),
        panel(
            detail, "stat", "Certificate expires in",
            [target(f"min(mcpmon_server_tls_cert_expiry_timestamp_seconds{{{sel}}}) - time()", instant=True)],
            w=6, h=4, fieldConfig={"defaults": {"unit": "s", "thresholds": {"mode": "absolute", "steps": [
                {"color": "red", "value": None}, {"color": "orange", "value": 0},
                {"color": "green", "value": 14 * 86400}]}}, "overrides": []},
            description="HTTPS servers only: time until the earliest certificate in the chain the server presents expires (McpServerTlsCertExpiringSoon fires under 14 days).",
        ),
        panel(
            detail, "timeseries", "Health check latency quantiles",
            [
                target(f"histogram_quantile({q}, sum by (le) (rate(mcpmon_health_check_duration_seconds_bucket{{{sel}}}[$__rate_interval])))", f"p{int(q * 100)}", ref)
                for q, ref in [(0.5, "A"), (0.99, "B")]
            ],
            description="Needs --metrics.histograms=classic.",
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            detail, "timeseries", "Progress notification intervals",
            [
                target(f"histogram_quantile({q}, sum by (le) (rate(mcpmon_progress_interval_seconds_bucket{{{sel}}}[$__rate_interval])))", f"p{int(q * 100)}", ref)
                for q, ref in [(0.5, "A"), (0.99, "B")]
            ],
            description="Needs --metrics.histograms=classic. Gaps between progress notifications of one request; a gap that grows means a phase change or a blocked event loop.",
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            detail, "timeseries", "Child CPU and memory",
            [
                target(f"rate(mcpmon_child_cpu_seconds_total{{{sel}}}[$__rate_interval])", "CPU (cores)", "A"),
                target(f"mcpmon_child_resident_memory_bytes{{{sel}}}", "resident memory", "B"),
            ],
            description="stdio servers only: CPU and resident memory of the server's process tree (the memory needs --metrics.detail).",
            fieldConfig={"defaults": {"unit": "none", "decimals": 2}, "overrides": [
                {"matcher": {"id": "byName", "options": "resident memory"},
                 "properties": [{"id": "unit", "value": "bytes"}, {"id": "custom.axisPlacement", "value": "right"}]},
            ]},
        ),
    ]
    panels.append({
        "id": row_id, "type": "row", "title": "Detail (--metrics.detail, --metrics.histograms=classic, HTTPS)",
        "collapsed": True, "gridPos": row_pos, "panels": detail_panels,
    })
    L.next_id = detail.next_id
    panels.append(collapsed_row(L, "Locations (replicas with --location)", [
        ("timeseries", "Up from each location",
         [target('server_location:mcpmon_server_up:max{server="$server"}', "{{location}}")],
         "1 where the replicas of a location judge the server up. Down from one location is a broken path; "
         "McpServerDownFromLocations pages at two.",
         {"fieldConfig": {"defaults": {"unit": "none", "min": 0, "max": 1}, "overrides": []}}),
    ]))
    variables = [
        datasource_var(),
        query_var("job", "Job", "label_values(mcpmon_build_info, job)", True),
        query_var("server", "Server", 'label_values(mcpmon_server_up{job=~"$job"}, server)', False),
    ]
    return dashboard(
        "mcpmon-server", "mcpmon / Server detail",
        "One MCP server: latency, failures, health_check values, tool calls, progress, sessions, resources.",
        variables, panels, ["mcpmon", "mcp"],
        links=[{"title": "Fleet overview", "type": "link",
                "url": "/d/mcpmon-fleet/mcpmon-fleet?var-job=${job}&var-datasource=${datasource}&${__url_time_range}"}],
    )


def budget_row(L):
    """A row of the server's availability and error budget, from the
    mixin's burn-rate recording rules (one series per server, locations
    folded)."""
    row_id, row_pos = L.place(24, 1)
    L.x, L.y, L.row_h = 0, row_pos["y"] + 1, 0
    sel = 'server="$server"'
    ratio = f"server:mcpmon_server_down:ratio_rate30d{{{sel}}}"
    row = {"id": row_id, "type": "row", "title": f"Error budget ({SLO_AVAILABILITY}% over 30 days)",
           "collapsed": False, "gridPos": row_pos, "panels": []}
    return [
        row,
        panel(
            L, "stat", "Availability, 30 days",
            [target(f"1 - {ratio}", instant=True)],
            w=6, h=4, description="Share of the observed time the server was up (maintenance windows left out).",
            fieldConfig={"defaults": {"unit": "percentunit", "decimals": 3, "thresholds": {"mode": "absolute", "steps": [
                {"color": "red", "value": None}, {"color": "green", "value": SLO_AVAILABILITY / 100}]}}, "overrides": []},
        ),
        panel(
            L, "stat", "Error budget left",
            [target(f"1 - {ratio} / {BUDGET}", instant=True)],
            w=6, h=4, description=f"What is left of the 30-day budget of a {SLO_AVAILABILITY}% objective (below 0: spent).",
            fieldConfig={"defaults": {"unit": "percentunit", "decimals": 1, "thresholds": {"mode": "absolute", "steps": [
                {"color": "red", "value": None}, {"color": "orange", "value": 0}, {"color": "green", "value": 0.25}]}},
                "overrides": []},
        ),
        panel(
            L, "timeseries", "Burn rate",
            [target(f"server:mcpmon_server_down:ratio_rate{w}{{{sel}}} / {BUDGET}", f"{w} (alerts at {rate}x)", chr(65 + i))
             for i, (w, rate) in enumerate(BURN_WINDOWS)],
            w=12, h=8,
            description="How many times faster than the 30-day pace the budget is spent, per window: "
                        "McpServerErrorBudgetBurn pages at 14.4x over 1h and 6x over 6h, "
                        "McpServerErrorBudgetBurnSlow tickets at 3x over 1d and 1x over 3d.",
            fieldConfig={"defaults": {"unit": "none", "decimals": 1,
                                      "custom": {"thresholdsStyle": {"mode": "dashed"}},
                                      "thresholds": {"mode": "absolute", "steps": [
                                          {"color": "green", "value": None}, {"color": "red", "value": 14.4}]}},
                         "overrides": []},
        ),
    ]


def collapsed_row(L, title, specs):
    """A collapsed row of panels, each (kind, title, targets, description, extra)."""
    row_id, row_pos = L.place(24, 1)
    inner = Layout()
    inner.y = row_pos["y"] + 1
    inner.next_id = L.next_id
    inside = [panel(inner, kind, title, targets, description=desc, **extra)
              for kind, title, targets, desc, extra in specs]
    L.next_id = inner.next_id
    return {"id": row_id, "type": "row", "title": title, "collapsed": True, "gridPos": row_pos, "panels": inside}


# The Helm chart ships them in a ConfigMap; a chart reads only its own files.
CHART_COPY = HERE.parent / "deploy/helm/mcpmon/files/dashboards"


def main():
    CHART_COPY.mkdir(parents=True, exist_ok=True)
    for name, board in [("mcpmon-fleet.json", fleet()), ("mcpmon-server.json", server())]:
        text = json.dumps(board, indent=2, sort_keys=True) + "\n"
        (HERE / name).write_text(text)
        (CHART_COPY / name).write_text(text)


if __name__ == "__main__":
    main()
