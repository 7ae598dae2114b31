#!/usr/bin/env python3
"""Builds mcpmon's Prometheus rules: a small mixin with one place to set
what every rule selects and where every runbook link points.

    python3 alerts/build.py                      # write the files below
    python3 alerts/build.py --check              # fail if they are stale
    python3 alerts/build.py --selector 'job="monitoring/mcpmon"' \
        --runbook-base https://wiki.example/mcpmon/runbook --stdout

Writes, from the same rules:
- alerts/mcpmon-recording.yml and alerts/mcpmon-alerts.yml, with the
  defaults below;
- deploy/helm/mcpmon/files/mcpmon-rules.yml, with placeholders the chart's
  PrometheusRule fills from its values (selector, runbook base).

Conventions:
- SELECTOR is added to every selector of an mcpmon metric. The default is
  empty: every mcpmon_* series is an mcpmon's, whatever its job is called
  (the Prometheus Operator names jobs after Services). No rule names a job.
- Recording rules are named level:metric:operations. `server:` rules keep
  job, instance and server; `job:` rules aggregate across the replicas of a
  sharded deployment, so their numbers are fleet-wide.
- Per-server alerts carry the operator labels in CARRIED_LABELS (from
  mcpmon_server_labels, joined with group_left) as alert labels, so
  Alertmanager can route on them (`team` pages the team).
"""

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

SELECTOR = ""
RUNBOOK_BASE = "https://github.com/mcpmon/mcpmon/blob/main/docs/runbook.md"
CARRIED_LABELS = ["team"]

# The availability objective the burn-rate alerts hold every server to,
# in percent (per-server objectives: `mcpmon slo` writes them for Sloth and
# Pyrra, which generate their own alerts).
SLO_AVAILABILITY = 99.9

# The SRE workbook's multi-window, multi-burn-rate alerts for a 30-day
# budget: (long window, short window, burn rate, severity).
BURN_RATES = [
    ("1h", "5m", 14.4, "critical"),
    ("6h", "30m", 6, "critical"),
    ("1d", "2h", 3, "warning"),
    ("3d", "6h", 1, "warning"),
]

# A server is paged on when it is down from at least this many locations
# (replicas started with --location).
LOCATIONS_DOWN = 2

# Placeholders in the chart's copy, replaced by its template.
HELM_SELECTOR = "__MCPMON_SELECTOR__"
HELM_RUNBOOK = "__MCPMON_RUNBOOK_BASE__"


