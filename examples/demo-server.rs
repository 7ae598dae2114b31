//! A demo MCP server for trying mcpmon and for its tests, over stdio or
//! Streamable HTTP, in either protocol era.
//!
//! It implements the `health_check` convention (`status`, `timestamp`,
//! `uptime_seconds`, `request_count`, `memory_mb`) and a long-running
//! `build_report` tool that sends progress notifications. Flags make it
//! misbehave on purpose: add latency, fail a share of calls, report a chosen
//! status, hang, or crash.
//!
//! ```text
//! demo-server --name billing                      # stdio
//! demo-server --transport http --listen 127.0.0.1:0   # prints "listening on http://…/mcp"
//! ```

use std::borrow::Cow;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ProtocolVersion,
    RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router,
};

#[derive(Clone, Debug)]
struct Opts {
    name: String,
    transport: String,
    listen: String,
    era: String,
    latency: Duration,
    fail_rate: f64,
    status: String,
    hang: bool,
    hang_after: Option<Duration>,
    crash_after: Option<Duration>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        name: "demo".into(),
        transport: "stdio".into(),
        listen: "127.0.0.1:0".into(),
        era: "both".into(),
        latency: Duration::ZERO,
        fail_rate: 0.0,
        status: "healthy".into(),
        hang: false,
        hang_after: None,
        crash_after: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--name" => o.name = value()?,
            "--transport" => o.transport = value()?,
            "--listen" => o.listen = value()?,
            "--era" => o.era = value()?,
            "--latency-ms" => {
                o.latency = Duration::from_millis(value()?.parse().map_err(|e| format!("{e}"))?)
            }
            "--fail-rate" => o.fail_rate = value()?.parse().map_err(|e| format!("{e}"))?,
            "--status" => o.status = value()?,
            "--hang" => o.hang = true,
            "--hang-after-ms" => {
                o.hang_after = Some(Duration::from_millis(
                    value()?.parse().map_err(|e| format!("{e}"))?,
                ))
            }
            "--crash-after-ms" => {
                o.crash_after = Some(Duration::from_millis(
                    value()?.parse().map_err(|e| format!("{e}"))?,
                ))
            }
            "--help" | "-h" => {
                return Err("flags: --name N --transport stdio|http --listen ADDR \
                    --era both|legacy|modern --latency-ms MS --fail-rate 0..1 \
                    --status healthy|degraded|unhealthy --hang --hang-after-ms MS --crash-after-ms MS"
                    .into());
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(o)
}

/// What the server itself observed, reported by `health_check` so tests can
/// assert on it (executions and cancellations per tool).
#[derive(Default)]
struct Observed {
    build_report_runs: AtomicU64,
    crunch_runs: AtomicU64,
    crunch_cancelled: AtomicU64,
    sleep_runs: AtomicU64,
    sleep_cancelled: AtomicU64,
}

#[derive(Clone)]
struct Demo {
    opts: Arc<Opts>,
    started: Instant,
    requests: Arc<AtomicU64>,
    observed: Arc<Observed>,
    #[allow(dead_code)] // read by the tool_handler macro
    tool_router: ToolRouter<Demo>,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
struct ReportArgs {
    /// Number of steps.
    #[serde(default = "default_steps")]
    steps: u32,
    /// Milliseconds per step.
    #[serde(default = "default_step_ms")]
    step_ms: u64,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
struct CrunchArgs {
    /// Total CPU time to burn, in milliseconds.
    total_ms: u64,
    /// Burn this long without yielding, then send progress and yield.
    chunk_ms: u64,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
struct SleepArgs {
    /// How long to sleep, in milliseconds.
    ms: u64,
    /// Send progress this often (0: never).
    #[serde(default)]
    progress_every_ms: u64,
}

fn default_steps() -> u32 {
    5
}
fn default_step_ms() -> u64 {
    200
}

impl Demo {
    /// Deterministic failure share: every k-th call fails where k = 1 / rate.
    fn should_fail(&self, n: u64) -> bool {
        let rate = self.opts.fail_rate;
        if rate <= 0.0 {
            return false;
        }
        if rate >= 1.0 {
            return true;
        }
        let every = (1.0 / rate).round().max(1.0) as u64;
        n.is_multiple_of(every)
    }
}

#[tool_router]
impl Demo {
    #[tool(description = "Report this server's health: status, uptime, request count, memory.")]
    async fn health_check(&self) -> Result<CallToolResult, ErrorData> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        tokio::time::sleep(self.opts.latency).await;
        if self.should_fail(n) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "health check failed (injected)",
            )]));
        }
        let body = serde_json::json!({
            "status": self.opts.status,
            "timestamp": chrono_like_now(),
            "uptime_seconds": self.started.elapsed().as_secs(),
            "request_count": n,
            "memory_mb": memory_mb(),
            "build_report_runs": self.observed.build_report_runs.load(Ordering::Relaxed),
            "crunch_runs": self.observed.crunch_runs.load(Ordering::Relaxed),
            "crunch_cancelled": self.observed.crunch_cancelled.load(Ordering::Relaxed),
            "sleep_runs": self.observed.sleep_runs.load(Ordering::Relaxed),
            "sleep_cancelled": self.observed.sleep_cancelled.load(Ordering::Relaxed),
        });
        Ok(CallToolResult::structured(body))
    }

    #[tool(description = "Build a report in steps, sending a progress notification per step.")]
    async fn build_report(
        &self,
        Parameters(args): Parameters<ReportArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.observed
            .build_report_runs
            .fetch_add(1, Ordering::Relaxed);
        let token = meta.get_progress_token();
        for step in 1..=args.steps {
            tokio::time::sleep(Duration::from_millis(args.step_ms)).await;
            if let Some(token) = &token {
                let _ = client
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), f64::from(step))
                            .with_total(f64::from(args.steps))
                            .with_message(format!("step {step} of {}", args.steps)),
                    )
                    .await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "report built in {} steps",
            args.steps
        ))]))
    }

    #[tool(
        description = "Burn CPU on the server's only thread, in blocking chunks, with progress between chunks."
    )]
    async fn crunch(
        &self,
        Parameters(args): Parameters<CrunchArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
        ct: tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        self.observed.crunch_runs.fetch_add(1, Ordering::Relaxed);
        let token = meta.get_progress_token();
        let start = Instant::now();
        let mut step = 0u32;
        while start.elapsed() < Duration::from_millis(args.total_ms) {
            if ct.is_cancelled() {
                self.observed
                    .crunch_cancelled
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ErrorData::internal_error("cancelled", None));
            }
            // Blocks the (single-threaded) runtime: pings queue behind it.
            let chunk = Instant::now();
            while chunk.elapsed() < Duration::from_millis(args.chunk_ms) {
                std::hint::black_box((0..1000u64).sum::<u64>());
            }
            step += 1;
            if let Some(token) = &token {
                let _ = client
                    .notify_progress(ProgressNotificationParam::new(
                        token.clone(),
                        f64::from(step),
                    ))
                    .await;
            }
            tokio::task::yield_now().await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "crunched in {step} chunks"
        ))]))
    }

    #[tool(
        description = "Sleep without using CPU, optionally sending progress; counts cancellations."
    )]
    async fn sleep(
        &self,
        Parameters(args): Parameters<SleepArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
        ct: tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        self.observed.sleep_runs.fetch_add(1, Ordering::Relaxed);
        let token = meta.get_progress_token();
        let start = Instant::now();
        let total = Duration::from_millis(args.ms);
        let mut step = 0u32;
        while start.elapsed() < total {
            let left = total.saturating_sub(start.elapsed());
            let nap = if args.progress_every_ms > 0 {
                left.min(Duration::from_millis(args.progress_every_ms))
            } else {
                left
            };
            tokio::select! {
                _ = ct.cancelled() => {
                    self.observed.sleep_cancelled.fetch_add(1, Ordering::Relaxed);
                    return Err(ErrorData::internal_error("cancelled", None));
                }
                _ = tokio::time::sleep(nap) => {}
            }
            step += 1;
            if args.progress_every_ms > 0
                && let Some(token) = &token
            {
                let _ = client
                    .notify_progress(ProgressNotificationParam::new(
                        token.clone(),
                        f64::from(step),
                    ))
                    .await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("slept")]))
    }
}

