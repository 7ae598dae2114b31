//! Servers the tests start themselves: the demo server over HTTP and
//! third-party HTTP servers, waited for until they listen.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::*;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long a spawned server may take to listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(60);

/// The tests' HTTP client. mcpmon closes keep-alive connections idle for
/// its 5 s header deadline; dropping idle connections sooner on this side
/// keeps a request from racing that close.
pub fn test_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

/// A server process the test starts itself (HTTP servers).
pub struct Spawned {
    pub child: tokio::process::Child,
    pub url: String,
    pub port: u16,
}

impl Spawned {
    pub async fn kill(&mut self) {
        if let Some(pid) = self.child.id() {
            // Kill the whole group: wrappers such as npx must not survive.
            killpg(pid as i32, libc::SIGKILL);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            killpg(pid as i32, libc::SIGKILL);
        }
    }
}

/// Start the demo server over HTTP; `port` 0 picks one (read from its stdout).
pub async fn demo_http(args: &[&str], port: u16) -> Spawned {
    let mut cmd = tokio::process::Command::new(demo_server());
    cmd.args([
        "--transport",
        "http",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .args(args)
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .process_group(0)
    .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn demo-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("demo-server prints its address within 10s")
        .expect("read")
        .expect("a line");
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port in url");
    Spawned { child, url, port }
}

/// A port that was free a moment ago, for third-party servers that cannot
/// report the port they bound.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A port on 127.0.0.1 that refuses every connection for as long as this
/// lives: bound, never listening. A port that was merely free a moment ago
/// (see [`free_port`]) can be handed to a test running beside this one, and
/// a server meant to be dead then answers; a bound port is handed to no one
/// (no `SO_REUSEADDR` here, so not even to a listener that sets it), nor
/// used as the source port of a connection to itself.
pub struct ClosedPort(tokio::net::TcpSocket);

impl ClosedPort {
    /// Bind one.
    pub fn bind() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        ClosedPort(socket)
    }

    /// Its number.
    pub fn port(&self) -> u16 {
        self.0.local_addr().expect("addr").port()
    }

    /// `http://127.0.0.1:PORT/mcp`: an MCP endpoint that is not there.
    pub fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port())
    }
}

/// Start a third-party HTTP server and wait until its port accepts connections.
pub async fn third_party_http(
    program: &Path,
    args: &[&str],
    envs: &[(&str, String)],
    port: u16,
) -> Spawned {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    // A readiness bound, not a speed claim: a Python server's imports on a
    // 2-core machine busy with the rest of the suite took over 20 s once.
    let what = format!("{} listening on {port}", program.display());
    super::eventually(&what, LISTEN_WITHIN, async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    Spawned {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
        port,
    }
}

/// HAProxy's runtime API: `show stat`, as CSV.
pub async fn haproxy_stat(socket: &std::path::Path) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .expect("stats socket");
    s.write_all(b"show stat\n").await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}

/// One counter of one HAProxy frontend (`stot`, `h2_headers_rcvd`,
/// `h1_total_streams`...), from `show stat`.
pub async fn haproxy_frontend_stat(socket: &std::path::Path, frontend: &str, column: &str) -> u64 {
    let csv = haproxy_stat(socket).await;
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    let at = (header.iter().position(|h| *h == column))
        .unwrap_or_else(|| panic!("no {column} column: {csv}"));
    csv.lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|row| row.first() == Some(&frontend) && row.get(1) == Some(&"FRONTEND"))
        .and_then(|row| row.get(at)?.parse().ok())
        .unwrap_or_else(|| panic!("no {column} for frontend {frontend}: {csv}"))
}
