//! The `mcpmon` binary: flags, logging, signals; everything else is the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use mcpmon::config;
use mcpmon::discovery::Shard;
use mcpmon::oneshot::{ProbeOptions, probe};
use mcpmon::output::metrics::{Exposition, Histograms};
use mcpmon::state::verdict::State;

// glibc's allocator keeps what a burst of handshakes freed (per-thread
// arenas, fragmented): 2 000 sessions left twice their live heap resident.
// jemalloc returns dirty pages to the kernel after a few seconds.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "mcpmon",
    version,
    about = "Health monitor for fleets of MCP servers"
)]
struct Cli {
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
    #[arg(long = "log.format", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// Log level or filter (RUST_LOG syntax).
    #[arg(long = "log.level", default_value = "info", global = true)]
    log_level: String,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a fleet file; exits 0 when valid, 1 with every error otherwise.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Check one server once and print what was found; exits 0 only when healthy.
    Probe(ProbeArgs),
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
}

/// `mcpmon probe`'s arguments.
#[derive(clap::Args)]
struct ProbeArgs {
    /// An http(s) URL, or `-- command args…` for a stdio server.
    /// Options may come before or after a URL; after `--`, everything
    /// is the command.
    #[arg(required_unless_present = "from", num_args = 1..)]
    target: Vec<String>,
    /// Probe a server of this client config (Claude Desktop, Cursor, Claude
    /// Code, Windsurf, VS Code, Codex) instead; with `--name`.
    #[arg(long, requires = "name", conflicts_with = "target")]
    from: Option<PathBuf>,
    /// The server's name in the `--from` file.
    #[arg(long, requires = "from")]
    name: Option<String>,
    /// `auto` or a protocol revision to pin.
    #[arg(long, default_value = "auto")]
    protocol: String,
    /// For a URL: `http` (Streamable HTTP) or `sse` (the legacy HTTP+SSE
    /// transport of 2024-11-05).
    #[arg(long, value_enum, default_value_t = UrlTransport::Http)]
    transport: UrlTransport,
    /// Extra HTTP header, `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Environment variable holding a bearer token.
    #[arg(long)]
    bearer_token_env: Option<String>,
    /// Deadline for connecting plus the handshake.
    #[arg(long, default_value = "15s")]
    connect_timeout: String,
    /// Deadline for each liveness probe.
    #[arg(long, default_value = "5s")]
    ping_timeout: String,
    /// Liveness probes to send.
    #[arg(long, default_value_t = 3)]
    pings: u32,
    /// Also call this tool.
    #[arg(long)]
    call: Option<String>,
    /// JSON object of arguments for --call.
    #[arg(long, default_value = "{}")]
    args: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// What a probed URL speaks.
#[derive(Clone, Copy, ValueEnum)]
enum UrlTransport {
    Http,
    Sse,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
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
        Some(Cmd::CheckConfig { ref file }) => Ok(check_config(file)),
        Some(Cmd::Probe(ref args)) => probe_once(args, &runtime),
        Some(Cmd::Import {
            ref files,
            ref format,
        }) => import(files, format),
        None => serve(cli, &runtime),
    };
    // A blocking thread may still run what cannot be stopped (a CEL
    // evaluation past its deadline): the process does not wait for it.
    runtime.shutdown_timeout(EXIT_GRACE);
    done
}