#[tool_handler]
impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new(
                format!("demo-{}", self.opts.name),
                env!("CARGO_PKG_VERSION"),
            ),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.opts.era.as_str() {
            "legacy" => Cow::Borrowed(&[
                ProtocolVersion::V_2025_11_25,
                ProtocolVersion::V_2025_06_18,
                ProtocolVersion::V_2025_03_26,
                ProtocolVersion::V_2024_11_05,
            ]),
            "modern" => Cow::Borrowed(&[ProtocolVersion::V_2026_07_28]),
            _ => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    async fn ping(&self, _ctx: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        tokio::time::sleep(self.opts.latency).await;
        Ok(())
    }
}

fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{secs}")
}

fn memory_mb() -> f64 {
    let pages: f64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    (pages * 4096.0 / 1_048_576.0 * 10.0).round() / 10.0
}

// One thread, like the Node and Python servers it stands in for: a blocking
// tool really does block everything else, pings included.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("demo-server: {e}");
            std::process::exit(2);
        }
    };
    if let Some(after) = opts.crash_after {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            eprintln!("demo-server: crashing on purpose");
            std::process::exit(3);
        });
    }
    let demo = Demo {
        opts: Arc::new(opts.clone()),
        started: Instant::now(),
        requests: Arc::new(AtomicU64::new(0)),
        observed: Arc::new(Observed::default()),
        tool_router: Demo::tool_router(),
    };
    let hang_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(after) = opts.hang_after {
        let flag = hang_flag.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            eprintln!("demo-server: hanging on purpose");
            flag.store(true, Ordering::SeqCst);
        });
    }
    eprintln!("demo-server {} starting ({})", opts.name, opts.transport);
    let result = match opts.transport.as_str() {
        "stdio" => serve_stdio(demo, opts.hang, hang_flag).await,
        "http" => serve_http(demo, &opts.listen, opts.hang, hang_flag).await,
        other => Err(format!("unknown transport {other}")),
    };
    if let Err(e) = result {
        eprintln!("demo-server: {e}");
        std::process::exit(1);
    }
}

