//! Every family mcpmon renders from a snapshot, declared once: its name,
//! type, help and labels, and for the judgment's families the name OTLP
//! pushes it under. The [`Family`] enum, its metadata, the order of the
//! exposition and the OTLP instruments' names and descriptions all follow
//! from this table; adding a family is a line here and the lines that
//! write its samples (`metrics/server.rs` or `metrics/fleet.rs`).

/// `Some` of the literal given, or `None`.
macro_rules! some {
    () => {
        None
    };
    ($x:literal) => {
        Some($x)
    };
}

macro_rules! families {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident: $kind:literal $name:literal [$($label:literal),*]
            $(otlp $otlp:literal)? $help:literal;
    )*) => {
        /// A family rendered from a snapshot, in exposition order.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Family {
            $($(#[doc = $doc])* #[doc = $help] $variant,)*
        }

        impl Family {
            /// Every family, in exposition order.
            pub const ALL: &'static [Family] = &[$(Family::$variant,)*];

            /// Its name.
            pub fn name(self) -> &'static str {
                match self { $(Family::$variant => $name,)* }
            }

            /// `gauge`, `counter` or `histogram`.
            pub fn kind(self) -> &'static str {
                match self { $(Family::$variant => $kind,)* }
            }

            /// Its `# HELP` text.
            pub fn help(self) -> &'static str {
                match self { $(Family::$variant => $help,)* }
            }

            /// The labels its samples may carry (a histogram's `le` aside).
            pub fn labels(self) -> &'static [&'static str] {
                match self { $(Family::$variant => &[$($label),*],)* }
            }

            /// The instrument name OTLP pushes it under, for the families
            /// the judgment exports there.
            pub fn otlp_name(self) -> Option<&'static str> {
                match self { $(Family::$variant => some!($($otlp)?),)* }
            }
        }
    };
}

