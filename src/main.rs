//! The `mcpmon` binary: its flags, logging and runtime; each command is a
//! file of [`cli`], and everything else is the library.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cli::Format;
use mcpmon::output::metrics::Histograms;

// glibc's allocator keeps what a burst of handshakes freed (per-thread
// arenas, fragmented): 2 000 sessions left twice their live heap resident.
// jemalloc returns dirty pages to the kernel after a few seconds.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The command line: the service's flags, or a command.
#[derive(Parser)]
#[command(
    name = "mcpmon",
    version,
    about = "Health monitor for fleets of MCP servers"
)]
pub struct Cli {
    /// The fleet file (YAML).
    #[arg(long = "config.file", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// Address for /metrics and /health; repeat it to listen on several.
    #[arg(long = "web.listen-address", default_value = "127.0.0.1:9850")]
    listen: Vec<String>,
    /// TLS and basic auth for mcpmon's endpoints (Prometheus web config format).
    #[arg(long = "web.config.file", value_name = "FILE")]
    web_config: Option<PathBuf>,
    /// Serve POST /-/reload.
    #[arg(long = "web.enable-lifecycle")]
    enable_lifecycle: bool,
    /// Answer only requests whose Host header names one of these
    /// (comma-separated or repeated; names or addresses, no port), against
    /// DNS rebinding. /-/healthy and /-/ready answer any Host.
    #[arg(long = "web.allowed-hosts", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Path under which the Prometheus exposition is served.
    #[arg(long = "web.telemetry-path", default_value = "/metrics", value_parser = telemetry_path)]
    telemetry_path: String,
    /// How long writing one response may take; a client that reads slower
    /// loses its connection.
    #[arg(long = "web.write-timeout", default_value = "30s", value_parser = parse_duration)]
    write_timeout: std::time::Duration,
    /// Reload the config when the file's content changes.
    #[arg(long = "config.auto-reload")]
    auto_reload: bool,
    /// How often the file is checked under --config.auto-reload.
    #[arg(long = "config.auto-reload-interval", default_value = "30s", value_parser = parse_duration)]
    auto_reload_interval: std::time::Duration,
    /// Per-server duration histograms on /metrics: small (liveness in four
    /// buckets), classic (every bucket, health checks and progress
    /// intervals too) or off. See docs/metrics.md for the series each costs.
    #[arg(long = "metrics.histograms", value_enum, default_value_t = Histograms::Small)]
    histograms: Histograms,
    /// Also export the descriptive per-server series (session start, tool
    /// counts, stdio memory) and every counter from zero.
    #[arg(long = "metrics.detail")]
    metrics_detail: bool,
    /// Split the fleet across this many replicas: each monitors the servers
    /// whose id hashes to its index (Prometheus hashmod: MD5 of the id, last
    /// 8 bytes big-endian, modulo the count).
    #[arg(long = "shard.count", default_value_t = 1)]
    shard_count: u64,
    /// This replica's index, 0 to shard.count - 1.
    #[arg(long = "shard.index", default_value_t = 0)]
    shard_index: u64,
    /// Take the index from the host name's -<ordinal> suffix, as a
    /// StatefulSet names its pods (mcpmon-2 is index 2).
    #[arg(long = "shard.index-from-hostname", conflicts_with = "shard_index")]
    shard_index_from_hostname: bool,
    /// The history file (minutely, hourly and daily rows per server, and
    /// every state change). Default: beside the config file, named after
    /// it (fleet.yaml keeps fleet.history.db).
    #[arg(long = "storage.path", value_name = "FILE")]
    storage_path: Option<PathBuf>,
    /// How long daily rows and state changes are kept (hourly rows at most
    /// 90 days, minutely ones a day).
    #[arg(long = "storage.retention", value_parser = parse_duration, default_value = "400d")]
    storage_retention: std::time::Duration,
    /// How often the history adds what happened since: what a kill -9
    /// loses at most.
    #[arg(long = "storage.flush-interval", value_parser = parse_duration, default_value = "60s", hide = true)]
    storage_flush: std::time::Duration,
    /// Read the history from this Prometheus-compatible query API
    /// (Prometheus, Thanos, Mimir) over mcpmon's own series, and keep no
    /// file: replicas and shards then show one history.
    #[arg(long = "history.prometheus-url", value_name = "URL")]
    history_prometheus: Option<String>,
    /// Keep no history (the status page and the history API then show
    /// only the present).
    #[arg(long = "history.disabled")]
    history_disabled: bool,
    /// Serve no status, uptime or response-time badges.
    #[arg(long = "badges.disabled")]
    badges_disabled: bool,
    /// Where this replica probes from (a region, a site), when several
    /// replicas probe the same servers: exported as
    /// mcpmon_location_info{location}, which the shipped rules join to page
    /// on a server down from at least two locations, not on one broken path.
    #[arg(long = "location", value_parser = location)]
    location: Option<String>,
    /// Most handshakes (spawn or connect, and the protocol handshake) at
    /// once; the rest wait their turn, and a server's connect_timeout counts
    /// from it. 0 means four per core, at least four.
    #[arg(long = "handshake.concurrency", default_value_t = 0)]
    handshake_concurrency: usize,
    #[command(flatten)]
    otlp: mcpmon::output::otlp::OtlpFlags,
    /// Async runtime worker threads; 0 means one per core. One thread
    /// costs the least CPU per probe (no wake-ups across threads) and holds
    /// 10 000 servers at one probe per 10 s with room to spare; add threads
    /// for fleets that probe faster than that.
    #[arg(long = "runtime.worker-threads", default_value_t = 1)]
    worker_threads: usize,
    /// Log format.
    #[arg(long = "log.format", value_enum, default_value_t = Format::Text, global = true)]
    log_format: Format,
    /// Log level or filter (RUST_LOG syntax).
    #[arg(long = "log.level", default_value = "info", global = true)]
    log_level: String,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a fleet file; exits 0 when valid, 1 with every error otherwise.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Check one server once and print what was found; exits 0 only when healthy.
    Probe(cli::probe::ProbeArgs),
    /// Print the fleet YAML for client configs (Claude Desktop, Cursor,
    /// Claude Code, Windsurf, VS Code, Codex), to start a fleet file from.
    Import {
        /// The client config files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// `auto` (by file name, then shape), or the tool that wrote them.
        #[arg(long, default_value = "auto")]
        format: String,
    },
    /// Print availability and latency SLOs for the fleet file's servers
    /// (objectives from `slo:`) as Sloth, Pyrra or OpenSLO documents.
    Slo {
        /// The fleet file.
        file: PathBuf,
        /// The document shape.
        #[arg(long, value_enum, default_value_t = mcpmon::slo::SloFormat::Sloth)]
        format: mcpmon::slo::SloFormat,
        /// One objective per value of this label (over the servers that
        /// have it) instead of one per server.
        #[arg(long)]
        by: Option<String>,
        /// The namespace of Pyrra's objects.
        #[arg(long, default_value = "monitoring")]
        namespace: String,
    },
}