/// How long the process waits, at exit, for blocking work still running.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// `mcpmon probe`: one server, once; exit 0 only when healthy.
fn probe_once(a: &ProbeArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
    let doc = probe_config(a)?;
    let env = |v: &str| std::env::var(v).ok();
    let cfg = config::parse(Path::new("<probe>"), &doc.to_string(), &env)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let spec = cfg
        .servers
        .into_iter()
        .next()
        .context("no server to probe")?;
    mcpmon::redact::set_secrets(spec.secrets());
    let call = match &a.call {
        Some(tool) => {
            let serde_json::Value::Object(arguments) =
                serde_json::from_str(&a.args).context("--args must be a JSON object")?
            else {
                anyhow::bail!("--args must be a JSON object");
            };
            Some((tool.clone(), arguments))
        }
        None => None,
    };
    let options = ProbeOptions {
        pings: a.pings,
        call,
    };
    let report = runtime.block_on(async {
        let http = mcpmon::http_client()?;
        anyhow::Ok(probe(&spec, &http, &options).await)
    })?;
    match a.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print_report(&report),
    }
    Ok(if report.state == State::Healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The service: every listener bound before anything starts (a taken port
/// is an error at start, not a half-served monitor), then run until a
/// signal.
fn serve(cli: Cli, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
    let file = cli
        .config_file
        .as_ref()
        .context("--config.file is required (or use a subcommand; see --help)")?;
    let cfg = config::load(file).map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))?;
    let shard = if cli.shard_index_from_hostname {
        Shard::from_hostname(&hostname()?, cli.shard_count)?
    } else {
        Shard::new(cli.shard_index, cli.shard_count)?
    };
    let web = match &cli.web_config {
        Some(path) => mcpmon::output::web::Web::load(path)?,
        None => mcpmon::output::web::Web::default(),
    }
    .with_limits(cli.allowed_hosts.clone(), cli.write_timeout);
    for w in &cfg.warnings {
        tracing::warn!(warning = %w, "risky configuration");
    }
    let otlp = mcpmon::output::otlp::config::resolve(&cli.otlp, |k| std::env::var(k).ok())?;
    runtime.block_on(async {
        let mut listeners = Vec::new();
        for address in &cli.listen {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding {address}"))?;
            tracing::info!(address = %listener.local_addr()?, tls = web.tls(), "listening");
            listeners.push(listener);
        }
        let listener = listeners.remove(0);
        let options = mcpmon::Options {
            web,
            enable_lifecycle: cli.enable_lifecycle,
            auto_reload: cli.auto_reload.then_some(cli.auto_reload_interval),
            reload: Some(sighup_reloads()?),
            telemetry_path: Some(cli.telemetry_path.clone()),
            extra_listeners: listeners,
            shard,
            handshakes: (cli.handshake_concurrency > 0).then_some(cli.handshake_concurrency),
            otlp,
            exposition: Exposition {
                histograms: cli.histograms,
                detail: cli.metrics_detail,
            },
            owner_abort: None,
        };
        mcpmon::run_with(cfg, listener, shutdown_signal(), options).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// This host's name, as the kernel has it (a Kubernetes pod's name).
fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name for --shard.index-from-hostname")?;
    Ok(name.trim().to_owned())
}

/// Read the file_sd files as mcpmon would and print every problem:
/// (servers found, problems).
fn check_file_sd(cfg: &config::Config) -> (usize, usize) {
    let check = mcpmon::discovery::check_files(cfg);
    for e in &check.problems {
        eprintln!("{e}");
    }
    for w in &check.warnings {
        eprintln!("warning: {w}");
    }
    (check.servers, check.problems.len())
}

fn check_config(file: &Path) -> ExitCode {
    match config::load(file) {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("warning: {w}");
            }
            let now = chrono::Utc::now();
            print!("{}", config::maintenance::describe(&cfg.maintenance, now));
            let (from_files, problems) = check_file_sd(&cfg);
            if problems > 0 {
                return ExitCode::from(1);
            }
            let n = cfg.http_sd.len();
            let endpoints = (n > 0).then(|| format!("; {n} http_sd endpoint(s) not asked"));
            let endpoints = endpoints.unwrap_or_default();
            println!(
                "{}: valid, {} server(s){}{endpoints}",
                file.display(),
                cfg.servers.len(),
                if cfg.file_sd.is_empty() {
                    String::new()
                } else {
                    format!(" and {from_files} from file_sd")
                }
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(1)
        }
    }
}

/// The probe target as a one-server config document (JSON is valid YAML), so
/// it goes through exactly the same validation as a fleet file.
fn probe_config(a: &ProbeArgs) -> anyhow::Result<serde_json::Value> {
    let ProbeArgs {
        target,
        protocol,
        transport,
        headers,
        bearer_token_env,
        connect_timeout,
        ping_timeout,
        from,
        name,
        ..
    } = a;
    let first = target.first().map(String::as_str).unwrap_or_default();
    let mut server = serde_json::json!({
        "id": "probe",
        "protocol": protocol,
        "connect_timeout": connect_timeout,
        "ping_timeout": ping_timeout,
        "ping_interval": ping_timeout,
    });
    if let (Some(file), Some(name)) = (from, name) {
        let entry = client_entry(file, name)?;
        for (k, v) in entry {
            if k != "id" && k != "labels" {
                server[k] = v;
            }
        }
    } else if first.starts_with("http://") || first.starts_with("https://") {
        server["transport"] = match transport {
            UrlTransport::Http => "http",
            UrlTransport::Sse => "sse",
        }
        .into();
        server["url"] = first.into();
        let mut h = serde_json::Map::new();
        for line in headers {
            let (k, v) = line
                .split_once(':')
                .with_context(|| format!("--header {line:?} is not `Name: value`"))?;
            h.insert(k.trim().to_owned(), v.trim().into());
        }
        server["headers"] = h.into();
        if let Some(var) = bearer_token_env {
            server["bearer_token_env"] = var.as_str().into();
        }
    } else {
        let (cmd, args) = target.split_first().context("no command given")?;
        server["transport"] = "stdio".into();
        server["command"] = cmd.as_str().into();
        server["args"] = args.into();
    }
    Ok(serde_json::json!({ "servers": [server] }))
}

/// `mcpmon import`: every file read, then one fleet on stdout; a file
/// that cannot be read is an error naming file:line:column.
fn import(files: &[PathBuf], format: &str) -> anyhow::Result<ExitCode> {
    use mcpmon::config::clients::{self, ClientFormat};
    let format: ClientFormat = format.parse().map_err(|_| {
        anyhow::anyhow!(
            "--format {format:?}: one of auto, claude, cursor, claude-code, windsurf, vscode, codex"
        )
    })?;
    let env = |v: &str| std::env::var(v).ok();
    let home = std::env::var("HOME").unwrap_or_default();
    let mut configs = Vec::with_capacity(files.len());
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let config =
            clients::read(file, &text, format, &env, &home).map_err(|e| anyhow::anyhow!("{e}"))?;
        configs.push((file.clone(), config));
    }
    print!("{}", clients::fleet_yaml(&configs));
    Ok(ExitCode::SUCCESS)
}