class Mixin:
    def __init__(self, selector, runbook_base):
        self.selector = selector
        self.runbook_base = runbook_base

    def m(self, name, *matchers):
        """`name{matchers…, selector}`; the selector may be empty."""
        parts = list(matchers)
        if self.selector:
            parts.append(self.selector)
        return f"{name}{{{', '.join(parts)}}}" if parts else name

    def runbook(self, anchor):
        return f"{self.runbook_base}#{anchor}"

    def carried(self, expr):
        """A per-server expression with the operator labels joined on."""
        labels = ", ".join(f"label_{n}" for n in CARRIED_LABELS)
        return (
            f"{expr}\n  * on (job, instance, server) group_left ({labels})\n"
            f"{self.m('mcpmon_server_labels')}"
        )

    def server_alert(self, name, expr, severity, summary, description, for_=None, anchor=None):
        labels = {"severity": severity}
        for n in CARRIED_LABELS:
            labels[n] = "{{ $labels.label_%s }}" % n
        # A server in a maintenance window is planned work: silent.
        quiet = f"unless on (job, instance, server) {self.m('mcpmon_server_maintenance')}"
        return alert(
            name, self.carried(f"(({expr}) {quiet})"), severity, summary, description,
            self.runbook(anchor or name.lower()), for_, labels,
        )

    def fleet_server_alert(self, name, expr, severity, summary, description, for_=None, anchor=None):
        """An alert on a server across the replicas that watch it (by
        `server` only): locations and shards folded, labels and maintenance
        joined on by server."""
        labels = {"severity": severity}
        for n in CARRIED_LABELS:
            labels[n] = "{{ $labels.label_%s }}" % n
        carried = ", ".join(f"label_{n}" for n in CARRIED_LABELS)
        quiet = f"unless on (server) {self.m('mcpmon_server_maintenance')}"
        joined = (f"(({expr}) {quiet})\n  * on (server) group_left ({carried})\n"
                  f"max by (server, {carried}) ({self.m('mcpmon_server_labels')})")
        return alert(name, joined, severity, summary, description,
                     self.runbook(anchor or name.lower()), for_, labels)

    def recording(self):
        m = self.m
        timeouts = m("mcpmon_probe_failures_total", 'probe=~"ping|discover"', 'reason="timeout"')
        per_server = [
            record("server:mcpmon_ping_duration_seconds:p50_rate5m",
                   f"histogram_quantile(0.5, sum by (job, instance, server, le) (rate({m('mcpmon_ping_duration_seconds_bucket')}[5m])))"),
            record("server:mcpmon_ping_duration_seconds:p99_rate5m",
                   f"histogram_quantile(0.99, sum by (job, instance, server, le) (rate({m('mcpmon_ping_duration_seconds_bucket')}[5m])))"),
            record("server_probe:mcpmon_probe_failures:ratio_rate5m",
                   f"sum by (job, instance, server, probe) (rate({m('mcpmon_probe_failures_total')}[5m]))\n"
                   f"  / on (job, instance, server, probe)\n"
                   f"sum by (job, instance, server, probe) (rate({m('mcpmon_probes_total')}[5m]))"),
            record("server:mcpmon_reconnects:rate5m",
                   f"sum by (job, instance, server) (rate({m('mcpmon_reconnects_total')}[5m]))"),
            record("server:mcpmon_ping_timeouts:rate5m",
                   f"sum by (job, instance, server) (rate({timeouts}[5m]))"),
        ]
        fleet = [
            record("job:mcpmon_servers:count",
                   f"sum by (job) ({m('mcpmon_fleet_servers')})"),
            record("job_state:mcpmon_servers:count",
                   f"sum by (job, state) ({m('mcpmon_fleet_servers')})"),
            record("job:mcpmon_servers_available:count",
                   f"sum by (job) ({m('mcpmon_fleet_available_servers')})"),
            record("job:mcpmon_servers_available:ratio",
                   "job:mcpmon_servers_available:count / job:mcpmon_servers:count"),
            record("job:mcpmon_fleet_policy_min_available:ratio",
                   f"max by (job) ({m('mcpmon_fleet_policy_min_available_ratio')})"),
            record("job:mcpmon_shards:count",
                   f"count by (job) ({m('mcpmon_shard_info')})"),
            record("job_mechanism:mcpmon_sd_servers:max",
                   f"max by (job, mechanism) ({m('mcpmon_sd_servers')})"),
        ]
        # The alerts' windows, and the budget's own (dashboards read it).
        windows = sorted({w for long, short, _, _ in BURN_RATES for w in (long, short)} | {"30d"}, key=seconds)
        # The share of observed time a server was down, from the location
        # that saw the least of it: a broken path burns no budget (the
        # location rules page on that), a dead server burns it everywhere.
        slo = [
            record(f"server:mcpmon_server_down:ratio_rate{w}",
                   f"min by (server) (\n"
                   f"  sum by (job, instance, server) (rate({m('mcpmon_server_down_seconds_total')}[{w}]))\n"
                   f"  / on (job, instance, server)\n"
                   f"  sum by (job, instance, server) (rate({m('mcpmon_server_observed_seconds_total')}[{w}]))\n"
                   f")")
            for w in windows
        ]
        # Each server's up from each location: a replica's location joined
        # on from mcpmon_location_info.
        locations = [
            record("server_location:mcpmon_server_up:max",
                   f"max by (server, location) (\n"
                   f"  {m('mcpmon_server_up')}\n"
                   f"  * on (job, instance) group_left (location) {m('mcpmon_location_info')}\n"
                   f")"),
        ]
        return {"groups": [
            {"name": "mcpmon.recording.servers", "rules": per_server},
            {"name": "mcpmon.recording.fleet", "rules": fleet},
            {"name": "mcpmon.recording.slo", "rules": slo},
            {"name": "mcpmon.recording.locations", "rules": locations},
        ]}

    def alerts(self):
        m = self.m
        unhealthy = m("mcpmon_server_state", 'state="unhealthy"')
        degraded = m("mcpmon_server_state", 'state="degraded"')
        static_token = m("mcpmon_auth_token_expiry_timestamp_seconds", 'refreshable="false"')
        no_health_tool = m("mcpmon_server_info", 'health_check="false"')
        otlp_failed = m("mcpmon_otlp_exports_total", 'result="failed"')
        otlp_ok = m("mcpmon_otlp_exports_total", 'result="ok"')
        reason = ("{{ with printf \"mcpmon_server_reason{server='%s'}\" $labels.server | query }}"
                  "{{ . | first | label \"reason\" }}{{ end }}")
        servers = [
            # Where replicas probe from several locations, one location's
            # verdict is one path's: McpServerDownFromLocations pages then.
            self.server_alert(
                "McpServerUnhealthy",
                f"{unhealthy} == 1\n"
                f"unless on (job, instance) ({m('mcpmon_location_info')}\n"
                f"  and on () count(count by (location) ({m('mcpmon_location_info')})) > 1)",
                "critical",
                "MCP server {{ $labels.server }} is unhealthy",
                "mcpmon has judged MCP server {{ $labels.server }} unhealthy for more than a minute "
                f"(reason: {reason}). See /health/servers/{{{{ $labels.server }}}} on {{{{ $labels.instance }}}} "
                "for the detail and recent events.",
                for_="1m"),
            self.server_alert(
                "McpServerDegraded", f"{degraded} == 1", "warning",
                "MCP server {{ $labels.server }} has been degraded for 15 minutes",
                "MCP server {{ $labels.server }} answers, but slowly, with errors, busy, or reporting "
                f"itself degraded (reason: {reason}).",
                for_="15m"),
            self.server_alert(
                "McpServerFlapping", f"increase({m('mcpmon_server_state_changes_total')}[15m]) > 4", "warning",
                "MCP server {{ $labels.server }} is flapping",
                "MCP server {{ $labels.server }} changed state {{ $value | humanize }} times in 15 minutes."),
            self.server_alert(
                "McpServerReadyButUnhealthy",
                f"{m('mcpmon_server_operator_ready')} == 1 and on (job, instance, server) {unhealthy} == 1",
                "warning",
                "The operator says {{ $labels.server }} is ready; mcpmon judges it unhealthy",
                "The {{ $labels.kind }} behind {{ $labels.server }} says it is ready, but mcpmon has judged "
                f"it unhealthy for 5 minutes (reason: {reason}): the operator checks its config, not the server.",
                for_="5m"),
            self.server_alert(
                "McpServerPingLatencyHigh", "server:mcpmon_ping_duration_seconds:p99_rate5m > 0.5", "warning",
                "MCP server {{ $labels.server }} answers liveness probes slowly",
                "The 99th percentile of liveness round trips to {{ $labels.server }} has been "
                "{{ $value | humanizeDuration }} for 10 minutes (threshold 500ms).",
                for_="10m"),
            self.server_alert(
                "McpServerReconnectStorm", "server:mcpmon_reconnects:rate5m * 60 > 1", "warning",
                "mcpmon keeps reconnecting to MCP server {{ $labels.server }}",
                "{{ $value | humanize }} reconnects per minute to {{ $labels.server }} for 10 minutes: "
                "the server crashes, refuses connections or gets stuck repeatedly.",
                for_="10m"),
            self.server_alert(
                "McpServerHealthCheckFailing",
                "server_probe:mcpmon_probe_failures:ratio_rate5m{probe=\"health_check\"} > 0.5", "warning",
                "The health_check tool of {{ $labels.server }} is failing",
                "{{ $value | humanizePercentage }} of health_check calls to {{ $labels.server }} failed "
                "over the last 5 minutes, for 10 minutes.",
                for_="10m"),
            self.server_alert(
                "McpServerHealthCheckMissing",
                f"max by (job, instance, server) ({no_health_tool})"
                f" and on (job, instance, server) {m('mcpmon_server_up')} == 1",
                "info",
                "MCP server {{ $labels.server }} has no health_check tool",
                "{{ $labels.server }} is up but does not list its health tool, so mcpmon judges it by "
                "liveness alone and cannot see what the server knows about itself.",
                for_="1h"),
            self.server_alert(
                "McpServerTokenExpiringSoon",
                f"({static_token} - time()) < 72 * 3600",
                "warning",
                "The token mcpmon sends to {{ $labels.server }} expires within 72 hours",
                "The static bearer token of {{ $labels.server }} expires in {{ $value | humanizeDuration }} "
                "and mcpmon cannot renew it; once it does, the server reads unauthenticated.",
                for_="10m"),
            self.server_alert(
                "McpServerTlsCertExpiringSoon",
                f"({m('mcpmon_server_tls_cert_expiry_timestamp_seconds')} - time()) < 14 * 86400",
                "warning",
                "The certificate of {{ $labels.server }} expires within 14 days",
                "The earliest certificate in the chain {{ $labels.server }} presents expires in "
                "{{ $value | humanizeDuration }}; once it does, mcpmon (and every client) refuses it (tls_failed).",
                for_="1h"),
        ]
        budget = round(1 - SLO_AVAILABILITY / 100, 10)

        def burn(severity):
            pairs = [
                f"(server:mcpmon_server_down:ratio_rate{long} > {rate} * {budget}\n"
                f" and server:mcpmon_server_down:ratio_rate{short} > {rate} * {budget})"
                for long, short, rate, sev in BURN_RATES if sev == severity
            ]
            return "\nor\n".join(pairs)

        slo = [
            self.fleet_server_alert(
                "McpServerErrorBudgetBurn", burn("critical"), "critical",
                "MCP server {{ $labels.server }} is burning its error budget fast",
                "{{ $labels.server }} has spent over 2% of its 30-day error budget in an hour, or over 5% in "
                f"six hours (the SRE workbook's 1h/5m and 6h/30m windows, for {SLO_AVAILABILITY}% availability): "
                "at this pace the budget is gone within days. `server:mcpmon_server_down:ratio_rate1h` has the share.",
                for_="2m"),
            self.fleet_server_alert(
                "McpServerErrorBudgetBurnSlow", burn("warning"), "warning",
                "MCP server {{ $labels.server }} is spending its error budget too fast",
                "{{ $labels.server }} has spent over 10% of its 30-day error budget in a day, or in three "
                f"days (the 1d/2h and 3d/6h windows, for {SLO_AVAILABILITY}% availability): at this pace the budget "
                "runs out before the month does. `server:mcpmon_server_down:ratio_rate1d` has the share.",
                for_="15m"),
        ]
        located = m("mcpmon_location_info")
        locations = [
            self.fleet_server_alert(
                "McpServerDownFromLocations",
                f"count by (server) (server_location:mcpmon_server_up:max == 0) >= {LOCATIONS_DOWN}",
                "critical",
                "MCP server {{ $labels.server }} is down from {{ $value }} locations",
                "mcpmon replicas in {{ $value }} locations judge {{ $labels.server }} unhealthy: the server "
                "is down, not one path to it. `count by (location) (server_location:mcpmon_server_up:max"
                "{server=\"{{ $labels.server }}\"} == 0)` shows which.",
                for_="1m"),
            alert("McpmonLocationSilent",
                  f"count by (location) (max_over_time({located}[1d]))\n"
                  f"unless count by (location) ({located})",
                  "warning",
                  "No mcpmon reports from location {{ $labels.location }}",
                  "The replicas of {{ $labels.location }} reported in the last day and report no more: "
                  "servers are judged from fewer places, so McpServerDownFromLocations needs more of the "
                  "rest to agree, and a server down only from there goes unseen.",
                  self.runbook("mcpmonlocationsilent"), "5m"),
        ]
        fleet = [
            alert("McpFleetBelowQuorum",
                  f"{m('mcpmon_fleet_available_ratio')} < {m('mcpmon_fleet_policy_min_available_ratio')}",
                  "critical",
                  "The MCP servers watched by {{ $labels.instance }} are below their healthy quorum",
                  "Only {{ $value | humanizePercentage }} of the MCP servers this replica watches are "
                  "available; the fleet policy requires more, and its /health/fleet answers 503.",
                  self.runbook("mcpfleetbelowquorum"), "5m"),
            alert("McpFleetBelowQuorumFleetWide",
                  "job:mcpmon_servers_available:ratio < on (job) job:mcpmon_fleet_policy_min_available:ratio",
                  "critical",
                  "The MCP fleet of {{ $labels.job }} is below its healthy quorum",
                  "Across every shard, only {{ $value | humanizePercentage }} of the MCP servers are "
                  "available; the fleet policy requires more.",
                  self.runbook("mcpfleetbelowquorumfleetwide"), "5m"),
            alert("McpmonShardDown",
                  f"count by (job, instance) ({m('mcpmon_server_up')}) > 1\n"
                  f"unless on (job, instance)\n"
                  f"sum by (job, instance) ({m('mcpmon_server_up')}) > 0",
                  "critical",
                  "Every MCP server watched by {{ $labels.instance }} is down",
                  "All {{ $value }} servers of this shard are down at once: more likely the replica's "
                  "own network, DNS or credentials than every server. Their own pages are held back.",
                  self.runbook("mcpmonsharddown"), "2m"),
        ]
        selfs = [
            # Whatever the job is called: a target that reported
            # mcpmon_build_info in the last day is an mcpmon.
            alert("McpmonDown",
                  f"up == 0 and on (job, instance) max_over_time({m('mcpmon_build_info')}[1d])",
                  "critical",
                  "mcpmon {{ $labels.instance }} is down",
                  "Prometheus cannot scrape mcpmon at {{ $labels.instance }}; MCP servers are not being judged.",
                  self.runbook("mcpmondown"), "2m"),
            alert("McpmonAbsent",
                  f"absent({m('mcpmon_build_info')})",
                  "critical",
                  "No mcpmon reports to Prometheus",
                  "No target reports mcpmon_build_info; check the scrape configuration or service discovery.",
                  self.runbook("mcpmondown"), "5m"),
            alert("McpmonConfigReloadFailed",
                  f"{m('mcpmon_config_last_reload_successful')} == 0",
                  "warning",
                  "mcpmon {{ $labels.instance }} could not reload its configuration",
                  "The last configuration reload failed; mcpmon keeps running the previous configuration. "
                  "Run `mcpmon check-config` on the file to see every error.",
                  self.runbook("mcpmonconfigreloadfailed"), "5m"),
            alert("McpmonOtlpExportFailing",
                  f"sum by (job, instance, signal) (increase({otlp_failed}[15m])) > 0\n"
                  f"unless sum by (job, instance, signal) (increase({otlp_ok}[15m])) > 0",
                  "warning",
                  "mcpmon {{ $labels.instance }} cannot push {{ $labels.signal }} over OTLP",
                  "Every OTLP {{ $labels.signal }} push in 15 minutes failed; probing goes on and /metrics is unaffected, "
                  "but the OTLP backend sees nothing new.",
                  self.runbook("mcpmonotlpexportfailing"), "15m"),
            # One stale read is a moment's load (a herd of handshakes); a
            # read served stale in every 5 minutes for 15 is a state owner
            # that is stuck or cannot keep up, and pages that lag behind.
            alert("McpmonStateReadsStale",
                  f"sum by (job, instance) (rate({m('mcpmon_state_reads_stale_total')}[5m])) > 0",
                  "warning",
                  "mcpmon {{ $labels.instance }} serves its pages and /metrics from a stale snapshot",
                  "Reads of the fleet's state have been answered from the last published snapshot, not by the "
                  "state owner, for 15 minutes; what /metrics, /health and the pages show lags what mcpmon knows.",
                  self.runbook("mcpmonstatereadsstale"), "15m"),
            alert("McpmonDiscoveryFailing",
                  f"increase({m('mcpmon_sd_refresh_failures_total')}[15m]) > 0",
                  "warning",
                  "mcpmon {{ $labels.instance }} cannot refresh its {{ $labels.mechanism }} discovery",
                  "{{ $value | humanize }} {{ $labels.mechanism }} discovery refreshes failed in 15 minutes; "
                  "mcpmon keeps the last good list, so new servers are not picked up.",
                  self.runbook("mcpmondiscoveryfailing"), "15m"),
        ]
        return {"groups": [
            {"name": "mcpmon.servers", "rules": servers},
            {"name": "mcpmon.slo", "rules": slo},
            {"name": "mcpmon.locations", "rules": locations},
            {"name": "mcpmon.fleet", "rules": fleet},
            {"name": "mcpmon.self", "rules": selfs},
        ]}


