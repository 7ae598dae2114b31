//! `mcpmon probe`: one server, once, through the same validation and probe
//! layer as the service.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use mcpmon::config;
use mcpmon::oneshot::{ProbeOptions, probe};
use mcpmon::state::verdict::State;

use super::Format;

/// `mcpmon probe`'s arguments.
#[derive(clap::Args)]
pub struct ProbeArgs {
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
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// What a probed URL speaks.
#[derive(Clone, Copy, ValueEnum)]
pub enum UrlTransport {
    Http,
    Sse,
}

/// `mcpmon probe`: one server, once; exit 0 only when healthy.
pub fn run(a: &ProbeArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
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
        let http = mcpmon::transport::Http::shared()?;
        anyhow::Ok(probe(&spec, &http, &options).await)
    })?;
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => print_report(&report),
    }
    Ok(if report.state == State::Healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

/// The report as lines for a person.
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