/// The entry `name` of the client config `file`, as mcpmon reads it; an
/// error when it is not there or needs what mcpmon cannot supply.
fn client_entry(
    file: &Path,
    name: &str,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    use mcpmon::config::clients::{self, ClientFormat};
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let env = |v: &str| std::env::var(v).ok();
    let home = std::env::var("HOME").unwrap_or_default();
    let config = clients::read(file, &text, ClientFormat::Auto, &env, &home)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    config.runnable(file, name).map_err(anyhow::Error::msg)
}

fn print_report(r: &mcpmon::oneshot::ProbeReport) {
    println!("state:      {} ({})", r.state.as_str(), r.reason.as_str());
    if !r.detail.is_empty() {
        println!("detail:     {}", r.detail);
    }
    if let (Some(era), Some(info)) = (r.era, &r.server_info) {
        println!(
            "server:     {} {} (protocol {}, {:?} era)",
            info.name, info.version, info.protocol_version, era
        );
    }
    if let Some(h) = r.handshake_ms {
        println!("handshake:  {h:.3} ms");
    }
    if !r.ping_ms.is_empty() {
        let list: Vec<String> = r.ping_ms.iter().map(|v| format!("{v:.3}")).collect();
        println!("liveness:   {} ms", list.join(", "));
    }
    for e in &r.ping_errors {
        println!("liveness:   failed: {e}");
    }
    if !r.tools.is_empty() {
        println!("tools:      {}", r.tools.join(", "));
    }
    if let Some(h) = &r.tools_hash {
        println!("tool hash:  {h}");
    }
    for (name, problem) in &r.tools_invalid {
        println!("tool:       {name:?} breaks the spec: {problem}");
    }
    if let Some(h) = &r.health_check {
        let status = match h.status {
            mcpmon::probe::health_check::Reported::Unreadable => {
                "unreadable: no status in any shape mcpmon reads".to_owned()
            }
            s => format!("{s:?}").to_lowercase(),
        };
        println!("health:     {status}");
        for (k, v) in &h.fields {
            println!("            {k} = {v}");
        }
    }
    match &r.call {
        Some(Ok(text)) => println!("call:       ok: {text}"),
        Some(Err(e)) => println!("call:       failed: {e}"),
        None => {}
    }
}

/// A path of its own for the exposition: absolute, and none of the others.
fn telemetry_path(p: &str) -> Result<String, String> {
    let taken = ["/", "/health/fleet", "/-/healthy", "/-/ready", "/-/reload"];
    if !p.starts_with('/')
        || p.contains(['{', '}', '*'])
        || taken.contains(&p)
        || p.starts_with("/health/servers/")
    {
        return Err(format!(
            "{p:?} must be an absolute path of its own, such as /metrics"
        ));
    }
    Ok(p.to_owned())
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    mcpmon::config::parse_duration(s)
}

/// Each SIGHUP asks for a reload.
fn sighup_reloads() -> anyhow::Result<tokio::sync::mpsc::Receiver<mcpmon::ReloadRequest>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the configuration");
            if tx
                .send(mcpmon::ReloadRequest { reply: None })
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Ok(rx)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

fn init_logging(format: LogFormat, level: &str) {
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
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
