//! The floor of the benchmark: the least a Rust program can spend to ping N
//! MCP sessions over loopback HTTP. Raw tokio TCP, one keep-alive HTTP/1.1
//! connection per session, a pre-built ping request per session, answers
//! read by Content-Length with no JSON parsing on the ping path, one task
//! per session on a current-thread runtime. No MCP library.
//!
//! Four more floors put the HTTP libraries on the same scale, with the same
//! pre-built ping and no JSON parsing: `hyper` (one hyper HTTP/1.1
//! connection per session, driven by its own task, as hyper's docs do),
//! `hyper-inline` (the same connection, driven inside the pinging task
//! while a ping is out: what the hand-off to hyper's own task costs),
//! `hyper-pool` (one shared hyper-util pooled client, the one mcpmon's held
//! sessions used before they kept connections per origin) and `reqwest` (one shared reqwest client, which wraps that
//! pool, the stack mcpmon's handshakes use). What they add to `raw` is the price of using
//! a well-kept HTTP library instead of writing bytes to a socket.
//!
//! ```text
//! floor-peer http URL_BASE N INTERVAL_S DURATION_S [raw|hyper|hyper-inline|hyper-pool|reqwest]
//! ```
//!
//! Prints one JSON line in the shape of bench/peers/raw-peer.py.

// CPU time comes from getrusage(2), which has no safe std form.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Session {
    stream: BufReader<TcpStream>,
    ping: Vec<u8>,
    buf: Vec<u8>,
    /// Path and session id, for the library floors.
    path: String,
    id: Option<String>,
}

const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;

/// One request, its status and its body (read by Content-Length).
async fn exchange(
    stream: &mut BufReader<TcpStream>,
    request: &[u8],
    session: &mut Option<String>,
    body: &mut Vec<u8>,
) -> std::io::Result<u16> {
    stream.get_mut().write_all(request).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.trim().eq_ignore_ascii_case("chunked");
            } else if k.eq_ignore_ascii_case("mcp-session-id") {
                *session = Some(v.trim().to_owned());
            }
        }
    }
    if !chunked {
        body.resize(length, 0);
        stream.read_exact(body).await?;
        return Ok(status);
    }
    // An SSE answer (the TypeScript SDK's servers): chunks until the last.
    body.clear();
    loop {
        line.clear();
        stream.read_line(&mut line).await?;
        let size = usize::from_str_radix(line.trim(), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        let start = body.len();
        body.resize(start + size + 2, 0);
        stream.read_exact(&mut body[start..]).await?;
        body.truncate(start + size);
        if size == 0 {
            return Ok(status);
        }
    }
}

fn request(host: &str, path: &str, session: Option<&str>, body: &str) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(s) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        ));
    }
    head.push_str("\r\n");
    head.push_str(body);
    head.into_bytes()
}

/// Open session `i`: at `/mcp/i` of the simulator, or at `base_path` when
/// the URL names one endpoint every session shares (`.../mcp`).
async fn open(host: &str, port: u16, base_path: &str, i: usize) -> std::io::Result<Session> {
    let path = if base_path.ends_with("/mcp") {
        base_path.to_owned()
    } else {
        format!("/mcp/{i}")
    };
    let mut stream = BufReader::new(TcpStream::connect((host, port)).await?);
    stream.get_mut().set_nodelay(true)?;
    let mut session = None;
    let mut body = Vec::new();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"floor","version":"1"}}}"#;
    exchange(
        &mut stream,
        &request(host, &path, None, init),
        &mut session,
        &mut body,
    )
    .await?;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let note = request(host, &path, session.as_deref(), initialized);
    exchange(&mut stream, &note, &mut session, &mut body).await?;
    // The same id every time: the floor does not even format a number.
    let ping = request(host, &path, session.as_deref(), PING);
    Ok(Session {
        stream,
        ping,
        buf: body,
        path,
        id: session,
    })
}

fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (mode, base, n, interval, duration, via) = match args.as_slice() {
        [_, m, b, n, i, d] => (m, b, n, i, d, Via::Raw),
        [_, m, b, n, i, d, v] => (m, b, n, i, d, Via::parse(v)?),
        _ => {
            return Err(
                "usage: floor-peer http URL_BASE N INTERVAL_S DURATION_S [raw|hyper|hyper-pool|reqwest]"
                    .into(),
            );
        }
    };
    if mode != "http" {
        return Err("the floor client speaks HTTP only".into());
    }
    let url = reqwest::Url::parse(base)?;
    let host = url.host_str().ok_or("no host")?.to_owned();
    let port = url.port_or_known_default().ok_or("no port")?;
    let n: usize = n.parse()?;
    let interval = Duration::from_secs_f64(interval.parse()?);
    let duration = Duration::from_secs_f64(duration.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut sessions = Vec::with_capacity(n);
        for i in 0..n {
            sessions.push(open(&host, port, url.path(), i).await?);
        }
        // The library floors take over (hyper) or replace (reqwest) each
        // raw connection. Every floor sends a first ping before the clock
        // starts, so that no pool or connection task is set up on it.
        let http = reqwest::Client::new();
        let pool: std::sync::Arc<Pool> = std::sync::Arc::new(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http(),
        );
        let mut pingers = Vec::with_capacity(n);
        for s in sessions {
            let mut pinger = match via {
                Via::Raw => Pinger::Raw(s),
                Via::Hyper => Pinger::hyper(s, base, false)
                    .await
                    .map_err(|e| e.to_string())?,
                Via::HyperInline => Pinger::hyper(s, base, true)
                    .await
                    .map_err(|e| e.to_string())?,
                Via::Reqwest => {
                    Pinger::reqwest(s, base, http.clone()).map_err(|e| e.to_string())?
                }
                Via::HyperPool => {
                    Pinger::hyper_pool(s, base, pool.clone()).map_err(|e| e.to_string())?
                }
            };
            pinger.ping().await.map_err(|e| e.to_string())?;
            pingers.push(pinger);
        }
        // Told before the clock starts, so a runner measuring this process
        // from outside knows its sessions are open (not a result: results
        // are the JSON line at the end).
        println!("pinging");
        std::io::Write::flush(&mut std::io::stdout())?;
        let cpu0 = cpu_seconds();
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, mut pinger) in pingers.into_iter().enumerate() {
            tasks.spawn(async move {
                let mut rtts = Vec::new();
                let mut failures = 0u64;
                tokio::time::sleep(interval.mul_f64(i as f64 / n as f64)).await;
                let mut next = Instant::now();
                while start.elapsed() < duration {
                    let t0 = Instant::now();
                    match tokio::time::timeout(Duration::from_secs(5), pinger.ping()).await {
                        Ok(Ok(code)) if (200..300).contains(&code) => {
                            rtts.push(t0.elapsed().as_micros() as u64)
                        }
                        _ => failures += 1,
                    }
                    next += interval;
                    tokio::time::sleep_until(next.into()).await;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((rtts, failures))
            });
        }
        let mut rtts = Vec::new();
        let mut failures = 0;
        while let Some(r) = tasks.join_next().await {
            let (r, f) = r?.map_err(|e| e.to_string())?;
            rtts.extend(r);
            failures += f;
        }
        let cpu = cpu_seconds() - cpu0;
        rtts.sort_unstable();
        let q = |x: f64| {
            rtts.get(((x * rtts.len() as f64) as usize).min(rtts.len().saturating_sub(1)))
                .copied()
        };
        println!(
            "{}",
            serde_json::json!({
                "client": via.name(), "cpu_s": cpu, "peak_rss_kib": peak_rss_kib(),
                "pings": rtts.len(), "failures": failures,
                "p50_us": q(0.5), "p99_us": q(0.99),
            })
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

/// Which floor: bytes on a socket, or one of the HTTP libraries.
#[derive(Clone, Copy)]
enum Via {
    Raw,
    Hyper,
    Reqwest,
    HyperPool,
    HyperInline,
}

impl Via {
    fn parse(s: &str) -> Result<Self, Box<dyn std::error::Error>> {
        match s {
            "raw" => Ok(Via::Raw),
            "hyper" => Ok(Via::Hyper),
            "reqwest" => Ok(Via::Reqwest),
            "hyper-pool" => Ok(Via::HyperPool),
            "hyper-inline" => Ok(Via::HyperInline),
            other => Err(format!(
                "unknown floor {other:?}: raw, hyper, hyper-inline, hyper-pool or reqwest"
            )
            .into()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Via::Raw => "floor",
            Via::Hyper => "floor-hyper",
            Via::Reqwest => "floor-reqwest",
            Via::HyperPool => "floor-hyper-pool",
            Via::HyperInline => "floor-hyper-inline",
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A hyper HTTP/1.1 connection over plain TCP.
type Conn = hyper::client::conn::http1::Connection<
    hyper_util::rt::TokioIo<TcpStream>,
    http_body_util::Full<bytes::Bytes>,
>;

/// hyper-util's pooled client over plain TCP.
type Pool = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

/// A session's pings: bytes on its own socket, or through an HTTP library.
/// The request is built from parts made once, the answer's body is read
/// whole and not parsed.
enum Pinger {
    Raw(Session),
    Hyper {
        send: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
        request: hyper::Request<()>,
        body: bytes::Bytes,
        /// Driven by the ping itself when held here (hyper-inline).
        conn: Option<std::pin::Pin<Box<Conn>>>,
    },
    HyperPool {
        http: std::sync::Arc<Pool>,
        request: hyper::Request<()>,
        body: bytes::Bytes,
    },
    Reqwest {
        http: reqwest::Client,
        url: reqwest::Url,
        headers: reqwest::header::HeaderMap,
        body: bytes::Bytes,
    },
}

impl Pinger {
    /// Hand the session's socket (initialized by `open`) to hyper.
    async fn hyper(s: Session, base: &str, inline: bool) -> Result<Self, BoxError> {
        let url = reqwest::Url::parse(base)?;
        let host = url.host_str().ok_or("no host")?.to_owned();
        let port = url.port_or_known_default().ok_or("no port")?;
        // Every answer so far was read whole: nothing is left buffered.
        let stream = s.stream.into_inner();
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let conn = if inline {
            Some(Box::pin(conn))
        } else {
            tokio::spawn(conn);
            None
        };
        let mut request = hyper::Request::post(s.path.as_str())
            .header("host", format!("{host}:{port}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(id) = &s.id {
            request = request.header("mcp-session-id", id.as_str());
        }
        Ok(Pinger::Hyper {
            send,
            request: request.body(())?,
            body: bytes::Bytes::from_static(PING.as_bytes()),
            conn,
        })
    }

    /// The session's route through hyper-util's pool (the one reqwest
    /// wraps); the raw socket closes.
    fn hyper_pool(s: Session, base: &str, http: std::sync::Arc<Pool>) -> Result<Self, BoxError> {
        let url = reqwest::Url::parse(base)?.join(&s.path)?;
        let mut request = hyper::Request::post(url.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(id) = &s.id {
            request = request.header("mcp-session-id", id.as_str());
        }
        Ok(Pinger::HyperPool {
            http,
            request: request.body(())?,
            body: bytes::Bytes::from_static(PING.as_bytes()),
        })
    }

    /// The session's route through reqwest's pool; the raw socket closes.
    fn reqwest(s: Session, base: &str, http: reqwest::Client) -> Result<Self, BoxError> {
        let url = reqwest::Url::parse(base)?.join(&s.path)?;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("content-type", "application/json".parse()?);
        headers.insert("accept", "application/json, text/event-stream".parse()?);
        headers.insert("mcp-protocol-version", "2025-11-25".parse()?);
        if let Some(id) = &s.id {
            headers.insert("mcp-session-id", id.parse()?);
        }
        Ok(Pinger::Reqwest {
            http,
            url,
            headers,
            body: bytes::Bytes::from_static(PING.as_bytes()),
        })
    }

    async fn ping(&mut self) -> Result<u16, BoxError> {
        use http_body_util::BodyExt;
        match self {
            Pinger::Raw(s) => {
                let mut no_new_id = None;
                Ok(exchange(&mut s.stream, &s.ping, &mut no_new_id, &mut s.buf).await?)
            }
            Pinger::Hyper {
                send,
                request,
                body,
                conn,
            } => {
                let exchange = async {
                    send.ready().await?;
                    let mut r = hyper::Request::new(http_body_util::Full::new(body.clone()));
                    *r.method_mut() = request.method().clone();
                    *r.uri_mut() = request.uri().clone();
                    *r.headers_mut() = request.headers().clone();
                    let response = send.send_request(r).await?;
                    let status = response.status().as_u16();
                    response.into_body().collect().await?;
                    Ok::<_, BoxError>(status)
                };
                if let Some(conn) = conn {
                    // The connection runs only while a ping is out.
                    tokio::pin!(exchange);
                    return std::future::poll_fn(|cx| {
                        use std::future::Future;
                        if let std::task::Poll::Ready(r) = exchange.as_mut().poll(cx) {
                            return std::task::Poll::Ready(r);
                        }
                        match conn.as_mut().poll(cx) {
                            std::task::Poll::Ready(r) => std::task::Poll::Ready(Err(format!(
                                "connection ended: {r:?}"
                            )
                            .into())),
                            std::task::Poll::Pending => std::task::Poll::Pending,
                        }
                    })
                    .await;
                }
                exchange.await
            }
            Pinger::HyperPool {
                http,
                request,
                body,
            } => {
                let mut r = hyper::Request::new(http_body_util::Full::new(body.clone()));
                *r.method_mut() = request.method().clone();
                *r.uri_mut() = request.uri().clone();
                *r.headers_mut() = request.headers().clone();
                let response = http.request(r).await?;
                let status = response.status().as_u16();
                response.into_body().collect().await?;
                Ok(status)
            }
            Pinger::Reqwest {
                http,
                url,
                headers,
                body,
            } => {
                let response = http
                    .post(url.clone())
                    .headers(headers.clone())
                    .body(body.clone())
                    .send()
                    .await?;
                let status = response.status().as_u16();
                response.bytes().await?;
                Ok(status)
            }
        }
    }
}