families! {
    // Per server.
    Up: "gauge" "mcpmon_server_up" ["server"] otlp "mcpmon.server.up"
        "1 if the server is healthy or degraded, 0 otherwise.";
    State: "gauge" "mcpmon_server_state" ["server", "state"] otlp "mcpmon.server.state"
        "Current state of the server, one series per state (1 = current).";
    Reason: "gauge" "mcpmon_server_reason" ["reason", "server"] otlp "mcpmon.server.reason"
        "Why the server is in its state (bounded set; one series per server, always 1).";
    Info: "gauge" "mcpmon_server_info"
        ["health_check", "protocol_version", "server", "server_name", "server_version", "transport"]
        "Descriptive data about the server's current session (always 1); health_check says whether it lists the health tool.";
    Labels: "gauge" "mcpmon_server_labels" ["server"]
        "The operator's labels of the server (a label_* label for each), always 1: join with group_left.";
    OperatorReady: "gauge" "mcpmon_server_operator_ready" ["kind", "server"]
        "1 if the operator that runs the server (its Kubernetes object's kind) says it is ready, 0 if it says not; absent when it says nothing.";
    Tools: "gauge" "mcpmon_server_tools" ["server"]
        "Tools in the server's latest listing.";
    ToolsChanges: "counter" "mcpmon_server_tools_changes_total" ["server"] otlp "mcpmon.server.tools.changes"
        "Tool listings whose surface (names, schemas, annotations) differed from the one before.";
    Maintenance: "gauge" "mcpmon_server_maintenance" ["server", "window"]
        "1 while the server is in a maintenance window (the shipped alerts stay silent for it); absent otherwise.";
    TlsCertExpiry: "gauge" "mcpmon_server_tls_cert_expiry_timestamp_seconds" ["server"]
        "Unix time the earliest certificate in the chain the HTTPS server presented expires.";
    TlsVersion: "gauge" "mcpmon_server_tls_version_info" ["server", "version"]
        "The TLS version the HTTPS server's latest handshake spoke (always 1).";
    ConditionFailures: "counter" "mcpmon_condition_failures_total" ["condition", "server"]
        "Evaluations of a condition the operator wrote that did not hold.";
    ToolsInvalid: "gauge" "mcpmon_server_tools_invalid" ["server"]
        "Listed tools whose name or input schema breaks the spec's rules (a warning, never a verdict).";
    SessionStart: "gauge" "mcpmon_session_start_timestamp_seconds" ["server"]
        "Unix time the current session opened.";
    LastCheck: "gauge" "mcpmon_server_last_check_timestamp_seconds" ["server"] otlp "mcpmon.server.last_check.timestamp"
        "Unix time of the last probe result.";
    ConsecutiveFailures: "gauge" "mcpmon_server_consecutive_failures" ["server"]
        "Liveness probes and connection attempts that failed in a row, until a liveness answer.";
    StateChanges: "counter" "mcpmon_server_state_changes_total" ["server"] otlp "mcpmon.server.state_changes"
        "State transitions of the server.";
    ObservedSeconds: "counter" "mcpmon_server_observed_seconds_total" ["server"]
        "Seconds the server had a verdict outside maintenance windows: the availability SLI's total.";
    DownSeconds: "counter" "mcpmon_server_down_seconds_total" ["server"]
        "Of the observed seconds, those the server was unhealthy: the availability SLI's errors.";
    Probes: "counter" "mcpmon_probes_total" ["probe", "server"]
        "Probes sent, by kind.";
    ProbesSkipped: "counter" "mcpmon_probes_skipped_total" ["probe", "server"]
        "Probe ticks skipped: the previous probe of that kind was still in flight, or the server asked to wait (throttled).";
    ProbesThrottled: "counter" "mcpmon_probes_throttled_total" ["probe", "server"]
        "Probes the server answered with HTTP 429, or 503 with Retry-After.";
    ProbeFailures: "counter" "mcpmon_probe_failures_total" ["probe", "reason", "server"]
        "Probes that failed, by kind and bounded reason.";
    Reconnects: "counter" "mcpmon_reconnects_total" ["reason", "server"]
        "Sessions rebuilt after being lost, by reason.";
    SessionCloses: "counter" "mcpmon_session_closes_total" ["reason", "server"]
        "Sessions closed, by bounded reason.";
    PingDuration: "histogram" "mcpmon_ping_duration_seconds" ["server"]
        "Round trip of liveness probes (ping or server/discover) that were answered.";
    HealthCheckDuration: "histogram" "mcpmon_health_check_duration_seconds" ["server"]
        "Duration of health_check tool calls that were answered.";
    HealthCheckValue: "gauge" "mcpmon_health_check_value" ["field", "server"]
        "Numeric top-level fields of the last health_check result.";
    ProgressInterval: "histogram" "mcpmon_progress_interval_seconds" ["server"]
        "Time between consecutive progress notifications of one request.";
    ToolCallDuration: "histogram" "mcpmon_tool_call_duration_seconds" ["server", "tool"]
        "Duration of synthetic tool calls, answered or not.";
    ToolCallCancellations: "counter" "mcpmon_tool_call_cancellations_total" ["reason", "server", "tool"]
        "Synthetic tool calls cancelled, by which deadline fired.";
    ToolTaskPolls: "counter" "mcpmon_tool_task_polls_total" ["server", "tool"]
        "tasks/get requests of a tool probe called as a task.";
    ToolTaskBusy: "gauge" "mcpmon_tool_task_busy" ["server", "tool"]
        "1 while a tool probe's task works with its lastUpdatedAt advancing, 0 otherwise; absent for a tool never called as a task.";
    ChildCpu: "counter" "mcpmon_child_cpu_seconds_total" ["server"]
        "CPU time used by the stdio server's process tree.";
    ChildRss: "gauge" "mcpmon_child_resident_memory_bytes" ["server"]
        "Resident memory of the stdio server's process tree.";
    TokenExpiry: "gauge" "mcpmon_auth_token_expiry_timestamp_seconds" ["refreshable", "server"]
        "Unix time the server's credentials expire: OAuth tokens (refreshable=\"true\", renewed by mcpmon) and static bearer tokens that are JWTs (refreshable=\"false\").";
    // The fleet, from the same snapshot.
    FleetServers: "gauge" "mcpmon_fleet_servers" ["state"]
        "Servers per state.";
    FleetMaintenanceServers: "gauge" "mcpmon_fleet_maintenance_servers" []
        "Servers in a maintenance window: counted in no state of mcpmon_fleet_servers, neither for nor against the policy.";
    FleetAvailableRatio: "gauge" "mcpmon_fleet_available_ratio" []
        "Share of servers available under the fleet policy (0-1).";
    FleetAvailableServers: "gauge" "mcpmon_fleet_available_servers" []
        "Servers available under the fleet policy (sum it across shards).";
    FleetPolicyMinAvailableRatio: "gauge" "mcpmon_fleet_policy_min_available_ratio" []
        "Least available share the fleet policy requires (0-1).";
    SnapshotGeneration: "gauge" "mcpmon_snapshot_generation" []
        "Number of the published snapshot this exposition was rendered from.";
    SdServers: "gauge" "mcpmon_sd_servers" ["mechanism"]
        "Valid servers each discovery mechanism currently returns, before sharding.";
    SdRefreshFailures: "counter" "mcpmon_sd_refresh_failures_total" ["mechanism"]
        "Discovery refreshes that failed (unreadable, unreachable or not a list); the source keeps its last good list.";
    SdEntriesRejected: "counter" "mcpmon_sd_entries_rejected_total" ["mechanism", "reason"]
        "Discovered entries left out: invalid, stdio_refused (an http_sd entry asked to start a process), duplicate (id already taken), over_limit (past the source's max_servers), own_address (aimed at mcpmon itself), needs_configuration (a client config's or registry's entry needs a person), too_large (a record past a size bound, or past what the source may keep in bytes).";
}

impl Family {
    /// How many there are.
    pub const COUNT: usize = Family::ALL.len();
}
