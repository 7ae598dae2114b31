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
            "--crash-after-ms" => {
                o.crash_after = Some(Duration::from_millis(
                    value()?.parse().map_err(|e| format!("{e}"))?,
                ))
            }
            "--help" | "-h" => {
                return Err("flags: --name N --transport stdio|http --listen ADDR \
                    --era both|legacy|modern --latency-ms MS --fail-rate 0..1 \
                    --status healthy|degraded|unhealthy --hang --crash-after-ms MS"
                    .into());
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(o)
}

#[derive(Clone)]
struct Demo {
    opts: Arc<Opts>,
    started: Instant,
    requests: Arc<AtomicU64>,
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

#[tokio::main]
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
        tool_router: Demo::tool_router(),
    };
    eprintln!("demo-server {} starting ({})", opts.name, opts.transport);
    let result = match opts.transport.as_str() {
        "stdio" => serve_stdio(demo, opts.hang).await,
        "http" => serve_http(demo, &opts.listen, opts.hang).await,
        other => Err(format!("unknown transport {other}")),
    };
    if let Err(e) = result {
        eprintln!("demo-server: {e}");
        std::process::exit(1);
    }
}

async fn serve_stdio(demo: Demo, hang: bool) -> Result<(), String> {
    if hang {
        // Alive, pipes open, never reads a message.
        std::future::pending::<()>().await;
    }
    let service = demo
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| e.to_string())?;
    service.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

async fn serve_http(demo: Demo, listen: &str, hang: bool) -> Result<(), String> {
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
    let service: StreamableHttpService<Demo, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(demo.clone()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}