def seconds(window):
    """A Prometheus duration (5m, 1h, 3d) in seconds, to order windows."""
    return int(window[:-1]) * {"m": 60, "h": 3600, "d": 86400}[window[-1]]


def record(name, expr):
    return {"record": name, "expr": expr}


def alert(name, expr, severity, summary, description, runbook, for_=None, labels=None):
    rule = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = labels or {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": runbook}
    return rule


def to_yaml(doc, header):
    """The rule files' shape only: expressions as block scalars, every other
    string JSON-quoted (valid YAML)."""
    out = [header.rstrip(), "groups:"]
    for g in doc["groups"]:
        out.append(f"  - name: {g['name']}")
        out.append("    rules:")
        for r in g["rules"]:
            first = True
            for key in ("record", "alert", "expr", "for", "labels", "annotations"):
                if key not in r:
                    continue
                lead = "      - " if first else "        "
                first = False
                v = r[key]
                if key == "expr":
                    out.append(f"{lead}expr: |-")
                    out.extend(f"          {line}" for line in v.splitlines())
                elif isinstance(v, dict):
                    out.append(f"{lead}{key}:")
                    out.extend(f"          {k}: {json.dumps(x)}" for k, x in v.items())
                elif key in ("record", "alert", "for"):
                    out.append(f"{lead}{key}: {v}")
                else:
                    out.append(f"{lead}{key}: {json.dumps(v)}")
            if "alert" in r:
                out.append("")
    return "\n".join(out).rstrip() + "\n"


GENERATED = "# Generated by alerts/build.py; edit that file and run it.\n"


def files():
    d = Mixin(SELECTOR, RUNBOOK_BASE)
    h = Mixin(HELM_SELECTOR, HELM_RUNBOOK)
    both = {"groups": h.recording()["groups"] + h.alerts()["groups"]}
    return {
        HERE / "mcpmon-recording.yml": to_yaml(d.recording(), GENERATED + "# Recording rules: per server (server:) and fleet-wide across shards (job:).\n"),
        HERE / "mcpmon-alerts.yml": to_yaml(d.alerts(), GENERATED + "# Alerts on what mcpmon judges, and on mcpmon itself; each links its runbook entry.\n"),
        REPO / "deploy/helm/mcpmon/files/mcpmon-rules.yml": to_yaml(
            both, GENERATED + f"# {HELM_SELECTOR} and {HELM_RUNBOOK} are filled by templates/prometheusrule.yaml.\n"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    ap.add_argument("--stdout", action="store_true", help="print recording rules and alerts for --selector/--runbook-base")
    ap.add_argument("--selector", default=SELECTOR)
    ap.add_argument("--runbook-base", default=RUNBOOK_BASE)
    args = ap.parse_args()
    if args.stdout:
        mx = Mixin(args.selector, args.runbook_base)
        both = {"groups": mx.recording()["groups"] + mx.alerts()["groups"]}
        sys.stdout.write(to_yaml(both, GENERATED))
        return 0
    stale = []
    for path, text in files().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(REPO)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale, run python3 alerts/build.py: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