/// stdin that stops delivering bytes once the flag is set: the process stays
/// alive and idle with its pipes open, and never answers again.
struct FreezableStdin {
    inner: tokio::io::Stdin,
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl tokio::io::AsyncRead for FreezableStdin {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.frozen.load(Ordering::SeqCst) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

async fn serve_stdio(
    demo: Demo,
    hang: bool,
    frozen: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), String> {
    if hang {
        // Alive, pipes open, never reads a message.
        std::future::pending::<()>().await;
    }
    let stdin = FreezableStdin {
        inner: tokio::io::stdin(),
        frozen,
    };
    let service = demo
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| e.to_string())?;
    service.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

async fn serve_http(
    demo: Demo,
    listen: &str,
    hang: bool,
    frozen: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), String> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("bind {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}/mcp");
    let _ = std::io::stdout().flush();
    if hang {
        // Accept connections and never answer.
        let mut held = Vec::new();
        loop {
            if let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        }
    }
    // On loopback keep rmcp's DNS-rebinding guard; in a container network
    // the Host header is the service name, so accept any.
    let mut config = StreamableHttpServerConfig::default();
    if !addr.ip().is_loopback() {
        config = config.disable_allowed_hosts();
    }
    let service: StreamableHttpService<Demo, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(demo.clone()), Default::default(), config);
    // Once frozen, every request is accepted and never answered.
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let frozen = frozen.clone();
                    async move {
                        if frozen.load(Ordering::SeqCst) {
                            std::future::pending::<()>().await;
                        }
                        next.run(req).await
                    }
                },
            ));
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}
