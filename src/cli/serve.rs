//! The service itself: flags to options, listeners bound, signals wired,
//! then the library's run until SIGTERM or SIGINT.

use std::process::ExitCode;

use anyhow::Context;
use mcpmon::config;
use mcpmon::discovery::Shard;
use mcpmon::output::metrics::Exposition;

/// The service: every listener bound before anything starts (a taken port
/// is an error at start, not a half-served monitor), then run until a
/// signal.
pub fn run(cli: crate::Cli, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
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
    let history = (!cli.history_disabled).then(|| mcpmon::output::history::HistoryConfig {
        path: cli.storage_path.clone().unwrap_or_else(|| beside(file)),
        retention: cli.storage_retention,
        flush_every: cli.storage_flush,
        prometheus: cli.history_prometheus.clone(),
    });
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
            location: cli.location.clone(),
            history,
            badges_disabled: cli.badges_disabled,
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

/// The history's default file: beside the config, named after it.
fn beside(config: &std::path::Path) -> std::path::PathBuf {
    let stem = config
        .file_stem()
        .map_or_else(|| "mcpmon".into(), |s| s.to_string_lossy().into_owned());
    config.with_file_name(format!("{stem}.history.db"))
}