fn main() -> ExitCode {
    // Before anything starts a thread.
    mcpmon::init::become_init_if_pid1();
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log_level);
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcpmon: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cli.worker_threads > 0 {
        builder.worker_threads(cli.worker_threads);
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let done = match cli.cmd {
        Some(Cmd::CheckConfig { ref file }) => Ok(cli::check_config::run(file)),
        Some(Cmd::Probe(ref args)) => cli::probe::run(args, &runtime),
        Some(Cmd::Import {
            ref files,
            ref format,
        }) => cli::import::run(files, format),
        Some(Cmd::Slo {
            ref file,
            format,
            ref by,
            ref namespace,
        }) => cli::slo::run(file, format, by.as_deref(), namespace),
        None => cli::serve::run(cli, &runtime),
    };
    // A blocking thread may still run what cannot be stopped (a CEL
    // evaluation past its deadline): the process does not wait for it.
    runtime.shutdown_timeout(EXIT_GRACE);
    done
}

/// How long the process waits, at exit, for blocking work still running.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A path of its own for the exposition: absolute, and none of the others.
fn telemetry_path(p: &str) -> Result<String, String> {
    if !p.starts_with('/') || p.contains(['{', '}', '*']) || mcpmon::output::router::answers(p) {
        return Err(format!(
            "{p:?} must be an absolute path of its own, such as /metrics"
        ));
    }
    Ok(p.to_owned())
}

/// A location is a label value of its own: short, and plain.
fn location(s: &str) -> Result<String, String> {
    let plain = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if s.is_empty() || s.len() > 64 || !plain {
        return Err(format!("{s:?}: 1 to 64 of [A-Za-z0-9_.-]"));
    }
    Ok(s.to_owned())
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    mcpmon::config::parse_duration(s)
}

fn init_logging(format: Format, level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        // rmcp's transport worker logs ERROR each time a connection fails;
        // mcpmon reports that itself, with the server id and a reason, and
        // an unreachable server is an expected state, not an error.
        .or_else(|| {
            EnvFilter::try_new(format!("{level},rmcp=warn,rmcp::transport::worker=off")).ok()
        })
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Every line passes the redactor: no configured secret reaches the log,
    // whichever library wrote the line.
    // Colour only for a terminal: a file, journald or a log shipper gets
    // plain text.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(mcpmon::redact::Redacting(std::io::stderr));
    match format {
        Format::Text => builder.init(),
        Format::Json => builder.json().init(),
    }
}
